"""softmax and log_softmax along the last dimension (other dimensions: softmax_dim.py).

A row that fits in one tile (up to 16384 elements) is read once
and kept in registers: max, exp, sum and the division happen on the tile, and
short rows are packed several to a program. On sm_90+ a longer row (up to
262144 elements) is shared by the programs of a thread-block cluster, each
holding a chunk in registers, and is still read once (`_cluster_rows`).
Otherwise a longer row is read twice: an
online pass keeps, per lane, a running max and a sum of exp(x - max) that is
rescaled whenever the max grows, then a second pass normalizes. A few long
rows are split among programs: per-chunk (max, sum) first, then a launch that
combines them and normalizes. All math is in f32 whatever the storage type.
"""
from __future__ import annotations

import math
from typing import List

import tilec as tc
from tilec.target import Target

from . import _cluster_rows  # its kernels need sm_90: not in this module's SIGNATURES
from . import softmax_dim
from ._common import (DEPENDENT, MAX_SINGLE_TILE, SPLIT_PER_THREAD, SPLIT_PER_THREAD_WINDOW, Arr, as_array,
                      lanewise_max, lanewise_sum, last_dim_rows, next_pow2, normalize_dim, row_config, split_row,
                      target_of)
from ._plan import planned
from .launches import Launch, Operands, StaticProbe, Temp, execute, probe_for
from .schedules import (CLUSTER, LOOPED, ONE_TILE, PERSISTENT_CLUSTER, SPLIT, most_resident, softmax_clusters_eligible,
                        softmax_persistent_candidates, split_chunks_count)
from .tuning import TABLES, row_tuning
from ._window import row_tile, row_windows, store_row_tile, window_span, window_steps, window_steps_of

__all__ = ["softmax", "log_softmax", "plan"]

NEG_INF = float("-inf")


@tc.kernel
def softmax_tile_kernel(x, out, LOG: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr,
                        WINDOW: tc.constexpr = 0, TILES: tc.constexpr = 1, REALIGN: tc.constexpr = False):
    # WINDOW (every kernel here): rows off 32-byte sectors, read and written in aligned
    # windows (_window.py); REALIGN: out's windows, x's rows realigned into them (x's own
    # where only statistics are read). TILES: a row (ROWS = 1) held as that many BLOCK-wide
    # tiles, so that a row just past a power of two leaves few lanes idle (`tile_split`).
    pid = tc.program_id(0)
    # -inf padding: padded columns add exp(-inf) = 0 to the sum and never win the max.
    ts = ()
    for k in tc.static_range(TILES):
        ts = ts + (row_tile(x, pid, k, NEG_INF, WINDOW, BLOCK, ROWS, False, REALIGN, out).astype(tc.float32),)
    # lane-wise across the tiles first: one cross-thread reduction per statistic
    m = tc.max(lanewise_max(ts), axis=1, keep_dims=True)
    # A row of only -inf gives m = -inf and (-inf) - (-inf) = NaN: NaN out, as torch does.
    es = ()
    for k in tc.static_range(TILES):
        es = es + (tc.exp(ts[k] - m),)
    s = tc.sum(lanewise_sum(es), axis=1, keep_dims=True)
    for k in tc.static_range(TILES):
        if LOG:
            y = (ts[k] - m) - tc.log(s)
        else:
            y = es[k] / s
        store_row_tile(out, pid, k, y.astype(out.dtype), WINDOW, BLOCK, ROWS)


@tc.kernel
def softmax_loop_kernel(x, out, LOG: tc.constexpr, BLOCK: tc.constexpr, WINDOW: tc.constexpr = 0,
                        REALIGN: tc.constexpr = False):
    # One program per long row: pass 1 keeps lane-wise running statistics (no
    # cross-thread reduction per tile), pass 2 normalizes.
    row = tc.program_id(0)
    n_tiles = window_steps_of(x.shape[1], WINDOW, BLOCK)
    m, s = _lane_stats(x, row, 0, n_tiles, WINDOW, BLOCK)
    _normalize(x, out, row, 0, n_tiles, m, s, LOG, WINDOW, BLOCK, REALIGN)


