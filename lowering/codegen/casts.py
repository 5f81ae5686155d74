"""Conversions between every pair of tilec dtypes.

Semantics (numpy's, which the interpreter follows):
- float -> int truncates toward zero and saturates (NaN -> 0), as PTX cvt.rzi does;
- anything -> bool is "!= 0" (NaN -> True);
- float -> narrower float rounds to nearest even; overflow follows PyTorch and ml_dtypes
  (and the interpreter): bf16, f16 and f8e5m2 give inf, f8e4m3 (no inf) gives NaN past 464
  (464 itself is a tie that rounds to even: 448).
f8 values are i8 bit patterns. Decoding is exact: every f8 value is an f16 value,
so an f8 is first widened to f16 (e5m2 is the high byte of an f16: a shift; e4m3
by PTX `cvt.rn.f16x2.e4m3x2` on sm_90+ (`Target.has_f8_convert`), two at a time in `convert_all`,
and by integer operations before), then converted from f16 like any f16 (e4m3 to f32
without the cvt is decoded straight to f32 instead: shorter than the f16 route).
Encoding uses PTX `cvt.rn.satfinite.e4m3x2/e5m2x2.f32` on sm_90+ (then patches
the overflow codes, since PTX only offers the saturating form) and the same
rounding done with integer operations on older targets. Conversions from f64
to bf16/f8 go through f32 (a double rounding, off by one ulp in rare ties).

`convert` checks that the LLVM value is the storage type of `src` and emits
fpext/fptrunc only between LLVM float types: a caller that hands it an f8's i8
bits as something else gets an internal error naming both, not invalid LLVM IR.
"""
from __future__ import annotations

import struct

import numpy as np
from llvmlite import ir

from ...dtypes import DType, bfloat16, float16, float32
from ...target import Target
from .types import F16, F32, F64, I1, I8, I16, I32, I64, llvm_scalar

__all__ = ["ConversionError", "convert", "convert_all", "f8_bits", "f8_decode_f16", "f8_decode_f32", "f8_encode_f32",
           "tie_to"]

# e4m3 (bias 7, no infinities, S.1111.111 is NaN, max 448); e5m2 (IEEE-like, bias 15, max 57344).
# `over`: past this magnitude the result is the `over_code`; at it (a tie between the largest
# finite value and the next power of two) rounding to even decides (`tie_over`): 448 has an
# even mantissa, so e4m3 keeps 464 finite; 57344's is odd, so e5m2 sends 61440 to inf.
_F8 = {
    "f8e4m3": dict(man=3, bias=7, max_code=0x7E, over=464.0, tie_over=False, over_code=0x7F, nan=0x7F),
    "f8e5m2": dict(man=2, bias=15, max_code=0x7B, over=61440.0, tie_over=True, over_code=0x7C, nan=0x7F),
}


def f8_bits(v: float, name: str) -> int:
    """Host-side encoding of a Python float (for constants), same rounding as the device."""
    p = _F8[name]
    if np.isnan(v):
        return p["nan"]
    sign = 0x80 if (v < 0 or (v == 0 and np.signbit(v))) else 0
    a = abs(v)
    if a > p["over"] or (a == p["over"] and p["tie_over"]):
        return p["nan"] if p["over_code"] == p["nan"] else sign | p["over_code"]
    min_normal = 2.0 ** (1 - p["bias"])
    if a < min_normal:
        return sign | int(np.rint(a * 2.0 ** (p["bias"] - 1 + p["man"])))
    u = struct.unpack("<I", struct.pack("<f", np.float32(a)))[0]
    shift = 23 - p["man"]
    r = u + ((1 << (shift - 1)) - 1) + ((u >> shift) & 1)
    code = (r >> shift) - ((127 - p["bias"]) << p["man"])
    return sign | min(code, p["max_code"])


