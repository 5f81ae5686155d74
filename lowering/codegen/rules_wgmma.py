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

A register A operand (16-bit) is packed two elements to a .b32 (the lower column in the
low half) from the registers `wgmma_fragments.wgmma_instructions` names: no data moves
between threads, and the f32 -> f16 casts before it pair up into cvt.rn.f16x2.f32.
"""
from __future__ import annotations

from llvmlite import ir

from tilec.ir import tile_ops as T

from ..gpu import wgmma_ops as W
from ..gpu.wgmma_fragments import (a_buffer_k_major, b_k_major, buffer_k_major, descriptor_high_bits, k_step,
                                   warpgroup_strides, wgmma_instructions)
from .rules_mma import pack_pair, slot_pointer
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


def _pinned(bld, v, ty, kind: str):
    """`v` through an empty volatile asm: written before whatever side effect follows."""
    return bld.asm(ir.FunctionType(ty, [ty]), "", f"={kind},0", [v], True)


def _zero_constant(v) -> bool:
    """`v` is a tile.constant of 0.0 (the zeros a dot accumulates from)."""
    owner = v.owner   # (-0.0 too: A·B + -0.0 is A·B)
    return isinstance(owner, T.ConstantOp) and isinstance(owner.attrs.get("value"), (int, float)) \
        and owner.attrs["value"] == 0


@rule(W.WgmmaOp)
def _wgmma(ctx, op):
    reg_a = W.a_in_registers(op)
    a, b_alloc = op.operands[0], op.operands[1].owner
    slot = op.operands[3] if len(op.operands) > 3 else None
    c_t = op.operands[2].type
    lay = c_t.encoding
    m, n = c_t.shape
    b_shape = _slot_shape(b_alloc, slot is not None and len(b_alloc.attrs["shape"]) == 3)
    a_shape = list(a.type.shape) if reg_a else _slot_shape(a.owner, slot is not None
                                                             and len(a.owner.attrs["shape"]) == 3)
    k = a_shape[1]
    elem = b_alloc.results[0].type.pointee
    eb = elem.itemsize
    wm, wn = lay.warps_per_cta
    instr_n = lay.instr_shape[1]
    bld = ctx.builder
    # this warp's warpgroup along M and column block along N
    warp = ctx.warp_uniform()
    wg_m = bld.lshr(bld.and_(warp, ir.Constant(I32, wm - 1)), ir.Constant(I32, 2))
    wg_n = bld.lshr(warp, ir.Constant(I32, wm.bit_length() - 1))
    kmaj = buffer_k_major(b_alloc.attrs["layout"], len(b_alloc.attrs["shape"]) == 3)   # B's transpose bit
    if op.attrs.get("b_trans", False):   # Bᵀ's (N, K) buffer in A's layout: B K-major, bytes alike
        b_shape, kmaj = b_shape[::-1], True
    # A's transpose bit: an M-major buffer (16-bit A of a column-major view) has M contiguous
    a_kmaj = reg_a or a_buffer_k_major(a.owner.attrs["layout"], len(a.owner.attrs["shape"]) == 3)
    a_stride, b_stride = warpgroup_strides(lay, a_shape, b_shape, eb, kmaj, a_kmaj)
    if not reg_a:
        a_base = _desc_base(ctx, a.owner, slot, wg_m, a_stride)
        a_hi = descriptor_high_bits(0, a_shape, eb, a_kmaj)
    b_base = _desc_base(ctx, b_alloc, slot, wg_n, b_stride)
    b_hi = descriptor_high_bits(1, b_shape, eb, kmaj)

    acc = list(ctx.elems(op.operands[2]))
    # A zero accumulator (S = Q Kᵀ of attention) is not materialized: each register's first
    # instruction runs with scale-d = 0 (D = A·B), its inputs left undefined, where 0.0 took
    # a mov per register and iteration.
    fresh = set(range(len(acc))) if _zero_constant(op.operands[2]) else set()
    per = instr_n // 2
    n_a = 4 if reg_a else 1  # A: four .b32 fragment registers, or one descriptor
    outs = ", ".join(f"${i}" for i in range(per))
    a_text = "{" + ", ".join(f"${per + i}" for i in range(4)) + "}" if reg_a else f"${per}"
    # immediates: scale-a, scale-b, then trans-a (descriptor A only) and trans-b (16-bit only:
    # 1 for an M-major A / N-major B buffer, 0 for a K-major one such as a loaded k.T)
    trans_a, trans_b = ("0" if kmaj_ else "1" for kmaj_ in (a_kmaj, kmaj))
    trans = "" if b_k_major(eb) else (f", {trans_b}" if reg_a else f", {trans_a}, {trans_b}")
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${per + n_a + 1}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{instr_n}k{k_step(eb)}.f32.{_KIND[elem.name]} "
            f"{{{outs}}}, {a_text}, ${per + n_a}, p, 1, 1{trans}; }}")
    cons = ",".join(["=f"] * per + ["r" if reg_a else "l"] * n_a + ["l", "r"] + [str(i) for i in range(per)])
    fty = ir.FunctionType(ir.LiteralStructType([F32] * per), [I32 if reg_a else I64] * n_a + [I64, I32] + [F32] * per)
    one = ir.Constant(I32, 1)
    instrs = wgmma_instructions(lay, m, n, k, eb, a.type.encoding if reg_a else None, kmaj, a_kmaj)
    if reg_a:
        # every register wgmma reads is written before wgmma.fence (PTX ISA: the fence must
        # separate a register's last write from the wgmma reading it): packed A and the
        # accumulator are pinned by empty volatile asm, which LLVM keeps before the fence
        a_vals = ctx.elems(a)
        a_words = [[_pinned(bld, pack_pair(ctx, a_vals[r[i]], a_vals[r[i + 1]]), I32, "r")
                    for i in range(0, 8, 2)] for r in (ins.a_regs for ins in instrs)]
        acc = [v if r in fresh else _pinned(bld, v, F32, "f") for r, v in enumerate(acc)]
    ctx.intrinsic("llvm.nvvm.wgmma.fence.sync.aligned", ir.VoidType(), [])
    for j, ins in enumerate(instrs):
        if reg_a:
            a_args = a_words[j]
        else:
            a_args = [bld.add(a_base, ir.Constant(I64, a_hi + (ins.a_offset >> 4)))]
        db = bld.add(b_base, ir.Constant(I64, b_hi + (ins.b_offset >> 4)))
        first = bool(fresh) and all(r in fresh for r in ins.regs)
        ins_acc = [ir.Constant(F32, ir.Undefined) if first else acc[r] for r in ins.regs]
        fresh.difference_update(ins.regs)
        d = bld.asm(fty, text, cons, a_args + [db, ir.Constant(I32, 0) if first else one] + ins_acc, True)
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
