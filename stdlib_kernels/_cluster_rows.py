"""Long rows on thread-block clusters (sm_90+): softmax and the norms read such a row once.

A row longer than one program holds in registers (16384 elements) is shared by the
C programs of a cluster (softmax: 2 to 8; the norms: 2, 4 or 8): program `rank`
loads chunk `rank` of the row (BLOCK columns) into registers and reduces it,
exchanges its partial statistics with the other programs of its cluster
(tc.cluster_gather: stores into their shared memory), combines the C partials, and
writes its chunk of the output from the registers it still holds. One read and one
write of the row, where the looped kernels read it twice (or three times when the rows
in flight do not fit in L2).

Statistics per chunk and how they combine:
- softmax: the chunk's max m_k and s_k = sum(exp(x - m_k)); the row's max is max(m_k)
  and its sum sum(s_k * exp(m_k - max)).
- layer_norm: the chunk's mean and M2 = sum((x - mean)^2) over its n_k real columns
  (of x shifted by the row's first element, then mean-centred in registers, so a
  large mean cancels nothing); Chan's formula gives the row's
  mean = sum(n_k mean_k) / n and M2 = sum(M2_k) + sum(n_k (mean_k - mean)^2).
- rms_norm: the chunk's sum of squares; the row's is their sum.
The exchange is st.async stores into the other programs' shared memory, counted on their
mbarriers (`tc.cluster_gather`): no cluster barrier, whose release is a GPU-wide fence that
waited for every store still in flight (H200, softmax 1024x262144 bf16 80% -> 92% of
copy, rms_norm 4096x65536 bf16 85% -> 92%). What bounds these kernels is what is in flight
while a program reduces and waits at the exchange, so the persistent ones keep the next
row loading meanwhile:
- softmax and log_softmax of 2-byte rows whose chunks hold 32768 elements (rows over
  131072) run persistent (softmax_cluster_loop_kernel): as many clusters as can be
  resident (the driver's count, `launches.DeviceProbe`) walk rows c, c + G, ...; at 16
  warps (64 elements per thread, 128 registers) each program holds its chunk in x's
  dtype and issues the next row's loads before this row's reductions; softmax holds
  the f32 exps across the exchange (one exp per element: two made the ex2 unit the
  bound). f32 rows of 262144 (8 full chunks) do too at 32 warps, the next row staged
  in shared memory instead (STAGES = 2: one 128 KB slot, read into registers before
  its refill; EVEN: no -inf padding, whose select per element spilled).
- the norms run persistent too (norm_cluster_loop_kernel), w and b loaded once and held:
  rms_norm (every dtype) loads the next row into registers before this row's reduction
  (STAGES = 1); layer_norm, whose centred chunk and w and b fill the registers,
  stages the next row in shared memory (STAGES = 2, tc.range num_stages; 2-byte rows:
  chunks of 8192 at 8 warps, the next two rows staged). 2-byte
  layer_norm rows need every chunk full (EVEN: no column masks, 940 -> 800 PTX
  instructions; with the masks the kernel spills at 16 warps); ragged ones and rows off
  32-byte sectors run one row per cluster, chunks as tiles (`_norm_chunks`).
The kernels need the sm_90 cluster instructions: the PTX tests assemble them for
sm_90a only (SM90_SIGNATURES), not through `SIGNATURES` (also compiled for sm_80).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Tuple

import tilec as tc
from tilec.target import Target

from ._common import MAX_SINGLE_TILE, lanewise_max, lanewise_sum, next_pow2, store_row_stats
from ._window import row_tile, store_row_tile
from .tuning import TABLES, ClusterTuning, row_tuning

__all__ = ["ClusterRows", "cluster_rows", "split_chunks", "chunk_options", "fewer_programs", "row_chunk_tiles", "chan_combine", "norm_cluster_rows", "softmax_cluster_kernel",
           "softmax_cluster_loop_kernel", "norm_cluster_kernel", "norm_cluster_loop_kernel"]

NEG_INF = float("-inf")

# The sm_90 table's numbers under their old names (tests, docs): the functions below read the
# table they are given (`tuning.row_tuning(target).cluster`), by default the sm_90 one.
_T = TABLES["sm_90"].cluster
CLUSTER_CHUNK, MAX_SOFTMAX_CHUNK, MAX_NORM_CHUNK, PER_THREAD = _T.cluster_chunk, _T.max_softmax_chunk, \
    _T.max_norm_chunk, _T.per_thread
CHUNK_TILE, CHUNK_TILE_WARPS, MIN_CHUNK_TILES, MAX_CHUNK_TILES = _T.chunk_tile, _T.chunk_tile_warps, \
    _T.min_chunk_tiles, _T.max_chunk_tiles
CHUNK_TILE_REGISTERS = _T.chunk_tile_registers
LONG_CHUNK_TILES, LONG_CHUNK_TILE, LONG_CHUNK_TILE_WARPS, LONG_CHUNK_MAX_TILES = _T.long_chunk_tiles, \
    _T.long_chunk_tile, _T.long_chunk_tile_warps, _T.long_chunk_max_tiles
CHUNK_PROGRAMS_PER_SM, CHUNK_PROGRAMS_WARPS = _T.chunk_programs_per_sm, _T.chunk_programs_warps


def _table(t: Optional[ClusterTuning]) -> ClusterTuning:
    return t or TABLES["sm_90"].cluster


@tc.kernel
def softmax_cluster_kernel(x, out, LOG: tc.constexpr, C: tc.constexpr, BLOCK: tc.constexpr,
                           WINDOW: tc.constexpr = 0, TILES: tc.constexpr = 1, REALIGN: tc.constexpr = False):
    # One row per cluster. WINDOW (both softmax kernels): rows off 32-byte sectors, chunk
    # `rank` of their aligned windows (_window.py). TILES: a chunk held as that many
    # BLOCK-wide tiles (tiles rank * TILES ... of the row: `split_chunks`). REALIGN (both):
    # out's windows, x's rows realigned into them (`_window.row_windows`).
    rank = tc.cluster_rank()
    row = tc.program_id(0) // C
    _softmax_row(row_chunk_tiles(x, row, rank, NEG_INF, WINDOW, BLOCK, TILES, False, REALIGN, out), out, row, rank,
                 LOG, C, WINDOW)


@tc.func
def row_chunk_tiles(x, row, rank, pad, WINDOW: tc.constexpr, BLOCK: tc.constexpr, TILES: tc.constexpr,
                    PAST: tc.constexpr = False, REALIGN: tc.constexpr = False, o=None):
    """Chunk `rank` of row `row` as a tuple of TILES tiles (1, BLOCK) in x's dtype, `pad` outside
    the row (PAST: row may be past x's last, then all `pad`): tiles rank * TILES ... of the
    row's window when WINDOW (o's where REALIGN), else of its columns (`_window.row_tile`)."""
    ts = ()
    for k in tc.static_range(TILES):
        ts = ts + (row_tile(x, row, rank * TILES + k, pad, WINDOW, BLOCK, 1, PAST, REALIGN, o),)
    return ts


@tc.kernel
def softmax_cluster_loop_kernel(x, out, LOG: tc.constexpr, C: tc.constexpr, BLOCK: tc.constexpr,
                                STAGES: tc.constexpr = 1, EVEN: tc.constexpr = False, WINDOW: tc.constexpr = 0,
                                REALIGN: tc.constexpr = False):
    # Persistent: cluster c of G takes rows c, c + G, ...; every program of a cluster
    # runs the same rows, so they reach each exchange equally often. The next row's chunk
    # (padding past the last row: no memory access) loads while this row is reduced,
    # exchanged, normalized and stored: STAGES = 1 in registers, issued before this row's
    # reductions; else through shared memory (tc.range num_stages: an f32 chunk of 32768
    # holds one slot, read into registers before its refill).
    rank = tc.cluster_rank()
    step = tc.num_programs(0) // C
    first = tc.program_id(0) // C
    if STAGES == 1:
        nxt = row_chunk_tiles(x, first, rank, NEG_INF, WINDOW, BLOCK, 1, True, REALIGN, out)
        for row in range(first, x.shape[0], step):
            cur = nxt
            nxt = row_chunk_tiles(x, row + step, rank, NEG_INF, WINDOW, BLOCK, 1, True, REALIGN, out)
            _softmax_row(cur, out, row, rank, LOG, C, WINDOW)
    else:
        for row in tc.range(first, x.shape[0], step, num_stages=STAGES):
            if EVEN:
                cur = (tc.load(x, index=(row, rank), shape=(1, BLOCK)),)
            else:
                cur = row_chunk_tiles(x, row, rank, NEG_INF, WINDOW, BLOCK, 1, False, REALIGN, out)
            _softmax_row(cur, out, row, rank, LOG, C, WINDOW)


@tc.func
def _softmax_row(curs, out, row, rank, LOG: tc.constexpr, C: tc.constexpr, WINDOW: tc.constexpr):
    """Chunk `rank` of row `row` (curs: its tiles from `row_chunk_tiles`, in x's dtype) normalized
    with the whole row's max and sum, exchanged in the cluster."""
    TILES = len(curs)
    ts = ()
    for k in tc.static_range(TILES):
        ts = ts + (curs[k].astype(tc.float32),)
    # lane-wise across the tiles first: one cross-thread reduction per statistic
    m = tc.max(lanewise_max(ts))
    # A chunk of only -inf (or past the row's end) shifts by 0: its exps are 0, not NaN.
    m_safe = tc.where(m == NEG_INF, 0.0, m)
    es = ()
    for k in tc.static_range(TILES):
        es = es + (tc.exp(ts[k] - m_safe),)
    # every chunk's max and sum, by rank (entries past a cluster of 3, 5, 6 or 7 add nothing)
    mp, sp = tc.cluster_gather((m, tc.sum(lanewise_sum(es))), C, padding=(NEG_INF, 0.0))
    m_row = tc.max(mp)
    # An empty chunk has s = 0: 0 * exp(-inf) = 0. A row of only -inf: m_row = -inf,
    # (-inf) - (-inf) = NaN, as torch.
    s_row = tc.sum(tc.where(sp == 0.0, 0.0, sp * tc.exp(mp - m_row)))
    if not LOG:
        # The exps held across the exchange (one exp per element; the ex2 unit, not
        # memory, bounded the kernel that took them again: 74% -> 80% of copy).
        scale = tc.where(m == NEG_INF, 0.0, tc.exp(m_safe - m_row) / s_row)
        scale = tc.where(s_row == 0.0, float("nan"), scale)
    for k in tc.static_range(TILES):
        if LOG:
            y = curs[k].astype(tc.float32) - (m_row + tc.log(s_row))   # the chunk held in x's dtype
        else:
            y = es[k] * scale
        store_row_tile(out, row, rank * TILES + k, y.astype(out.dtype), WINDOW, curs[k].shape[1])


@tc.func
def params(w, b, k, HAS_W: tc.constexpr, HAS_B: tc.constexpr, BLOCK: tc.constexpr):
    """Block k of w and b (BLOCK elements each, in their dtype), loaded once and held: the
    cluster kernels issue them before the exchange, never after it (H200, rms_norm 4096x65536
    bf16: loading w after the exchange left its latency in every row, 74% against 81% of
    copy). A part the norm does not have is a 0-d placeholder nothing reads."""
    wt = 0.0
    bt = 0.0
    if HAS_W:
        wt = tc.load(w, index=(k,), shape=(BLOCK,))
    if HAS_B:
        bt = tc.load(b, index=(k,), shape=(BLOCK,))
    return wt, bt


@tc.func
def affine(y, w, b, k, HAS_W: tc.constexpr, HAS_B: tc.constexpr, BLOCK: tc.constexpr):
    """y * w[k] + b[k] in f32 (block k of BLOCK elements; each part where the norm has it):
    the norms' last step in their tile and looped kernels (norms.py). w and b are 1-D:
    their (BLOCK,) tile broadcasts over the rows of y."""
    wt, bt = params(w, b, k, HAS_W, HAS_B, BLOCK)
    return scale_shift(y, wt, bt, HAS_W, HAS_B)


@tc.func
def scale_shift(y, wt, bt, HAS_W: tc.constexpr, HAS_B: tc.constexpr):
    """y * wt + bt in f32, each part where the norm has it (wt, bt from `params`)."""
    if HAS_W:
        y = y * wt.astype(tc.float32)
    if HAS_B:
        y = y + bt.astype(tc.float32)
    return y


@tc.func
def chunk(x, row, rank, RMS: tc.constexpr, BLOCK: tc.constexpr):
    """Chunk `rank` of row `row` in x's dtype (0 past the row's end; no access past the last
    row), and layer_norm's shift: the row's first element (every program reads the same one)."""
    cur = tc.load(x, index=(row, rank), shape=(1, BLOCK))
    shift = 0.0
    if not RMS:
        shift = tc.sum(tc.load(x, offset=(row, 0), shape=(1, 1)).astype(tc.float32))
    return cur, shift


@tc.func
def _norm_row(cur, shift, wt, bt, n, y, mean_out, rstd_out, eps, row, rank, RMS: tc.constexpr, HAS_W: tc.constexpr,
              HAS_B: tc.constexpr, STATS: tc.constexpr, C: tc.constexpr, BLOCK: tc.constexpr, EVEN: tc.constexpr):
    """Chunk `rank` of row `row` (cur, loaded by `chunk`) normalized with the statistics of the
    whole row (the exchange), scaled and shifted by the held `params`."""
    t = cur.astype(tc.float32)
    if RMS:
        centre = 0.0    # t is x itself
        mean = 0.0
        var = tc.sum(tc.cluster_gather(tc.sum(t * t), C)) / n
    else:
        # Values shifted by the row's first element: a large mean next to a small spread
        # then costs no precision in the chunk sums.
        # EVEN (every chunk full): no column to mask, two selects per element fewer.
        if EVEN:
            t = t - shift
        else:
            t = tc.where(rank * BLOCK + tc.arange(0, BLOCK)[None, :] < n, t - shift, 0.0)
        count = tc.maximum(tc.minimum(n - rank * BLOCK, BLOCK), 0)
        mean_k = tc.sum(t) / tc.maximum(count, 1)
        # The centred values are what stays live across the exchange (not t): ptxas then
        # keeps bf16 rows at 80 registers instead of 113.
        if EVEN:
            t = t - mean_k
        else:
            t = tc.where(rank * BLOCK + tc.arange(0, BLOCK)[None, :] < n, t - mean_k, 0.0)
        means, m2 = tc.cluster_gather((mean_k, tc.sum(t * t)), C)
        counts = tc.maximum(tc.minimum(n - tc.arange(0, C) * BLOCK, BLOCK), 0).astype(tc.float32)
        var, centre, mean = chan_combine(means, m2, counts, n, mean_k, shift)   # x - mean = t - centre
    rstd = tc.rsqrt(var + eps)
    out = scale_shift((t - centre) * rstd, wt, bt, HAS_W, HAS_B)
    tc.store(y, index=(row, rank), tile=out.astype(y.dtype))
    if rank == 0:
        store_row_stats(mean_out, rstd_out, row, mean, rstd, RMS, STATS)


@tc.func
def chan_combine(means, m2, counts, n, mean_k, shift):
    """(var, centre, mean) of a row of n columns from its chunks' means and centred sums of
    squares m2 over `counts` columns each ((C,) tiles, entries past the cluster counting 0), by
    Chan's formula; the chunks' values were shifted by `shift` and this chunk's are centred on
    `mean_k`, so x - mean = (its centred value) - centre."""
    mean_d = tc.sum(counts * means) / n
    spread = means - mean_d
    var = (tc.sum(m2) + tc.sum(counts * spread * spread)) / n
    return var, mean_d - mean_k, mean_d + shift


@tc.kernel
def norm_cluster_kernel(x, w, b, y, mean_out, rstd_out, eps, RMS: tc.constexpr, HAS_W: tc.constexpr,
                        HAS_B: tc.constexpr, STATS: tc.constexpr, C: tc.constexpr, BLOCK: tc.constexpr,
                        EVEN: tc.constexpr = False):
    # One row per cluster.
    rank = tc.cluster_rank()
    row = tc.program_id(0) // C
    wt, bt = params(w, b, rank, HAS_W, HAS_B, BLOCK)
    cur, shift = chunk(x, row, rank, RMS, BLOCK)
    _norm_row(cur, shift, wt, bt, x.shape[1], y, mean_out, rstd_out, eps, row, rank, RMS, HAS_W, HAS_B, STATS, C,
              BLOCK, EVEN)


@tc.kernel
def norm_cluster_loop_kernel(x, w, b, y, mean_out, rstd_out, eps, RMS: tc.constexpr, HAS_W: tc.constexpr,
                             HAS_B: tc.constexpr, STATS: tc.constexpr, C: tc.constexpr, BLOCK: tc.constexpr,
                             STAGES: tc.constexpr, EVEN: tc.constexpr = False):
    # Persistent: cluster c of G takes rows c, c + G, ..., w and b held throughout. The next
    # row is in flight while this one is reduced, exchanged and stored: STAGES = 1 in
    # registers (loaded before this row's reductions), else the next STAGES - 1 rows staged
    # in shared memory (tc.range num_stages).
    rank = tc.cluster_rank()
    step = tc.num_programs(0) // C
    first = tc.program_id(0) // C
    n = x.shape[1]
    wt, bt = params(w, b, rank, HAS_W, HAS_B, BLOCK)
    if STAGES == 1:
        nxt, nshift = chunk(x, first, rank, RMS, BLOCK)
        for row in range(first, x.shape[0], step):
            cur, shift = nxt, nshift
            nxt, nshift = chunk(x, row + step, rank, RMS, BLOCK)
            _norm_row(cur, shift, wt, bt, n, y, mean_out, rstd_out, eps, row, rank, RMS, HAS_W, HAS_B, STATS, C,
                      BLOCK, EVEN)
    else:
        for row in tc.range(first, x.shape[0], step, num_stages=STAGES):
            cur, shift = chunk(x, row, rank, RMS, BLOCK)
            _norm_row(cur, shift, wt, bt, n, y, mean_out, rstd_out, eps, row, rank, RMS, HAS_W, HAS_B, STATS, C,
                      BLOCK, EVEN)


# Specializations the sm_90a PTX test assembles (tests/stdlib/test_cluster_rows.py), with the
# warps the entry points launch them with (cluster=C, fast_math).
_LN = "RMS=False, HAS_W=True, HAS_B=True, STATS=True"
_RMS = "RMS=True, HAS_W=True, HAS_B=False, STATS=True"
_NORM = ("x={d}{V2}, w={d}{V1}, b={d}{V1}, y={d}{V2}, mean_out=f32[?], rstd_out=f32[?], eps=f32, {flags}, "
         "C={c}, BLOCK={block}")
_NORM_LOOP = _NORM + ", STAGES={stages}"
_SOFTMAX = "x={d}{V2}, out={d}{V2}, LOG={log}, C={c}, BLOCK={block}"
# The divisibility an entry point's launch of 16-aligned rows specializes on (16-byte accesses).
_V2, _V1 = "[?,?]:div=1x16:stride_div=16x1", "[?]:div=16"
SM90_SIGNATURES = [
    ("softmax_cluster_kernel", _SOFTMAX.format(V2=_V2, d="bf16", log=False, c=8, block=16384), 16),
    ("softmax_cluster_kernel", _SOFTMAX.format(V2=_V2, d="f32", log=False, c=8, block=32768), 32),
    ("softmax_cluster_kernel", _SOFTMAX.format(V2=_V2, d="f16", log=True, c=8, block=8192), 8),
    # chunks as tiles (`split_chunks`), rows on sectors and off them
    ("softmax_cluster_kernel", _SOFTMAX.format(V2=_V2, d="bf16", log=False, c=8, block=1024) + ", TILES=5", 4),
    ("softmax_cluster_kernel", _SOFTMAX.format(V2="[?,?]", d="f16", log=True, c=4, block=1024) + ", WINDOW=16, TILES=5",
     4),
    ("softmax_cluster_kernel", _SOFTMAX.format(V2=_V2, d="f32", log=False, c=8, block=1024) + ", TILES=3", 4),
    # clusters of 6 and 7 (split_chunks): the gather padded to 8 entries
    ("softmax_cluster_kernel", _SOFTMAX.format(V2=_V2, d="bf16", log=False, c=6, block=1024) + ", TILES=4", 4),
    ("softmax_cluster_kernel", _SOFTMAX.format(V2="[?,?]", d="f16", log=True, c=7, block=1024) + ", WINDOW=16, TILES=4",
     4),
    # 8 tiles of 1024 per program, the most split_chunks asks for (96 registers without a floor)
    ("softmax_cluster_kernel",
     _SOFTMAX.format(V2="[?,?]", d="bf16", log=False, c=7, block=1024) + ", WINDOW=16, TILES=8", 4),
    # 2-byte rows over 65536 (split_chunks): 10 tiles of 1024, 7 of 2048 at 8 warps
    ("softmax_cluster_kernel",
     _SOFTMAX.format(V2="[?,?]", d="bf16", log=True, c=7, block=1024) + ", WINDOW=16, TILES=10", 4),
    ("softmax_cluster_kernel",
     _SOFTMAX.format(V2="[?,?]", d="f16", log=False, c=7, block=2048) + ", WINDOW=16, TILES=7", 8),
    # x's rows read in out's windows (`_window.row_windows`: realigned loads)
    ("softmax_cluster_kernel",
     _SOFTMAX.format(V2="[?,?]", d="bf16", log=False, c=7, block=2048) + ", WINDOW=16, TILES=7, REALIGN=True", 8),
    ("softmax_cluster_kernel",
     _SOFTMAX.format(V2="[?,?]", d="f16", log=True, c=5, block=32768) + ", WINDOW=16, REALIGN=True", 16),
    ("softmax_cluster_loop_kernel", _SOFTMAX.format(V2=_V2, d="bf16", log=False, c=8, block=32768), 16),
    ("softmax_cluster_loop_kernel", _SOFTMAX.format(V2=_V2, d="f16", log=True, c=8, block=32768), 16),
    # rows on sectors, on the fewest programs (schedules.softmax_persistent_candidates): 3 to 5 x 32768, 5 to 8 x 16384 at 8 warps
    ("softmax_cluster_loop_kernel", _SOFTMAX.format(V2=_V2, d="bf16", log=True, c=5, block=32768), 16),
    ("softmax_cluster_loop_kernel", _SOFTMAX.format(V2=_V2, d="bf16", log=False, c=7, block=16384), 8),
    ("softmax_cluster_loop_kernel", _SOFTMAX.format(V2=_V2, d="f16", log=True, c=5, block=16384), 8),
    ("softmax_cluster_loop_kernel", _SOFTMAX.format(V2=_V2, d="f32", log=False, c=8, block=32768) + ", STAGES=2, EVEN=True",
     32),
    ("softmax_cluster_loop_kernel", _SOFTMAX.format(V2=_V2, d="f32", log=True, c=8, block=32768) + ", STAGES=2, EVEN=True",
     32),
    ("norm_cluster_kernel", _NORM.format(V2=_V2, V1=_V1, d="bf16", flags=_RMS, c=4, block=16384), 16),
    ("norm_cluster_loop_kernel", _NORM_LOOP.format(V2=_V2, V1=_V1, d="bf16", flags=_RMS, c=4, block=16384,
                                                   stages=1), 16),
    ("norm_cluster_loop_kernel", _NORM_LOOP.format(V2=_V2, V1=_V1, d="f16", flags=_RMS, c=8, block=16384,
                                                   stages=1), 16),
    ("norm_cluster_kernel", _NORM.format(V2=_V2, V1=_V1, d="f32", flags=_LN, c=2, block=16384), 16),
    ("norm_cluster_loop_kernel", _NORM_LOOP.format(V2=_V2, V1=_V1, d="f32", flags=_RMS, c=4, block=16384,
                                                   stages=1), 16),
    ("norm_cluster_loop_kernel", _NORM_LOOP.format(V2=_V2, V1=_V1, d="f32", flags=_LN, c=4, block=16384,
                                                   stages=2), 16),
    ("norm_cluster_loop_kernel", _NORM_LOOP.format(V2=_V2, V1=_V1, d="f32", flags=_LN, c=8, block=16384,
                                                   stages=2), 16),
    ("norm_cluster_loop_kernel", _NORM_LOOP.format(V2=_V2, V1=_V1, d="bf16", flags=_LN, c=8, block=8192,
                                                   stages=3) + ", EVEN=True", 4),   # norms.persistent_norm_rows
    ("norm_cluster_loop_kernel", _NORM_LOOP.format(V2=_V2, V1=_V1, d="f16", flags=_LN, c=8, block=16384,
                                                   stages=3) + ", EVEN=True", 16),
]


# ----------------------------------------------------------------------------- the heuristic
@dataclass(frozen=True)
class ClusterRows:
    """How a long-row kernel runs on clusters: C programs per row, each holding TILES tiles of
    BLOCK columns."""
    c: int
    block: int
    num_warps: int
    tiles: int = 1

    def grid(self, n_rows: int) -> Tuple[int]:
        return (n_rows * self.c,)


def cluster_rows(n_cols: int, capability: Tuple[int, int], max_chunk: int, chunk: Optional[int] = None,
                 per_thread: Optional[int] = None, t: Optional[ClusterTuning] = None) -> Optional[ClusterRows]:
    """The cluster launch of rows of `n_cols` elements, or None where it does not apply.

    Applies on sm_90+ to rows longer than one program's tile (MAX_SINGLE_TILE) and at
    most 8 * max_chunk long (MAX_SOFTMAX_CHUNK, MAX_NORM_CHUNK). C is the smallest of
    2, 4, 8 whose chunks hold at most `chunk` elements (8 beyond that, with longer
    chunks); BLOCK = next_pow2(cdiv(n_cols, C)); num_warps = BLOCK / (32 * per_thread),
    so every thread holds `per_thread` elements (softmax: 8192-element chunks at 8 warps).
    """
    t = _table(t)
    chunk = t.cluster_chunk if chunk is None else chunk
    per_thread = t.per_thread if per_thread is None else per_thread
    if tuple(capability) < (9, 0) or n_cols <= MAX_SINGLE_TILE:
        return None
    c = next((c for c in (2, 4, 8) if tc.cdiv(n_cols, c) <= chunk), 8)
    block = next_pow2(tc.cdiv(n_cols, c))
    if block > max_chunk:
        return None
    return ClusterRows(c, block, min(max(block // (32 * per_thread), 1), 32))


def split_chunks(cl: Optional[ClusterRows], n_cols: int, itemsize: int = 4,
                 window: int = 0, long_rows: Optional[bool] = None,
                 ties_to_tiles: bool = False, t: Optional[ClusterTuning] = None) -> Optional[ClusterRows]:
    """`cl` with each chunk held as MIN_CHUNK_TILES to MAX_CHUNK_TILES tiles of CHUNK_TILE columns
    at CHUNK_TILE_WARPS, on a cluster of any size from 2 to 8, where that leaves fewer lanes
    idle than cl's one power-of-two tile per program (the fewest idle lanes; ties go to fewer
    programs, more tiles each); else `cl`. Rows of 2-byte types (`itemsize`) too long for that
    take up to LONG_CHUNK_TILES of those tiles, or else 4 to 8 tiles of LONG_CHUNK_TILE
    (LONG_CHUNK_MAX_TILES on rows on 32-byte sectors, `window` 0); `long_rows` True gives
    rows of any type those shapes (the norms' chunk tiles); `ties_to_tiles`, tiles where they
    leave as few lanes idle as cl (2-byte layer_norm, `_norm_chunks.one_pass_chunk`). For softmax_cluster_kernel
    (TILES; compile options: `chunk_options`). Measured on an H200, % of copy, one tile ->
    tiles: softmax 8192x16400 bf16 65 -> 94, 8192x20001 bf16 (rows off sectors) 66 -> 95,
    4096x40001 bf16 64 -> 92, log_softmax 4096x40000 f16 77 -> 97, 2048x20001 f32 81 -> 97; up
    to 8 tiles with a floor of programs per SM (the numbers at CHUNK_TILE_REGISTERS). Ties to
    fewer programs: 4096x40001 bf16 softmax 5 x 8 tiles 98.1, 8 x 5 94.8; 4096x45000 bf16 6 x 8
    97.9, 8 x 6 96.1 (8192x24000 bf16: 3 x 8 98.0, 4 x 6 99.4). Lost: three tiles (24 per
    thread; log_softmax 4096x24576 bf16 88 -> 80), tiles of 2048 at 8 warps where 1024 fit
    (4096x45000 bf16 70 -> 64 on 6 programs, 4096x50257 bf16 93.4 on 5 x 5 against 95.7 on 7 x 8
    tiles of 1024) and of 4096 at 16 (2048x100000 bf16 63 -> 49)."""
    if cl is None:
        return None
    t = _table(t)
    shapes = [(t.chunk_tile, t.chunk_tile_warps, t.max_chunk_tiles)]
    if long_rows or (long_rows is None and itemsize == 2):
        shapes += [(t.chunk_tile, t.chunk_tile_warps, t.long_chunk_tiles),
                   (t.long_chunk_tile, t.long_chunk_tile_warps,
                    t.long_chunk_max_tiles if not window else t.max_chunk_tiles)]
    for block, warps, most in shapes:
        tiles = {c: tc.cdiv(tc.cdiv(n_cols, c), block) for c in range(2, 9)}
        fits = [c for c in tiles if t.min_chunk_tiles <= tiles[c] <= most]
        if fits:
            c = min(fits, key=lambda c: (c * tiles[c], c))
            lanes = c * tiles[c] * block
            if lanes > cl.c * cl.block or (lanes == cl.c * cl.block and not ties_to_tiles):
                return cl
            return ClusterRows(c, block, warps, tiles[c])
    return cl


def chunk_options(cl: ClusterRows, itemsize: int, target: Target) -> dict:
    """softmax_cluster_kernel's compile options on `cl`: for chunks held as tiles
    (`split_chunks`), a floor of the programs per SM of `target` that CHUNK_TILE_REGISTERS
    registers allow;
    for 2-byte chunks at CHUNK_PROGRAMS_WARPS warps, of CHUNK_PROGRAMS_PER_SM. Where a floor
    spills, the compiler keeps the highest lower one that fits (dsl/compiler.py)."""
    t = row_tuning(target).cluster
    if cl.tiles > 1:
        return {"min_programs_per_sm": target.registers_per_sm // (t.chunk_tile_registers * 32 * cl.num_warps)}
    if itemsize == 2 and cl.num_warps == t.chunk_programs_warps:
        return {"min_programs_per_sm": t.chunk_programs_per_sm}
    return {}


def fewer_programs(cl: Optional[ClusterRows], n_cols: int, max_block: int) -> Optional[ClusterRows]:
    """`cl` (one power-of-two tile per program, BLOCK below `max_block`) on the fewest programs
    that cover a row, cdiv(n_cols, BLOCK) of them: 3, 5, 6 or 7 where a power of two would
    leave a chunk empty or nearly so. Measured on an H200 (% of copy), clusters of 8 -> fewer:
    softmax 4096x50257 bf16 75 -> 80 (7), 4096x45000 bf16 69 -> 82 (6), 2048x100000 bf16 64 ->
    67 (7 x 16384), 2048x50257 f32 91 -> 93 (7). Where `split_chunks` applies it measured
    better on the whole (4096x40001 bf16: 8 x 5 tiles of 1024 92, 5 x 8192 85)."""
    if cl is None or cl.tiles != 1 or cl.block >= max_block:
        return cl
    return replace(cl, c=tc.cdiv(n_cols, cl.block))


def norm_cluster_rows(n_cols: int, capability: Tuple[int, int], chunk: Optional[int] = None,
                      t: Optional[ClusterTuning] = None) -> Optional[ClusterRows]:
    """The norms' cluster launch of rows of `n_cols` elements, or None: `cluster_rows` with
    chunks of up to `chunk` elements (at most MAX_NORM_CHUNK), 32 per thread (a 16384-element
    chunk: 16 warps). Measured on an H200 at 4096x65536 (% of copy): f32 rms_norm 90% in
    chunks of 8192 at 8 warps, 91% in chunks of 16384 at 16; the staged f32 layer_norm
    needs the 16384-element chunks (69% at 8192 and 8 warps: one program per SM); bf16
    rms_norm on persistent clusters 92% at 16384 / 16 warps, 91% at 16384 / 8; bf16
    layer_norm 90% at 8192 / 8 warps with 3 stages (norms.LN_CHUNK_2BYTE).
    """
    t = _table(t)
    return cluster_rows(n_cols, capability, t.max_norm_chunk, chunk=t.max_norm_chunk if chunk is None else chunk, t=t)
