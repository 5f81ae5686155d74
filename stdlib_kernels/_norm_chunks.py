"""Long norm rows of a ragged length or off 32-byte sectors on thread-block clusters (sm_90+),
each program's chunk held as tiles of the row's aligned window.

The persistent norm kernels (`_cluster_rows.norm_cluster_loop_kernel`) hold one
power-of-two chunk per program, read in column tiles: a row whose last chunk is part
full selects per element (2-byte layer_norm spilled there, so such rows ran looped,
reading each row twice), and a row off 32-byte sectors gets no 16-byte access at all
(bf16 rows of 20001: 2-byte loads and stores). Here, as in softmax_cluster_kernel, the C
programs of a cluster share a row, program `rank` holding tiles rank * TILES ...
(rank + 1) * TILES - 1 of it (`_cluster_rows.split_chunks`: 4 to 8 tiles of 1024 columns
at 4 warps where that leaves fewer lanes idle, 2-byte rows past 65536 columns up to 10 of
them or 4 to 8 of 2048 at 8 warps; else one power-of-two tile per program, as
`norm_cluster_rows` sizes it), read and written through the row's
aligned window when it starts off a sector (`_window.py`). Lane j of tile k then holds
column k * BLOCK + j - lead: w and b are gathered per lane, or, SHIFTED, read whole from
row `lead` of their shifted tables (`norms.shift_tables_kernel`, a launch before this
one). The statistics combine as in `_cluster_rows` (chunk means and centred sums of
squares by Chan's formula; rms_norm: the sum of squares).

2-byte layer_norm chunks of several tiles (`one_pass_chunk`) take their statistics in one
pass and load w and b a tile ahead of the stores; the chunk is held across the exchange on
small clusters or where holding it keeps 5 programs per SM, else read again from L2 after
it (`reread_chunk`). Centred in two passes and held, then w and b, they took 106-168
registers (1-4 programs per SM). H100, % of copy, centred and held -> one pass (held or read
again): bf16 8192x20001 78 -> 90 (held), 4096x50257 59 -> 80 (read again), 16384x16385 74 ->
88 (held), 2048x100003 52 -> 75 (read again), 4096x40000 83 -> 92 (read again), 2048x100000
70 -> 69; f32 rows lost read again (95 -> 77: they keep the two passes, and `params_early`).
"""
from __future__ import annotations

from typing import Optional, Tuple

import tilec as tc

from ._cluster_rows import ClusterRows, chan_combine, norm_cluster_rows, params, scale_shift, split_chunks
from ._common import lanewise_sum, lanewise_sum_of_squares, store_row_stats
from ._window import store_row_tile, window_span, window_start, window_tile
from .tuning import TABLES, ClusterTuning

__all__ = ["norm_chunks_kernel", "lanes_of", "lane_params", "chunk_tiles", "params_early", "one_pass_chunk",
           "reread_chunk"]

# 2-byte layer_norm chunks (ONE_PASS) are held across the exchange on clusters of up to
# `hold_max_c` programs, or where the held kernel keeps `hold_min_programs` per SM (`reread_chunk`;
# the sm_90 table's numbers under their old names for tests and docs).
HOLD_MAX_C, HOLD_MIN_PROGRAMS = TABLES["sm_90"].cluster.hold_max_c, TABLES["sm_90"].cluster.hold_min_programs


@tc.func
def lanes_of(x, k, lead, WINDOW: tc.constexpr, BLOCK: tc.constexpr):
    """(column, inside) of each lane of tile k of a row of x, (1, BLOCK) each; through a
    window the column is negative before the row, and inside is one unsigned compare as in
    `window_mask`, whose (groups, GROUP) form costs the single-tile kernel registers here
    instead (bf16 3 x 2048 at 8 warps: 64 -> 94)."""
    cols = k * BLOCK + tc.arange(0, BLOCK)[None, :] - lead
    if WINDOW:
        return cols, cols.astype(tc.uint32) < x.shape[1].astype(tc.uint32)
    return cols, cols < x.shape[1]


