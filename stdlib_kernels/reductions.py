"""sum and max along any one dimension, cumsum along the last dimension.

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

import tilec as tc
from tilec import options as _options

from ._common import (DEPENDENT, Arr, RowConfig, as_array, check_float, empty_like, flat_group, last_dim_rows, launch,
                      next_pow2, normalize_dim, output, row_config, rows_of, slab_view, view)
from ._plan import planned
from ._window import (WINDOW_BYTES, row_tile, row_window, row_windows, store_row_tile, window_mask, window_span,
                      window_start, window_steps_of, window_tile)

__all__ = ["sum", "max", "cumsum"]

NEG_INF = float("-inf")
# `inner_config`/`split_count`: the windowed inner-dimension kernel, merges of partial
# results and softmax along a dimension (the aligned sum/max: `strip_config`).
INNER_TILE = 4096     # elements of one (1, BLOCK_R, BLOCK_I) tile of the inner-dimension kernel
MAX_STRIP = 256      # widest column strip of the inner-dimension kernel (4-byte types)
MAX_STRIP_2BYTE = 512  # 2-byte types: 1 KB rows of 16 x 512 tiles (H200 bf16: 86% -> 91% of copy)
SPLIT_TARGET = 1024   # programs wanted for an inner-dimension reduction (several waves of 132 SMs)
SPLIT_TARGET_2BYTE = 512
MIN_TILES_PER_SPLIT = 4
TILES_PER_SPLIT = 16  # row tiles per program that keep each program streaming (256 KB of f32)
TILES_PER_SPLIT_2BYTE = 32
# The aligned sum/max over a non-last dimension (`strip_config`)
STRIP_COLUMNS = 128
STRIP_TILE_BYTES = 8192
STRIP_PROGRAMS = 1024
MAX_SCAN_TILE = 4096  # longest row scanned in one tile
MIN_WINDOW_INNER = 128  # reduced rows off 32-byte sectors read through windows from this many columns
# f16/bf16 rows off 32-byte sectors that one tile would hold (its column tiles then take 2-byte
# accesses) loop over windows of this many elements at 2 warps, from that many columns. H200, % of
# copy, one tile -> windows: sum 16384x4097 bf16 48 -> 82, 32768x4500 f16 51 -> 93, 4096x10001 bf16
# 40 -> 78, 65536x1025 f16 53 -> 75, max 4096x16001 bf16 48 -> 79, 8192x8191 f16 69 -> 81; f32 rows
# lost (8192x4097 88 -> 86), and windows of 1024 or at 4 warps did no better on the whole.
WINDOW_LOOP_TILE = 512
WINDOW_LOOP_WARPS = 2
# Such rows of at most WINDOW_PAIR_BYTES are read two to a program, each through its own window,
# stepped together (`window_rows`). H100, time of a
# copy of x's bytes (read and written) / time of sum, 1 row -> 2 (-> 4): 131072x513 bf16 1.12 ->
# 1.36 (1.27), 262144x600 f16 1.29 -> 1.50 (1.34), 8192x513 bf16 1.09 -> 1.11; 2 rows of 2 KB or
# more lost (65536x1025 f16 1.62 -> 1.52) and 8 of 1 KB more (131072x513 bf16 1.09).
WINDOW_PAIR_BYTES = 2048


def window_rows(n_cols: int, itemsize: int) -> int:
    """Rows per program of the windowed loop: two of at most WINDOW_PAIR_BYTES, else one."""
    return 2 if n_cols * itemsize <= WINDOW_PAIR_BYTES else 1


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


def _reduce(x, dim, out, is_max: bool, op: str):
    a = as_array(x, "x")
    check_float(a, "x")
    if a.ndim == 0:
        raise ValueError(f"{op}: x must have at least 1 dimension")
    d = normalize_dim(dim, a.ndim)
    if is_max and a.shape[d] == 0:
        raise ValueError(f"{op}: cannot take the max over dimension {d}, which has size 0")
    out_shape = a.shape[:d] + a.shape[d + 1:]
    o = output(out, a, out_shape, a.dtype)
    if o.numel == 0:
        return o.obj
    if d == a.ndim - 1 and (a.shape[d] == 1 or a.strides[d] == 1):
        xv, n_rows, n_cols = rows_of(a, "x")
        ov = view(o, (n_rows,), (flat_group(o.shape, o.strides, "out")[1],))
        cfg = row_config(n_cols, n_rows)
        # Long rows off 32-byte sectors are read in aligned windows; so are 2-byte rows of one
        # tile, looped in small windows (WINDOW_LOOP_TILE). f32 ones keep their tile.
        window = row_window(a, "x")
        if cfg.single and window and a.dtype.itemsize == 2 and n_cols >= WINDOW_LOOP_TILE:
            cfg = RowConfig(WINDOW_LOOP_TILE, window_rows(n_cols, a.dtype.itemsize), WINDOW_LOOP_WARPS, False)
        elif cfg.single:
            window = 0
        launch(reduce_rows_kernel, cfg.grid(n_rows), (xv, ov), cfg.num_warps, MAX=is_max, ROWS=cfg.rows,
               BLOCK=cfg.block, WINDOW=window)
        return o.obj
    xv, (outer, r, inner), (s_outer, s_r, s_inner) = slab_view(a, d, "x")
    o_outer, so_outer = flat_group(o.shape[:d], o.strides[:d], "out")
    o_inner, so_inner = flat_group(o.shape[d:], o.strides[d:], "out")
    ov = view(o, (outer, 1, inner), (so_outer, 0, so_inner))  # stride 0: see flat_group
    window = inner_window(a, r, s_outer, s_r, inner, s_inner)
    if window:
        _reduce_inner_windows(a, xv, ov, outer, r, inner, window, is_max)
        return o.obj
    block_r, block_i, num_warps, splits = strip_config(outer, r, inner, a.dtype.itemsize)
    n_tiles = tc.cdiv(r, block_r)
    if splits == 1:
        grid, first = slab_grid(outer, tc.cdiv(inner, block_i))
        launch(reduce_inner_kernel, grid, (xv, ov, n_tiles), num_warps, MAX=is_max, BLOCK_R=block_r,
               BLOCK_I=block_i, STRIPS_FIRST=first)
        return o.obj
    # Too few column strips to fill the GPU: split R, reduce each part to f32, then the parts.
    per = tc.cdiv(n_tiles, splits)
    splits = tc.cdiv(n_tiles, per)
    pv = partials_view(a, outer, splits, inner)
    grid, first = slab_grid(outer, tc.cdiv(inner, block_i), splits)
    launch(reduce_inner_kernel, grid, (xv, pv, per), num_warps, MAX=is_max, BLOCK_R=block_r, BLOCK_I=block_i,
           STRIPS_FIRST=first)
    _reduce_partials(pv, ov, outer, splits, inner, is_max)
    return o.obj


def inner_window(a: Arr, r: int, s_outer: int, s_r: int, inner: int, s_inner: int) -> int:
    """WINDOW (elements in 32 bytes) when the reduced rows of (outer, R, inner) start off
    32-byte sectors and are wide enough to read through windows (`reduce_inner_window_kernel`);
    else 0."""
    w = WINDOW_BYTES // a.dtype.itemsize
    if s_inner != 1 or inner < MIN_WINDOW_INNER or (r < 2 and s_outer % w == 0):
        return 0
    return w if s_r % w or s_outer % w else 0


def _reduce_inner_windows(a: Arr, xv, ov, outer: int, r: int, inner: int, window: int, is_max: bool):
    # Rows in WINDOW classes (`reduce_inner_window_kernel`), tiled as an aligned reduction of
    # R / WINDOW rows and split within one wave (`window_split_count`); then the classes'
    # partial sums are reduced.
    block_r, block_i, num_warps = inner_config(tc.cdiv(r, window), inner, a.dtype.itemsize)
    n_tiles = tc.cdiv(tc.cdiv(r, window), block_r)
    strips = tc.cdiv(inner + window - 1, block_i)   # a window starts up to WINDOW - 1 before the row
    per = tc.cdiv(n_tiles, window_split_count(outer * strips * window, n_tiles, a.dtype.itemsize))
    splits = tc.cdiv(n_tiles, per)
    pv = partials_view(a, outer, splits * window, inner)
    grid, first = slab_grid(outer, strips, splits * window)
    launch(reduce_inner_window_kernel, grid, (xv, pv, per), num_warps, MAX=is_max, BLOCK_R=block_r, BLOCK_I=block_i,
           WINDOW=window, STRIPS_FIRST=first)
    _reduce_partials(pv, ov, outer, splits * window, inner, is_max)


def window_split_count(programs: int, n_tiles: int, itemsize: int) -> int:
    """How many programs share one class's strip (`_reduce_inner_windows`): as many as keep all
    programs within SPLIT_TARGET (one wave of the window kernel, 4 programs per SM), each with
    at least MIN_TILES_PER_SPLIT tiles. More, as `split_count` allows, made a second wave:
    16384x5000 bf16 ran 640 programs of 16 tiles on 528 places."""
    target = SPLIT_TARGET_2BYTE if itemsize <= 2 else SPLIT_TARGET
    return builtins.max(1, builtins.min(n_tiles // MIN_TILES_PER_SPLIT, target // programs))


def partials_view(a: Arr, outer: int, rows: int, inner: int):
    """An f32 (outer, rows, inner) view for partial results, its rows padded to 32 bytes so
    that the reduction over them reads 16-byte groups."""
    per_window = WINDOW_BYTES // 4
    pitch = tc.cdiv(inner, per_window) * per_window
    part = empty_like(a, (outer, rows, pitch), tc.float32)
    return view(part, (outer, rows, inner), (rows * pitch, pitch, 1))


def _reduce_partials(pv, ov, outer: int, rows: int, inner: int, is_max: bool):
    block_r, block_i, warps = inner_config(rows, inner)
    grid, first = slab_grid(outer, tc.cdiv(inner, block_i))
    launch(reduce_inner_kernel, grid, (pv, ov, tc.cdiv(rows, block_r)), warps, options=DEPENDENT, MAX=is_max,
           BLOCK_R=block_r, BLOCK_I=block_i, STRIPS_FIRST=first)


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


def inner_config(r: int, inner: int, itemsize: int = 4):
    """(BLOCK_R, BLOCK_I, num_warps) of the inner-dimension reduction: a strip of up to 256
    contiguous columns (512 for 2-byte types: 1 KB either way) and
    INNER_TILE / strip rows (twice that for 2-byte types), 8 warps at a full tile: four
    16-byte loads per thread per step either way."""
    return strip_tile(r, inner, itemsize, MAX_STRIP_2BYTE if itemsize <= 2 else MAX_STRIP, INNER_TILE * 4)


def strip_tile(r: int, inner: int, itemsize: int, columns: int, tile_bytes: int):
    """(BLOCK_R, BLOCK_I, num_warps) of a column-strip tile: up to `columns` contiguous
    columns, rows filling `tile_bytes` (no more than R's power of two), one warp per 2 KB."""
    block_i = min(next_pow2(inner), columns)
    block_r = min(next_pow2(r), builtins.max(tile_bytes // itemsize // block_i, 1))
    return block_r, block_i, builtins.max(block_r * block_i * itemsize // 2048, 1)


def split_count(strips: int, n_tiles: int, itemsize: int = 4) -> int:
    """How many programs share one column strip's rows: enough for SPLIT_TARGET programs in
    all, each keeping at least MIN_TILES_PER_SPLIT row tiles (so the second pass stays
    small); and where the strips have rows to spare, up to twice that many, so that no
    program walks more than TILES_PER_SPLIT tiles. Measured on an H200 (sum over dim 0 of
    16384x8192 f32: 1024 programs of 32 tiles 89% of copy, 2048 of 16 93%, 4096 of 8 89%;
    8192x16384 bf16: 1024 of 16 85%, 2048 of 8 82%). 2-byte types (512-column strips)
    want 512 programs of up to 32 tiles (8192x16384 bf16: 512 programs 90-91%, 1024
    87.5%, 384 91%)."""
    two_byte = itemsize <= 2
    target = SPLIT_TARGET_2BYTE if two_byte else SPLIT_TARGET
    if strips >= target:
        return 1
    want = tc.cdiv(target, strips)
    most = TILES_PER_SPLIT_2BYTE if two_byte else TILES_PER_SPLIT
    return builtins.max(1, builtins.min(want, n_tiles // MIN_TILES_PER_SPLIT),
                        builtins.min(n_tiles // most, 2 * want))


def strip_config(outer: int, r: int, inner: int, itemsize: int, programs: int = STRIP_PROGRAMS):
    """(BLOCK_R, BLOCK_I, num_warps, splits) of sum/max over a non-last dimension of an
    aligned (outer, R, inner) array (`reduce_inner_kernel`): strips of up to STRIP_COLUMNS
    contiguous columns, tiles of STRIP_TILE_BYTES (16 x 128 f32, 32 x 128 f16/bf16) at one
    warp per 2 KB (4 at a full tile: four 16-byte loads per thread per step), and R split
    among programs until about `programs` run, each walking at least MIN_TILES_PER_SPLIT
    tiles.

    Measured on an H100 (% of copy, old rule: 1 KB strips, 16 KB tiles at 8 warps, 512-2048
    programs -> this one): sum over dim 0 of 16384x8192 f32 95.3 -> 96.9, 8192x16384 bf16
    90.3 -> 91.2, 2097152x64 f32 84.8 -> 92.5, 4096x4096 f16 71.4 -> 74.0; 16 KB tiles, 256
    columns or 2048 programs did no better anywhere (docs/benchmarks-archive.md, "Column strips")."""
    block_r, block_i, num_warps = strip_tile(r, inner, itemsize, STRIP_COLUMNS, STRIP_TILE_BYTES)
    strips = outer * tc.cdiv(inner, block_i)
    n_tiles = tc.cdiv(r, block_r)
    splits = builtins.max(1, builtins.min(tc.cdiv(programs, strips), n_tiles // MIN_TILES_PER_SPLIT))
    return block_r, block_i, num_warps, splits


@planned
def sum(x, dim: int, out=None):  # noqa: A001 - the op's name
    """sum(x, dim, out=None) -> the sum over dimension `dim` (removed from the shape).

    x: f16, bf16 or f32, any shape; `dim` may be negative. Accumulates in f32,
    returns x's dtype (or writes `out`). The dimensions before `dim` and those
    after it must each flatten without a copy (else ValueError).

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
    return _reduce(x, dim, out, False, "sum")


@planned
def max(x, dim: int, out=None):  # noqa: A001 - the op's name
    """max(x, dim, out=None) -> the maximum over dimension `dim` (values only).

    Unlike torch.max(x, dim) this returns the values alone, not (values,
    indices). NaN handling follows tc.maximum. Same dtypes, layout limits and
    block sizes as `sum`; an empty reduced dimension is a ValueError.
    """
    return _reduce(x, dim, out, True, "max")


@planned
def cumsum(x, dim: int = -1, out=None):
    """cumsum(x, dim=-1, out=None) -> the inclusive running sum along the last dimension.

    x: f16, bf16 or f32, any leading batch shape (last stride 1, leading
    dimensions flattenable, else ValueError); only dim=-1 is supported (other
    dims: ValueError). Accumulates in f32 across the whole row and returns x's
    dtype (or writes `out`).

    Block size: rows up to 4096 elements are one tile of next_pow2(n) columns,
    short rows packed until a tile holds 2048 elements; longer rows are scanned
    in 4096-column tiles carrying the running total. num_warps = tile
    elements / 512, 1..16. Rows off 32-byte sectors are read and written in
    aligned windows (`_window`; n counts up to 32 bytes before the row).
    """
    a, o, xv, ov, n_rows, n_cols = last_dim_rows(x, dim, out, "cumsum")
    if n_cols == 0:
        return o.obj
    # Rows through aligned windows, the tiles sized for the row plus up to 32 bytes before
    # it, where rows start off 32-byte sectors: column tiles of such rows took scalar
    # accesses and 238 registers (H200, 32768x3000 bf16: 12% of copy; windows 72%). Also
    # rows on sectors of a length not a multiple of 16 elements: the window's scan by
    # 16-byte groups beat column tiles' masked stores (H100, f32 8192x6008 1.59x,
    # 4096x20008 1.46x). An out whose rows start at other offsets: its windows, x's rows
    # realigned into them (`row_windows`).
    window, realign = row_windows(a, o, ragged=True)
    cfg = row_config(window_span(n_cols, window), n_rows, max_single=MAX_SCAN_TILE, loop_tile=MAX_SCAN_TILE)
    launch(cumsum_kernel, cfg.grid(n_rows), (xv, ov), cfg.num_warps, ROWS=cfg.rows, BLOCK=cfg.block, WINDOW=window,
           REALIGN=realign)
    return o.obj
