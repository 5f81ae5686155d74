"""lower_reductions: tile.reduce / tile.reduce_generic become explicit gpu stages.

For a tile with layout L reduced along `axis` (see gpu/stages.py):

    %a = gpu.reduce_thread %x {axis}           registers of one thread
    %b = gpu.reduce_lanes %a {axis}            butterfly shuffles within each warp
    %s = gpu.alloc {shape = ...}               only when warps split the axis:
    gpu.barrier                                  (the buffer may still be read by a
    gpu.local_store %s, %b                        previous use, e.g. in a loop)
    gpu.barrier
    %c = gpu.local_load %s                     every warp's partial, in registers
    %r = gpu.reduce_thread %c {axis, drop_axis = true}

Stages the layout does not need are left out; the last one drops the axis, so
its result has the slice layout assign_layouts gave the reduction (a rank-1
tile reduces to a scalar every thread holds). Each stage carries the combiner
as a region on scalars: tile.add/mul/maximum/minimum for the named kinds, the
user's region for reduce_generic, and for argmax/argmin a combiner on (value,
index) pairs that keeps the first index on ties and lets NaN win (numpy's rule).
f16, bf16 and f8 sums and products are computed in f32 (the operand widened first,
the result rounded once), as the interpreter and lower_scans do.
"""
from __future__ import annotations

from typing import Dict, List

from tilec import dtypes as dt
from tilec.ir import Block, Builder, Module, Region, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, ScalarType, TileType

from ..gpu.layouts import SharedLayout, SliceLayout
from ..gpu.ops import SHARED, AllocOp, BarrierOp, LocalLoadOp, LocalStoreOp, ReduceLanesOp, ReduceThreadOp
from ..gpu.stages import axis_bits, canonical, drop_axis, stage_result, warps_to_registers

__all__ = ["lower_reductions", "combiner_region", "simple_combiner", "accumulates_in_f32"]

_SIMPLE = {"sum": T.AddOp, "prod": T.MulOp, "max": T.MaximumOp, "min": T.MinimumOp}


def _clone_block(src: Block, loc) -> Block:
    vmap: Dict[int, Value] = {}
    blk = Block([a.type for a in src.args])
    for a, b in zip(src.args, blk.args):
        vmap[id(a)] = b
    for op in src.ops:
        new = type(op)([vmap.get(id(v), v) for v in op.operands], [r.type for r in op.results],
                       dict(op.attrs), (), op.loc)
        for r in op.regions:
            new.add_region(Region([_clone_block(r.block, loc)]))
        for a, b in zip(op.results, new.results):
            vmap[id(a)] = b
        blk.append(new)
    return blk


def accumulates_in_f32(kind: str, dtype) -> bool:
    """Sums and products of f16, bf16 and f8 are computed in f32 and rounded once (the
    interpreter's accumulation type): reductions here, scans in lower_scans."""
    return kind in ("sum", "prod") and dtype.is_float and dtype.bits < 32


def simple_combiner(kind: str, element, loc) -> Block:
    """^bb0(a, b): tile.yield a <kind> b, on scalars of `element` (sum, prod, max, min)."""
    blk = Block([element, element])
    b = Builder().at_end(blk)
    b.loc = loc
    b.create(T.YieldOp, b.value(_SIMPLE[kind], *blk.args))
    return blk


def combiner_region(op, element=None) -> Block:
    """The scalar combiner of `op` (tile.reduce or tile.reduce_generic) as a block, on
    `element` (a ScalarType) where given, else on the operand's element type."""
    if isinstance(op, T.ReduceGenericOp):
        return _clone_block(op.regions[0].block, op.loc)
    x = element or op.operands[0].type.element
    kind = op.attrs["kind"]
    if kind in _SIMPLE:
        return simple_combiner(kind, x, op.loc)
    b = Builder()
    b.loc = op.loc
    i32 = ScalarType(dt.int32)
    blk = Block([x, i32, x, i32])
    b.at_end(blk)
    v1, i1, v2, i2 = blk.args
    better = b.value(T.CmpOp, v2, v1, pred="gt" if kind == "argmax" else "lt")
    tie = b.value(T.AndOp, b.value(T.CmpOp, v2, v1, pred="eq"), b.value(T.CmpOp, i2, i1, pred="lt"))
    take = b.value(T.OrOp, better, tie)
    if x.dtype.is_float:
        nan2 = b.value(T.CmpOp, v2, v2, pred="ne")
        nan1 = b.value(T.CmpOp, v1, v1, pred="ne")
        only2 = b.value(T.AndOp, nan2, b.value(T.InvertOp, nan1))
        both_first = b.value(T.AndOp, b.value(T.AndOp, nan2, nan1), b.value(T.CmpOp, i2, i1, pred="lt"))
        take = b.value(T.OrOp, b.value(T.AndOp, take, b.value(T.InvertOp, nan1)),
                       b.value(T.OrOp, only2, both_first))
    b.create(T.YieldOp, b.value(T.SelectOp, take, v2, v1), b.value(T.SelectOp, take, i2, i1))
    return blk