@tc.func
def lane_params(w, b, k, cols, inside, lead, HAS_W: tc.constexpr, HAS_B: tc.constexpr, WINDOW: tc.constexpr,
                SHIFTED: tc.constexpr, BLOCK: tc.constexpr):
    """w and b for the lanes of tile k (`lanes_of`'s cols and inside), in their dtype: block k
    of each without a window; through one, gathered at each lane's column or, SHIFTED, row
    `lead` of their (WINDOW, lanes) tables. A part the norm does not have is a 0-d placeholder."""
    if not WINDOW:
        return params(w, b, k, HAS_W, HAS_B, BLOCK)
    wt = 0.0
    bt = 0.0
    if SHIFTED:
        lanes = k * BLOCK + tc.arange(0, BLOCK)[None, :]
        if HAS_W:
            wt = tc.load(w.ptr + lead * w.stride(0) + lanes)
        if HAS_B:
            bt = tc.load(b.ptr + lead * b.stride(0) + lanes)
    else:
        if HAS_W:
            wt = tc.load(w.ptr + cols * w.stride(0), mask=inside, other=0.0)
        if HAS_B:
            bt = tc.load(b.ptr + cols * b.stride(0), mask=inside, other=0.0)
    return wt, bt


@tc.func
def _real_columns(rank, lead, n, SPAN: tc.constexpr):
    # how many of the row's columns chunk `rank` (SPAN lanes of the window) holds
    lo = rank * SPAN - lead
    return tc.maximum(tc.minimum(lo + SPAN, n) - tc.maximum(lo, 0), 0)


@tc.func
def _tile_params(x, w, b, k, lead, HAS_W: tc.constexpr, HAS_B: tc.constexpr, WINDOW: tc.constexpr,
                 SHIFTED: tc.constexpr, BLOCK: tc.constexpr):
    # (wt, bt) of tile k (`lane_params`)
    cols, inside = lanes_of(x, k, lead, WINDOW, BLOCK)
    return lane_params(w, b, k, cols, inside, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK)


@tc.func
def _shifted(x, ts, row, rank, lead, WINDOW: tc.constexpr, BLOCK: tc.constexpr, TILES: tc.constexpr):
    # (shift, the chunk's tiles minus it): shifted by the row's first element, a large mean
    # next to a small spread cancels little in the chunk's sums; lanes outside the row 0
    shift = tc.sum(tc.load(x, offset=(row, 0), shape=(1, 1)).astype(tc.float32))
    ds = ()
    for i in tc.static_range(TILES):
        _, inside = lanes_of(x, rank * TILES + i, lead, WINDOW, BLOCK)
        ds = ds + (tc.where(inside, ts[i] - shift, 0.0),)
    return shift, ds


@tc.func
def _x_tile(x, row, base, lead, n, k, WINDOW: tc.constexpr, BLOCK: tc.constexpr, REALIGN: tc.constexpr = False):
    # tile k of the row (of its window when WINDOW; y's, x realigned into it, when REALIGN)
    # in f32, 0 outside the row
    if WINDOW:
        t, _ = window_tile(x, base, lead, n, k, 0.0, BLOCK, True, REALIGN)
    else:
        t = tc.load(x, index=(row, k), shape=(1, BLOCK), padding=0.0)
    return t.astype(tc.float32)


