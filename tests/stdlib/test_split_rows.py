"""Rows held as three tiles of a quarter of their power of two (`_common.split_row`):
the heuristic's boundaries, and softmax, log_softmax, layer_norm and rms_norm through
that path on the interpreter against float64 numpy, with nothing written between rows."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels._common import RowConfig, row_config, split_row
from tilec.stdlib_kernels._window import single_row_window

from row_refs import ref_softmax
from launch_spy import spy_launches

softmax = importlib.import_module("tilec.stdlib_kernels.softmax")   # the package exports the functions
norms = importlib.import_module("tilec.stdlib_kernels.norms")

SENTINEL = 7.0


@pytest.mark.parametrize("n, want", [
    (1025, RowConfig(512, 1, 2, True, 3)),      # the first row length with a tile of its own
    (1536, RowConfig(512, 1, 2, True, 3)),      # exactly 3/4 of 2048
    (1537, RowConfig(2048, 1, 4, True, 1)),     # past 3/4: one tile
    (4097, RowConfig(2048, 1, 8, True, 3)),
    (5120, RowConfig(2048, 1, 8, True, 3)),
    (12288, RowConfig(4096, 1, 16, True, 3)),
    (12289, RowConfig(16384, 1, 16, True, 1)),
    (4096, RowConfig(4096, 1, 8, True, 1)),     # a power of two stays one tile
    (600, RowConfig(1024, 2, 4, True, 1)),      # packed rows stay as they are
    (40000, RowConfig(4096, 1, 8, False, 1)),   # and so do looped ones
])
def test_split_row_takes_three_quarter_tiles_up_to_three_quarters(n, want):
    assert split_row(row_config(n, 1000), n) == want


def test_split_row_per_thread_sets_the_warps():
    assert split_row(row_config(4097, 10), 4097, per_thread=48).num_warps == 4


@pytest.fixture
def launched(monkeypatch):
    """(kernel name, BLOCK, TILES, WINDOW) of each kernel that softmax and the norms launch."""
    return spy_launches(monkeypatch, (softmax, norms), lambda kernel, cluster, c: (
        kernel.name, c.get("BLOCK"), c.get("TILES", 1), c.get("WINDOW", 0)))


def _strided_out(shape, dtype, pad):
    # out's rows `pad` elements apart beyond the row: sentinels between them must survive
    buf = np.full((shape[0], shape[1] + pad), SENTINEL, dtype)
    return buf, buf[:, :shape[1]]


# 1536 and 3072-element rows start on 32-byte sectors (plain tiles); 1029 and 4099 do not (windows)
@pytest.mark.parametrize("n, block", [(1029, 512), (1536, 512), (3072, 1024), (4099, 2048)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_split_rows_matches_numpy(launched, n, block, dtype, log):
    rng = np.random.default_rng(n)
    x = (30 * rng.standard_normal((9, n))).astype(dtype)
    x[2, : n - 5] = -np.inf                      # the row's finite values all in its last tile
    x[4, :] = -np.inf                            # a row of only -inf gives NaN, as torch
    buf, out = _strided_out(x.shape, dtype, 16)
    assert (sk.log_softmax if log else sk.softmax)(x, out=out) is out
    window = 0 if n % 512 == 0 else 32 // np.dtype(dtype).itemsize
    assert launched == [("softmax_tile_kernel", block, 3, window)]
    rtol, atol = (2e-5, 2e-5) if dtype == np.float32 else (2e-3, 2e-3)
    np.testing.assert_allclose(out.astype(np.float64), ref_softmax(x.astype(np.float64), log), rtol=rtol,
                               atol=atol * (30 if log else 1), equal_nan=True)
    assert np.isnan(out[4]).all()
    assert (buf[:, n:] == SENTINEL).all()


# windows: 1025 in either dtype, 3000 in f16 (16-byte but not 32-byte rows); 5120 and f32 3000 plain
@pytest.mark.parametrize("n, block", [(1025, 512), (3000, 1024), (5120, 2048)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_layer_norm_of_split_rows_matches_numpy(launched, n, block, dtype):
    rng = np.random.default_rng(n)
    # a mean far from 0 next to the spread: the centring must use the whole row's mean
    x = (300 + 2 * rng.standard_normal((7, n))).astype(dtype)
    w = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(dtype)
    buf, out = _strided_out(x.shape, dtype, 16)
    y, mean, rstd = sk.layer_norm(x, w, b, eps=1e-5, return_stats=True, out=out)
    assert y is out
    window = 0 if (n * np.dtype(dtype).itemsize) % 32 == 0 else 32 // np.dtype(dtype).itemsize
    assert launched == [("norm_tile_kernel", block, 3, window)]
    x64 = x.astype(np.float64)
    want_mean = x64.mean(-1)
    want_rstd = 1 / np.sqrt(x64.var(-1) + 1e-5)
    want = (x64 - want_mean[:, None]) * want_rstd[:, None] * w + b
    tol = 2e-5 if dtype == np.float32 else 4e-3
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=2e-3 if dtype == np.float16 else 1e-4)
    assert (buf[:, n:] == SENTINEL).all()


@pytest.mark.parametrize("n, block", [(1300, 512), (2049, 1024), (12288, 4096)])
def test_rms_norm_of_split_rows_matches_numpy(launched, n, block):
    rng = np.random.default_rng(n)
    x = (3 * rng.standard_normal((5, n))).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    y, rstd = sk.rms_norm(x, w, eps=1e-6, return_stats=True)
    assert launched == [("norm_tile_kernel", block, 3, 0 if n % 8 == 0 else 8)]
    want_rstd = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1) + 1e-6)
    np.testing.assert_allclose(y, x * want_rstd[:, None] * w, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-5)


def test_windowed_layer_norm_gathers_strided_weights(launched):
    # w and b every other element of a buffer: gathered at each lane's column of the window
    rng = np.random.default_rng(3)
    x = (5 + rng.standard_normal((6, 1025))).astype(np.float32)
    w = rng.standard_normal(2050).astype(np.float32)[::2]
    b = rng.standard_normal(2050).astype(np.float32)[::2]
    y = sk.layer_norm(x, w, b, eps=1e-5)
    assert launched == [("norm_tile_kernel", 512, 3, 8)]
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-4)


def test_norm_output_off_the_inputs_windows_is_written_through_its_own(launched):
    # x's rows read in out's windows (realigned loads, `_window.row_windows`), tiles sized for
    # the row and the window's lead as x's own windows would be
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 1025)).astype(np.float16)
    buf, out = _strided_out(x.shape, np.float16, 8)      # out's rows 8 elements off x's windows
    w = rng.standard_normal(1025).astype(np.float16)
    sk.rms_norm(x, w, eps=1e-6, out=out)
    assert launched == [("norm_tile_kernel", 512, 3, 16)]
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=4e-3, atol=4e-3)
    assert (buf[:, 1025:] == SENTINEL).all()


# Norm rows past 3/4 of a tile of 2048+ lanes: two half tiles (four quarters at 16384 lanes),
# unless read through windows (`norms.norm_tiles`).
@pytest.mark.parametrize("n, window, want", [
    (1537, 0, RowConfig(1024, 1, 4, True, 2)),     # just past 3/4 of 2048
    (1536, 0, RowConfig(512, 1, 2, True, 3)),      # 3/4: split_row's quarters
    (1024, 0, RowConfig(1024, 2, 4, True, 1)),     # packed rows stay one tile
    (8192, 0, RowConfig(4096, 1, 8, True, 2)),
    (12289, 0, RowConfig(4096, 1, 16, True, 4)),
    (16384, 0, RowConfig(4096, 1, 16, True, 4)),
    (7001, 8, RowConfig(8192, 1, 8, True, 1)),     # through a window: one tile
    (40000, 0, RowConfig(4096, 1, 8, False, 1)),   # looped rows as they are
])
def test_norm_tiles_hold_full_rows_as_halves_or_quarters(n, window, want):
    assert norms.norm_tiles(row_config(n, 1000, big_tile_per_thread=32), n, window) == want


# ... and layer_norm rows through windows whose w and b come from shift tables (`halve_window`)
@pytest.mark.parametrize("n, window, want", [
    (7001, 16, RowConfig(4096, 1, 8, True, 2)),
    (14001, 16, RowConfig(4096, 1, 16, True, 4)),
    (1601, 16, RowConfig(1024, 1, 4, True, 2)),
    (4090, 16, RowConfig(2048, 1, 8, True, 3)),    # its lead needs 8192 lanes: split_row's quarters
])
def test_norm_tiles_halve_windowed_rows_when_asked(n, window, want):
    cfg, window = single_row_window(row_config(n, 1000, big_tile_per_thread=32), n, 1000, window,
                                    big_tile_per_thread=32)
    assert norms.norm_tiles(cfg, n, window, halve_window=True) == want
    assert norms.norm_tiles(cfg, n, window).tiles == (3 if want.tiles == 3 else 1)


@pytest.mark.parametrize("n, dtype, block, tiles", [(2048, np.float32, 1024, 2), (1808, np.float16, 1024, 2),
                                                    (12296, np.float32, 4096, 4)])
def test_norms_of_rows_in_halves_and_quarters_match_numpy(launched, n, dtype, block, tiles):
    rng = np.random.default_rng(n)
    x = (300 + 2 * rng.standard_normal((3, n))).astype(dtype)   # a mean far from 0 next to the spread
    x[1, -1] = 400                                             # a value in the last tile moves the mean
    w = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(np.float32)
    buf, out = _strided_out(x.shape, dtype, 32)
    y, mean, rstd = sk.layer_norm(x, w, b, eps=1e-5, return_stats=True, out=out)
    yr, rstd_r = sk.rms_norm(x, w, eps=1e-6, return_stats=True)
    window = 0 if (n * np.dtype(dtype).itemsize) % 32 == 0 else 32 // np.dtype(dtype).itemsize
    assert window == 0 and launched == [("norm_tile_kernel", block, tiles, 0)] * 2
    x64 = x.astype(np.float64)
    want_mean, want_rstd = x64.mean(-1), 1 / np.sqrt(x64.var(-1) + 1e-5)
    tol = 2e-5 if dtype == np.float32 else 4e-3
    np.testing.assert_allclose(y.astype(np.float64), (x64 - want_mean[:, None]) * want_rstd[:, None] * w + b,
                               rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=2e-3 if dtype == np.float16 else 1e-4)
    assert (buf[:, n:] == SENTINEL).all()
    want_rms = 1 / np.sqrt((x64 ** 2).mean(-1) + 1e-6)
    np.testing.assert_allclose(yr.astype(np.float64), x64 * want_rms[:, None] * w, rtol=tol, atol=tol)
    np.testing.assert_allclose(rstd_r, want_rms, rtol=1e-5)


# The registers that let two (four) layer_norm programs share an SM: one 16384-lane bf16 tile
# took 91 at 16 warps, one of 8192 80 at 8 (sm_90a ptxas).
@pytest.mark.slow
@pytest.mark.parametrize("block, tiles, warps", [(4096, 4, 16), (4096, 2, 8)])
def test_layer_norm_rows_in_tiles_fit_two_or_four_programs_per_sm(block, tiles, warps):
    v2 = "[?,?]:div=1x16:stride_div=16x1"
    sig = (f"x=bf16{v2}, w=bf16[?]:div=16, b=bf16[?]:div=16, y=bf16{v2}, mean_out=f32[?], rstd_out=f32[?], eps=f32, "
           f"RMS=False, HAS_W=True, HAS_B=True, STATS=False, ROWS=1, BLOCK={block}, TILES={tiles}")
    kernel = norms.norm_tile_kernel
    compiled = kernel.compile(kernel.specialization(sig), arch="sm_90a", num_warps=warps, fast_math=True)
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and ptxas["registers"] <= 64, ptxas
