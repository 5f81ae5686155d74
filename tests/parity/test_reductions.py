"""Reductions (sum, max, min, prod, argmax, argmin, a custom combiner) and scans (cumsum,
cumprod, forward and reverse) over every axis of 1-D and 2-D tiles, on both backends
against numpy. The data (13 x 29 inside a 16 x 32 tile, with the padding each reduction
needs) is drawn from a few values so that argmax/argmin see ties; integer sums and
products accumulate in i32 / u32 for narrower types (and wrap there), i64 and u64 in their
own type. Integer results are stored widened to i64, so the stored value shows the result's
own type."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import tilec as tc

ROWS, COLS = 13, 29
BM, BN = 16, 32
DTYPES = [np.float32, np.float16, np.int32, np.int8, np.uint16]
REDUCTIONS = ("sum", "max", "min", "prod", "max_abs")  # then argmax, argmin in `idx`


@tc.func
def max_abs(a, b):
    return tc.maximum(abs(a), abs(b))


@tc.func
def put(ptr, r, L: tc.constexpr, AXIS: tc.constexpr, DT: tc.constexpr):
    """Store a reduction's result: a scalar (AXIS "all") or a vector of L elements, converted
    to the memory's dtype (i64 for integer inputs: every result type converts exactly)."""
    if AXIS == "all":
        tc.store(ptr + tc.arange(0, 1), tc.full((1,), r, DT))
    else:
        tc.store(ptr + tc.arange(0, L), r.astype(DT))


@tc.func
def reduce_tiles(t0, t1, tlo, thi, vals, idx, L: tc.constexpr, AXIS: tc.constexpr, NUMEL: tc.constexpr):
    if AXIS == "all":
        put(vals.ptr, tc.sum(t0), L, AXIS, vals.dtype)
        put(vals.ptr + L, tc.max(tlo), L, AXIS, vals.dtype)
        put(vals.ptr + 2 * L, tc.min(thi), L, AXIS, vals.dtype)
        put(vals.ptr + 3 * L, tc.prod(t1), L, AXIS, vals.dtype)
        put(vals.ptr + 4 * L, tc.reduce(tc.reshape(t0, (NUMEL,)), 0, max_abs), L, AXIS, vals.dtype)
        put(idx.ptr, tc.argmax(tc.reshape(tlo, (NUMEL,)), 0), L, AXIS, idx.dtype)
        put(idx.ptr + L, tc.argmin(tc.reshape(thi, (NUMEL,)), 0), L, AXIS, idx.dtype)
    else:
        put(vals.ptr, t0.sum(AXIS), L, AXIS, vals.dtype)
        put(vals.ptr + L, tlo.max(axis=AXIS), L, AXIS, vals.dtype)
        put(vals.ptr + 2 * L, tc.min(thi, axis=AXIS), L, AXIS, vals.dtype)
        put(vals.ptr + 3 * L, tc.prod(t1, axis=AXIS), L, AXIS, vals.dtype)
        put(vals.ptr + 4 * L, tc.reduce(t0, AXIS, max_abs), L, AXIS, vals.dtype)
        put(idx.ptr, tc.argmax(tlo, axis=AXIS), L, AXIS, idx.dtype)
        put(idx.ptr + L, tc.argmin(thi, axis=AXIS), L, AXIS, idx.dtype)


@tc.kernel
def reduce_2d_kernel(x, vals, idx, LO: tc.constexpr, HI: tc.constexpr, AXIS: tc.constexpr,
                     BM: tc.constexpr, BN: tc.constexpr):
    t0 = tc.load(x, index=(0, 0), shape=(BM, BN), padding=0)
    t1 = tc.load(x, index=(0, 0), shape=(BM, BN), padding=1)
    tlo = tc.load(x, index=(0, 0), shape=(BM, BN), padding=LO)
    thi = tc.load(x, index=(0, 0), shape=(BM, BN), padding=HI)
    if AXIS == 0:
        reduce_tiles(t0, t1, tlo, thi, vals, idx, BN, AXIS, BM * BN)
    elif AXIS == 1:
        reduce_tiles(t0, t1, tlo, thi, vals, idx, BM, AXIS, BM * BN)
    else:
        reduce_tiles(t0, t1, tlo, thi, vals, idx, 1, AXIS, BM * BN)


