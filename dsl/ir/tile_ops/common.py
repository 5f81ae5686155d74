"""Shared pieces of the tile dialect's op definitions."""
from __future__ import annotations

from ..core import AttrSpec, Op
from ..types import ScalarType, Type, element_type, is_pow2

A = AttrSpec
PURE = frozenset({"pure"})
EW = frozenset({"pure", "elementwise"})
TERM = frozenset({"terminator"})


def _dtype(t: Type):
    e = element_type(t)
    return e.dtype if isinstance(e, ScalarType) else None


def _check_shape(op: Op, shape):
    for s in shape:
        if not is_pow2(int(s)):
            raise op.error(f"tile shapes must be powers of two, got {list(shape)}")
