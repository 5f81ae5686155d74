"""Constant folding: evaluate elementwise ops whose operands are all tile.constant.

A tile.constant holds one value (a tile constant is uniform), so an elementwise op
on constants is itself a constant: the op is evaluated once, on 0-d numpy arrays of
the operand dtype, and replaced by a tile.constant of its result type.

The arithmetic is the interpreter's: fixed-width integers wrap around, `//` and `%`
round toward negative infinity (numpy's floor_divide/remainder agree with Python),
floats are IEEE f32/f64, casts from floats to integers truncate toward zero.

An op is left for run time when compile-time evaluation could disagree with the
hardware or when the result is undefined:
- operands or result of a narrow float type (f16, bf16, f8): their rounding lives
  in the interpreter's emulation, not here;
- transcendental functions, pow, rsqrt, sigmoid, erf, fma: not correctly rounded
  (libm and the GPU's approximations differ in the last bits), fma needs one rounding;
- integer division or remainder by zero, shifts by a negative amount or by the bit
  width or more, float-to-integer casts of NaN or out-of-range values.
"""
from __future__ import annotations

import numpy as np

from tilec import dtypes as dt
from tilec.ir import Module, Op
from tilec.ir import tile_ops as T

from .rewrite import NOT_CONSTANT, constant_of, dtype_of, make_constant, replace_op

__all__ = ["fold", "evaluate", "FOLDERS", "to_numpy_scalar"]

_NARROW_FLOATS = {"f16", "bf16", "f8e4m3", "f8e5m2"}


def _int_divisor_nonzero(args, dtype):
    return not dtype.is_int or bool(args[1] != 0)


def _shift_in_range(args, dtype):
    return 0 <= int(args[1]) < dtype.bits


# op name -> (numpy evaluation of the operand arrays, precondition or None)
FOLDERS = {
    "tile.add": (lambda a, b: a + b, None),
    "tile.sub": (lambda a, b: a - b, None),
    "tile.mul": (lambda a, b: a * b, None),
    "tile.div": (lambda a, b: a / b, None),
    "tile.floordiv": (np.floor_divide, _int_divisor_nonzero),
    "tile.mod": (np.remainder, _int_divisor_nonzero),
    "tile.minimum": (np.minimum, None),
    "tile.maximum": (np.maximum, None),
    "tile.and": (np.bitwise_and, None),
    "tile.or": (np.bitwise_or, None),
    "tile.xor": (np.bitwise_xor, None),
    "tile.shl": (np.left_shift, _shift_in_range),
    "tile.shr": (np.right_shift, _shift_in_range),
    "tile.neg": (np.negative, None),
    "tile.invert": (np.invert, None),
    "tile.abs": (np.abs, None),
    "tile.sqrt": (np.sqrt, None),
    "tile.floor": (np.floor, None),
    "tile.ceil": (np.ceil, None),
    "tile.select": (lambda c, a, b: np.where(c, a, b), None),
}

_BOOL_OPS = {"tile.and", "tile.or", "tile.xor", "tile.invert", "tile.minimum", "tile.maximum",
             "tile.select", "tile.cast", "tile.cmp"}

_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


def to_numpy_scalar(value, dtype: dt.DType) -> np.ndarray:
    """A 0-d array of `dtype`'s storage type holding `value` (integers wrap to the width)."""
    if dtype.is_int:
        v = int(value) & ((1 << dtype.bits) - 1)
        if dtype.is_signed and v >= 1 << (dtype.bits - 1):
            v -= 1 << dtype.bits
        return np.array(v, dtype=dtype.np)
    return np.array(value, dtype=dtype.np)


def _cast(x: np.ndarray, src: dt.DType, dst: dt.DType):
    if src.is_float and dst.is_int:
        v = float(x)
        if v != v:
            return NOT_CONSTANT
        lo, hi = (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1) if dst.is_signed else (0, (1 << dst.bits) - 1)
        t = int(v)  # truncation toward zero, as numpy's astype
        if not lo <= t <= hi:
            return NOT_CONSTANT
        return np.array(t, dtype=dst.np)
    return x.astype(dst.np)


def evaluate(op: Op, values: list):
    """Result of elementwise `op` on the constant operand `values` (Python numbers),
    as a Python number, or NOT_CONSTANT when it must be left for run time."""
    in_types = [dtype_of(v) for v in op.operands]
    out_type = dtype_of(op.results[0])
    if any(t is None or t.name in _NARROW_FLOATS for t in in_types + [out_type]):
        return NOT_CONSTANT
    if in_types[-1].is_bool and op.name not in _BOOL_OPS:
        return NOT_CONSTANT  # i1 arithmetic has no agreed meaning (numpy: or, hardware: xor)
    args = [to_numpy_scalar(v, t) for v, t in zip(values, in_types)]
    with np.errstate(all="ignore"):
        if isinstance(op, T.CastOp):
            res = _cast(args[0], in_types[0], out_type)
        elif isinstance(op, T.CmpOp):
            res = _CMP[op.attrs["pred"]](args[0], args[1])
        else:
            entry = FOLDERS.get(op.name)
            if entry is None:
                return NOT_CONSTANT
            fn, ok = entry
            if ok is not None and not ok(args, in_types[-1]):
                return NOT_CONSTANT
            res = fn(*args)
    if res is NOT_CONSTANT:
        return NOT_CONSTANT
    return np.asarray(res).astype(out_type.np).item()


def _fold_op(op: Op) -> bool:
    if not op.has_trait("elementwise") or len(op.results) != 1 or not op.operands:
        return False
    values = [constant_of(v) for v in op.operands]
    if any(v is NOT_CONSTANT for v in values):
        return False
    res = evaluate(op, values)
    if res is NOT_CONSTANT:
        return False
    c = make_constant(op, op.results[0].type, res)
    c.name_hint = op.results[0].name_hint  # keeps printed IR readable across the pass
    replace_op(op, [c])
    return True


def fold(module: Module, **options) -> Module:
    """Replace every foldable elementwise op on constants by a constant (to a fixed point,
    since pre-order visits an op's constant operands before the op)."""
    for op in list(module.walk()):
        if op.parent is not None and op.operands:
            _fold_op(op)
    return module
