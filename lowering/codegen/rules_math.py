"""Transcendental and other math ops, through mathlib. f16/bf16/f8 compute in f32 and round
back once; f32 and f64 call the library directly (fast versions under fast_math)."""
from __future__ import annotations

from ...dtypes import float32
from ...ir import tile_ops as T
from .casts import convert
from .mathlib import call_math
from .walker import rule

_OPS = {
    T.ExpOp: "exp", T.Exp2Op: "exp2", T.LogOp: "log", T.Log2Op: "log2", T.SqrtOp: "sqrt",
    T.RsqrtOp: "rsqrt", T.SinOp: "sin", T.CosOp: "cos", T.TanhOp: "tanh", T.SigmoidOp: "sigmoid",
    T.ErfOp: "erf", T.PowOp: "pow",
}


def _lower(name):
    def lower(ctx, op):
        d = ctx.dtype(op.result.type)
        fast = ctx.fast_math
        b = ctx.builder
        narrow = d.bits < 32
        out = []
        for xs in zip(*(ctx.elems(v) for v in op.operands)):
            args = [convert(b, x, d, float32, ctx.target) for x in xs] if narrow else list(xs)
            r = call_math(b, name, args, fast)
            out.append(convert(b, r, float32, d, ctx.target) if narrow else r)
        ctx.set_elems(op.result, out)
    return lower


for _cls, _name in _OPS.items():
    rule(_cls)(_lower(_name))