@tc.func
def _lane_stats(x, row, k0, n_k, WINDOW: tc.constexpr, BLOCK: tc.constexpr):
    # Lane-wise online max and sum of exp over the row tiles [k0, k0 + n_k), then the
    # (max, sum) of the whole range: tiles past the row are all -inf and add nothing.
    m_lane = tc.full((1, BLOCK), NEG_INF, tc.float32)
    s_lane = tc.zeros((1, BLOCK), tc.float32)
    for k in range(k0, k0 + n_k):
        t = row_tile(x, row, k, NEG_INF, WINDOW, BLOCK).astype(tc.float32)
        m_new = tc.maximum(m_lane, t)
        # While a lane has seen only -inf, shift by 0 so the rescale is exp(-inf) = 0, not NaN.
        m_safe = tc.where(m_new == NEG_INF, 0.0, m_new)
        s_lane = s_lane * tc.exp(m_lane - m_safe) + tc.exp(t - m_safe)
        m_lane = m_new
    m = tc.max(m_lane)
    m_safe = tc.where(m == NEG_INF, 0.0, m)
    return m, tc.sum(s_lane * tc.exp(m_lane - m_safe))


@tc.func
def _normalize(x, out, row, k0, n_k, m, s, LOG: tc.constexpr, WINDOW: tc.constexpr, BLOCK: tc.constexpr,
               REALIGN: tc.constexpr = False):
    # Writes softmax (or log_softmax) of the row tiles [k0, k0 + n_k) given the row's
    # max m and sum of exp(x - m) s; stores past the row's end are skipped.
    log_s = tc.log(s)
    inv_s = 1.0 / s
    for k in range(k0, k0 + n_k):
        t = row_tile(x, row, k, NEG_INF, WINDOW, BLOCK, 1, False, REALIGN, out).astype(tc.float32)
        if LOG:
            y = t - m - log_s
        else:
            y = tc.exp(t - m) * inv_s
        store_row_tile(out, row, k, y.astype(out.dtype), WINDOW, BLOCK)


@tc.kernel
def softmax_partial_kernel(x, m_part, s_part, tiles_per_chunk, BLOCK: tc.constexpr, WINDOW: tc.constexpr = 0):
    # Split rows, pass 1: program (row, c) writes the (max, sum of exp) of its chunk of
    # tiles_per_chunk tiles. Once every program has started, the finish (a dependent launch)
    # may be placed.
    tc.launch_dependents()
    row = tc.program_id(0)
    c = tc.program_id(1)
    m, s = _lane_stats(x, row, c * tiles_per_chunk, tiles_per_chunk, WINDOW, BLOCK)
    tc.store(m_part, index=(row, c), tile=tc.full((1, 1), m, tc.float32))
    tc.store(s_part, index=(row, c), tile=tc.full((1, 1), s, tc.float32))


@tc.kernel
def softmax_finish_kernel(x, out, m_part, s_part, tiles_per_chunk, LOG: tc.constexpr, CHUNKS: tc.constexpr,
                          BLOCK: tc.constexpr, WINDOW: tc.constexpr = 0, REALIGN: tc.constexpr = False):
    # Split rows, pass 2: every program combines its row's chunk statistics (a few
    # dozen numbers) and normalizes its own chunk.
    row = tc.program_id(0)
    c = tc.program_id(1)
    mp = tc.load(m_part, index=(row, 0), shape=(1, CHUNKS), padding=NEG_INF)
    sp = tc.load(s_part, index=(row, 0), shape=(1, CHUNKS), padding=0.0)
    m = tc.max(mp)
    # A chunk of only -inf has s = 0: 0 * exp(-inf) = 0. A row of only -inf gives NaN, as torch.
    s = tc.sum(tc.where(sp == 0.0, 0.0, sp * tc.exp(mp - m)))
    _normalize(x, out, row, c * tiles_per_chunk, tiles_per_chunk, m, s, LOG, WINDOW, BLOCK, REALIGN)


SIGNATURES = {
    "softmax_tile_kernel": "x=f16[?,?], out=f16[?,?], LOG=False, ROWS=2, BLOCK=1024",
    "softmax_loop_kernel": "x=bf16[?,?], out=bf16[?,?], LOG=True, BLOCK=4096",
    "softmax_partial_kernel": "x=f32[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, BLOCK=4096",
    "softmax_finish_kernel": "x=f32[?,?], out=f32[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, "
                             "LOG=False, CHUNKS=32, BLOCK=4096",
}
# The options the entry points launch SIGNATURES with (tile elements / 512 warps; tests/test_ptxas.py).
OPTIONS = {"softmax_tile_kernel": {"num_warps": 4, "fast_math": True}}
OPTIONS.update({k: {"num_warps": 8, "fast_math": True}
                for k in ("softmax_loop_kernel", "softmax_partial_kernel", "softmax_finish_kernel")})
