"""softmax and log_softmax over rows off 32-byte sectors, read and written through
aligned windows (`_window.py`): every launch path on the interpreter against float64
numpy, with nothing written outside the rows; when an output's rows do not share the
input's windows (x realigned into out's: `row_windows`); and the 16-byte accesses of the
windowed kernels' PTX (sm_90a)."""
from __future__ import annotations

import importlib
import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import _cluster_rows as CR
from tilec.stdlib_kernels import _common
from tilec.stdlib_kernels._common import DEPENDENT
from tilec.target import Target

from row_refs import ref_softmax
from launch_spy import spy_launches, retune

softmax = importlib.import_module("tilec.stdlib_kernels.softmax")   # the package exports the functions
norms = importlib.import_module("tilec.stdlib_kernels.norms")
reductions = importlib.import_module("tilec.stdlib_kernels.reductions")

SENTINEL = 7.0


@pytest.fixture
def windows(monkeypatch):
    """(kernel name, WINDOW) of each kernel the softmax entry points launch."""
    return spy_launches(monkeypatch, (softmax,), lambda kernel, cluster, c: (kernel.name, c.get("WINDOW", 0)))


def _persistent(monkeypatch):
    retune(monkeypatch, "softmax", loop_min_chunk=8192)    # the interpreter's rows stay small
    # fewer clusters than rows: a look-ahead past the last
    monkeypatch.setattr(_common, "HOST_TARGET", replace(_common.HOST_TARGET, clusters_of_8=2))
    retune(monkeypatch, "softmax", cluster_min_waves=0)


def _no_clusters(monkeypatch):
    monkeypatch.setattr(_common, "HOST_TARGET", Target.from_arch("sm_80"))


# (shape, set-up, kernels launched for f32 / f16); every row but the first starts off 32 bytes
PATHS = {
    "one tile": ((37, 1001), None, ["softmax_tile_kernel"], ["softmax_tile_kernel"]),
    "packed rows": ((300, 99), None, ["softmax_tile_kernel"], ["softmax_tile_kernel"]),
    "clusters": ((140, 20001), None, ["softmax_cluster_kernel"], ["softmax_cluster_kernel"]),
    "persistent clusters": ((5, 57345), _persistent, ["softmax_cluster_kernel"], ["softmax_cluster_loop_kernel"]),
    "split rows": ((3, 40001), None, ["softmax_partial_kernel", "softmax_finish_kernel"],
                   ["softmax_partial_kernel", "softmax_finish_kernel"]),
    "looped rows": ((270, 17001), _no_clusters, ["softmax_loop_kernel"], ["softmax_loop_kernel"]),
}


def _softmax_into_rows(x, out_pad, log):
    """(log_)softmax of x into the rows of a buffer out_pad elements wider than x's, checked
    against float64 numpy, the sentinels between the rows untouched."""
    rows, n = x.shape
    buf = np.full((rows, n + out_pad), SENTINEL, x.dtype)
    out = buf[:, :n]
    assert (sk.log_softmax if log else sk.softmax)(x, out=out) is out
    rtol, atol = (2e-5, 2e-5) if x.dtype == np.float32 else (2e-3, 2e-3)
    np.testing.assert_allclose(out.astype(np.float64), ref_softmax(x.astype(np.float64), log), rtol=rtol,
                               atol=atol * (20 if log else 1))
    assert (buf[:, n:] == SENTINEL).all()


def _path(monkeypatch, path, dtype):
    """(shape, elements per 32-byte sector, kernels launched) of a softmax path, set up."""
    shape, setup, f32_kernels, f16_kernels = PATHS[path]
    if setup:
        setup(monkeypatch)
    return shape, 32 // np.dtype(dtype).itemsize, f32_kernels if dtype == np.float32 else f16_kernels


