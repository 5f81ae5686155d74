"""allocate_shared: place every shared-memory buffer, reusing space whose lifetimes do not overlap.

Buffers are the gpu.alloc ops, plus a scratch area for each gpu.convert_layout
that moves data between threads (codegen goes through shared memory for those;
conversions within a thread's registers need none) and for each gpu.tma_store (its
tile, or the column blocks it stores per round, in the 128-byte swizzle TMA reads,
aligned to 1024), and for each tile.cluster_gather of a cluster (`gather_bytes`: two
mbarriers and the 4-byte values of every program for each of GATHER_SLOTS rounds, which
the cluster's programs write into each other's buffer: it lives for the whole kernel and
is never shared). The mbarriers of a ring (a gpu.alloc that gpu.mbarrier_init initializes) share
bytes with nothing: they go after every other buffer. PTX allows an mbarrier's memory another
use only after mbarrier.inval, and a ring's barriers in a cluster take arrivals from the other
programs until the kernel's final cluster sync, so no later buffer may take their bytes.
Lifetimes are intervals
over the ops in program order: from the alloc to its last use, where a use
inside a loop that does not contain the alloc keeps the buffer alive to the
end of that loop (the next iteration reads it again); a buffer allocated at the
top of the kernel and used only inside later statements of its body lives from
the first of those statements to the end of the last (the two loops of a
flash-attention backward kernel, each with its own dot operands, share bytes). Both
sets of lifetimes are placed, in the same order, and the smaller total is kept: the
narrow lifetimes only remove conflicts, but first fit can still pack them worse. When the
narrow placement is kept, a statement that starts using bytes an earlier one used gets a
gpu.barrier before it (`_separate_reuses`). A conversion's scratch
lives for its own op only.

A conversion's scratch gets the bank-conflict-free layout of gpu/swizzle.py
(`_smem_layout`) and 128-byte alignment (the banks' period), and
`_smem_sync = true` when a barrier must precede its writes: inside a loop (the
previous iteration may still read it) or when its bytes overlap a buffer used
earlier. Otherwise the one barrier between its writes and reads suffices.

Placement is first fit in order of start, aligned to 16 bytes (128 for a
swizzled layout and for any buffer of 128 bytes or more, 1024 for the 128-byte swizzle
TMA and wgmma use). Offsets go
into `offset` (alloc) or `_smem_offset` (convert_layout); the kernel's total
into the function's `_shared_bytes` and the module's `shared` (the compiled
kernel's metadata["shared"]; `shared_bytes(module)` reads it). More than the arch provides is a
CompilationError naming the kernel.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from tilec.errors import CompilationError
from tilec.ir import Builder, Module, Op
from tilec.ir import tile_ops as T

from ..gpu.layouts import registers_match
from ..gpu.ops import AllocOp, BarrierOp, ConvertLayoutOp
from ..gpu.tma_ops import MbarrierInitOp, TmaStoreOp
from ..gpu.swizzle import conversion_layout
from .rewrite import enclosing_loops

__all__ = ["allocate_shared", "shared_bytes", "convert_needs_shared", "GATHER_SLOTS", "gather_bytes",
           "live_alloc_bytes"]

GATHER_SLOTS = 2  # a tile.cluster_gather's buffer: two rounds of values, used in turn


def gather_bytes(values: int, entries: int) -> int:
    """A tile.cluster_gather's buffer: two mbarriers (8 bytes each) per round, then GATHER_SLOTS
    rounds of `values` rows of `entries` 4-byte values (the results' length: rules_cluster)."""
    return GATHER_SLOTS * (16 + values * entries * 4)


def convert_needs_shared(src, dst, shape) -> bool:
    """A conversion moves data between threads unless lanes and warps hold the same elements."""
    return not registers_match(src, dst, shape)


def _numbering(func) -> Tuple[Dict[int, int], Dict[int, int]]:
    """Program-order index of every op, and the last index inside each op's regions."""
    index: Dict[int, int] = {}
    end: Dict[int, int] = {}

    def visit(op: Op) -> None:
        index[id(op)] = len(index)
        for r in op.regions:
            for o in r.block.ops:
                visit(o)
        end[id(op)] = len(index) - 1
    visit(func)
    return index, end


def _interval(op: Op, index, end) -> Tuple[int, int]:
    start = index[id(op)]
    last = start
    own = set(id(x) for x in enclosing_loops(op))
    for r in op.results:
        for user, _ in r.uses:
            u = index[id(user)]
            for loop in enclosing_loops(user):
                if id(loop) not in own:
                    u = max(u, end[id(loop)])
            last = max(last, u)
    return start, last


def _top_level(op: Op) -> Op:
    """The op of the kernel's body that holds `op` (itself when it is one)."""
    while op.parent_op() is not None and op.parent_op().parent_op() is not None:
        op = op.parent_op()
    return op


def _alloc_interval(op: Op, index, end) -> Tuple[int, int]:
    """A buffer allocated at the top of the kernel for use in later statements lives over the
    statements of the kernel's body that use it, not from the top: the operand buffers of dots
    in two loops one after the other then share their bytes. Whole body statements, because
    the regions of one statement may run at the same time (warp-specialized roles)."""
    users = [_top_level(u) for r in op.results for u, _ in r.uses]
    top = _top_level(op)
    if not users or any(u is top for u in users):
        return _interval(op, index, end)
    return min(index[id(u)] for u in users), max(end[id(u)] for u in users)


def live_alloc_bytes(func, op: Op) -> int:
    """Bytes of the gpu.alloc buffers of `func` live while `op` runs (their narrow lifetimes,
    as allocate_shared gives them, overlap op's span): a pass sizing new buffers for a loop
    counts only what that loop shares memory with."""
    index, end = _numbering(func)
    lo, hi = index[id(op)], end[id(op)]
    total = 0
    for a in func.walk():
        if isinstance(a, AllocOp):
            s, e = _alloc_interval(a, index, end)
            if not (e < lo or hi < s):
                total += a.nbytes
    return total


def _align(layout) -> int:
    sw = getattr(layout, "swizzle_bytes", 0)
    if sw == 128:
        return 1024
    if sw or getattr(layout, "max_phase", 1) > 1:
        return 128
    return 16


# How long a buffer lives: from its alloc to its last use; for its own op only (a scratch
# area, which a barrier may have to precede: `_smem_sync`); or the whole kernel (the other
# programs of a cluster write a cluster_gather's buffer whenever they get there).
_USES, _OP, _KERNEL = "uses", "op", "kernel"
_BARRIERS = "barriers"  # a ring's mbarriers: placed after everything else, never shared
_LOOP = "loop"          # the whole outermost loop around it and the op after it


def _holds_mbarriers(alloc: AllocOp) -> bool:
    return any(isinstance(u, MbarrierInitOp) for r in alloc.results for u, _ in r.uses)


def _buffers(func, remarks=None):
    """(op, size in bytes, alignment, attribute to set, lifetime) of every buffer of `func`;
    `remarks` hears of each layout conversion that goes through shared memory."""
    out = []
    for op in func.walk():
        if isinstance(op, AllocOp):
            # 128 bytes (the banks' period) from that size on: a warp's contiguous 16-byte
            # accesses then touch the fewest wavefronts (a staged f32 layer_norm chunk placed
            # 16 bytes past a 4-byte buffer ran at 78% of copy, at 128 bytes 87%).
            if _holds_mbarriers(op):
                out.append((op, op.nbytes, 16, "offset", _BARRIERS))
                continue
            align = max(_align(op.attrs["layout"]), 128 if op.nbytes >= 128 else 16)
            out.append((op, op.nbytes, align, "offset", _USES))
        elif isinstance(op, ConvertLayoutOp):
            src, dst = op.operands[0].type, op.results[0].type
            if convert_needs_shared(src.encoding, dst.encoding, src.shape):
                elem = src.element
                esize = elem.dtype.itemsize if hasattr(elem, "dtype") else 8
                op.attrs["_smem_layout"] = conversion_layout(src.encoding, dst.encoding, tuple(src.shape), esize)
                out.append((op, src.numel * esize, 128, "_smem_offset", _OP))
                if remarks is not None:
                    shape = "x".join(str(d) for d in src.shape)
                    remarks.add("layout", f"layout conversion of a {shape} {elem} tile through shared memory "
                                          f"({src.numel * esize} bytes, barriers): {src.encoding} -> {dst.encoding}",
                                op.loc)
        elif isinstance(op, TmaStoreOp):
            # a deferred read (TmaStoreOp.deferred_read): the copy reads the scratch while the
            # loop goes on, until the gpu.bulk_read_wait after it
            out.append((op, op.scratch_bytes, 1024, "_smem_offset", _LOOP if op.attrs.get("deferred_read") else _OP))
        elif isinstance(op, T.ClusterGatherOp) and op.attrs["size"] > 1:
            out.append((op, gather_bytes(len(op.operands), op.entries), 16, "_smem_offset", _KERNEL))
    return out


def _lifetime(op, lives: str, index, end, narrow: bool) -> Tuple[int, int]:
    if lives == _USES:
        return _alloc_interval(op, index, end) if narrow else _interval(op, index, end)
    if lives == _KERNEL:
        return 0, len(index)
    if lives == _LOOP:
        loop = enclosing_loops(op)[-1]
        return index[id(loop)], end[id(loop)] + 1
    return index[id(op)], index[id(op)]


def _place(bufs, intervals, order_by) -> Tuple[List[int], int]:
    placed: List[Tuple[int, int, int, int]] = []  # (start, end, offset, size)
    offsets = [0] * len(bufs)
    order = sorted(range(len(bufs)), key=lambda i: (order_by[i][0], -bufs[i][1]))
    total = 0
    for i in order:
        size, align = bufs[i][1:3]
        s, e = intervals[i]
        live = sorted((o, o + n) for (ps, pe, o, n) in placed if not (pe < s or e < ps))
        off = 0
        for lo, hi in live:
            if off + size <= lo:
                break
            off = max(off, -(-hi // align) * align)
        offsets[i] = off
        placed.append((s, e, off, size))
        total = max(total, off + size)
    return offsets, total


def _separate_reuses(func, bufs, intervals, offsets, index) -> None:
    """A gpu.barrier before each statement of the kernel's body that starts using bytes an
    earlier statement used: other warps may still be reading them there (a wgmma of the
    loop before, the last iteration's reads), and the statement's first writes (a store
    before a loop, a ring's first copies) are not preceded by a barrier of their own."""
    at_index = {index[id(op)]: op for op in func.walk()}
    starts = set()
    for i, (op, size, _, _, lives) in enumerate(bufs):
        if lives != _USES:
            continue
        s, lo, hi = intervals[i][0], offsets[i], offsets[i] + size
        if any(intervals[j][1] < s and offsets[j] < hi and lo < offsets[j] + bufs[j][1] for j in range(len(bufs))):
            starts.add(s)
    for s in sorted(starts):
        stmt = at_index[s]
        Builder().before(stmt).create(BarrierOp, loc=stmt.loc)


def _mark_syncs(bufs, intervals, offsets) -> None:
    """`_smem_sync` on each scratch area (conversion, TMA store) another use may still be reading."""
    for i, (op, size, _, _, lives) in enumerate(bufs):
        if lives not in (_OP, _LOOP):
            continue
        lo, hi = offsets[i], offsets[i] + size
        reused = bool(enclosing_loops(op)) or any(
            intervals[j][0] < intervals[i][0] and offsets[j] < hi and lo < offsets[j] + bufs[j][1]
            for j in range(len(bufs)) if j != i)
        op.attrs["_smem_sync"] = reused


def allocate_shared(module: Module, *, limit: int, arch: str, remarks) -> Module:
    """Place every shared buffer; more than `limit` bytes (what one CTA may use on `arch`,
    named in the error) is a CompilationError. `remarks` (tilec.remarks.Remarks) hears of
    each layout conversion through shared memory."""
    peak = 0
    for func in module.ops:
        if not isinstance(func, T.FuncOp):
            continue
        index, end = _numbering(func)
        every = _buffers(func, remarks)
        bufs = [b for b in every if b[4] != _BARRIERS]
        # Lifetimes from the allocation, and the narrower ones from the first statement using
        # the buffer; both placed in the order of the first (the narrow lifetimes only lift
        # conflicts), the smaller total kept: first fit is not monotone in its conflicts.
        wide = [_lifetime(op, lives, index, end, False) for op, _, _, _, lives in bufs]
        narrow = [_lifetime(op, lives, index, end, True) for op, _, _, _, lives in bufs]
        offsets, total = _place(bufs, wide, wide)
        intervals = wide
        if narrow != wide:
            n_offsets, n_total = _place(bufs, narrow, wide)
            if n_total < total:
                offsets, total, intervals = n_offsets, n_total, narrow
                _separate_reuses(func, bufs, intervals, offsets, index)
        for (op, _, _, attr, _), off in zip(bufs, offsets):
            op.attrs[attr] = off
        _mark_syncs(bufs, intervals, offsets)
        for op, size, align, attr, lives in every:
            if lives == _BARRIERS:
                op.attrs[attr] = -(-total // align) * align
                total = op.attrs[attr] + size
        func.attrs["_shared_bytes"] = total
        peak = max(peak, total)
        if total > limit:
            name = func.attrs.get("sym_name")
            raise CompilationError(
                f"needs {total} bytes of shared memory, more than the {limit} bytes {arch} provides; "
                "use smaller tiles or fewer stages", kernel=name, stage="pass 'allocate_shared'")
    module.attrs["shared"] = peak  # what the compiler reports as metadata["shared"]
    return module


def shared_bytes(module: Module) -> int:
    """Shared memory the module's kernel uses (after allocate_shared)."""
    return max((f.attrs.get("_shared_bytes", 0) for f in module.ops if isinstance(f, T.FuncOp)), default=0)
