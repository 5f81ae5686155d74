"""Rows that do not start on a 32-byte sector, read in aligned windows.

A row of C elements at element offset s, with s * itemsize not a multiple of 32
(an odd class count: 50257, 32001; or 16-byte aligned rows like 32008 bf16), read
tile by tile from its column 0 puts every tile at the same misalignment: no access
moves 16 bytes, or each warp's accesses straddle one more 32-byte sector than they
fill. Counted instead from s rounded down to a multiple of WINDOW (WINDOW_BYTES of
elements), tile j covers elements [base + j * BLOCK, base + (j + 1) * BLOCK): each
16-byte group and each sector is aligned, and the lanes before the row's start or
past its end are padding. Loads move every group that reaches into the row and select per
element (`window_tile`); stores move whole groups and write the row's two edge groups
element by element (passes/axis_info.py). Lane k of tile j then holds
column base - s + j * BLOCK + k, not j * BLOCK + k: a window suits reductions over
the row, whose result does not depend on which lane holds which column, and stores
back to the same places: an output whose rows start at the same offsets modulo
WINDOW (`shared_window`) is written through its own window with the same lead
(`store_row_tile`).

An output whose rows start at other offsets (x rows of a wider buffer, out allocated
contiguous) cannot share x's windows, and its stores cannot move unaligned groups: x is
then read in out's windows instead (`row_windows` gives REALIGN), each 16-byte group of x
as the two aligned blocks around it, shifted into place (`tc.load(realign=True)`).
"""
from __future__ import annotations

import math
from typing import Tuple

import tilec as tc

from ._common import Arr, RowConfig, row_config, row_stride

__all__ = ["row_window", "shared_window", "row_windows", "window_start", "window_mask", "window_tile", "window_span",
           "single_row_window", "window_steps", "window_steps_of", "row_tile", "store_row_tile"]


# Windows start on 32-byte sectors, not just 16-byte vectors: rows 16 bytes off a sector
# (even 16-byte aligned ones) halved the bandwidth (H200, softmax 4096x32008 bf16 50% of copy
# against 93% at 32000; read in 32-byte windows 88%); 128-byte windows measured the same as 32.
WINDOW_BYTES = 32


def row_window(a: Arr, name: str, ragged: bool = False) -> int:
    """WINDOW for `a`'s rows of its last dimension: the elements in WINDOW_BYTES when some
    row starts off such a boundary, else 0 (column tiles are aligned as they are: a launch
    specializes on the power of two dividing the row stride, so rows on 32-byte sectors
    get 16-byte accesses, `specialize.stride_divisibility`). ragged: also when the rows'
    length is not a multiple of 16 elements, whose end a launch does not place on a
    16-byte group (column tiles then mask their stores element by element)."""
    if math.prod(a.shape[:-1]) < 2:
        return 0
    isz = a.dtype.itemsize
    stride = row_stride(a, name)
    off = (stride * isz) % WINDOW_BYTES or (ragged and a.shape[-1] % 16)
    return WINDOW_BYTES // isz if off else 0


def shared_window(a: Arr, o: Arr, ragged: bool = False) -> int:
    """WINDOW for an op that reads `a`'s rows and writes `o`'s at the same columns: `a`'s
    (`row_window`) when `o`'s rows start at the same offsets modulo it, so that one lead per
    row serves both; else 0 (both read and written column tile by column tile)."""
    w = row_window(a, "x", ragged)
    if w and (row_stride(o, "out") - row_stride(a, "x")) % w:
        return 0
    return w


def row_windows(a: Arr, o: Arr, ragged: bool = False, tiled: bool = False) -> Tuple[int, bool]:
    """(WINDOW, REALIGN) of an op that reads `a`'s rows and writes `o`'s at the same columns:
    `shared_window`'s where there is one; else, where either array's rows start off 32-byte
    sectors (`row_window`), out's window with x realigned into it (REALIGN); else (0, False),
    column tiles aligned as they are. tiled: rows held past one tile (chunks, loops), where
    4-byte rows keep column tiles instead of realigning: their element stores coalesce, and
    the realigned chunks cost programs per SM (H100, % of copy, 4096x20001 f32 of a
    20016-wide buffer: softmax 96.5 as columns, 89.5 realigned; layer_norm / rms_norm 81 / 90
    against 73 / 88)."""
    w = shared_window(a, o, ragged)
    if w:
        return w, False
    if tiled and a.dtype.itemsize == 4:
        return 0, False
    if row_window(a, "x", ragged) or row_window(o, "out", ragged):
        return WINDOW_BYTES // a.dtype.itemsize, True
    return 0, False


def window_span(n_cols: int, window: int) -> int:
    """The elements a row's window covers at most: the row and up to window - 1 before it."""
    return n_cols + max(window - 1, 0)