@tc.kernel
def norm_chunks_kernel(x, w, b, y, mean_out, rstd_out, eps, RMS: tc.constexpr, HAS_W: tc.constexpr,
                       HAS_B: tc.constexpr, STATS: tc.constexpr, C: tc.constexpr, BLOCK: tc.constexpr,
                       TILES: tc.constexpr, WINDOW: tc.constexpr = 0, SHIFTED: tc.constexpr = False,
                       EARLY: tc.constexpr = False, ONE_PASS: tc.constexpr = False,
                       REREAD: tc.constexpr = False, REALIGN: tc.constexpr = False):
    # One row per cluster; program `rank` holds tiles rank * TILES ... of the row (of its
    # window when WINDOW), 0 outside the row. EARLY: w and b loaded right after x, in
    # flight during the statistics and the exchange (`params_early`). ONE_PASS (layer_norm):
    # the chunk's statistics in one pass, w and b loaded a tile ahead of the stores, x held
    # or, REREAD, read again (from L2) after the exchange (`one_pass_chunk`, `reread_chunk`).
    # REALIGN: y's windows and leads, x's row realigned into them (`_window.row_windows`).
    rank = tc.cluster_rank()
    row = tc.program_id(0) // C
    n = x.shape[1]
    lead = 0
    base = x.ptr
    if WINDOW:
        base, lead = window_start(x, row, WINDOW, REALIGN, y)
    ts = ()
    for i in tc.static_range(TILES):
        ts = ts + (_x_tile(x, row, base, lead, n, rank * TILES + i, WINDOW, BLOCK, REALIGN),)
    if ONE_PASS:
        tc.static_assert(not RMS, "ONE_PASS is layer_norm's")
        _one_pass_layer_norm(x, w, b, y, mean_out, rstd_out, eps, ts, row, rank, base, lead, HAS_W, HAS_B, STATS,
                             C, BLOCK, TILES, WINDOW, SHIFTED, REREAD, REALIGN)
        return
    if EARLY:
        if SHIFTED:
            tc.grid_dependency_wait()   # a dependent launch of the tables' kernel: x was read while it ran
        ps = ()
        for i in tc.static_range(TILES):
            ps = ps + (_tile_params(x, w, b, rank * TILES + i, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK),)
    if RMS:
        ds = ts     # zero padding adds nothing to the sum of squares
        centre = 0.0
        mean = 0.0      # (rms_norm stores no mean)
        var = tc.sum(tc.cluster_gather(tc.sum(lanewise_sum_of_squares(ts)), C, padding=0.0)) / n
    else:
        # centred on the chunk's mean
        shift, ds = _shifted(x, ts, row, rank, lead, WINDOW, BLOCK, TILES)
        mean_k = tc.sum(lanewise_sum(ds)) / tc.maximum(_real_columns(rank, lead, n, TILES * BLOCK), 1)
        centred = ()
        for i in tc.static_range(TILES):
            _, inside = lanes_of(x, rank * TILES + i, lead, WINDOW, BLOCK)
            centred = centred + (tc.where(inside, ds[i] - mean_k, 0.0),)
        ds = centred
        means, m2 = tc.cluster_gather((mean_k, tc.sum(lanewise_sum_of_squares(ds))), C, padding=(0.0, 0.0))
        # entries past a cluster of 3, 5, 6 or 7 count no columns
        counts = _real_columns(tc.arange(0, means.shape[0]), lead, n, TILES * BLOCK).astype(tc.float32)
        var, centre, mean = chan_combine(means, m2, counts, n, mean_k, shift)   # x - mean = ds - centre
    rstd = tc.rsqrt(var + eps)
    if SHIFTED and not EARLY:
        tc.grid_dependency_wait()
    for i in tc.static_range(TILES):
        k = rank * TILES + i
        if EARLY:
            wt, bt = ps[i]
        else:   # each tile's loads next to its store: fewer registers than all of them first
            wt, bt = _tile_params(x, w, b, k, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK)
        out = scale_shift((ds[i] - centre) * rstd, wt, bt, HAS_W, HAS_B)
        store_row_tile(y, row, k, out.astype(y.dtype), WINDOW, BLOCK)
    if rank == 0:
        store_row_stats(mean_out, rstd_out, row, mean, rstd, RMS, STATS)


