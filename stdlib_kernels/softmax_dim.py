"""softmax and log_softmax along a dimension other than the last.

x is seen as (outer, R, inner), R the softmax dimension (`_common.slab_view`). Each
program owns a strip of contiguous inner columns of one outer slab (`reductions.slab_grid`
fits any number of them in the grid) and reduces down R per column, so every load reads
whole 16-byte groups of the rows it touches:
- R up to a tile (`dim_config`): the strip is one tile, read once and written once, 64
  elements per thread so that most of the reduction down R stays within threads;
- longer R: a first pass keeps, per lane, a running max and a sum of exp(x - max) that
  is rescaled whenever the max grows; a second pass normalizes (read twice);
- too few strips to fill the GPU: R is also split among programs. A first launch writes
  each split's per-column (max, sum); the second merges every split's pair and
  normalizes its own split, BLOCK_R splits at a time.
All math is in f32 whatever the storage type.
"""
from __future__ import annotations

import builtins
from typing import List

import tilec as tc
from tilec.target import Target

from ._common import DEPENDENT, Arr, as_array, check_float, flat_group, next_pow2, output, slab_view, target_of
from .launches import Launch, Operands, execute
from .schedules import LOOPED, ONE_TILE, SPLIT
from .reductions import inner_config, partials_temp, slab_grid, slab_strip, split_count, strip_config

__all__ = ["softmax_along", "plan"]

NEG_INF = float("-inf")
SINGLE_TILE = 16384      # most elements of a one-tile strip
MIN_STRIP_BYTES = 32     # narrowest strip row: one 32-byte sector
MAX_STRIP_BYTES = 1024   # widest: as the reductions' strips
TILE_F32 = 16384         # a one-tile strip's wanted elements when R is short (f32; 2-byte types: half)
PER_THREAD = 64          # elements per thread of a one-tile strip: num_warps = tile / (32 * PER_THREAD)
PROGRAMS_WANTED = 528    # one-tile strips are narrowed (down to MIN_STRIP_BYTES) until this many programs
# Looped 2-byte strips: `reductions.strip_config` with this many programs. H100, % of copy (old: the
# reductions' 1 KB strips of 16 KB tiles at 8 warps, up to 1024 programs -> 128-column strips of 8 KB tiles
# at 4 warps, 512 programs): dim 0 of 8192x8192 bf16 56.9 -> 60.1, 4096x4096 f16 45.1 -> 58.3,
# 65536x2048 bf16 55.3 -> 59.8. f32 kept the old strips (16384x8192 62.5 -> 59.4 with these).
LOOP_PROGRAMS_2BYTE = 512
# H200, % of copy by (BLOCK_I / warps) for one-tile strips: (16, 150, 65536) dim 1 f32 64/8 91, 32/4 84,
# 32/8 84, 16/8 77; bf16 32/4 75, 32/8 47, 64/8 52; (64, 19, 262144) f16 128/2 82, 256/4 76, 256/8 39;
# (256, 7, 65536) bf16 512/2 91, 1024/4 91, 512/8 57: the reduction down the strip wants its rows
# within a thread (64 elements each) rather than spread over more warps.


@tc.func
def _strip(x, o, k, j, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr):
    # -inf padding: rows past R never win the max and add exp(-inf) = 0 to the sum
    return tc.load(x, index=(o, k, j), shape=(1, BLOCK_R, BLOCK_I), padding=NEG_INF).astype(tc.float32)


@tc.func
def _normalized(t, m, s, LOG: tc.constexpr):
    # A column of only -inf has m = -inf: (-inf) - (-inf) = NaN out, as torch.
    if LOG:
        return (t - m) - tc.log(s)
    return tc.exp(t - m) / s


@tc.kernel
def softmax_dim_tile_kernel(x, out, LOG: tc.constexpr, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr,
                            STRIPS_FIRST: tc.constexpr = False):
    # Program (o, j): columns [j * BLOCK_I, ...) of slab o, all R (<= BLOCK_R) rows in one tile.
    o, j = slab_strip(STRIPS_FIRST)
    t = _strip(x, o, 0, j, BLOCK_R, BLOCK_I)
    m = tc.max(t, axis=1, keep_dims=True)
    e = tc.exp(t - m)
    s = tc.sum(e, axis=1, keep_dims=True)
    if LOG:
        y = (t - m) - tc.log(s)
    else:
        y = e / s
    tc.store(out, index=(o, 0, j), tile=y.astype(out.dtype))