def single_row_window(cfg: RowConfig, n_cols: int, n_rows: int, window: int, **row_kw):
    """(cfg, WINDOW) of a single-tile row kernel: `row_config` sized for the row plus its
    window's lead (`window_span`) where the row then still takes one tile alone; else cfg,
    without a window (packed rows keep column tiles). row_kw: the caller's row_config options."""
    if not window or not cfg.single:
        return cfg, 0
    spanned = row_config(window_span(n_cols, window), n_rows, **row_kw)
    return (spanned, window) if spanned.single and spanned.rows == 1 else (cfg, 0)


def window_steps(n_cols: int, window: int, per_step: int) -> int:
    """Steps of `per_step` elements that cover a row of n_cols from its window's start
    (up to window - 1 elements before the row)."""
    return tc.cdiv(window_span(n_cols, window), per_step)


@tc.func
def window_steps_of(n, WINDOW: tc.constexpr, BLOCK: tc.constexpr):
    """`window_steps` in a kernel: BLOCK-wide tiles covering a row of n from its window
    (from its start when WINDOW is 0)."""
    if WINDOW:
        return tc.cdiv(n + (WINDOW - 1), BLOCK)
    return tc.cdiv(n, BLOCK)


@tc.func
def window_start(x, row, WINDOW: tc.constexpr, REALIGN: tc.constexpr = False, o=None):
    """(pointer to the multiple of WINDOW elements at or before row `row`'s first element,
    how many elements before the row it is: 0..WINDOW-1, i32). REALIGN (`row_windows`): x's
    row read in o's windows instead, (pointer to where x's row would start if it started as
    many elements into a window as o's row does, that lead): `window_tile` then realigns."""
    if REALIGN:
        _, lead = _own_window(o, row, WINDOW)
        return x.ptr + row.astype(tc.int64) * x.stride(0) - lead, lead
    return _own_window(x, row, WINDOW)


@tc.func
def _own_window(x, row, WINDOW: tc.constexpr):
    start = row.astype(tc.int64) * x.stride(0)
    base = start // WINDOW * WINDOW
    return x.ptr + base, (start - base).astype(tc.int32)


