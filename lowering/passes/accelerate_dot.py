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

mma.sync has no f8 form before sm_89 and tilec does not use the sm_89 one: an f8
(e4m3, e5m2) dot that wgmma does not take runs as an f16 one. Its operands are staged
and read back as f8 (half the shared memory), in the #dot_op layout of the f16
instruction (k_width 2), and widened there, exactly (every f8 value is an f16 value):

    %a8 = gpu.local_load %bufA : tile<..xf8e4m3, #dot_op{op_idx = 0, k_width = 2}>
    %a = tile.cast %a8 {to = f16}
    ...
    %d = gpu.mma %a, %b, %acc : #mma

On sm_90a a f16/bf16, tf32 or f8 (e4m3, e5m2) dot whose tile fits warpgroups
(`wgmma_fragments.wgmma_shape`) gets an #mma version 3 accumulator instead and becomes

    gpu.barrier
    gpu.local_store %bufA, %xa           (128-byte swizzle, the layout wgmma's descriptors name)
    gpu.local_store %bufB, %xb
    gpu.fence_proxy_async                (the stores are generic-proxy writes; wgmma reads async)
    gpu.barrier
    %d = gpu.wgmma %bufA, %bufB, %acc
    %e = gpu.wgmma_wait %d {pending = 0}

the operands keeping the layouts they were loaded in (no #dot_op: wgmma reads shared
memory; tf32 and f8 store B transposed, K contiguous, the only form wgmma takes for them).
An A computed in registers whose layout is #dot_op of the accumulator up to a renumbering
of registers (a chained dot's P, from an earlier wgmma over the same warps; 16-bit) is
not stored: `%a = gpu.convert_layout %p : #dot_op{op_idx = 0, ...}` (no code) becomes
gpu.wgmma's A, read from registers (`_register_a`). On mma.sync such an operand (P over
warps that assign_layouts put along M for chained dots) is used where it is, the same
renumbering spelling its #dot_op layout.
Off sm_90a, or on tiles wgmma does not take, f8 dots take the f16 mma.sync route above
(or the FMA lowering where mma.sync does not fit either). pipeline_loads turns the stores
into a cp.async ring and, where the ring has room, lets one wgmma group stay in flight
across iterations.
"""
from __future__ import annotations

from typing import Optional

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Op, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, ScalarType, TileType, with_element

from ..gpu.layouts import DistributedLayout, DotOperandLayout, MmaLayout, registers_match
from ..gpu.mma_fragments import operand_shared_layout
from ..gpu.mma_ops import LdMatrixOp, MmaOp
from ..gpu.ops import SHARED, AllocOp, BarrierOp, ConvertLayoutOp, LocalLoadOp, LocalStoreOp
from ..gpu.wgmma_fragments import (min_instr_n, operand_layout as wgmma_operand_layout, register_a_layout, wgmma_plan,
                                   wgmma_shape)
from ..gpu.wgmma_ops import FenceProxyAsyncOp, WgmmaOp, WgmmaWaitOp
from .rewrite import invariant_loop

__all__ = ["accelerate_dot", "dot_acc_layout", "b_runs_along_k", "dot_operand_layout", "mma_dtype", "uses_tensor_cores",
           "mma_warps", "tensor_core_refusal"]

_F8 = (dt.float8e4m3, dt.float8e5m2)


def mma_dtype(dtype: dt.DType) -> dt.DType:
    """The operand dtype mma.sync multiplies for `dtype` operands (f8 is widened to f16)."""
    return dt.float16 if dtype in _F8 else dtype


def uses_tensor_cores(op: T.DotOp, wgmma: bool) -> bool:
    """Whether `op` runs on tensor cores: wgmma where the target has it (`wgmma`) and the
    tile allows (`dot_acc_layout`), else mma.sync (every supported arch, sm_80 and later,
    has it; f8 operands widened to f16)."""
    return not tensor_core_refusal(op)


def tensor_core_refusal(op: T.DotOp) -> str:
    """Why `op` cannot run on tensor cores ("" when it can): the compiler's remark for an FMA dot."""
    a, b, c = (v.type for v in op.operands)
    if c.dtype is not dt.float32:
        return f"tensor cores accumulate in f32, this accumulator is {c.dtype.name if c.dtype else c.element}"
    if mma_dtype(a.dtype) in (dt.float16, dt.bfloat16):
        k_step = 16
    elif a.dtype is dt.float32 and op.attrs.get("allow_tf32", False):
        k_step = 8
    elif a.dtype is dt.float32:
        return "f32 operands use tensor cores only with tc.dot(..., allow_tf32=True)"
    else:
        return f"tensor cores take f16, bf16, f8 or (allow_tf32) f32 operands, not {a.dtype.name}"
    m, n = c.shape
    if m % 16 or n % 8 or a.shape[1] % k_step:
        return f"mma.sync needs M a multiple of 16, N of 8 and K of {k_step}, got {m}x{n}x{a.shape[1]}"
    return ""


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


def b_runs_along_k(op: T.DotOp) -> bool:
    """Whether the dot's 16-bit B comes from a load whose contiguous dimension (axis_info's
    `_contig_dim`) is B's K: `x @ w.T` of a row-major w, whether canonicalize folded the
    transpose into the load (`order`) or a tile.permute [1, 0] remains (a tile loaded once
    for `q @ k.T` and `p @ k`), up to layout conversions. accelerate_dot stores such a B
    K-major, and wgmma then takes N below 64 per warp column (`wgmma_fragments.min_instr_n`).
    False before axis_info (no `_contig_dim` yet: tma_loads and tma_stores get the N-major
    answer, which never says wgmma where assign_layouts would not)."""
    b = op.operands[1]
    if b.type.dtype.bits != 16:
        return False
    flipped = False
    for _ in range(8):
        owner = b.owner
        if isinstance(owner, ConvertLayoutOp):
            b = owner.operands[0]
        elif isinstance(owner, T.PermuteOp) and list(owner.attrs["order"]) == [1, 0]:
            b, flipped = owner.operands[0], not flipped
        elif isinstance(owner, (T.LoadOp, T.LoadMaskedOp)) and b.type.rank == 2 and "_contig_dim" in owner.attrs:
            return owner.attrs["_contig_dim"] == (1 if flipped else 0)
        else:
            return False
    return False


def dot_acc_layout(op: T.DotOp, num_warps: int, wgmma: bool, chained: bool = False) -> Optional[MmaLayout]:
    """The #mma accumulator layout of a tensor-core dot (version 3, wgmma, where the target
    has it (`wgmma`) and the tile allows it, N below 64 per warp column only for a B that
    runs along K (`b_runs_along_k`); else version 2, mma.sync), None for an FMA dot.

    `chained`: the accumulator feeds, or the A operand comes from, another dot's A in
    registers (attention's P). mma.sync then puts every warp along M where the rows allow:
    a warp holds whole rows of both accumulators, so the C fragments of one are the A
    fragments of the next (NVPTX-NOTES) and the row statistics stay within a quad. wgmma
    already stacks warpgroups along M first."""
    if not uses_tensor_cores(op, wgmma):
        return None
    m, n = op.operands[2].type.shape
    a = op.operands[0].type
    if wgmma:
        shape = wgmma_shape(m, n, a.shape[1], a.dtype.itemsize, num_warps, _b_order(op))
        if shape is not None:
            return MmaLayout(3, shape[:2], (16, shape[2]))
    rows = chained and m % (16 * num_warps) == 0
    return MmaLayout(2, (num_warps, 1) if rows else mma_warps(m, n, num_warps), (16, 8))


def _b_order(op: T.DotOp) -> Optional[bool]:
    """B's buffer order as dot_acc_layout plans it: True (K-major) for a B that runs along K,
    None (the dtype's default) otherwise."""
    return True if b_runs_along_k(op) else None


def dot_operand_layout(acc: MmaLayout, op_idx: int, dtype: dt.DType) -> Optional[DotOperandLayout]:
    """The register layout an operand needs; None for wgmma, which reads both from shared memory.
    An f8 operand takes the layout of the f16 it is widened to."""
    if acc.version == 3:
        return None
    return DotOperandLayout(op_idx, acc, 2 if mma_dtype(dtype).bits == 16 else 1)


def _entry_builder(func: Op) -> Builder:
    return Builder(func.regions[0].block, 0)


def _staged(op: T.DotOp, idx: int) -> bool:
    """Operand `idx` arrives through a layout conversion that moves data between threads
    (else it is in place, up to a renumbering of registers)."""
    cv = op.operands[idx].owner
    return isinstance(cv, ConvertLayoutOp) and isinstance(cv.operands[0].type.encoding, DistributedLayout) \
        and not registers_match(cv.operands[0].type.encoding, cv.results[0].type.encoding, cv.results[0].type.shape)


def _register_run_dim(v, run_bytes: int = 16) -> Optional[int]:
    """The dimension along which each thread holds `run_bytes` runs of the tile `v` (its first
    register bases), None if it holds none: a buffer contiguous along it takes whole-vector
    stores (and cp.async copies) of what was loaded that way, e.g. `k.T` of a loaded K tile."""
    t = v.type
    enc = getattr(t, "encoding", None)
    if not isinstance(enc, DistributedLayout) or t.rank != 2:
        return None
    reg = enc.bases(tuple(t.shape)).reg
    run = run_bytes // t.dtype.itemsize
    for d in (0, 1):
        unit = [tuple((1 << i) if e == d else 0 for e in (0, 1)) for i in range(run.bit_length() - 1)]
        if list(reg[:len(unit)]) == unit:
            return d
    return None


def _operand_buffer(op: T.DotOp, idx: int, head: Builder) -> Op:
    """A swizzled shared buffer for operand `idx`, allocated at the top of the kernel: rows
    contiguous unless the stored tile runs along dimension 0 (ldmatrix.trans reads either)."""
    want = op.operands[idx].type
    elem = want.dtype
    order = (0, 1) if _register_run_dim(op.operands[idx].owner.operands[0]) == 0 else (1, 0)
    return head.create(AllocOp, shape=list(want.shape),
                       layout=operand_shared_layout(want.shape, elem.itemsize, order),
                       result_types=[PointerType(elem, SHARED)], loc=op.loc)


def _store_before(loop: Op, buf, v, fence: bool) -> None:
    """`v` into `buf` once before `loop` (q of attention): no later write, so one barrier."""
    b = Builder().before(loop)
    b.loc = loop.loc
    b.create(LocalStoreOp, buf, v)
    if fence:
        b.create(FenceProxyAsyncOp)
    b.create(BarrierOp)


def _accelerate(op: T.DotOp, why_not_wgmma: str, remarks) -> None:
    func = op
    while func.parent_op() is not None:
        func = func.parent_op()
    staged = [idx for idx in (0, 1) if _staged(op, idx)]
    if remarks is not None:
        a = op.operands[0].type.dtype
        instr = "m16n8k8 (tf32)" if a is dt.float32 else "m16n8k16" + (" (f8 widened to f16)" if a in _F8 else "")
        src = "A in registers" if 0 not in staged else "A and B through shared memory (ldmatrix)"
        remarks.add("dot", f"{_dot_text(op)} lowered to mma.sync {instr}, {src}"
                           + (f"; not wgmma: {why_not_wgmma}" if why_not_wgmma else ""), op.loc)
    head = _entry_builder(func)
    bufs = {idx: _operand_buffer(op, idx, head).result for idx in staged}
    at = Builder().before(op)  # after the allocations, which may sit in the same block
    at.loc = op.loc
    dead = []
    hoisted = {idx: invariant_loop(op, op.operands[idx].owner.operands[0]) for idx in staged}
    for idx, loop in hoisted.items():
        if loop is not None:
            _store_before(loop, bufs[idx], op.operands[idx].owner.operands[0], fence=False)
    if any(loop is None for loop in hoisted.values()):
        at.create(BarrierOp)  # the previous reads of the buffers (an earlier iteration) are done
        for idx in staged:
            if hoisted[idx] is None:
                at.create(LocalStoreOp, bufs[idx], op.operands[idx].owner.operands[0])
        at.create(BarrierOp)
    for idx in staged:
        cv = op.operands[idx].owner
        want = op.operands[idx].type
        read = LdMatrixOp if want.dtype.bits == 16 else LocalLoadOp
        op.set_operand(idx, at.value(read, bufs[idx], result_types=[want]))
        if not cv.results[0].uses:
            dead.append(cv)
    acc = op.results[0].type.encoding
    for idx in (0, 1):  # in registers already (a chained dot's P): spell its layout #dot_op, no code
        v = op.operands[idx]
        want = dot_operand_layout(acc, idx, v.type.dtype)
        if idx not in staged and v.type.encoding != want:
            op.set_operand(idx, at.value(ConvertLayoutOp, v, result_types=[TileType(v.type.shape, v.type.element,
                                                                                     want)]))
    for idx in (0, 1):  # f8 operands, staged or not, are widened in their #dot_op layout
        v = op.operands[idx]
        if mma_dtype(v.type.dtype) is not v.type.dtype:
            op.set_operand(idx, at.value(T.CastOp, v, to=dt.float16,
                                         result_types=[with_element(v.type, ScalarType(dt.float16))]))
    a, b, acc = op.operands
    mma = at.create(MmaOp, a, b, acc, result_types=[op.results[0].type])
    mma.result.name_hint = op.results[0].name_hint
    op.results[0].replace_all_uses_with(mma.result)
    op.erase()
    for cv in dead:  # erased last: erasing shifts the insertion point of `at`
        cv.erase()


def _func_of(op: Op) -> Op:
    while op.parent_op() is not None:
        op = op.parent_op()
    return op


_LAYOUT_ONLY = (ConvertLayoutOp, T.ReshapeOp, T.PermuteOp)


def _loaded(v: Value) -> bool:
    """`v` is a loaded tile, up to layout changes (its way into wgmma is shared memory)."""
    op = v.owner
    while isinstance(op, _LAYOUT_ONLY):
        op = op.operands[0].owner
    return isinstance(op, (T.LoadOp, T.LoadMaskedOp))


def _register_a(op: T.DotOp, a: Value) -> Optional[DotOperandLayout]:
    """The #dot_op layout in which wgmma takes `a`, the dot's A operand, from registers, or
    None: A was computed in registers (not loaded: a loaded tile is stored to shared memory
    anyway) in a layout whose conversion to #dot_op is a register renumbering (the
    accumulator of an earlier wgmma over the same warps: the P of attention). Elsewhere
    (other warps, f8, tf32) it goes through shared memory as a loaded A does."""
    want = register_a_layout(op.results[0].type.encoding, a.type.dtype.bits)
    if want is None or _loaded(a) or not registers_match(a.type.encoding, want, a.type.shape):
        return None
    return want


def _transpose_source(b: Value) -> Optional[Value]:
    """y where the B operand `b` is y.T (a 2-D permute, through a layout conversion) of a
    16-bit tile whose registers run along its rows' contiguous dimension: B is then read from
    y stored in A's layout (gpu.wgmma b_trans, the bytes of a K-major B) with no register
    transpose, and a dot(.., y) of the same y shares that buffer (share_staged_operands).
    A y that runs along dimension 0 keeps the K-major store of y.T as it is (k_major)."""
    op = b.owner
    if not isinstance(op, T.PermuteOp) or list(op.attrs["order"]) != [1, 0] or b.type.dtype.bits != 16:
        return None
    y = op.operands[0]
    cv = y.owner
    if isinstance(cv, ConvertLayoutOp) and isinstance(cv.operands[0].type.encoding, DistributedLayout):
        y = cv.operands[0]
    return y if _register_run_dim(y) == 1 else None


def _a_k_major(a: Value) -> Optional[bool]:
    """False (an M-major buffer, wgmma's imm-trans-a) for a 16-bit A tile loaded straight from
    memory with 16-byte runs along M (a column-major view, e.g. x.T of a row-major x): cp.async
    or TMA then copy it as it lies; and for one computed in registers whose pairs of registers
    run along M (`p.T` of a dot's accumulator P, assign_layouts' permute of its layout): stored
    4 bytes at a time along M. None (K-major) otherwise."""
    if a.type.dtype.bits != 16:
        return None
    if isinstance(a.owner, (T.LoadOp, T.LoadMaskedOp)):
        return False if _register_run_dim(a) == 0 else None
    return False if _register_run_dim(a, 2 * a.type.dtype.itemsize) == 0 else None


def _dot_text(op: T.DotOp) -> str:
    a, c = op.operands[0].type, op.results[0].type
    return f"tc.dot {c.shape[0]}x{c.shape[1]}x{a.shape[1]} {a.dtype.name}"


def _accelerate_wgmma(op: T.DotOp, remarks=None) -> None:
    head = _entry_builder(_func_of(op))
    srcs, dead = [], []
    for idx in (0, 1):
        v = op.operands[idx]
        cv = v.owner
        if isinstance(cv, ConvertLayoutOp) and isinstance(cv.operands[0].type.encoding, DistributedLayout):
            dead.append(cv)
            v = cv.operands[0]
        srcs.append(v)
    a_lay = _register_a(op, srcs[0])
    staged = [1] if a_lay is not None else [0, 1]
    y = _transpose_source(srcs[1])
    if y is not None:   # B = y.T: y's own buffer, which a dot(.., y) of the same y shares
        dead.append(srcs[1].owner)
        if y is not srcs[1].owner.operands[0]:
            dead.append(srcs[1].owner.operands[0].owner)
        srcs[1] = y
    a_major = _a_k_major(srcs[0]) if a_lay is None else None
    if remarks is not None:
        acc = op.results[0].type.encoding
        size = srcs[1].type.dtype.itemsize
        a_from = "registers" if a_lay is not None else "shared memory" + (" (M-major)" if a_major is False else "")
        remarks.add("dot", f"{_dot_text(op)} lowered to wgmma m64n{acc.instr_shape[1]}k{32 // size} ("
                           f"{acc.warps_per_cta[0]} warps along M, {acc.warps_per_cta[1]} along N), A from "
                           f"{a_from}, B from shared memory", op.loc)
    # a 16-bit B that arrives K-contiguous (k.T of a loaded tile) is stored K-major as it is,
    # and so is one whose warp columns take N below 64 (only a K-major B allows that:
    # dot_acc_layout gave it to a B that runs along K, whatever width its loads got);
    # a 16-bit A loaded M-contiguous (a column-major view) M-major (`_a_k_major`)
    narrow = op.results[0].type.encoding.instr_shape[1] < min_instr_n(srcs[1].type.dtype.itemsize)
    k_major = True if srcs[1].type.dtype.bits == 16 and (_register_run_dim(srcs[1]) == 0 or narrow) else None
    majors = {0: a_major, 1: k_major}
    bufs = {idx: head.create(AllocOp, shape=list(srcs[idx].type.shape),
                             layout=wgmma_operand_layout(srcs[idx].type.dtype.itemsize, 0 if y is not None else idx,
                                                         majors[idx]),
                             result_types=[PointerType(srcs[idx].type.dtype, SHARED)], loc=op.loc).result
            for idx in staged}
    at = Builder().before(op)  # after the allocations, which may sit in the same block
    at.loc = op.loc
    loops = {idx: invariant_loop(op, srcs[idx]) for idx in staged}
    for idx in staged:
        if loops[idx] is not None:
            _store_before(loops[idx], bufs[idx], srcs[idx], fence=True)
    if any(loops[idx] is None for idx in staged):
        at.create(BarrierOp)  # every warp's earlier wgmma (retired by its wait) is done with the buffers
        for idx in staged:
            if loops[idx] is None:
                at.create(LocalStoreOp, bufs[idx], srcs[idx])
        at.create(FenceProxyAsyncOp)
        at.create(BarrierOp)
    a = bufs.get(0)
    if a is None:  # a renumbering of registers (no code): the fragments wgmma reads
        a = at.value(ConvertLayoutOp, srcs[0], result_types=[TileType(srcs[0].type.shape, srcs[0].type.element, a_lay)])
    d = at.value(WgmmaOp, a, bufs[1], op.operands[2], result_types=[op.results[0].type],
                 **({"b_trans": True} if y is not None else {}))
    done = at.create(WgmmaWaitOp, d, pending=0, result_types=[op.results[0].type])
    done.result.name_hint = op.results[0].name_hint
    op.results[0].replace_all_uses_with(done.result)
    op.erase()
    for cv in dead:
        if not cv.results[0].uses:
            cv.erase()


def accelerate_dot(module: Module, *, wgmma: bool, num_warps: int, remarks) -> Module:
    """Tensor-core dots (those assign_layouts gave an #mma accumulator) to wgmma or mma.sync.
    `remarks` (tilec.remarks.Remarks, or None: none recorded) gets, per tc.dot, the instruction
    it became and, on a target with wgmma (`wgmma`, dots over `num_warps` warps), why not that one."""
    for op in list(module.walk()):
        if not isinstance(op, T.DotOp):
            continue
        enc = op.results[0].type.encoding
        if isinstance(enc, MmaLayout) and enc.version == 3:
            _accelerate_wgmma(op, remarks)
        elif isinstance(enc, MmaLayout):
            _accelerate(op, _why_not_wgmma(op, num_warps) if wgmma else "", remarks)
        elif remarks is not None:
            remarks.add("dot", f"{_dot_text(op)} lowered to FMA on CUDA cores (no tensor cores): "
                               f"{tensor_core_refusal(op) or 'its accumulator layout is not #mma'}", op.loc)
    return module


def _why_not_wgmma(op: T.DotOp, num_warps: int) -> str:
    """wgmma_plan's reason for the tile of `op`, the condition dot_acc_layout tested; for a
    tile wgmma takes, assign_layouts' reason (its accumulator is one value with another
    dot's, whose tile wgmma does not take)."""
    m, n = op.operands[2].type.shape
    a = op.operands[0].type
    return (wgmma_plan(m, n, a.shape[1], a.dtype.itemsize, num_warps, _b_order(op))[1]
            or "its accumulator shares one layout with another dot's, whose tile wgmma does not take")