OPTIONS["softmax_finish_kernel"].update(DEPENDENT)
# Further specializations the PTX test assembles: every dtype, both flavours, the
# largest single tile.
EXTRA_SIGNATURES = [
    ("softmax_tile_kernel", "x=f32[?,?], out=f32[?,?], LOG=True, ROWS=64, BLOCK=32"),
    ("softmax_tile_kernel", "x=bf16[?,?], out=bf16[?,?], LOG=False, ROWS=1, BLOCK=16384"),
    ("softmax_loop_kernel", "x=f32[?,?], out=f32[?,?], LOG=False, BLOCK=4096"),
    ("softmax_loop_kernel", "x=f16[?,?], out=f16[?,?], LOG=False, BLOCK=4096"),
    ("softmax_partial_kernel", "x=bf16[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, BLOCK=4096"),
    ("softmax_finish_kernel", "x=bf16[?,?], out=bf16[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, "
                              "LOG=True, CHUNKS=2, BLOCK=4096"),
    # rows off 32-byte sectors, through aligned windows
    ("softmax_tile_kernel", "x=f16[?,?], out=f16[?,?], LOG=False, ROWS=16, BLOCK=128, WINDOW=16"),
    ("softmax_tile_kernel", "x=bf16[?,?], out=bf16[?,?], LOG=True, ROWS=1, BLOCK=2048, WINDOW=16, TILES=3"),
    ("softmax_tile_kernel", "x=f32[?,?], out=f32[?,?], LOG=False, ROWS=1, BLOCK=1024, TILES=3"),
    ("softmax_loop_kernel", "x=f32[?,?], out=f32[?,?], LOG=True, BLOCK=4096, WINDOW=8"),
    ("softmax_partial_kernel", "x=bf16[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, BLOCK=4096, "
                               "WINDOW=16"),
    ("softmax_finish_kernel", "x=bf16[?,?], out=bf16[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, "
                              "LOG=False, CHUNKS=8, BLOCK=4096, WINDOW=16"),
    # x's rows read in out's windows (`row_windows`: realigned loads)
    ("softmax_tile_kernel", "x=f16[?,?], out=f16[?,?], LOG=True, ROWS=16, BLOCK=128, WINDOW=16, REALIGN=True"),
    ("softmax_tile_kernel", "x=bf16[?,?], out=bf16[?,?], LOG=False, ROWS=1, BLOCK=2048, WINDOW=16, TILES=3, "
                            "REALIGN=True"),
    ("softmax_loop_kernel", "x=f32[?,?], out=f32[?,?], LOG=False, BLOCK=4096, WINDOW=8, REALIGN=True"),
    ("softmax_finish_kernel", "x=bf16[?,?], out=bf16[?,?], m_part=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, "
                              "LOG=True, CHUNKS=8, BLOCK=4096, WINDOW=16, REALIGN=True"),
]

# The sm_90 table's numbers under their old names (tests, docs): plans read `row_tuning(target)`.
_T = TABLES["sm_90"].softmax
SPLIT_ROWS, SPLIT_TARGET, MIN_CHUNK_TILES, CLUSTER_MIN_WAVES = _T.split_rows, _T.split_target, _T.min_chunk_tiles, \
    _T.cluster_min_waves
LOOP_MIN_CHUNK, LOOP_WARPS, HALF_LOOP_WARPS, LOOP_STAGES_F32 = _T.loop_min_chunk, _T.loop_warps, _T.half_loop_warps, \
    _T.loop_stages_f32


