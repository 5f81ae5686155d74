"""tc.* builtins for the grid, tile construction, elementwise math, shapes, dot and debugging."""
from __future__ import annotations

from .. import dtypes as dt
from .. import language as lang
from ..dtypes import DType
from ..ir import tile_ops as T
from ..ir.types import is_pow2, next_pow2
from ..options import CLUSTER_SIZES
from . import semantic as S
from .calls import builtin_handler
from .expressions import require_constexpr
from .values import TensorValue, ViewValue, is_constexpr, is_py_scalar, py_scalar

__all__ = ["where"]


def _axis_arg(ctx, axis, what="axis"):
    require_constexpr(ctx, axis, what)
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ctx.error(f"{what} must be a constexpr int, got {axis!r}")
    return axis


def _tile(ctx, x, what) -> TensorValue:
    if isinstance(x, TensorValue) and not x.is_pointer:
        return x
    if is_py_scalar(x):
        return S.to_tensor(ctx, x)
    raise ctx.error(f"{what} must be a tile or scalar, got {x.describe() if hasattr(x, 'describe') else repr(x)}")


def _norm_axis(ctx, axis, rank, what="axis"):
    axis = _axis_arg(ctx, axis, what)
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} is out of range for a rank-{rank} tile")
    return axis % rank


# ----------------------------------------------------------------------------- grid
@builtin_handler(lang.program_id)
def _program_id(ctx, node, axis):
    axis = _axis_arg(ctx, axis)
    if axis not in (0, 1, 2):
        raise ctx.error(f"tc.program_id axis must be 0, 1 or 2, got {axis}")
    return ctx.value(T.ProgramIdOp, axis=axis)


@builtin_handler(lang.cluster_rank)
def _cluster_rank(ctx, node):
    return ctx.value(T.ClusterRankOp)


# Builtins without arguments or results: each becomes its one op, where it is called.
_SYNC_OPS = {lang.cluster_sync: T.ClusterSyncOp, lang.barrier: T.BarrierOp,
             lang.grid_dependency_wait: T.GridDependencyWaitOp, lang.launch_dependents: T.LaunchDependentsOp}


def _sync_handler(op_class):
    def handler(ctx, node):
        ctx.create(op_class)
    return handler


for _fn, _op_class in _SYNC_OPS.items():
    builtin_handler(_fn)(_sync_handler(_op_class))


@builtin_handler(lang.cluster_gather)
def _cluster_gather(ctx, node, value, size, padding):
    size = _axis_arg(ctx, size, "tc.cluster_gather's size")
    if size not in CLUSTER_SIZES:
        raise ctx.error(f"tc.cluster_gather's size must be the launch's cluster (1 to 8), got {size}")
    values = list(value) if isinstance(value, tuple) else [value]
    if not values:
        raise ctx.error("tc.cluster_gather needs at least one value")
    scalars = []
    for x in values:
        v = _tile(ctx, x, "tc.cluster_gather's value")
        if v.is_tile:
            raise ctx.error(f"tc.cluster_gather's value must be a scalar, got a tile of shape {list(v.shape)}")
        if v.dtype not in (dt.float32, dt.int32):
            raise ctx.error(f"tc.cluster_gather takes f32 or i32 scalars, got {v.dtype.name}; cast it first")
        scalars.append(v)
    attrs = _gather_padding(ctx, padding, size, scalars, isinstance(value, tuple))
    op = ctx.create(T.ClusterGatherOp, *scalars, size=size, **attrs)
    out = tuple(TensorValue(r) for r in op.results)
    return out if isinstance(value, tuple) else out[0]