@tc.kernel
def reduce_1d_kernel(x, vals, idx, LO: tc.constexpr, HI: tc.constexpr, AXIS: tc.constexpr,
                     BN: tc.constexpr):
    t0 = tc.load(x, index=(0,), shape=(BN,), padding=0)
    t1 = tc.load(x, index=(0,), shape=(BN,), padding=1)
    tlo = tc.load(x, index=(0,), shape=(BN,), padding=LO)
    thi = tc.load(x, index=(0,), shape=(BN,), padding=HI)
    reduce_tiles(t0, t1, tlo, thi, vals, idx, 1, AXIS, BN)


def _data(rng, np_dtype, shape):
    if np.dtype(np_dtype).kind == "f":
        # Powers of two, as many halves as doubles: every order of the product is exact and far
        # from overflow (with 3.0 in the pool, 512 factors came near f32's limit, where the
        # reference's order overflowed and the GPU's tree did not).
        return rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], size=shape).astype(np_dtype)
    info = np.iinfo(np_dtype)
    pool = rng.integers(info.min, info.max, size=5, endpoint=True, dtype=np_dtype)
    return rng.choice(np.concatenate([pool, np.array([0, 1], np_dtype)]), size=shape)


def _bounds(np_dtype):
    if np.dtype(np_dtype).kind == "f":
        return float("-inf"), float("inf")
    info = np.iinfo(np_dtype)
    return int(info.min), int(info.max)