@pytest.mark.slow
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("path", list(PATHS))
def test_windowed_rows_match_numpy_and_write_only_the_rows(monkeypatch, windows, path, dtype, log):
    shape, window, want = _path(monkeypatch, path, dtype)
    n = shape[-1]
    rng = np.random.default_rng(n)
    x = (20 * rng.standard_normal(shape)).astype(dtype)
    x[1, : n // 2] = -np.inf                        # a row half masked: chunks of only -inf
    # out's rows 16 elements apart from x's stride: the same windows, and sentinels between them
    _softmax_into_rows(x, 16, log)
    assert windows == [(k, window) for k in want]


@pytest.fixture
def realigned(monkeypatch):
    """(kernel name, WINDOW, REALIGN) of each kernel the softmax entry points launch."""
    return spy_launches(monkeypatch, (softmax,), lambda kernel, cluster, c: (kernel.name, c.get("WINDOW", 0),
                                                                            c.get("REALIGN", False)))


def test_an_output_off_the_inputs_windows_reads_x_in_its_windows(realigned):
    x = (5 * np.random.default_rng(1).standard_normal((64, 1001))).astype(np.float16)
    _softmax_into_rows(x, 5, False)     # stride 1006: rows 5 elements further each time
    assert realigned == [("softmax_tile_kernel", 16, True)]


@pytest.mark.slow
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("path", list(PATHS))
def test_rows_of_a_wider_buffer_realigned_into_the_outputs_windows(monkeypatch, realigned, path, dtype, log):
    # x: rows of a buffer 11 elements wider, from its column 3 (so x itself starts off any
    # group); out: rows 5 elements apart from its length, sentinels between them. Every path
    # reads x in out's windows where it normalizes (REALIGN); the split rows' statistics
    # pass reads x in its own. Persistent clusters run one row per cluster instead. f32
    # rows past one tile keep column tiles (no window).
    (rows, n), window, want = _path(monkeypatch, path, dtype)
    rng = np.random.default_rng(n + 1)
    x = (20 * rng.standard_normal((rows, n + 11))).astype(dtype)[:, 3:3 + n]
    x[1, : n // 2] = -np.inf
    _softmax_into_rows(x, 5, log)
    want = ["softmax_cluster_kernel" if k == "softmax_cluster_loop_kernel" else k for k in want]
    if dtype == np.float32 and n > 16384:
        assert realigned == [(k, 0, False) for k in want]
    else:
        assert realigned == [(k, window, k != "softmax_partial_kernel") for k in want]


def test_rows_on_sectors_into_an_output_off_them_are_realigned(realigned):
    # x rows 1008 wide (on 32-byte sectors), out contiguous 1001: out's windows, x realigned
    x = (5 * np.random.default_rng(2).standard_normal((40, 1008))).astype(np.float16)[:, :1001]
    out = sk.softmax(x)
    assert realigned == [("softmax_tile_kernel", 16, True)]
    np.testing.assert_allclose(out.astype(np.float64), ref_softmax(x.astype(np.float64)), rtol=2e-3, atol=2e-3)


def _accesses(ptx):
    return Counter(re.findall(r"((?:ld|st)\.global(?:\.v\d)?\.b\d+)", ptx))


@pytest.mark.slow
@pytest.mark.parametrize("kernel,sig,options,spills", [
    (softmax.softmax_tile_kernel, "x=bf16[?,?], out=bf16[?,?], LOG=False, ROWS=1, BLOCK=8192, WINDOW=16",
     dict(num_warps=8), 0),
    (softmax.softmax_tile_kernel, "x=f32[?,?], out=f32[?,?], LOG=True, ROWS=2, BLOCK=1024, WINDOW=8",
     dict(num_warps=4), 0),
    (softmax.softmax_loop_kernel, "x=bf16[?,?], out=bf16[?,?], LOG=True, BLOCK=4096, WINDOW=16", dict(num_warps=8), 0),
    (CR.softmax_cluster_kernel, "x=bf16[?,?], out=bf16[?,?], LOG=False, C=8, BLOCK=8192, WINDOW=16",
     dict(num_warps=8, cluster=8), 0),
    # the next row's chunk held with this one's, loaded by element masks (`row_tile`'s PAST)
    (CR.softmax_cluster_loop_kernel, "x=f16[?,?], out=f16[?,?], LOG=False, C=8, BLOCK=32768, WINDOW=16",
     dict(num_warps=16, cluster=8), 0),
    (CR.softmax_cluster_loop_kernel, "x=bf16[?,?], out=bf16[?,?], LOG=False, C=5, BLOCK=32768, WINDOW=16",
     dict(num_warps=16, cluster=5), 0),
])
def test_windowed_kernels_move_16_bytes(kernel, sig, options, spills):
    # Rows off 32-byte sectors (no stride divisibility) still load and store whole 16-byte
    # groups; only the row's two edge groups are stored element by element.
    c = kernel.compile(kernel.specialization(sig), arch="sm_90a", fast_math=True, **options)
    acc = _accesses(c.asm["ptx"])
    assert {k for k in acc if k.startswith("ld.")} == {"ld.global.v4.b32"}, acc
    assert "st.global.v4.b32" in acc, acc
    assert c.metadata["ptxas"]["spill_stores"] <= spills


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_windowed_cluster_chunks_fit_five_programs_per_sm(dtype):
    # 7 x 8192 at 8 warps (softmax 4096x50257): the window's masks as two values per 16-byte
    # group keep the chunk at the aligned kernel's 48 registers, five programs per SM (a column
    # per element took 64: four; H200 80% -> 89% of copy).
    sig = f"x={dtype}[?,?], out={dtype}[?,?], LOG=False, C=7, BLOCK=8192, WINDOW=16"
    k = CR.softmax_cluster_kernel
    c = k.compile(k.specialization(sig), arch="sm_90a", fast_math=True, num_warps=8, cluster=7)
    ptxas = c.metadata["ptxas"]
    assert ptxas["registers"] <= 48 and ptxas["spill_stores"] == 0, ptxas


@pytest.mark.slow
@pytest.mark.parametrize("kernel,sig,options", [
    (softmax.softmax_tile_kernel, "x=bf16[?,?], out=bf16[?,?], LOG=False, ROWS=1, BLOCK=8192, WINDOW=16",
     dict(num_warps=8)),
    (softmax.softmax_tile_kernel, "x=f32[?,?], out=f32[?,?], LOG=True, ROWS=2, BLOCK=1024, WINDOW=8",
     dict(num_warps=4)),
    (softmax.softmax_loop_kernel, "x=bf16[?,?], out=bf16[?,?], LOG=True, BLOCK=4096, WINDOW=16", dict(num_warps=8)),
    (softmax.softmax_finish_kernel, "x=f16[?,?], out=f16[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, "
                                    "LOG=False, CHUNKS=8, BLOCK=4096, WINDOW=16", dict(num_warps=8)),
    (CR.softmax_cluster_kernel, "x=bf16[?,?], out=bf16[?,?], LOG=False, C=7, BLOCK=2048, WINDOW=16, TILES=7",
     dict(num_warps=8, cluster=7)),
    (CR.softmax_cluster_kernel, "x=f16[?,?], out=f16[?,?], LOG=True, C=7, BLOCK=1024, WINDOW=16, TILES=8",
     dict(num_warps=4, cluster=7)),
    (norms.norm_tile_kernel, "x=bf16[?,?], w=bf16[?], b=bf16[?], y=bf16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                             "eps=f32, RMS=False, HAS_W=True, HAS_B=True, STATS=True, ROWS=1, BLOCK=2048, TILES=3, "
                             "WINDOW=16", dict(num_warps=8)),
    (norms.norm_tile_kernel, "x=f16[?,?], w=f16[?,?]:stride_div=16x1, b=f16[?,?]:stride_div=16x1, y=f16[?,?], "
                             "mean_out=f32[?], rstd_out=f32[?], eps=f32, RMS=False, HAS_W=True, HAS_B=True, "
                             "STATS=False, ROWS=1, BLOCK=8192, WINDOW=16, SHIFTED=True", dict(num_warps=8, **DEPENDENT)),
    (reductions.cumsum_kernel, "x=bf16[?,?], out=bf16[?,?], ROWS=1, BLOCK=4096, WINDOW=16", dict(num_warps=8)),
])
def test_realigned_kernels_move_16_bytes_in_few_more_registers(kernel, sig, options):
    # x read in out's windows: two aligned 16-byte loads per group, 16-byte stores, and
    # registers close to the kernel that shares x's windows (words picked before the funnel
    # shift: picking among shifted words took bf16 7 x 2048 from 80 to 119, 2 programs per SM)
    plain = kernel.compile(kernel.specialization(sig), arch="sm_90a", fast_math=True, **options)
    c = kernel.compile(kernel.specialization(sig + ", REALIGN=True"), arch="sm_90a", fast_math=True, **options)
    acc, base = _accesses(c.asm["ptx"]), _accesses(plain.asm["ptx"])
    # (element loads: the partials' statistics, w and b gathered at the row's lead)
    x_loads = {k: v for k, v in acc.items() if k.startswith("ld.") and k not in ("ld.global.b32", "ld.global.b16")}
    # two per group where the kernel normalizes (its statistics pass, if any, reads x's own windows)
    assert list(x_loads) == ["ld.global.v4.b32"], acc
    assert base["ld.global.v4.b32"] < x_loads["ld.global.v4.b32"] <= 2 * base["ld.global.v4.b32"], (acc, base)
    assert "st.global.v4.b32" in acc and "prmt.b32.f4e" in c.asm["ptx"]
    ptxas, ref = c.metadata["ptxas"], plain.metadata["ptxas"]
    assert ptxas["spill_stores"] == 0 and ptxas["registers"] <= ref["registers"] + 24, (ptxas, ref)


@pytest.mark.parametrize("x_width,out_width,n,dtype,ragged,tiled,want", [
    (1000, 1000, 1000, np.float16, False, False, (16, False)),   # the same offsets, off sectors: shared windows
    (1016, 1000, 1000, np.float16, False, False, (16, False)),   # strides 16 apart: still the same offsets mod 16
    (1003, 1000, 1000, np.float16, False, False, (16, True)),    # x off sectors, out at other offsets
    (1008, 1001, 1001, np.float16, False, False, (16, True)),    # x on sectors, out off them
    (1024, 1024, 1000, np.float16, False, False, (0, False)),    # both on sectors: column tiles
    (1024, 1024, 1000, np.float16, True, False, (16, False)),    # ragged rows on sectors: shared windows
    (1024, 1012, 1000, np.float32, False, False, (8, True)),     # f32: out rows 16 bytes off a sector in turn
    (1024, 1032, 1000, np.float32, False, False, (0, False)),
    # rows past one tile (tiled): f32 ones keep column tiles rather than realign
    (1003, 1000, 1000, np.float16, True, True, (16, True)),
    (1003, 1000, 1000, np.float32, True, True, (0, False)),
    (1000, 1000, 1000, np.float32, True, True, (8, False)),   # shared windows still serve
])
def test_row_windows_reads_x_in_outs_windows_where_offsets_differ(x_width, out_width, n, dtype, ragged, tiled, want):
    from tilec.stdlib_kernels._common import as_array
    from tilec.stdlib_kernels._window import row_windows
    x = np.zeros((4, x_width), dtype)[:, :n]
    out = np.zeros((4, out_width), dtype)[:, :n]
    assert row_windows(as_array(x, "x"), as_array(out, "out"), ragged, tiled) == want
