"""Row plumbing of the elementwise ops: arrays seen as (rows, cols) with a row stride,
slices of the last dimension, and the tile heuristic.

Elementwise kernels address memory through pointer tiles built from a row stride
and a column index rather than through views: the compiler then knows, from the
"divisible by 16" specialization of the column count and the strides, that
groups of 8 (f16/bf16) or 4 (f32) consecutive elements share one mask, and emits
16-byte ld.global.v4 / st.global.v4. (A view's extents carry no divisibility.)
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence, Tuple


import tilec as tc

from . import _plan
from ._common import Arr, BF16Array, as_array, contiguous_strides, next_pow2, row_stride, view
from .schedules import FLAT_TILES, ROW_TILES
from .tuning import TABLES, ElementwiseTuning

__all__ = ["Rows", "rows_form", "rows_layout", "row_view", "slice_last", "sliced", "TileConfig", "tile_config",
           "program", "tile_origin", "INDEX_LIMIT", "wide"]

# Element offsets at or past this need 64-bit index arithmetic in the kernels.
INDEX_LIMIT = 2 ** 31 - 2 ** 20


class Rows(tuple):
    """(kernel argument, row stride in elements) of one array in a (rows, cols) form."""

    @property
    def arg(self):
        return self[0]

    @property
    def stride(self) -> int:
        return self[1]


def _contiguous(a: Arr) -> bool:
    return all(s == c for s, c, n in zip(a.strides, contiguous_strides(a.shape), a.shape) if n > 1)


def rows_layout(arrays: Sequence[Arr], names: Sequence[str]) -> Tuple[int, int, Tuple[int, ...]]:
    """(n_rows, n_cols, row stride per array) for arrays of one shape, from their
    descriptions alone (what a plan reads; `rows_form` makes the views).

    When every array is contiguous the whole tensor is one row (the longest runs,
    the fewest masks); otherwise each array is its rows of the last dimension with
    its own row stride (strided rows are fine, a non-unit last stride is not).
    """
    shape = arrays[0].shape
    if len(shape) == 0:
        raise ValueError(f"{names[0]}: a 0-d array; pass an array of at least 1 dimension")
    n = math.prod(shape)
    if all(_contiguous(a) for a in arrays):
        return 1, n, tuple(max(n, 1) for _ in arrays)
    n_cols = shape[-1]
    n_rows = n // n_cols if n_cols else 0
    return n_rows, n_cols, tuple(row_stride(a, name) for a, name in zip(arrays, names))


def rows_form(arrays, names) -> Tuple[int, int, list]:
    """(n_rows, n_cols, [Rows per array]): `rows_layout`'s form with each array's view."""
    n_rows, n_cols, strides = rows_layout(arrays, names)
    return n_rows, n_cols, [Rows((view(a, (n_rows, n_cols), (st, 1)), st)) for a, st in zip(arrays, strides)]


def sliced(a: Arr, start: int, stop: int) -> Arr:
    """The description of `a[..., start:stop]` (what `slice_last` gives, without an array)."""
    return replace(a, obj=None, shape=a.shape[:-1] + (stop - start,))


def wide(*extents) -> bool:
    """Whether an element offset reaches INDEX_LIMIT (the kernels' WIDE: 64-bit indices)."""
    return any(int(e) >= INDEX_LIMIT for e in extents)


def row_view(a: Arr, name: str) -> Rows:
    """`a` as its rows of the last dimension (leading dimensions flattened), never one long row."""
    n_cols = a.shape[-1]
    n_rows = math.prod(a.shape[:-1])
    stride = row_stride(a, name)
    return Rows((view(a, (n_rows, n_cols), (stride, 1)), stride))


def slice_last(a: Arr, start: int, stop: int) -> Arr:
    """`a[..., start:stop]` without a copy, for every array kind."""
    if a.kind == "bf16host":
        return as_array(BF16Array(a.obj.values[..., start:stop], _rounded=True), "slice")
    if a.kind in ("numpy", "torch", "cupy"):
        part = a.obj[..., start:stop]
        if _plan.recording() is not None:
            _plan.register_slice(a.obj, part, start * a.strides[-1])
        return as_array(part, "slice")
    from tilec.runtime.interop import array_info  # noqa: PLC0415
    isz = a.dtype.itemsize
    ptr = array_info(a.obj)[0] + start * a.strides[-1] * isz
    shape = a.shape[:-1] + (stop - start,)
    d = tc.DeviceArray(ptr, shape, tuple(s * isz for s in a.strides), a.dtype, a.device, owner=a.obj)
    if _plan.recording() is not None:
        _plan.register_slice(a.obj, d, start * a.strides[-1])
    return as_array(d, "slice")


class TileConfig(tuple):
    """(block_rows, block_cols, num_warps, flat) of an elementwise launch; flat: the
    array is one row, and the kernels take tile i at column i * block_cols (`tile_origin`)."""

    @property
    def rows(self) -> int:
        return self[0]

    @property
    def cols(self) -> int:
        return self[1]

    @property
    def num_warps(self) -> int:
        return self[2]

    @property
    def flat(self) -> bool:
        return self[3]

    def grid(self, n_rows: int, n_cols: int, batch: int = 1) -> Tuple[int]:
        return (tc.cdiv(n_rows, self.rows) * tc.cdiv(n_cols, self.cols) * batch,)

    @property
    def schedule(self) -> str:
        """FLAT_TILES for a single row, else ROW_TILES (schedules.py)."""
        return FLAT_TILES if self.flat else ROW_TILES


# The sm_90 table's numbers under their old names (tests, docs): plans read `tuning_for(target)`.
_T = TABLES["sm_90"].elementwise
TILE_ELEMS, FLAT_TILE_ELEMS, FLAT_PER_THREAD = _T.tile_elems, _T.flat_tile_elems, _T.flat_per_thread


def tile_config(n_rows: int, n_cols: int, tile_elems: Optional[int] = None, *,
                t: Optional[ElementwiseTuning] = None) -> TileConfig:
    """The elementwise heuristic (numbers from `t`, the target's table; default sm_90's).

    A program handles a (BR, BC) tile of about `tile_elems` elements (by default
    t.tile_elems, t.flat_tile_elems for a single row): BC = next_pow2(n_cols) capped
    at `tile_elems`, BR fills the rest with rows (never more than there are).
    num_warps = tile elements / (32 t.per_thread), clamped to 1..t.max_warps, so
    small inputs do not launch idle warps. A single row is `flat`: t.flat_tile_elems
    per program at t.flat_per_thread elements per thread.
    """
    t = t or _T
    flat = n_rows == 1
    tile_elems = tile_elems or (t.flat_tile_elems if flat else t.tile_elems)
    bc = min(next_pow2(max(n_cols, 1)), tile_elems)
    br = min(max(tile_elems // bc, 1), next_pow2(max(n_rows, 1)))
    per_thread = t.flat_per_thread if flat else t.per_thread
    warps = min(max(br * bc // (32 * per_thread), 1), t.max_warps)
    return TileConfig((br, bc, warps, flat))


@tc.func
def program(WIDE: tc.constexpr):
    """This program's id, as i64 when WIDE (element offsets past INDEX_LIMIT)."""
    pid = tc.program_id(0)
    if WIDE:
        pid = pid.astype(tc.int64)
    return pid


@tc.func
def tile_origin(pid, n_cols, BR: tc.constexpr, BC: tc.constexpr, FLAT: tc.constexpr):
    """(rows, first column) of tile `pid` of a row-major (BR, BC) tiling of rows of
    n_cols. FLAT (a single row): tile pid starts at column pid * BC, with no integer
    division (its ~60 instructions came before the first load)."""
    if FLAT:
        rows = tc.arange(0, BR)
        col0 = pid * BC
    else:
        n_col_tiles = tc.cdiv(n_cols, BC)
        rows = (pid // n_col_tiles) * BR + tc.arange(0, BR)
        col0 = (pid % n_col_tiles) * BC
    return rows, col0
