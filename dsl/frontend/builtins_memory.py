"""tc.load, tc.store and the atomics, on tensor views and on pointer tiles."""
from __future__ import annotations

from .. import dtypes as dt
from .. import language as lang
from ..ir import tile_ops as T
from . import semantic as S
from .calls import builtin_handler
from .expressions import require_constexpr, view_dim
from .values import TensorValue, ViewValue, is_py_scalar, py_scalar

_SEMS = ("relaxed", "acquire", "release", "acq_rel")
_SCOPES = ("cta", "gpu", "sys")


def _describe(x):
    return x.describe() if hasattr(x, "describe") else repr(x)


def _view_indices(ctx, fn, view: ViewValue, index, offset):
    """(mode, indices in the view's index type) from index= or offset=."""
    if (index is None) == (offset is None):
        raise ctx.error(f"{fn} on a view needs exactly one of index= (tile coordinates) or offset= (element "
                        "offsets)")
    mode, idx = ("index", index) if index is not None else ("offset", offset)
    if not isinstance(idx, tuple):
        idx = (idx,)
    if len(idx) != view.rank:
        raise ctx.error(f"{fn}: a rank-{view.rank} view needs {view.rank} {mode} values, got {len(idx)}")
    return mode, [S.ensure_int_scalar(ctx, i, f"{fn} {mode} values", view.type.index) for i in idx]


def _view_shape(ctx, fn, view, shape):
    if shape is None:
        raise ctx.error(f"{fn} on a view needs shape=(...) giving the tile shape")
    require_constexpr(ctx, shape, f"the shape of {fn}")
    shape = S.check_shape(ctx, shape, "the tile shape")
    if len(shape) != view.rank:
        raise ctx.error(f"{fn}: shape {list(shape)} has rank {len(shape)} but the view has rank {view.rank}")
    return shape


def _padding(ctx, view, padding):
    d = view.dtype
    if padding is None:
        return False if d.is_bool else (0.0 if d.is_float else 0)
    require_constexpr(ctx, padding, "padding")
    if not is_py_scalar(padding):
        raise ctx.error(f"padding must be a number, got {padding!r}")
    padding = py_scalar(padding)
    if d.is_float:
        return float(padding)
    if isinstance(padding, float):
        if padding != int(padding):
            raise ctx.error(f"padding {padding} is not an integer, but the view holds {d.name}")
        padding = int(padding)
    return bool(padding) if d.is_bool else int(padding)


def _pointer(ctx, fn, p) -> TensorValue:
    if isinstance(p, TensorValue) and p.is_pointer:
        return p
    raise ctx.error(f"{fn} takes a tensor view or pointers (x.ptr + offsets), got {_describe(p)}")


def _mask(ctx, mask):
    if mask is None:
        return None
    if isinstance(mask, ViewValue) or (isinstance(mask, TensorValue) and mask.is_pointer):
        raise ctx.error("mask must be a boolean tile or scalar")
    return S.to_bool(ctx, mask, "mask")


def _value_for(ctx, fn, value, dtype, what="value"):
    """A value to write through pointers to `dtype`: Python numbers convert, tiles must match."""
    if isinstance(value, TensorValue) and not value.is_pointer:
        if value.dtype is not dtype:
            raise ctx.error(f"{fn}: the {what} is {value.dtype.name} but the memory holds {dtype.name}; convert it "
                            f"with .astype(...)")
        return value
    if is_py_scalar(value):
        return S.constant(ctx, value, dtype)
    raise ctx.error(f"{fn}: the {what} must be a tile or a number, got {_describe(value)}")


def _broadcast_all(ctx, *xs):
    shape = ()
    for x in xs:
        if x is not None:
            shape = S.broadcast_shapes(ctx, shape, x.shape)
    return [S.broadcast_to(ctx, x, shape) if x is not None else None for x in xs]


