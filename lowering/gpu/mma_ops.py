"""gpu ops of the tensor-core path: ldmatrix, mma.sync and the cp.async copies that feed them.

    %buf = gpu.alloc {shape = [3, 64, 32], layout = #shared{...}} : ptr<f16, 3>   (3 slots of 64x32)
    gpu.async_copy %buf, %slot, %ptrs, %mask          (cp.async, 16 bytes a thread, zero-fill off mask)
    gpu.async_commit                                  (close the group of copies issued so far)
    gpu.async_wait {pending = 1}                      (wait until at most 1 group is in flight)
    %a = gpu.ldmatrix %buf, %slot : tile<64x32xf16, #dot_op{op_idx = 0, ...}>
    %d = gpu.mma %a, %b, %acc : tile<64x64xf32, #mma{version = 2, ...}>

A buffer read or written through a slot has one more leading dimension than the
tile: the slots. Without a slot operand the buffer has the tile's shape.
"""
from __future__ import annotations

from tilec import dtypes as dt
from tilec.ir.core import AttrSpec as A, Op, register_op
from tilec.ir.types import PointerType, ScalarType, TileType

from .layouts import DotOperandLayout, MmaLayout, SharedLayout
from .ops import AllocOp

__all__ = ["LdMatrixOp", "MmaOp", "AsyncCopyOp", "AsyncCommitOp", "AsyncWaitOp", "MMA_OPERAND_DTYPES",
           "slot_shape"]

# Operand element types mma.sync multiplies, per accumulator (f32 accumulation only).
MMA_OPERAND_DTYPES = ("f16", "bf16", "f32")


def _buffer(op: Op) -> AllocOp:
    owner = op.operands[0].owner
    if not isinstance(owner, AllocOp):
        raise op.error("the buffer operand must be the result of gpu.alloc")
    return owner


def slot_shape(op: Op, has_slot: bool):
    """The tile shape one slot of `op`'s buffer holds (the whole buffer without slots)."""
    shape = list(_buffer(op).attrs["shape"])
    return shape[1:] if has_slot else shape


def _check_slot(op: Op, slot_index: int) -> bool:
    has_slot = len(op.operands) > slot_index and op.operands[slot_index] is not None
    if has_slot:
        t = op.operands[slot_index].type
        if not isinstance(t, ScalarType) or t.dtype is not dt.int32:
            raise op.error(f"the slot index must be an i32 scalar, got {t}")
    return has_slot


@register_op
class LdMatrixOp(Op):
    """Read an mma operand from shared memory with ldmatrix (8x8 matrices of 16-bit elements;
    the transposing form when the operand's K dimension is not the buffer's contiguous one)."""
    name = "gpu.ldmatrix"
    operands_spec = ("buffer", "slot?")
    traits = frozenset({"reads"})

    def verify_op(self):
        alloc = _buffer(self)
        has_slot = _check_slot(self, 1)
        t = self.results[0].type
        lay = alloc.attrs["layout"]
        if not isinstance(t, TileType) or not isinstance(t.encoding, DotOperandLayout):
            raise self.error(f"result must be a tile in a #dot_op layout, got {t}")
        if t.encoding.parent.version != 2 or t.encoding.k_width != 2 or t.dtype.bits != 16:
            raise self.error("ldmatrix reads 16-bit operands of mma.sync (k_width 2)")
        if list(t.shape) != slot_shape(self, has_slot) or t.dtype is not alloc.results[0].type.pointee:
            raise self.error(f"cannot read {t} from a buffer of {alloc.attrs['shape']} "
                             f"{alloc.results[0].type.pointee}")
        if lay.rank != len(alloc.attrs["shape"]) or (lay.vec * 2) % 16:
            raise self.error(f"ldmatrix needs 16-byte swizzle chunks, the buffer has {lay}")