def _gather_padding(ctx, padding, size: int, scalars, as_tuple: bool) -> dict:
    """cluster_gather's `padding` attribute (one number per value, in its dtype) where its
    tiles have entries past `size` (not a power of two: then required); else no attribute."""
    if padding is None:
        if not is_pow2(size):
            raise ctx.error(f"tc.cluster_gather of {size} programs returns tiles of {next_pow2(size)} "
                            "entries: give `padding=` (a number per value) for the entries past the cluster")
        return {}
    require_constexpr(ctx, padding, "tc.cluster_gather's padding")
    pads = [py_scalar(p) for p in (padding if isinstance(padding, tuple) else (padding,))]
    n = len(scalars)
    if isinstance(padding, tuple) != as_tuple or len(pads) != n:
        raise ctx.error(f"tc.cluster_gather's padding must match its value: {'a tuple of ' if as_tuple else ''}"
                        f"{n} number{'s' if n > 1 else ''}, got {padding!r}")
    if not all(is_py_scalar(p) and not isinstance(p, bool) for p in pads):
        raise ctx.error(f"tc.cluster_gather's padding must be numbers, got {padding!r}")
    for v, pad in zip(scalars, pads):
        if v.dtype is dt.int32 and not isinstance(pad, int):
            raise ctx.error(f"tc.cluster_gather's padding for an i32 value must be an int, got {pad!r}")
    if is_pow2(size):
        return {}
    return {"padding": [float(p) if v.dtype is dt.float32 else p for v, p in zip(scalars, pads)]}


@builtin_handler(lang.num_programs)
def _num_programs(ctx, node, axis):
    axis = _axis_arg(ctx, axis)
    if axis not in (0, 1, 2):
        raise ctx.error(f"tc.num_programs axis must be 0, 1 or 2, got {axis}")
    return ctx.value(T.NumProgramsOp, axis=axis)


@builtin_handler(lang.cdiv)
def _cdiv(ctx, node, a, b):
    return S.binary(ctx, "floordiv", S.binary(ctx, "sub", S.binary(ctx, "add", a, b), 1), b)


@builtin_handler(lang.static_range)
def _static_range(ctx, node, start, end, step):
    raise ctx.error("tc.static_range can only be used as the iterable of a for loop")


@builtin_handler(lang.range)
def _range(ctx, node, start, end, step, num_stages):
    raise ctx.error("tc.range can only be used as the iterable of a for loop")


# ----------------------------------------------------------------------------- construction
@builtin_handler(lang.arange)
def _arange(ctx, node, start, end):
    for v, what in ((start, "start"), (end, "end")):
        require_constexpr(ctx, v, f"tc.arange {what}")
        if not isinstance(v, int) or isinstance(v, bool):
            raise ctx.error(f"tc.arange {what} must be a constexpr int, got {v!r}")
    n = end - start
    S.check_shape(ctx, (n,) if n > 0 else (0,), "tc.arange length (end - start)")
    return ctx.value(T.ArangeOp, start=start, end=end)


def _dtype_arg(ctx, dtype, default):
    if dtype is None:
        return default
    return S.as_dtype(ctx, dtype)


@builtin_handler(lang.zeros)
def _zeros(ctx, node, shape, dtype):
    require_constexpr(ctx, shape, "the shape of tc.zeros")
    shape = S.check_shape(ctx, shape)
    return S.constant(ctx, 0, _dtype_arg(ctx, dtype, dt.float32), shape)


@builtin_handler(lang.full)
def _full(ctx, node, shape, value, dtype):
    require_constexpr(ctx, shape, "the shape of tc.full")
    shape = S.check_shape(ctx, shape)
    if is_py_scalar(value):
        d = _dtype_arg(ctx, dtype, dt.python_scalar_dtype(py_scalar(value)))
        return S.constant(ctx, value, d, shape)
    v = _tile(ctx, value, "tc.full's value")
    if v.is_tile:
        raise ctx.error("tc.full's value must be a scalar; use tc.broadcast_to for tiles")
    v = S.cast(ctx, v, _dtype_arg(ctx, dtype, v.dtype))
    return S.broadcast_to(ctx, v, shape)


# ----------------------------------------------------------------------------- elementwise
def where(ctx, cond, x, y):
    if is_constexpr(cond) and not is_py_scalar(cond):
        raise ctx.error(f"tc.where's condition must be a boolean tile or scalar, got {cond!r}")
    c = S.to_bool(ctx, cond)
    if not isinstance(x, TensorValue) and not isinstance(y, TensorValue):
        d = dt.promote(dt.python_scalar_dtype(py_scalar(x)), dt.python_scalar_dtype(py_scalar(y)))
    else:
        d = S.common_dtype(ctx, x, y) if isinstance(x, TensorValue) or isinstance(y, TensorValue) else None
    if any(isinstance(v, TensorValue) and v.is_pointer for v in (x, y)):
        raise ctx.error("tc.where on pointers is not supported; select the offsets instead")
    a, b = S.elementwise(ctx, x, y, dtype=d)
    shape = S.broadcast_shapes(ctx, c.shape, a.shape)
    c, a, b = (S.broadcast_to(ctx, v, shape) for v in (c, a, b))
    return ctx.value(T.SelectOp, c, a, b)


