"""Rows that do not start on a 16-byte boundary, read in aligned windows.

A row of C elements at element offset s, with s * itemsize not a multiple of 16
(an odd class count: 50257, 32001), read tile by tile from its column 0 puts every
tile at the same misalignment, so no access can move 16 bytes. Counted instead from
s rounded down to a multiple of WINDOW (16 bytes of elements), tile j covers
elements [base + j * BLOCK, base + (j + 1) * BLOCK): each 16-byte group is aligned,
and the lanes before the row's start or past its end are padding. The compiler
moves whole groups and selects the row's two edge groups element by element
(passes/axis_info.py). Lane k of tile j then holds column base - s + j * BLOCK + k,
not j * BLOCK + k: a window suits reductions over the row, whose result does not
depend on which lane holds which column, and stores back to the same places.
"""
from __future__ import annotations

import math

import tilec as tc

from ._common import Arr, row_stride

__all__ = ["row_window", "window_start", "window_tile", "window_steps", "window_steps_of"]


def row_window(a: Arr, name: str) -> int:
    """WINDOW for `a`'s rows of its last dimension: the elements in 16 bytes when some
    row starts off a 16-byte boundary, else 0 (column tiles are aligned as they are)."""
    if math.prod(a.shape[:-1]) < 2:
        return 0
    isz = a.dtype.itemsize
    return 16 // isz if (row_stride(a, name) * isz) % 16 else 0


def window_steps(n_cols: int, window: int, per_step: int) -> int:
    """Steps of `per_step` elements that cover a row of n_cols from its window's start
    (up to window - 1 elements before the row)."""
    return tc.cdiv(n_cols + max(window - 1, 0), per_step)


@tc.func
def window_steps_of(n, WINDOW: tc.constexpr, BLOCK: tc.constexpr):
    """`window_steps` in a kernel: BLOCK-wide tiles covering a row of n from its window."""
    return tc.cdiv(n + (WINDOW - 1), BLOCK)


@tc.func
def window_start(x, row, WINDOW: tc.constexpr):
    """(pointer to the multiple of WINDOW elements at or before row `row`'s first element,
    how many elements before the row it is: 0..WINDOW-1, i32)."""
    start = row.astype(tc.int64) * x.stride(0)
    base = start // WINDOW * WINDOW
    return x.ptr + base, (start - base).astype(tc.int32)


@tc.func
def window_tile(x, base, lead, j, pad, BLOCK: tc.constexpr):
    """(tile, inside) of window tile j of a row (`window_start`'s base and lead): a
    (1, BLOCK) tile of x's dtype, `pad` outside the row, and where it holds the row's
    elements. (The offsets within the row are i32: i64 masks cost ~15 registers.)"""
    idx = j * BLOCK + tc.arange(0, BLOCK)[None, :]
    col = idx - lead
    inside = (col >= 0) & (col < x.shape[1])
    return tc.load(base + idx, mask=inside, other=pad), inside
