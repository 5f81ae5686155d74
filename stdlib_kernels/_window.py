"""Rows that do not start on a 32-byte sector, read in aligned windows.

A row of C elements at element offset s, with s * itemsize not a multiple of 32
(an odd class count: 50257, 32001; or 16-byte aligned rows like 32008 bf16), read
tile by tile from its column 0 puts every tile at the same misalignment: no access
moves 16 bytes, or each warp's accesses straddle one more 32-byte sector than they
fill. Counted instead from s rounded down to a multiple of WINDOW (WINDOW_BYTES of
elements), tile j covers elements [base + j * BLOCK, base + (j + 1) * BLOCK): each
16-byte group and each sector is aligned, and the lanes before the row's start or
past its end are padding. The compiler moves whole groups and selects the row's two
edge groups element by element (passes/axis_info.py). Lane k of tile j then holds
column base - s + j * BLOCK + k, not j * BLOCK + k: a window suits reductions over
the row, whose result does not depend on which lane holds which column, and stores
back to the same places: an output whose rows start at the same offsets modulo
WINDOW (`shared_window`) is written through its own window with the same lead
(`store_row_tile`).
"""
from __future__ import annotations

import math

import tilec as tc

from ._common import Arr, RowConfig, row_config, row_stride

__all__ = ["row_window", "shared_window", "window_start", "window_mask", "window_tile", "window_span",
           "single_row_window", "window_steps", "window_steps_of", "row_tile", "store_row_tile"]


# Windows start on 32-byte sectors, not just 16-byte vectors: rows 16 bytes off a sector
# (even 16-byte aligned ones) halved the bandwidth (H200, softmax 4096x32008 bf16 50% of copy
# against 93% at 32000; read in 32-byte windows 88%); 128-byte windows measured the same as 32.
WINDOW_BYTES = 32


def row_window(a: Arr, name: str, unknown_stride: bool = False) -> int:
    """WINDOW for `a`'s rows of its last dimension: the elements in WINDOW_BYTES when some
    row starts off such a boundary, else 0 (column tiles are aligned as they are).
    unknown_stride: also when the row stride is not a multiple of 16 elements, where a
    launch specializes on no alignment of the rows (runtime/launcher.py), so column tiles
    take scalar accesses (kernels whose tile layout then suffers: cumsum's scan)."""
    if math.prod(a.shape[:-1]) < 2:
        return 0
    isz = a.dtype.itemsize
    stride = row_stride(a, name)
    off = (stride * isz) % WINDOW_BYTES or (unknown_stride and stride % 16)
    return WINDOW_BYTES // isz if off else 0


def shared_window(a: Arr, o: Arr, unknown_stride: bool = False) -> int:
    """WINDOW for an op that reads `a`'s rows and writes `o`'s at the same columns: `a`'s
    (`row_window`) when `o`'s rows start at the same offsets modulo it, so that one lead per
    row serves both; else 0 (both read and written column tile by column tile)."""
    w = row_window(a, "x", unknown_stride)
    if w and (row_stride(o, "out") - row_stride(a, "x")) % w:
        return 0
    return w


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
def window_start(x, row, WINDOW: tc.constexpr):
    """(pointer to the multiple of WINDOW elements at or before row `row`'s first element,
    how many elements before the row it is: 0..WINDOW-1, i32)."""
    start = row.astype(tc.int64) * x.stride(0)
    base = start // WINDOW * WINDOW
    return x.ptr + base, (start - base).astype(tc.int32)


