"""index_width: choose the integer width of every tensor-view access's offset arithmetic.

Each tile.load_view / tile.store_view gets `_index = "i32"` or `_index = "i64"`:
- i64 when the view's index type is i64 (the specialization could not prove
  that every element offset of the tensor fits in 31 bits), or when a tile
  index is itself a 64-bit integer;
- i32 otherwise: every in-bounds element offset then fits, and 32-bit
  arithmetic is what the GPU does fastest.

lower_views then builds the offsets in that type. Known limit, by design: the
product `index * tile_extent` of an i32 index is formed in i32, so a tile index
so far out of bounds that this product passes 2^31 could wrap around to an
in-bounds offset; real grids never come close. Pointer-tile arithmetic written
by the user (`x.ptr + offsets`) keeps the user's integer types: it is not widened.
"""
from __future__ import annotations

from tilec import dtypes as dt
from tilec.ir import Module
from tilec.ir import tile_ops as T
from tilec.ir.types import ScalarType

__all__ = ["index_width", "view_index_dtype"]


def view_index_dtype(op) -> dt.DType:
    """The offset type an unannotated view access needs (the rule above)."""
    if op.operands[0].type.index is dt.int64:
        return dt.int64
    for v in op.group("indices"):
        if isinstance(v.type, ScalarType) and v.type.dtype.bits > 32:
            return dt.int64
    return dt.int32


def index_width(module: Module) -> Module:
    for op in module.walk():
        if isinstance(op, (T.LoadViewOp, T.StoreViewOp, T.AtomicRMWViewOp)):
            op.attrs["_index"] = view_index_dtype(op).name
    return module