def plan(x: Arr, out: Arr, log: bool, target: Target, probe=None) -> List[Launch]:
    """The launches of softmax (log_softmax if `log`) of `x`'s rows of its last dimension into
    `out`'s (descriptions: `launches.spec`), on `target`; `probe` answers what depends on the
    compiled kernels (default: `StaticProbe(target)`). Operands: "x" and "out", x's and out's
    rows as 2-D views. The schedules, in order of preference: ONE_TILE, CLUSTER or
    PERSISTENT_CLUSTER, SPLIT, LOOPED (schedules.py; see `softmax`'s docstring for the shapes)."""
    probe = probe or StaticProbe(target)
    t = row_tuning(target).softmax
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    if n_cols == 0 or n_rows == 0:
        return []
    args = ("x", "out")
    # Rows off 32-byte sectors are read and written in aligned windows spanning up to WINDOW - 1
    # elements more than the row, and the tiles are sized for that span; rows past one tile take
    # windows too where their length is not a multiple of 16 elements. An out whose rows start at
    # other offsets than x's is written through its own windows, x realigned into them
    # (`row_windows`); f32 rows past one tile keep column tiles.
    window, realign = row_windows(x, out, ragged=n_cols > MAX_SINGLE_TILE, tiled=n_cols > MAX_SINGLE_TILE)
    span = window_span(n_cols, window)
    cfg = row_config(span, n_rows, big_tile_per_thread=32 if x.dtype.itemsize == 2 else 16)
    if cfg.single:
        cfg = split_row(cfg, span, SPLIT_PER_THREAD_WINDOW if window else SPLIT_PER_THREAD)
        return [Launch.of(softmax_tile_kernel, cfg.grid(n_rows), args, cfg.num_warps, schedule=ONE_TILE, LOG=log,
                          ROWS=cfg.rows, BLOCK=cfg.block, WINDOW=window, TILES=cfg.tiles, REALIGN=realign)]
    ct = row_tuning(target).cluster
    cl = _cluster_rows.cluster_rows(span, target.capability, ct.max_softmax_chunk, t=ct)
    cl = _cluster_rows.split_chunks(cl, span, x.dtype.itemsize, window, t=ct)
    cl = _cluster_rows.fewer_programs(cl, span, t.loop_min_chunk)   # (persistent launches pick their own)
    if softmax_clusters_eligible(cl, n_rows, target.sm_count, t):
        flags = dict(LOG=log, WINDOW=window, REALIGN=realign)
        if not realign:   # (holding the next row's chunk with the realigned reads' shifts spilled)
            def grid_of(cand):
                looped, extra = cand
                ln = Launch.of(_cluster_rows.softmax_cluster_loop_kernel, (0,), args, looped.num_warps,
                               cluster=looped.c, **flags, C=looped.c, BLOCK=looped.block, **extra)
                resident = probe.resident_clusters(ln)
                return None if resident is None else (min(n_rows, resident) * looped.c,)
            cands = softmax_persistent_candidates(cl, span, x.dtype.itemsize, window, t, _cluster_rows.ClusterRows)
            best = most_resident(cands, grid_of)
            if best is not None:
                grid, (looped, extra) = best
                return [Launch.of(_cluster_rows.softmax_cluster_loop_kernel, grid, args, looped.num_warps,
                                  cluster=looped.c, schedule=PERSISTENT_CLUSTER, **flags, C=looped.c,
                                  BLOCK=looped.block, **extra)]
        flags.update(C=cl.c, BLOCK=cl.block)
        if cl.tiles > 1:    # (the persistent kernel holds one tile per program)
            flags["TILES"] = cl.tiles
        options = _cluster_rows.chunk_options(cl, x.dtype.itemsize, target)
        return [Launch.of(_cluster_rows.softmax_cluster_kernel, cl.grid(n_rows), args, cl.num_warps, cluster=cl.c,
                          options=options, schedule=CLUSTER, **flags)]
    n_tiles = window_steps(n_cols, window, cfg.block)
    chunks, per = split_chunks_count(n_rows, n_tiles, t)
    if chunks < 2:
        return [Launch.of(softmax_loop_kernel, cfg.grid(n_rows), args, cfg.num_warps, schedule=LOOPED, LOG=log,
                          BLOCK=cfg.block, WINDOW=window, REALIGN=realign)]
    parts = tuple(Temp(name, (n_rows, chunks), tc.float32) for name in ("m_part", "s_part"))
    return [Launch.of(softmax_partial_kernel, (n_rows, chunks), ("x", "m_part", "s_part", per), cfg.num_warps,
                      temps=parts, schedule=SPLIT, BLOCK=cfg.block, WINDOW=window),
            Launch.of(softmax_finish_kernel, (n_rows, chunks), ("x", "out", "m_part", "s_part", per), cfg.num_warps,
                      options=DEPENDENT, schedule=SPLIT, LOG=log, CHUNKS=next_pow2(chunks), BLOCK=cfg.block,
                      WINDOW=window, REALIGN=realign)]


def _softmax(x, dim, out, log: bool, op: str):
    a = as_array(x, "x")
    if a.ndim > 1 and normalize_dim(dim, a.ndim) != a.ndim - 1:
        return softmax_dim.softmax_along(x, normalize_dim(dim, a.ndim), out, log, op)
    a, o, xv, ov, n_rows, n_cols = last_dim_rows(x, dim, out, op)
    target = target_of(a)
    operands = Operands({"x": a, "out": o}, {"x": xv, "out": ov})
    execute(plan(a, o, log, target, probe_for(operands, a, target)), operands)
    return o.obj


