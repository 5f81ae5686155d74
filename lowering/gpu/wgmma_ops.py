"""gpu ops of the sm_90a tensor-core path: wgmma.mma_async and its fences.

    gpu.fence_proxy_async                                 (generic-proxy smem writes -> async proxy)
    %d = gpu.wgmma %bufA, %bufB, %acc[, %slot] : tile<128x256xf32, #mma{version = 3, ...}>
    %d = gpu.wgmma %a, %bufB, %acc[, %slot] : ...       (A a register tile: `wgmma ... {a0..a3}, b-desc`)
    %d = gpu.wgmma %bufA, %bufT, %acc {b_trans = true}   (16-bit B read from Bᵀ's buffer: see below)
    %e = gpu.wgmma_wait %d {pending = 1}                  (at most 1 wgmma group of this thread in flight)

gpu.wgmma reads B, and A unless A is a register tile, from shared memory (buffers of
gpu.alloc in the layout `wgmma_fragments.operand_layout`, slot `%slot` of each multi-slot
(rank-3) buffer; a rank-2 buffer, such as a loop-invariant operand stored once, has no
slots). A register A (16-bit) is in a layout whose lanes and warps are those of
`wgmma_fragments.register_a_layout` (its registers may be numbered otherwise: the
codegen finds each fragment by its offset). With `b_trans` the B buffer holds Bᵀ, an
(N x K) tile in A's layout (K contiguous): the bytes of a K-major B, so one buffer of a
loaded tile x serves both `dot(.., x)` (N-major) and `dot(.., x.T)` (attention's backward
reads Q and dO both ways). gpu.wgmma issues
`wgmma.fence`, the instructions and `wgmma.commit_group`; its result is the
accumulator as the hardware will have written it. gpu.wgmma_wait is where the
registers become readable: every use of the accumulator other than the next
gpu.wgmma must come after a wait that retired its group.
"""
from __future__ import annotations

from tilec import dtypes as dt
from tilec.ir.core import AttrSpec as A, Op, register_op
from tilec.ir.types import ScalarType, TileType

from .layouts import MmaLayout, registers_match
from .ops import AllocOp
from .wgmma_fragments import SWIZZLE, operand_layout, register_a_layout, wgmma_shape

__all__ = ["WgmmaOp", "WgmmaWaitOp", "FenceProxyAsyncOp", "WGMMA_DTYPES", "a_in_registers"]

# operand types wgmma multiplies (f32 operands as tf32), always accumulating in f32 here
WGMMA_DTYPES = (dt.float16, dt.bfloat16, dt.float32, dt.float8e4m3, dt.float8e5m2)


def a_in_registers(op: Op) -> bool:
    """Whether gpu.wgmma `op` takes its A operand from registers (a tile, not a buffer)."""
    return isinstance(op.operands[0].type, TileType)


def _alloc_of(op: Op, idx: int) -> AllocOp:
    owner = op.operands[idx].owner
    if not isinstance(owner, AllocOp):
        raise op.error(f"operand {idx} of {op.name} must be a gpu.alloc buffer")
    return owner


