"""Integer arithmetic for layout coordinates, folded when the operands are known.

A layout computes the coordinates of each register element of a thread with
`layout.coords(shape, lane, warp, ops)`. `ops` is an `IndexOps`: its arguments
are Python ints or llvmlite i32 values. Ints fold in Python (so a layout run on
concrete lane/warp numbers gives plain ints, which the rename analysis uses),
and the identities x+0, x*1, x*0, x&0, x>>0 never reach LLVM.
"""
from __future__ import annotations

from typing import Optional

from llvmlite import ir

from .types import I32

__all__ = ["IndexOps", "as_i32"]


def as_i32(v):
    return ir.Constant(I32, v & 0xFFFFFFFF) if isinstance(v, int) else v


class IndexOps:
    """const/add/sub/mul/udiv/urem/and_/or_/xor/shl/lshr over ints and i32 values."""

    def __init__(self, builder: Optional[ir.IRBuilder] = None):
        self.builder = builder

    def _emit(self, name, a, b):
        if self.builder is None:
            raise ValueError("layout coordinates need run-time values but no builder was given")
        return getattr(self.builder, name)(as_i32(a), as_i32(b))

    def const(self, v: int):
        return int(v)

    def add(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return (a + b) & 0xFFFFFFFF
        if a == 0 and isinstance(a, int):
            return b
        if b == 0 and isinstance(b, int):
            return a
        return self._emit("add", a, b)

    def sub(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return (a - b) & 0xFFFFFFFF
        if isinstance(b, int) and b == 0:
            return a
        return self._emit("sub", a, b)

    def mul(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return (a * b) & 0xFFFFFFFF
        for x, y in ((a, b), (b, a)):
            if isinstance(x, int):
                if x == 0:
                    return 0
                if x == 1:
                    return y
                if x & (x - 1) == 0:
                    return self._emit("shl", y, x.bit_length() - 1)
        return self._emit("mul", a, b)

    def udiv(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a // b
        if isinstance(a, int) and a == 0:
            return 0
        if isinstance(b, int):
            if b == 1:
                return a
            if b & (b - 1) == 0:
                return self._emit("lshr", a, b.bit_length() - 1)
        return self._emit("udiv", a, b)

    def urem(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a % b
        if isinstance(a, int) and a == 0:
            return 0
        if isinstance(b, int):
            if b == 1:
                return 0
            if b & (b - 1) == 0:
                return self._emit("and_", a, b - 1)
        return self._emit("urem", a, b)

    def and_(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a & b
        if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b == 0):
            return 0
        return self._emit("and_", a, b)

    def or_(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a | b
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self._emit("or_", a, b)

    def xor(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a ^ b
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self._emit("xor", a, b)

    def shl(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return (a << b) & 0xFFFFFFFF
        if isinstance(b, int) and b == 0:
            return a
        return self._emit("shl", a, b)

    def lshr(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a >> b
        if isinstance(b, int) and b == 0:
            return a
        return self._emit("lshr", a, b)