def f8_decode_f32(b: ir.IRBuilder, x: ir.Value, name: str) -> ir.Value:
    """i8 bits -> f32, exact (integer operations only, so any target can run it)."""
    p = _F8[name]
    man, ebits = p["man"], 7 - p["man"]
    u = b.zext(x, I32)
    sign = b.shl(b.and_(u, ir.Constant(I32, 0x80)), ir.Constant(I32, 24))
    e = b.and_(b.lshr(u, ir.Constant(I32, man)), ir.Constant(I32, (1 << ebits) - 1))
    m = b.and_(u, ir.Constant(I32, (1 << man) - 1))
    normal = b.or_(b.shl(b.add(e, ir.Constant(I32, 127 - p["bias"])), ir.Constant(I32, 23)),
                   b.shl(m, ir.Constant(I32, 23 - man)))
    sub = b.bitcast(b.fmul(b.uitofp(m, F32), ir.Constant(F32, 2.0 ** (1 - p["bias"] - man))), I32)
    mag = b.select(b.icmp_unsigned("==", e, ir.Constant(I32, 0)), sub, normal)
    low7 = b.and_(u, ir.Constant(I32, 0x7F))
    if name == "f8e4m3":  # S.1111.111 is NaN; there is no inf
        mag = b.select(b.icmp_unsigned("==", low7, ir.Constant(I32, 0x7F)), ir.Constant(I32, 0x7FC00000), mag)
    else:  # exponent all ones: inf (mantissa 0) or NaN
        top = b.icmp_unsigned("==", e, ir.Constant(I32, (1 << ebits) - 1))
        special = b.select(b.icmp_unsigned("==", m, ir.Constant(I32, 0)), ir.Constant(I32, 0x7F800000),
                           ir.Constant(I32, 0x7FC00000))
        mag = b.select(top, special, mag)
    return b.bitcast(b.or_(mag, sign), F32)


# f16 bits of the e4m3 subnormals m * 2^-9 (m = 0..7), high bytes only (the low bytes are 0),
# byte m of one 64-bit word: f16 has room for them as normals, so they need no FP arithmetic
_E4M3_SUB_F16 = sum((f16_hi >> 8) << (8 * m) for m, f16_hi in enumerate(
    int(np.float16(m * 2.0 ** -9).view(np.uint16)) for m in range(8)))


def _cvt_f16_from_f8(target: Target, name: str) -> bool:
    """Whether e4m3 -> f16 is one cvt (e5m2 never needs it: a shift)."""
    return name == "f8e4m3" and target.has_f8_convert


def f8_decode_f16(b: ir.IRBuilder, x: ir.Value, name: str, target: Target) -> ir.Value:
    """i8 bits -> f16, exact (every f8 value, NaN and inf included, is an f16 value)."""
    u = b.zext(x, I16)
    if name == "f8e5m2":  # the same sign, exponent (bias 15) and the top two mantissa bits
        return b.bitcast(b.shl(u, ir.Constant(I16, 8)), F16)
    if _cvt_f16_from_f8(target, name):
        return _cvt_pair(b, u)[0]
    low7 = b.and_(u, ir.Constant(I16, 0x7F))
    # normal e4m3: the same fields, the mantissa moved up 7 bits and the exponent rebiased 7 -> 15
    normal = b.add(b.shl(low7, ir.Constant(I16, 7)), ir.Constant(I16, (15 - 7) << 10))
    sub_byte = b.lshr(ir.Constant(I64, _E4M3_SUB_F16), b.zext(b.shl(low7, ir.Constant(I16, 3)), I64))
    sub = b.shl(b.trunc(sub_byte, I16), ir.Constant(I16, 8))
    mag = b.select(b.icmp_unsigned("<", low7, ir.Constant(I16, 8)), sub, normal)
    mag = b.select(b.icmp_unsigned("==", low7, ir.Constant(I16, 0x7F)), ir.Constant(I16, 0x7E00), mag)
    sign = b.shl(b.and_(u, ir.Constant(I16, 0x80)), ir.Constant(I16, 8))
    return b.bitcast(b.or_(mag, sign), F16)


