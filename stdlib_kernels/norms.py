"""layer_norm and rms_norm forward over the last dimension, with the statistics a
backward pass needs (mean and 1/std per row) on request.

A row that fits in one tile (up to 16384 elements) is read once: the mean and
the variance of the centred values come from registers. On sm_90+ a row of up
to 131072 elements (f32 for layer_norm) is shared by the programs of a thread-block cluster and is
read once too (`_cluster_rows`: chunk means and M2 combined with Chan's
formula). Otherwise a longer row is read
twice (from memory once when the rows in flight fit in L2, see
`_common.long_row_launch`): a first pass accumulates, per lane, sums of x - K and (x - K)^2 where K
is the row's first element (shifting by a sample of the data keeps
E[d^2] - E[d]^2 from cancelling catastrophically when the mean is large next
to the spread), then a second pass normalizes. Statistics are f32.
"""
from __future__ import annotations

import builtins
from dataclasses import replace

import numpy as np

import tilec as tc

from . import _cluster_rows, _norm_chunks  # their kernels need sm_90: not in this module's SIGNATURES
from ._cluster_rows import affine, scale_shift
from ._common import (DEPENDENT, MAX_SINGLE_TILE, RowConfig, as_array, check_float, check_same_place, empty_like, lanewise_sum,
                      lanewise_sum_of_squares, launch, long_row_launch, output, row_config, row_stride, rows_of, target_of,
                      split_row, store_row_stats, view)
from ._norm_chunks import lane_params, lanes_of
from ._plan import derived, planned
from ._window import row_windows, single_row_window, store_row_tile, window_span, window_start, window_tile

__all__ = ["layer_norm", "rms_norm"]