def _accumulation(dtype):
    """The accumulation type the language documents: f32 for f16, i32 / u32 for narrower
    integers, the type itself otherwise."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype.kind in "iu" and dtype.itemsize < 4:
        return np.dtype(np.int32 if dtype.kind == "i" else np.uint32)
    return dtype


def _storage(np_dtype):
    """What the kernel stores results in: i64 for integers (every result converts exactly)."""
    return np.dtype(np.int64) if np.dtype(np_dtype).kind in "iu" else np.dtype(np_dtype)


def _reference(x, axis):
    """numpy in the accumulation type the language documents (wrapping there for ints)."""
    acc = _accumulation(x.dtype)
    ax = None if axis == "all" else axis
    with np.errstate(over="ignore"):
        vals = [np.sum(x, axis=ax, dtype=acc), np.max(x, axis=ax), np.min(x, axis=ax),
                np.prod(x, axis=ax, dtype=acc),
                np.max(np.abs(x.astype(np.float64) if x.dtype.kind == "f" else x), axis=ax)]
    if x.dtype.kind in "iu":
        vals[4] = np.max(np.abs(x), axis=ax)  # abs wraps: abs(MIN) is MIN, as in the language
        if x.dtype.kind == "i":
            vals[4] = np.max(np.where(x == np.iinfo(x.dtype).min, x, np.abs(x)), axis=ax)
    idx = [np.argmax(x, axis=ax), np.argmin(x, axis=ax)]
    return [np.atleast_1d(v) for v in vals], [np.atleast_1d(i) for i in idx]


def _check(vals, idx, x, axis, n_valid):
    want_vals, want_idx = _reference(x, axis)
    for i, name in enumerate(REDUCTIONS):
        with np.errstate(over="ignore"):  # an f16 product that overflows is inf on both sides
            got, want = vals[i, :n_valid], want_vals[i].astype(vals.dtype)
        if name == "prod" and x.dtype.kind == "f":
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3 if
                                       x.dtype == np.float16 else 1e-6, err_msg=f"{name} axis={axis}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{name} axis={axis}")
    for i, name in enumerate(("argmax", "argmin")):
        np.testing.assert_array_equal(idx[i, :n_valid], want_idx[i], err_msg=f"{name} axis={axis}")


@pytest.mark.parametrize("np_dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axis", [0, 1, "all"])
def test_reductions_2d(backend, np_dtype, axis):
    # a seed fixed across processes (hash() of a str is not)
    rng = np.random.default_rng(zlib.crc32(f"{np.dtype(np_dtype).name}-{axis}".encode()))
    x = _data(rng, np_dtype, (ROWS, COLS))
    if axis == "all":  # the flat argmax of a (16, 32) tile counts padded columns: use a full tile
        x = _data(rng, np_dtype, (BM, BN))
    n_valid = {0: COLS, 1: ROWS, "all": 1}[axis]
    width = {0: BN, 1: BM, "all": 1}[axis]
    vals = np.zeros((len(REDUCTIONS), width), _storage(np_dtype))
    idx = np.zeros((2, width), np.int32)
    lo, hi = _bounds(np_dtype)
    backend.launch(reduce_2d_kernel, (1,), x, vals, idx, LO=lo, HI=hi, AXIS=axis, BM=BM, BN=BN)
    _check(vals, idx, x, axis, n_valid)


@pytest.mark.parametrize("np_dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axis", [0, "all"])
def test_reductions_1d(backend, np_dtype, axis):
    rng = np.random.default_rng(7)
    x = _data(rng, np_dtype, (COLS,))
    vals = np.zeros((len(REDUCTIONS), 1), _storage(np_dtype))
    idx = np.zeros((2, 1), np.int32)
    lo, hi = _bounds(np_dtype)
    backend.launch(reduce_1d_kernel, (1,), x, vals, idx, LO=lo, HI=hi, AXIS=axis, BN=BN)
    _check(vals, idx, x, "all", 1)


@tc.kernel
def nan_reduce_kernel(x, out, idx, BN: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BN,), padding=0.0)
    tc.store(out.ptr + tc.arange(0, 1), tc.full((1,), tc.max(t), tc.float32))
    tc.store(out.ptr + 1 + tc.arange(0, 1), tc.full((1,), tc.min(t), tc.float32))
    tc.store(idx.ptr + tc.arange(0, 1), tc.full((1,), tc.argmax(t, 0), tc.int32))
    tc.store(idx.ptr + 1 + tc.arange(0, 1), tc.full((1,), tc.argmin(t, 0), tc.int32))


def test_nan_propagates_through_max_min_and_argmax(backend):
    x = np.array([1.0, 5.0, -3.0, np.nan, 7.0, np.nan, -9.0], np.float32)
    out = np.zeros(2, np.float32)
    idx = np.zeros(2, np.int32)
    backend.launch(nan_reduce_kernel, (1,), x, out, idx, BN=8)
    assert np.isnan(out).all(), out
    np.testing.assert_array_equal(idx, [3, 3])


@tc.kernel
def nan_axis_kernel(x, vals, idx, flat, AXIS: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr):
    t = tc.load(x, index=(0, 0), shape=(BM, BN), padding=0.0)
    L = BN if AXIS == 0 else BM
    tc.store(vals.ptr + tc.arange(0, L), tc.max(t, axis=AXIS))
    tc.store(vals.ptr + L + tc.arange(0, L), tc.min(t, axis=AXIS))
    tc.store(idx.ptr + tc.arange(0, L), tc.argmax(t, axis=AXIS))
    tc.store(idx.ptr + L + tc.arange(0, L), tc.argmin(t, axis=AXIS))
    # axis=None: indices into the flattened tile (BN per row, padding included), not the array
    tc.store(flat.ptr + tc.arange(0, 2), tc.where(tc.arange(0, 2) == 0, tc.argmax(t), tc.argmin(t)))


@pytest.mark.parametrize("axis", [0, 1])
def test_nan_along_an_axis_and_flat_indices_of_the_tile(backend, axis):
    """NaN propagates through max/min along an axis and argmax/argmin give its first index
    there; argmax(axis=None) counts in the (16, 32) tile, not in the (13, 29) array."""
    rng = np.random.default_rng(11 + axis)
    x = rng.choice([-2.0, -1.0, 0.5, 1.0, 3.0], size=(ROWS, COLS)).astype(np.float32)
    x[2, 7] = x[2, 20] = x[9, 3] = np.nan            # rows 2 and 9, columns 3, 7 and 20
    L = BN if axis == 0 else BM
    vals, idx, flat = np.zeros(2 * L, np.float32), np.zeros(2 * L, np.int32), np.zeros(2, np.int32)
    backend.launch(nan_axis_kernel, (1,), x, vals, idx, flat, AXIS=axis, BM=BM, BN=BN)
    n = COLS if axis == 0 else ROWS
    np.testing.assert_array_equal(vals[:n], np.max(x, axis=axis))  # NaN where numpy has NaN
    np.testing.assert_array_equal(vals[L:L + n], np.min(x, axis=axis))
    np.testing.assert_array_equal(idx[:n], np.argmax(x, axis=axis))
    np.testing.assert_array_equal(idx[L:L + n], np.argmin(x, axis=axis))
    np.testing.assert_array_equal(flat, [2 * BN + 7, 2 * BN + 7])  # the first NaN, row 2 of the tile
    assert 2 * BN + 7 != np.argmax(x)  # numpy's index into the array differs (2 * 29 + 7)


@tc.kernel
def int_argmax_kernel(x, out, BM: tc.constexpr, BN: tc.constexpr):
    t = tc.load(x, index=(0, 0), shape=(BM, BN), padding=-128)
    tc.store(out.ptr + tc.arange(0, 2), tc.where(tc.arange(0, 2) == 0, tc.argmax(t), tc.argmin(t)))


def test_flat_argmax_indexes_the_tile(backend):
    x = np.zeros((ROWS, COLS), np.int8)
    x[5, 11], x[12, 28] = 9, -9
    out = np.zeros(2, np.int32)
    backend.launch(int_argmax_kernel, (1,), x, out, BM=BM, BN=BN)
    # the padding (-128) is the tile's minimum: argmin finds the first padded element, (0, 29)
    np.testing.assert_array_equal(out, [5 * BN + 11, COLS])


# ----------------------------------------------------------------------------- scans
SCANS = ("cumsum", "cumsum_rev", "cumprod", "cumprod_rev")


@tc.kernel
def scan_2d_kernel(x, out, AXIS: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr):
    t0 = tc.load(x, index=(0, 0), shape=(BM, BN), padding=0)
    t1 = tc.load(x, index=(0, 0), shape=(BM, BN), padding=1)
    D = out.dtype
    tc.store(out, index=(0, 0, 0), tile=tc.reshape(tc.cumsum(t0, axis=AXIS).astype(D), (1, BM, BN)))
    tc.store(out, index=(1, 0, 0), tile=tc.reshape(tc.cumsum(t0, axis=AXIS, reverse=True).astype(D), (1, BM, BN)))
    tc.store(out, index=(2, 0, 0), tile=tc.reshape(tc.cumprod(t1, axis=AXIS).astype(D), (1, BM, BN)))
    tc.store(out, index=(3, 0, 0), tile=tc.reshape(tc.cumprod(t1, axis=AXIS, reverse=True).astype(D), (1, BM, BN)))


@tc.kernel
def scan_1d_kernel(x, out, BN: tc.constexpr):
    t0 = tc.load(x, index=(0,), shape=(BN,), padding=0)
    t1 = tc.load(x, index=(0,), shape=(BN,), padding=1)
    D = out.dtype
    tc.store(out, index=(0, 0), tile=tc.cumsum(t0, 0).astype(D)[None, :])
    tc.store(out, index=(1, 0), tile=tc.cumsum(t0, 0, reverse=True).astype(D)[None, :])
    tc.store(out, index=(2, 0), tile=tc.cumprod(t1, 0).astype(D)[None, :])
    tc.store(out, index=(3, 0), tile=tc.cumprod(t1, 0, reverse=True).astype(D)[None, :])


def _scan_reference(x, axis):
    acc = _accumulation(x.dtype)
    flip = lambda a: np.flip(a, axis)  # noqa: E731
    with np.errstate(over="ignore"):
        return [np.cumsum(x, axis, dtype=acc), flip(np.cumsum(flip(x), axis, dtype=acc)),
                np.cumprod(x, axis, dtype=acc), flip(np.cumprod(flip(x), axis, dtype=acc))]


def _check_scans(out, x, axis):
    for i, (got, want) in enumerate(zip(out, _scan_reference(x, axis))):
        want = want.astype(out.dtype)
        if x.dtype.kind == "f" and "prod" in SCANS[i]:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=2e-3 if x.dtype == np.float16 else 1e-6, err_msg=SCANS[i])
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{SCANS[i]} axis={axis}")


@pytest.mark.parametrize("np_dtype", [np.float32, np.int32, np.int8], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axis", [0, 1])
def test_scans_2d(backend, np_dtype, axis):
    rng = np.random.default_rng(axis + 3)
    x = _data(rng, np_dtype, (ROWS, COLS))
    if np.dtype(np_dtype).kind == "f":  # products of 29 factors stay finite and exact in f32
        x = rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], size=(ROWS, COLS)).astype(np_dtype)
    out = np.zeros((len(SCANS), ROWS, COLS), _storage(np_dtype))
    backend.launch(scan_2d_kernel, (1,), x, out, AXIS=axis, BM=BM, BN=BN)
    # reverse scans run over the padded tile: padding 0 / 1 leaves the valid part unchanged
    _check_scans(out, x, axis)


@pytest.mark.parametrize("np_dtype", [np.float32, np.float16, np.uint8], ids=lambda t: np.dtype(t).name)
def test_scans_1d(backend, np_dtype):
    rng = np.random.default_rng(9)
    x = _data(rng, np_dtype, (COLS,))
    if np.dtype(np_dtype).kind == "f":
        x = rng.choice([-1.0, -0.5, 0.5, 1.0, 2.0], size=COLS).astype(np_dtype)
    out = np.zeros((len(SCANS), COLS), _storage(np_dtype))
    backend.launch(scan_1d_kernel, (1,), x, out, BN=BN)
    _check_scans(out, x, 0)
