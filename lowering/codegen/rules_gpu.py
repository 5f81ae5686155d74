"""Codegen rules of the gpu dialect, and of tile.dot through FMAs.

Shared memory is the kernel's dynamic shared array (`ctx.shared_base()`); a
buffer starts at the byte offset allocate_shared gave it. Reduction stages
apply their combiner region to scalars with `lower_region`, so one code path
serves sum, max, argmax and user combiners alike.
"""
from __future__ import annotations

from typing import List, Sequence

from llvmlite import ir

from ...ir import tile_ops as T
from ...ir.types import TileType
from ..gpu import ops as G
from ..gpu.layouts import DistributedLayout
from ..gpu.mma_ops import slot_layout
from ..gpu.scan import scan_lanes, scan_thread, scan_warps
from ..gpu.swizzle import smem_vector
from ..gpu.stages import axis_bits
from ..passes.shared_alloc import convert_needs_shared
from .casts import convert_all
from .rules_shape import register_map
from .types import I32
from .walker import lower_region, rule

__all__ = ["shuffle", "barrier", "combine"]

_FULL_MASK = ir.Constant(I32, 0xFFFFFFFF)


# ----------------------------------------------------------------------------- helpers
def barrier(ctx, bar_id: int = 0) -> None:
    if ctx.named_barrier is not None:  # the consumer warps of a warp-specialized kernel
        named, count = ctx.named_barrier
        ctx.intrinsic("llvm.nvvm.barrier.cta.sync.aligned.count", ir.VoidType(),
                      [ir.Constant(I32, named), ir.Constant(I32, count)])
        return
    ctx.intrinsic("llvm.nvvm.barrier.cta.sync.aligned.all", ir.VoidType(), [ir.Constant(I32, bar_id)])


def _shfl32(ctx, v, kind: str, offset: int):
    mode = {"xor": "bfly", "up": "up", "down": "down", "idx": "idx"}[kind]
    clamp = 0 if kind == "up" else 0x1F
    suffix = "f32" if isinstance(v.type, ir.FloatType) else "i32"
    src = offset if isinstance(offset, ir.Value) else ir.Constant(I32, offset)  # idx: a run-time lane too
    return ctx.intrinsic(f"llvm.nvvm.shfl.sync.{mode}.{suffix}", v.type,
                         [_FULL_MASK, v, src, ir.Constant(I32, clamp)])


def shuffle(ctx, v, kind: str, offset: int):
    """`v` (any scalar up to 64 bits) from another lane; see gpu.shuffle."""
    b = ctx.builder
    t = v.type
    if t == I32 or isinstance(t, ir.FloatType):
        return _shfl32(ctx, v, kind, offset)
    bits = t.width if isinstance(t, ir.IntType) else (64 if isinstance(t, ir.DoubleType) else 16)
    as_int = v if isinstance(t, ir.IntType) else b.bitcast(v, ir.IntType(bits))
    if bits <= 32:
        wide = b.zext(as_int, I32) if bits < 32 else as_int
        out = b.trunc(_shfl32(ctx, wide, kind, offset), ir.IntType(bits)) if bits < 32 else _shfl32(ctx, wide, kind,
                                                                                                      offset)
    else:
        lo = _shfl32(ctx, b.trunc(as_int, I32), kind, offset)
        hi = _shfl32(ctx, b.trunc(b.lshr(as_int, ir.Constant(ir.IntType(64), 32)), I32), kind, offset)
        out = b.or_(b.zext(lo, ir.IntType(64)), b.shl(b.zext(hi, ir.IntType(64)), ir.Constant(ir.IntType(64), 32)))
    return out if isinstance(t, ir.IntType) else b.bitcast(out, t)


def combine(ctx, block, a: Sequence, b: Sequence) -> List:
    """Apply a combiner block (args a..., b...; tile.yield c...) to scalar llvm values."""
    term = lower_region(ctx, block, list(a) + list(b))
    return [ctx.get(v) for v in term.operands]


def _smem(ctx, byte_offset, elem: ir.Type, index):
    b = ctx.builder
    base = b.gep(ctx.shared_base(), [ir.Constant(I32, 0), _as_value(byte_offset)], inbounds=True)
    base = b.bitcast(base, elem.as_pointer(addrspace=G.SHARED))
    return b.gep(base, [_as_value(index)], inbounds=True)


def _as_value(v):
    return ir.Constant(I32, v) if isinstance(v, int) else v


def _vector_groups(t: TileType, layout, esize: int, dedupe: bool):
    """(first register, count) of each shared access: `smem_vector` consecutive registers."""
    v = smem_vector(t.encoding, t.shape, esize, layout)
    offs = t.encoding.reg_offsets(t.shape)
    seen, out = set(), []
    for r in range(0, len(offs), v):
        if dedupe and offs[r] in seen:
            continue
        seen.add(offs[r])
        out.append((r, v))
    return out


