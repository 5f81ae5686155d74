"""Elementwise arithmetic, comparisons, select and casts: one rule per op, applied to
every element of the thread's list.

Integers wrap; `//` and `%` follow Python (floor) semantics; shifts by the bit
width or more give 0 (or the sign for a signed >>), as numpy does, instead of
LLVM's poison. Floating-point ops on f8 operands compute in f32 and round back.
"""
from __future__ import annotations

from llvmlite import ir

from ...dtypes import DType, float32
from ...ir import defined_inside, tile_ops as T
from .casts import cast_bool, convert, convert_all, tie_to
from .walker import rule

__all__ = ["map_elementwise"]


def map_elementwise(ctx, op, fn, dtype=None):
    """Apply `fn(builder, dtype, *elements)` to every element; f8 math runs in f32."""
    d = dtype or ctx.dtype(op.operands[-1].type)
    cols = [ctx.elems(v) for v in op.operands]
    b = ctx.builder
    out = []
    for xs in zip(*cols):
        if d.is_fp8:
            wide = [convert(b, x, d, float32, ctx.target) if ctx.dtype(v.type) is d else x
                    for x, v in zip(xs, op.operands)]
            r = fn(b, float32, *wide)
            if r.type == ir.FloatType():
                r = convert(b, r, float32, d, ctx.target)
            out.append(r)
        else:
            out.append(fn(b, d, *xs))
    ctx.set_elems(op.result, out)


def _flags(ctx):
    # fast_math approximates (division through rcp, contraction) but keeps inf and NaN
    # meaning what they mean: kernels pad with -inf and test for it ("fast" would let
    # LLVM assume neither occurs).
    if ctx.fast_math:
        return ("afn", "arcp", "contract")
    return ()


def _arith(int_name, float_name):
    def lower(ctx, op):
        flags = _flags(ctx)

        def f(b, d, x, y):
            if d.is_float:
                return getattr(b, float_name)(x, y, flags=flags)
            return getattr(b, int_name)(x, y)
        map_elementwise(ctx, op, f)
    return lower


rule(T.AddOp)(_arith("add", "fadd"))
rule(T.SubOp)(_arith("sub", "fsub"))
rule(T.MulOp)(_arith("mul", "fmul"))


@rule(T.DivOp)
def _div(ctx, op):
    flags = _flags(ctx)
    map_elementwise(ctx, op, lambda b, d, x, y: b.fdiv(x, y, flags=flags))


def _zero(x):
    return ir.Constant(x.type, 0)


def _floor_fix(b, q, r, y, signed_neg):
    """Python floor division/modulo: adjust the truncated results when r != 0 and the
    signs of r and y differ."""
    return b.and_(b.icmp_unsigned("!=", r, _zero(r)), signed_neg)


@rule(T.FloorDivOp)
def _floordiv(ctx, op):
    def f(b, d, x, y):
        if d.is_float:
            return ctx.intrinsic(f"llvm.floor.{x.type.intrinsic_name}", x.type, [b.fdiv(x, y)])
        if d.kind != "i":
            return b.udiv(x, y)
        q, r = b.sdiv(x, y), b.srem(x, y)
        fix = _floor_fix(b, q, r, y, b.icmp_signed("<", b.xor(r, y), _zero(r)))
        return b.sub(q, b.zext(fix, q.type))
    map_elementwise(ctx, op, f)


@rule(T.ModOp)
def _mod(ctx, op):
    def f(b, d, x, y):
        if d.is_float:
            r = b.frem(x, y)
            zero = ir.Constant(x.type, 0.0)
            differ = b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero))
            fix = b.and_(b.fcmp_ordered("!=", r, zero), differ)
            return b.select(fix, b.fadd(r, y), r)
        if d.kind != "i":
            return b.urem(x, y)
        r = b.srem(x, y)
        fix = _floor_fix(b, None, r, y, b.icmp_signed("<", b.xor(r, y), _zero(r)))
        return b.select(fix, b.add(r, y), r)
    map_elementwise(ctx, op, f)


def _minmax(float_intr, signed_pred):
    def lower(ctx, op):
        def f(b, d, x, y):
            if d.is_float:
                return ctx.intrinsic(f"llvm.{float_intr}.{x.type.intrinsic_name}", x.type, [x, y])
            if d.kind == "i":
                return b.select(b.icmp_signed(signed_pred, x, y), x, y)
            return b.select(b.icmp_unsigned(signed_pred, x, y), x, y)
        map_elementwise(ctx, op, f)
    return lower


rule(T.MinimumOp)(_minmax("minimum", "<"))
rule(T.MaximumOp)(_minmax("maximum", ">"))
rule(T.AndOp)(lambda ctx, op: map_elementwise(ctx, op, lambda b, d, x, y: b.and_(x, y)))
rule(T.OrOp)(lambda ctx, op: map_elementwise(ctx, op, lambda b, d, x, y: b.or_(x, y)))
rule(T.XorOp)(lambda ctx, op: map_elementwise(ctx, op, lambda b, d, x, y: b.xor(x, y)))