@register_op
class MmaOp(Op):
    """acc + a @ b on tensor cores with mma.sync: a and b in #dot_op layouts of the
    accumulator's #mma layout."""
    name = "gpu.mma"
    operands_spec = ("a", "b", "acc")
    traits = frozenset({"pure"})

    def infer_types(self):
        return [self.operands[2].type]

    def verify_op(self):
        a, b, c = (v.type for v in self.operands)
        if not isinstance(c, TileType) or not isinstance(c.encoding, MmaLayout) or c.encoding.version != 2:
            raise self.error(f"accumulator must be a tile in an #mma version 2 layout, got {c}")
        for idx, t in ((0, a), (1, b)):
            lay = t.encoding if isinstance(t, TileType) else None
            if not isinstance(lay, DotOperandLayout) or lay.op_idx != idx or lay.parent != c.encoding:
                raise self.error(f"operand {'ab'[idx]} must be in #dot_op{{op_idx = {idx}}} of {c.encoding}")
        if a.shape[1] != b.shape[0] or c.shape != (a.shape[0], b.shape[1]):
            raise self.error(f"shapes do not match: {a} @ {b} + {c}")
        if a.dtype is not b.dtype or a.dtype.name not in MMA_OPERAND_DTYPES or c.dtype is not dt.float32:
            raise self.error(f"mma.sync multiplies f16, bf16 or tf32 into f32, got {a.dtype} into {c.dtype}")
        kw = 2 if a.dtype.bits == 16 else 1
        if a.encoding.k_width != kw or b.encoding.k_width != kw:
            raise self.error(f"{a.dtype} operands have k_width {kw}")
        k_step = 8 * kw
        m, n = c.shape
        if m % 16 or n % 8 or a.shape[1] % k_step:
            raise self.error(f"mma.sync needs M % 16, N % 8 and K % {k_step} to be 0, got {m}x{n}x{a.shape[1]}")


@register_op
class AsyncCopyOp(Op):
    """cp.async: copy the global elements at `ptrs` into the buffer (slot `slot`) where `mask`
    holds and write zeros elsewhere, without waiting; `vec` elements (up to 16 bytes) move
    at once, under one mask bit each group, or, `prefix`, under a mask that is a prefix of
    every group (the copy reads that many elements and fills zeros after them). The copy
    lands when a later gpu.async_wait retires its group."""
    name = "gpu.async_copy"
    operands_spec = ("buffer", "slot", "ptrs", "mask?")
    attributes = {"vec": A("int", True, 1), "prefix": A("bool", True)}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        alloc = _buffer(self)
        _check_slot(self, 1)
        p = self.operands[2].type
        if not isinstance(p, TileType) or not isinstance(p.element, PointerType) or p.element.addrspace != 1:
            raise self.error(f"ptrs must be a tile of global pointers, got {p}")
        if list(p.shape) != slot_shape(self, True):
            raise self.error(f"a slot of the buffer holds {slot_shape(self, True)}, the copy is {list(p.shape)}")
        if p.element.pointee is not alloc.results[0].type.pointee:
            raise self.error("the copy and the buffer must have one element type")
        if len(self.operands) > 3:
            m = self.operands[3].type
            if not isinstance(m, TileType) or m.shape != p.shape or m.dtype is not dt.bool_:
                raise self.error(f"mask must be an i1 tile of shape {list(p.shape)}")
        nbytes = self.attrs["vec"] * p.element.pointee.itemsize
        if nbytes not in (4, 8, 16) and self.attrs["vec"] != 1:
            raise self.error(f"cp.async moves 4, 8 or 16 bytes, not {nbytes}")


@register_op
class AsyncCommitOp(Op):
    """Close the group of this thread's cp.async copies issued since the last commit."""
    name = "gpu.async_commit"
    num_results = 0
    traits = frozenset({"writes"})


@register_op
class AsyncWaitOp(Op):
    """Wait until at most `pending` of this thread's committed cp.async groups are in flight."""
    name = "gpu.async_wait"
    attributes = {"pending": A("int")}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        if not 0 <= self.attrs["pending"] <= 8:
            raise self.error("pending must be from 0 to 8")


def slot_layout(layout: SharedLayout) -> SharedLayout:
    """The layout of one slot of a buffer whose leading (slowest) dimension is the slot."""
    order = tuple(d - 1 for d in layout.order if d != 0)
    return SharedLayout(layout.vec, layout.per_phase, layout.max_phase, order, layout.swizzle_bytes)


def operand_smem_ok(layout: SharedLayout, elem_bytes: int) -> bool:
    """A shared layout ldmatrix can read: swizzle chunks of at least 16 bytes."""
    return (layout.vec * elem_bytes) % 16 == 0


__all__ += ["operand_smem_ok", "slot_layout"]