@tc.func
def _one_pass_layer_norm(x, w, b, y, mean_out, rstd_out, eps, ts, row, rank, base, lead, HAS_W: tc.constexpr,
                         HAS_B: tc.constexpr, STATS: tc.constexpr, C: tc.constexpr, BLOCK: tc.constexpr,
                         TILES: tc.constexpr, WINDOW: tc.constexpr, SHIFTED: tc.constexpr, REREAD: tc.constexpr,
                         REALIGN: tc.constexpr):
    # The chunk's sum and sum of squares in one pass (of `_shifted` values), Chan's
    # combination across the cluster, then the chunk (held, or REREAD read again) normalized,
    # tile i + 1's loads issued before tile i's store (a store to y may alias x: no later
    # load moves above it).
    # Through windows the first tile's loads go out before the exchange, in flight during it
    # (H100, % of copy: 8192x20001 83 -> 86, 4096x50257 76 -> 80, 2048x100003 71 -> 75); rows
    # on sectors lost there (2048x100000, 7 x 7 tiles of 2048: 69 -> 56; 4096x40000 even).
    n = x.shape[1]
    shift, ds = _shifted(x, ts, row, rank, lead, WINDOW, BLOCK, TILES)
    s1 = tc.sum(lanewise_sum(ds))
    mean_k = s1 / tc.maximum(_real_columns(rank, lead, n, TILES * BLOCK), 1)
    m2_k = tc.maximum(tc.sum(lanewise_sum_of_squares(ds)) - s1 * mean_k, 0.0)
    k0 = rank * TILES
    if WINDOW:
        if SHIFTED:
            tc.grid_dependency_wait()   # a dependent launch of the tables' kernel: x was read while it ran
        xs = (_x_tile(x, row, base, lead, n, k0, WINDOW, BLOCK, REALIGN) if REREAD else ts[0],)
        ps = (_tile_params(x, w, b, k0, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK),)
    means, m2 = tc.cluster_gather((mean_k, m2_k), C, padding=(0.0, 0.0))
    counts = _real_columns(tc.arange(0, means.shape[0]), lead, n, TILES * BLOCK).astype(tc.float32)
    # The values are x - shift, not centred on mean_k: with 0 for it, the centre is mean -
    # shift, and x - mean = (x - shift) - centre keeps a large mean's digits next to a small
    # spread (x - mean rounded mean to f32 first: f32 rows of offset 100, spread ~0.01 lost 0.4%)
    var, centre, mean = chan_combine(means, m2, counts, n, 0.0, shift)
    rstd = tc.rsqrt(var + eps)
    if not WINDOW:
        xs = (_x_tile(x, row, base, lead, n, k0, WINDOW, BLOCK, REALIGN) if REREAD else ts[0],)
        ps = (_tile_params(x, w, b, k0, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK),)
    for i in tc.static_range(TILES):
        if i + 1 < TILES:
            xs = xs + (_x_tile(x, row, base, lead, n, k0 + i + 1, WINDOW, BLOCK, REALIGN)
                        if REREAD else ts[i + 1],)
            ps = ps + (_tile_params(x, w, b, k0 + i + 1, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK),)
        wt, bt = ps[i]
        out = scale_shift((xs[i] - shift - centre) * rstd, wt, bt, HAS_W, HAS_B)
        store_row_tile(y, row, k0 + i, out.astype(y.dtype), WINDOW, BLOCK)
    if rank == 0:
        store_row_stats(mean_out, rstd_out, row, mean, rstd, False, STATS)


def one_pass_chunk(rms: bool, itemsize: int, cl: ClusterRows) -> bool:
    """ONE_PASS for norm_chunks_kernel: 2-byte layer_norm chunks of more than one tile (a
    chunk of one tile costs no more registers held either way: f16 4096x32001, 2 x 16384,
    69% of copy)."""
    return not rms and itemsize == 2 and cl.tiles > 1