# Long rows off 32-byte sectors, of a length off 16 elements or not filling C power-of-two chunks
# run as chunk tiles (`use_chunk_tiles`, `_norm_chunks`). H100, % of copy, persistent -> chunk tiles
# (layer_norm / rms_norm): bf16 8192x20001 21 / 55 -> 72 / 97, 4096x50257 24 / 56 -> 59 / 94; f32
# 4096x20001 48 / 90 -> 95 / 90, 8192x16385 42 / 84 -> 92 / 91, 4096x20008 88 / 93 -> 95 / 99,
# 2048x40008 80 / 93 -> 88 / 96, 2048x40000 93 / 92 -> 92 / 96 (5 programs); on 7 or 8 programs f32
# lost where the persistent kernel moves 16 bytes: 2048x50257 rms 92 -> 81, 1024x100008 93 / 90 ->
# 65 / 77, 1024x100003 rms 93 -> 71 (layer_norm there 51 -> 86 and 51 -> 65: its copies move 4 bytes).
F32_CHUNK_TILES_MAX_C = 5
LN_STAGES = 2  # f32 layer_norm rows on persistent clusters: the current and next chunk in shared memory (3: no faster)
# 2-byte layer_norm rows: chunks of 8192 (65536-element rows: C = 8, see below) with the
# next two rows staged (H200, 4096x65536 bf16: 88.9% of copy at C = 4 / 16 warps / 2 stages, 90.1% at 3
# stages, 90.3% at C = 8 / 8 warps / 3 stages, 68% at 2, 89% at 4; 1024x65536: 84.6%, 84.8%, 86.8%)
LN_CHUNK_2BYTE = 8192
LN_STAGES_2BYTE = 3
# Their clusters of 8 (65536 columns) run at 4 warps with a floor of 2 programs per SM instead: at 8 warps
# they took 144 registers, one program per SM, 15 resident clusters; at 4 warps the floor (`min_programs_per_sm`)
# bounds the registers: 2 fit 255 (no spills), 30 clusters; 3 fit 168 (w and b held as packed 16-bit values),
# 45 clusters. H200, % of copy, 8 warps -> 4 warps floor 3: 1024x65536 bf16 87.4-88.6 -> 89.1-89.2, 4096x65536
# bf16 90.7 -> 92.0, f16 90.5 -> 92.0, 8192x65536 bf16 89.6 -> 90.7. H100 (three sessions), floor 3 -> 2:
# 4096x65536 bf16 93.7 -> 95.4, 1024x65536 bf16 92.6 -> 93.3, 4096x65536 f16 93.7 -> 95.7, 8192x65536 bf16
# 92.8 -> 95.0 (+0.7 to +2.2 points; not re-timed on an H200). Clusters of 4 (32768 columns) lost at 4 warps
# (8192x32768 f16 92.3 -> 90.2).
LN_EIGHT_CHUNKS_WARPS = 4
LN_EIGHT_CHUNKS_PROGRAMS_PER_SM = 2
# A row of one program filling more than 3/4 of a tile of at least this many lanes is held as
# 2 tiles of half of it (4 of a quarter at MAX_SINGLE_TILE): the same lanes and warps in fewer
# registers, so more programs fit per SM (layer_norm bf16 16384 lanes at 16 warps: 91 -> 64
# registers, 1 -> 2 programs; 8192 at 8 warps: 80 -> 64, 3 -> 4). H200, % of copy, one tile
# -> tiles: layer_norm 16384x16384 bf16 61 -> 95, 16384x14336 bf16 56 -> 89, 16384x8192 bf16
# 91 -> 98, 65536x2048 bf16 94.5 -> 99, 8192x16384 f32 86 -> 90; rms_norm equal or up to 2.5
# higher. Rows read through windows keep one tile (16384x7001 bf16 layer_norm: 45 -> 40 with w
# and b gathered), except layer_norm's reading w and b from shift tables, 2-byte or of
# MAX_SINGLE_TILE lanes. H100, % of copy, one tile -> tiles: layer_norm 9586x14001 bf16 70 -> 88,
# 8192x15001 f16 71 -> 88, 19171x7001 bf16 89 -> 93, 20000x6500 bf16 92.5 -> 96.6, 4793x14001
# f32 92 -> 97.5; 9000x7001 f32 95.7 -> 94.4 and rms_norm (14001 bf16 100 -> 97, f32 99 -> 85)
# lost.
HALVE_MIN_BLOCK = 2048
# Windowed rows (off 32-byte sectors) multiply lane j by w[j - lead]: gathered per lane, or,
# from this many bytes of x, read whole from WINDOW shifted copies of w and b made first (one
# launch of SHIFT_TABLE_BLOCK-lane tiles, the row kernel a dependent launch of it that reads
# x while it runs; `_use_shift_tables`). H100, % of copy, gathers -> tables: layer_norm
# 32760x4097 f16 61 -> 91, 19171x7001 bf16 62 -> 90, 130944x1025 bf16 65 -> 94, 4793x14001
# f32 78 -> 92, 9586x14001 bf16 50 -> 70; rms_norm 32760x4097 f16 85 -> 100. Under 16 MB the
# extra launch's host time (about 18 us per call) left tables behind as often as ahead, and
# f32 rms_norm measured the same either way: both keep the gathers. Held in registers by
# programs walking rows of one lead instead, w and b measured slower than either (32760x4097
# f16 layer_norm 47%).
SHIFT_TABLE_MIN_BYTES = 16 << 20
SHIFT_TABLE_BLOCK = 1024