def _cvt_pair(b: ir.IRBuilder, bits16: ir.Value) -> list:
    """Two e4m3 codes (low byte first) -> [f16, f16] with one `cvt.rn.f16x2.e4m3x2` (the low
    byte lands in the low half). Inline PTX, not the NVVM intrinsic: LLVM aborted the process
    ("Cannot select") on that at sm_89's PTX 7.8."""
    word = b.asm(ir.FunctionType(I32, [I16]), "cvt.rn.f16x2.e4m3x2 $0, $1;", "=r,h", [bits16], False)
    pair = b.bitcast(word, ir.VectorType(F16, 2))
    return [b.extract_element(pair, ir.Constant(I32, i)) for i in (0, 1)]


def f8_encode_f32(b: ir.IRBuilder, x: ir.Value, name: str, target: Target) -> ir.Value:
    """f32 -> i8 bits, round to nearest even, overflow as documented above."""
    p = _F8[name]
    if target.has_f8_convert:
        kind = "e4m3x2" if name == "f8e4m3" else "e5m2x2"
        fty = ir.FunctionType(I16, [F32, F32])
        pair = b.asm(fty, f"cvt.rn.satfinite.{kind}.f32 $0, $1, $2;", "=h,f,f",
                     [ir.Constant(F32, 0.0), x], False)
        code = b.trunc(pair, I8)  # the second source lands in the low byte
        return _overflow(b, x, code, p)
    
    u = b.bitcast(x, I32)
    sign = b.trunc(b.lshr(u, ir.Constant(I32, 24)), I8)
    sign = b.and_(sign, ir.Constant(I8, 0x80))
    a = b.and_(u, ir.Constant(I32, 0x7FFFFFFF))
    af = b.bitcast(a, F32)
    shift = 23 - p["man"]
    r = b.add(a, b.add(ir.Constant(I32, (1 << (shift - 1)) - 1),
                       b.and_(b.lshr(a, ir.Constant(I32, shift)), ir.Constant(I32, 1))))
    normal = b.sub(b.lshr(r, ir.Constant(I32, shift)), ir.Constant(I32, (127 - p["bias"]) << p["man"]))
    sub_scaled = b.fmul(af, ir.Constant(F32, 2.0 ** (p["bias"] - 1 + p["man"])))
    rint = b.call(_declare(b, "llvm.rint.f32", F32, [F32]), [sub_scaled])
    sub = b.fptoui(rint, I32)
    is_sub = b.fcmp_ordered("<", af, ir.Constant(F32, 2.0 ** (1 - p["bias"])))
    code = b.select(is_sub, sub, normal)
    code = b.select(b.icmp_unsigned(">", a, ir.Constant(I32, 0x7F800000)), ir.Constant(I32, p["nan"]), code)
    return _overflow(b, x, b.or_(b.trunc(code, I8), sign), p)


def _overflow(b, x, code, p):
    """Replace the code of magnitudes past p["over"] (inf included) by inf or NaN."""
    ax = b.call(_declare(b, "llvm.fabs.f32", F32, [F32]), [x])
    big = b.fcmp_ordered(">=" if p["tie_over"] else ">", ax, ir.Constant(F32, p["over"]))
    if p["over_code"] == p["nan"]:
        return b.select(big, ir.Constant(I8, p["nan"]), code)
    sign = b.and_(b.trunc(b.lshr(b.bitcast(x, I32), ir.Constant(I32, 24)), I8), ir.Constant(I8, 0x80))
    return b.select(big, b.or_(sign, ir.Constant(I8, p["over_code"])), code)


def _declare(b: ir.IRBuilder, name, ret, args):
    m = b.module
    fn = m.globals.get(name)
    if fn is None:
        fn = ir.Function(m, ir.FunctionType(ret, args), name)
    return fn


