"""sum and amax along any one dimension or all of them, cumsum's kernel along the last dimension.

Reducing the last dimension is row-wise (one tile per row when it fits, rows
packed when short, else a lane-wise loop). Reducing another dimension sees the
array as (outer, R, inner) and gives each program a strip of `inner` columns:
it walks R in tiles, accumulating lane-wise, so the contiguous inner dimension
is what each load reads (`slab_grid` fits any number of strips in the grid).
cumsum carries the running total of a row from tile to tile. Accumulation is in
f32.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import replace
from typing import List, Optional

import numpy as np

import tilec as tc
from tilec import options as _options
from tilec.target import Target

from ._common import (DEPENDENT, Arr, RowConfig, as_array, check_float, flat_group, next_pow2,
                      normalize_dim, output, row_config, rows_of, slab_view, target_of, view)
from ._plan import planned
from ._window import (WINDOW_BYTES, row_tile, row_window, row_windows, store_row_tile, window_mask, window_span,
                      window_start, window_steps_of, window_tile)
from .launches import Launch, Operands, Temp, execute
from .schedules import LOOPED, ONE_TILE, SPLIT, STRIPS, WINDOW_CLASSES, WINDOWS
from .tuning import TABLES, ReductionTuning, tuning_for

__all__ = ["sum", "amax", "plan", "plan_cumsum", "reduced_layout", "squeezed", "check_keepdim"]

NEG_INF = float("-inf")
# The sm_90 table's numbers under their old names (tests, docs): plans read `tuning_for(target)`.
_T = TABLES["sm_90"].reduction
INNER_TILE, MAX_STRIP, MAX_STRIP_2BYTE = _T.inner_tile, _T.max_strip, _T.max_strip_2byte
SPLIT_TARGET, SPLIT_TARGET_2BYTE, MIN_TILES_PER_SPLIT = _T.split_target, _T.split_target_2byte, _T.min_tiles_per_split
TILES_PER_SPLIT, TILES_PER_SPLIT_2BYTE = _T.tiles_per_split, _T.tiles_per_split_2byte
STRIP_COLUMNS, STRIP_TILE_BYTES, STRIP_PROGRAMS = _T.strip_columns, _T.strip_tile_bytes, _T.strip_programs
MAX_SCAN_TILE, MIN_WINDOW_INNER = _T.max_scan_tile, _T.min_window_inner
WINDOW_LOOP_TILE, WINDOW_LOOP_WARPS, WINDOW_PAIR_BYTES = _T.window_loop_tile, _T.window_loop_warps, _T.window_pair_bytes


def window_rows(n_cols: int, itemsize: int, *, t: Optional[ReductionTuning] = None) -> int:
    """Rows per program of the windowed loop: two of at most `t.window_pair_bytes`, else one."""
    return 2 if n_cols * itemsize <= (t or _T).window_pair_bytes else 1


@tc.func
def _combine(a, b, MAX: tc.constexpr):
    if MAX:
        return tc.maximum(a, b)
    return a + b


@tc.kernel
def reduce_rows_kernel(x, out, MAX: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr,
                       WINDOW: tc.constexpr = 0):
    # WINDOW: rows off 32-byte sectors read in aligned windows (_window.py), ROWS of them per
    # program, each through its own window (`_window_rows_reduce`)
    pid = tc.program_id(0)
    pad = NEG_INF if MAX else 0.0
    if WINDOW:
        _window_rows_reduce(x, out, pid, pad, MAX, ROWS, BLOCK, WINDOW)
    else:
        acc = tc.load(x, index=(pid, 0), shape=(ROWS, BLOCK), padding=pad).astype(tc.float32)
        for k in range(1, tc.cdiv(x.shape[1], BLOCK)):  # no iterations when the row is one tile
            t = tc.load(x, index=(pid, k), shape=(ROWS, BLOCK), padding=pad).astype(tc.float32)
            acc = _combine(acc, t, MAX)
        tc.store(out, index=(pid,), tile=_row_total(acc, MAX).astype(out.dtype))


@tc.func
def _row_total(acc, MAX: tc.constexpr):
    # the max or sum of each row of lane-wise partials
    if MAX:
        return tc.max(acc, axis=1)
    return tc.sum(acc, axis=1)


@tc.func
def _window_rows_reduce(x, out, pid, pad, MAX: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr,
                        WINDOW: tc.constexpr):
    # Rows pid * ROWS + i, each through its own window, stepped together so that one step's
    # loads of every row are in flight at once; rows past the last re-read it, not stored.
    last = x.shape[0] - 1
    bases = ()
    leads = ()
    accs = ()
    for i in tc.static_range(ROWS):
        base, lead = window_start(x, tc.minimum(pid * ROWS + i, last), WINDOW)
        bases = bases + (base,)
        leads = leads + (lead,)
        accs = accs + (tc.full((1, BLOCK), pad, tc.float32),)
    for k in range(window_steps_of(x.shape[1], WINDOW, BLOCK)):
        stepped = ()
        for i in tc.static_range(ROWS):
            t, _in = window_tile(x, bases[i], leads[i], x.shape[1], k, pad, BLOCK)
            stepped = stepped + (_combine(accs[i], t.astype(tc.float32), MAX),)
        accs = stepped
    for i in tc.static_range(ROWS):
        tc.store(out, offset=(pid * ROWS + i,), tile=_row_total(accs[i], MAX).astype(out.dtype))


@tc.func
def _strip_tile(x, o, k, j, pad, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr):
    # Read once, but not eviction_policy="evict_first": on an H200 sum over dim 0 of
    # 8192x16384 bf16 lost 1.5 points of copy with it and 16384x8192 f32 3 (4096x4096 f16
    # gained 3-5).
    return tc.load(x, index=(o, k, j), shape=(1, BLOCK_R, BLOCK_I), padding=pad).astype(tc.float32)


@tc.func
def slab_strip(STRIPS_FIRST: tc.constexpr):
    # (slab o, strip j) of this program: grid axes (0, 1), or (1, 0) where the strips pass
    # axis 1's limit (`slab_grid`). A constexpr: choosing at run time (a select on
    # num_programs) cost 5% on an H100 (softmax over dim 1 of 16x150x65536 bf16), and a
    # divmod of one flat program id an integer add per element address.
    if STRIPS_FIRST:
        return tc.program_id(1), tc.program_id(0)
    return tc.program_id(0), tc.program_id(1)


@tc.kernel
def reduce_inner_kernel(x, out, tiles_per_split, MAX: tc.constexpr, BLOCK_R: tc.constexpr,
                        BLOCK_I: tc.constexpr, STRIPS_FIRST: tc.constexpr = False):
    # x is (outer, R, inner); out is (outer, splits, inner): program (o, j, s) reduces the
    # row tiles [s * tiles_per_split, (s + 1) * tiles_per_split) of column strip j. Tiles
    # past R are all padding (no memory traffic), so the last split needs no bound. Once
    # every program has started, the merge of the splits (a dependent launch) may be placed.
    tc.launch_dependents()
    o, j = slab_strip(STRIPS_FIRST)
    s = tc.program_id(2)
    pad = NEG_INF if MAX else 0.0
    k0 = s * tiles_per_split
    acc = _strip_tile(x, o, k0, j, pad, BLOCK_R, BLOCK_I)
    for k in range(k0 + 1, k0 + tiles_per_split):
        acc = _combine(acc, _strip_tile(x, o, k, j, pad, BLOCK_R, BLOCK_I), MAX)
    if MAX:
        r = tc.max(acc, axis=1, keep_dims=True)
    else:
        r = tc.sum(acc, axis=1, keep_dims=True)
    tc.store(out, index=(o, s, j), tile=r.astype(out.dtype))


@tc.kernel
def reduce_inner_window_kernel(x, part, tiles_per_split, MAX: tc.constexpr, BLOCK_R: tc.constexpr,
                               BLOCK_I: tc.constexpr, WINDOW: tc.constexpr, STRIPS_FIRST: tc.constexpr = False):
    # x is (outer, R, inner) with rows off WINDOW-element (32-byte) boundaries, whose column
    # tiles would move 2 or 4 bytes per access. Rows c, c + WINDOW, c + 2 WINDOW, ... (class c)
    # start at one offset `lead` past such a boundary (WINDOW rows apart is a multiple of
    # WINDOW elements), so program (o, j, s * WINDOW + c) walks class c's rows of split s
    # through aligned windows: lane l of strip j holds column j * BLOCK_I + l - lead. Its
    # sums go to row s * WINDOW + c of part (outer, splits * WINDOW, inner; f32), each
    # column where it belongs.
    tc.launch_dependents()  # as reduce_inner_kernel
    o, j = slab_strip(STRIPS_FIRST)
    c = tc.program_id(2) % WINDOW
    k0 = tc.program_id(2) // WINDOW * tiles_per_split
    pad = NEG_INF if MAX else 0.0
    GROUP = 16 // x.dtype.itemsize
    start = o.astype(tc.int64) * x.stride(0) + c.astype(tc.int64) * x.stride(1)
    base = start // WINDOW * WINDOW
    lead = (start - base).astype(tc.int32)
    step = x.stride(1) * WINDOW                      # a class's rows apart, a multiple of WINDOW
    grp = j * BLOCK_I + tc.arange(0, BLOCK_I // GROUP)[None, :, None] * GROUP
    e = tc.arange(0, GROUP)[None, None, :]
    # Whole 16-byte groups that hold some of the row: the lanes of a row's edge groups outside
    # it add up other rows' values, lane by lane, and are never stored (a mask per element
    # took 112 registers instead of 64 in bf16). Only the tensor's last row has no memory
    # after its end group: it is read after the loop, element by element.
    group_in = (grp + GROUP > lead) & (grp < x.shape[2] + lead)
    last = o == x.shape[0] - 1
    n_rows = x.shape[1] - last.astype(tc.int32)
    m = tc.arange(0, BLOCK_R)[:, None, None]
    acc = tc.full((BLOCK_R, BLOCK_I // GROUP, GROUP), pad, tc.float32)
    for k in range(k0, k0 + tiles_per_split):
        first = k * BLOCK_R                          # the tile's first row of the class
        ptr = x.ptr + base + first.astype(tc.int64) * step
        rows_in = c + (first + m) * WINDOW < n_rows
        t = tc.load(ptr + (m * step + grp + e), mask=group_in & rows_in, other=pad)
        acc = _combine(acc, t.astype(tc.float32), MAX)
    if MAX:
        r = tc.max(acc, axis=0, keep_dims=True)
    else:
        r = tc.sum(acc, axis=0, keep_dims=True)
    col = (grp - lead) + e
    in_row = col.astype(tc.uint32) < x.shape[2].astype(tc.uint32)   # col < 0 wraps past n
    final = x.shape[1] - 1
    tile_of_final = (final - c) // WINDOW // BLOCK_R
    if last & (final % WINDOW == c) & (tile_of_final >= k0) & (tile_of_final < k0 + tiles_per_split):
        t = tc.load(x.ptr + base + (final - c).astype(tc.int64) * x.stride(1) + (grp + e), mask=in_row, other=pad)
        r = _combine(r, t.astype(tc.float32), MAX)
    row = part.ptr + o.astype(tc.int64) * part.stride(0) + tc.program_id(2).astype(tc.int64) * part.stride(1)
    tc.store(row + col, r, mask=in_row)


@tc.kernel
def cumsum_kernel(x, out, ROWS: tc.constexpr, BLOCK: tc.constexpr, WINDOW: tc.constexpr = 0,
                  REALIGN: tc.constexpr = False):
    # WINDOW: rows off 32-byte sectors, read and written in aligned windows (_window.py):
    # the zeros before a row's start add nothing to its running sum. REALIGN: out's windows,
    # x's rows realigned into them (`_window.row_windows`).
    pid = tc.program_id(0)
    if WINDOW and ROWS == 1:
        _window_cumsum(x, out, pid, WINDOW, BLOCK, REALIGN)
    else:
        carry = tc.zeros((ROWS, 1), tc.float32)
        for k in range(window_steps_of(x.shape[1], WINDOW, BLOCK)):
            t = row_tile(x, pid, k, 0.0, WINDOW, BLOCK, ROWS, False, REALIGN, out).astype(tc.float32)
            c = tc.cumsum(t, axis=1) + carry
            store_row_tile(out, pid, k, c.astype(out.dtype), WINDOW, BLOCK, ROWS)
            # Zero padding: the tile's sum is the last real element of its scan minus the carry.
            carry += tc.sum(t, axis=1, keep_dims=True)


@tc.func
def _window_cumsum(x, out, row, WINDOW: tc.constexpr, BLOCK: tc.constexpr, REALIGN: tc.constexpr):
    # One row through its window, each tile scanned as its (BLOCK / GROUP, GROUP) 16-byte groups:
    # within each group, then the groups' totals. Scanning the tile reshaped to (1, BLOCK)
    # instead took 125 registers at 8 warps (bf16, 4096 columns) against 59.
    group = 16 // x.dtype.itemsize
    base, lead = window_start(x, row, WINDOW, REALIGN, out)
    obase, _ = window_start(out, row, WINDOW)   # the same lead: `row_windows`
    carry = 0.0
    for k in range(window_steps_of(x.shape[1], WINDOW, BLOCK)):
        idx, inside = window_mask(lead, k, x.shape[1], group, BLOCK)
        t = tc.load(base + idx, mask=inside, other=0.0, realign=REALIGN).astype(tc.float32)
        sums = tc.sum(t, axis=1, keep_dims=True)
        before = tc.cumsum(sums, axis=0) - sums + carry
        tc.store(obase + idx, (tc.cumsum(t, axis=1) + before).astype(out.dtype), mask=inside)
        carry += tc.sum(sums)


SIGNATURES = {
    "reduce_rows_kernel": "x=f16[?,?], out=f16[?], MAX=False, ROWS=1, BLOCK=16384",
    "reduce_inner_kernel": "x=bf16[?,?,?], out=f32[?,?,?], tiles_per_split=i32, MAX=True, BLOCK_R=32, BLOCK_I=128",
    "cumsum_kernel": "x=f32[?,?], out=f32[?,?], ROWS=1, BLOCK=4096",
    "reduce_inner_window_kernel": "x=bf16[?,?,?], part=f32[?,?,?]:stride_div=16x16x1, tiles_per_split=i32, MAX=False, "
                                  "BLOCK_R=16, BLOCK_I=512, WINDOW=16",
}
# The options the entry points launch SIGNATURES with (row kernels: tile elements / 512 warps; strips: tile
# bytes / 2048; tests/test_ptxas.py).
OPTIONS = {"reduce_rows_kernel": {"num_warps": 16, "fast_math": True}, "reduce_inner_kernel": {"num_warps": 4, "fast_math": True},
           "cumsum_kernel": {"num_warps": 8, "fast_math": True}, "reduce_inner_window_kernel": {"num_warps": 8, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("reduce_rows_kernel", "x=bf16[?,?], out=bf16[?], MAX=True, ROWS=64, BLOCK=32"),
    ("reduce_rows_kernel", "x=f32[?,?], out=f32[?], MAX=False, ROWS=1, BLOCK=4096"),
    ("reduce_rows_kernel", "x=bf16[?,?], out=bf16[?], MAX=False, ROWS=1, BLOCK=4096, WINDOW=16"),
    ("reduce_rows_kernel", "x=f16[?,?], out=f16[?], MAX=True, ROWS=2, BLOCK=512, WINDOW=16"),   # 2 rows of <= 2 KB
    ("reduce_inner_kernel", "x=f32[?,?,?], out=f32[?,?,?], tiles_per_split=1, MAX=False, BLOCK_R=4096, BLOCK_I=1"),
    ("reduce_inner_kernel", "x=f32[?,?,?], out=f16[?,?,?], tiles_per_split=i32, MAX=False, BLOCK_R=64, BLOCK_I=64"),
    ("reduce_inner_kernel", "x=bf16[?,?,?], out=f32[?,?,?], tiles_per_split=i32, MAX=False, BLOCK_R=16, BLOCK_I=512"),
    # strips past grid axis 1's limit (`slab_grid`)
    ("reduce_inner_kernel", "x=f32[?,?,?], out=f32[?,?,?], tiles_per_split=i32, MAX=False, BLOCK_R=16, BLOCK_I=256, "
                            "STRIPS_FIRST=True"),
    ("reduce_inner_window_kernel", "x=f32[?,?,?], part=f32[?,?,?]:stride_div=16x16x1, tiles_per_split=i32, MAX=True, "
                                   "BLOCK_R=16, BLOCK_I=256, WINDOW=8, STRIPS_FIRST=True"),
    ("cumsum_kernel", "x=f16[?,?], out=f16[?,?], ROWS=64, BLOCK=32"),
    ("cumsum_kernel", "x=bf16[?,?], out=bf16[?,?], ROWS=1, BLOCK=4096"),
    # x's rows read in out's windows (`_window.row_windows`: realigned loads)
    ("cumsum_kernel", "x=bf16[?,?], out=bf16[?,?], ROWS=1, BLOCK=4096, WINDOW=16, REALIGN=True"),
    ("cumsum_kernel", "x=f32[?,?], out=f32[?,?], ROWS=16, BLOCK=128, WINDOW=8, REALIGN=True"),
]


def rows_path(x: Arr, dim: int) -> bool:
    """Whether sum/max over `dim` (normalized) reduces rows of the last dimension, contiguous."""
    return dim == x.ndim - 1 and (x.shape[dim] == 1 or x.strides[dim] == 1)


def plan(x: Arr, out: Arr, dim: int, *, is_max: bool, target: Target) -> List[Launch]:
    """The launches of sum (max if `is_max`) of `x` over `dim` (normalized) into `out`.

    Operands: where `rows_path`, "x" as its rows (`rows_of`) and "out" as (n_rows,); else "x"
    as (outer, R, inner) (`slab_view`) and "out" as (outer, 1, inner). Schedules: ONE_TILE,
    LOOPED or WINDOWS along the last dimension; STRIPS, SPLIT (strips with R split, then a
    dependent merge) or WINDOW_CLASSES (then the merge) along another (schedules.py)."""
    t = tuning_for(target).reduction
    if out.numel == 0:
        return []
    if rows_path(x, dim):
        return _rows_plan(x, is_max=is_max, t=t)
    outer, s_outer = flat_group(x.shape[:dim], x.strides[:dim], "x")
    inner, s_inner = flat_group(x.shape[dim + 1:], x.strides[dim + 1:], "x")
    r, s_r = x.shape[dim], x.strides[dim]
    window = inner_window(x, r, s_outer, s_r, inner, s_inner, t=t)
    if window:
        return _window_classes(x, outer, r, inner, window, is_max=is_max, t=t)
    block_r, block_i, num_warps, splits = strip_config(outer, r, inner, x.dtype.itemsize, t=t)
    n_tiles = tc.cdiv(r, block_r)
    consts = dict(MAX=is_max, BLOCK_R=block_r, BLOCK_I=block_i)
    if splits == 1:
        grid, first = slab_grid(outer, tc.cdiv(inner, block_i))
        return [Launch.of(reduce_inner_kernel, grid, ("x", "out", n_tiles), num_warps, schedule=STRIPS, **consts,
                          STRIPS_FIRST=first)]
    # Too few column strips to fill the GPU: split R, reduce each part to f32, then the parts.
    per = tc.cdiv(n_tiles, splits)
    splits = tc.cdiv(n_tiles, per)
    part = partials_temp("part", outer, splits, inner)
    grid, first = slab_grid(outer, tc.cdiv(inner, block_i), splits)
    return [Launch.of(reduce_inner_kernel, grid, ("x", "part", per), num_warps, temps=(part,), schedule=SPLIT,
                      **consts, STRIPS_FIRST=first),
            _merge_partials(part, outer, splits, inner, is_max=is_max, t=t)]


def _rows_plan(x: Arr, *, is_max: bool, t: ReductionTuning) -> List[Launch]:
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    cfg = row_config(n_cols, n_rows)
    # Long rows off 32-byte sectors are read in aligned windows; so are 2-byte rows of one
    # tile, looped in small windows (t.window_loop_tile). f32 ones keep their tile.
    window = row_window(x, "x")
    schedule = LOOPED
    if cfg.single and window and x.dtype.itemsize == 2 and n_cols >= t.window_loop_tile:
        cfg = RowConfig(t.window_loop_tile, window_rows(n_cols, x.dtype.itemsize, t=t), t.window_loop_warps, False)
        schedule = WINDOWS
    elif cfg.single:
        window, schedule = 0, ONE_TILE
    return [Launch.of(reduce_rows_kernel, cfg.grid(n_rows), ("x", "out"), cfg.num_warps, schedule=schedule, MAX=is_max,
                      ROWS=cfg.rows, BLOCK=cfg.block, WINDOW=window)]


def inner_window(a: Arr, r: int, s_outer: int, s_r: int, inner: int, s_inner: int, *,
                 t: Optional[ReductionTuning] = None) -> int:
    """WINDOW (elements in 32 bytes) when the reduced rows of (outer, R, inner) start off
    32-byte sectors and are wide enough to read through windows (`reduce_inner_window_kernel`);
    else 0."""
    w = WINDOW_BYTES // a.dtype.itemsize
    if s_inner != 1 or inner < (t or _T).min_window_inner or (r < 2 and s_outer % w == 0):
        return 0
    return w if s_r % w or s_outer % w else 0


def _window_classes(x: Arr, outer: int, r: int, inner: int, window: int, *, is_max: bool,
                    t: ReductionTuning) -> List[Launch]:
    # Rows in WINDOW classes (`reduce_inner_window_kernel`), tiled as an aligned reduction of
    # R / WINDOW rows and split within one wave (`window_split_count`); then the classes'
    # partial sums are reduced.
    itemsize = x.dtype.itemsize
    block_r, block_i, num_warps = inner_config(tc.cdiv(r, window), inner, itemsize, t=t)
    n_tiles = tc.cdiv(tc.cdiv(r, window), block_r)
    strips = tc.cdiv(inner + window - 1, block_i)   # a window starts up to WINDOW - 1 before the row
    per = tc.cdiv(n_tiles, window_split_count(outer * strips * window, n_tiles, itemsize, t=t))
    splits = tc.cdiv(n_tiles, per)
    part = partials_temp("part", outer, splits * window, inner)
    grid, first = slab_grid(outer, strips, splits * window)
    return [Launch.of(reduce_inner_window_kernel, grid, ("x", "part", per), num_warps, temps=(part,),
                      schedule=WINDOW_CLASSES, MAX=is_max, BLOCK_R=block_r, BLOCK_I=block_i, WINDOW=window,
                      STRIPS_FIRST=first),
            _merge_partials(part, outer, splits * window, inner, is_max=is_max, t=t)]


def window_split_count(programs: int, n_tiles: int, itemsize: int, *, t: Optional[ReductionTuning] = None) -> int:
    """How many programs share one class's strip (`_window_classes`): as many as keep all
    programs within the split target (one wave of the window kernel, 4 programs per SM), each
    with at least `min_tiles_per_split` tiles ("reductions: split strips")."""
    t = t or _T
    target = t.split_target_2byte if itemsize <= 2 else t.split_target
    return builtins.max(1, builtins.min(n_tiles // t.min_tiles_per_split, target // programs))


def partials_temp(name: str, outer: int, rows: int, inner: int) -> Temp:
    """Scratch for partial results as a plan's Temp: f32 (outer, rows, inner), its rows padded
    to 32 bytes so that the reduction over them reads 16-byte groups."""
    per_window = WINDOW_BYTES // 4
    pitch = tc.cdiv(inner, per_window) * per_window
    return Temp(name, (outer, rows, pitch), tc.float32, view=((outer, rows, inner), (rows * pitch, pitch, 1)))


def _merge_partials(part: Temp, outer: int, rows: int, inner: int, *, is_max: bool, t: ReductionTuning) -> Launch:
    """The dependent launch reducing the `rows` f32 partials of `part` into "out"."""
    block_r, block_i, warps = inner_config(rows, inner, t=t)
    grid, first = slab_grid(outer, tc.cdiv(inner, block_i))
    return Launch.of(reduce_inner_kernel, grid, (part.name, "out", tc.cdiv(rows, block_r)), warps, options=DEPENDENT,
                     schedule=SPLIT, MAX=is_max, BLOCK_R=block_r, BLOCK_I=block_i, STRIPS_FIRST=first)


def slab_grid(outer: int, strips: int, splits: int = 1):
    """(grid, STRIPS_FIRST) of a column-strip kernel over (outer, R, inner), whose program
    (o, j, s) reduces strip j of slab o, split s (`slab_strip`): grid (outer, strips, splits),
    the order the kernels were tuned in, or, where the strips pass axis 1's limit, (strips,
    outer, splits) and STRIPS_FIRST.

    A grid holds 2**31 - 1 programs along axis 0 but 65535 along axes 1 and 2
    (`tilec.options.GRID_LIMITS`): sum over dim 0 of 4 x 40M f32 has 156250 strips of 256
    columns. The splits stay within 2 * SPLIT_TARGET (`split_count`, `window_split_count`).
    No grid fits more than 2**31 - 1 slabs (arrays of 2**32 elements or more, unless R is
    1), nor more than 65535 of both slabs and strips (2**36 or more): a ValueError.
    """
    limits = _options.GRID_LIMITS
    first = strips > limits[1]
    grid = (strips, outer, splits) if first else (outer, strips, splits)
    if any(n > most for n, most in zip(grid, limits)):
        raise ValueError(f"{outer} slabs x {strips} column strips x {splits} splits do not fit a grid (at most "
                         f"{limits} programs along its axes); run the op on parts of the array's leading "
                         "dimensions")
    return grid, first


def inner_config(r: int, inner: int, itemsize: int = 4, *, t: Optional[ReductionTuning] = None):
    """(BLOCK_R, BLOCK_I, num_warps) of the inner-dimension reduction: a strip of up to
    `max_strip` contiguous columns (`max_strip_2byte` for 2-byte types: 1 KB either way) and
    `inner_tile` / strip rows (twice that for 2-byte types), 8 warps at a full tile: four
    16-byte loads per thread per step either way."""
    t = t or _T
    return strip_tile(r, inner, itemsize, t.max_strip_2byte if itemsize <= 2 else t.max_strip, t.inner_tile * 4)


def strip_tile(r: int, inner: int, itemsize: int, columns: int, tile_bytes: int):
    """(BLOCK_R, BLOCK_I, num_warps) of a column-strip tile: up to `columns` contiguous
    columns, rows filling `tile_bytes` (no more than R's power of two), one warp per 2 KB."""
    block_i = min(next_pow2(inner), columns)
    block_r = min(next_pow2(r), builtins.max(tile_bytes // itemsize // block_i, 1))
    return block_r, block_i, builtins.max(block_r * block_i * itemsize // 2048, 1)


def split_count(strips: int, n_tiles: int, itemsize: int = 4, *, t: Optional[ReductionTuning] = None) -> int:
    """How many programs share one column strip's rows: enough for the split target's programs
    in all, each keeping at least `min_tiles_per_split` row tiles (so the second pass stays
    small); and where the strips have rows to spare, up to twice that many, so that no
    program walks more than `tiles_per_split` tiles ("reductions: split strips"). 2-byte types
    (512-column strips) have targets of their own."""
    t = t or _T
    two_byte = itemsize <= 2
    target = t.split_target_2byte if two_byte else t.split_target
    if strips >= target:
        return 1
    want = tc.cdiv(target, strips)
    most = t.tiles_per_split_2byte if two_byte else t.tiles_per_split
    return builtins.max(1, builtins.min(want, n_tiles // t.min_tiles_per_split),
                        builtins.min(n_tiles // most, 2 * want))


def strip_config(outer: int, r: int, inner: int, itemsize: int, programs: Optional[int] = None, *,
                 t: Optional[ReductionTuning] = None):
    """(BLOCK_R, BLOCK_I, num_warps, splits) of sum/max over a non-last dimension of an
    aligned (outer, R, inner) array (`reduce_inner_kernel`): strips of up to `strip_columns`
    contiguous columns, tiles of `strip_tile_bytes` (16 x 128 f32, 32 x 128 f16/bf16) at one
    warp per 2 KB (4 at a full tile: four 16-byte loads per thread per step), and R split
    among programs until about `programs` (default `strip_programs`) run, each walking at
    least `min_tiles_per_split` tiles ("reductions: column strips")."""
    t = t or _T
    programs = t.strip_programs if programs is None else programs
    block_r, block_i, num_warps = strip_tile(r, inner, itemsize, t.strip_columns, t.strip_tile_bytes)
    strips = outer * tc.cdiv(inner, block_i)
    n_tiles = tc.cdiv(r, block_r)
    splits = builtins.max(1, builtins.min(tc.cdiv(programs, strips), n_tiles // t.min_tiles_per_split))
    return block_r, block_i, num_warps, splits


def check_keepdim(keepdim) -> bool:
    """keepdim as a bool; TypeError naming it otherwise."""
    if not isinstance(keepdim, (bool, np.bool_)):
        raise TypeError(f"keepdim must be a bool, got {type(keepdim).__name__}")
    return bool(keepdim)


def reduced_layout(a: Arr, dim, keepdim, *, row_major: bool):
    """(work, d, out_shape) of a reduction of `a` over `dim` (torch's forms): `work` is `a`
    re-described with the reduced dimension d, out_shape the result's shape.

    dim=None reduces every element: work is `a` flattened into one dimension (row-major where
    `row_major`, as an index into it needs; else in memory order, which a sum or max does not
    mind), out_shape () or all ones with keepdim. A 0-d `a` is one element (dim 0 or -1, as
    torch accepts). ValueError when the dimensions do not flatten without a copy."""
    keepdim = check_keepdim(keepdim)
    if dim is None:
        shape, strides = a.shape, a.strides
        if not row_major:   # largest strides first: a transposed contiguous array flattens too
            order = sorted(range(a.ndim), key=lambda i: -strides[i])
            shape, strides = tuple(shape[i] for i in order), tuple(strides[i] for i in order)
        size, stride = flat_group(shape, strides, "x")
        return replace(a, shape=(size,), strides=(stride,)), 0, (1,) * a.ndim if keepdim else ()
    if a.ndim == 0:
        normalize_dim(dim, 1)
        return replace(a, shape=(1,), strides=(1,)), 0, ()
    d = normalize_dim(dim, a.ndim)
    return a, d, a.shape[:d] + ((1,) if keepdim else ()) + a.shape[d + 1:]


def squeezed(o: Arr, work: Arr, d: int) -> Arr:
    """The result `o` described as the kernels write it: work's shape without dimension d
    (a keepdim result's 1 dropped, dim=None's ones all dropped)."""
    shape = work.shape[:d] + work.shape[d + 1:]
    if o.shape == shape:
        return o
    if not shape:
        return replace(o, shape=(), strides=())
    return replace(o, shape=shape, strides=o.strides[:d] + o.strides[d + 1:])


def reduced_views(w: Arr, o: Arr, d: int, name: str = "out"):
    """The kernel argument of the squeezed result `o` of reducing `w` over d, as the slab kernels
    index it: (outer, 1, inner) (stride 0 for the 1: see flat_group)."""
    _, so_outer = flat_group(o.shape[:d], o.strides[:d], name)
    _, so_inner = flat_group(o.shape[d:], o.strides[d:], name)
    outer, _ = flat_group(w.shape[:d], w.strides[:d], "x")
    inner, _ = flat_group(w.shape[d + 1:], w.strides[d + 1:], "x")
    return view(o, (outer, 1, inner), (so_outer, 0, so_inner))


def _reduce(x, dim, keepdim, out, *, is_max: bool, op: str):
    a = as_array(x, "x")
    check_float(a, "x")
    w, d, out_shape = reduced_layout(a, dim, keepdim, row_major=False)
    if is_max and w.shape[d] == 0:
        raise ValueError(f"{op}: cannot take the max over dimension {d}, which has size 0")
    o = output(out, a, out_shape, a.dtype)
    if o.numel == 0:
        return o.obj
    os_ = squeezed(o, w, d)
    if rows_path(w, d):
        xv, n_rows, _ = rows_of(w, "x")
        ov = view(os_, (n_rows,), (flat_group(os_.shape, os_.strides, "out")[1],))
    else:
        xv, _, _ = slab_view(w, d, "x")
        ov = reduced_views(w, os_, d)
    execute(plan(w, os_, d, is_max=is_max, target=target_of(a)), Operands({"x": a}, {"x": xv, "out": ov}))
    return o.obj


def plan_cumsum(x: Arr, out: Arr, target: Target) -> List[Launch]:
    """The launch of cumsum along the last dimension of `x` into `out`: operands "x", "out" as
    their rows (`rows_of`); ONE_TILE for rows of up to `max_scan_tile`, else LOOPED.

    Rows go through aligned windows, the tiles sized for the row plus up to 32 bytes before
    it, where rows start off 32-byte sectors, and also rows on sectors of a length not a
    multiple of 16 elements ("reductions: cumsum"). An out whose rows start at other offsets:
    its windows, x's rows realigned into them (`row_windows`)."""
    t = tuning_for(target).reduction
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    if n_cols == 0:
        return []
    window, realign = row_windows(x, out, ragged=True)
    cfg = row_config(window_span(n_cols, window), n_rows, max_single=t.max_scan_tile, loop_tile=t.max_scan_tile)
    return [Launch.of(cumsum_kernel, cfg.grid(n_rows), ("x", "out"), cfg.num_warps,
                      schedule=ONE_TILE if cfg.single else LOOPED, ROWS=cfg.rows, BLOCK=cfg.block, WINDOW=window,
                      REALIGN=realign)]


@planned
def sum(x, dim=None, keepdim: bool = False, out=None):  # noqa: A001 - the op's name
    """sum(x, dim=None, keepdim=False, out=None) -> the sum over dimension `dim`, as torch.sum.

    x: f16, bf16 or f32, any shape (0-d too); `dim` an int, may be negative, or
    None for every element (a 0-d result). keepdim keeps the reduced dimension
    with size 1 (every dimension for dim=None). Accumulates in f32, returns x's
    dtype (or writes `out`, of the result's shape). The dimensions before `dim`
    and those after it must each flatten without a copy (dim=None: all of them,
    in any order; else ValueError). dim=None reduces the flattened array as one
    row (one program: for large arrays, reducing one dimension first is faster).

    Block size: for the last dimension, `_common.row_config` (one tile up to
    16384 elements, short rows packed, longer rows looped in 4096-element
    tiles); f16/bf16 rows of 512 columns or more that start off 32-byte
    sectors (odd widths) loop over aligned windows of 512 at 2 warps instead
    of one tile (`WINDOW_LOOP_TILE`), two such rows of at most 2 KB to a program
    (`window_rows`). For another dimension (`strip_config`),
    each program owns min(next_pow2(inner), 128) contiguous columns and walks
    the reduced dimension in 8 KB tiles (16 x 128 f32, 32 x 128 f16/bf16) at
    one warp per 2 KB (4 at a full tile). Where that gives fewer than 1024
    programs (sum over dim 0 of a 4096x4096 matrix: 32 strips), the reduced
    dimension is also split among programs (up to 1024 programs, each at least
    4 tiles) into f32 partial results, reduced by a second, small launch.
    Reduced rows that start off 32-byte sectors are read through aligned
    windows (`reduce_inner_window_kernel`, `inner_config`).
    """
    return _reduce(x, dim, keepdim, out, is_max=False, op="sum")


@planned
def amax(x, dim=None, keepdim: bool = False, out=None):
    """amax(x, dim=None, keepdim=False, out=None) -> the maximum over dimension `dim` (values
    only, as torch.amax; `max(x, dim)` gives values and indices).

    NaN propagates (a NaN in the reduced elements gives NaN, as torch). Same
    dtypes, forms, layout limits and block sizes as `sum`; an empty reduced
    dimension is a ValueError.
    """
    return _reduce(x, dim, keepdim, out, is_max=True, op="amax")