@builtin_handler(lang.where)
def _where(ctx, node, cond, x, y):
    return where(ctx, cond, x, y)


@builtin_handler(lang.minimum)
def _minimum(ctx, node, x, y):
    return S.binary(ctx, "minimum", x, y)


@builtin_handler(lang.maximum)
def _maximum(ctx, node, x, y):
    return S.binary(ctx, "maximum", x, y)


@builtin_handler(lang.clamp)
def _clamp(ctx, node, x, lo, hi):
    return S.binary(ctx, "minimum", S.binary(ctx, "maximum", x, lo), hi)


@builtin_handler(lang.fma)
def _fma(ctx, node, a, b, c):
    if all(is_py_scalar(v) for v in (a, b, c)):
        return a * b + c
    tensors = [v for v in (a, b, c) if isinstance(v, TensorValue)]
    d = tensors[0].dtype
    for t in tensors[1:]:
        d = dt.promote(d, t.dtype)
    if not d.is_float:
        d = dt.float32
    x, y, z = S.elementwise(ctx, a, b, c, dtype=d)
    return ctx.value(T.FmaOp, x, y, z)


def _unary_handler(name):
    def h(ctx, node, x):
        return S.unary(ctx, name, x)
    return h


for _name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
              "floor", "ceil", "abs"):
    builtin_handler(getattr(lang, _name))(_unary_handler(_name))


# ----------------------------------------------------------------------------- shapes
def _shape_arg(ctx, shape, what):
    require_constexpr(ctx, shape, what)
    return S.check_shape(ctx, shape, what)


@builtin_handler(lang.broadcast_to)
def _broadcast_to(ctx, node, x, shape):
    return S.broadcast_to(ctx, _tile(ctx, x, "tc.broadcast_to's input"), _shape_arg(ctx, shape, "the target shape"))


@builtin_handler(lang.reshape)
def _reshape(ctx, node, x, shape):
    x = _tile(ctx, x, "tc.reshape's input")
    shape = _shape_arg(ctx, shape, "the new shape")
    n = 1
    for s in shape:
        n *= s
    if n != (x.type.numel if x.is_tile else 1):
        raise ctx.error(f"cannot reshape a tile of shape {list(x.shape)} to {list(shape)}: the number of elements "
                        "differs")
    if not x.is_tile:
        return ctx.value(T.SplatOp, x, shape=list(shape))
    if x.shape == shape:
        return x
    return ctx.value(T.ReshapeOp, x, shape=list(shape))


@builtin_handler(lang.permute)
def _permute(ctx, node, x, dims):
    x = _tile(ctx, x, "tc.permute's input")
    if len(dims) == 1 and isinstance(dims[0], tuple):
        dims = dims[0]
    for d in dims:
        require_constexpr(ctx, d, "tc.permute's dims")
    if sorted(dims) != list(range(len(x.shape))):
        raise ctx.error(f"tc.permute needs a permutation of 0..{len(x.shape) - 1}, got {list(dims)}")
    return ctx.value(T.PermuteOp, x, order=list(dims))


@builtin_handler(lang.trans)
def _trans(ctx, node, x):
    x = _tile(ctx, x, "tc.trans's input")
    if len(x.shape) != 2:
        raise ctx.error(f"tc.trans needs a 2-D tile, got shape {list(x.shape)}")
    return ctx.value(T.PermuteOp, x, order=[1, 0])


@builtin_handler(lang.expand_dims)
def _expand_dims(ctx, node, x, axis):
    x = _tile(ctx, x, "tc.expand_dims's input")
    rank = len(x.shape) + 1
    axis = _norm_axis(ctx, axis, rank)
    if not x.is_tile:
        return ctx.value(T.SplatOp, x, shape=[1])
    return ctx.value(T.ExpandDimsOp, x, axis=axis)


