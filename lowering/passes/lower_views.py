"""lower_views: tensor-view loads and stores become masked pointer-tile accesses.

    %t = tile.load_view %x, %i, %j {shape = [BM, BN], padding = 0.0}

becomes, with I the offset type chosen by index_width (`_index`):

    rows = splat(i * BM : I) + arange(0, BM) : I          (one 1-D tile per dimension)
    cols = splat(j * BN : I) + arange(0, BN) : I
    off  = broadcast(expand(rows)) * stride0 + broadcast(expand(cols))    (stride 1 folded)
    mask = broadcast(expand(rows < shape0)) & broadcast(expand(cols < shape1))
    %t   = tile.load_masked splat(view_ptr x) + off, mask, splat(padding)

("offset" mode starts at the indices themselves and also masks negative
coordinates.) Strides known at compile time become constants; the others come
from tile.view_dim. A squeezed dimension (`squeeze`: a box extent of 1 that the tile
does not have) adds its scalar offset to the base pointer and its scalar bounds check
to the mask, so a (1, BM, D) box of a rank-3 view is a rank-2 pointer tile. A load with
an `order` builds the pointer tile in that order (the transposed tile of `tc.load(...).T`).
Later passes then only see pointer accesses, and axis_info
finds the contiguity (arange along a unit-stride dimension) that vectorizes them.
"""
from __future__ import annotations

from typing import List

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import ScalarType, TileType

from .index_width import view_index_dtype
from .loop_bounds import below_block_count
from .rewrite import build_constant

__all__ = ["lower_views"]


def _cast(b: Builder, v: Value, to: dt.DType) -> Value:
    cur = v.type.element.dtype if isinstance(v.type, TileType) else v.type.dtype
    return v if cur is to else b.value(T.CastOp, v, to=to)



def _to_full(b: Builder, v: Value, dim: int, shape) -> Value:
    """A 1-D tile along `dim` expanded and broadcast to the whole tile `shape`."""
    rank = len(shape)
    for d in range(rank):
        if d != dim:
            v = b.value(T.ExpandDimsOp, v, axis=d)
    if v.type.shape != tuple(shape):
        v = b.value(T.BroadcastOp, v, shape=list(shape))
    return v


def _scalar_term(b: Builder, view: Value, d: int, start: Value, idx_t: dt.DType, offset_mode: bool):
    """(element offset, in bounds) of a squeezed dimension's one coordinate, as scalars."""
    extent = _cast(b, b.value(T.ViewDimOp, view, dim=d, kind="shape"), idx_t)
    inside = b.value(T.CmpOp, start, extent, pred="lt")
    if offset_mode:
        inside = b.value(T.AndOp, inside, b.value(T.CmpOp, start, build_constant(b, ScalarType(idx_t), 0), pred="ge"))
    stride = view.type.strides[d]
    if stride is None:
        off = b.value(T.MulOp, start, _cast(b, b.value(T.ViewDimOp, view, dim=d, kind="stride"), idx_t))
    else:
        off = start if stride == 1 else b.value(T.MulOp, start, build_constant(b, ScalarType(idx_t), stride))
    return off, inside


def _padding(op, dtype: dt.DType):
    p = op.attrs.get("padding", 0)
    if dtype.is_bool:
        return bool(p)
    if dtype.is_int:
        return int(p)
    return float(p)


