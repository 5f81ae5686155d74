"""Long rows on thread-block clusters (`_cluster_rows`): the heuristic, the kernels on the
interpreter against float64 numpy (through the entry points and called directly with
small chunks), and their PTX for sm_90a."""
from __future__ import annotations

import importlib
import re
from dataclasses import replace

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import _cluster_rows as CR
from tilec.stdlib_kernels import _common
from tilec.stdlib_kernels import _norm_chunks as NC
from tilec.target import Target

H100 = Target.from_arch("sm_90a")

from row_refs import ref_softmax
from launch_spy import spy_launches, retune
from tilec.stdlib_kernels.launches import StaticProbe, spec
from tilec.stdlib_kernels.schedules import softmax_persistent_candidates
from tilec.stdlib_kernels.tuning import TABLES, row_tuning

softmax = importlib.import_module("tilec.stdlib_kernels.softmax")   # the package exports the functions
norms = importlib.import_module("tilec.stdlib_kernels.norms")


@pytest.fixture
def launched(monkeypatch):
    """The kernels the entry points launch, by name, with their cluster size."""
    return spy_launches(monkeypatch, (softmax, norms), lambda kernel, cluster, c: (kernel.name, cluster))


# ----------------------------------------------------------------------------- the heuristic
@pytest.mark.parametrize("n_cols,want", [
    (16384, None),                                     # one program's tile: no cluster
    (16385, (4, 8192, 8)),                             # chunks of at most 8192 elements
    (65536, (8, 8192, 8)),
    (70001, (8, 16384, 16)),                           # 8 programs, longer chunks
    (262144, (8, 32768, 32)),                          # softmax: 32768 at 32 warps
    (262145, None),
])
def test_cluster_heuristic(n_cols, want):
    got = CR.cluster_rows(n_cols, (9, 0), CR.MAX_SOFTMAX_CHUNK)
    assert (None if got is None else (got.c, got.block, got.num_warps)) == want
    assert CR.cluster_rows(n_cols, (8, 6), CR.MAX_SOFTMAX_CHUNK) is None   # clusters need sm_90


@pytest.mark.parametrize("n_cols,want", [
    (16384, None),                                  # one program's tile: no cluster
    (16385, (2, 16384, 16)),                        # chunks of at most 16384, 32 per thread
    (32768, (2, 16384, 16)),
    (65536, (4, 16384, 16)),
    (70001, (8, 16384, 16)),
    (131072, (8, 16384, 16)),
    (131073, None),                                 # 8 programs of 16384 at most
])
def test_norm_cluster_heuristic(n_cols, want):
    got = CR.norm_cluster_rows(n_cols, (9, 0))
    assert (None if got is None else (got.c, got.block, got.num_warps)) == want
    assert CR.norm_cluster_rows(n_cols, (8, 6)) is None   # clusters need sm_90


@pytest.mark.parametrize("n_cols,want", [(32768, (4, 8192, 8)), (65536, (8, 8192, 8)), (131072, (8, 16384, 16))])
def test_two_byte_layer_norm_asks_for_smaller_chunks(n_cols, want):
    got = CR.norm_cluster_rows(n_cols, (9, 0), norms.LN_CHUNK_2BYTE)
    assert (got.c, got.block, got.num_warps) == want


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_two_byte_layer_norm_on_clusters_when_every_chunk_is_full(rowwise, launched, dtype):
    # 32768 columns: four full chunks of 8192 (2-byte layer_norm's chunks; EVEN, no masks); a
    # large mean next to a small spread
    rng = np.random.default_rng(13)
    n = 32768
    x = rowwise.host(300 + 2 * rng.standard_normal((3, n)), dtype)
    w = rowwise.host(rng.standard_normal(n), dtype)
    b = rowwise.host(rng.standard_normal(n), dtype)
    x64 = rowwise.f64(x)
    y, mean, rstd = sk.layer_norm(x, w, b, eps=1e-5, return_stats=True)
    assert launched == [("norm_cluster_loop_kernel", 4)]
    want_rstd = 1.0 / np.sqrt(x64.var(-1) + 1e-5)
    np.testing.assert_allclose(mean, x64.mean(-1), rtol=1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-3)
    want = (x64 - x64.mean(-1, keepdims=True)) * want_rstd[:, None] * rowwise.f64(w) + rowwise.f64(b)
    rowwise.close(y, want, dtype, scale=8)
    launched.clear()
    sk.layer_norm(rowwise.host(rng.standard_normal((3, n - 1)), dtype), None, None)   # ragged: 5 x 7 tiles
    assert launched == [("norm_chunks_kernel", 5)]


