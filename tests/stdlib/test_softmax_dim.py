"""softmax / log_softmax along a dimension other than the last (softmax_dim.py), on the CPU
interpreter against float64 numpy references: each path (one tile per strip, looped strips,
split strips), masked columns, strides, out= and argument errors."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec.stdlib_kernels as sk
from tilec.options import GRID_LIMITS
from tilec.stdlib_kernels import reductions, softmax_dim

from launch_spy import huge, limit_grid_axis1, plan_grids, spy_launches

softmax_mod = importlib.import_module("tilec.stdlib_kernels.softmax")   # (sk.softmax is the op)

DIM_SIZES = [1, 2, 7, 31, 150, 513, 1025, 5000]   # one tile up to 512-1024 rows, looped past it
OTHER_SIZES = [1, 3, 5, 17, 33]


def ref(x, dim, log=False):
    m = x.max(dim, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(x - m)
        s = e.sum(dim, keepdims=True)
        return x - m - np.log(s) if log else e / s


@st.composite
def shapes_and_dims(draw):
    """2 to 4 dimensions, one of them (not the last) the softmax dimension."""
    ndim = draw(st.integers(2, 4))
    dim = draw(st.integers(0, ndim - 2))
    shape = [draw(st.sampled_from(OTHER_SIZES)) for _ in range(ndim)]
    shape[dim] = draw(st.sampled_from(DIM_SIZES))
    if np.prod(shape) > 60000:   # the interpreter's time
        shape[-1] = 1
    negative = draw(st.booleans())
    return tuple(shape), dim - ndim if negative else dim


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(case=shapes_and_dims(), dtype=st.sampled_from(["f32", "f16", "bf16"]), scale=st.sampled_from([1.0, 300.0]),
       log=st.booleans(), seed=st.integers(0, 2**16))
def test_softmax_along_a_dim_matches_numpy(rowwise, case, dtype, scale, log, seed):
    shape, dim = case
    x = rowwise.host(scale * np.random.default_rng(seed).standard_normal(shape), dtype)
    got = (sk.log_softmax if log else sk.softmax)(x, dim=dim)
    assert type(got) is type(x)
    rowwise.close(got, ref(rowwise.f64(x), dim, log), dtype, scale=scale if log else 1.0)


def _kernels(monkeypatch):
    return spy_launches(monkeypatch, [softmax_dim], lambda k, cluster, c: (k.name, c.get("SPLIT")))


@pytest.mark.slow
@pytest.mark.parametrize("shape,dim,whole,want", [
    ((4, 300, 70), 1, False, [("softmax_dim_tile_kernel", None)]),             # 300 rows: one tile
    ((3000, 300), 0, True, [("softmax_dim_loop_kernel", False)]),                   # looped strips (as if enough of them)
    ((3000, 300), 0, False, [("softmax_dim_stats_kernel", None), ("softmax_dim_loop_kernel", True)]),  # 2 strips: split
    ((20000, 5), 0, False, [("softmax_dim_stats_kernel", None), ("softmax_dim_loop_kernel", True)]),   # one strip
])
def test_each_path_is_taken_and_correct(monkeypatch, shape, dim, whole, want):
    if whole:   # (1024 strips of f32 would be slow on the interpreter)
        monkeypatch.setattr(softmax_dim, "split_count", lambda strips, n_tiles, itemsize: 1)
    seen = _kernels(monkeypatch)
    x = (4 * np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    got = sk.softmax(x, dim=dim)
    assert seen == want
    np.testing.assert_allclose(got, ref(x.astype(np.float64), dim), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("r", [100, 20000])   # one tile; split strips, whole splits of -inf
def test_masked_columns_follow_torch(log, r):
    x = np.random.default_rng(2).standard_normal((r, 3)).astype(np.float32)
    x[:, 0] = -np.inf                           # a column of only -inf: NaN, as torch
    x[: r - 5, 1] = -np.inf                     # masked but for its last 5 rows
    got = (sk.log_softmax if log else sk.softmax)(x, dim=0)
    assert np.isnan(got[:, 0]).all()
    np.testing.assert_allclose(got[:, 1:], ref(x[:, 1:].astype(np.float64), 0, log), rtol=2e-5, atol=1e-7)


def test_strided_inputs_out_and_in_place():
    base = np.random.default_rng(3).standard_normal((6, 40, 50)).astype(np.float32)
    x = base[::2, :, 5:45]                      # strided slabs and rows
    want = ref(x.astype(np.float64), 1)
    out = np.empty_like(x)
    assert sk.softmax(x, dim=1, out=out) is out
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=1e-7)
    t = base[0].T                               # (50, 40), strides (1, 50): columns of stride 50
    np.testing.assert_allclose(sk.log_softmax(t, dim=0), ref(t.astype(np.float64), 0, True), rtol=2e-5, atol=1e-6)
    y = x.copy()
    sk.softmax(y, dim=-2, out=y)
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-7)


def test_empty_and_argument_errors():
    assert sk.softmax(np.zeros((0, 4), np.float32), dim=0).shape == (0, 4)
    assert sk.softmax(np.zeros((3, 0, 4), np.float32), dim=1).shape == (3, 0, 4)
    with pytest.raises(IndexError, match="out of range"):
        sk.softmax(np.zeros((4, 8), np.float32), dim=-3)
    with pytest.raises(ValueError, match="cannot be flattened"):
        sk.softmax(np.zeros((3, 4, 8, 2), np.float32).transpose(0, 2, 1, 3), dim=0)
    with pytest.raises(ValueError, match=r"out has shape \(8, 4\), expected \(4, 8\)"):
        sk.softmax(np.zeros((4, 8), np.float32), dim=0, out=np.zeros((8, 4), np.float32))


@pytest.mark.parametrize("r,inner,outer,itemsize,want", [
    (150, 65536, 16, 4, (True, 256, 64, 8, 1)),   # a 16384-element tile, 64 elements per thread
    (150, 65536, 16, 2, (True, 256, 32, 4, 1)),   # 2-byte types: 8192
    (7, 65536, 256, 2, (True, 8, 512, 2, 1)),     # 1 KB rows
    (7, 4096, 16, 4, (True, 8, 64, 1, 1)),        # 1 KB rows would make 256 programs: halved twice
    (150, 33, 3, 4, (True, 256, 8, 1, 1)),        # ... down to 32-byte rows
    (2048, 100, 1, 4, (True, 2048, 8, 8, 1)),     # the longest one tile of 32-byte strips (f32)
    (2049, 100, 1, 4, (False, 32, 128, 8, 16)),   # one more: the reductions' strips, 16 splits of 4 tiles
    (1025, 100, 1, 2, (False, 32, 128, 4, 8)),    # (2-byte: 16-column strips, so 1024 rows): strip_config
    (8192, 8192, 1, 2, (False, 32, 128, 4, 8)),   # 64 strips x 8 splits: 512 programs
    (16384, 8192, 1, 4, (False, 16, 256, 8, 64)),  # f32: 32 strips x 64 splits of 16 tiles
])
def test_dim_config(r, inner, outer, itemsize, want):
    assert softmax_dim.dim_config(r, inner, outer, itemsize) == want


def test_the_last_dim_keeps_the_row_kernels(monkeypatch):
    seen = spy_launches(monkeypatch, [softmax_mod, softmax_dim], lambda k, cluster, c: k.name)
    x = np.random.default_rng(4).standard_normal((3, 5, 40)).astype(np.float32)
    sk.softmax(x, dim=2)
    sk.softmax(x, dim=-1)
    sk.softmax(x[0, 0], dim=0)                 # 1-d: dim 0 is the last
    assert seen == ["softmax_tile_kernel"] * 3


# ----------------------------------------------------------------------------- grid limits
@pytest.mark.parametrize("shape, dim, dtype, kernels", [
    ((3, 40_000_000), 0, np.float32, ["softmax_dim_tile_kernel"]),             # 156250 strips of 256 columns
    ((3000, 40_000_000), 0, np.float16, ["softmax_dim_loop_kernel"]),          # looped: 78125 strips of 512
    ((100_000, 7, 3), 1, np.float32, ["softmax_dim_tile_kernel"]),             # 100000 slabs
    ((2, 3000, 30), 1, np.float32, ["softmax_dim_stats_kernel", "softmax_dim_loop_kernel"]),  # split
])
def test_huge_shapes_plan_grids_within_the_limits(monkeypatch, shape, dim, dtype, kernels):
    # every (slab, strip, split) program once, each grid axis within CUDA's limits (`reductions.slab_grid`)
    launched = plan_grids(monkeypatch, [softmax_dim])
    out = huge(shape, dtype)
    assert sk.softmax(huge(shape, dtype), dim=dim, out=out) is out
    assert [name for name, _, _ in launched] == kernels
    outer, inner = int(np.prod(shape[:dim])), int(np.prod(shape[dim + 1:]))
    for _, grid, c in launched:
        assert all(0 < n <= most for n, most in zip(grid, GRID_LIMITS)), grid
        strips = -(-inner // c["BLOCK_I"])
        assert grid[:2] == ((strips, outer) if c["STRIPS_FIRST"] else (outer, strips))


def test_more_slabs_than_any_grid_holds_is_a_clear_error(monkeypatch):
    plan_grids(monkeypatch, [softmax_dim])
    with pytest.raises(ValueError, match="2147483648 slabs x 1 column strips x 1 splits do not fit a grid"):
        sk.softmax(huge((2**31, 2, 1), np.float32), dim=1, out=huge((2**31, 2, 1), np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("axis1", [GRID_LIMITS[1], 3])   # 3: the strips on grid axis 0, as past 65535 of them
@pytest.mark.parametrize("dtype, shape, dim, whole", [
    ("f32", (3, 30, 300), 1, False),       # one tile per strip: 38 strips of 8 columns per slab
    ("bf16", (3, 30, 300), 1, False),      # 19 of 16
    ("f32", (30, 300), 0, False),          # one slab
    ("f32", (3, 2100, 800), 1, True),      # looped strips, 4 per slab
    ("f32", (3, 2100, 800), 1, False),     # split strips (grid axis 2)
    ("bf16", (3, 1100, 1600), 1, False),
])
def test_softmax_over_slabs_of_several_strips_matches_numpy(monkeypatch, rowwise, axis1, dtype, shape, dim, whole):
    limit_grid_axis1(monkeypatch, axis1)   # (the interpreter rejects a grid past it too)
    if whole:
        monkeypatch.setattr(softmax_dim, "split_count", lambda strips, n_tiles, itemsize: 1)
    x = rowwise.host(3 * np.random.default_rng(sum(shape)).standard_normal(shape), dtype)
    for log in (False, True):
        got = (sk.log_softmax if log else sk.softmax)(x, dim=dim)
        rowwise.close(got, ref(rowwise.f64(x), dim, log), dtype, scale=10 if log else 1.0)