@tc.kernel
def norm_tile_kernel(x, w, b, y, mean_out, rstd_out, eps, RMS: tc.constexpr, HAS_W: tc.constexpr,
                     HAS_B: tc.constexpr, STATS: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr,
                     TILES: tc.constexpr = 1, WINDOW: tc.constexpr = 0, SHIFTED: tc.constexpr = False,
                     REALIGN: tc.constexpr = False):
    # TILES: a row (ROWS = 1) held as that many BLOCK-wide tiles (`norm_tiles`).
    # WINDOW (ROWS = 1): rows off 32-byte sectors, x and y read and written in aligned windows
    # (_window.py); lane j of tile k then holds column k * BLOCK + j - lead, where w and b are
    # gathered (they are small and stay in L1), or, SHIFTED, read whole from row `lead` of
    # their (WINDOW, TILES * BLOCK) tables (`shift_tables_kernel`). REALIGN: y's windows
    # and leads, x's row realigned into them (`_window.row_windows`).
    pid = tc.program_id(0)
    n = x.shape[1]
    lead = 0
    if WINDOW:
        base, lead = window_start(x, pid, WINDOW, REALIGN, y)
    ts = ()
    for k in tc.static_range(TILES):
        if WINDOW:
            t, _ = window_tile(x, base, lead, x.shape[1], k, 0.0, BLOCK, True, REALIGN)
        else:
            t = tc.load(x, index=(pid, k), shape=(ROWS, BLOCK))
        ts = ts + (t.astype(tc.float32),)
    if RMS:
        ds = ts  # zero padding adds nothing to the sum of squares
    else:
        mean = tc.sum(lanewise_sum(ts), axis=1, keep_dims=True) / n
        # Padded columns would add mean^2 each to the variance: mask them.
        ds = ()
        for k in tc.static_range(TILES):
            _, inside = lanes_of(x, k, lead, WINDOW, BLOCK)
            ds = ds + (tc.where(inside, ts[k] - mean, 0.0),)
    rstd = tc.rsqrt(tc.sum(lanewise_sum_of_squares(ds), axis=1, keep_dims=True) / n + eps)
    if SHIFTED:
        # A dependent launch of the tables' kernel: x was read while it ran.
        tc.grid_dependency_wait()
    for k in tc.static_range(TILES):
        cols, inside = lanes_of(x, k, lead, WINDOW, BLOCK)
        wt, bt = lane_params(w, b, k, cols, inside, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK)
        out = scale_shift(ds[k] * rstd, wt, bt, HAS_W, HAS_B)
        store_row_tile(y, pid, k, out.astype(y.dtype), WINDOW, BLOCK, ROWS)
    if STATS:
        if not RMS:
            tc.store(mean_out, index=(pid,), tile=tc.reshape(mean, (ROWS,)))
        tc.store(rstd_out, index=(pid,), tile=tc.reshape(rstd, (ROWS,)))


@tc.kernel
def shift_tables_kernel(w, b, wtab, btab, HAS_W: tc.constexpr, HAS_B: tc.constexpr, BLOCK: tc.constexpr):
    # Row L of each table (WINDOW, P) is its parameter shifted right by L lanes, zero outside
    # it: what lane j of a row whose window starts L elements before it multiplies or adds
    # (`norm_tile_kernel`, SHIFTED). One launch makes both tables; the row kernel (a
    # dependent launch) may start reading x as soon as every program here has started.
    tc.launch_dependents()
    shift = tc.program_id(0)
    lanes = tc.program_id(1) * BLOCK + tc.arange(0, BLOCK)
    if HAS_W:
        _shift_row(w, wtab, shift, lanes)
    if HAS_B:
        _shift_row(b, btab, shift, lanes)


@tc.func
def _shift_row(p, tab, shift, lanes):
    cols = lanes - shift
    v = tc.load(p.ptr + cols * p.stride(0), mask=cols.astype(tc.uint32) < p.shape[0].astype(tc.uint32), other=0.0)
    tc.store(tab.ptr + shift * tab.stride(0) + lanes, v, mask=lanes < tab.shape[1])


@tc.kernel
def norm_loop_kernel(x, w, b, y, mean_out, rstd_out, eps, RMS: tc.constexpr, HAS_W: tc.constexpr,
                     HAS_B: tc.constexpr, STATS: tc.constexpr, BLOCK: tc.constexpr):
    # Rows pid, pid + grid, ...: with a grid of a few programs per SM the rows in
    # flight fit in L2, so pass 2 reads what pass 1 left there (`_long_row_programs`).
    n = x.shape[1]
    n_tiles = tc.cdiv(n, BLOCK)
    cols = tc.arange(0, BLOCK)[None, :]
    for row in range(tc.program_id(0), x.shape[0], tc.num_programs(0)):
        # Pass 1: lane-wise sums of the shifted values and of their squares.
        shift = 0.0
        if not RMS:
            shift = tc.sum(tc.load(x, offset=(row, 0), shape=(1, 1)).astype(tc.float32))
        s1 = tc.zeros((1, BLOCK), tc.float32)
        s2 = tc.zeros((1, BLOCK), tc.float32)
        for k in range(n_tiles):
            t = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
            d = tc.where(k * BLOCK + cols < n, t - shift, 0.0)
            s1 += d
            s2 += d * d
        mean_d = tc.sum(s1) / n
        if RMS:
            mean_d = 0.0
        var = tc.maximum(tc.sum(s2) / n - mean_d * mean_d, 0.0)
        rstd = tc.rsqrt(var + eps)
        mean = mean_d + shift

        # Pass 2: normalize, scale and shift; x - mean as (x - shift) - mean_d, so a large mean
        # next to a small spread keeps its digits (not through mean rounded to f32).
        for k in range(n_tiles):
            t = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
            out = affine((t - shift - mean_d) * rstd, w, b, k, HAS_W, HAS_B, BLOCK)
            tc.store(y, index=(row, k), tile=out.astype(y.dtype))
        store_row_stats(mean_out, rstd_out, row, mean, rstd, RMS, STATS)


