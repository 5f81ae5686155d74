"""Sums and products of bool and integer tiles narrower than 32 bits accumulate in, and
return, i32 (u32 for unsigned types), as numpy widens integer sums and Triton sums i8/i16
in i32 (issue 51: rows of thirteen 100s summed in i8 gave 20). Checked on both backends
against numpy in the documented accumulation type, along every axis, with values that
wrap in the narrow type; i32 and wider keep their type."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
from tilec import dtypes as dt

ROWS, COLS = 13, 29
BM, BN = 16, 32
NARROW = [np.int8, np.int16, np.uint8, np.uint16, np.bool_]


def _acc(d: np.dtype) -> np.dtype:
    d = np.dtype(d)
    if d == np.bool_ or (d.kind == "i" and d.itemsize < 4):
        return np.dtype(np.int32)
    if d.kind == "u" and d.itemsize < 4:
        return np.dtype(np.uint32)
    return d


@tc.kernel
def sums_kernel(x, rows, cols, total, prods, csum0, csum1, rsum1, cprod1, ACC: tc.constexpr,
                BM: tc.constexpr, BN: tc.constexpr):
    t = tc.load(x, index=(0, 0), shape=(BM, BN), padding=0)
    ones = tc.load(x, index=(0, 0), shape=(BM, BN), padding=1)
    r1 = tc.sum(t, axis=1)
    tc.static_assert(r1.dtype == ACC, "sums accumulate in and return the accumulation dtype")
    tc.store(rows, index=(0,), tile=r1)
    tc.store(cols, index=(0,), tile=t.sum(0))
    s = tc.sum(t)
    tc.static_assert(s.dtype == ACC, "a sum over every element too")
    tc.store(total, index=(0,), tile=tc.full((1,), s, ACC))
    tc.store(prods, index=(0,), tile=tc.prod(ones, axis=1))
    tc.store(csum0, index=(0, 0), tile=tc.cumsum(t, axis=0))
    tc.store(csum1, index=(0, 0), tile=tc.cumsum(t, axis=1))
    tc.store(rsum1, index=(0, 0), tile=tc.cumsum(t, axis=1, reverse=True))
    tc.store(cprod1, index=(0, 0), tile=t.cumprod(1))


def _data(rng, d: np.dtype) -> np.ndarray:
    d = np.dtype(d)
    if d == np.bool_:
        return rng.random((ROWS, COLS)) < 0.8
    info = np.iinfo(d)
    # mostly near the top of the range (every row and column sum wraps in the narrow type),
    # some small factors so that products stay interesting after wrapping in 32 bits
    big = rng.integers(info.max // 2, info.max, size=(ROWS, COLS), endpoint=True)
    small = rng.integers(-3 if d.kind == "i" else 0, 4, size=(ROWS, COLS), endpoint=True)
    return np.where(rng.random((ROWS, COLS)) < 0.7, big, small).astype(d)


@pytest.mark.parametrize("np_dtype", NARROW + [np.int32, np.uint32, np.int64], ids=lambda t: np.dtype(t).name)
def test_integer_sums_widen(backend, np_dtype):
    rng = np.random.default_rng(np.dtype(np_dtype).itemsize * 7 + (np.dtype(np_dtype).kind == "u"))
    x = _data(rng, np_dtype)
    acc = _acc(np_dtype)
    rows, prods = np.zeros(BM, acc), np.zeros(BM, acc)
    cols, total = np.zeros(BN, acc), np.zeros(1, acc)
    csum0, csum1, rsum1, cprod1 = (np.zeros((ROWS, COLS), acc) for _ in range(4))
    backend.launch(sums_kernel, (1,), x, rows, cols, total, prods, csum0, csum1, rsum1, cprod1,
                   ACC=dt.from_numpy(acc), BM=BM, BN=BN)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(rows[:ROWS], x.sum(axis=1, dtype=acc))
        np.testing.assert_array_equal(cols[:COLS], x.sum(axis=0, dtype=acc))
        np.testing.assert_array_equal(total, [x.sum(dtype=acc)])
        np.testing.assert_array_equal(prods[:ROWS], x.prod(axis=1, dtype=acc))
        np.testing.assert_array_equal(csum0, np.cumsum(x, axis=0, dtype=acc))
        np.testing.assert_array_equal(csum1, np.cumsum(x, axis=1, dtype=acc))
        np.testing.assert_array_equal(rsum1, np.flip(np.cumsum(np.flip(x, 1), axis=1, dtype=acc), 1))
        np.testing.assert_array_equal(cprod1, np.cumprod(x, axis=1, dtype=acc))
    if np.dtype(np_dtype).itemsize < 4 and np_dtype is not np.bool_:
        # the point of widening: these sums do not fit the input's own type
        assert (x.sum(axis=1, dtype=np.int64) > np.iinfo(np_dtype).max).any()


@tc.kernel
def repro_kernel(x, out, BN: tc.constexpr):
    row = tc.program_id(0)
    tc.store(out, index=(row,), tile=tc.full((1,), tc.sum(tc.load(x, index=(row, 0), shape=(1, BN))), tc.int32))


def test_issue_repro_rows_of_thirteen_100s(backend):
    x = np.full((4, 13), 100, np.int8)
    out = np.zeros(4, np.int32)
    backend.launch(repro_kernel, (4,), x, out, BN=16)
    np.testing.assert_array_equal(out, 1300)


@tc.kernel
def scalar_sum_kernel(x, out):
    v = tc.max(tc.load(x, index=(0,), shape=(1,)))  # an i8 scalar
    w = tc.sum(v) + tc.prod(v)                      # a scalar is its own sum, widened too
    tc.static_assert(w.dtype == tc.int32, "the sum of an i8 scalar is i32")
    tc.store(out, index=(0,), tile=tc.full((1,), w, tc.int32))


def test_scalar_sum_widens(backend):
    x = np.array([100], np.int8)
    out = np.zeros(1, np.int32)
    backend.launch(scalar_sum_kernel, (1,), x, out)
    np.testing.assert_array_equal(out, [200])