def reread_chunk(probe, launch_of, cl: ClusterRows, t: Optional[ClusterTuning] = None) -> bool:
    """REREAD for norm_chunks_kernel (ONE_PASS) on `cl`, `launch_of(**constexprs)` its Launch:
    the chunk read again after the exchange unless the cluster is of at most HOLD_MAX_C
    programs or the kernel holding it still fits HOLD_MIN_PROGRAMS per SM without spilling
    (`probe.resources`; a probe that cannot tell: read again). H100, % of copy, read again -> held (programs per SM held): bf16 8192x24001 (3
    x 8 tiles) 77 -> 86 (4), 4096x32001 (4 x 8) 74 -> 85 (4), 8192x20001 (4 x 5) 86 -> 90 (7),
    16384x16385 (3 x 6) 84 -> 88 (6), 4096x30001 (5 x 6) 80 -> 84 (5), 4096x36001 (6 x 6) 81 -> 85
    (5); 4096x45001 (6 x 8) 80 -> 80 (4), 4096x50257 (7 x 8) 79 -> 78 (4), 4096x40000 (5 x 8) 92 ->
    87 (4), 2048x100003 (7 x 7 of 2048) 75 -> 72. Host arrays (the interpreter): HOLD_MAX_C alone."""
    t = t or TABLES["sm_90"].cluster
    if cl.c <= t.hold_max_c:
        return False
    held = probe.resources(launch_of(REREAD=False))
    if held is None:
        return True
    return held.spills > 0 or held.max_blocks_per_sm < t.hold_min_programs


def params_early(probe, launch_of) -> bool:
    """EARLY for norm_chunks_kernel, `launch_of(**constexprs)` its Launch: w and b
    loaded before the exchange where the kernel compiled that way fits as many programs per
    SM as the one loading them after it (their registers then cost nothing; where they do,
    fewer programs hide less latency). f32 layer_norm's (2-byte chunks of several tiles are
    read again instead, `reread_chunk`). H100, % of copy, bf16 layer_norm after -> before,
    measured while they were held:
    8192x20001 (4 x 5 tiles, 4 programs per SM either way) 72 -> 79, 2048x100003 (7 x 7 tiles of
    2048, 1) 40 -> 52; 4096x50257 (7 x 8 tiles, 3 -> 2) 59 -> 57, 16384x16385 (3 x 6, 4 -> 3) 75 ->
    70. Never where it spills (f32 7 x 10 tiles: 44 bytes). A probe that cannot tell (the
    interpreter's): False."""
    early = probe.resources(launch_of(EARLY=True))
    if early is None:
        return False
    late = probe.resources(launch_of(EARLY=False))
    return early.spills == 0 and early.max_blocks_per_sm >= late.max_blocks_per_sm


def chunk_tiles(n_cols: int, capability: Tuple[int, int], itemsize: int, window: int,
                ties_to_tiles: bool = False, t: Optional[ClusterTuning] = None) -> Optional[ClusterRows]:
    """The cluster launch of norm_chunks_kernel for rows of `n_cols` read through windows of
    `window` elements (0: column tiles), or None where clusters do not apply: the norms'
    clusters (`norm_cluster_rows`) over the row and its window's lead, held as tiles where
    that leaves fewer lanes idle (`split_chunks`), rows past 8 x 8 tiles of 1024 in the long
    rows' shapes whatever their type (H100, f32 layer_norm, % of copy, one tile of 16384 per
    program -> 7 x 7 tiles of 2048 or 7 x 10 of 1024: 1024x100003 59 -> 82, 2048x70001 49 ->
    81, 1024x90001 57 -> 72). `ties_to_tiles` (2-byte layer_norm, whose chunks of several
    tiles are read again): tiles also where they leave as few lanes idle as one tile per
    program (H100, % of copy, 2 x 16384 -> 4 x 8 tiles of 1024: 4096x32001 f16 69 -> 75,
    4096x32010 bf16 68 -> 76; 4 x 16384 -> 8 x 8: 2048x65000 bf16 61 -> 83; rms_norm even)."""
    span = window_span(n_cols, window)
    return split_chunks(norm_cluster_rows(span, capability, t=t), span, itemsize, window, long_rows=True,
                        ties_to_tiles=ties_to_tiles, t=t)