def f32_round_to_odd(b, x, src: DType):
    """`x` (a 32/64-bit integer or an f64) as f32 rounded to odd: truncated toward zero, with
    the last mantissa bit set where anything was dropped. Rounding that once more to bf16 (8
    bits; f32 keeps 24 >= 8 + 2) is the single correct rounding, where rounding to nearest
    twice is not (2**30 + 2**22 + 1 went to 2**30 through f32, not to 2**30 + 2**23)."""
    if src.is_float:   # f64
        f = b.fptrunc(x, F32)
        back = b.fpext(f, F64)
        fabs = _declare(b, "llvm.fabs.f64", F64, [F64])
        inexact = b.fcmp_ordered("!=", back, x)                      # NaN: unordered, left alone
        away = b.and_(inexact, b.fcmp_ordered(">", b.call(fabs, [back]), b.call(fabs, [x])))
        bits = b.sub(b.bitcast(f, I32), b.zext(away, I32))           # one step toward zero (inf: max)
        return b.bitcast(b.or_(bits, b.zext(inexact, I32)), F32)
    ty = x.type
    w = ty.width
    zero = ir.Constant(ty, 0)
    neg = b.icmp_signed("<", x, zero) if src.kind == "i" else None
    m = b.select(neg, b.sub(zero, x), x) if neg is not None else x  # |x| as unsigned
    ctlz = _declare(b, f"llvm.ctlz.i{w}", ty, [ty, I1])
    nbits = b.sub(ir.Constant(ty, w), b.call(ctlz, [m, ir.Constant(I1, 0)]))
    over = b.sub(nbits, ir.Constant(ty, 24))
    sh = b.select(b.icmp_signed(">", over, zero), over, zero)
    low = b.sub(b.shl(ir.Constant(ty, 1), sh), ir.Constant(ty, 1))
    kept = b.uitofp(b.and_(m, b.not_(low)), F32)                    # at most 24 bits: exact
    sticky = b.icmp_unsigned("!=", b.and_(m, low), zero)
    f = b.bitcast(b.or_(b.bitcast(kept, I32), b.zext(sticky, I32)), F32)
    return b.select(neg, b.fneg(f), f) if neg is not None else f


def _to_float(b, x, src: DType, dst_ty, target: Target = None):
    if dst_ty == llvm_scalar(bfloat16) and src.bits >= 32 and target is not None and target.number < 90:
        # before sm_90 there is no cvt.rn.bf16 from integers: LLVM goes through f32 (twice rounded)
        return b.fptrunc(f32_round_to_odd(b, x, src), dst_ty)
    if src.is_bool or src.kind == "u":
        return b.uitofp(x, dst_ty)
    return b.sitofp(x, dst_ty)


class ConversionError(ValueError):
    """Codegen asked for a conversion it cannot express: a compiler bug, not a user error."""


