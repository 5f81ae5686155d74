"""The any-rank transpose kernels' global accesses, compiled as a launch specializes them: for
contiguous f16 arrays whose rows are 16-byte aligned, `transpose_batched_kernel` (dim1 the last
dimension) and `swap_copy_kernel` (rows that move whole) load and store 16-byte vectors on
both sides; the PTX of the signatures the entry point launches (EXTRA_SIGNATURES) too."""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

from tilec.stdlib_kernels._common import as_array
from tilec.target import Target

T = importlib.import_module("tilec.stdlib_kernels.transpose")  # the package attribute is the function
H100 = Target.from_arch("sm_90a")


def _accesses(ptx: str, op: str):
    return set(re.findall(rf"{op}\.global(?:\.v[24])?\.b\d+", ptx))


def _launch_ptx(shape, d0, d1, dtype=np.float16):
    """The PTX of the launch `transpose(x, d0, d1)` makes for a contiguous x of `shape`: the
    plan's kernel compiled for the views it passes (the launcher's specialization of them)."""
    x = np.zeros(shape, dtype)
    out_shape = list(shape)
    out_shape[d0], out_shape[d1] = out_shape[d1], out_shape[d0]
    out = np.zeros(out_shape, dtype)
    a, o = as_array(x, "x"), as_array(out, "out")
    (xs, xst), (os_, ost) = T.nd_views(a, o, d0, d1)
    (ln,) = T.plan_nd(a, o, d0, d1, H100)
    args = [np.lib.stride_tricks.as_strided(arr, s, [e * arr.itemsize for e in st])
            for arr, s, st in ((x, xs, xst), (out, os_, ost))]
    c = ln.kernel.compile(*args, arch="sm_90a", num_warps=ln.num_warps, fast_math=True, **ln.consts)
    return ln.name, c.asm["ptx"]


@pytest.mark.parametrize("shape,d0,d1,kernel", [
    ((2, 6, 64, 136), 2, 3, "transpose_batched_kernel"),   # (B, H, S, D) -> (B, H, D, S)
    ((2, 64, 6, 128), 1, 2, "swap_copy_kernel"),           # (B, S, H, D) -> (B, H, S, D)
    ((3, 40, 24), 0, 1, "swap_copy_kernel")])
def test_contiguous_f16_moves_16_byte_vectors(shape, d0, d1, kernel):
    name, ptx = _launch_ptx(shape, d0, d1)
    assert name == kernel
    assert "ld.global.v4.b32" in _accesses(ptx, "ld") and "st.global.v4.b32" in _accesses(ptx, "st")


def test_rows_off_16_bytes_stay_correct_and_narrow():
    # (3, 37, 70) swapped (1, 2): out's rows are 37 f16 (74 bytes) apart, so no vector store is
    # aligned; the kernel falls back to narrower accesses (the interpreter checks the values)
    name, ptx = _launch_ptx((3, 37, 70), 1, 2)
    assert name == "transpose_batched_kernel" and not any(".v4" in s for s in _accesses(ptx, "st"))
    x = (np.arange(3 * 37 * 70) % 251).astype(np.float16).reshape(3, 37, 70)
    np.testing.assert_array_equal(T.transpose(x, 1, 2), x.transpose(0, 2, 1))


@pytest.mark.parametrize("kernel,sig", [(k, s) for k, s in T.EXTRA_SIGNATURES if "stride_div" in s])
def test_aligned_signatures_have_vector_stores(kernel, sig):
    c = getattr(T, kernel).compile(sig, arch="sm_90a", num_warps=8, fast_math=True)
    assert "st.global.v4.b32" in _accesses(c.asm["ptx"], "st")
    assert "ld.global.v4.b32" in _accesses(c.asm["ptx"], "ld")