@tc.func
def _online(m_lane, s_lane, m_in, s_in):
    # Lane-wise merge of running (max, sum of exp(x - max)) pairs with new ones (a value t
    # is the pair (t, 1)). While a lane has seen only -inf, shift by 0: exp(-inf) = 0, not NaN.
    m_new = tc.maximum(m_lane, m_in)
    shift = tc.where(m_new == NEG_INF, 0.0, m_new)
    return m_new, s_lane * tc.exp(m_lane - shift) + s_in * tc.exp(m_in - shift)


@tc.func
def _merge(m_lane, s_lane):
    # the lanes' pairs down axis 1 merged into one per column
    m = tc.max(m_lane, axis=1, keep_dims=True)
    shift = tc.where(m == NEG_INF, 0.0, m)
    return m, tc.sum(s_lane * tc.exp(m_lane - shift), axis=1, keep_dims=True)


@tc.func
def _column_stats(x, o, j, k0, k1, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr):
    # Per column of the strip: (max, sum of exp(x - max)) over row tiles [k0, k1), each lane
    # keeping its own running pair (no cross-thread reduction per tile).
    m_lane = tc.full((1, BLOCK_R, BLOCK_I), NEG_INF, tc.float32)
    s_lane = tc.zeros((1, BLOCK_R, BLOCK_I), tc.float32)
    for k in range(k0, k1):
        m_lane, s_lane = _online(m_lane, s_lane, _strip(x, o, k, j, BLOCK_R, BLOCK_I), 1.0)
    return _merge(m_lane, s_lane)


@tc.func
def _split_stats(m_part, s_part, o, j, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr):
    # Per column of the strip: every split's pair (rows of m_part / s_part) merged, BLOCK_R
    # splits at a time.
    m_lane = tc.full((1, BLOCK_R, BLOCK_I), NEG_INF, tc.float32)
    s_lane = tc.zeros((1, BLOCK_R, BLOCK_I), tc.float32)
    for k in range(tc.cdiv(m_part.shape[1], BLOCK_R)):
        m_lane, s_lane = _online(m_lane, s_lane,
                                 tc.load(m_part, index=(o, k, j), shape=(1, BLOCK_R, BLOCK_I), padding=NEG_INF),
                                 tc.load(s_part, index=(o, k, j), shape=(1, BLOCK_R, BLOCK_I), padding=0.0))
    return _merge(m_lane, s_lane)


@tc.kernel
def softmax_dim_stats_kernel(x, m_part, s_part, tiles_per_split, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr,
                             STRIPS_FIRST: tc.constexpr = False):
    # Program (o, j, p): the per-column (max, sum) of row tiles [p * tiles_per_split, ...) of
    # strip j, to row p of m_part / s_part (outer, splits, inner; f32). Tiles past R are all
    # padding (no memory traffic), so the last split needs no bound. Once every program has
    # started, the normalizing pass (a dependent launch) may be placed.
    tc.launch_dependents()
    o, j = slab_strip(STRIPS_FIRST)
    p = tc.program_id(2)
    m, s = _column_stats(x, o, j, p * tiles_per_split, (p + 1) * tiles_per_split, BLOCK_R, BLOCK_I)
    tc.store(m_part, index=(o, p, j), tile=m)
    tc.store(s_part, index=(o, p, j), tile=s)


@tc.kernel
def softmax_dim_loop_kernel(x, out, m_part, s_part, tiles_per_split, LOG: tc.constexpr, SPLIT: tc.constexpr,
                            BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr, STRIPS_FIRST: tc.constexpr = False):
    # Program (o, j, p) normalizes row tiles [p * tiles_per_split, ...) of strip j. SPLIT: the
    # column statistics come from every split's pair (m_part / s_part); else from the
    # program's own first pass over the strip (m_part / s_part unused).
    o, j = slab_strip(STRIPS_FIRST)
    p = tc.program_id(2)
    k0 = p * tiles_per_split
    if SPLIT:
        m, s = _split_stats(m_part, s_part, o, j, BLOCK_R, BLOCK_I)
    else:
        m, s = _column_stats(x, o, j, 0, tiles_per_split, BLOCK_R, BLOCK_I)
    for k in range(k0, k0 + tiles_per_split):
        y = _normalized(_strip(x, o, k, j, BLOCK_R, BLOCK_I), m, s, LOG)
        tc.store(out, index=(o, k, j), tile=y.astype(out.dtype))


