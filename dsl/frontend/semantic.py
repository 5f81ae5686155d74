"""Typing rules of the language: materializing constants, casts, broadcasting, promotion,
and the arithmetic operators. Every elementwise op gets operands of one type."""
from __future__ import annotations

import operator
from typing import Tuple

from .. import dtypes as dt
from ..dtypes import DType
from ..ir import tile_ops as T
from ..ir.types import ScalarType, TileType, is_pow2
from .values import TensorValue, ViewValue, is_py_scalar, py_scalar

__all__ = ["constant", "to_tensor", "cast", "broadcast_to", "broadcast_shapes", "binary", "compare",
           "unary", "check_shape", "to_bool", "as_dtype", "ensure_int_scalar", "elementwise"]


def check_shape(ctx, shape, what="tile shape", node=None) -> Tuple[int, ...]:
    """A constexpr shape (int or tuple of ints), each extent a power of two."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise ctx.error(f"{what} must be a constexpr int or tuple of ints, got {_describe(shape)}", node)
    bad = [s for s in shape if not is_pow2(s)]
    if bad:
        raise ctx.error(f"{what} {list(shape)} has extents that are not powers of two ({bad}); tile shapes "
                        "must be static powers of two (pad the data and use masks or padding instead)", node)
    return shape


def _describe(x) -> str:
    if isinstance(x, (TensorValue, ViewValue)):
        return f"a run-time value of type {x.describe()}"
    return repr(x)


def as_dtype(ctx, x, what="dtype") -> DType:
    if isinstance(x, DType):
        return x
    raise ctx.error(f"{what} must be a tilec dtype such as tc.float32, got {_describe(x)}")


def _fits(v: int, d: DType) -> bool:
    if d.is_bool:
        return True
    if d.kind == "u":
        return 0 <= v < 2 ** d.bits
    return -2 ** (d.bits - 1) <= v < 2 ** (d.bits - 1)


def constant(ctx, value, dtype: DType, shape=()) -> TensorValue:
    """A scalar constant, or a tile of `shape` filled with it."""
    value = py_scalar(value)
    if dtype.is_bool:
        value = bool(value)
    elif dtype.is_int:
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise ctx.error(f"cannot convert {value} to {dtype.name}")
            value = int(value)
        value = int(value)
        if not _fits(value, dtype):
            raise ctx.error(f"the constant {value} does not fit in {dtype.name}")
    else:
        value = float(value)
    t = TileType(tuple(shape), ScalarType(dtype)) if shape else ScalarType(dtype)
    return ctx.value(T.ConstantOp, result_types=[t], value=value)


def to_tensor(ctx, x, dtype: DType = None) -> TensorValue:
    """A run-time value for `x`: Python scalars become constants (of `dtype` when given)."""
    if isinstance(x, TensorValue):
        return x
    if is_py_scalar(x):
        return constant(ctx, x, dtype or dt.python_scalar_dtype(py_scalar(x)))
    raise ctx.error(f"expected a scalar or a tile, got {_describe(x)}")


def cast(ctx, x: TensorValue, dtype: DType) -> TensorValue:
    if x.is_pointer:
        raise ctx.error(f"cannot convert a pointer ({x.describe()}) to {dtype.name}")
    if x.dtype is dtype:
        return x
    return ctx.value(T.CastOp, x, to=dtype)


def broadcast_shapes(ctx, a, b) -> Tuple[int, ...]:
    """numpy broadcasting of two shapes (trailing dimensions aligned)."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            raise ctx.error(f"shapes {list(a)} and {list(b)} cannot be broadcast together "
                            "(extents must match or be 1; use x[:, None] to add a dimension)")
        out.append(max(x, y))
    return tuple(reversed(out))


def broadcast_to(ctx, x: TensorValue, shape) -> TensorValue:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if not x.is_tile:
        return ctx.value(T.SplatOp, x, shape=list(shape)) if shape else x
    if len(x.shape) > len(shape):
        raise ctx.error(f"cannot broadcast a tile of shape {list(x.shape)} to {list(shape)}")
    broadcast_shapes(ctx, x.shape, shape)
    while len(x.shape) < len(shape):
        x = ctx.value(T.ExpandDimsOp, x, axis=0)
    if x.shape != shape:
        for s, d in zip(x.shape, shape):
            if s != d and s != 1:
                raise ctx.error(f"cannot broadcast a tile of shape {list(x.shape)} to {list(shape)}")
        x = ctx.value(T.BroadcastOp, x, shape=list(shape))
    return x


def _shape(x):
    return x.shape if isinstance(x, TensorValue) else ()


def _dtype_of(x) -> DType:
    return x.dtype if isinstance(x, TensorValue) else dt.python_scalar_dtype(py_scalar(x))