# ----------------------------------------------------------------------------- load / store
@builtin_handler(lang.load)
def _load(ctx, node, pointer, mask, other, index, offset, shape, padding, multicast, eviction_policy, realign):
    multicast, realign = (_flag(ctx, v, k) for v, k in ((multicast, "multicast"), (realign, "realign")))
    hint = _eviction(ctx, eviction_policy)
    if isinstance(pointer, ViewValue):
        if mask is not None or other is not None:
            raise ctx.error("mask= and other= are for pointer loads; a view load reads padding= where the tile "
                            "is out of bounds")
        if realign:
            raise ctx.error("realign= is for pointer loads; a view load picks its accesses from the view's "
                            "strides and alignment")
        mode, idx = _view_indices(ctx, "tc.load", pointer, index, offset)
        shape = _view_shape(ctx, "tc.load", pointer, shape)
        extra = dict(hint, **({"multicast": True} if multicast else {}))
        return ctx.value(T.LoadViewOp, pointer.value, *idx, shape=list(shape),
                         padding=_padding(ctx, pointer, padding), mode=mode, **extra)
    if multicast:
        raise ctx.error("multicast= is for view loads (tc.load(view, index=..., shape=..., multicast=True))")
    for v, k in ((index, "index"), (offset, "offset"), (shape, "shape"), (padding, "padding")):
        if v is not None:
            raise ctx.error(f"{k}= is for view loads (tc.load(view, index=..., shape=...)); pointer loads take "
                            "mask= and other=")
    ptr = _pointer(ctx, "tc.load", pointer)
    if realign:
        hint["realign"] = True
    m = _mask(ctx, mask)
    if m is None:
        if other is not None:
            raise ctx.error("other= needs mask=: it is the value of masked-off elements")
        return ctx.value(T.LoadOp, ptr, **hint)
    ptr, m = _broadcast_all(ctx, ptr, m)
    elem = ptr.element.pointee
    if other is None:
        other = False if elem.is_bool else 0
    if isinstance(other, TensorValue):
        o = S.broadcast_to(ctx, S.cast(ctx, other, elem), ptr.shape)
    elif is_py_scalar(other):
        o = S.constant(ctx, other, elem, ptr.shape)
    else:
        raise ctx.error(f"other must be a number or tile, got {_describe(other)}")
    return ctx.value(T.LoadMaskedOp, ptr, m, o, **hint)


def _flag(ctx, value, what) -> bool:
    require_constexpr(ctx, value, what)
    value = py_scalar(value)
    if not isinstance(value, bool):
        raise ctx.error(f"{what} must be True or False, got {value!r}")
    return value


_EVICTION = {None: None, "evict_normal": None, **{f"evict_{p}": p for p in T.EVICT_POLICIES}}


def _eviction(ctx, policy) -> dict:
    """The load's `evict` attribute for `eviction_policy=` (empty for the default)."""
    require_constexpr(ctx, policy, "eviction_policy")
    policy = py_scalar(policy) if policy is not None else None
    if not isinstance(policy, (str, type(None))) or policy not in _EVICTION:
        raise ctx.error(f"eviction_policy must be one of {', '.join(repr(k) for k in _EVICTION)}, got {policy!r}")
    return {"evict": _EVICTION[policy]} if _EVICTION[policy] else {}


@builtin_handler(lang.store)
def _store(ctx, node, pointer, value, mask, index, offset, tile):
    if isinstance(pointer, ViewValue):
        if tile is not None and value is not None:
            raise ctx.error("tc.store on a view takes the tile once: tc.store(view, index=..., tile=t)")
        t = tile if tile is not None else value
        if mask is not None:
            raise ctx.error("tc.store on a view takes no mask: out-of-bounds elements are skipped; use pointers "
                            "(x.ptr + offsets) for masked stores")
        if not isinstance(t, TensorValue) or not t.is_tile or t.is_pointer:
            raise ctx.error(f"tc.store on a view needs tile=<a tile>, got {_describe(t)}")
        mode, idx = _view_indices(ctx, "tc.store", pointer, index, offset)
        if t.dtype is not pointer.dtype:
            raise ctx.error(f"tc.store: the tile is {t.dtype.name} but the view holds {pointer.dtype.name}; convert "
                            "it with t.astype(view.dtype)")
        if len(t.shape) != pointer.rank:
            raise ctx.error(f"tc.store: a rank-{pointer.rank} view needs a rank-{pointer.rank} tile, got shape "
                            f"{list(t.shape)}")
        ctx.create(T.StoreViewOp, pointer.value, *idx, t, mode=mode)
        return None
    for v, k in ((index, "index"), (offset, "offset"), (tile, "tile")):
        if v is not None:
            raise ctx.error(f"{k}= is for view stores (tc.store(view, index=..., tile=t)); pointer stores are "
                            "tc.store(ptrs, value, mask=m)")
    ptr = _pointer(ctx, "tc.store", pointer)
    if value is None:
        raise ctx.error("tc.store(ptrs, value, mask=m) needs a value")
    v = _value_for(ctx, "tc.store", value, ptr.element.pointee)
    m = _mask(ctx, mask)
    ptr, v, m = _broadcast_all(ctx, ptr, v, m)
    if m is None:
        ctx.create(T.StoreOp, ptr, v)
    else:
        ctx.create(T.StoreMaskedOp, ptr, v, m)
    return None


