"""Masks that change inside a 16-byte group on the GPU (marker gpu): whole-group loads
select per element and whole-group stores never write an element the mask leaves out
(the PTX is checked on the CPU, tests/codegen/test_group_masks.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc

from group_mask_kernels import interval_copy, ragged_copy, window_rows

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [1, 7, 1001, 4099])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.int16])
def test_ragged_end(gpu, dtype, n):
    block = 256
    grid = -(-n // block)
    rng = np.random.default_rng(n)
    x = (rng.integers(-20, 20, n)).astype(dtype)
    y = tc.from_numpy(np.full(grid * block + 64, -5, dtype))
    seen = tc.from_numpy(np.zeros(grid * block, dtype))
    ragged_copy[(grid,)](tc.from_numpy(x), y, seen, n, BLOCK=block, num_warps=2)
    yh = y.to_numpy()
    np.testing.assert_array_equal(yh[:n], x * 2 + 1)
    assert (yh[n:] == -5).all(), "a store past the mask"
    sh = seen.to_numpy()
    np.testing.assert_array_equal(sh[:n], x)
    assert (sh[n:] == 7).all(), "a masked-off lane kept memory's value instead of `other`"


@pytest.mark.parametrize("cols", [1, 9, 1003, 4097])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
def test_unaligned_rows_in_windows(gpu, dtype, cols):
    rows = 7
    window = 16 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(cols)
    x = rng.integers(-9, 9, (rows, cols)).astype(dtype)
    # y (x's strides, 16 bytes into a longer buffer): what lies before and after it stays
    buf = tc.from_numpy(np.full(rows * cols + 2 * window, 100, dtype))
    isz = x.itemsize
    y = tc.DeviceArray(buf.ptr + window * isz, (rows, cols), (cols * isz, isz), buf.dtype, buf.device, owner=buf)
    sums = tc.from_numpy(np.zeros(rows, np.float32))
    window_rows[(rows,)](tc.from_numpy(x), y, sums, WINDOW=window, BLOCK=256, num_warps=2)
    np.testing.assert_allclose(sums.to_numpy(), x.astype(np.float64).sum(1))
    out = buf.to_numpy()
    np.testing.assert_array_equal(out[window:window + rows * cols].reshape(rows, cols), (x * 3).astype(dtype))
    assert (out[:window] == 100).all() and (out[window + rows * cols:] == 100).all(), "a store outside the rows"


@pytest.mark.parametrize("lo,hi", [(16, 1008), (0, 512), (48, 64)])
def test_open_and_closed_bounds_on_group_boundaries(gpu, lo, hi):
    # (lo, hi] with both multiples of 16 (so specialized): the mask flips one element past
    # a group's start, which the elements lo + 1.. and hi + 1.. must see
    n = 1024
    x = np.arange(n, dtype=np.float32)
    y = tc.from_numpy(np.full(n, -5, np.float32))
    interval_copy[(n // 256,)](tc.from_numpy(x), y, lo, hi, BLOCK=256, num_warps=2)
    want = np.full(n, -5, np.float32)
    want[lo + 1:hi + 1] = x[lo + 1:hi + 1]
    np.testing.assert_array_equal(y.to_numpy(), want)