def _vec_ptr(ctx, byte_offset, ety: ir.Type, off, v: int):
    p = _smem(ctx, byte_offset, ety, _as_value(off))
    return p if v == 1 else ctx.builder.bitcast(p, ir.VectorType(ety, v).as_pointer(addrspace=G.SHARED))


def _memory_type(ety: ir.Type) -> ir.Type:
    """How an element is held in shared memory: i1 as one byte, since LLVM packs a
    <N x i1> vector into N bits, which would not match the byte-per-element indexing."""
    return ir.IntType(8) if ety == ir.IntType(1) else ety


def store_tile(ctx, t: TileType, vals, layout, byte_offset: int, columns=None) -> None:
    """Write the register tile into a shared buffer of its shape in `layout`; with `columns`
    (first, count), only the registers of those columns of a 2-D tile, into a buffer of
    (rows, count) (the caller makes sure no lane or warp bit of the layout crosses them)."""
    reg_ty = ctx.ltype(t.element)
    ety = _memory_type(reg_ty)
    esize = t.dtype.itemsize if t.dtype is not None else 8
    coords = ctx.coords(t)
    b = ctx.builder
    if ety != reg_ty:
        vals = [b.zext(x, ety) for x in vals]
    shape = t.shape
    if columns is not None:
        first, count = columns
        reg_cols = [o[1] for o in t.encoding.reg_offsets(t.shape)]
        shape = (t.shape[0], count)
    # Copies of an element held by other lanes or warps write it too, with the same bits
    # (_reduce_lanes makes a reduction's copies agree), so these writes never race.
    for r, v in _vector_groups(t, layout, esize, dedupe=True):
        coord = coords[r]
        if columns is not None:
            if not first <= reg_cols[r] < first + count:
                continue
            coord = (coord[0], ctx.ops.sub(coord[1], ctx.ops.const(first)) if first else coord[1])
        off = layout.offset(shape, coord, ctx.ops)
        val = vals[r]
        if v > 1:
            val = ir.Constant(ir.VectorType(ety, v), ir.Undefined)
            for i in range(v):
                val = b.insert_element(val, vals[r + i], ir.Constant(I32, i))
        b.store(val, _vec_ptr(ctx, byte_offset, ety, off, v), align=esize * v)


def _load_tile(ctx, t: TileType, layout, byte_offset) -> List:
    reg_ty = ctx.ltype(t.element)
    ety = _memory_type(reg_ty)
    esize = t.dtype.itemsize if t.dtype is not None else 8
    coords = ctx.coords(t)
    b = ctx.builder
    out = []
    for r, v in _vector_groups(t, layout, esize, dedupe=False):
        off = layout.offset(t.shape, coords[r], ctx.ops)
        x = b.load(_vec_ptr(ctx, byte_offset, ety, off, v), typ=ir.VectorType(ety, v) if v > 1 else ety,
                   align=esize * v)
        out.extend([b.extract_element(x, ir.Constant(I32, i)) for i in range(v)] if v > 1 else [x])
    return out if ety == reg_ty else [b.trunc(x, reg_ty) for x in out]


def _row_major(rank: int):
    from ..gpu.layouts import SharedLayout
    return SharedLayout(1, 1, 1, tuple(range(rank - 1, -1, -1)))


# ----------------------------------------------------------------------------- layouts and memory
@rule(G.ConvertLayoutOp)
def _convert_layout(ctx, op):
    src, dst = op.operands[0].type, op.result.type
    if not convert_needs_shared(src.encoding, dst.encoding, src.shape):
        mapping = register_map([src], dst, ctx.num_warps, lambda c: (0, c))
        vals = ctx.elems(op.operands[0])
        ctx.set(op.result, [vals[r] for _, r in mapping])
        return
    if "_smem_offset" not in op.attrs:
        raise ValueError("this conversion goes through shared memory, which allocate_shared has not placed")
    layout = op.attrs.get("_smem_layout") or _row_major(src.rank)  # swizzled by allocate_shared
    off = op.attrs["_smem_offset"]
    if op.attrs.get("_smem_sync", True):
        barrier(ctx)  # an earlier use may still read the scratch
    store_tile(ctx, src, ctx.elems(op.operands[0]), layout, off)
    barrier(ctx)
    ctx.set(op.result, _load_tile(ctx, dst, layout, off))


@rule(G.AllocOp)
def _alloc(ctx, op):
    if op.attrs.get("offset", -1) < 0:
        raise ValueError("shared buffer has no offset: allocate_shared must run before codegen")
    ctx.set(op.result, ctx.builder.gep(ctx.shared_base(), [ir.Constant(I32, 0), ir.Constant(I32, op.attrs["offset"])],
                                       inbounds=True))


