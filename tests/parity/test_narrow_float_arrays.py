"""Arrays of ml_dtypes' bfloat16, float8_e4m3fn and float8_e5m2 in and out of a kernel on
both backends: view tiles, pointer gathers and scatters, and a strided view, each loaded,
computed on in f32 and stored back in the array's own type, against ml_dtypes' rounding
(round to nearest even; bf16 and e5m2 overflow to inf, e4m3 to NaN). The interpreter used
to reject e5m2 arrays (issue 51: "data type '<f1' not understood")."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilec as tc

TYPES = [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
SCALE, SHIFT = 1.5, 0.25
BM, BN = 8, 16


def _reference(x) -> np.ndarray:
    """What the kernels compute: f32 arithmetic, one rounding to the array's type."""
    f = x.astype(np.float32)
    with np.errstate(over="ignore"):
        return (f * np.float32(SCALE) + np.float32(SHIFT)).astype(x.dtype)


def _values(d, shape) -> np.ndarray:
    rng = np.random.default_rng(np.dtype(d).itemsize * 11 + len(shape))
    top = float(ml_dtypes.finfo(d).max)
    v = rng.standard_normal(shape) * 8
    flat = v.reshape(-1)
    # the type's edges: its largest value (x 1.5 overflows), a value just under it, tiny ones, zeros
    flat[:6] = [top, -top, top / 2, float(ml_dtypes.finfo(d).smallest_normal), 0.0, -0.0]
    return v.astype(d)


def _assert_same(got, want):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@tc.kernel
def view_kernel(x, out, SCALE: tc.constexpr, SHIFT: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr):
    i, j = tc.program_id(0), tc.program_id(1)
    t = tc.load(x, index=(i, j), shape=(BM, BN)).astype(tc.float32)
    tc.store(out, index=(i, j), tile=(t * SCALE + SHIFT).astype(out.dtype))


@pytest.mark.parametrize("d", TYPES, ids=lambda d: np.dtype(d).name)
def test_view_tiles(backend, d):
    x = _values(d, (19, 37))
    out = np.zeros_like(x)
    backend.launch(view_kernel, (tc.cdiv(19, BM), tc.cdiv(37, BN)), x, out, SCALE=SCALE, SHIFT=SHIFT, BM=BM, BN=BN)
    _assert_same(out, _reference(x))


@tc.kernel
def gather_kernel(x, idx, out, n, SCALE: tc.constexpr, SHIFT: tc.constexpr, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    j = tc.load(idx.ptr + offs, mask=m, other=0)
    t = tc.load(x.ptr + j, mask=m, other=0.0).astype(tc.float32)
    tc.store(out.ptr + (n - 1 - offs), (t * SCALE + SHIFT).astype(out.dtype), mask=m)


@pytest.mark.parametrize("d", TYPES, ids=lambda d: np.dtype(d).name)
def test_pointer_gather_and_scatter(backend, d):
    x = _values(d, (101,))
    idx = np.random.default_rng(5).integers(0, 101, size=150).astype(np.int32)
    out = np.zeros(150, d)
    backend.launch(gather_kernel, (tc.cdiv(150, 64),), x, idx, out, 150, SCALE=SCALE, SHIFT=SHIFT, BLOCK=64)
    _assert_same(out, _reference(x[idx])[::-1])


@pytest.mark.parametrize("d", TYPES, ids=lambda d: np.dtype(d).name)
def test_strided_views(d):
    """Interpreter only: negative and non-unit strides in and out (its buffers span the
    array's memory, whatever the dtype)."""
    base = _values(d, (24, 40))
    x = base[::-3, 1::2]                    # (8, 20), a negative row stride
    out_base = np.zeros((40, 16), d)
    out = out_base.T[:, ::2][:8]            # (8, 20): rows 0, 2, ..., 38 of out_base, its first 8 columns
    with tc.interpret():
        view_kernel[(1, 2)](x, out, SCALE=SCALE, SHIFT=SHIFT, BM=BM, BN=BN)
    _assert_same(out, _reference(x))
    untouched = np.concatenate([out_base[1::2].ravel(), out_base[:, 8:].ravel()]).astype(np.float32)
    assert not untouched.any()