@pytest.mark.slow
def test_softmax_takes_clusters_from_two_programs_per_sm(launched):
    x = np.zeros((87, 16385), np.float32)                  # 87 rows x 3 programs = 261 < 264: split
    sk.softmax(x)
    assert ("softmax_cluster_kernel", 3) not in launched
    launched.clear()
    sk.softmax(np.zeros((88, 16385), np.float32))          # 264 programs: one cluster of 3 per row
    assert launched == [("softmax_cluster_kernel", 3)]


# ----------------------------------------------------------------------------- entry points
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n,want", [
    (50257, (7, 1024, 8)),     # 8 tiles of 1024 on each of 7 programs (not 8): the last part-filled
    (65537, {"f32": (5, 16384, 1), "2-byte": (7, 1024, 10)}),   # 5 x 16384 at 16 warps, not 8; 2-byte
                               # rows that long (rows off sectors): up to 10 tiles of 1024
    (100277, {"f32": (7, 16384, 1), "2-byte": (7, 2048, 7)}),   # longer: tiles of 2048 at 8 warps
    (20001, (4, 1024, 5)),     # 5 tiles of 1024 per program: the last one part-filled
    (28000, (4, 1024, 7)),     # 7 tiles of 1024 on clusters of 4, not 4 on clusters of 7
    (45000, (6, 1024, 8)),     # clusters of 6 (a gather padded to 8 entries)
])
def test_softmax_on_clusters_matches_numpy(rowwise, monkeypatch, dtype, log, n, want):
    retune(monkeypatch, "softmax", cluster_min_waves=0)  # clusters for few rows too
    launched = spy_launches(monkeypatch, (softmax,), lambda kernel, cluster, c: (
        kernel.name, cluster, c["BLOCK"], c.get("TILES", 1)))
    rng = np.random.default_rng(11)
    x64 = 30 * rng.standard_normal((3, n))
    x64[0, :9000] = -np.inf                               # a chunk of only -inf, one partly -inf
    x64[1, n - 300:] += 50                                # the max in the row's last tile
    x = rowwise.host(x64, dtype)
    got = (sk.log_softmax if log else sk.softmax)(x)
    if isinstance(want, dict):
        want = want["f32" if dtype == "f32" else "2-byte"]
    assert launched == [("softmax_cluster_kernel", *want)]
    rowwise.close(got, ref_softmax(rowwise.f64(x), log), dtype, scale=30 if log else 1.0)


@pytest.mark.parametrize("n_cols,want", [
    (16385, (3, 1024, 4, 6)),   # 3 x 6 x 1024 lanes for 16385, not 4 x 8192
    (20001, (4, 1024, 4, 5)),   # 5 x 4 tiles idle as many lanes: the fewer programs
    (24576, (3, 1024, 4, 8)),   # not 6 x 4 or 4 x 6 (8 x 3 tiles: 24 per thread, too few)
    (24000, (3, 1024, 4, 8)),
    (28000, (4, 1024, 4, 7)),
    (18000, (3, 1024, 4, 6)),
    (36000, (6, 1024, 4, 6)),
    (40001, (5, 1024, 4, 8)),   # not 8 x 5
    (40961, (6, 1024, 4, 7)),
    (50257, (7, 1024, 4, 8)),   # not 8 x 8192
    (32000, (4, 8192, 8, 1)),   # 4 x 8 tiles of 1024 idle no fewer lanes than 4 x 8192
    (60000, (8, 8192, 8, 1)),   # nor 8 x 8 tiles than 8 x 8192
    (262144, (8, 32768, 32, 1)),
])
def test_softmax_chunks_as_tiles_where_fewer_lanes_idle(n_cols, want):
    got = CR.split_chunks(CR.cluster_rows(n_cols, (9, 0), CR.MAX_SOFTMAX_CHUNK), n_cols)
    assert (got.c, got.block, got.num_warps, got.tiles) == want
    assert CR.split_chunks(None, n_cols) is None