@rule(G.LocalStoreOp)
def _local_store(ctx, op):
    alloc = op.operands[0].owner
    store_tile(ctx, op.operands[1].type, ctx.elems(op.operands[1]), alloc.attrs["layout"], alloc.attrs["offset"])


@rule(G.LocalLoadOp)
def _local_load(ctx, op):
    alloc = op.operands[0].owner
    layout, offset = alloc.attrs["layout"], alloc.attrs["offset"]
    if len(op.operands) > 1:  # slot k of a buffer of slots: its bytes start k slots in
        slot_bytes = op.result.type.dtype.itemsize
        for s in alloc.attrs["shape"][1:]:
            slot_bytes *= s
        offset = ctx.builder.add(ir.Constant(I32, offset), ctx.builder.mul(ctx.get(op.operands[1]),
                                                                           ir.Constant(I32, slot_bytes)))
        layout = slot_layout(layout)
    ctx.set(op.result, _load_tile(ctx, op.result.type, layout, offset))


@rule(G.BarrierOp, T.BarrierOp)  # tc.barrier(): barrier 0, as __syncthreads
def _barrier(ctx, op):
    barrier(ctx, op.attrs.get("id", 0))


@rule(G.ShuffleOp)
def _shuffle(ctx, op):
    ctx.set_elems(op.result, [shuffle(ctx, v, op.attrs["kind"], op.attrs["offset"])
                              for v in ctx.elems(op.operands[0])])


@rule(G.LaneIdOp)
def _lane_id(ctx, op):
    ctx.set(op.result, ctx.lane)


@rule(G.WarpIdOp)
def _warp_id(ctx, op):
    ctx.set(op.result, ctx.warp)


# ----------------------------------------------------------------------------- reductions
def _set_results(ctx, op, per_value: List[List]) -> None:
    for r, vals in zip(op.results, per_value):
        ctx.set(r, list(vals) if isinstance(r.type, TileType) else vals[0])


@rule(G.ReduceThreadOp)
def _reduce_thread(ctx, op):
    t = op.operands[0].type
    axis = op.attrs["axis"]
    reg_i = axis_bits(t.encoding.bases(t.shape), axis)[0]
    n = t.encoding.elems_per_thread(t.shape)
    keep = [k for k in range(n.bit_length() - 1) if k not in reg_i]
    inputs = [ctx.elems(v) for v in op.operands]
    block = op.regions[0].block
    acc = {}
    for r in range(n):
        j = sum(((r >> k) & 1) << i for i, k in enumerate(keep))
        cur = [vals[r] for vals in inputs]
        acc[j] = cur if j not in acc else combine(ctx, block, acc[j], cur)
    outs = [acc[j] for j in range(len(acc))]
    _set_results(ctx, op, [[o[i] for o in outs] for i in range(len(inputs))])


@rule(G.ReduceLanesOp)
def _reduce_lanes(ctx, op):
    t = op.operands[0].type
    lane_i = axis_bits(t.encoding.bases(t.shape), op.attrs["axis"])[1]
    inputs = [ctx.elems(v) for v in op.operands]
    block = op.regions[0].block
    b = ctx.builder
    outs = []
    for r in range(len(inputs[0])):
        cur = [vals[r] for vals in inputs]
        for k in lane_i:
            for v in cur:
                _keep_rounded(v)
            other = [shuffle(ctx, v, "xor", 1 << k) for v in cur]
            # combine in coordinate order, so that every lane of a pair computes the same value
            hi = b.icmp_unsigned("!=", b.and_(ctx.lane, ir.Constant(I32, 1 << k)), ir.Constant(I32, 0))
            lo_vals = [b.select(hi, o, c) for c, o in zip(cur, other)]
            hi_vals = [b.select(hi, c, o) for c, o in zip(cur, other)]
            cur = combine(ctx, block, lo_vals, hi_vals)
        outs.append(cur)
    _set_results(ctx, op, [[o[i] for o in outs] for i in range(len(inputs))])


_PRODUCTS = ("fmul", "fdiv")  # float ops LLVM may contract into a following add


def _keep_rounded(v) -> None:
    """A product entering a butterfly step stays a rounded value: were it fused into the
    lane's own combine (an fma, under fast_math's `contract`) while the partner adds the
    rounded copy it was sent, the two lanes' results would differ in the last bit, and the
    copies of a warp's partial, written to one shared-memory word together, would disagree
    (racecheck's finding in cross_entropy). Without `contract` the product is `mul.rn`, which
    neither LLVM nor ptxas fuses; it is computed once for the shuffle anyway."""
    if getattr(v, "opname", None) in _PRODUCTS and "contract" in getattr(v, "flags", ()):
        v.flags.remove("contract")


