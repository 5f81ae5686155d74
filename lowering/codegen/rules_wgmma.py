"""Codegen rules of the wgmma ops (sm_90a).

wgmma.mma_async is inline PTX (LLVM has no intrinsic for it) with the accumulators as
tied operands ("=f" x N, then "0".."N-1"; NVPTX-NOTES). gpu.wgmma_wait is inline PTX
too, with every accumulator register tied through it: LLVM then cannot read or move
an accumulator between the instruction that writes it asynchronously and the wait
that retires it. The fences and commit are NVVM intrinsics.

Descriptors: the constant fields come from wgmma_fragments.descriptor_high_bits; the
start address is the buffer's offset in the program's shared memory (slot and warpgroup
added) >> 4, which is below 2^14 for any shared allocation (227 KB), so adding the
per-instruction offset never carries into the other fields. The offset is the 32-bit
shared address's low 18 bits: in a cluster, the shared addresses of program rank r carry
r in bits 24 and up (seen on an H200: rank 1's dynamic shared memory starts at 0x1000400),
which would otherwise spill into the descriptor's leading-byte-offset field.
"""
from __future__ import annotations

from llvmlite import ir

from ..gpu import wgmma_ops as W
from ..gpu.wgmma_fragments import (buffer_k_major, descriptor_high_bits, k_step, warpgroup_strides,
                                   wgmma_instructions)
from .rules_mma import slot_pointer
from .types import I32
from .walker import rule

I64 = ir.IntType(64)
F32 = ir.FloatType()
_OFFSET_MASK = (1 << 18) - 1  # a shared address's offset within the program's own shared memory

# operand kinds; only 16-bit operands take the transpose immediates (B N-major)
_KIND = {"f16": "f16.f16", "bf16": "bf16.bf16", "f32": "tf32.tf32", "f8e4m3": "e4m3.e4m3", "f8e5m2": "e5m2.e5m2"}


def _slot_shape(alloc, has_slot: bool):
    shape = list(alloc.attrs["shape"])
    return shape[1:] if has_slot else shape


def _desc_base(ctx, alloc, slot, warp_index, stride: int):
    """(shared byte address of the operand slot + warp_index * stride) >> 4, as i64 (a buffer
    without slots, rank 2, ignores `slot`)."""
    b = ctx.builder
    ptr = slot_pointer(ctx, alloc, slot if len(alloc.attrs["shape"]) == 3 else None, ir.IntType(8), 0)
    addr = b.ptrtoint(ptr, I32)
    addr = b.and_(addr, ir.Constant(I32, _OFFSET_MASK))
    if stride:
        addr = b.add(addr, b.mul(warp_index, ir.Constant(I32, stride)))
    return b.zext(b.lshr(addr, ir.Constant(I32, 4)), I64)


@rule(W.WgmmaOp)
def _wgmma(ctx, op):
    a_alloc, b_alloc = op.operands[0].owner, op.operands[1].owner
    slot = op.operands[3] if len(op.operands) > 3 else None
    c_t = op.operands[2].type
    lay = c_t.encoding
    m, n = c_t.shape
    a_shape, b_shape = (_slot_shape(x, slot is not None and len(x.attrs["shape"]) == 3) for x in (a_alloc, b_alloc))
    k = a_shape[1]
    elem = a_alloc.results[0].type.pointee
    eb = elem.itemsize
    wm, wn = lay.warps_per_cta
    instr_n = lay.instr_shape[1]
    bld = ctx.builder
    # this warp's warpgroup along M and column block along N
    wg_m = bld.lshr(bld.and_(ctx.warp, ir.Constant(I32, wm - 1)), ir.Constant(I32, 2))
    wg_n = bld.lshr(ctx.warp, ir.Constant(I32, wm.bit_length() - 1))
    kmaj = buffer_k_major(b_alloc.attrs["layout"], len(b_alloc.attrs["shape"]) == 3)   # B's transpose bit
    a_stride, b_stride = warpgroup_strides(lay, a_shape, b_shape, eb, kmaj)
    a_base = _desc_base(ctx, a_alloc, slot, wg_m, a_stride)
    b_base = _desc_base(ctx, b_alloc, slot, wg_n, b_stride)
    a_hi = descriptor_high_bits(0, a_shape, eb)
    b_hi = descriptor_high_bits(1, b_shape, eb, kmaj)

    acc = list(ctx.elems(op.operands[2]))
    per = instr_n // 2
    outs = ", ".join(f"${i}" for i in range(per))
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${per + 2}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{instr_n}k{k_step(eb)}.f32.{_KIND[elem.name]} "
            f"{{{outs}}}, ${per}, ${per + 1}, p, 1, 1{'' if eb != 2 else ', 0, 0' if kmaj else ', 0, 1'}; }}")
    cons = ",".join(["=f"] * per + ["l", "l", "r"] + [str(i) for i in range(per)])
    fty = ir.FunctionType(ir.LiteralStructType([F32] * per), [I64, I64, I32] + [F32] * per)
    one = ir.Constant(I32, 1)
    ctx.intrinsic("llvm.nvvm.wgmma.fence.sync.aligned", ir.VoidType(), [])
    for ins in wgmma_instructions(lay, m, n, k, eb, kmaj):
        da = bld.add(a_base, ir.Constant(I64, a_hi + (ins.a_offset >> 4)))
        db = bld.add(b_base, ir.Constant(I64, b_hi + (ins.b_offset >> 4)))
        d = bld.asm(fty, text, cons, [da, db, one] + [acc[r] for r in ins.regs], True)
        for i, r in enumerate(ins.regs):
            acc[r] = bld.extract_value(d, i)
    ctx.intrinsic("llvm.nvvm.wgmma.commit_group.sync.aligned", ir.VoidType(), [])
    ctx.set(op.result, acc)


@rule(W.WgmmaWaitOp)
def _wgmma_wait(ctx, op):
    acc = list(ctx.elems(op.operands[0]))
    cnt = len(acc)
    cons = ",".join(["=f"] * cnt + [str(i) for i in range(cnt)])
    fty = ir.FunctionType(ir.LiteralStructType([F32] * cnt), [F32] * cnt)
    d = ctx.builder.asm(fty, f"wgmma.wait_group.sync.aligned {op.attrs['pending']};", cons, acc, True)
    ctx.set(op.result, [ctx.builder.extract_value(d, i) for i in range(cnt)])


@rule(W.FenceProxyAsyncOp)
def _fence_proxy_async(ctx, op):
    ctx.intrinsic("llvm.nvvm.fence.proxy.async.shared_cta", ir.VoidType(), [])


from . import rules_tma  # noqa: E402,F401  (the TMA ring that feeds wgmma)
from . import rules_ws  # noqa: E402,F401  (warp-specialized rings)