@pytest.mark.parametrize("n_cols,itemsize,window,want", [
    (70016, 2, 16, (7, 1024, 4, 10)),      # 2-byte rows over 65536: up to 10 tiles of 1024
    (65552, 2, 0, (7, 1024, 4, 10)),
    (100288, 2, 16, (7, 2048, 8, 7)),      # then 4 to 8 of 2048 at 8 warps
    (110016, 2, 16, (7, 2048, 8, 8)),
    (110016, 2, 0, (8, 2048, 8, 7)),       # at most 7 on rows on sectors
    (120000, 2, 0, (8, 16384, 16, 1)),     # (persistent, schedules.softmax_persistent_candidates)
    (131072, 2, 16, (8, 16384, 16, 1)),    # 8 x 8 tiles of 2048 idle no fewer lanes than 8 x 16384
    (150016, 2, 16, (8, 32768, 32, 1)),    # too long for either
    (70016, 4, 8, (8, 16384, 16, 1)),      # f32 rows keep their power-of-two chunks
])
def test_long_two_byte_rows_as_more_or_wider_tiles(n_cols, itemsize, window, want):
    got = CR.split_chunks(CR.cluster_rows(n_cols, (9, 0), CR.MAX_SOFTMAX_CHUNK), n_cols, itemsize, window)
    assert (got.c, got.block, got.num_warps, got.tiles) == want


@pytest.mark.parametrize("cl,itemsize,want", [
    (CR.ClusterRows(7, 8192, 8), 2, {"min_programs_per_sm": CR.CHUNK_PROGRAMS_PER_SM}),
    (CR.ClusterRows(4, 8192, 8), 2, {"min_programs_per_sm": CR.CHUNK_PROGRAMS_PER_SM}),
    (CR.ClusterRows(7, 8192, 8), 4, {}),              # f32 chunks: 2048x50257 97% of copy either way
    (CR.ClusterRows(5, 16384, 16), 2, {}),            # 16 warps: 3 programs would spill
    (CR.ClusterRows(8, 1024, 4, 5), 2, {"min_programs_per_sm": 8}),   # chunks as tiles: 64 registers
    (CR.ClusterRows(7, 1024, 4, 8), 4, {"min_programs_per_sm": 8}),   # any dtype
    (CR.ClusterRows(7, 2048, 8, 7), 2, {"min_programs_per_sm": 4}),
])
def test_chunks_ask_for_a_floor_of_programs_per_sm(cl, itemsize, want):
    assert CR.chunk_options(cl, itemsize, H100) == want


@pytest.mark.parametrize("n,log,floor", [(50257, True, 8),
                                         (32000, False, CR.CHUNK_PROGRAMS_PER_SM), (150001, False, None)])
def test_softmax_entry_point_passes_the_floor(monkeypatch, n, log, floor):
    launched = spy_launches(monkeypatch, (softmax,), lambda kernel, cluster, c: (kernel.name, c.get("options")))
    retune(monkeypatch, "softmax", cluster_min_waves=0)
    x = sk.BF16Array(np.random.default_rng(0).standard_normal((2, n)).astype(np.float32))
    (sk.log_softmax if log else sk.softmax)(x)
    floor = {"min_programs_per_sm": floor}
    # the persistent kernel (rows over 131072) sizes its own grid by the resident programs: no floor
    assert launched == ([("softmax_cluster_loop_kernel", None)] if n > 131072 else [("softmax_cluster_kernel", floor)])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("window", [0, 16])
def test_log_softmax_chunks_fit_five_programs_per_sm(dtype, window):
    # log_softmax holds its chunk in x's dtype across the exchange: 51 registers on windowed
    # rows, 79 on aligned ones without the floor (4 and 3 programs per SM; H200, 4096x50257
    # bf16 81% -> 89% of copy with it)
    k = CR.softmax_cluster_kernel
    sig = f"x={dtype}[?,?], out={dtype}[?,?], LOG=True, C=7, BLOCK=8192, WINDOW={window}"
    opts = CR.chunk_options(CR.ClusterRows(7, 8192, 8), 2, H100)
    c = k.compile(k.specialization(sig), arch="sm_90a", fast_math=True, num_warps=8, cluster=7, **opts)
    ptxas = c.metadata["ptxas"]
    assert ".minnctapersm 5" in c.asm["ptx"] and ptxas["registers"] <= 48 and ptxas["spill_stores"] == 0, ptxas


