"""sum/max along a dimension other than the last: the column-strip kernels' grids stay within
CUDA's limits (2**31 - 1 programs along axis 0, 65535 along axes 1 and 2) whatever the shape
(`reductions.slab_grid`), planned (`reductions.plan` on descriptions) for shapes too large to run, and run on the interpreter
with the strips on grid axis 0 (axis 1 limited to 3 programs) against numpy."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.options import GRID_LIMITS
from tilec.stdlib_kernels._common import HOST_TARGET
from tilec.stdlib_kernels.launches import spec

from launch_spy import huge, limit_grid_axis1

RD = importlib.import_module("tilec.stdlib_kernels.reductions")


def assert_covers_once(grid, strips_first, outer, strips, splits):
    """Each axis of `grid` within the limits, and its programs numbered as `reductions.slab_strip`
    does hold every (slab, strip) once, each with `splits` splits."""
    assert all(0 < n <= most for n, most in zip(grid, GRID_LIMITS)), grid
    assert grid[2] == splits
    a, b = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    o, j = (b, a) if strips_first else (a, b)
    np.testing.assert_array_equal(np.sort((o * strips + j).ravel()), np.arange(outer * strips))


@pytest.mark.parametrize("outer, strips, splits", [
    (1, 156250, 1),       # sum over dim 0 of 4 x 40M f32: 256-column strips
    (3, 78125, 1),        # over dim 1 of 3 x 5 x 40M f16: 512-column strips
    (100_000, 7, 1),      # many slabs (axis 0 as before)
    (1, 65535, 1),        # the most strips axis 1 holds
    (1, 65536, 1),
    (3, 5, 300),          # splits on axis 2
    (70_000, 1, 1),
])
def test_slab_grid_covers_every_slab_strip_and_split_once(outer, strips, splits):
    assert_covers_once(*RD.slab_grid(outer, strips, splits), outer, strips, splits)


def test_slab_grid_keeps_the_tuned_order_where_it_fits_and_rejects_what_no_grid_holds():
    assert RD.slab_grid(16, 1024, 2) == ((16, 1024, 2), False)    # slabs fastest, as the kernels were tuned
    assert RD.slab_grid(2, 65536) == ((65536, 2, 1), True)
    assert RD.slab_grid(2**31 - 1, 1) == ((2**31 - 1, 1, 1), False)
    for outer, strips in [(2**31, 1), (65536, 65536)]:
        with pytest.raises(ValueError, match="column strips x 1 splits do not fit a grid"):
            RD.slab_grid(outer, strips)


@pytest.mark.parametrize("shape, dim, dtype, window", [
    ((4, 40_000_000), 0, np.float32, 0),        # 156250 strips of 256 columns
    ((4, 40_000_001), 0, np.float32, 8),        # rows off 32-byte sectors: windows, then the partials
    ((3, 5, 40_000_000), 1, np.float16, 0),     # 3 slabs of 78125 strips
    ((100_000, 3, 1024), 1, np.float32, 0),     # 100000 slabs
    ((100_000, 3, 700), 1, np.float32, 8),
])
def test_huge_shapes_plan_grids_within_the_limits(shape, dim, dtype, window):
    d = tc.dtypes.from_numpy(np.dtype(dtype))
    plan = RD.plan(spec(shape, d), spec(shape[:dim] + shape[dim + 1:], d), dim, is_max=False, target=HOST_TARGET)
    launched = [(ln.name, ln.grid, ln.consts) for ln in plan]
    outer, inner = int(np.prod(shape[:dim])), int(np.prod(shape[dim + 1:]))
    assert [name for name, _, _ in launched] == (["reduce_inner_window_kernel", "reduce_inner_kernel"] if window
                                                 else ["reduce_inner_kernel"])
    for name, grid, c in launched:
        before = c["WINDOW"] - 1 if name == "reduce_inner_window_kernel" else 0  # windows start before the row
        strips = -(-(inner + before) // c["BLOCK_I"])
        assert_covers_once(grid, c["STRIPS_FIRST"], outer, strips, grid[2])
    # (each shape has more strips or slabs than grid axis 1 holds)
    assert max(max(grid[:2]) for _, grid, _ in launched) > GRID_LIMITS[1]


def test_more_slabs_than_any_grid_holds_is_a_clear_error():
    # (the plan raises before any launch: nothing to stub)
    with pytest.raises(ValueError, match=r"2147483648 slabs x 1 column strips x 1 splits do not fit a grid"):
        sk.sum(huge((2**31, 2, 1), np.float32), 1, out=huge((2**31, 1), np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("axis1", [GRID_LIMITS[1], 3])   # 3: the strips on axis 0, as past 65535 of them
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape, dim", [
    ((3, 50, 1600), 1),     # column tiles: 7 strips of f32, 4 of bf16 per slab
    ((3, 300, 1600), 1),    # R split among programs (grid axis 2), then the partials
    ((3, 41, 1601), 1),     # rows off 32-byte sectors: windows
    ((37, 1600), 0),        # one slab
])
def test_sum_and_max_over_slabs_of_several_strips_match_numpy(monkeypatch, rowwise, axis1, dtype, shape, dim):
    limit_grid_axis1(monkeypatch, axis1)   # (the interpreter rejects a grid past it too)
    v = 3 * np.random.default_rng(sum(shape)).standard_normal(shape)
    v.reshape(-1)[-1] = 90.0                # the array's last element: read apart by the window kernel
    x = rowwise.host(v, dtype)
    x64 = rowwise.f64(x)
    rowwise.close(sk.amax(x, dim), x64.max(dim), dtype)
    rowwise.close(sk.sum(x, dim), x64.sum(dim), dtype, scale=shape[dim] ** 0.5 * 3)
