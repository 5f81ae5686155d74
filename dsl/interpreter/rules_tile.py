"""Rules of the grid, shape, reduction, scan and dot ops.

- Shape ops are numpy views or copies: reshape is row-major, permute is a transpose.
- Reductions accumulate in f32 for f16/bf16/f8 (then round the result), in the
  element type otherwise (integers wrap; i1 sums are xor, products are and). The
  frontend widens bool and narrow integer tiles to i32/u32 before a sum or product,
  so kernels reach these rules with 32- and 64-bit integers only.
  max/min propagate NaN; argmax/argmin give the first index on ties and the
  index of the first NaN, as numpy, in i32.
- tile.reduce_generic combines as a tree, which is what the GPU does: at each
  step element i is combined with element i + n/2 (lower index first) until one
  remains. The combiner region runs on whole halves at once when it holds only
  elementwise ops, else element by element.
- Scans are inclusive and sequential along the axis, with the accumulation type
  of reductions; `reverse` scans from the last element.
- dot: inputs are converted to the accumulator's type (f32 for an f16
  accumulator; with allow_tf32, f32 inputs drop their 13 low mantissa bits, as the
  tensor cores read them), multiplied and summed there, the accumulator added, and the result rounded to the
  accumulator's type. Integer dots accumulate in i32 with wrap-around.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..ir import tile_ops as T
from . import numerics as nm
from .engine import GRID, PID, run_body, rule
from .rules_elementwise import dtype_of, make_step

F32 = nm.F32


@rule(T.ProgramIdOp)
def _program_id(op, cx):
    ax, o = op.attrs["axis"], cx.out(op)

    def step(r):
        r[o] = r[PID][ax]
    return step


@rule(T.BarrierOp)
def _barrier(op, cx):
    # a program's tiles are whole arrays here: its "threads" are always in step
    return lambda r: None


@rule(T.GridDependencyWaitOp, T.LaunchDependentsOp)
def _grid_dependency(op, cx):
    # launches run one after another here: the grid before has always finished
    return lambda r: None


@rule(T.NumProgramsOp)
def _num_programs(op, cx):
    ax, o = op.attrs["axis"], cx.out(op)

    def step(r):
        r[o] = r[GRID][ax]
    return step


@rule(T.ArangeOp)
def _arange(op, cx):
    arr = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
    arr.flags.writeable = False
    cx.preset(op.results[0], arr)


@rule(T.SplatOp)
def _splat(op, cx):
    shape = tuple(op.attrs["shape"])
    store = np.dtype(np.int64) if dtype_of(op.operands[0]) is None else dtype_of(op.operands[0]).np
    return make_step(lambda x: np.full(shape, x, dtype=store), cx.ins(op), cx.out(op))


@rule(T.BroadcastOp)
def _broadcast(op, cx):
    shape = tuple(op.attrs["shape"])
    return make_step(lambda x: np.broadcast_to(x, shape), cx.ins(op), cx.out(op))


@rule(T.ExpandDimsOp)
def _expand_dims(op, cx):
    ax = op.attrs["axis"]
    return make_step(lambda x: np.expand_dims(x, ax), cx.ins(op), cx.out(op))


@rule(T.ReshapeOp)
def _reshape(op, cx):
    shape = tuple(op.attrs["shape"])
    return make_step(lambda x: np.reshape(x, shape), cx.ins(op), cx.out(op))


@rule(T.PermuteOp)
def _permute(op, cx):
    order = tuple(op.attrs["order"])
    return make_step(lambda x: np.transpose(x, order), cx.ins(op), cx.out(op))


@rule(T.CatOp)
def _cat(op, cx):
    ax = op.attrs["axis"]
    return make_step(lambda a, b: np.concatenate((a, b), axis=ax), cx.ins(op), cx.out(op))


# ----------------------------------------------------------------------------- reductions
def _accumulating(np_fn, bool_fn, d: dt.DType):
    """fn(x, axis) for sum/prod-like reductions and scans in the accumulation type of `d`."""
    if d.is_bool:
        return lambda x, axis: bool_fn(x, axis=axis)
    if d.is_int:
        return lambda x, axis: np_fn(x, axis=axis, dtype=d.np)
    if d is dt.float64 or d is dt.float32:
        return lambda x, axis: np_fn(x, axis=axis, dtype=d.np)
    return lambda x, axis: nm.cast(np_fn(x, axis=axis, dtype=F32), d)


def _reduce_fn(kind: str, d: dt.DType):
    if kind == "sum":
        return _accumulating(np.sum, np.logical_xor.reduce, d)
    if kind == "prod":
        return _accumulating(np.prod, np.logical_and.reduce, d)
    if kind == "max":
        return lambda x, axis: np.max(x, axis=axis)
    if kind == "min":
        return lambda x, axis: np.min(x, axis=axis)
    arg = np.argmax if kind == "argmax" else np.argmin
    return lambda x, axis: arg(x, axis=axis).astype(np.int32)


@rule(T.ReduceOp)
def _reduce(op, cx):
    fn, ax = _reduce_fn(op.attrs["kind"], dtype_of(op.operands[0])), op.attrs["axis"]
    return make_step(lambda x: fn(x, ax)[()], cx.ins(op), cx.out(op))


def _scan_fn(kind: str, d: dt.DType):
    if kind == "sum":
        return _accumulating(np.cumsum, np.logical_xor.accumulate, d)
    if kind == "prod":
        return _accumulating(np.cumprod, np.logical_and.accumulate, d)
    acc = np.maximum.accumulate if kind == "max" else np.minimum.accumulate
    return lambda x, axis: acc(x, axis=axis)


@rule(T.ScanOp)
def _scan(op, cx):
    fn, ax = _scan_fn(op.attrs["kind"], dtype_of(op.operands[0])), op.attrs["axis"]
    if op.attrs.get("reverse", False):
        return make_step(lambda x: np.flip(fn(np.flip(x, ax), ax), ax), cx.ins(op), cx.out(op))
    return make_step(lambda x: fn(x, ax), cx.ins(op), cx.out(op))


_VECTOR_SAFE = ("elementwise", "terminator")


@rule(T.ReduceGenericOp)
def _reduce_generic(op, cx):
    body = cx.body(op.regions[0])
    (x,), o, ax = cx.ins(op), cx.out(op), op.attrs["axis"]
    (sa, sb), (sy,) = body.args, body.term
    vectorized = all(any(inner.has_trait(t) for t in _VECTOR_SAFE) or inner.name == "tile.constant"
                     for inner in op.regions[0].block.ops)

    def combine(r, a, b):
        r[sa], r[sb] = a, b
        run_body(body, r)
        return r[sy]

    def step(r):
        v = np.moveaxis(np.asarray(r[x]), ax, -1)
        while v.shape[-1] > 1:
            half = v.shape[-1] // 2
            lo, hi = v[..., :half], v[..., half:]
            if vectorized:
                v = np.broadcast_to(combine(r, lo, hi), lo.shape)
            else:
                out = np.empty(lo.shape, v.dtype)
                for i in np.ndindex(lo.shape):
                    out[i] = combine(r, lo[i], hi[i])
                v = out
        r[o] = np.array(v[..., 0])[()]
    return step


# ----------------------------------------------------------------------------- dot
def _dot_fn(in_d: dt.DType, acc_d: dt.DType, tf32: bool):
    if acc_d is dt.int32:
        def dot(a, b, c):
            p = np.matmul(a.astype(np.int64), b.astype(np.int64))
            return (p + c).astype(np.int32)
        return dot
    work = np.float64 if acc_d is dt.float64 else F32
    round_in = tf32 and in_d is dt.float32

    def dot(a, b, c):
        a, b = a.astype(work), b.astype(work)
        if round_in:
            a, b = nm.round_tf32(a), nm.round_tf32(b)
        return (np.matmul(a, b) + c.astype(work)).astype(acc_d.np)
    return dot


@rule(T.DotOp)
def _dot(op, cx):
    in_d, acc_d = dtype_of(op.operands[0]), dtype_of(op.operands[2])
    return make_step(_dot_fn(in_d, acc_d, op.attrs.get("allow_tf32", False)), cx.ins(op), cx.out(op))
