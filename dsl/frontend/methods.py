"""Attributes and methods of run-time values: `t.sum(axis)`, `t.T`, `t.astype(d)`, `x.stride(d)`."""
from __future__ import annotations

from .. import language as lang
from ..ir import tile_ops as T
from . import semantic as S
from .values import BoundMethod, TensorValue

__all__ = ["tensor_attribute", "view_stride", "astype"]

# methods that are the tc.* builtin of the same name with the tile as first argument
_BUILTIN_METHODS = {
    "sum": lang.sum, "max": lang.max, "min": lang.min, "argmax": lang.argmax, "argmin": lang.argmin,
    "prod": lang.prod, "cumsum": lang.cumsum, "cumprod": lang.cumprod, "reshape": lang.reshape,
    "broadcast_to": lang.broadcast_to, "expand_dims": lang.expand_dims, "permute": lang.permute,
    "trans": lang.trans, "reduce": lang.reduce,
}


def astype(ctx, node, x: TensorValue, dtype):
    dtype = S.as_dtype(ctx, dtype, "astype's argument")
    return S.cast(ctx, x, dtype)


def view_stride(ctx, node, view, dim):
    from .expressions import _const_index, view_dim
    return view_dim(ctx, view, _const_index(ctx, dim, view.rank, node), "stride")


def tensor_attribute(ctx, t: TensorValue, attr: str, node):
    if attr == "shape":
        return t.shape
    if attr == "dtype":
        if t.is_pointer:
            raise ctx.error("pointers have no dtype; load them first", node)
        return t.dtype
    if attr == "ndim":
        return len(t.shape)
    if attr == "T":
        if len(t.shape) != 2:
            raise ctx.error(f".T needs a 2-D tile, got shape {list(t.shape)}", node)
        return ctx.value(T.PermuteOp, t, order=[1, 0])
    if attr in ("astype", "to"):
        return BoundMethod(attr, astype, t)
    if attr in _BUILTIN_METHODS:
        return BoundMethod(attr, _BUILTIN_METHODS[attr], t)
    raise ctx.error(f"tiles have no attribute '{attr}'; available: shape, dtype, ndim, T, astype, "
                    + ", ".join(_BUILTIN_METHODS), node)
