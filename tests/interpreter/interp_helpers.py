"""Building small tile IR kernels for the interpreter tests.

A kernel is built with the IR Builder, printed, and parsed back, so the tests
run exactly what the textual IR says.
"""
from __future__ import annotations

import numpy as np

from tilec import dtypes as dt
from tilec.ir import Block, Builder, Location, Module, Region, parse, print_module, verify
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, ScalarType, TileType, ViewType, tile

LOC = Location("kern.py", 7, 3)


def view(dtype, rank, strides=None, index=dt.int64):
    return ViewType(dtype, rank, tuple(strides) if strides else (), index)


def scalar(dtype):
    return ScalarType(dtype)


def build(arg_types, body, name="k"):
    """Module of one tile.func taking `arg_types`; `body(b, *args)` emits its ops."""
    names = [f"a{i}" for i in range(len(arg_types))]
    f = T.FuncOp([], [], {"sym_name": name, "arg_names": names}, [Region([Block(list(arg_types))])])
    b = Builder().at_end(f.body)
    b.loc = LOC
    body(b, *f.body.args)
    b.create(T.ReturnOp)
    m = Module([f])
    verify(m)
    return parse(print_module(m))


def const(b, value, dtype, shape=None):
    t = ScalarType(dtype) if shape is None else tile(shape, dtype)
    return b.value(T.ConstantOp, result_types=[t], value=value)


def store_all(b, out_view, value):
    """Store a tile at offset 0 of a view of the same rank."""
    zero = const(b, 0, dt.int32)
    b.create(T.StoreViewOp, out_view, *([zero] * len(value.type.shape)), value, mode="offset")


def load_all(b, in_view, shape):
    zero = const(b, 0, dt.int32)
    return b.value(T.LoadViewOp, in_view, *([zero] * len(shape)), shape=list(shape), mode="offset")


def storage(d: dt.DType, values) -> np.ndarray:
    """Values of dtype `d` in the interpreter's numpy storage (bf16/f8 rounded in f32)."""
    from tilec.interpreter.numerics import cast
    return np.asarray(cast(np.asarray(values), d))


__all__ = ["T", "dt", "build", "const", "view", "scalar", "store_all", "load_all", "storage",
           "tile", "TileType", "PointerType", "ScalarType", "LOC"]
