"""Casts between every pair of dtypes (bool, every integer, f16, bf16, f32, f64 and both
f8 formats) on both backends against numpy.

One kernel per source dtype converts to every target and widens each result losslessly
for storage: integers and bools to i64 (u64 keeps its bits), floats to f64. Float
sources going to an integer hold values that the target can represent after truncation
(elsewhere the conversion is not defined); every other pair sees the full range,
infinities and NaN included."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
from parity_helpers import ALL_DTYPES, EMULATED_FLOATS, random_ints, rounded, storage_dtype

N = 300
BLOCK = 128
SIGNED_RANGE, UNSIGNED_RANGE = 111.0, 223.0  # stay in range after rounding to any float format

# which input each target reads: 0 the general values, 1 the signed range, 2 the unsigned one
_INPUT_FOR = {"i": 1, "u": 2}


@tc.kernel
def cast_kernel(xg, xs, xu, ints, floats, n, SRC: tc.constexpr, TARGETS: tc.constexpr,
                BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    g = tc.load(xg.ptr + offs, mask=m, other=0).astype(SRC)
    s = tc.load(xs.ptr + offs, mask=m, other=0).astype(SRC)
    u = tc.load(xu.ptr + offs, mask=m, other=0).astype(SRC)
    for i in tc.static_range(len(TARGETS)):
        target, which, is_float = TARGETS[i]
        if which == 1:
            v = s.astype(target)
        elif which == 2:
            v = u.astype(target)
        else:
            v = g.astype(target)
        if is_float:
            tc.store(floats.ptr + i * n + offs, v.astype(tc.float64), mask=m)
        else:
            tc.store(ints.ptr + i * n + offs, v.astype(tc.int64), mask=m)


def _source_values(rng, src):
    """(general, signed-range, unsigned-range) inputs in the source's storage dtype."""
    if src.is_bool:
        g = rng.random(N) < 0.5
        return g, g, g
    if src.is_int:
        g = np.concatenate([random_ints(rng, src, N // 2), random_ints(rng, src, N - N // 2, -300, 300)])
        return g, g, g
    g = rng.standard_normal(N) * np.exp2(rng.integers(-6, 18, N))
    g[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5]
    s = rng.uniform(-SIGNED_RANGE, SIGNED_RANGE, N)
    u = rng.uniform(0.0, UNSIGNED_RANGE, N)
    return tuple(rounded(v, src).astype(storage_dtype(src)) for v in (g, s, u))


def _expected(v, src, dst):
    """numpy's conversion of source values `v` (exact in float64, or integers) to `dst`."""
    if dst.is_bool:
        return (v != 0).astype(np.int64)
    if dst.is_int:
        if src.is_float or src.is_bool:
            v = np.trunc(np.asarray(v, np.float64)) if src.is_float else v
        return np.asarray(v).astype(dst.np).astype(np.int64)
    if src.is_int and src.bits == 64:
        # exact integers, then one rounding (numpy's int64 -> float16 goes through float64,
        # which double-rounds harmlessly at these widths)
        return rounded(v.astype(np.float64), dst).astype(np.float64)
    return rounded(np.asarray(v, np.float64), dst).astype(np.float64)


# overflow to inf (int -> f16, f64 -> f32, ...) is a defined result here
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_cast_to_every_dtype(backend, src):
    rng = np.random.default_rng(3 + ALL_DTYPES.index(src))
    xg, xs, xu = _source_values(rng, src)
    targets = tuple((dst, 0 if src.is_int or src.is_bool else _INPUT_FOR.get(dst.kind, 0) if dst.is_int else 0,
                     dst.is_float) for dst in ALL_DTYPES)
    ints = np.zeros((len(targets), N), np.int64)
    floats = np.zeros((len(targets), N), np.float64)
    backend.launch(cast_kernel, (tc.cdiv(N, BLOCK),), xg, xs, xu, ints, floats, N,
                   SRC=src, TARGETS=targets, BLOCK=BLOCK)
    for i, (dst, which, is_float) in enumerate(targets):
        v = (xg, xs, xu)[which]
        want = _expected(v, src, dst)
        got = floats[i] if is_float else ints[i]
        np.testing.assert_array_equal(got, want, err_msg=f"cast {src} -> {dst}")