@builtin_handler(lang.cat)
def _cat(ctx, node, a, b, axis):
    a, b = _tile(ctx, a, "tc.cat's first input"), _tile(ctx, b, "tc.cat's second input")
    if not a.is_tile or not b.is_tile or len(a.shape) != len(b.shape):
        raise ctx.error(f"tc.cat needs two tiles of one rank, got {a.describe()} and {b.describe()}")
    axis = _norm_axis(ctx, axis, len(a.shape))
    if a.dtype is not b.dtype:
        d = dt.promote(a.dtype, b.dtype)
        a, b = S.cast(ctx, a, d), S.cast(ctx, b, d)
    if any(x != y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != axis):
        raise ctx.error(f"tc.cat: shapes {list(a.shape)} and {list(b.shape)} differ outside axis {axis}")
    S.check_shape(ctx, (a.shape[axis] + b.shape[axis],), f"the concatenated extent along axis {axis}")
    return ctx.value(T.CatOp, a, b, axis=axis)


# ----------------------------------------------------------------------------- dot
_DOT_INPUTS = ("f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2", "i8")


@builtin_handler(lang.dot)
def _dot(ctx, node, a, b, acc, out_dtype, allow_tf32):
    require_constexpr(ctx, allow_tf32, "allow_tf32")
    a, b = _tile(ctx, a, "tc.dot's a"), _tile(ctx, b, "tc.dot's b")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.error(f"tc.dot needs 2-D tiles, got shapes {list(a.shape)} and {list(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ctx.error(f"tc.dot: inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    if a.dtype is not b.dtype:
        raise ctx.error(f"tc.dot needs operands of one dtype, got {a.dtype.name} and {b.dtype.name}; convert one "
                        "with .astype(...)")
    if a.dtype.name not in _DOT_INPUTS:
        raise ctx.error(f"tc.dot inputs must be one of {', '.join(_DOT_INPUTS)}, got {a.dtype.name}")
    shape = (a.shape[0], b.shape[1])
    if acc is None:
        d = _dtype_arg(ctx, out_dtype, dt.int32 if a.dtype.is_int else dt.float32)
        if d not in (dt.float32, dt.float16, dt.float64, dt.int32):
            raise ctx.error(f"tc.dot out_dtype must be f32, f16, f64 or i32, got {d.name}")
        acc = S.constant(ctx, 0, d, shape)
    else:
        acc = _tile(ctx, acc, "tc.dot's acc")
        if acc.shape != shape:
            raise ctx.error(f"tc.dot: acc has shape {list(acc.shape)}, the product has {list(shape)}")
        if out_dtype is not None and S.as_dtype(ctx, out_dtype) is not acc.dtype:
            raise ctx.error(f"tc.dot: acc is {acc.dtype.name} but out_dtype is {out_dtype.name}")
        if acc.dtype not in (dt.float32, dt.float16, dt.float64, dt.int32):
            raise ctx.error(f"tc.dot accumulates in f32, f16, f64 or i32, got acc of {acc.dtype.name}")
    return ctx.value(T.DotOp, a, b, acc, allow_tf32=bool(allow_tf32))


# ----------------------------------------------------------------------------- debugging
@builtin_handler(lang.device_print)
def _device_print(ctx, node, fmt, values):
    if not isinstance(fmt, str):
        raise ctx.error("tc.device_print's first argument must be a format string")
    vals = []
    for v in values:
        if isinstance(v, ViewValue) or (isinstance(v, TensorValue) and v.is_pointer):
            raise ctx.error("tc.device_print prints numbers and tiles, not views or pointers")
        if isinstance(v, (str, DType, tuple)):
            raise ctx.error(f"tc.device_print values must be numbers or tiles, got {v!r}; put constant text "
                            "in the format string")
        vals.append(S.to_tensor(ctx, v))
    ctx.create(T.PrintOp, *vals, fmt=fmt)


@builtin_handler(lang.device_assert)
def _device_assert(ctx, node, cond, msg):
    if not isinstance(msg, str):
        raise ctx.error("tc.device_assert's message must be a string")
    if is_constexpr(cond):
        if not cond:
            raise ctx.error(f"device_assert on a compile-time false condition: {msg}")
        return
    ctx.create(T.AssertOp, S.to_bool(ctx, cond), msg=msg)


@builtin_handler(lang.static_assert)
def _static_assert(ctx, node, cond, msg):
    require_constexpr(ctx, cond, "tc.static_assert's condition")
    if not cond:
        raise ctx.error(f"static assertion failed{': ' + msg if msg else ''}")