@pytest.mark.slow
@pytest.mark.parametrize("log,floor,regs", [(False, 6, 80), (True, None, 80)])
def test_eight_tile_chunks_take_the_highest_floor_that_fits(log, floor, regs):
    # 8 tiles of 1024 at 4 warps ask for 8 programs per SM (64 registers) and spill there;
    # softmax, which holds its f32 exps across the exchange, takes 96 registers without a floor
    # and fits 6 programs' 80; log_softmax takes 80 without one (floor 7's 72 spill)
    k = CR.softmax_cluster_kernel
    sig = f"x=bf16[?,?], out=bf16[?,?], LOG={log}, C=7, BLOCK=1024, WINDOW=16, TILES=8"
    cl = CR.split_chunks(CR.cluster_rows(50272, (9, 0), CR.MAX_SOFTMAX_CHUNK), 50272)
    assert (cl.c, cl.tiles) == (7, 8)
    c = k.compile(k.specialization(sig), arch="sm_90a", fast_math=True, num_warps=4, cluster=7,
                  **CR.chunk_options(cl, 2, H100))
    ptxas = c.metadata["ptxas"]
    kept = f".minnctapersm {floor}\n" if floor else ".minnctapersm"
    assert (kept in c.asm["ptx"]) == bool(floor), ptxas
    assert ptxas["registers"] <= regs and ptxas["spill_stores"] == 0, ptxas


LN_FLOOR = {"min_programs_per_sm": norms.LN_EIGHT_CHUNKS_PROGRAMS_PER_SM}


@pytest.mark.parametrize("cl,two_byte_ln,want", [
    (CR.ClusterRows(8, 8192, 8), True, (CR.ClusterRows(8, 8192, norms.LN_EIGHT_CHUNKS_WARPS), LN_FLOOR)),
    (CR.ClusterRows(4, 8192, 8), True, (CR.ClusterRows(4, 8192, 8), {})),      # clusters of 4 fill every SM
    (CR.ClusterRows(8, 16384, 16), True, (CR.ClusterRows(8, 16384, 16), {})),
    (CR.ClusterRows(8, 8192, 8), False, (CR.ClusterRows(8, 8192, 8), {})),     # rms_norm, f32 layer_norm
])
def test_persistent_norm_rows(cl, two_byte_ln, want):
    assert norms.persistent_norm_rows(cl, two_byte_ln) == want


@pytest.mark.parametrize("op,n,dtype,want", [
    ("layer_norm", 65536, "bf16", LN_FLOOR), ("layer_norm", 65536, "f16", LN_FLOOR),
    ("layer_norm", 32768, "bf16", {}), ("rms_norm", 65536, "bf16", {}), ("layer_norm", 65536, "f32", {})])
def test_norm_entry_points_pass_the_floor(op, n, dtype, want):
    d = {"bf16": tc.bfloat16, "f16": tc.float16, "f32": tc.float32}[dtype]
    x, w = spec((2, n), d), spec((n,), d)
    launches = norms.plan(x, x, w, w if op == "layer_norm" else None, op == "rms_norm", False, H100)
    assert [(ln.name, dict(ln.options)) for ln in launches] == [("norm_cluster_loop_kernel", want)]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("floor,most", [(2, 255), (3, 168)])
def test_two_byte_layer_norm_clusters_of_8_fit_their_floor(dtype, floor, most):
    # at 4 warps each thread holds 64 centred f32 values and 64 of w and b: the floor of 2
    # (the family table's) bounds them to 255 registers without spills, the H200's 3
    # (tuning.PART_OVERRIDES) to 168, w and b held as packed 16-bit values
    k = CR.norm_cluster_loop_kernel
    sig = next(s for n, s, w in CR.SM90_SIGNATURES if n == k.name and "BLOCK=8192" in s).replace("bf16", dtype)
    c = k.compile(k.specialization(sig), arch="sm_90a", fast_math=True, num_warps=norms.LN_EIGHT_CHUNKS_WARPS,
                  cluster=8, min_programs_per_sm=floor)
    ptxas = c.metadata["ptxas"]
    assert f".minnctapersm {floor}\n" in c.asm["ptx"]
    assert ptxas["registers"] <= most and ptxas["spill_stores"] == 0, ptxas