def convert(b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType, target: Target) -> ir.Value:
    """Convert one element from `src` to `dst`."""
    if x.type != llvm_scalar(src):
        raise ConversionError(f"internal error: a {src} element must be an LLVM {llvm_scalar(src)}, got "
                              f"{x.type} (converting to {dst})")
    if src is dst:
        return x
    if src.is_fp8:
        if dst is float32 and not (src.name == "f8e5m2" or _cvt_f16_from_f8(target, src.name)):
            return f8_decode_f32(b, x, src.name)
        return convert(b, f8_decode_f16(b, x, src.name, target), float16, dst, target)
    if dst.is_fp8:
        return f8_encode_f32(b, convert(b, x, src, float32, target), dst.name, target)
    dty = llvm_scalar(dst)
    if dst.is_bool:
        if src.is_float:
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if dst.is_int:
        if src.is_float:
            sat = "llvm.fptosi.sat" if dst.kind == "i" else "llvm.fptoui.sat"
            fn = _declare(b, f"{sat}.i{dst.bits}.{x.type.intrinsic_name}", dty, [x.type])
            return b.call(fn, [x])
        if dst.bits == src.bits:
            return x
        if dst.bits < src.bits:
            return b.trunc(x, dty)
        return b.sext(x, dty) if src.kind == "i" else b.zext(x, dty)
    # dst is a float
    if not src.is_float:
        return _to_float(b, x, src, dty, target)
    if {src.name, dst.name} == {"f16", "bf16"}:
        return convert(b, convert(b, x, src, float32, target), float32, dst, target)
    if dst.name == "bf16" and src.name == "f64":   # through f32 rounded to odd: one rounding
        return b.fptrunc(f32_round_to_odd(b, x, src), dty)
    if not (_llvm_float(x.type) and _llvm_float(dty)):
        raise ConversionError(f"internal error: no conversion from {src} ({x.type}) to {dst} ({dty})")
    if dst.bits > src.bits:
        return b.fpext(x, dty)
    return b.fptrunc(x, dty)


def _llvm_float(ty: ir.Type) -> bool:
    return isinstance(ty, ir.types._BaseFloatType)


def convert_all(b: ir.IRBuilder, xs: list, src: DType, dst: DType, target: Target) -> list:
    """`convert` of every element of `xs` (a thread's registers of one tile). e4m3 codes are
    widened two at a time where the cvt is used (sm_90+): one instruction takes a pair."""
    if not (src.is_fp8 and dst is not src and _cvt_f16_from_f8(target, src.name)) or len(xs) < 2:
        return [convert(b, x, src, dst, target) for x in xs]
    for x in xs:
        if x.type != I8:
            raise ConversionError(f"internal error: a {src} element must be an LLVM i8, got {x.type}")
    halves = []
    for k in range(0, len(xs) - 1, 2):
        lo, hi = b.zext(xs[k], I16), b.zext(xs[k + 1], I16)
        halves += _cvt_pair(b, b.or_(lo, b.shl(hi, ir.Constant(I16, 8))))
    if len(xs) % 2:
        halves.append(f8_decode_f16(b, xs[-1], src.name, target))
    return [convert(b, h, float16, dst, target) for h in halves]


_ASM_REG = {16: "h", 32: "r", 64: "l"}


def tie_to(b: ir.IRBuilder, xs: list, iv: ir.Value) -> list:
    """The bits of `xs` (16-bit values) through an empty asm that also reads `iv`: LLVM can no
    longer hoist what is computed from them out of `iv`'s loop. Pairs pass as one 32-bit
    word, so ptxas keeps them packed (as loaded) until each use; alone, every 16-bit value
    took a register of its own. The asm has no side effects: it moves and merges like
    arithmetic, and ptxas drops the mov."""
    out = []
    for k in range(0, len(xs) - 1, 2):
        pair = ir.VectorType(xs[k].type, 2)
        vec = b.insert_element(b.insert_element(ir.Constant(pair, None), xs[k], ir.Constant(I32, 0)),
                               xs[k + 1], ir.Constant(I32, 1))
        word = _tied(b, b.bitcast(vec, I32), iv, "b32", "r")
        vec = b.bitcast(word, pair)
        out += [b.extract_element(vec, ir.Constant(I32, 0)), b.extract_element(vec, ir.Constant(I32, 1))]
    if len(xs) % 2:
        x = xs[-1]
        out.append(b.bitcast(_tied(b, b.bitcast(x, I16), iv, "b16", "h"), x.type))
    return out


def _tied(b, bits, iv, width: str, reg: str):
    fty = ir.FunctionType(bits.type, [bits.type, iv.type])
    return b.asm(fty, f"mov.{width} $0, $1;", f"={reg},{reg},{_ASM_REG[iv.type.width]}", [bits, iv], False)


def cast_bool(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return x if x.type == I1 else b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
