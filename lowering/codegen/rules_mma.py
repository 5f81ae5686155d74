"""Codegen rules of the tensor-core ops: ldmatrix, mma.sync, cp.async.

ldmatrix and cp.async use NVVM intrinsics (LLVM then knows what they read and
write); mma.sync is inline PTX whose accumulators are tied operands ("=f" x 4,
then "0".."3"), as NVPTX-NOTES records. Fragment bookkeeping (which registers
an instruction reads, which row each lane addresses) lives in
gpu/mma_fragments.py, shared with the numpy simulation in the tests.
"""
from __future__ import annotations

from llvmlite import ir

from ..gpu import mma_ops as M
from ..gpu.mma_fragments import ldmatrix_groups, ldmatrix_row_coord, ldmatrix_trans, mma_instructions
from .rules_memory import guarded
from .types import I32, SHARED, llvm_scalar
from .walker import rule

__all__ = ["slot_pointer", "pack_pair"]

I8 = ir.IntType(8)


def slot_pointer(ctx, alloc_op, slot, elem: ir.Type, index):
    """Pointer to element `index` of slot `slot` (None: the whole buffer) of a gpu.alloc buffer."""
    b = ctx.builder
    off = ir.Constant(I32, alloc_op.attrs["offset"])
    if slot is not None:
        shape = alloc_op.attrs["shape"]
        slot_elems = 1
        for s in shape[1:]:
            slot_elems *= s
        pointee = alloc_op.results[0].type.pointee
        off = b.add(off, b.mul(ctx.get(slot), ir.Constant(I32, slot_elems * pointee.itemsize)))
    base = b.gep(ctx.shared_base(), [ir.Constant(I32, 0), off], inbounds=True)
    base = b.bitcast(base, elem.as_pointer(addrspace=SHARED))
    idx = ir.Constant(I32, index) if isinstance(index, int) else index
    return b.gep(base, [idx], inbounds=True)


def pack_pair(ctx, lo, hi):
    """Two 16-bit values as one i32 (lo in the low half, as mma.sync reads a pair)."""
    b = ctx.builder
    vec = ir.VectorType(lo.type, 2)
    v = b.insert_element(ir.Constant(vec, ir.Undefined), lo, ir.Constant(I32, 0))
    v = b.insert_element(v, hi, ir.Constant(I32, 1))
    return b.bitcast(v, I32)


def _unpack_pair(ctx, word, elem: ir.Type):
    b = ctx.builder
    v = b.bitcast(word, ir.VectorType(elem, 2))
    return [b.extract_element(v, ir.Constant(I32, 0)), b.extract_element(v, ir.Constant(I32, 1))]


def _slot_of(op, index: int):
    return op.operands[index] if len(op.operands) > index else None


# ----------------------------------------------------------------------------- ldmatrix
@rule(M.LdMatrixOp)
def _ldmatrix(ctx, op):
    alloc = op.operands[0].owner
    slot = _slot_of(op, 1)
    t = op.result.type
    shape = tuple(t.shape)
    smem = alloc.attrs["layout"] if slot is None else M.slot_layout(alloc.attrs["layout"])
    layout = t.encoding
    trans = ldmatrix_trans(layout, shape, smem)
    elem = ctx.ltype(t.element)
    words = []
    for first, count in ldmatrix_groups(layout, shape):
        coord = ldmatrix_row_coord(layout, shape, first, count, trans, ctx.lane, ctx.warp, ctx.ops)
        off = smem.offset(shape, coord, ctx.ops)
        ptr = slot_pointer(ctx, alloc, slot, ctx.ltype(t.element), off)
        name = f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.b16.p3"
        ret = I32 if count == 1 else ir.LiteralStructType([I32] * count)
        r = ctx.intrinsic(name, ret, [ptr])
        words += [r] if count == 1 else [ctx.builder.extract_value(r, i) for i in range(count)]
    vals = []
    for w in words:
        vals += _unpack_pair(ctx, w, elem)
    ctx.set(op.result, vals)


# ----------------------------------------------------------------------------- mma.sync
_MMA_ASM = {
    "f16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "bf16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "f32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
}
_MMA_TEXT = " {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"
_MMA_CONSTRAINTS = "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3"