@pytest.mark.parametrize("n_cols,want", [
    (57345, (8, 8192)),        # 8 x 8 tiles of 1024 idle as many lanes (`split_chunks`)
    (65536, (8, 8192)),        # every chunk full already
    (65537, (5, 16384)),
    (100000, (7, 16384)),
    (200003, (8, 32768)),      # persistent chunks (the limit, LOOP_MIN_CHUNK) keep their clusters
    (20001, (4, 1024)),        # chunks held as tiles keep theirs
    (50257, (7, 1024)),
])
def test_softmax_on_the_fewest_programs_that_cover_a_row(n_cols, want):
    cl = CR.split_chunks(CR.cluster_rows(n_cols, (9, 0), CR.MAX_SOFTMAX_CHUNK), n_cols)
    got = CR.fewer_programs(cl, n_cols, softmax.LOOP_MIN_CHUNK)
    assert (got.c, got.block) == want and got.num_warps == cl.num_warps
    assert CR.fewer_programs(None, n_cols, softmax.LOOP_MIN_CHUNK) is None


def test_softmax_on_clusters_of_a_row_of_only_minus_inf(monkeypatch):
    retune(monkeypatch, "softmax", cluster_min_waves=0)
    x = np.full((2, 16400), -np.inf, np.float32)
    x[1] = np.linspace(-3, 3, 16400)
    for fn, log in ((sk.softmax, False), (sk.log_softmax, True)):
        got = fn(x)
        assert np.isnan(got[0]).all()
        np.testing.assert_allclose(got[1], ref_softmax(x[1:].astype(np.float64), log)[0], rtol=2e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_norms_on_clusters_match_numpy(rowwise, launched, dtype):
    rng = np.random.default_rng(12)
    n = 40007                                             # 5 x 8 tiles of 1024 through windows: the last part-filled
    x = rowwise.host(500 + 4 * rng.standard_normal((2, 3, n)), dtype)
    w = rng.standard_normal(n).astype(np.float32)
    b = rowwise.host(rng.standard_normal(n), dtype)
    x64 = rowwise.f64(x)
    y, mean, rstd = sk.layer_norm(x, w, b, eps=1e-5, return_stats=True)
    # rows off 32-byte sectors, of a ragged length: one row per cluster, chunks as tiles
    assert launched == [("norm_chunks_kernel", 5)]
    want_rstd = 1.0 / np.sqrt(x64.var(-1) + 1e-5)
    want = (x64 - x64.mean(-1, keepdims=True)) * want_rstd[..., None] * w + rowwise.f64(b)
    assert mean.shape == rstd.shape == (2, 3)
    np.testing.assert_allclose(mean, x64.mean(-1), rtol=1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-3)
    rowwise.close(y, want, dtype, scale=8)
    y, rstd = sk.rms_norm(x, w, eps=1e-6, return_stats=True)
    assert launched[-1] == ("norm_chunks_kernel", 5)
    want_rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + 1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-5)
    rowwise.close(y, x64 * want_rstd[..., None] * w, dtype, scale=4)
    y = sk.rms_norm(x)                                    # no weight, no stats
    rowwise.close(y, x64 * want_rstd[..., None], dtype, scale=4)


# ----------------------------------------------------------------------------- kernels, small chunks
@pytest.mark.parametrize("c,n", [(2, 37), (4, 101), (8, 229), (3, 70), (5, 133), (7, 197), (8, 197), (6, 40)])
def test_softmax_kernel_with_small_chunks(c, n):
    # chunks of 32: the last one part-filled (8 x 32 for 197 columns: the last one empty, and
    # for 40 columns on 6 programs four of them)
    rng = np.random.default_rng(c)
    block = 32
    x = (10 * rng.standard_normal((5, n))).astype(np.float32)
    x[2, :40] = -np.inf
    out = np.zeros_like(x)
    with tc.interpret():
        CR.softmax_cluster_kernel[(5 * c,)](x, out, LOG=False, C=c, BLOCK=block, cluster=c)
    np.testing.assert_allclose(out, ref_softmax(x.astype(np.float64)), rtol=2e-5, atol=1e-9)