@rule(T.ShlOp)
def _shl(ctx, op):
    def f(b, d, x, y):
        big = b.icmp_unsigned(">=", y, ir.Constant(y.type, d.bits))
        return b.select(big, _zero(x), b.shl(x, y))
    map_elementwise(ctx, op, f)


@rule(T.ShrOp)
def _shr(ctx, op):
    def f(b, d, x, y):
        big = b.icmp_unsigned(">=", y, ir.Constant(y.type, d.bits))
        if d.kind == "i":
            return b.ashr(x, b.select(big, ir.Constant(y.type, d.bits - 1), y))
        return b.select(big, _zero(x), b.lshr(x, y))
    map_elementwise(ctx, op, f)


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@rule(T.CmpOp)
def _cmp(ctx, op):
    pred = _CMP[op.attrs["pred"]]
    d0 = ctx.dtype(op.operands[0].type)

    def f(b, d, x, y):
        if d.is_float:  # NaN compares unequal to everything, as in numpy
            if pred == "!=":
                return b.fcmp_unordered(pred, x, y)
            return b.fcmp_ordered(pred, x, y)
        if d.kind == "i":
            return b.icmp_signed(pred, x, y)
        return b.icmp_unsigned(pred, x, y)
    map_elementwise(ctx, op, f, dtype=d0)


@rule(T.NegOp)
def _neg(ctx, op):
    map_elementwise(ctx, op, lambda b, d, x: b.fneg(x) if d.is_float else b.sub(_zero(x), x))


@rule(T.InvertOp)
def _invert(ctx, op):
    map_elementwise(ctx, op, lambda b, d, x: b.xor(x, ir.Constant(x.type, -1)))


@rule(T.AbsOp)
def _abs(ctx, op):
    def f(b, d, x):
        if d.is_float:
            return ctx.intrinsic(f"llvm.fabs.{x.type.intrinsic_name}", x.type, [x])
        if d.kind != "i":
            return x
        return b.select(b.icmp_signed("<", x, _zero(x)), b.sub(_zero(x), x), x)
    map_elementwise(ctx, op, f)


@rule(T.FmaOp)
def _fma(ctx, op):
    map_elementwise(ctx, op, lambda b, d, x, y, z: ctx.intrinsic(
        f"llvm.fma.{x.type.intrinsic_name}", x.type, [x, y, z]))


@rule(T.FloorOp)
def _floor(ctx, op):
    map_elementwise(ctx, op, lambda b, d, x: ctx.intrinsic(f"llvm.floor.{x.type.intrinsic_name}", x.type, [x]))


@rule(T.CeilOp)
def _ceil(ctx, op):
    map_elementwise(ctx, op, lambda b, d, x: ctx.intrinsic(f"llvm.ceil.{x.type.intrinsic_name}", x.type, [x]))


@rule(T.SelectOp)
def _select(ctx, op):
    c, x, y = (ctx.elems(v) for v in op.operands)
    b = ctx.builder
    ctx.set_elems(op.result, [b.select(cast_bool(b, ci), xi, yi) for ci, xi, yi in zip(c, x, y)])


@rule(T.CastOp)
def _cast(ctx, op):
    src, dst = ctx.dtype(op.operands[0].type), op.attrs["to"]
    b = ctx.builder
    xs = ctx.elems(op.operands[0])
    iv = _invariant_widening(ctx, op, src, dst)
    if iv is not None:
        xs = tie_to(b, xs, iv)
    ctx.set_elems(op.result, convert_all(b, xs, src, dst, ctx.target))


def _invariant_widening(ctx, op, src: DType, dst: DType):
    """With ctx.narrow_invariants: the induction variable of the innermost loop around `op`
    when `op` widens 16-bit floats defined outside that loop, else None. Such a conversion
    then stays in the loop (`tie_to`), where LLVM's LICM would hoist it and keep the wide
    copy live through the loop: twice the registers of the packed 16-bit one, for one cheap
    conversion per element and iteration. Not the default: it measured slower where the
    kernel fits without it (H200: layer_norm's persistent bf16 clusters at 8 warps, w and b
    held as f32 at 144 registers, 1 program per SM, or packed at 110, 2 per SM: 88.7% ->
    86.5% of copy). compiler._assemble asks for it under a floor that spills: at 4 warps
    the same kernel fits its floor of 3 programs per SM only so (168 registers)."""
    if not ctx.narrow_invariants:
        return None
    if not (src.is_float and src.bits == 16 and dst.is_float and dst.bits > 16):
        return None
    loop = op.parent_op()
    while loop is not None and not isinstance(loop, T.ForOp):
        loop = loop.parent_op()
    if loop is None or defined_inside(op.operands[0], loop):
        return None
    iv = ctx.get(loop.body.args[0])
    return iv if iv.type.width in (16, 32, 64) else None


@rule(T.BitcastOp)
def _bitcast(ctx, op):
    ty = ctx.ltype(op.result.type)
    b = ctx.builder
    ctx.set_elems(op.result, [x if x.type == ty else b.bitcast(x, ty) for x in ctx.elems(op.operands[0])])