@rule(M.MmaOp)
def _mma(ctx, op):
    a_t, b_t, c_t = (v.type for v in op.operands)
    m, n = c_t.shape
    k = a_t.shape[1]
    a_vals, b_vals = ctx.elems(op.operands[0]), ctx.elems(op.operands[1])
    acc = list(ctx.elems(op.operands[2]))
    bld = ctx.builder
    kind = a_t.dtype.name
    sixteen = a_t.dtype.bits == 16

    def words(vals, regs):
        if sixteen:
            return [pack_pair(ctx, vals[regs[i]], vals[regs[i + 1]]) for i in range(0, len(regs), 2)]
        return [bld.bitcast(vals[r], I32) for r in regs]  # tf32: the f32 bits, low mantissa ignored

    f32 = ir.FloatType()
    ret = ir.LiteralStructType([f32] * 4)
    fty = ir.FunctionType(ret, [I32] * 6 + [f32] * 4)
    for a_regs, b_regs, c_regs in mma_instructions(a_t.encoding, b_t.encoding, c_t.encoding, m, n, k):
        args = words(a_vals, a_regs) + words(b_vals, b_regs) + [acc[r] for r in c_regs]
        d = bld.asm(fty, _MMA_ASM[kind] + _MMA_TEXT, _MMA_CONSTRAINTS, args, False)
        for i, r in enumerate(c_regs):
            acc[r] = bld.extract_value(d, i)
    ctx.set(op.result, acc)


# ----------------------------------------------------------------------------- cp.async
def _unique_vectors(t, vec: int):
    """First registers of this thread's runs of `vec` consecutive elements, copies skipped."""
    seen, out = set(), []
    offs = t.encoding.reg_offsets(t.shape)
    for r in range(0, len(offs), vec):
        if offs[r] not in seen:
            seen.add(offs[r])
            out.append(r)
    return out


@rule(M.AsyncCopyOp)
def _async_copy(ctx, op):
    alloc = op.operands[0].owner
    slot = op.operands[1]
    ptrs = ctx.elems(op.operands[2])
    masks = ctx.elems(op.operands[3]) if len(op.operands) > 3 else None
    t = op.operands[2].type
    shape = tuple(t.shape)
    vec = op.attrs["vec"]
    elem = llvm_scalar(alloc.results[0].type.pointee)
    nbytes = vec * alloc.results[0].type.pointee.itemsize
    smem = M.slot_layout(alloc.attrs["layout"])
    coords = ctx.coords(t)
    bld = ctx.builder
    # .cg (L2 only) exists for 16-byte copies; smaller ones go through L1 (.ca)
    name = f"llvm.nvvm.cp.async.{'cg' if nbytes == 16 else 'ca'}.shared.global.{nbytes}.s"

    def copies():
        for r in _unique_vectors(t, vec):
            dst = slot_pointer(ctx, alloc, slot, elem, smem.offset(shape, coords[r], ctx.ops))
            src = ptrs[r]
            size = ir.Constant(I32, nbytes)
            if masks is not None and op.attrs.get("prefix"):
                # the group's wanted elements come first: read them, fill zeros after them
                common, rest = _common_conjuncts(bld, [masks[r + i] for i in range(vec)])
                size = bld.zext(rest[0], I32)
                for v in rest[1:]:
                    size = bld.add(size, bld.zext(v, I32))
                size = bld.mul(size, ir.Constant(I32, nbytes // vec))
                if common is not None:
                    size = bld.select(common, size, ir.Constant(I32, 0))
            elif masks is not None:  # a masked-off access copies nothing and fills zeros
                size = bld.select(masks[r], size, ir.Constant(I32, 0))
            dst8 = bld.bitcast(dst, I8.as_pointer(addrspace=SHARED))
            src8 = bld.bitcast(src, I8.as_pointer(addrspace=1))
            ctx.intrinsic(name, ir.VoidType(), [dst8, src8, size])
    # A tile smaller than its layout is held by several threads: only the owner copies each
    # element. Every copy writing the same bytes is a race between asynchronous writes
    # (compute-sanitizer's racecheck: "invalid memcpy_async synchronization"), and a copy
    # whose mask differs would zero-fill over another's data.
    _, own = ctx.ownership(t)
    guarded(ctx, own, copies)


def _common_conjuncts(bld, bits):
    """(c, rest) with bits[i] == c & rest[i] for every i, c the conjunction of the `and`
    operands all of `bits` share (None: none): a group's mask is typically the iteration's
    liveness & its row's bound & each column's bound, and the count of its set bits is then
    c ? (the columns' count) : 0, whose column part does not change in a loop (LLVM hoists
    it) where the per-element form took an and per element and iteration."""
    common = None
    while all(isinstance(b, ir.Instruction) and b.opname == "and" for b in bits):
        shared = next((x for x in bits[0].operands if all(any(x is y for y in b.operands) for b in bits)), None)
        if shared is None:
            break
        bits = [next((y for y in b.operands if y is not shared), shared) for b in bits]
        common = shared if common is None else bld.and_(common, shared)
    return common, bits


@rule(M.AsyncCommitOp)
def _async_commit(ctx, op):
    ctx.intrinsic("llvm.nvvm.cp.async.commit.group", ir.VoidType(), [])


@rule(M.AsyncWaitOp)
def _async_wait(ctx, op):
    ctx.intrinsic("llvm.nvvm.cp.async.wait.group", ir.VoidType(), [ir.Constant(I32, op.attrs["pending"])])