@planned
def softmax(x, dim: int = -1, out=None):
    """softmax(x, dim=-1, out=None) -> exp(x - max) / sum(exp(x - max)) along dimension `dim`.

    x: f16, bf16 or f32, any leading batch shape, rows of any length (1 to
    256k elements and more); the last dimension must have stride 1 and the
    leading ones must flatten into rows without a copy (else ValueError).
    Computes in f32; returns x's dtype, or writes `out` (same shape and dtype,
    may be x itself). A row that is all -inf gives NaN, as in torch.

    Another `dim` (negative counts from the end) sees x as (outer, R, inner)
    with R that dimension; the dimensions before it and those after it must
    each flatten without a copy (else ValueError), with any strides. Each
    program owns a strip of contiguous inner columns: R up to about 16384 /
    (64 bytes of columns) is one tile read once, longer R is read twice
    (online max and sum, then normalize) and split among programs when the
    strips are too few (`softmax_dim.dim_config`). The rest of this text is
    about the last dimension.

    Block size: rows up to 16384 elements are one tile of next_pow2(n) columns,
    with short rows packed until a tile holds 2048 elements; a row of one
    program that fills at most 3/4 of that tile is held as three tiles of a
    quarter of it instead (4097 columns: 3 x 2048 lanes, not 8192), at 24
    elements per thread, 48 for rows read through windows
    (`_common.split_row`); longer rows loop
    over 4096-column tiles (read twice). num_warps = tile elements / 512,
    1..16, or / 1024 for f16/bf16 tiles of 8192 elements or more (see
    `_common.row_config`). Fewer than 264 long rows cannot fill
    the GPU one program per row: each row is then split into chunks of at
    least two tiles (about 1024 programs in all); a first launch writes each
    chunk's max and sum of exp, a second combines them and normalizes.

    On sm_90+ (the interpreter counts as an H100/H200), rows of 16385 to
    262144 elements run on thread-block clusters of C = 2 to 8 programs per
    row when that makes at least two programs per SM (n_rows * C >= 2 * SMs;
    fewer rows take the split path above): the chunk is the power of two that
    C = 2, 4 or 8 programs need to hold at most 8192 elements each (8 with
    chunks of up to 32768), and C the fewest programs that cover the row with
    it (70001 columns: 5 chunks of 16384, `_cluster_rows.fewer_programs`); rows
    of 16385 to 57344 elements are held as 4 to 8 tiles of 1024 per program at
    4 warps instead where that idles fewer lanes, on the fewest programs among
    equals (50257 columns: 7 programs of 8 tiles; `_cluster_rows.split_chunks`),
    asking for 8 programs per SM (the compiler keeps the most that fit);
    f16/bf16 rows of 65537 to 131072 elements the same way in up to 10 tiles
    of 1024, or else 4 to 8 tiles of 2048 at 8 warps (7 on rows on 32-byte
    sectors; 70001 columns: 7 x 10 x 1024; 100277: 7 x 7 x 2048). Each
    program holds its chunk in registers (32 to 80 elements per thread),
    exchanges the chunk's max and sum of exp with the others of its cluster
    (tc.cluster_gather), combines the C pairs and writes its chunk: the row is
    read once (`_cluster_rows.cluster_rows`). softmax of f16/bf16 rows with
    chunks of 32768 (LOOP_MIN_CHUNK) runs on as many persistent clusters as the
    device holds at once, at LOOP_WARPS = 16, each walking rows and loading the
    next row's chunk while it reduces, exchanges and stores the current one; so
    do f32 rows of exactly 8 such chunks (262144 elements), at 32 warps, the next
    chunk staged in shared memory. f16/bf16 rows run persistent on the fewest
    programs that cover them (`schedules.softmax_persistent_candidates`): rows that start on 32-byte sectors
    from 65537 elements that are not held as tiles (from 114689), in chunks of 32768 at 16 warps or of 16384 at 8
    (HALF_LOOP_WARPS), whichever the device keeps more programs of resident
    (151936 columns: 5 x 32768); windowed rows from 131073, in chunks of 32768.

    Rows that start off a 32-byte sector (a row stride of 50257 or 32001
    elements, or 32008 in bf16) are read and written through aligned windows
    (`_window.py`) on every path above; the heuristics then size the tiles for
    the row plus up to 32 bytes of padding before it (n_cols + WINDOW - 1).
    """
    return _softmax(x, dim, out, False, "softmax")


@planned
def log_softmax(x, dim: int = -1, out=None):
    """log_softmax(x, dim=-1, out=None) -> x - max - log(sum(exp(x - max))) along the last dimension.

    Same arguments, dtypes, limits and block-size heuristic as `softmax`.
    """
    return _softmax(x, dim, out, True, "log_softmax")