def _index_tile(b: Builder, t: TileType, axis: int) -> Value:
    """i32 coordinates along `axis`, broadcast to the tile `t` in its layout."""
    rank = t.rank
    inserts = [d for d in range(rank) if d != axis]
    layouts = [t.encoding]
    for d in reversed(inserts):
        layouts.append(SliceLayout(d, layouts[-1]))
    layouts.reverse()  # layouts[k]: after k expand_dims
    i32 = ScalarType(dt.int32)
    v = b.create(T.ArangeOp, start=0, end=t.shape[axis],
                 result_types=[TileType((t.shape[axis],), i32, layouts[0])]).result
    shape = [t.shape[axis]]
    for k, d in enumerate(inserts):
        shape.insert(d, 1)
        v = b.create(T.ExpandDimsOp, v, axis=d, result_types=[TileType(tuple(shape), i32, layouts[k + 1])]).result
    if tuple(shape) != t.shape:
        v = b.create(T.BroadcastOp, v, shape=list(t.shape), result_types=[TileType(t.shape, i32, t.encoding)]).result
    return v


def _stage(b: Builder, cls, vals: List[Value], axis: int, final: bool, want, combiner: Block) -> List[Value]:
    t = vals[0].type
    stage = "thread" if cls is ReduceThreadOp else "lanes"
    shape, bases = stage_result(t.encoding, t.shape, axis, stage)
    if final:
        shape = shape[:axis] + shape[axis + 1:]
        bases = drop_axis(bases, axis)
    types = []
    for v in vals:
        elem = v.type.element
        if not shape:
            types.append(elem)
        else:
            cands = [(want, shape)] if want is not None else []
            types.append(TileType(shape, elem, canonical(bases, cands)))
    attrs = {"axis": axis}
    if final:
        attrs["drop_axis"] = True
    op = cls(vals, types, attrs, (), b.loc)
    op.add_region(Region([combiner]))
    b.insert(op)
    return list(op.results)


def _lower(op) -> None:
    x = op.operands[0]
    t = x.type
    axis = op.attrs["axis"]
    b = Builder().before(op)
    b.loc = op.loc
    vals = [x]
    # (an f16 product of a tile overflowed midway on the GPU where the interpreter's f32 one did not)
    widen = isinstance(op, T.ReduceOp) and accumulates_in_f32(op.attrs["kind"], t.element.dtype)
    element = ScalarType(dt.float32) if widen else None
    if widen:
        vals = [b.value(T.CastOp, x, to=dt.float32)]
    if isinstance(op, T.ReduceOp) and op.attrs["kind"].startswith("arg"):
        vals.append(_index_tile(b, t, axis))
    reg_i, lane_i, warp_i = axis_bits(t.encoding.bases(t.shape), axis)
    stages = (["thread"] if reg_i else []) + (["lanes"] if lane_i else []) + (["warps"] if warp_i else [])
    if not stages:
        stages = ["thread"]
    want = op.results[0].type.encoding if isinstance(op.results[0].type, TileType) else None
    for k, s in enumerate(stages):
        final = k == len(stages) - 1
        if s == "thread":
            vals = _stage(b, ReduceThreadOp, vals, axis, final, want, combiner_region(op, element))
        elif s == "lanes":
            vals = _stage(b, ReduceLanesOp, vals, axis, final, want, combiner_region(op, element))
        else:
            vals = _through_shared(b, vals, axis)
            vals = _stage(b, ReduceThreadOp, vals, axis, True, want, combiner_region(op, element))
    if len(vals) == 2:
        vals = vals[1:]  # argmax/argmin give the index
    if widen:
        vals = [b.value(T.CastOp, vals[0], to=t.element.dtype)]
    for r, v in zip(op.results, vals):
        v.name_hint = r.name_hint
        r.replace_all_uses_with(v)
    op.erase()


def _through_shared(b: Builder, vals: List[Value], axis: int) -> List[Value]:
    """Every warp's partials to shared memory and back, as registers of every thread."""
    out = []
    bufs = []
    for v in vals:
        t = v.type
        lay = SharedLayout(1, 1, 1, tuple(range(t.rank - 1, -1, -1)))
        bufs.append(b.create(AllocOp, shape=list(t.shape), layout=lay,
                             result_types=[PointerType(t.element.dtype, SHARED)]).result)
    b.create(BarrierOp)
    for buf, v in zip(bufs, vals):
        b.create(LocalStoreOp, buf, v)
    b.create(BarrierOp)
    for buf, v in zip(bufs, vals):
        t = v.type
        lay = warps_to_registers(t.encoding, t.shape, axis)
        out.append(b.create(LocalLoadOp, buf, result_types=[TileType(t.shape, t.element, lay)]).result)
    return out


def lower_reductions(module: Module) -> Module:
    todo = [op for op in module.walk() if isinstance(op, (T.ReduceOp, T.ReduceGenericOp))]
    for op in todo:
        if op.operands[0].type.encoding is None:
            raise op.error("reductions are lowered after assign_layouts")
        _lower(op)
    return module