def common_dtype(ctx, a, b) -> DType:
    """Promotion of two operands, one of which may be a (weak) Python scalar."""
    if not isinstance(a, TensorValue):
        return dt.promote_with_python_scalar(b.dtype, py_scalar(a))
    if not isinstance(b, TensorValue):
        return dt.promote_with_python_scalar(a.dtype, py_scalar(b))
    return dt.promote(a.dtype, b.dtype)


def elementwise(ctx, *xs, dtype: DType = None):
    """Operands converted to one type: `dtype` (or their promotion) and their broadcast shape."""
    for x in xs:
        if not isinstance(x, TensorValue) and not is_py_scalar(x):
            raise ctx.error(f"expected a scalar or a tile, got {_describe(x)}")
        if isinstance(x, TensorValue) and x.is_pointer:
            raise ctx.error(f"this operation is not defined on pointers ({x.describe()})")
    if dtype is None:
        tensors = [x for x in xs if isinstance(x, TensorValue)]
        if tensors:
            dtype = tensors[0].dtype
            for t in tensors[1:]:
                dtype = dt.promote(dtype, t.dtype)
            for x in xs:
                if not isinstance(x, TensorValue):
                    dtype = dt.promote_with_python_scalar(dtype, py_scalar(x))
        else:
            dtype = _dtype_of(xs[0])
            for x in xs[1:]:
                dtype = dt.promote(dtype, _dtype_of(x))
    shape = ()
    for x in xs:
        shape = broadcast_shapes(ctx, shape, _shape(x))
    out = []
    for x in xs:
        if isinstance(x, TensorValue):
            out.append(broadcast_to(ctx, cast(ctx, x, dtype), shape))
        else:
            out.append(constant(ctx, x, dtype, shape))
    return out


def to_bool(ctx, x, what="condition") -> TensorValue:
    """An i1 value: integers and floats compare != 0."""
    x = to_tensor(ctx, x)
    if x.is_pointer:
        raise ctx.error(f"{what} cannot be a pointer")
    if x.dtype.is_bool:
        return x
    zero = constant(ctx, 0, x.dtype, x.shape)
    return ctx.value(T.CmpOp, x, zero, pred="ne")


def ensure_int_scalar(ctx, x, what: str, dtype: DType = None) -> TensorValue:
    if isinstance(x, TensorValue):
        if x.is_tile or x.dtype is None or not (x.dtype.is_int or x.dtype.is_bool):
            raise ctx.error(f"{what} must be an integer scalar, got {x.describe()}")
        return cast(ctx, x, dtype) if dtype is not None else x
    if isinstance(py_scalar(x), int):
        return constant(ctx, x, dtype or dt.python_scalar_dtype(py_scalar(x)))
    raise ctx.error(f"{what} must be an integer scalar, got {_describe(x)}")


# ----------------------------------------------------------------------------- operators
# name -> (tile op, Python function for constexpr folding, which dtypes it accepts)
_BINARY = {
    "add": (T.AddOp, operator.add, "any"),
    "sub": (T.SubOp, operator.sub, "any"),
    "mul": (T.MulOp, operator.mul, "any"),
    "truediv": (T.DivOp, operator.truediv, "float"),
    "floordiv": (T.FloorDivOp, operator.floordiv, "any"),
    "mod": (T.ModOp, operator.mod, "any"),
    "pow": (T.PowOp, operator.pow, "float"),
    "and": (T.AndOp, operator.and_, "intbool"),
    "or": (T.OrOp, operator.or_, "intbool"),
    "xor": (T.XorOp, operator.xor, "intbool"),
    "lshift": (T.ShlOp, operator.lshift, "int"),
    "rshift": (T.ShrOp, operator.rshift, "int"),
    "minimum": (T.MinimumOp, min, "any"),
    "maximum": (T.MaximumOp, max, "any"),
}

_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
           "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>",
           "minimum": "tc.minimum", "maximum": "tc.maximum"}


def _fold(ctx, fn, *args):
    try:
        return fn(*args)
    except ZeroDivisionError:
        raise ctx.error("division by zero in a constant expression") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise ctx.error(f"invalid constant expression: {e}") from None


