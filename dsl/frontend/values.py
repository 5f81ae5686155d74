"""What names are bound to while lowering: IR values wrapped with their type's facts.

Python values (ints, floats, bools, strings, tuples, dtypes, @tc.func objects) are
constexprs and stay plain Python objects; run-time values are `TensorValue`s
(scalars, tiles, pointers) or `ViewValue`s (tensor-view kernel arguments).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..dtypes import DType
from ..ir.core import Value
from ..ir.types import PointerType, ScalarType, TileType, ViewType, element_type, shape_of

__all__ = ["TensorValue", "ViewValue", "ViewShape", "BoundMethod", "is_constexpr", "is_py_scalar",
           "py_scalar"]


class TensorValue:
    """A run-time scalar, tile, pointer or pointer tile."""

    __slots__ = ("value",)

    def __init__(self, value: Value):
        self.value = value

    @property
    def type(self):
        return self.value.type

    @property
    def shape(self) -> Tuple[int, ...]:
        return shape_of(self.value.type)

    @property
    def is_tile(self) -> bool:
        return isinstance(self.value.type, TileType)

    @property
    def element(self):
        return element_type(self.value.type)

    @property
    def is_pointer(self) -> bool:
        return isinstance(self.element, PointerType)

    @property
    def dtype(self) -> Optional[DType]:
        e = self.element
        return e.dtype if isinstance(e, ScalarType) else None

    def describe(self) -> str:
        return str(self.value.type)


class ViewValue:
    """A tensor-view kernel argument."""

    __slots__ = ("value",)

    def __init__(self, value: Value):
        self.value = value

    @property
    def type(self) -> ViewType:
        return self.value.type

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def rank(self) -> int:
        return self.value.type.rank

    def describe(self) -> str:
        return str(self.value.type)


class ViewShape:
    """`x.shape` of a view: indexing it with a constexpr gives the run-time extent."""

    __slots__ = ("view",)

    def __init__(self, view: ViewValue):
        self.view = view


class BoundMethod:
    """A method of a run-time value (`t.sum`, `x.stride`) waiting to be called."""

    __slots__ = ("name", "handler", "self_value")

    def __init__(self, name, handler, self_value):
        self.name, self.handler, self.self_value = name, handler, self_value


def is_py_scalar(x) -> bool:
    return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating))


def py_scalar(x):
    """A numpy scalar as the matching Python scalar (constexpr arithmetic stays in Python)."""
    return x.item() if isinstance(x, np.generic) else x


def is_constexpr(x) -> bool:
    """Python (compile-time) values are everything but the run-time wrappers."""
    if isinstance(x, tuple):
        return all(is_constexpr(v) for v in x)
    return not isinstance(x, (TensorValue, ViewValue, ViewShape, BoundMethod))