SIGNATURES = {
    "softmax_dim_tile_kernel": "x=f32[?,?,?], out=f32[?,?,?], LOG=False, BLOCK_R=128, BLOCK_I=32",
    "softmax_dim_stats_kernel": "x=bf16[?,?,?], m_part=f32[?,?,?], s_part=f32[?,?,?], tiles_per_split=i32, "
                                "BLOCK_R=32, BLOCK_I=128",
    "softmax_dim_loop_kernel": "x=f16[?,?,?], out=f16[?,?,?], m_part=f16[?,?,?], s_part=f16[?,?,?], "
                               "tiles_per_split=i32, LOG=True, SPLIT=False, BLOCK_R=32, BLOCK_I=128",
}
# The options the entry point launches SIGNATURES with (tests/test_ptxas.py).
OPTIONS = {"softmax_dim_tile_kernel": {"num_warps": 2, "fast_math": True},
           "softmax_dim_stats_kernel": {"num_warps": 4, "fast_math": True},
           "softmax_dim_loop_kernel": {"num_warps": 4, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("softmax_dim_tile_kernel", "x=bf16[?,?,?], out=bf16[?,?,?], LOG=True, BLOCK_R=512, BLOCK_I=32"),
    ("softmax_dim_loop_kernel", "x=f32[?,?,?], out=f32[?,?,?], m_part=f32[?,?,?], s_part=f32[?,?,?], "
                                "tiles_per_split=i32, LOG=False, SPLIT=True, BLOCK_R=16, BLOCK_I=256"),
    # strips past grid axis 1's limit (`reductions.slab_grid`)
    ("softmax_dim_tile_kernel", "x=f32[?,?,?], out=f32[?,?,?], LOG=False, BLOCK_R=4, BLOCK_I=256, STRIPS_FIRST=True"),
    ("softmax_dim_stats_kernel", "x=bf16[?,?,?], m_part=f32[?,?,?], s_part=f32[?,?,?], tiles_per_split=i32, "
                                 "BLOCK_R=16, BLOCK_I=512, STRIPS_FIRST=True"),
    ("softmax_dim_loop_kernel", "x=bf16[?,?,?], out=bf16[?,?,?], m_part=f32[?,?,?], s_part=f32[?,?,?], "
                                "tiles_per_split=i32, LOG=True, SPLIT=True, BLOCK_R=16, BLOCK_I=512, STRIPS_FIRST=True"),
    # strided columns (20000 x 13, last stride 3): the 16-byte stores of the column pairs
    # anchor the strip's layout, spread over its 256 rows (a minute of ptxas and 43 KB of
    # spills when it was spread over the stored 1 x 16)
    ("softmax_dim_stats_kernel", "x=f32[?,?,?]:strided:align=4:div=1x16x1:stride_div=16x1x1, "
                                 "m_part=f32[?,?,?]:div=1x16x1:stride_div=16x16x1, "
                                 "s_part=f32[?,?,?]:div=1x16x1:stride_div=16x16x1, tiles_per_split=i32, "
                                 "BLOCK_R=256, BLOCK_I=16"),
]


def dim_config(r: int, inner: int, outer: int, itemsize: int):
    """(single, BLOCK_R, BLOCK_I, num_warps, splits) of softmax along a middle dimension of
    R rows over `inner` columns in `outer` slabs.

    single: R fits one tile with strips of at least MIN_STRIP_BYTES (32 bytes) per row,
    next_pow2(R) x BLOCK_I <= SINGLE_TILE (16384) elements: each strip is read once. Its
    BLOCK_I is the widest power of two up to MAX_STRIP_BYTES (1 KB) rows and TILE_F32
    (16384; 8192 for 2-byte types) elements per tile, halved (down to 32 bytes) while
    fewer than PROGRAMS_WANTED (528) programs cover the array; num_warps = tile /
    (32 * PER_THREAD), 1..16 (64 elements per thread). Otherwise looped strips: for f32
    the reductions' (`reductions.inner_config`: 256 columns, 4096-element tiles at 8
    warps; R split by `reductions.split_count`), for f16/bf16 `reductions.strip_config`
    (128 columns, 8 KB tiles at 4 warps) with R split until LOOP_PROGRAMS_2BYTE (512)
    programs run. splits: how many programs share a strip's rows (1 for one tile).
    """
    widest = next_pow2(inner)
    narrowest = builtins.min(widest, builtins.max(MIN_STRIP_BYTES // itemsize, 1))
    block_r = next_pow2(r)
    if block_r * narrowest > SINGLE_TILE:
        if itemsize <= 2:
            return (False, *strip_config(outer, r, inner, itemsize, LOOP_PROGRAMS_2BYTE))
        block_r, block_i, warps = inner_config(r, inner, itemsize)
        splits = split_count(outer * tc.cdiv(inner, block_i), tc.cdiv(r, block_r), itemsize)
        return False, block_r, block_i, warps, splits
    tile = TILE_F32 if itemsize == 4 else TILE_F32 // 2
    block_i = builtins.min(widest, MAX_STRIP_BYTES // itemsize, builtins.max(tile // block_r, 1))
    block_i = builtins.max(block_i, narrowest)
    while block_i > narrowest and outer * tc.cdiv(inner, block_i) < PROGRAMS_WANTED:
        block_i //= 2
    warps = builtins.min(builtins.max(block_r * block_i // (32 * PER_THREAD), 1), 16)
    return True, block_r, block_i, warps, 1


def plan(x: Arr, out: Arr, dim: int, log: bool, target: Target) -> List[Launch]:
    """The launches of softmax (log: log_softmax) of `x` along `dim` (not its last dimension)
    into `out` (descriptions), on `target`. Operands: "x" and "out" as (outer, R, inner) slab
    views (`slab_view`). The schedules: ONE_TILE per strip when R fits one (`dim_config`), else
    LOOPED strips, or SPLIT strips (statistics per split, then a dependent launch normalizing)."""
    if out.numel == 0:
        return []
    outer, _ = flat_group(x.shape[:dim], x.strides[:dim], "x")
    inner, _ = flat_group(x.shape[dim + 1:], x.strides[dim + 1:], "x")
    r = x.shape[dim]
    single, block_r, block_i, warps, splits = dim_config(r, inner, outer, x.dtype.itemsize)
    strips = tc.cdiv(inner, block_i)
    if single:
        grid, first = slab_grid(outer, strips)
        return [Launch.of(softmax_dim_tile_kernel, grid, ("x", "out"), warps, schedule=ONE_TILE, LOG=log,
                          BLOCK_R=block_r, BLOCK_I=block_i, STRIPS_FIRST=first)]
    n_tiles = tc.cdiv(r, block_r)
    if splits == 1:
        # the partials are not touched: the output view stands in for them
        grid, first = slab_grid(outer, strips)
        return [Launch.of(softmax_dim_loop_kernel, grid, ("x", "out", "out", "out", n_tiles), warps, schedule=LOOPED,
                          LOG=log, SPLIT=False, BLOCK_R=block_r, BLOCK_I=block_i, STRIPS_FIRST=first)]
    per = tc.cdiv(n_tiles, splits)
    splits = tc.cdiv(n_tiles, per)      # every split holds at least one real tile
    parts = tuple(partials_temp(name, outer, splits, inner) for name in ("m_part", "s_part"))
    grid, first = slab_grid(outer, strips, splits)
    return [Launch.of(softmax_dim_stats_kernel, grid, ("x", "m_part", "s_part", per), warps, temps=parts,
                      schedule=SPLIT, BLOCK_R=block_r, BLOCK_I=block_i, STRIPS_FIRST=first),
            Launch.of(softmax_dim_loop_kernel, grid, ("x", "out", "m_part", "s_part", per), warps, options=DEPENDENT,
                      schedule=SPLIT, LOG=log, SPLIT=True, BLOCK_R=block_r, BLOCK_I=block_i, STRIPS_FIRST=first)]


def softmax_along(x, dim: int, out, log: bool, op: str):
    """softmax (log=True: log_softmax) of x along `dim`, which is not x's last dimension
    (the entry points `softmax.softmax` / `log_softmax` dispatch here)."""
    a = as_array(x, "x")
    check_float(a, "x")
    o = output(out, a, a.shape, a.dtype)
    if o.numel == 0:
        return o.obj
    xv, _, _ = slab_view(a, dim, "x")
    ov, _, _ = slab_view(o, dim, "out")
    execute(plan(a, o, dim, log, target_of(a)), Operands({"x": a}, {"x": xv, "out": ov}))
    return o.obj