_LN = "RMS=False, HAS_W=True, HAS_B=True, STATS=True"
SIGNATURES = {
    "norm_tile_kernel": f"x=f16[?,?], w=f16[?], b=f16[?], y=f16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                        f"eps=f32, {_LN}, ROWS=2, BLOCK=1024",
    "norm_loop_kernel": f"x=bf16[?,?], w=bf16[?], b=bf16[?], y=bf16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                        f"eps=f32, {_LN}, BLOCK=4096",
    "shift_tables_kernel": "w=bf16[?], b=bf16[?], wtab=bf16[?,?], btab=bf16[?,?], HAS_W=True, HAS_B=True, BLOCK=1024",
}
# The options the entry points launch SIGNATURES with (tile elements / 512 warps; tests/test_ptxas.py).
OPTIONS = {"norm_tile_kernel": {"num_warps": 4, "fast_math": True}, "norm_loop_kernel": {"num_warps": 8, "fast_math": True},
           "shift_tables_kernel": {"num_warps": 2, "fast_math": True}}
_RMS = "RMS=True, HAS_W=True, HAS_B=False, STATS=True"
EXTRA_SIGNATURES = [
    ("norm_tile_kernel", f"x=f32[?,?], w=f32[?], b=f32[?,?], y=f32[?,?], mean_out=f32[?,?], rstd_out=f32[?], "
                         f"eps=f32, {_RMS}, ROWS=64, BLOCK=32"),
    ("norm_tile_kernel", f"x=bf16[?,?], w=f32[?], b=f32[?], y=bf16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_LN}, ROWS=1, BLOCK=16384"),
    ("norm_loop_kernel", f"x=f16[?,?], w=f16[?], b=f16[?,?], y=f16[?,?], mean_out=f32[?,?], rstd_out=f32[?], "
                         f"eps=f32, {_RMS}, BLOCK=4096"),
    # rows as three quarter tiles; rows off 32-byte sectors through windows
    ("norm_tile_kernel", f"x=bf16[?,?], w=bf16[?], b=f32[?], y=bf16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_LN}, ROWS=1, BLOCK=2048, TILES=3, WINDOW=16"),
    ("norm_tile_kernel", f"x=f32[?,?], w=f32[?], b=f32[?], y=f32[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_RMS}, ROWS=1, BLOCK=4096, TILES=3"),
    # w and b from shifted tables (`_shift_tables`)
    ("norm_tile_kernel", f"x=bf16[?,?], w=bf16[?,?]:stride_div=16x1, b=bf16[?,?]:stride_div=16x1, y=bf16[?,?], "
                         f"mean_out=f32[?], rstd_out=f32[?], eps=f32, {_LN}, ROWS=1, BLOCK=8192, WINDOW=16, "
                         "SHIFTED=True"),
    # x's rows read in y's windows (`_window.row_windows`: realigned loads)
    ("norm_tile_kernel", f"x=f16[?,?], w=f16[?], b=f16[?], y=f16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_LN}, ROWS=1, BLOCK=2048, TILES=3, WINDOW=16, REALIGN=True"),
    ("norm_tile_kernel", f"x=bf16[?,?], w=bf16[?,?]:stride_div=16x1, b=bf16[?,?]:stride_div=16x1, y=bf16[?,?], "
                         f"mean_out=f32[?], rstd_out=f32[?], eps=f32, {_LN}, ROWS=1, BLOCK=8192, WINDOW=16, "
                         "SHIFTED=True, REALIGN=True"),
]


