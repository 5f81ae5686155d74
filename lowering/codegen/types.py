"""Mapping from tilec types to llvmlite types.

Unsigned integers are plain iN (LLVM integers carry no sign; the rules pick the
signed or unsigned instruction). bf16 is LLVM's `bfloat`, which llvmlite's
builder lacks, so it is added here. f8 values are stored as i8 bit patterns and
only converted by explicit casts (see casts.py).
"""
from __future__ import annotations

import struct

import numpy as np
from llvmlite import ir

from ...dtypes import DType
from ...ir.types import PointerType, ScalarType, TileType, Type

__all__ = ["BFloatType", "bfloat", "llvm_scalar", "llvm_type", "global_ptr", "shared_ptr",
           "GLOBAL", "SHARED", "bit_width", "I1", "I8", "I16", "I32", "I64", "F16", "F32", "F64", "const"]

GLOBAL, SHARED = 1, 3


class BFloatType(ir.types._BaseFloatType):
    """LLVM's `bfloat` (missing from llvmlite). Constants print as 0xR + the 16 bits."""
    null = "0xR0000"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"

    def format_constant(self, value):
        return "0xR%04X" % _bf16_bits(float(value))


BFloatType._create_instance()
bfloat = BFloatType()

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()


def bit_width(ty: ir.Type) -> int:
    """Bits of an LLVM scalar or vector value type (0 for anything else)."""
    if isinstance(ty, ir.VectorType):
        return ty.count * bit_width(ty.element)
    if isinstance(ty, ir.IntType):
        return ty.width
    return {"half": 16, "bfloat": 16, "float": 32, "double": 64}.get(str(ty), 0)


def _bf16_bits(v: float) -> int:
    """Round-to-nearest-even f32 -> bf16 bits (NaN stays a quiet NaN)."""
    b = struct.unpack("<I", struct.pack("<f", np.float32(v)))[0]
    if (b & 0x7F800000) == 0x7F800000 and (b & 0x7FFFFF):
        return 0x7FC0
    b += 0x7FFF + ((b >> 16) & 1)
    return (b >> 16) & 0xFFFF


_SCALARS = {
    "i1": I1, "i8": I8, "i16": I16, "i32": I32, "i64": I64,
    "u8": I8, "u16": I16, "u32": I32, "u64": I64,
    "f16": F16, "bf16": bfloat, "f32": F32, "f64": F64,
    "f8e4m3": I8, "f8e5m2": I8,
}


def llvm_scalar(d: DType) -> ir.Type:
    return _SCALARS[d.name]


def global_ptr() -> ir.PointerType:
    return ir.PointerType(addrspace=GLOBAL)


def shared_ptr() -> ir.PointerType:
    return ir.PointerType(addrspace=SHARED)


def llvm_type(t: Type) -> ir.Type:
    """The LLVM type of one element of `t` (a tile is a list of these per thread)."""
    if isinstance(t, TileType):
        return llvm_type(t.element)
    if isinstance(t, ScalarType):
        return llvm_scalar(t.dtype)
    if isinstance(t, PointerType):
        return ir.PointerType(addrspace=t.addrspace)
    raise TypeError(f"type {t} has no LLVM element type")


def const(d: DType, value) -> ir.Constant:
    """An LLVM constant of dtype `d` (f8 constants are encoded to their i8 bits)."""
    ty = llvm_scalar(d)
    if d.is_fp8:
        from .casts import f8_bits
        return ir.Constant(ty, f8_bits(float(value), d.name))
    if d.is_bool:
        return ir.Constant(ty, int(bool(value)))
    if d.is_int:
        v = int(value) & ((1 << d.bits) - 1)  # wrap: LLVM constants take the bit pattern
        if d.kind == "i" and v >= 1 << (d.bits - 1):
            v -= 1 << d.bits
        return ir.Constant(ty, v)
    return ir.Constant(ty, float(value))
