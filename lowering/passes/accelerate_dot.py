"""accelerate_dot: tile.dot on tensor cores (mma.sync), after assign_layouts.

assign_layouts already gave a tensor-core dot's accumulator group the #mma
layout (`dot_acc_layout` below is the policy it asks), so the loop-carried
accumulator, the K loop and the epilogue all live in that layout with no
conversion, and each operand arrives as `gpu.convert_layout %x : #dot_op`.
This pass turns such a dot into

    gpu.barrier                          (the previous reads of the buffers are done)
    gpu.local_store %bufA, %xa           (into a swizzled buffer ldmatrix reads conflict-free)
    gpu.local_store %bufB, %xb
    gpu.barrier
    %a = gpu.ldmatrix %bufA : #dot_op{op_idx = 0}     (gpu.local_load for tf32)
    %b = gpu.ldmatrix %bufB : #dot_op{op_idx = 1}
    %d = gpu.mma %a, %b, %acc : #mma

with the buffers allocated once at the top of the kernel. pipeline_loads may
later replace the stores with multi-slot cp.async copies.

Tensor cores take f16/bf16 operands (m16n8k16) and f32 operands when the dot
allows tf32 (m16n8k8), always accumulating in f32, on tiles with M % 16, N % 8
and K % 16 (8 for tf32) zero; every other dot keeps the FMA lowering.
"""
from __future__ import annotations

from typing import Optional

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Op
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType

from ..gpu.layouts import DistributedLayout, DotOperandLayout, MmaLayout
from ..gpu.mma_fragments import operand_shared_layout
from ..gpu.mma_ops import LdMatrixOp, MmaOp
from ..gpu.ops import SHARED, AllocOp, BarrierOp, ConvertLayoutOp, LocalLoadOp, LocalStoreOp

__all__ = ["accelerate_dot", "dot_acc_layout", "dot_operand_layout", "uses_tensor_cores", "mma_warps"]


def uses_tensor_cores(op: T.DotOp, arch: Optional[str] = None) -> bool:
    """Whether `op` lowers to mma.sync (every supported arch, sm_80 and later, has it)."""
    a, b, c = (v.type for v in op.operands)
    if c.dtype is not dt.float32:
        return False
    if a.dtype in (dt.float16, dt.bfloat16):
        k_step = 16
    elif a.dtype is dt.float32 and op.attrs.get("allow_tf32", False):
        k_step = 8
    else:
        return False
    m, n = c.shape
    return m % 16 == 0 and n % 8 == 0 and a.shape[1] % k_step == 0


def mma_warps(m: int, n: int, num_warps: int):
    """warps_per_cta [along M, along N]: each doubling goes to the dimension that has more
    instruction tiles (16 rows, 8 columns) per warp left, so warps tile C as squarely as
    the tile allows; warps past the tile's extent hold copies."""
    wm = wn = 1
    while wm * wn < num_warps:
        tiles_m, tiles_n = m // (16 * wm), n // (8 * wn)
        if tiles_m > 1 and tiles_m * 2 >= tiles_n:
            wm *= 2
        elif tiles_n > 1:
            wn *= 2
        else:
            wm *= 2
    return wm, wn


def dot_acc_layout(op: T.DotOp, num_warps: int, arch: Optional[str] = None) -> Optional[MmaLayout]:
    """The #mma accumulator layout of a tensor-core dot, None for an FMA dot."""
    if not uses_tensor_cores(op, arch):
        return None
    m, n = op.operands[2].type.shape
    return MmaLayout(2, mma_warps(m, n, num_warps), (16, 8))


def dot_operand_layout(acc: MmaLayout, op_idx: int, dtype: dt.DType) -> DotOperandLayout:
    return DotOperandLayout(op_idx, acc, 2 if dtype.bits == 16 else 1)


def _entry_builder(func: Op) -> Builder:
    return Builder(func.regions[0].block, 0)


def _staged(op: T.DotOp, idx: int) -> bool:
    """Operand `idx` arrives through a layout conversion (else it is already in place)."""
    cv = op.operands[idx].owner
    return isinstance(cv, ConvertLayoutOp) and isinstance(cv.operands[0].type.encoding, DistributedLayout)


def _operand_buffer(op: T.DotOp, idx: int, head: Builder) -> Op:
    """A swizzled shared buffer for operand `idx`, allocated at the top of the kernel."""
    want = op.operands[idx].type
    elem = want.dtype
    return head.create(AllocOp, shape=list(want.shape),
                       layout=operand_shared_layout(want.shape, elem.itemsize, (1, 0)),
                       result_types=[PointerType(elem, SHARED)], loc=op.loc)


def _accelerate(op: T.DotOp) -> None:
    func = op
    while func.parent_op() is not None:
        func = func.parent_op()
    staged = [idx for idx in (0, 1) if _staged(op, idx)]
    head = _entry_builder(func)
    bufs = {idx: _operand_buffer(op, idx, head).result for idx in staged}
    at = Builder().before(op)  # after the allocations, which may sit in the same block
    at.loc = op.loc
    dead = []
    if staged:
        at.create(BarrierOp)  # the previous reads of the buffers (an earlier iteration) are done
        for idx in staged:
            at.create(LocalStoreOp, bufs[idx], op.operands[idx].owner.operands[0])
        at.create(BarrierOp)
    for idx in staged:
        cv = op.operands[idx].owner
        want = op.operands[idx].type
        read = LdMatrixOp if want.dtype.bits == 16 else LocalLoadOp
        op.set_operand(idx, at.value(read, bufs[idx], result_types=[want]))
        if not cv.results[0].uses:
            dead.append(cv)
    a, b, acc = op.operands
    mma = at.create(MmaOp, a, b, acc, result_types=[op.results[0].type])
    mma.result.name_hint = op.results[0].name_hint
    op.results[0].replace_all_uses_with(mma.result)
    op.erase()
    for cv in dead:  # erased last: erasing shifts the insertion point of `at`
        cv.erase()


def accelerate_dot(module: Module, arch: Optional[str] = None, **_options) -> Module:
    for op in list(module.walk()):
        if isinstance(op, T.DotOp) and isinstance(op.results[0].type.encoding, MmaLayout):
            _accelerate(op)
    return module
