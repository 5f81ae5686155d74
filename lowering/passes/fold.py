"""Constant folding: evaluate elementwise ops whose operands are all tile.constant.

A tile.constant holds one value (a tile constant is uniform), so an elementwise op
on constants is itself a constant: the op is evaluated once and replaced by a
tile.constant of its result type.

Evaluation calls the interpreter's own numpy functions (tilec.interpreter), so a
folded kernel computes exactly what the interpreter computes for the unfolded one:
integers wrap at their width, `//` and `%` round toward negative infinity, i1 is
arithmetic modulo 2, shifts by the width or more give 0 (or the sign fill), floats
are IEEE in their own width (f16, bf16, f8 rounded to nearest even).

Left for run time, because the compile-time value could differ from the hardware's:
- transcendental functions, pow, rsqrt, sigmoid, erf: not correctly rounded, and
  libm's last bits differ from the GPU's approximations;
- f64 fma (numpy has no fused multiply-add in f64);
- float-to-integer casts of NaN or of values out of the target's range.
"""
from __future__ import annotations

import numpy as np

from tilec import dtypes as dt
from tilec.interpreter import numerics as nm
from tilec.interpreter.rules_elementwise import elementwise_fn
from tilec.ir import Module, Op
from tilec.ir import tile_ops as T

from .rewrite import NOT_CONSTANT, constant_of, dtype_of, make_constant, replace_op

__all__ = ["fold", "fold_op", "evaluate", "FOLDABLE"]

# Elementwise ops computed by `elementwise_fn` whose results are exact (correctly rounded).
FOLDABLE = frozenset({
    T.AddOp, T.SubOp, T.MulOp, T.DivOp, T.FloorDivOp, T.ModOp, T.MinimumOp, T.MaximumOp,
    T.AndOp, T.OrOp, T.XorOp, T.ShlOp, T.ShrOp, T.NegOp, T.InvertOp, T.AbsOp,
    T.SqrtOp, T.FloorOp, T.CeilOp,
})

_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


def _int_range(d: dt.DType):
    if d.kind == "i":
        return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1
    return 0, (1 << d.bits) - 1


def _cast(x, src: dt.DType, dst: dt.DType):
    if src.is_float and dst.is_int:
        v = float(x)
        if v != v or abs(v) == float("inf"):
            return NOT_CONSTANT
        lo, hi = _int_range(dst)
        if not lo <= int(v) <= hi:  # int() truncates toward zero, as the cast does
            return NOT_CONSTANT
    return nm.cast(x, dst)


def _compute(op: Op, args: list, d: dt.DType):
    cls = type(op)
    if cls is T.CastOp:
        return _cast(args[0], d, op.attrs["to"])
    if cls is T.BitcastOp:
        return nm.from_bits(nm.to_bits(args[0], d), op.attrs["to"])
    if cls is T.CmpOp:
        return _CMP[op.attrs["pred"]](args[0], args[1])
    if cls is T.SelectOp:
        return np.where(args[0], args[1], args[2])[()]
    if cls is T.FmaOp:
        return NOT_CONSTANT if d is dt.float64 else nm.fma(args[0], args[1], args[2], d)
    if cls in FOLDABLE:
        return elementwise_fn(cls, d)(*args)
    return NOT_CONSTANT


def _python_value(x, d: dt.DType):
    x = np.asarray(x)[()]
    if d.is_bool:
        return bool(x)
    if d.is_int:
        return int(x)
    return float(x)


def evaluate(op: Op, values: list):
    """Result of elementwise `op` on the constant operand `values` (Python numbers),
    as a Python number, or NOT_CONSTANT when it must be left for run time."""
    in_types = [dtype_of(v) for v in op.operands]
    out_type = dtype_of(op.results[0])
    if any(t is None for t in in_types) or out_type is None:
        return NOT_CONSTANT  # pointers
    args = [nm.const_value(v, t) for v, t in zip(values, in_types)]
    with np.errstate(all="ignore"):
        res = _compute(op, args, in_types[-1])
    if res is NOT_CONSTANT:
        return NOT_CONSTANT
    return _python_value(res, out_type)


def fold_op(op: Op) -> bool:
    """Replace elementwise `op` by a constant when its operands are constants and it folds."""
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


def fold(module: Module) -> Module:
    """Replace every foldable elementwise op on constants by a constant (to a fixed point,
    since pre-order visits an op's constant operands before the op)."""
    for op in list(module.walk()):
        if op.parent is not None and op.operands:
            fold_op(op)
    return module