# ----------------------------------------------------------------------------- atomics
def _view_pointers(ctx, fn, view: ViewValue, index, offset, shape):
    """Pointers to the tile of `shape` at index/offset of a view, and the in-bounds mask."""
    mode, idx = _view_indices(ctx, fn, view, index, offset)
    rank = view.rank
    ptrs, inb = ctx.value(T.ViewPtrOp, view.value), None
    offs = None
    for d in range(rank):
        start = S.binary(ctx, "mul", idx[d], shape[d]) if mode == "index" else idx[d]
        r = S.cast(ctx, ctx.value(T.ArangeOp, start=0, end=shape[d]), view.type.index)
        r = S.binary(ctx, "add", r, start)
        ok = S.binary(ctx, "and", S.compare(ctx, "ge", r, 0), S.compare(ctx, "lt", r, view_dim(ctx, view, d, "shape")))
        term = S.binary(ctx, "mul", r, view_dim(ctx, view, d, "stride"))
        for axis in range(rank):
            if axis != d:
                term = ctx.value(T.ExpandDimsOp, term, axis=axis)
                ok = ctx.value(T.ExpandDimsOp, ok, axis=axis)
        offs = term if offs is None else S.binary(ctx, "add", offs, term)
        inb = ok if inb is None else S.binary(ctx, "and", inb, ok)
    offs = S.broadcast_to(ctx, offs, shape)
    inb = S.broadcast_to(ctx, inb, shape)
    return S.pointer_offset(ctx, ptrs, offs), inb


def _check_order(ctx, fn, sem, scope) -> None:
    """An atomic's memory order and scope: constexprs among the allowed ones."""
    for v, k, allowed in ((sem, "sem", _SEMS), (scope, "scope", _SCOPES)):
        require_constexpr(ctx, v, k)
        if v not in allowed:
            raise ctx.error(f"{fn}: {k} must be one of {', '.join(allowed)}, got {v!r}")


def _atomic_operands(ctx, fn, pointer, values, mask, index, offset, sem, scope):
    _check_order(ctx, fn, sem, scope)
    if isinstance(pointer, ViewValue):
        tiles = [v for v in values if isinstance(v, TensorValue) and v.is_tile]
        if not tiles:
            raise ctx.error(f"{fn} on a view needs a tile value (its shape is the shape of the updated tile)")
        shape = tiles[0].shape
        if len(shape) != pointer.rank:
            raise ctx.error(f"{fn}: a rank-{pointer.rank} view needs a rank-{pointer.rank} tile, got shape "
                            f"{list(shape)}")
        ptr, inb = _view_pointers(ctx, fn, pointer, index, offset, shape)
    else:
        if index is not None or offset is not None:
            raise ctx.error(f"index= and offset= are for views; {fn} on pointers takes (ptrs, value, mask=)")
        ptr, inb = _pointer(ctx, fn, pointer), None
    elem = ptr.element.pointee
    vals = [_value_for(ctx, fn, v, elem) for v in values]
    m = _mask(ctx, mask)
    if inb is not None:
        m = inb if m is None else S.binary(ctx, "and", inb, m)
    ptr, m, *vals = _broadcast_all(ctx, ptr, m, *vals)
    if m is None:
        m = S.constant(ctx, True, dt.bool_, ptr.shape)
    return ptr, vals, m


def _rmw(kind):
    def handler(ctx, node, pointer, value, mask, index, offset, sem, scope):
        fn = f"tc.atomic_{kind}"
        if isinstance(pointer, ViewValue) and mask is None and isinstance(value, TensorValue) and value.is_tile:
            return _rmw_view(ctx, fn, kind, pointer, value, index, offset, sem, scope)
        ptr, (v,), m = _atomic_operands(ctx, fn, pointer, [value], mask, index, offset, sem, scope)
        return ctx.value(T.AtomicRMWOp, ptr, v, m, kind=kind, sem=sem, scope=scope)
    return handler


def _rmw_view(ctx, fn, kind, view: ViewValue, value, index, offset, sem, scope):
    """The view form without a mask: one tile.atomic_rmw_view (lower_views makes it the
    pointer form with the view's bounds as its mask)."""
    _check_order(ctx, fn, sem, scope)
    if len(value.shape) != view.rank:
        raise ctx.error(f"{fn}: a rank-{view.rank} view needs a rank-{view.rank} tile, got shape {list(value.shape)}")
    mode, idx = _view_indices(ctx, fn, view, index, offset)
    v = _value_for(ctx, fn, value, view.dtype)
    return ctx.value(T.AtomicRMWViewOp, view.value, *idx, v, kind=kind, sem=sem, scope=scope, mode=mode)


for _kind in ("add", "max", "min", "xchg"):
    builtin_handler(getattr(lang, f"atomic_{_kind}"))(_rmw(_kind))


@builtin_handler(lang.atomic_cas)
def _atomic_cas(ctx, node, pointer, cmp, value, mask, index, offset, sem, scope):
    ptr, (c, v), m = _atomic_operands(ctx, "tc.atomic_cas", pointer, [cmp, value], mask, index, offset, sem, scope)
    return ctx.value(T.AtomicCASOp, ptr, c, v, m, sem=sem, scope=scope)
