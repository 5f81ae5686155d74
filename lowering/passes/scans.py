"""lower_scans: tile.scan becomes one gpu stage per segment of the scanned axis.

For a tile with layout L scanned along `axis` (see gpu/scan.py), the axis
coordinate bits are split into segments owned by registers, lanes or warps,
lowest first; each stage joins the blocks of its segment:

    %p1, %t1 = gpu.scan_thread %x, %x {axis, bits = [0, 1]}          in-thread, in order
    %p2, %t2 = gpu.scan_lanes %p1, %t1 {axis, bits = [2, 3, 4, 5, 6]}  shuffles of the totals
    %s = gpu.alloc {shape = ...}                                      one slot per warp total
    gpu.barrier                                                       (the buffer may still be
    %p3, %t3 = gpu.scan_warps %p2, %t2, %s {axis, bits = [7, 8]}       read by an earlier use)

The last prefix is the result, in the operand's layout: no conversion. f16,
bf16 and f8 sums and products are computed in f32 and rounded once per
element, as the interpreter does.
"""
from __future__ import annotations

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Region
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, TileType

from ..gpu.layouts import SharedLayout
from ..gpu.ops import SHARED, AllocOp, BarrierOp, ScanLanesOp, ScanThreadOp, ScanWarpsOp
from ..gpu.scan import scan_segments, warps_buffer_shape
from .reductions import accumulates_in_f32, simple_combiner

__all__ = ["lower_scans"]

_STAGES = {"thread": ScanThreadOp, "lanes": ScanLanesOp, "warps": ScanWarpsOp}


def _lower(op) -> None:
    x = op.operands[0]
    t = x.type
    axis, kind, reverse = op.attrs["axis"], op.attrs["kind"], bool(op.attrs.get("reverse", False))
    b = Builder().before(op)
    b.loc = op.loc
    narrow = accumulates_in_f32(kind, t.dtype)
    if narrow:
        x = b.value(T.CastOp, x, to=dt.float32)
    prefix = total = x
    for seg in scan_segments(t.encoding, t.shape, axis):
        operands = [prefix, total]
        if seg.kind == "warps":
            shape = warps_buffer_shape(t.shape, axis, seg)
            lay = SharedLayout(1, 1, 1, tuple(range(t.rank - 1, -1, -1)))
            buf = b.create(AllocOp, shape=list(shape), layout=lay,
                           result_types=[PointerType(x.type.dtype, SHARED)]).result
            b.create(BarrierOp)
            operands.append(buf)
        stage = _STAGES[seg.kind](operands, [x.type, x.type],
                                  {"axis": axis, "bits": list(seg.bits), "reverse": reverse}, (), op.loc)
        stage.add_region(Region([simple_combiner(kind, x.type.element, op.loc)]))
        b.insert(stage)
        prefix, total = stage.results
    if narrow:
        prefix = b.value(T.CastOp, prefix, to=t.dtype)
    prefix.name_hint = op.results[0].name_hint
    op.results[0].replace_all_uses_with(prefix)
    op.erase()


def lower_scans(module: Module) -> Module:
    todo = [op for op in module.walk() if isinstance(op, T.ScanOp)]
    for op in todo:
        if not isinstance(op.operands[0].type, TileType) or op.operands[0].type.encoding is None:
            raise op.error("scans are lowered after assign_layouts")
        _lower(op)
    return module