@tc.func
def _groups(lead, j, n, GROUP: tc.constexpr, BLOCK: tc.constexpr):
    # (offsets from the window's base, e, lo, hi, inside) of window tile j's (BLOCK // GROUP,
    # GROUP) groups: element e (1, GROUP) of a group is inside the row where lo <= e < hi
    # (lo, hi: (groups, 1))
    grp = j * BLOCK + tc.arange(0, BLOCK // GROUP)[:, None] * GROUP
    e = tc.arange(0, GROUP)[None, :]
    lo = lead - grp
    hi = lo + n
    return grp + e, e, lo, hi, (e >= lo) & (e < hi)


@tc.func
def window_mask(lead, j, n, GROUP: tc.constexpr, BLOCK: tc.constexpr):
    """(offsets from the window's base, inside) of window tile j of a row of n elements that
    starts `lead` elements into its window, as (BLOCK // GROUP, GROUP) groups of 16 bytes.
    Element e of a group is inside where lo <= e < hi (`_groups`): two compares with a
    constant per element against two values per group, so no per-element column stays live
    from a tile's load to its store, and a store's "whole group inside" folds to lo <= 0 and
    hi >= GROUP. (A column per element, compared unsigned with n, held softmax_cluster_kernel
    bf16 7 x 8192 at 64 registers, 4 programs per SM; this form takes 48, 5 per SM.)"""
    idx, _, _, _, inside = _groups(lead, j, n, GROUP, BLOCK)
    return idx, inside


@tc.func
def window_tile(x, base, lead, n, j, pad, BLOCK: tc.constexpr, BY_GROUP: tc.constexpr = True,
                REALIGN: tc.constexpr = False, GROUPED: tc.constexpr = False):
    """(tile, inside) of window tile j of a row of n elements (`window_start`'s base and lead;
    n = 0 reads nothing where not BY_GROUP: a row past the last): a (1, BLOCK) tile of x's
    dtype, `pad` outside the row, and where it holds the row's elements. GROUPED: as its
    (BLOCK / GROUP, GROUP) 16-byte groups instead, each group in one thread.

    BY_GROUP: each 16-byte group loads where any of it is inside, tested by two compares per
    group, then selects per element. Loaded with `window_mask`'s per-element mask instead,
    the compiler ORs 16 compares before each load and keeps their predicates in registers
    (H200, softmax 4096x50257 bf16 80% of copy -> 67%; by group 89%); but the persistent
    softmax kernel, which holds the next row's chunk too, spills with the group test (108
    bytes at 8 x 32768, 1024x250001 bf16 76% -> 71%) and not with the element masks.

    REALIGN: base is `window_start`'s with REALIGN, off the group boundary: the element masks, whose
    realigned reads touch only blocks holding some element of the row (the group test would
    read before x's first row)."""
    GROUP = 16 // x.dtype.itemsize
    idx, e, lo, hi, inside = _groups(lead, j, n, GROUP, BLOCK)
    if REALIGN:
        t = tc.load(base + idx, mask=inside, other=pad, realign=True)
    elif BY_GROUP:
        # the groups that reach into the row, up to its end (past the last row's end is past
        # the array); the elements before the row lie in the array (lead <= the row's offset)
        t = tc.where(inside, tc.load(base + idx, mask=(lo < GROUP) & (e < hi), other=pad), pad)
    else:
        t = tc.load(base + idx, mask=inside, other=pad)
    if GROUPED:
        return t, inside
    return tc.reshape(t, (1, BLOCK)), tc.reshape(inside, (1, BLOCK))


@tc.func
def _windows(x, row, k, WINDOW: tc.constexpr, BLOCK: tc.constexpr, ROWS: tc.constexpr, PAST: tc.constexpr,
             REALIGN: tc.constexpr = False, o=None):
    # (base, lead, length) of tile k of row block `row`'s windows. Packed rows (ROWS > 1,
    # one tile) past x's last get a lead past tile k: nothing read or written (lengths per row
    # instead: f32 cumsum of 16 rows 71 -> 96 registers; a lead that does not depend on k:
    # 89). A single row past the last (PAST: a persistent kernel's look-ahead) gets length 0.
    # Either select costs the single-row kernels 16 registers (softmax_cluster_kernel bf16
    # 7 x 8192: 48 -> 64), so only PAST has it. REALIGN: x's rows in o's windows.
    if ROWS > 1:
        rows = row * ROWS + tc.arange(0, ROWS)[:, None]
        base, lead = window_start(x, rows, WINDOW, REALIGN, o)
        return base, tc.where(rows < x.shape[0], lead, (k + 1) * BLOCK), x.shape[1]
    base, lead = window_start(x, row, WINDOW, REALIGN, o)
    if PAST:
        return base, lead, tc.where(row < x.shape[0], x.shape[1], 0)
    return base, lead, x.shape[1]


@tc.func
def _packed_mask(lead, n, BLOCK: tc.constexpr):
    # window_mask of tile 0 of ROWS packed rows, (ROWS, 1) leads: (ROWS, BLOCK)
    idx = tc.arange(0, BLOCK)[None, :]
    return idx, (idx - lead).astype(tc.uint32) < n.astype(tc.uint32)


@tc.func
def row_tile(x, row, k, pad, WINDOW: tc.constexpr, BLOCK: tc.constexpr, ROWS: tc.constexpr = 1,
             PAST: tc.constexpr = False, REALIGN: tc.constexpr = False, o=None):
    """Tile k of the rows [row * ROWS, (row + 1) * ROWS), (ROWS, BLOCK) in x's dtype and `pad`
    outside them: of each row's window when WINDOW, else its columns [k * BLOCK, (k + 1) *
    BLOCK). Rows past x's last read nothing: packed rows (ROWS > 1, one tile: k = 0) always, a
    single row where PAST says it may be one (else it must be one of x's). REALIGN (with
    WINDOW, `row_windows`): in the windows of o's rows, which `store_row_tile` then writes."""
    if WINDOW:
        base, lead, n = _windows(x, row, k, WINDOW, BLOCK, ROWS, PAST, REALIGN, o)
        if ROWS == 1:
            t, _ = window_tile(x, base, lead, n, k, pad, BLOCK, not PAST, REALIGN)
            return t
        idx, inside = _packed_mask(lead, n, BLOCK)
        return tc.load(base + idx, mask=inside, other=pad, realign=REALIGN)
    return tc.load(x, index=(row, k), shape=(ROWS, BLOCK), padding=pad)


@tc.func
def store_row_tile(out, row, k, y, WINDOW: tc.constexpr, BLOCK: tc.constexpr, ROWS: tc.constexpr = 1):
    """Writes y where `row_tile(x, row, k, ...)` read it, into out's rows: through out's
    windows, whose leads are x's when `shared_window` gave WINDOW."""
    if WINDOW:
        base, lead, n = _windows(out, row, k, WINDOW, BLOCK, ROWS, False)
        if ROWS == 1:
            idx, inside = window_mask(lead, k, n, 16 // out.dtype.itemsize, BLOCK)
            tc.store(base + idx, tc.reshape(y, idx.shape), mask=inside)
        else:
            idx, inside = _packed_mask(lead, n, BLOCK)
            tc.store(base + idx, y, mask=inside)
    else:
        tc.store(out, index=(row, k), tile=y)