def _eps_scalar(eps):
    """eps as the launch scalar: a value a launch plan fills in per call (`_plan.planned`)."""
    if not isinstance(eps, (int, float, np.floating, np.integer)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return (np.float32(eps),)


def _norm(x, weight, bias, eps, return_stats, out, rms: bool, op: str):
    a = as_array(x, "x")
    check_float(a, "x")
    if a.ndim == 0:
        raise ValueError(f"{op}: x must have at least 1 dimension")
    n = a.shape[-1]
    named = {"x": a}
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            pa = named[name] = as_array(p, name)
            check_float(pa, name)
            if pa.shape != (n,):
                raise ValueError(f"{op}: {name} has shape {pa.shape}, expected ({n},) (the last dimension of x)")
    check_same_place(named)
    (eps32,) = derived(_eps_scalar, eps)
    o = output(out, a, a.shape, a.dtype)
    stats_shape = a.shape[:-1]
    mean = output(None, a, stats_shape, tc.float32) if return_stats and not rms else None
    rstd = output(None, a, stats_shape, tc.float32) if return_stats else None

    xv, n_rows, n_cols = rows_of(a, "x")
    yv, _, _ = rows_of(o, "out")
    # Parameters a specialization does not use get x's view: their branch is compiled away.
    wv = view(named["weight"], (n,), named["weight"].strides) if weight is not None else xv
    bv = view(named["bias"], (n,), named["bias"].strides) if bias is not None else xv
    mv = view(mean, (n_rows,), (1,)) if mean is not None else xv
    rv = view(rstd, (n_rows,), (1,)) if rstd is not None else xv
    if n_cols > 0:
        # 32 elements per thread in big tiles for 2-byte rows and for rms_norm (measured on
        # an H200 at 8192 columns: f32 rms_norm 3357 -> 4005 GB/s; f32 layer_norm, whose
        # two dependent reductions hold more registers, is faster at 16).
        per_thread = 32 if a.dtype.itemsize == 2 or rms else 16
        cfg = row_config(n_cols, n_rows, big_tile_per_thread=per_thread)
        # Single rows off 32-byte sectors are read and written in aligned windows, the tiles
        # sized for the row plus up to 32 bytes before it (_window.py; packed rows are not).
        # An out at other offsets than x's: its windows, x realigned into them (`row_windows`).
        window, realign = row_windows(a, o) if cfg.single and cfg.rows == 1 else (0, False)
        cfg, window = single_row_window(cfg, n_cols, n_rows, window, big_tile_per_thread=per_thread)
        realign = realign and bool(window)
        flags = dict(RMS=rms, HAS_W=weight is not None, HAS_B=bias is not None, STATS=bool(return_stats),
                     BLOCK=cfg.block)
        args = (xv, wv, bv, yv, mv, rv, eps32)
        # clusters measured on an H200 (4096 x 65536, % of copy, looped -> cluster): rms_norm bf16
        # 63 -> 92, f32 63 -> 93; layer_norm f32 58 -> 91, bf16 69 -> 90 with every chunk full
        # (EVEN: no masks; with them the kernel spills at 16 warps): ragged rows and rows off
        # 32-byte sectors run as chunk tiles instead (`use_chunk_tiles`)
        two_byte_ln = not rms and a.dtype.itemsize == 2
        cl = None if cfg.single else _cluster_rows.norm_cluster_rows(
            n_cols, _cluster_rows.device_capability(a), LN_CHUNK_2BYTE if two_byte_ln else _cluster_rows.MAX_NORM_CHUNK)
        even = cl is not None and n_cols == cl.c * cl.block
        chunks = None
        # An out at other offsets than x's: its windows, x realigned into them (H100, % of copy,
        # ln / rms, column tiles -> realigned: bf16 8192x20001 of a 20016-wide buffer 25 / 37 ->
        # 79 / 90, 4096x50257 of 50304 22 / 42 -> 48 / 82), but for f32 (`row_windows`' tiled).
        tiled_window, tiled_realign = row_windows(a, o, ragged=True, tiled=True) if cl is not None else (0, False)
        if cl is not None and (tiled_window or not even):
            tiled = _norm_chunks.chunk_tiles(n_cols, _cluster_rows.device_capability(a), a.dtype.itemsize,
                                             tiled_window, ties_to_tiles=two_byte_ln)
            row_bytes = row_stride(a, "x") * a.dtype.itemsize if n_rows > 1 else 0
            if tiled is not None and use_chunk_tiles(rms, a.dtype.itemsize, tiled, row_bytes):
                chunks, window, realign = tiled, tiled_window, tiled_realign
        if chunks is None and two_byte_ln and not even:
            cl = None
        # w and b from shifted tables for rows read through windows (single tiles, chunk tiles)
        shifted = bool(window) and _use_shift_tables(n_rows * n_cols * a.dtype.itemsize, a.dtype.itemsize, rms,
                                                     named)
        if cfg.single:
            cfg = norm_tiles(cfg, n_cols, window, halve_window=shifted and not rms and (
                a.dtype.itemsize == 2 or cfg.block >= MAX_SINGLE_TILE))
            flags["BLOCK"] = cfg.block
            options = None
            if shifted:
                args = _shift_tables(named, args, window, cfg.tiles * cfg.block)
                flags["SHIFTED"] = True
                options = DEPENDENT
            launch(norm_tile_kernel, cfg.grid(n_rows), args, cfg.num_warps, options=options, ROWS=cfg.rows,
                   TILES=cfg.tiles, WINDOW=window, REALIGN=realign, **flags)
        elif chunks is not None:
            # Ragged rows or rows off 32-byte sectors: one row per cluster, chunks as tiles of
            # the row's window.
            options = _cluster_rows.chunk_options(chunks, a.dtype.itemsize, target_of(a))
            if shifted:
                args = _shift_tables(named, args, window, chunks.c * chunks.tiles * chunks.block)
                options = dict(options, **DEPENDENT)
            flags.update(C=chunks.c, BLOCK=chunks.block, TILES=chunks.tiles, WINDOW=window, SHIFTED=shifted,
                         REALIGN=realign)
            if _norm_chunks.one_pass_chunk(rms, a.dtype.itemsize, chunks):
                flags["ONE_PASS"] = True
                flags["REREAD"] = _norm_chunks.reread_chunk(a, args, chunks, options, **flags)
            elif not rms:   # (measured on layer_norm)
                flags["EARLY"] = _norm_chunks.params_early(a, args, chunks, options, **flags)
            launch(_norm_chunks.norm_chunks_kernel, chunks.grid(n_rows), args, chunks.num_warps, cluster=chunks.c,
                   options=options, **flags)
        elif cl is not None:
            # One read of the row: a cluster of programs shares it (`_cluster_rows`).
            flags.update(C=cl.c, BLOCK=cl.block, EVEN=even)
            # Persistent clusters holding w and b, the next row in flight during this one's
            # exchange (rms_norm: in registers, f32 85% -> 90-91% of copy, bf16 86% -> 92%;
            # layer_norm, whose centred chunk and w and b leave no registers for it: staged
            # in shared memory, 66% -> 88%).
            stages = 1 if rms else LN_STAGES_2BYTE if two_byte_ln else LN_STAGES
            loop = _cluster_rows.norm_cluster_loop_kernel
            loop_cl, options = persistent_norm_rows(cl, two_byte_ln)
            persistent = _cluster_rows.persistent_grid(a, loop, args, loop_cl, n_rows, options, STAGES=stages,
                                                       **flags)
            if persistent is not None:
                launch(loop, persistent, args, loop_cl.num_warps, cluster=loop_cl.c, options=options, STAGES=stages,
                       **flags)
            else:
                launch(_cluster_rows.norm_cluster_kernel, cl.grid(n_rows), args, cl.num_warps, cluster=cl.c, **flags)
        else:
            # rms_norm keeps one program per row: with one per SM it measured slower on an
            # H200 (1024x65536 bf16: 63% -> 56% of copy; layer_norm 61% -> 68%).
            programs, block, warps = ((n_rows, None, None) if rms else
                                      long_row_launch(n_rows, n_cols, a.dtype.itemsize, target_of(a)))
            flags["BLOCK"] = block or cfg.block
            launch(norm_loop_kernel, (programs,), args, warps or cfg.num_warps, **flags)
    if not return_stats:
        return o.obj
    return (o.obj, rstd.obj) if rms else (o.obj, mean.obj, rstd.obj)


def _use_shift_tables(nbytes: int, itemsize: int, rms: bool, named) -> bool:
    """Whether windowed rows read w and b from shifted tables (SHIFT_TABLE_MIN_BYTES)."""
    has_params = "weight" in named or "bias" in named
    return has_params and nbytes >= SHIFT_TABLE_MIN_BYTES and (itemsize == 2 or not rms)


def _shift_tables(named, args, window: int, lanes: int):
    """The row kernel's `args` (x, w, b, ...) with w and b as (window, lanes) tables whose row L
    is the parameter shifted right by L lanes, zero outside it (`shift_tables_kernel`, launched
    here); a parameter the norm does not have (not in `named`) keeps its view."""
    xv, wv, bv, *rest = args
    w, b = named.get("weight"), named.get("bias")
    tabs = []
    for p, v in ((w, wv), (b, bv)):
        if p is not None:
            tab = empty_like(p, (window, lanes), p.dtype)
            v = view(tab, tab.shape, tab.strides)
        tabs.append(v)
    block = min(lanes, SHIFT_TABLE_BLOCK)
    launch(shift_tables_kernel, (window, tc.cdiv(lanes, block)), (wv, bv, *tabs), builtins.max(block // 512, 1),
           HAS_W=w is not None, HAS_B=b is not None, BLOCK=block)
    return (xv, *tabs, *rest)


def use_chunk_tiles(rms: bool, itemsize: int, chunks: _cluster_rows.ClusterRows, row_bytes: int) -> bool:
    """Whether rows long enough for clusters, off 32-byte sectors, of a length off 16 elements
    or not filling C power-of-two chunks, run norm_chunks_kernel on `chunks` (one row per
    cluster, chunks as tiles of the row's window; `_norm_chunks.chunk_tiles`) rather than the
    persistent cluster kernel: 2-byte rows always; f32 rows on at most F32_CHUNK_TILES_MAX_C
    programs, and f32 layer_norm rows not 16 bytes apart (`row_bytes`), whose staged copies
    move 4 bytes."""
    if itemsize == 2:
        return True
    return chunks.c <= F32_CHUNK_TILES_MAX_C or (not rms and row_bytes % 16 != 0)


def persistent_norm_rows(cl: _cluster_rows.ClusterRows, two_byte_ln: bool):
    """(cl, compile options) of the persistent cluster kernel: 2-byte layer_norm rows in 8
    chunks of LN_CHUNK_2BYTE at LN_EIGHT_CHUNKS_WARPS with a floor of
    LN_EIGHT_CHUNKS_PROGRAMS_PER_SM programs per SM; anything else as `cl`, no options."""
    if two_byte_ln and cl.c == 8 and cl.block == LN_CHUNK_2BYTE:
        return replace(cl, num_warps=LN_EIGHT_CHUNKS_WARPS), {"min_programs_per_sm": LN_EIGHT_CHUNKS_PROGRAMS_PER_SM}
    return cl, {}


def norm_tiles(cfg: RowConfig, n_cols: int, window: int, halve_window: bool = False) -> RowConfig:
    """How a single-tile norm row is held: as `split_row`'s three quarter tiles when it fills
    at most 3/4 of its tile (counting its window's lead); else, unwindowed or `halve_window`,
    as 2 tiles of half of a tile of HALVE_MIN_BLOCK lanes or more (4 quarters of
    MAX_SINGLE_TILE lanes)."""
    split = split_row(cfg, window_span(n_cols, window))
    if split.tiles > 1 or (window and not halve_window) or not cfg.single or cfg.rows != 1 or \
            cfg.block < HALVE_MIN_BLOCK:
        return split
    tiles = 4 if cfg.block >= MAX_SINGLE_TILE else 2
    return replace(cfg, block=cfg.block // tiles, tiles=tiles)


@planned(per_call=_eps_scalar)
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, return_stats: bool = False, out=None):
    """layer_norm(x, weight, bias, eps=1e-5, return_stats=False, out=None) -> y, or (y, mean, rstd).

    y = (x - mean) * rstd * weight + bias over the last dimension, with
    rstd = 1 / sqrt(var + eps) (biased variance, as torch). x: f16, bf16 or f32,
    any leading batch shape (last stride 1, leading dimensions flattenable,
    else ValueError); weight and bias: 1-D of the last dimension's length, any
    of the three float dtypes, or None. y has x's dtype (or is written to
    `out`); mean and rstd are f32 arrays of x.shape[:-1]. Computes in f32.

    Block size: as softmax (`_common.row_config`): rows up to 16384 elements
    are one tile (read once), longer rows loop over 4096-column tiles (read
    twice, statistics from shifted sums). Tiles of 8192+ elements take 32
    elements per thread for f16/bf16 (16 for f32); rms_norm always 32 there.
    A row of one program that fills at most 3/4 of its tile is held as three
    tiles of a quarter of it, 24 elements per thread (`_common.split_row`: 5120
    columns take 3 x 2048 lanes); one that fills more, in a tile of 2048 lanes
    or more, as two tiles of half of it (four quarters at 16384 lanes), which
    takes fewer registers (`norm_tiles`). Such single rows that start off a 32-byte
    sector (4097 bf16 columns) are read and written through aligned windows
    (`_window.py`) when `out`'s rows sit at the same offsets, w and b read from
    their shifted copies made by one small launch first (from 16 MB of x, f16/bf16
    and f32 layer_norm: `_shift_tables`) or else gathered at each lane's column;
    packed rows (up to 1024 columns) are not.

    On sm_90+ (the interpreter counts as an H100/H200) rows of 16385 to 131072
    elements run on thread-block clusters instead, whatever the number of rows:
    C = 2, 4 or 8 programs per row, the smallest whose chunks hold at most 16384
    elements (2-byte layer_norm: 8192, LN_CHUNK_2BYTE); 32 elements per thread
    (`_cluster_rows.norm_cluster_rows`). Each program keeps its chunk in
    registers and exchanges the chunk's mean and centred sum of squares
    (rms_norm: sum of squares) with the others of its cluster
    (tc.cluster_gather), which it combines with Chan's formula: one read of the
    row. Rows on 32-byte sectors that C chunks fill exactly (32768, 65536,
    131072) run on persistent clusters (as many as are resident), w and b
    held, the next row in flight during the exchange (rms_norm: in registers;
    layer_norm: staged in shared memory, LN_STAGES, for 2-byte rows the next
    two, LN_STAGES_2BYTE). Rows off 32-byte sectors, of a length off 16
    elements or that the chunks do not fill run one row per cluster, each
    program's chunk held as 4 to 8 tiles of 1024 columns of the row's aligned
    window (`_norm_chunks`, `use_chunk_tiles`; rows past 65536 columns up to
    10 such tiles or 7 of 2048; f32 rows on more than F32_CHUNK_TILES_MAX_C
    programs keep the persistent kernel where its copies move 16 bytes).
    2-byte chunks of several tiles take their statistics in one pass and are
    held across the exchange or, on clusters of more than 4 programs where
    holding them would leave fewer than 5 programs per SM, read again from L2
    after it (`_norm_chunks.reread_chunk`); f32 chunks load w and b before the
    exchange where that costs no program per SM (`params_early`). Both choices
    compile the kernel's two forms once per shape and ask the driver how many
    programs per SM each fits (no timing).
    """
    return _norm(x, weight, bias, eps, return_stats, out, False, "layer_norm")


@planned(per_call=_eps_scalar)
def rms_norm(x, weight=None, eps: float = 1e-6, return_stats: bool = False, out=None):
    """rms_norm(x, weight, eps=1e-6, return_stats=False, out=None) -> y, or (y, rstd).

    y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) over the last
    dimension. Same dtypes, limits and block-size heuristic as `layer_norm`;
    rstd is f32 of x.shape[:-1]. Long rows of every dtype run on clusters
    (see `layer_norm`).
    """
    return _norm(x, weight, None, eps, return_stats, out, True, "rms_norm")