@tc.func
def window_mask(lead, j, n, GROUP: tc.constexpr, BLOCK: tc.constexpr, SIGNED: tc.constexpr = False):
    """(offsets from the window's base, inside) of window tile j of a row of n elements that
    starts `lead` elements into its window, as (BLOCK // GROUP, GROUP) groups of 16 bytes: an
    element's column is its group's plus a constant, so no per-element offset stays live
    from a tile's load to its store (softmax_cluster_kernel bf16: 80 -> 64 registers, 4
    programs per SM instead of 3). (i32: i64 masks cost ~15 registers.)"""
    grp = j * BLOCK + tc.arange(0, BLOCK // GROUP)[:, None] * GROUP
    e = tc.arange(0, GROUP)[None, :]
    if SIGNED:
        col = (grp - lead) + e
        return grp + e, (col >= 0) & (col < n)
    # 0 <= col < n as one unsigned compare: a column before the row wraps to above n (H200:
    # softmax 4096x50257 bf16 70% -> 74% of copy, f32 2048x50257 64% -> 91%; the sum over a
    # row measured the other way, 92% against 86%: reduce_rows_kernel asks for SIGNED)
    col = ((grp - lead) + e).astype(tc.uint32)
    return grp + e, col < n.astype(tc.uint32)


@tc.func
def window_tile(x, base, lead, j, pad, BLOCK: tc.constexpr, SIGNED: tc.constexpr = False):
    """(tile, inside) of window tile j of a row (`window_start`'s base and lead): a
    (1, BLOCK) tile of x's dtype, `pad` outside the row, and where it holds the row's
    elements (SIGNED: `window_mask`'s two compares)."""
    idx, inside = window_mask(lead, j, x.shape[1], 16 // x.dtype.itemsize, BLOCK, SIGNED)
    t = tc.load(base + idx, mask=inside, other=pad)
    return tc.reshape(t, (1, BLOCK)), tc.reshape(inside, (1, BLOCK))


@tc.func
def _windows(x, row, k, WINDOW: tc.constexpr, BLOCK: tc.constexpr, ROWS: tc.constexpr):
    # (base, lead) of row block `row`'s windows; a row past x's last (a persistent kernel's
    # look-ahead, a packed tile's tail) gets a lead that puts all of tile k before it.
    rows = row
    if ROWS > 1:
        rows = row * ROWS + tc.arange(0, ROWS)[:, None]
    base, lead = window_start(x, rows, WINDOW)
    return base, tc.where(rows < x.shape[0], lead, (k + 1) * BLOCK)


@tc.func
def _packed_mask(lead, n, BLOCK: tc.constexpr):
    # window_mask of tile 0 of ROWS packed rows, (ROWS, 1) leads: (ROWS, BLOCK)
    idx = tc.arange(0, BLOCK)[None, :]
    return idx, (idx - lead).astype(tc.uint32) < n.astype(tc.uint32)


@tc.func
def row_tile(x, row, k, pad, WINDOW: tc.constexpr, BLOCK: tc.constexpr, ROWS: tc.constexpr = 1):
    """Tile k of the rows [row * ROWS, (row + 1) * ROWS), (ROWS, BLOCK) in x's dtype and `pad`
    outside them: of each row's window when WINDOW (rows past x's last read nothing; packed
    rows, ROWS > 1, have one tile: k = 0), else its columns [k * BLOCK, (k + 1) * BLOCK)."""
    if WINDOW:
        base, lead = _windows(x, row, k, WINDOW, BLOCK, ROWS)
        if ROWS == 1:
            t, _ = window_tile(x, base, lead, k, pad, BLOCK)
            return t
        idx, inside = _packed_mask(lead, x.shape[1], BLOCK)
        return tc.load(base + idx, mask=inside, other=pad)
    return tc.load(x, index=(row, k), shape=(ROWS, BLOCK), padding=pad)


@tc.func
def store_row_tile(out, row, k, y, WINDOW: tc.constexpr, BLOCK: tc.constexpr, ROWS: tc.constexpr = 1):
    """Writes y where `row_tile(x, row, k, ...)` read it, into out's rows: through out's
    windows, whose leads are x's when `shared_window` gave WINDOW."""
    if WINDOW:
        base, lead = _windows(out, row, k, WINDOW, BLOCK, ROWS)
        if ROWS == 1:
            idx, inside = window_mask(lead, k, out.shape[1], 16 // out.dtype.itemsize, BLOCK)
            tc.store(base + idx, tc.reshape(y, idx.shape), mask=inside)
        else:
            idx, inside = _packed_mask(lead, out.shape[1], BLOCK)
            tc.store(base + idx, y, mask=inside)
    else:
        tc.store(out, index=(row, k), tile=y)