@register_op
class WgmmaOp(Op):
    """acc + a @ b with wgmma.mma_async, a (M x K) and b (K x N) in 128-byte-swizzled shared
    buffers (`wgmma_fragments.operand_layout`: B K-major for tf32 and f8), or a (16-bit) a
    register tile, the accumulator in an #mma version 3 layout."""
    name = "gpu.wgmma"
    operands_spec = ("a", "b", "acc", "slot?")
    attributes = {"b_trans": A("bool", True)}
    traits = frozenset({"reads"})

    def infer_types(self):
        return [self.operands[2].type]

    def verify_op(self):
        c = self.operands[2].type
        if not isinstance(c, TileType) or not isinstance(c.encoding, MmaLayout) or c.encoding.version != 3:
            raise self.error(f"accumulator must be a tile in an #mma version 3 layout, got {c}")
        if c.dtype is not dt.float32:
            raise self.error(f"wgmma accumulates in f32 here, got {c.dtype}")
        has_slot = len(self.operands) > 3 and self.operands[3] is not None
        if has_slot:
            st = self.operands[3].type
            if not isinstance(st, ScalarType) or st.dtype is not dt.int32:
                raise self.error(f"the slot index must be an i32 scalar, got {st}")
        shapes = []
        b_k_major = None   # B's order (None: the dtype's default), which bounds the instruction N
        reg_a = a_in_registers(self)
        bufs = (1,) if reg_a else (0, 1)
        if has_slot and all(len(_alloc_of(self, i).attrs["shape"]) != 3 for i in bufs):
            raise self.error("a slot index needs a multi-slot (rank-3) operand buffer")
        if reg_a:
            shapes.append(self._register_a(c.encoding))
        for idx in bufs:
            alloc = _alloc_of(self, idx)
            shape = list(alloc.attrs["shape"])
            lay = alloc.attrs["layout"]
            slotted = has_slot and len(shape) == 3
            if slotted:
                shape = shape[1:]
            elem = alloc.results[0].type.pointee
            if elem not in WGMMA_DTYPES:
                raise self.error(f"wgmma multiplies f16, bf16, f32 (as tf32), f8e4m3 or f8e5m2 operands, "
                                 f"got {elem}")
            inner = tuple(d - (1 if slotted else 0) for d in lay.order[:2])  # slots are outermost
            b_trans = idx == 1 and self.attrs.get("b_trans", False)
            if b_trans:
                if elem.bits != 16:
                    raise self.error(f"b_trans reads a 16-bit Bᵀ buffer, got {elem}")
                shape = shape[::-1]   # Bᵀ's (N, K) buffer, in A's layout: B is (K, N)
            # a 16-bit A may be K-major or M-major, a 16-bit B N-major or K-major (the transpose
            # bits); others have one form
            k_major = None
            if elem.bits == 16 and not b_trans:
                k_major = inner == (0, 1) if idx == 1 else inner == (1, 0)
            want_lay = operand_layout(elem.itemsize, 0 if b_trans else idx, k_major)
            if idx == 1:
                b_k_major = True if b_trans else k_major
            if lay.swizzle_bytes != SWIZZLE or inner != want_lay.order:
                dims = ("K or M" if elem.bits == 16 and not b_trans else "K") if idx == 0 else \
                    ("K" if want_lay.order[0] == 0 else "N")
                raise self.error(f"wgmma reads {SWIZZLE}-byte-swizzled buffers with {dims} contiguous, "
                                 f"operand {'ab'[idx]} has {lay}")
            shapes.append((shape, elem))
        (sa, ea), (sb, eb) = shapes
        m, n = c.shape
        if ea is not eb or len(sa) != 2 or len(sb) != 2 or sa[1] != sb[0] or (sa[0], sb[1]) != (m, n):
            raise self.error(f"shapes do not match: {sa} {ea} @ {sb} {eb} + {list(c.shape)}")
        want = wgmma_shape(m, n, sa[1], ea.itemsize, c.encoding.num_warps, b_k_major)
        lay = c.encoding
        if want != (lay.warps_per_cta[0], lay.warps_per_cta[1], lay.instr_shape[1]):
            raise self.error(f"wgmma cannot compute a {m}x{n}x{sa[1]} dot in {lay}")

    def _register_a(self, acc: MmaLayout):
        a = self.operands[0].type
        want = register_a_layout(acc, a.dtype.bits)
        if want is None:
            raise self.error(f"wgmma takes A from registers for 16-bit (f16, bf16) operands here, got {a.dtype}")
        if len(a.shape) != 2 or not registers_match(a.encoding, want, a.shape):
            raise self.error(f"a register A operand must be in {want} (up to register order), got {a}")
        return list(a.shape), a.dtype


@register_op
class WgmmaWaitOp(Op):
    """Wait until at most `pending` of this thread's wgmma groups are in flight; the result is
    the accumulator, readable from here on."""
    name = "gpu.wgmma_wait"
    operands_spec = ("acc",)
    attributes = {"pending": A("int")}
    traits = frozenset({"writes"})

    def infer_types(self):
        return [self.operands[0].type]

    def verify_op(self):
        if not 0 <= self.attrs["pending"] <= 7:
            raise self.error("pending must be from 0 to 7")
        c = self.operands[0].type
        if not isinstance(c, TileType) or not isinstance(c.encoding, MmaLayout) or c.encoding.version != 3:
            raise self.error(f"gpu.wgmma_wait takes an #mma version 3 accumulator, got {c}")


@register_op
class FenceProxyAsyncOp(Op):
    """fence.proxy.async.shared::cta: this thread's earlier shared-memory writes (st.shared,
    cp.async) become visible to the async proxy that wgmma reads through."""
    name = "gpu.fence_proxy_async"
    num_results = 0
    traits = frozenset({"writes"})