# ----------------------------------------------------------------------------- scans
class _LLVMScanEngine:
    """The arithmetic gpu/scan.py needs, on llvmlite values of the calling thread."""

    def __init__(self, ctx, block, elem: ir.Type, byte_offset: int = 0):
        self.ctx, self.block, self.elem, self.byte_offset = ctx, block, elem, byte_offset
        self.ops = ctx.ops

    def combine(self, a, b):
        return combine(self.ctx, self.block, [a], [b])[0]

    def select(self, cond, a, b):
        if isinstance(cond, bool):
            return a if cond else b
        return self.ctx.builder.select(cond, a, b)

    def lane_bit(self, k: int):
        b = self.ctx.builder
        return b.icmp_unsigned("!=", b.and_(self.ctx.lane, ir.Constant(I32, 1 << k)), ir.Constant(I32, 0))

    def shuffle_xor(self, v, mask: int):
        return shuffle(self.ctx, v, "xor", mask)

    def ult(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a < b
        return self.ctx.builder.icmp_unsigned("<", _as_value(a), _as_value(b))

    def store(self, offset, v):
        self.ctx.builder.store(v, _smem(self.ctx, self.byte_offset, self.elem, _as_value(offset)))

    def load(self, offset):
        return self.ctx.builder.load(_smem(self.ctx, self.byte_offset, self.elem, _as_value(offset)), typ=self.elem)

    def barrier(self):
        barrier(self.ctx)


@rule(G.ScanThreadOp, G.ScanLanesOp, G.ScanWarpsOp)
def _scan_stage(ctx, op):
    t = op.operands[0].type
    seg = op.segment()
    reverse = bool(op.attrs.get("reverse", False))
    prefix, total = ctx.elems(op.operands[0]), ctx.elems(op.operands[1])
    block = op.regions[0].block
    elem = ctx.ltype(t.element)
    if isinstance(op, G.ScanThreadOp):
        out = scan_thread(_LLVMScanEngine(ctx, block, elem), prefix, total, seg.index, reverse)
    elif isinstance(op, G.ScanLanesOp):
        out = scan_lanes(_LLVMScanEngine(ctx, block, elem), prefix, total, seg.index, reverse)
    else:
        alloc = op.operands[2].owner
        engine = _LLVMScanEngine(ctx, block, elem, alloc.attrs["offset"])
        out = scan_warps(engine, prefix, total, ctx.coords(t), t.encoding.bases(t.shape).reg, t.shape,
                         op.attrs["axis"], seg, reverse)
    ctx.set(op.results[0], list(out[0]))
    ctx.set(op.results[1], list(out[1]))


# ----------------------------------------------------------------------------- dot through FMAs
def _compress(r: int, positions: Sequence[int]) -> int:
    return sum(((r >> k) & 1) << i for i, k in enumerate(positions))


@rule(T.DotOp)
def _dot_fma(ctx, op):
    a_t, b_t, c_t = (v.type for v in op.operands)
    acc_layout = c_t.encoding
    if not isinstance(acc_layout, DistributedLayout):
        raise ValueError("dot needs layouts: run assign_layouts first")
    k = a_t.shape[1]
    bases = acc_layout.bases(c_t.shape)
    m_bits = [i for i, x in enumerate(bases.reg) if x[0] and not x[1]]
    n_bits = [i for i, x in enumerate(bases.reg) if x[1] and not x[0]]
    a_vals, b_vals, acc = ctx.elems(op.operands[0]), ctx.elems(op.operands[1]), ctx.elems(op.operands[2])
    bld = ctx.builder
    cty = ctx.ltype(c_t.element)
    is_float = isinstance(cty, (ir.FloatType, ir.DoubleType, ir.HalfType)) or not isinstance(cty, ir.IntType)
    # the operands in the accumulator's type, through the one conversion helper (f8 values
    # are i8 bit patterns: only casts.convert knows how to widen them)
    src, dst = ctx.dtype(a_t), ctx.dtype(c_t)
    widened_a = convert_all(bld, a_vals, src, dst, ctx.target)
    widened_b = convert_all(bld, b_vals, src, dst, ctx.target)
    fma_name = None
    if is_float:
        fma_name = {"float": "llvm.fmuladd.f32", "double": "llvm.fmuladd.f64", "half": "llvm.fmuladd.f16"}[str(cty)]
    out = []
    for r, c in enumerate(acc):
        mi, ni = _compress(r, m_bits), _compress(r, n_bits)
        for kk in range(k):
            x, y = widened_a[kk + k * mi], widened_b[kk + k * ni]
            if is_float:
                c = ctx.intrinsic(fma_name, cty, [x, y, c])
            else:
                c = bld.add(bld.mul(x, y), c)
        out.append(c)
    ctx.set(op.result, out)