@pytest.mark.parametrize("c,clusters", [(2, 1), (4, 3), (8, 7), (4, 9)])
def test_persistent_softmax_kernel_walks_rows(c, clusters):
    # clusters < rows: each cluster takes rows c, c + G, ... and loads the next one early;
    # 9 clusters for 7 rows: the last two find no row and must not write anything.
    rng = np.random.default_rng(c + clusters)
    block, n = 32, 32 * (c - 1) + 5
    x = (10 * rng.standard_normal((7, n))).astype(np.float32)
    x[2, :40] = -np.inf                                   # a chunk of only -inf
    x[5] = -np.inf                                        # a row of only -inf: NaN
    out = np.full_like(x, 7.0)
    with tc.interpret():
        CR.softmax_cluster_loop_kernel[(clusters * c,)](x, out, LOG=False, C=c, BLOCK=block, cluster=c)
    want = ref_softmax(x.astype(np.float64))
    assert np.isnan(out[5]).all()
    np.testing.assert_allclose(np.delete(out, 5, 0), np.delete(want, 5, 0), rtol=2e-5, atol=1e-6)
    with tc.interpret():
        CR.softmax_cluster_loop_kernel[(clusters * c,)](x, out, LOG=True, C=c, BLOCK=block, cluster=c)
    want = ref_softmax(x.astype(np.float64), True)
    assert np.isnan(out[5]).all()
    np.testing.assert_allclose(np.delete(out, 5, 0), np.delete(want, 5, 0), rtol=2e-5, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_softmax_of_2_byte_rows_takes_persistent_clusters(rowwise, monkeypatch, launched, dtype):
    retune(monkeypatch, "softmax", loop_min_chunk=8192)    # the interpreter's rows stay small
    # fewer clusters than rows
    monkeypatch.setattr(_common, "HOST_TARGET", replace(_common.HOST_TARGET, clusters_of_8=2))
    retune(monkeypatch, "softmax", cluster_min_waves=0)
    rng = np.random.default_rng(13)
    x = rowwise.host(20 * rng.standard_normal((5, 57345)), dtype)   # 8 chunks of 8192 (`split_chunks`: none)
    for fn, log in ((sk.softmax, False), (sk.log_softmax, True)):
        got = fn(x)
        rowwise.close(got, ref_softmax(rowwise.f64(x), log), dtype, scale=20 if log else 1.0)
    assert launched == [("softmax_cluster_loop_kernel", 8), ("softmax_cluster_loop_kernel", 8)]
    launched.clear()
    sk.softmax(np.zeros((5, 57345), np.float32))           # ragged f32 rows keep one row per cluster
    assert launched == [("softmax_cluster_kernel", 8)]


@pytest.mark.slow
@pytest.mark.parametrize("resident,want", [
    ({8192: 2, 4096: 2}, 6),     # 6 resident programs of 4096 beat 3 of 8192 x 2 clusters (12 vs 6)
    ({8192: 5, 4096: 2}, 3),     # 15 of 8192 beat 12 of 4096
    ({8192: 4, 4096: 2}, 3),     # a tie (12 each) goes to the larger chunks
])
def test_sector_aligned_2_byte_rows_run_persistent_on_the_fewest_programs(rowwise, monkeypatch, launched, resident,
                                                                          want):
    retune(monkeypatch, "softmax", loop_min_chunk=8192)    # the interpreter's rows stay small: 2 x 8192 is the limit
    retune(monkeypatch, "softmax", cluster_min_waves=0)
    monkeypatch.setattr(StaticProbe, "resident_clusters", lambda self, launch: resident[launch.consts["BLOCK"]])
    tiles = CR.split_chunks
    monkeypatch.setattr(CR, "split_chunks", lambda cl, n, itemsize=4, window=0, **kw: cl)   # (chunks as tiles never go persistent)
    rng = np.random.default_rng(23)
    v = 20 * rng.standard_normal((5, 24000))     # 48000-byte rows: on 32-byte sectors
    v[2, :9000] = -np.inf                        # a whole chunk of -inf, in either size
    x = rowwise.host(v, "bf16")
    for fn, log in ((sk.softmax, False), (sk.log_softmax, True)):
        got = fn(x)
        rowwise.close(got, ref_softmax(rowwise.f64(x), log), "bf16", scale=20 if log else 1.0)
    assert launched == [("softmax_cluster_loop_kernel", want)] * 2
    launched.clear()
    monkeypatch.setattr(CR, "split_chunks", tiles)
    sk.softmax(rowwise.host(rng.standard_normal((5, 24001)), "bf16"))         # rows off sectors: one row per cluster
    assert launched[0][0] == "softmax_cluster_kernel"


@pytest.mark.parametrize("n_cols,itemsize,window,want", [
    (65536, 2, 0, []),                                          # 8 chunks of 8192: one row per cluster
    (120000, 2, 0, [(4, 32768, 16), (8, 16384, 8)]),            # past 2 x LOOP_MIN_CHUNK, on sectors
    (65552, 2, 0, []),                                          # chunks as tiles: one row per cluster
    (100000, 2, 0, []),
    (151936, 2, 0, [(5, 32768, 16)]),                           # 10 chunks of 16384: more than a cluster
    (151951, 2, 16, [(5, 32768, 16)]),                          # off sectors: chunks of 32768 only
    (131072, 2, 16, []),                                        # off sectors, chunks of 16384: one row per cluster
    (151936, 4, 0, []),                                         # ragged f32 chunks: one row per cluster
    (262144, 4, 0, [(8, 32768, 32)]),                           # full f32 chunks: staged
])
def test_softmax_loop_plans(n_cols, itemsize, window, want):
    cl = CR.cluster_rows(n_cols, (9, 0), CR.MAX_SOFTMAX_CHUNK)
    cl = CR.split_chunks(cl, n_cols, itemsize, window)
    got = softmax_persistent_candidates(CR.fewer_programs(cl, n_cols, softmax.LOOP_MIN_CHUNK), n_cols, itemsize,
                                        window, TABLES["sm_90"].softmax, CR.ClusterRows)
    assert [(p.c, p.block, p.num_warps) for p, _ in got] == want


def test_softmax_of_full_f32_chunks_takes_staged_persistent_clusters(monkeypatch, launched):
    retune(monkeypatch, "softmax", loop_min_chunk=8192)    # 32768 columns: 4 full chunks of 8192
    monkeypatch.setattr(_common, "HOST_TARGET", replace(_common.HOST_TARGET, clusters_of_8=2))
    retune(monkeypatch, "softmax", cluster_min_waves=0)
    rng = np.random.default_rng(19)
    x = (20 * rng.standard_normal((5, 32768))).astype(np.float32)
    x[1, :20000] = -np.inf                                 # whole chunks of -inf
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(sk.softmax(x), ref_softmax(x64), rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(sk.log_softmax(x), ref_softmax(x64, True), rtol=2e-5, atol=1e-4)
    assert launched == [("softmax_cluster_loop_kernel", 4)] * 2
    assert softmax_persistent_candidates(CR.ClusterRows(4, 8192, 8), 32768, 4, 0, row_tuning(H100).softmax,
                                         CR.ClusterRows) == [(CR.ClusterRows(4, 8192, 8), dict(STAGES=2, EVEN=True))]


@pytest.mark.parametrize("rms", [False, True])
def test_f32_norms_walk_rows_on_fewer_clusters(monkeypatch, launched, rms):
    # 7 rows on 2 clusters: rows c, c + 2, ...
    monkeypatch.setattr(_common, "HOST_TARGET", replace(_common.HOST_TARGET, clusters_of_8=2))
    rng = np.random.default_rng(17)
    n = 32768                                             # 2 full chunks on sectors: persistent clusters
    x = (40 + 3 * rng.standard_normal((7, n))).astype(np.float32)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x64 = x.astype(np.float64)
    if rms:
        y, rstd = sk.rms_norm(x, w, eps=1e-6, return_stats=True)
        want_rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + 1e-6)
        want = x64 * want_rstd[:, None] * w
    else:
        y, mean, rstd = sk.layer_norm(x, w, b, eps=1e-6, return_stats=True)
        want_rstd = 1.0 / np.sqrt(x64.var(-1) + 1e-6)
        want = (x64 - x64.mean(-1, keepdims=True)) * want_rstd[:, None] * w + b
        np.testing.assert_allclose(mean, x64.mean(-1), rtol=1e-6)
    assert launched == [("norm_cluster_loop_kernel", 2)]
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_ragged_f32_rows_on_clusters_take_windows(monkeypatch):
    # 40008 f32 columns, every row on a 32-byte sector but ending inside a 16-byte group:
    # rms_norm and softmax read their chunks through windows (lead 0), rms_norm as chunk tiles
    launched = spy_launches(monkeypatch, (softmax, norms), lambda kernel, cluster, c: (
        kernel.name, c.get("TILES"), c.get("WINDOW")))
    retune(monkeypatch, "softmax", cluster_min_waves=0)
    rng = np.random.default_rng(5)
    n = 40008
    x = (2 + 3 * rng.standard_normal((3, n))).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(sk.rms_norm(x, w, eps=1e-6), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sk.softmax(x), ref_softmax(x64), rtol=2e-5, atol=1e-9)
    assert launched[0] == ("norm_chunks_kernel", 8, 8)
    assert launched[1][0].startswith("softmax_cluster") and launched[1][2] == 8
    launched.clear()
    sk.softmax(x[:, :6008].copy())                        # one tile: column tiles as before
    assert [(k, window) for k, _, window in launched] == [("softmax_tile_kernel", 0)]


@pytest.mark.slow
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("c", [2, 4, 8])
def test_norm_kernel_with_small_chunks_and_empty_ones(c, rms):
    rng = np.random.default_rng(c)
    block = 16
    n = 16 * (c // 2) + 3                                  # the last chunks hold nothing
    x = (7 + 3 * rng.standard_normal((4, n))).astype(np.float32)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y = np.zeros_like(x)
    mean, rstd = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with tc.interpret():
        CR.norm_cluster_kernel[(4 * c,)](x, w, b, y, mean, rstd, 1e-5, RMS=rms, HAS_W=True, HAS_B=not rms,
                                         STATS=True, C=c, BLOCK=block, cluster=c)
    x64 = x.astype(np.float64)
    if rms:
        want_rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + 1e-5)
        want = x64 * want_rstd[:, None] * w
    else:
        want_rstd = 1.0 / np.sqrt(x64.var(-1) + 1e-5)
        want = (x64 - x64.mean(-1, keepdims=True)) * want_rstd[:, None] * w + b
        np.testing.assert_allclose(mean, x64.mean(-1), rtol=1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    # the persistent kernel: 4 rows on 3 clusters, the next row in registers (1 stage) or
    # staged ahead (the interpreter runs tc.range as range)
    for stages in (1, 2):
        y2, rstd2 = np.zeros_like(x), np.zeros(4, np.float32)
        with tc.interpret():
            CR.norm_cluster_loop_kernel[(3 * c,)](x, w, b, y2, mean, rstd2, 1e-5, RMS=rms, HAS_W=True,
                                                  HAS_B=not rms, STATS=True, C=c, BLOCK=block, STAGES=stages,
                                                  cluster=c)
        np.testing.assert_array_equal(y2, y)
        np.testing.assert_array_equal(rstd2, rstd)


# ----------------------------------------------------------------------------- PTX
@pytest.mark.slow
@pytest.mark.parametrize("mod,name,sig,warps", [(CR, *s) for s in CR.SM90_SIGNATURES] +
                         [(NC, *s) for s in NC.SM90_SIGNATURES])
def test_cluster_kernels_assemble_for_sm90a(mod, name, sig, warps):
    k = getattr(mod, name)
    spec = k.specialization(sig)
    c = spec.constexprs["C"]
    compiled = k.compile(spec, arch="sm_90a", num_warps=warps, fast_math=True, cluster=c)
    ptx = compiled.asm["ptx"]
    assert re.search(rf"\.reqnctapercluster\s+{c}\s*,\s*1\s*,\s*1", ptx)
    assert "%cluster_ctarank" in ptx and "barrier.cluster.arrive" in ptx
    if spec.constexprs.get("STAGES", 1) > 1:               # 16-byte accesses of the row: staged copies
        assert re.search(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16", ptx)
    else:                                                   # or loads
        assert "ld.global.v4" in ptx
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and ptxas["spill_loads"] == 0, ptxas
    assert not ptxas["warnings"], ptxas["warnings"]