# Specializations the sm_90a PTX test assembles (tests/stdlib/test_cluster_rows.py), with the
# warps the entry points launch them with (cluster=C, fast_math): windowed rows take x as it
# comes ([?,?]), shifted tables are whole (window, lanes) arrays.
_FLAGS = {"ln": "RMS=False, HAS_W=True, HAS_B=True, STATS=True", "rms": "RMS=True, HAS_W=True, HAS_B=False, STATS=True"}
_ROWS, _ALIGNED, _TABLE, _PARAM = "[?,?]", "[?,?]:div=1x16:stride_div=16x1", "[?,?]:div=1x16:stride_div=16x1", "[?]:div=16"


def _sig(d, norm, c, block, tiles, window, shifted):
    rows = _ROWS if window else _ALIGNED
    p = _TABLE if shifted else (_PARAM if not window else "[?]")
    return (f"x={d}{rows}, w={d}{p}, b={d}{p}, y={d}{rows}, mean_out=f32[?], rstd_out=f32[?], eps=f32, "
            f"{_FLAGS[norm]}, C={c}, BLOCK={block}, TILES={tiles}, WINDOW={window}, SHIFTED={shifted}")


SM90_SIGNATURES = [
    ("norm_chunks_kernel", _sig("bf16", "ln", 7, 1024, 8, 16, True) + ", ONE_PASS=True, REREAD=True", 4),   # 4096x50257 bf16
    ("norm_chunks_kernel", _sig("f16", "rms", 4, 1024, 5, 16, True), 4),      # 8192x20001 f16
    ("norm_chunks_kernel", _sig("f32", "ln", 3, 1024, 6, 8, True), 4),        # 8192x16385 f32
    ("norm_chunks_kernel", _sig("f32", "rms", 5, 1024, 8, 0, False), 4),      # 2048x40000 f32
    ("norm_chunks_kernel", _sig("f32", "ln", 8, 16384, 1, 8, False), 16),     # 5x70001 f32 (no tables under 16 MB)
    ("norm_chunks_kernel", _sig("bf16", "ln", 7, 2048, 7, 16, True) + ", ONE_PASS=True, REREAD=True", 8),   # 2048x100003 bf16
    ("norm_chunks_kernel", _sig("bf16", "ln", 5, 1024, 8, 0, False) + ", ONE_PASS=True, REREAD=True", 4),   # 4096x40000 bf16
    ("norm_chunks_kernel", _sig("f16", "rms", 2, 16384, 1, 16, True), 16),    # 4096x32001 f16 rms_norm (one tile)
    ("norm_chunks_kernel", _sig("bf16", "ln", 4, 1024, 8, 16, True) + ", ONE_PASS=True", 4),   # 4096x32001 (ties), held
    ("norm_chunks_kernel", _sig("bf16", "ln", 4, 1024, 5, 16, True) + ", ONE_PASS=True", 4),   # 8192x20001, held
    ("norm_chunks_kernel", _sig("f32", "ln", 4, 1024, 5, 8, True) + ", EARLY=True", 4),     # params_early
    ("norm_chunks_kernel", _sig("f32", "ln", 7, 2048, 7, 8, False), 8),      # 1024x100003 f32
    ("norm_chunks_kernel", _sig("f32", "ln", 7, 1024, 10, 8, False), 4),     # 2048x70001 f32
    # x's rows read in y's windows (`_window.row_windows`: realigned loads)
    ("norm_chunks_kernel", _sig("bf16", "ln", 7, 1024, 8, 16, True) + ", ONE_PASS=True, REREAD=True, REALIGN=True", 4),
    ("norm_chunks_kernel", _sig("f16", "rms", 4, 1024, 5, 16, True) + ", REALIGN=True", 4),
]
