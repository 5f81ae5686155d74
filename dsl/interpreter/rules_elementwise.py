"""Rules of the elementwise ops, constants and casts.

Semantics (operands of one type, as the verifier guarantees):
- Integers wrap (two's complement) at their width. `//` and `%` round toward
  negative infinity (Python); an integer division or modulo by zero gives 0.
- i1 is arithmetic modulo 2: add/sub are xor, mul and `//` are and, `%` is 0,
  neg and abs are the identity, invert is logical not.
- Shifts: the amount is read as unsigned; amounts >= the width give 0 (shl, shr
  of unsigned) or the sign fill (shr of signed, arithmetic).
- Floats follow IEEE (x/0 is inf or NaN); minimum/maximum propagate NaN.
  f16, bf16 and f8 compute in f32 and round the result to their type;
  f64 computes in f64. Transcendentals use numpy's f32/f64 functions; erf is
  math.erf in f64 rounded to the type; sigmoid is 1 / (1 + exp(-x)).
- fma rounds once (see numerics.fma).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..ir import tile_ops as T
from ..ir.types import ScalarType, TileType
from . import numerics as nm
from .engine import rule

F16, F32 = nm.F16, nm.F32


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _sigmoid(x):
    return np.reciprocal(1 + np.exp(-x))


def _erf(x):
    return np.asarray(nm.erf(x)).astype(np.asarray(x).dtype)[()]


_FLOAT = {
    T.AddOp: np.add, T.SubOp: np.subtract, T.MulOp: np.multiply, T.DivOp: np.divide,
    T.FloorDivOp: np.floor_divide, T.ModOp: np.remainder, T.PowOp: np.power,
    T.MinimumOp: np.minimum, T.MaximumOp: np.maximum, T.NegOp: np.negative, T.AbsOp: np.abs,
    T.ExpOp: np.exp, T.Exp2Op: np.exp2, T.LogOp: np.log, T.Log2Op: np.log2, T.SqrtOp: np.sqrt,
    T.RsqrtOp: _rsqrt, T.SinOp: np.sin, T.CosOp: np.cos, T.TanhOp: np.tanh,
    T.SigmoidOp: _sigmoid, T.ErfOp: _erf, T.FloorOp: np.floor, T.CeilOp: np.ceil,
}

_INT = {
    T.AddOp: np.add, T.SubOp: np.subtract, T.MulOp: np.multiply,
    T.FloorDivOp: np.floor_divide, T.ModOp: np.remainder,  # numpy: 0 for a zero divisor
    T.MinimumOp: np.minimum, T.MaximumOp: np.maximum, T.AndOp: np.bitwise_and,
    T.OrOp: np.bitwise_or, T.XorOp: np.bitwise_xor, T.NegOp: np.negative,
    T.InvertOp: np.invert, T.AbsOp: np.abs,
}


def _identity(x):
    return x


def _zero_bool(a, b):
    return np.zeros_like(a)[()]


_BOOL = {
    T.AddOp: np.logical_xor, T.SubOp: np.logical_xor, T.MulOp: np.logical_and,
    T.FloorDivOp: np.logical_and, T.ModOp: _zero_bool,
    T.MinimumOp: np.logical_and, T.MaximumOp: np.logical_or, T.AndOp: np.logical_and,
    T.OrOp: np.logical_or, T.XorOp: np.logical_xor, T.NegOp: _identity,
    T.InvertOp: np.logical_not, T.AbsOp: _identity,
}


def _shifts(d: dt.DType):
    width, store = d.bits, d.np
    unsigned = np.dtype(f"uint{width}")
    zero, minus_one = store.type(0), store.type(-1) if d.kind == "i" else store.type(0)

    def amounts(b):
        n = np.asarray(b).astype(unsigned)
        big = n >= width
        return big, np.where(big, 0, n).astype(store)

    def shl(a, b):
        big, n = amounts(b)
        return np.where(big, zero, np.left_shift(a, n))[()]

    def shr(a, b):
        big, n = amounts(b)
        fill = np.where(np.asarray(a) < 0, minus_one, zero)
        return np.where(big, fill, np.right_shift(a, n))[()]

    return {T.ShlOp: shl, T.ShrOp: shr}


def elementwise_fn(op_class, d: dt.DType):
    """The numpy function computing `op_class` on values of `d` (rounded to `d`)."""
    if d.is_bool:
        return _BOOL[op_class]
    if d.is_int:
        if op_class in (T.ShlOp, T.ShrOp):
            return _shifts(d)[op_class]
        return _INT[op_class]
    f = _FLOAT[op_class]
    if d is dt.float16:
        return lambda *xs: f(*(x.astype(F32) for x in xs)).astype(F16)
    rnd = nm.rounder(d)
    if rnd is not None:
        return lambda *xs: rnd(f(*xs))
    return f


def make_step(fn, ins, o):
    """A step computing `regs[o] = fn(*regs[ins])`, specialised by arity for speed."""
    if len(ins) == 1:
        (a,) = ins

        def step(r):
            r[o] = fn(r[a])
    elif len(ins) == 2:
        a, b = ins

        def step(r):
            r[o] = fn(r[a], r[b])
    elif len(ins) == 3:
        a, b, c = ins

        def step(r):
            r[o] = fn(r[a], r[b], r[c])
    else:
        def step(r):
            r[o] = fn(*[r[i] for i in ins])
    return step


def dtype_of(v):
    """The element dtype of a value (None for pointers)."""
    e = v.type.element if isinstance(v.type, TileType) else v.type
    return e.dtype if isinstance(e, ScalarType) else None


@rule(*sorted(set(_FLOAT) | set(_INT) | {T.ShlOp, T.ShrOp}, key=lambda c: c.name))
def _elementwise(op, cx):
    return make_step(elementwise_fn(type(op), dtype_of(op.operands[0])), cx.ins(op), cx.out(op))


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


@rule(T.CmpOp)
def _cmp(op, cx):
    return make_step(_CMP[op.attrs["pred"]], cx.ins(op), cx.out(op))


@rule(T.FmaOp)
def _fma(op, cx):
    d = dtype_of(op.operands[0])
    return make_step(lambda a, b, c: nm.fma(a, b, c, d), cx.ins(op), cx.out(op))


@rule(T.SelectOp)
def _select(op, cx):
    # np.where also for scalars: a reduce_generic combiner runs its scalar ops on whole tiles
    return make_step(lambda c, a, b: np.where(c, a, b)[()], cx.ins(op), cx.out(op))


@rule(T.CastOp)
def _cast(op, cx):
    src, to = dtype_of(op.operands[0]), op.attrs["to"]
    (a,), o = cx.ins(op), cx.out(op)
    if src is to:
        def step(r):
            r[o] = r[a]
        return step
    return make_step(lambda x: nm.cast(x, to), [a], o)


@rule(T.BitcastOp)
def _bitcast(op, cx):
    src, to = dtype_of(op.operands[0]), op.attrs["to"]
    return make_step(lambda x: nm.from_bits(nm.to_bits(x, src), to), cx.ins(op), cx.out(op))


@rule(T.ConstantOp)
def _constant(op, cx):
    t = op.results[0].type
    d = dtype_of(op.results[0])
    v = nm.const_value(op.attrs["value"], d)
    if isinstance(t, ScalarType):
        cx.preset(op.results[0], v)
    else:
        arr = np.full(t.shape, v, dtype=d.np)
        arr.flags.writeable = False  # shared by every program: nothing may write into it
        cx.preset(op.results[0], arr)
    return None