def binary(ctx, name: str, a, b):
    """`a <op> b` for the operator `name`: folded when both are Python values."""
    op_cls, py_fn, allowed = _BINARY[name]
    a, b = py_scalar(a), py_scalar(b)
    if not isinstance(a, (TensorValue, ViewValue)) and not isinstance(b, (TensorValue, ViewValue)):
        return _fold(ctx, py_fn, a, b)
    for x in (a, b):
        if isinstance(x, ViewValue):
            raise ctx.error(f"operator {_SYMBOL[name]} is not defined on a tensor view; use x.ptr for "
                            "pointer arithmetic or tc.load to read a tile")
    if name in ("add", "sub") and any(isinstance(x, TensorValue) and x.is_pointer for x in (a, b)):
        return pointer_offset(ctx, a, b, negate=(name == "sub"))
    dtype = common_dtype(ctx, a, b)
    if allowed == "float" and not dtype.is_float:
        dtype = dt.float32  # integer `/` and `**` work in f32
    elif allowed == "int" and not dtype.is_int:
        raise ctx.error(f"operator {_SYMBOL[name]} needs integer operands, got {dtype.name}")
    elif allowed == "intbool" and dtype.is_float:
        raise ctx.error(f"operator {_SYMBOL[name]} needs integer or bool operands, got {dtype.name}")
    if name in ("add", "sub", "mul", "floordiv", "mod") and dtype.is_bool:
        dtype = dt.int32  # arithmetic on booleans counts, as in numpy with Python ints
    x, y = elementwise(ctx, a, b, dtype=dtype)
    return ctx.value(op_cls, x, y)


def pointer_offset(ctx, a, b, negate=False) -> TensorValue:
    """`ptr + offset` (either order for +): one pointer per offset element."""
    if isinstance(b, TensorValue) and b.is_pointer:
        if negate or (isinstance(a, TensorValue) and a.is_pointer):
            raise ctx.error("pointers can only be offset by integers (ptr + n, ptr - n)")
        a, b = b, a
    off = to_tensor(ctx, b)
    if off.is_pointer or not off.dtype.is_int:
        raise ctx.error(f"pointer offsets must be integers, got {off.describe()}")
    if negate:
        off = ctx.value(T.NegOp, off)
    shape = broadcast_shapes(ctx, a.shape, off.shape)
    return ctx.value(T.AddPtrOp, broadcast_to(ctx, a, shape), broadcast_to(ctx, off, shape))


_CMP_PY = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
           "gt": operator.gt, "ge": operator.ge}


def compare(ctx, pred: str, a, b):
    a, b = py_scalar(a), py_scalar(b)
    if not isinstance(a, (TensorValue, ViewValue)) and not isinstance(b, (TensorValue, ViewValue)):
        return _fold(ctx, _CMP_PY[pred], a, b)
    for x in (a, b):
        if isinstance(x, ViewValue) or (isinstance(x, TensorValue) and x.is_pointer):
            raise ctx.error("comparisons are defined on numbers only, not on views or pointers")
    x, y = elementwise(ctx, a, b, dtype=common_dtype(ctx, a, b))
    return ctx.value(T.CmpOp, x, y, pred=pred)


_UNARY_FLOAT = {
    "exp": T.ExpOp, "exp2": T.Exp2Op, "log": T.LogOp, "log2": T.Log2Op, "sqrt": T.SqrtOp,
    "rsqrt": T.RsqrtOp, "sin": T.SinOp, "cos": T.CosOp, "tanh": T.TanhOp, "sigmoid": T.SigmoidOp,
    "erf": T.ErfOp, "floor": T.FloorOp, "ceil": T.CeilOp,
}


def unary(ctx, name: str, x):
    """-x, ~x, abs(x) and the float functions (integer inputs are converted to f32)."""
    x = py_scalar(x)
    if not isinstance(x, (TensorValue, ViewValue)):
        import math
        fns = {"neg": operator.neg, "invert": operator.invert, "abs": abs, "pos": operator.pos,
               "exp": math.exp, "exp2": lambda v: 2.0 ** v, "log": math.log, "log2": math.log2,
               "sqrt": math.sqrt, "rsqrt": lambda v: 1.0 / math.sqrt(v), "sin": math.sin, "cos": math.cos,
               "tanh": math.tanh, "sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)), "erf": math.erf,
               "floor": math.floor, "ceil": math.ceil}
        if not is_py_scalar(x):
            raise ctx.error(f"expected a number, got {_describe(x)}")
        return _fold(ctx, fns[name], x)
    if isinstance(x, ViewValue) or x.is_pointer:
        raise ctx.error(f"{name} is not defined on {x.describe()}")
    if name == "pos":
        return x
    if name == "neg":
        if x.dtype.is_bool:
            x = cast(ctx, x, dt.int32)
        return ctx.value(T.NegOp, x)
    if name == "invert":
        if x.dtype.is_float:
            raise ctx.error(f"operator ~ needs integer or bool operands, got {x.dtype.name}")
        return ctx.value(T.InvertOp, x)
    if name == "abs":
        return x if x.dtype.is_bool or x.dtype.kind == "u" else ctx.value(T.AbsOp, x)
    if not x.dtype.is_float:
        x = cast(ctx, x, dt.float32)
    return ctx.value(_UNARY_FLOAT[name], x)


def logical_not(ctx, x):
    if not isinstance(x, (TensorValue, ViewValue)):
        return not x
    return ctx.value(T.InvertOp, to_bool(ctx, x))
