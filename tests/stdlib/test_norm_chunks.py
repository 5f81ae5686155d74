"""norm_chunks_kernel (long norm rows on clusters, chunks as tiles of the row's window) under
the interpreter: small tiles, clusters of any size, chunks past the row's end, rows off
32-byte sectors with every lead, w and b gathered or from shifted tables; and the rule that
picks it (norms.use_chunk_tiles)."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec as tc
from tilec.stdlib_kernels import _cluster_rows as CR
from tilec.stdlib_kernels import _norm_chunks as NC
from tilec.stdlib_kernels._common import as_array
from tilec.stdlib_kernels.launches import Launch, StaticProbe
from tilec.target import Target

H100 = Target.from_arch("sm_90a")

norms = importlib.import_module("tilec.stdlib_kernels.norms")


def _tables(p, window, lanes):
    # row L: p shifted right by L lanes, zero outside it (what norms.shift_tables_kernel makes)
    tab = np.zeros((window, lanes), p.dtype)
    for lead in range(window):
        tab[lead, lead:lead + p.size] = p[:lanes - lead]
    return tab


def _refs(x, w, b, rms, eps):
    x64 = x.astype(np.float64)
    if rms:
        rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + eps)
        return x64 * rstd[:, None] * w, None, rstd
    mean = x64.mean(-1)
    rstd = 1.0 / np.sqrt(x64.var(-1) + eps)
    return (x64 - mean[:, None]) * rstd[:, None] * w + b, mean, rstd


MODES = ["held", "early", "one_pass", "reread"]
ONE_PASS_MODES = ("one_pass", "reread")


def _run_and_check(buf, n, w, b, rms, c, tiles, block, window, shifted, tol, stat_tol, mode="held"):
    # norm_chunks_kernel on the rows buf[:, :n] into rows of the same stride, against numpy:
    # y within tol (rtol, atol), rstd and mean within stat_tol (rstd rtol, mean rtol, mean
    # atol), nothing written between the rows
    rows = buf.shape[0]
    x = buf[:, :n]
    out = np.full(buf.shape, 9.0, buf.dtype)
    y = out[:, :n]
    mean, rstd = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    wv, bv = (_tables(w, window, c * tiles * block), _tables(b, window, c * tiles * block)) if shifted else (w, b)
    with tc.interpret():
        NC.norm_chunks_kernel[(rows * c,)](x, wv, bv, y, mean, rstd, 1e-5, RMS=rms, HAS_W=True, HAS_B=not rms,
                                           STATS=True, C=c, BLOCK=block, TILES=tiles, WINDOW=window,
                                           SHIFTED=shifted, EARLY=mode == "early",
                                           ONE_PASS=mode in ONE_PASS_MODES and not rms, REREAD=mode == "reread",
                                           cluster=c)
    want, want_mean, want_rstd = _refs(x, w.astype(np.float64), b.astype(np.float64), rms, 1e-5)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol[0], atol=tol[1])
    np.testing.assert_allclose(rstd, want_rstd, rtol=stat_tol[0])
    if not rms:
        np.testing.assert_allclose(mean, want_mean, rtol=stat_tol[1], atol=stat_tol[2])
    np.testing.assert_array_equal(out[:, n:], 9.0)


@pytest.mark.slow
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("c,tiles,n", [(3, 2, 37), (5, 3, 61), (7, 2, 50), (4, 2, 9), (2, 4, 57)])
@pytest.mark.parametrize("window,shifted", [(0, False), (8, False), (8, True)])
@pytest.mark.parametrize("mode", MODES)
def test_chunk_tiles_match_numpy(rms, c, tiles, n, window, shifted, mode):
    # Tiles of 8 lanes covering the row and its window's lead; through windows the rows are
    # 5 mod 8 elements apart (leads 0..7 over the 8 rows), else 64 bytes; n = 9 on 4 x 2 tiles
    # leaves the last programs' chunks empty.
    rng = np.random.default_rng(c * 100 + n)
    block, rows = 8, 8
    stride = n + (13 - n % 8 if window else 16 - n % 16)
    buf = (50 + 3 * rng.standard_normal((rows, stride))).astype(np.float32)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    _run_and_check(buf, n, w, b, rms, c, tiles, block, window, shifted, (2e-5, 2e-5), (1e-5, 1e-6, 0), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("window", [0, 8])
def test_chunk_tiles_in_place(mode, window):
    # y is x: every program reads its chunk (again, REREAD) before its stores overwrite it,
    # and the row's first element (the shift) before the exchange
    rng = np.random.default_rng(7)
    c, tiles, block, rows, n = 5, 3, 8, 6, 101
    stride = n + (13 - n % 8 if window else 16 - n % 16)
    buf = (20 + 3 * rng.standard_normal((rows, stride))).astype(np.float32)
    x = buf[:, :n]
    w = np.ones(n, np.float32)
    want, want_mean, want_rstd = _refs(x.copy(), w.astype(np.float64), w.astype(np.float64), False, 1e-5)
    mean, rstd = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    with tc.interpret():
        NC.norm_chunks_kernel[(rows * c,)](x, w, w, x, mean, rstd, 1e-5, RMS=False, HAS_W=True, HAS_B=True,
                                           STATS=True, C=c, BLOCK=block, TILES=tiles, WINDOW=window,
                                           SHIFTED=False, EARLY=mode == "early",
                                           ONE_PASS=mode in ONE_PASS_MODES, REREAD=mode == "reread", cluster=c)
    np.testing.assert_allclose(x, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-5)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_chunk_tiles_property(data):
    # any cluster size, tiles per program, row length the lanes cover (with the window's lead),
    # row stride, mean offset, f32 or f16, windows or column tiles, gathered or shifted w and b
    dtype = data.draw(st.sampled_from([np.float32, np.float16]))
    itemsize = np.dtype(dtype).itemsize
    block = 32 // itemsize
    window = data.draw(st.sampled_from([0, block]))
    c, tiles = data.draw(st.integers(2, 8)), data.draw(st.integers(1, 4))
    n = data.draw(st.integers(1, c * tiles * block - max(window - 1, 0)))
    rows, extra = data.draw(st.integers(1, 5)), data.draw(st.integers(0, 20))
    rms, shifted = data.draw(st.booleans()), bool(window) and data.draw(st.booleans())
    mode = data.draw(st.sampled_from(MODES))
    offset = data.draw(st.sampled_from([0.0, 100.0, -1000.0]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    buf = (offset + 3 * rng.standard_normal((rows, n + extra))).astype(dtype)
    w, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    tol = 2e-5 if dtype == np.float32 else 4e-3
    _run_and_check(buf, n, w, b, rms, c, tiles, block, window, shifted, (tol, tol * 8),
                   (1e-4, 1e-5, 1e-5 * max(abs(offset), 1)), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("window", [0, 8])
def test_large_mean_small_spread(mode, window):
    # f32 rows of mean ~100 whose spread is near sqrt(eps): x - mean must not go through a mean
    # rounded to f32 (the one-pass chunks once lost 0.4% there; hypothesis found it)
    buf = np.array([[100.0037, 100.0128] + [5.0] * 18, [99.998, 100.001] + [5.0] * 18,
                    [-1000.0, -999.99] + [5.0] * 18], np.float32)
    w, b = np.array([0.4, -1.1], np.float32), np.array([-0.5, -1.1], np.float32)
    _run_and_check(buf, 2, w, b, False, 2, 1, 8, window, False, (2e-5, 1.6e-4), (1e-4, 1e-5, 1e-3), mode)


@pytest.mark.parametrize("rms,itemsize,c,row_bytes,want", [
    (False, 2, 8, 40002, True), (True, 2, 7, 32, True),        # 2-byte rows: always
    (True, 4, 5, 80004, True), (True, 4, 7, 201028, False),    # f32 rms_norm: up to 5 programs
    (False, 4, 7, 201028, True),                                # f32 layer_norm rows 4 bytes apart: 4-byte copies
    (False, 4, 8, 400032, False), (False, 4, 5, 160032, True)])
def test_use_chunk_tiles(rms, itemsize, c, row_bytes, want):
    assert norms.use_chunk_tiles(rms, itemsize, CR.ClusterRows(c, 1024, 4, 8), row_bytes) == want


@pytest.mark.parametrize("n,itemsize,window,want", [
    (20001, 2, 16, (4, 1024, 4, 5)), (50257, 2, 16, (7, 1024, 4, 8)), (40000, 4, 0, (5, 1024, 4, 8)),
    (16385, 4, 8, (3, 1024, 4, 6)), (100003, 4, 8, (7, 2048, 8, 7)), (70001, 4, 8, (7, 1024, 4, 10)),
    (131000, 4, 0, (8, 16384, 16, 1))])
def test_chunk_tiles_config(n, itemsize, window, want):
    cl = NC.chunk_tiles(n, (9, 0), itemsize, window)
    assert (cl.c, cl.block, cl.num_warps, cl.tiles) == want
    assert cl.c * cl.tiles * cl.block >= n + max(window - 1, 0)    # the window's span fits
    assert NC.chunk_tiles(n, (8, 0), itemsize, window) is None     # no clusters before sm_90


@pytest.mark.parametrize("n,window,tie,want", [
    (32001, 16, False, (2, 16384, 16, 1)), (32001, 16, True, (4, 1024, 4, 8)),
    (65000, 0, True, (8, 1024, 4, 8)), (20001, 16, True, (4, 1024, 4, 5))])   # no tie: tiles either way
def test_chunk_tiles_on_ties(n, window, tie, want):
    # rows whose window fills C power-of-two chunks as exactly as 1024-column tiles do: one
    # tile per program, or (2-byte layer_norm) the tiles
    cl = NC.chunk_tiles(n, (9, 0), 2, window, ties_to_tiles=tie)
    assert (cl.c, cl.block, cl.num_warps, cl.tiles) == want


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rows_whose_window_outgrows_the_clusters_keep_the_old_paths(dtype):
    # 131070 columns off 32-byte sectors: the window's span passes 8 x 16384 lanes, so no chunk
    # tiles; f32 runs persistent, layer_norm of 2-byte rows looped (chunks not filled)
    n = 131070
    assert NC.chunk_tiles(n, (9, 0), np.dtype(dtype).itemsize, 32 // np.dtype(dtype).itemsize) is None
    x = (3 + np.random.default_rng(1).standard_normal((2, n))).astype(dtype)
    w = np.ones(n, dtype)
    y = norms.layer_norm(x, w, None)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-2 if dtype == np.float16 else 1e-4, atol=1e-2)
    xa = as_array(x, "x")
    seen = [ln.name for ln in norms.plan(xa, as_array(y, "out"), as_array(w, "weight"), None, False, False, H100)]
    assert seen == ["norm_cluster_loop_kernel" if dtype == np.float32 else "norm_loop_kernel"]


@pytest.mark.parametrize("rms,itemsize,tiles,want", [
    (False, 2, 5, True), (False, 2, 8, True), (False, 2, 1, False),   # one tile: nothing to hold
    (True, 2, 5, False), (False, 4, 5, False)])
def test_one_pass_only_2byte_layer_norm_chunks_of_tiles(rms, itemsize, tiles, want):
    # H100: 2-byte layer_norm 59-84% of copy -> 75-92%; f32 read again 95 -> 77
    cl = CR.ClusterRows(c=4, block=1024, num_warps=4, tiles=tiles)
    assert NC.one_pass_chunk(rms, itemsize, cl) is want


@pytest.mark.parametrize("c,per_sm,spills,want", [
    (3, 4, 0, False), (4, 4, 0, False),     # small clusters hold the chunk
    (5, 5, 0, False), (6, 5, 0, False),     # the held kernel keeps 5 programs per SM
    (5, 4, 0, True), (7, 4, 0, True), (6, 6, 8, True)])
def test_reread_chunk_from_the_held_kernel(c, per_sm, spills, want):
    class Probe:   # the device's answer for the held kernel
        def resources(self, launch):
            assert launch.consts["REREAD"] is False      # the held kernel is the one compiled
            return SimpleNamespace(max_blocks_per_sm=per_sm, spills=spills)
    cl = CR.ClusterRows(c, 1024, 4, 8)
    launch_of = lambda **more: Launch.of(NC.norm_chunks_kernel, (c,), (), cluster=c, ONE_PASS=True, **more)  # noqa: E731
    assert NC.reread_chunk(Probe(), launch_of, cl) is want
    assert NC.reread_chunk(StaticProbe(H100), launch_of, cl) is (c > NC.HOLD_MAX_C)


@pytest.mark.parametrize("early,late,want", [
    ((3, 0), (3, 0), True),      # as many programs per SM: w and b before the exchange
    ((2, 0), (3, 0), False),     # one fewer
    ((3, 44), (3, 0), False),    # as many, but it spills (f32 7 x 10 tiles)
    ((4, 0), (3, 0), True)])
def test_params_early_compares_the_compiled_kernels(early, late, want):
    per_flag = {True: early, False: late}

    class Probe:
        def resources(self, launch):
            per_sm, spills = per_flag[launch.consts["EARLY"]]
            return SimpleNamespace(max_blocks_per_sm=per_sm, spills=spills)
    launch_of = lambda **more: Launch.of(NC.norm_chunks_kernel, (7,), (), cluster=7, **more)  # noqa: E731
    assert NC.params_early(Probe(), launch_of) is want
    assert NC.params_early(StaticProbe(H100), launch_of) is False


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_long_rows_through_the_entry_points(data):
    # layer_norm / rms_norm of long rows (the clusters' lengths) as users call them: whatever
    # path the rows take (chunk tiles held, read again or with w and b early, persistent
    # clusters, the looped kernel), numpy's result; rows of a wider buffer, an `out` at the
    # same offsets or contiguous, with or without the bias
    dtype = data.draw(st.sampled_from([np.float32, np.float16]))
    n = data.draw(st.one_of(st.integers(16385, 131070), st.sampled_from([32001, 32768, 50257, 65000, 65536])))
    rows, pad = data.draw(st.integers(1, 3)), data.draw(st.sampled_from([0, 1, 7, 16]))
    rms, has_b, same_out = data.draw(st.booleans()), data.draw(st.booleans()), data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    buf = (rng.uniform(-50, 50) + 3 * rng.standard_normal((rows, n + pad))).astype(dtype)
    x = buf[:, :n]
    w = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype) if has_b else None
    out = np.full(buf.shape, 9, dtype)[:, :n] if same_out else None
    x64 = x.astype(np.float64)
    if rms:
        y = norms.rms_norm(x, w, out=out)
        want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w
    else:
        y = norms.layer_norm(x, w, b, out=out)
        want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w
        want = want + (b if has_b else 0)
    rtol, atol = (2e-4, 4e-4) if dtype == np.float32 else (4e-3, 1e-2)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=rtol, atol=atol)
    if same_out:
        assert y is out
