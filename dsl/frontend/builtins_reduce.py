"""Reductions (tc.sum/max/min/prod/argmax/argmin, tc.reduce) and scans (tc.cumsum/cumprod)."""
from __future__ import annotations

from .. import dtypes as dt
from .. import language as lang
from ..ir import tile_ops as T
from ..ir.core import Block, Region
from . import semantic as S
from .calls import builtin_handler, inline_func
from .expressions import require_constexpr
from .values import TensorValue, is_py_scalar


def accumulation_dtype(d):
    """The dtype sums and products of `d` accumulate in and return: bool and integers narrower
    than 32 bits widen to i32 (unsigned ones to u32), as numpy widens integer sums (to 64 bits)
    and Triton widens i8/i16 sums to i32; wider integers and floats keep their type (f16, bf16
    and f8 accumulate in f32 but return their own dtype: lower_reductions and the interpreter)."""
    if d.is_bool:
        return dt.int32
    if d.is_int and d.bits < 32:
        return dt.int32 if d.is_signed else dt.uint32
    return d


def _accumulated(ctx, x: TensorValue) -> TensorValue:
    """`x` converted to its accumulation dtype, so the IR, the interpreter and the codegen
    all add and multiply in that type and the result has it."""
    return S.cast(ctx, x, accumulation_dtype(x.dtype))


def _input(ctx, fn, x) -> TensorValue:
    if not isinstance(x, TensorValue) or x.is_pointer or not x.is_tile:
        raise ctx.error(f"{fn} needs a tile, got {x.describe() if hasattr(x, 'describe') else repr(x)}")
    return x


def _axis(ctx, fn, x, axis):
    """None (all elements: the tile is flattened first) or a normalized axis."""
    if axis is None:
        if len(x.shape) > 1:
            x = ctx.value(T.ReshapeOp, x, shape=[x.type.numel])
        return x, 0, True
    require_constexpr(ctx, axis, f"the axis of {fn}")
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ctx.error(f"the axis of {fn} must be a constexpr int or None, got {axis!r}")
    rank = len(x.shape)
    if not -rank <= axis < rank:
        raise ctx.error(f"{fn}: axis {axis} is out of range for a tile of shape {list(x.shape)}")
    return x, axis % rank, False


def _keep(ctx, r, axis, flat, keep_dims, rank):
    if not keep_dims:
        return r
    if flat:
        return ctx.value(T.SplatOp, r, shape=[1] * rank)  # the flattened reduction gives a scalar
    if not r.is_tile:
        return ctx.value(T.SplatOp, r, shape=[1])
    return ctx.value(T.ExpandDimsOp, r, axis=axis)


def _reduction(kind):
    def handler(ctx, node, x, axis, keep_dims):
        fn = f"tc.{kind}"
        if axis is None and not keep_dims and (is_py_scalar(x) or (isinstance(x, TensorValue) and not x.is_tile
                                                                   and not x.is_pointer)):
            return _reduce_scalar(ctx, kind, x)  # a scalar is its own reduction, as in numpy
        x = _input(ctx, fn, x)
        require_constexpr(ctx, keep_dims, "keep_dims")
        rank = len(x.shape)
        if kind in ("sum", "prod"):
            x = _accumulated(ctx, x)
        x, ax, flat = _axis(ctx, fn, x, axis)
        r = ctx.value(T.ReduceOp, x, axis=ax, kind=kind)
        return _keep(ctx, r, ax, flat, keep_dims, rank)
    return handler


def _reduce_scalar(ctx, kind, x):
    if kind.startswith("arg"):
        return S.constant(ctx, 0, dt.int32)
    if isinstance(x, TensorValue) and kind in ("sum", "prod"):
        return _accumulated(ctx, x)
    return x


for _kind in ("sum", "max", "min", "prod", "argmax", "argmin"):
    builtin_handler(getattr(lang, _kind))(_reduction(_kind))


@builtin_handler(lang.reduce)
def _reduce(ctx, node, x, axis, combine_fn, keep_dims):
    x = _input(ctx, "tc.reduce", x)
    if not isinstance(combine_fn, lang.Func):
        raise ctx.error("tc.reduce's combine_fn must be a @tc.func taking two scalars and returning one")
    require_constexpr(ctx, keep_dims, "keep_dims")
    rank = len(x.shape)
    x, ax, flat = _axis(ctx, "tc.reduce", x, axis)
    elem = x.element
    blk = Block([elem, elem], ["a", "b"])
    saved = (ctx.builder.block, ctx.builder.index)
    ctx.builder.at_end(blk)
    try:
        out = inline_func(ctx, node, combine_fn, [TensorValue(blk.args[0]), TensorValue(blk.args[1])], {})
        if isinstance(out, TensorValue) and out.is_tile:
            raise ctx.error(f"the combiner '{combine_fn.name}' must return a scalar, got {out.describe()}")
        if out is None or isinstance(out, tuple):
            raise ctx.error(f"the combiner '{combine_fn.name}' must return one scalar")
        out = S.cast(ctx, S.to_tensor(ctx, out, elem.dtype), elem.dtype)
        ctx.builder.insert(T.YieldOp.build(out.value, loc=ctx.loc))
    finally:
        ctx.builder.block, ctx.builder.index = saved
    r = ctx.value(T.ReduceGenericOp, x, axis=ax, regions=[Region([blk])])
    return _keep(ctx, r, ax, flat, keep_dims, rank)


def _scan(kind):
    def handler(ctx, node, x, axis, reverse):
        fn = f"tc.cum{kind}"
        x = _input(ctx, fn, x)
        require_constexpr(ctx, reverse, "reverse")
        if axis is None:
            raise ctx.error(f"{fn} needs an axis")
        x, ax, _ = _axis(ctx, fn, x, axis)
        x = _accumulated(ctx, x)
        return ctx.value(T.ScanOp, x, axis=ax, kind=kind, reverse=bool(reverse))
    return handler


builtin_handler(lang.cumsum)(_scan("sum"))
builtin_handler(lang.cumprod)(_scan("prod"))