def _lower(op) -> None:
    b = Builder().before(op)
    b.loc = op.loc
    view = op.operands[0]
    vt = view.type
    idx_t = dt.DType.get(op.attrs["_index"]) if "_index" in op.attrs else view_index_dtype(op)
    box = op.box_shape()
    squeeze = op.attrs.get("squeeze") or []
    shape = op.tile_shape() if isinstance(op, T.LoadViewOp) else [n for d, n in enumerate(box) if d not in squeeze]
    order = op.attrs.get("order") or list(range(len(shape)))
    offset_mode = op.attrs.get("mode", "index") == "offset"
    offset = mask = None
    base_off = base_in = None   # the squeezed dimensions' scalar offset and bounds check
    dim = 0
    for d, index in enumerate(op.group("indices")):
        n = box[d]
        start = _cast(b, index, idx_t)
        if not offset_mode and n != 1:
            start = b.value(T.MulOp, start, build_constant(b, ScalarType(idx_t), n))
        if d in squeeze:
            off, inside = _scalar_term(b, view, d, start, idx_t, offset_mode)
            base_off = off if base_off is None else b.value(T.AddOp, base_off, off)
            base_in = inside if base_in is None else b.value(T.AndOp, base_in, inside)
            continue
        coords = _cast(b, b.value(T.ArangeOp, start=0, end=n), idx_t)
        coords = b.value(T.AddOp, b.value(T.SplatOp, start, shape=[n]), coords)
        if not offset_mode and below_block_count(index, view, d, n):
            inside = None   # the loop's bound keeps every block whole (loop_bounds)
        else:
            extent = b.value(T.ViewDimOp, view, dim=d, kind="shape")
            extent = _cast(b, extent, idx_t)
            inside = b.value(T.CmpOp, coords, b.value(T.SplatOp, extent, shape=[n]), pred="lt")
        if offset_mode:
            zero = b.value(T.SplatOp, build_constant(b, ScalarType(idx_t), 0), shape=[n])
            inside = b.value(T.AndOp, inside, b.value(T.CmpOp, coords, zero, pred="ge"))
        stride = vt.strides[d]
        if stride is None:
            s = _cast(b, b.value(T.ViewDimOp, view, dim=d, kind="stride"), idx_t)
            coords = b.value(T.MulOp, coords, b.value(T.SplatOp, s, shape=[n]))
        elif stride != 1:
            coords = b.value(T.MulOp, coords, build_constant(b, TileType((n,), ScalarType(idx_t)), stride))
        term = _to_full(b, coords, order.index(dim), shape)   # the tile dimension box dim d became
        if inside is not None:
            inside = _to_full(b, inside, order.index(dim), shape)
        dim += 1
        offset = term if offset is None else b.value(T.AddOp, offset, term)
        if inside is not None:
            mask = inside if mask is None else b.value(T.AndOp, mask, inside)
    if base_in is not None:
        base_in = b.value(T.SplatOp, base_in, shape=shape)
        mask = base_in if mask is None else b.value(T.AndOp, mask, base_in)
    if mask is None:   # every dimension proven in bounds
        mask = build_constant(b, TileType(tuple(shape), ScalarType(dt.bool_)), True)
    base = b.value(T.ViewPtrOp, view)
    if base_off is not None:
        base = b.value(T.AddPtrOp, base, base_off)
    ptrs = b.value(T.AddPtrOp, b.value(T.SplatOp, base, shape=shape), offset)
    if isinstance(op, T.LoadViewOp):
        rt = op.results[0].type
        other = build_constant(b, rt, _padding(op, vt.dtype))
        new = b.value(T.LoadMaskedOp, ptrs, mask, other)
        # the eviction hint, and tma_loads' tag (pipeline_loads may copy this load with TMA)
        new.owner.attrs.update({k: op.attrs[k] for k in ("evict", "_tma") if k in op.attrs})
        new.name_hint = op.results[0].name_hint
        op.results[0].replace_all_uses_with(new)
    elif isinstance(op, T.AtomicRMWViewOp):
        new = b.value(T.AtomicRMWOp, ptrs, op.operands[-1], mask,
                      **{k: op.attrs[k] for k in ("kind", "sem", "scope") if k in op.attrs})
        new.name_hint = op.results[0].name_hint
        op.results[0].replace_all_uses_with(new)
    else:
        b.create(T.StoreMaskedOp, ptrs, op.operands[-1], mask)
    op.erase()


def lower_views(module: Module) -> Module:
    todo: List = [op for op in module.walk() if isinstance(op, (T.LoadViewOp, T.StoreViewOp, T.AtomicRMWViewOp))]
    for op in todo:
        _lower(op)
    return module
