"""Rules of the view, pointer, load/store and atomic ops (memory semantics in memory.py).

- load_view/store_view: the tile starts at element `index * shape` (mode
  "index") or `index` (mode "offset") per dimension; out-of-bounds elements
  (negative offsets included) read `padding` and are skipped by stores.
- Pointer loads/stores: an unmasked lane outside its argument's memory is an
  InterpreterError naming the program and the source line; masked-off lanes
  never touch memory (loads give `other`). Stores write lanes in row-major
  order: the last writer wins.
- Atomics apply lane by lane in row-major order within a program (programs run
  one after another; the programs of a cluster run at the same time, and one
  program's atomic op is indivisible) and return the old values, 0 in
  masked-off lanes. CAS compares bit patterns, like the hardware.
- A multicast load_view checks its promise in a cluster (cluster.py).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InterpreterError
from ..ir import tile_ops as T
from ..ir.types import element_type
from . import numerics as nm
from .cluster import check_multicast
from .engine import MEM, rule
from .memory import load_tile, store_tile
from .rules_elementwise import dtype_of, elementwise_fn, make_step


@rule(T.ViewDimOp)
def _view_dim(op, cx):
    (v,), o, dim = cx.ins(op), cx.out(op), op.attrs["dim"]
    index = op.operands[0].type.index.np.type
    if op.attrs["kind"] == "shape":
        def step(r):
            r[o] = index(r[v].shape[dim])
    else:
        def step(r):
            r[o] = index(r[v].strides[dim])
    return step


@rule(T.ViewPtrOp)
def _view_ptr(op, cx):
    (v,), o = cx.ins(op), cx.out(op)

    def step(r):
        r[o] = r[v].addr
    return step


def _padding(op, d):
    value = op.attrs.get("padding", 0)
    if d.is_int and not (isinstance(value, (int, bool)) or math.isfinite(value)):
        raise InterpreterError(f"'{op.name}' at {op.loc}: padding {value} is not a {d.name} value")
    return nm.const_value(value if d.is_float or d.is_bool else int(value), d)


def _starts(op, shape):
    """A function of the index values giving the tile's first element per dimension."""
    if op.attrs.get("mode", "index") == "offset":
        return lambda idx: [int(i) for i in idx]
    return lambda idx: [int(i) * s for i, s in zip(idx, shape)]


@rule(T.LoadViewOp)
def _load_view(op, cx):
    ins, o = cx.ins(op), cx.out(op)
    v, idx = ins[0], ins[1:]
    shape = tuple(op.attrs["shape"])
    d = op.operands[0].type.dtype
    pad, starts = _padding(op, d), _starts(op, shape)
    order = op.attrs.get("order")
    kept = [n for d, n in enumerate(shape) if d not in (op.attrs.get("squeeze") or [])]

    def shaped(t):  # the box without its squeezed unit dimensions, in `order`
        t = t.reshape(kept)
        return t if order is None else np.ascontiguousarray(np.transpose(t, order))
    if op.attrs.get("multicast"):
        def step(r):
            index = [r[i] for i in idx]
            start = starts(index)
            check_multicast(r, op, start, tuple(int(i) for i in index))
            r[o] = shaped(load_tile(r[v], start, shape, pad, d))
        return step

    def step(r):
        r[o] = shaped(load_tile(r[v], starts([r[i] for i in idx]), shape, pad, d))
    return step


@rule(T.StoreViewOp)
def _store_view(op, cx):
    ins = cx.ins(op)
    v, idx, val = ins[0], ins[1:-1], ins[-1]
    box = tuple(op.box_shape())
    starts = _starts(op, box)

    def step(r):
        store_tile(r[v], starts([r[i] for i in idx]), np.reshape(r[val], box))
    return step


@rule(T.AddPtrOp)
def _addptr(op, cx):
    return make_step(lambda p, off: p + np.asarray(off).astype(np.int64)[()], cx.ins(op), cx.out(op))


def _pointee(op):
    return element_type(op.operands[0].type).pointee


@rule(T.LoadOp)
def _load(op, cx):
    (p,), o, d = cx.ins(op), cx.out(op), _pointee(op)

    def step(r):
        r[o] = r[MEM].load(r[p], d)
    return step


@rule(T.LoadMaskedOp)
def _load_masked(op, cx):
    (p, m, other), o, d = cx.ins(op), cx.out(op), _pointee(op)

    def step(r):
        r[o] = r[MEM].load(r[p], d, r[m], r[other])
    return step


@rule(T.StoreOp)
def _store(op, cx):
    p, val = cx.ins(op)

    def step(r):
        r[MEM].store(r[p], r[val])
    return step


@rule(T.StoreMaskedOp)
def _store_masked(op, cx):
    p, val, m = cx.ins(op)

    def step(r):
        r[MEM].store(r[p], r[val], r[m])
    return step


_RMW_OPS = {"add": T.AddOp, "max": T.MaximumOp, "min": T.MinimumOp,
            "and": T.AndOp, "or": T.OrOp, "xor": T.XorOp}


def _exchange(old, value):
    return value


@rule(T.AtomicRMWOp)
def _atomic_rmw(op, cx):
    (p, val, m), o = cx.ins(op), cx.out(op)
    kind, d = op.attrs["kind"], dtype_of(op.operands[1])
    combine = _exchange if kind == "xchg" else elementwise_fn(_RMW_OPS[kind], d)

    def step(r):
        r[o] = r[MEM].atomic(r[p], r[val], r[m], combine)
    return step


@rule(T.AtomicRMWViewOp)
def _atomic_rmw_view(op, cx):
    ins, o = cx.ins(op), cx.out(op)
    v, idx, val = ins[0], ins[1:-1], ins[-1]
    box = tuple(op.box_shape())
    starts = _starts(op, box)
    kind, d = op.attrs["kind"], dtype_of(op.operands[-1])
    combine = _exchange if kind == "xchg" else elementwise_fn(_RMW_OPS[kind], d)
    tile_shape = tuple(op.operands[-1].type.shape)

    def step(r):
        view = r[v]
        first = starts([r[i] for i in idx])
        coords = np.indices(box).reshape(len(box), -1) + np.asarray(first)[:, None]
        inside = np.all((coords >= 0) & (coords < np.asarray(view.shape)[:, None]), axis=0)
        addr = view.addr + (np.where(inside, coords, 0) * np.asarray(view.strides)[:, None]).sum(axis=0)
        old = r[MEM].atomic(addr.reshape(tile_shape), np.reshape(r[val], tile_shape), inside.reshape(tile_shape),
                            combine)
        r[o] = old
    return step


@rule(T.AtomicCASOp)
def _atomic_cas(op, cx):
    (p, cmp, val, m), o = cx.ins(op), cx.out(op)
    d = dtype_of(op.operands[2])

    def combine(old, value, expected):
        same = nm.to_bits(old, d) == nm.to_bits(expected, d)
        return np.where(same, value, old)

    def step(r):
        r[o] = r[MEM].atomic(r[p], r[val], r[m], combine, r[cmp])
    return step
