"""sum, max, cumsum and cross_entropy over rows off 32-byte sectors, read (and written)
through aligned windows where they take them (`_window.py`): which kernel and WINDOW each shape launches, and
the values on the interpreter against float64 numpy, with nothing written outside the
rows; plus the 16-byte accesses and registers of the windowed kernels' PTX (sm_90a)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import BF16Array

from launch_spy import spy_launches

reductions = importlib.import_module("tilec.stdlib_kernels.reductions")
cross_entropy = importlib.import_module("tilec.stdlib_kernels.cross_entropy")

SENTINEL = 7.0


@pytest.fixture
def launched(monkeypatch):
    """(kernel name, BLOCK, ROWS, WINDOW) of each launch of the reductions and cross_entropy."""
    return spy_launches(monkeypatch, (reductions, cross_entropy), lambda kernel, cluster, c: (
        kernel.name, c.get("BLOCK"), c.get("ROWS"), c.get("WINDOW", 0)))


def _rows(rng, shape, dtype, scale=3.0):
    """x of `shape` whose rows (but the first) start off 32-byte sectors: a view of a wider buffer."""
    n = shape[-1]
    buf = (scale * rng.standard_normal((shape[0], n + 16))).astype(dtype)
    return buf[:, :n]


# (shape, dtype, cumsum's (BLOCK, ROWS, WINDOW)): single tiles, looped rows carrying the total,
# packed rows; the window counts up to 32 bytes before each row.
CUMSUM_CASES = [
    ((5, 2041), np.float32, (2048, 1, 8)),      # one tile: 2041 + 7 <= 2048
    ((4, 2045), np.float32, (4096, 1, 8)),      # 2045 + 7 > 2048
    ((3, 9001), np.float32, (4096, 1, 8)),      # three window tiles, the total carried
    ((6, 2500), np.float16, (4096, 1, 16)),
    ((40, 99), np.float16, (128, 16, 16)),      # packed rows through their windows
]


@pytest.mark.slow
def test_cumsum_of_rows_on_sectors_takes_windows_where_their_length_is_ragged(launched):
    # 3000 f32 columns: every row on a 32-byte sector (the launch specializes on 8 | 3000),
    # but the rows end inside 16-byte groups: windows (lead 0) scan by groups
    rng = np.random.default_rng(8)
    x = (3 * rng.standard_normal((4, 3000))).astype(np.float32)
    got = sk.cumsum(x)
    assert launched == [("cumsum_kernel", 4096, 1, 8)]
    np.testing.assert_allclose(got, np.cumsum(x.astype(np.float64), -1), rtol=1e-4, atol=1e-3)
    launched.clear()
    got = sk.cumsum(x[:, :2048])                # a stride of 3000, 2048 columns: column tiles
    assert launched == [("cumsum_kernel", 2048, 1, 0)]
    np.testing.assert_allclose(got, np.cumsum(x[:, :2048].astype(np.float64), -1), rtol=1e-4, atol=1e-3)
    launched.clear()
    sk.cumsum(np.zeros((4, 3008), np.float32))  # 16 | 3008: column tiles
    assert launched == [("cumsum_kernel", 4096, 1, 0)]


@pytest.mark.parametrize("shape,dtype,want", CUMSUM_CASES)
def test_cumsum_of_rows_off_sectors_matches_numpy(launched, shape, dtype, want):
    rng = np.random.default_rng(shape[-1])
    x = _rows(rng, shape, dtype)
    n = shape[-1]
    # out's rows as far apart as x's: the same windows, and sentinels between them
    buf = np.full((shape[0], n + 16), SENTINEL, dtype)
    out = buf[:, :n]
    assert sk.cumsum(x, out=out) is out
    assert launched == [("cumsum_kernel", *want)]
    tol = 2e-5 * n if dtype == np.float32 else 2e-3 * n
    np.testing.assert_allclose(out.astype(np.float64), np.cumsum(x.astype(np.float64), -1), rtol=1e-3, atol=tol)
    assert (buf[:, n:] == SENTINEL).all()


@pytest.mark.parametrize("shape,width,first,dtype,want", [
    ((5, 2001), 2013, 0, np.float32, (2048, 1, 8)),     # one tile: 2001 + 7 <= 2048
    ((3, 9001), 9011, 3, np.float32, (4096, 1, 8)),     # three window tiles, the total carried
    ((6, 2500), 2511, 1, np.float16, (4096, 1, 16)),
    ((40, 99), 113, 5, np.float16, (128, 16, 16)),      # packed rows through out's windows
])
def test_cumsum_into_an_output_off_the_inputs_windows(monkeypatch, shape, width, first, dtype, want):
    # out contiguous: its rows sit at other offsets modulo the window than x's, which are
    # read in out's windows (realigned loads, `row_windows`)
    seen = spy_launches(monkeypatch, (reductions,), lambda kernel, cluster, c: (
        kernel.name, c.get("BLOCK"), c.get("ROWS"), c.get("WINDOW", 0), c.get("REALIGN", False)))
    rng = np.random.default_rng(3)
    x = (3 * rng.standard_normal((shape[0], width))).astype(dtype)[:, first:first + shape[1]]
    out = sk.cumsum(x)
    assert seen == [("cumsum_kernel", *want, True)]
    tol = 1e-3 if dtype == np.float32 else 2e-3 * shape[1]
    np.testing.assert_allclose(out.astype(np.float64), np.cumsum(x.astype(np.float64), -1), rtol=1e-3, atol=tol)


def test_cumsum_of_bf16_rows_off_sectors(launched):
    rng = np.random.default_rng(5)
    x = BF16Array(3 * rng.standard_normal((4, 3000)))   # contiguous: rows 6000 bytes apart
    got = np.asarray(sk.cumsum(x))
    assert launched == [("cumsum_kernel", 4096, 1, 16)]
    want = np.cumsum(np.asarray(x).astype(np.float64), -1)
    # each output rounded to bf16 (8 significant bits)
    np.testing.assert_allclose(got, want, rtol=8e-3, atol=0.1)


@pytest.mark.parametrize("is_max", [False, True])
@pytest.mark.parametrize("shape,dtype,want", [
    ((7, 2001), np.float32, (2048, 1, 0)),      # single f32 rows: column tiles (measured faster)
    ((5, 4097), np.float16, (512, 1, 8 * 2)),   # single 2-byte rows: looped in windows of 512
    ((4, 513), np.float16, (512, 2, 16)),       # (from one window's width), two rows of <= 2 KB each
    ((7, 1023), np.float16, (512, 2, 16)),      # an odd count: the last program re-reads its row
    ((5, 1025), np.float16, (512, 1, 16)),      # past 2 KB: one row
    ((6, 511), np.float16, (512, 4, 0)),        # narrower: packed column tiles
    ((3, 20001), np.float32, (4096, 1, 8)),     # looped rows through windows
    ((50, 99), np.float32, (128, 16, 0)),       # packed rows: column tiles
])
def test_sum_and_max_of_rows_off_sectors_match_numpy(launched, is_max, shape, dtype, want):
    rng = np.random.default_rng(shape[-1])
    x = _rows(rng, shape, dtype)
    x64 = x.astype(np.float64)
    got = (sk.amax if is_max else sk.sum)(x, -1)
    assert launched == [("reduce_rows_kernel", *want)]
    if is_max:
        np.testing.assert_array_equal(got.astype(np.float64), x64.max(-1))
    else:
        np.testing.assert_allclose(got.astype(np.float64), x64.sum(-1), rtol=2e-3, atol=1e-3 * np.sqrt(shape[-1]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cross_entropy_of_rows_off_sectors_matches_numpy(launched, dtype):
    rng = np.random.default_rng(9)
    n = 3001
    x = _rows(rng, (6, n), dtype, scale=4.0)
    t = rng.integers(0, n, 6)
    t[1], t[2], t[3] = 0, n - 1, -100           # the first and last class, an ignored row
    t[4] = n                                    # out of range: NaN, nothing read out of bounds
    x[5, : n // 2] = -np.inf
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        m = x64.max(-1)
        lse = m + np.log(np.exp(x64 - m[:, None]).sum(-1))
    want = lse - x64[np.arange(6), np.clip(t, 0, n - 1)]
    want[3] = 0.0
    want[4] = np.nan
    got = sk.cross_entropy(x, t, reduction="none")
    assert launched == [("ce_tile_kernel", 4096, 1, 32 // np.dtype(dtype).itemsize)]
    tol = 2e-5 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
    mean = sk.cross_entropy(x, np.where(t == n, 0, t))
    want[4] = lse[4] - x64[4, 0]
    np.testing.assert_allclose(float(mean), np.delete(want, 3).mean(), rtol=tol)


# The windowed kernels' sm_90a PTX: 16-byte accesses, no spills, registers near their aligned
# forms' (cumsum's scalar column tiles took 238 at 4096 columns).
PTX_CASES = [
    (reductions.cumsum_kernel, "x=bf16[?,?], out=bf16[?,?], ROWS=1, BLOCK=4096, WINDOW=16", 8, 64),
    (reductions.cumsum_kernel, "x=f32[?,?], out=f32[?,?], ROWS=16, BLOCK=128, WINDOW=8", 4, 80),
    (reductions.reduce_rows_kernel, "x=bf16[?,?], out=bf16[?], MAX=False, ROWS=1, BLOCK=4096, WINDOW=16", 8, 64),
    (reductions.reduce_rows_kernel, "x=f16[?,?], out=f16[?], MAX=True, ROWS=1, BLOCK=512, WINDOW=16", 2, 64),
    (cross_entropy.ce_tile_kernel, "logits=bf16[?,?], target=i64[?], loss=bf16[?], ignore_index=i32, ROWS=1, "
                                   "BLOCK=8192, WINDOW=16", 16, 64),
]


@pytest.mark.slow
@pytest.mark.parametrize("kernel,sig,warps,max_regs", PTX_CASES)
def test_windowed_row_kernels_move_16_bytes(kernel, sig, warps, max_regs):
    compiled = kernel.compile(kernel.specialization(sig), arch="sm_90a", num_warps=warps, fast_math=True)
    ptx = compiled.asm["ptx"]
    assert "ld.global.v4" in ptx
    if "cumsum" in kernel.name:
        assert "st.global.v4" in ptx
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and ptxas["registers"] <= max_regs, ptxas
