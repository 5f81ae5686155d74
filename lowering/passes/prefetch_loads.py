"""prefetch_loads: the loads of a `tc.range(..., num_stages=S)` loop, issued S - 1 iterations
ahead into shared memory with cp.async, so that they fly while the body computes.

A load held in registers until the body uses it keeps its bytes in flight only from
its issue to its first use; a loop that issues the next iteration's loads early has to
hold them in registers too. Here every qualifying load of the loop body gets a buffer
of S slots, one iteration's tile each, and the loop becomes:

    prologue:  for s in 0 .. S-2: copies of iteration s into slot s; gpu.async_commit
    loop (iteration c, read slot c % S):
        gpu.async_wait {pending = S - 2}          (this thread's copies of iteration c landed)
        gpu.barrier                               (only when a copied element is read by
                                                   another thread: everyone's landed, and
                                                   everyone has read slot (c - 1) % S)
        copies of iteration c + S - 1 into slot (c - 1) % S; gpu.async_commit
        %x = gpu.local_load %buf, c % S           (where the load was)
        %x = tile.select %mask, %x, %padding      (a masked load with non-zero padding)
    after:     gpu.async_wait {pending = 0}

When S slots do not fit, the loop reads its slot first and refills it at once: S - 1
slots keep the same S - 1 iterations in flight (fewer slots fitting: S one more than
them), at the cost of holding the tiles in registers from the top of the body:

    loop (iteration c, slot c % (S - 1)):
        gpu.async_wait {pending = S - 2}; gpu.barrier (as above)
        %x = gpu.local_load %buf, c % (S - 1)     (every staged tile, read here)
        gpu.barrier                               (only when a copied element is read by
                                                   another thread: all have read the slot)
        copies of iteration c + S - 1 into slot c % (S - 1); gpu.async_commit
        %x = tile.select %mask, %x, %padding      (where the load was)

A 128 KB tile (32768 f32: a long softmax row's chunk) thus keeps the next row in flight
with one slot, where two would not fit.

The buffer keeps the tile in row-major order without a swizzle, and each thread copies
the 4-, 8- or 16-byte runs of its own registers: when no element of the load's layout
is held by two threads, each thread reads back only what it copied itself, so neither
the landing nor the reuse of a slot needs a barrier. cp.async fills zeros where the mask
is off and for iterations past the loop's end (no memory is touched there).

A load qualifies when it is a direct child of the loop body, its pointers and mask
depend on the induction variable and otherwise only on loop invariants (the ops computing
them are pure; a load of the same tile every iteration is left alone), it moves 4, 8 or
16 bytes per access (`_vec`) and it does not feed a tensor-core operand buffer
(pipeline_loads owns those). A loop that already holds cp.async copies (pipeline_loads'
ring: a wait counts every group its thread committed) is left alone. The slots must fit
in the arch's shared memory less the buffers already placed and STAGED_RESERVE; when
fewer than S do, the loop reads first with as many as fit; with none, or before sm_80
(no cp.async), it keeps its loads.
The loop's num_stages attribute is removed either way.

The copies of later iterations are issued before this iteration's stores: a loop must
not load what an earlier iteration of it stored (docs/language.md, tc.range).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Op, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, ScalarType, TileType

from ..gpu.layouts import DistributedLayout, SharedLayout
from ..gpu.mma_ops import AsyncCommitOp, AsyncCopyOp, AsyncWaitOp
from ..gpu.ops import SHARED, AllocOp, BarrierOp, LocalLoadOp, LocalStoreOp
from .axis_info import copy_vec
from .dce import dce
from .pipeline_loads import _is_zero, issue_copy
from .rewrite import build_constant, iteration_at, iteration_count, iteration_live, loop_slice

__all__ = ["prefetch_loads", "STAGED_RESERVE"]

# Shared memory left to the kernel's other buffers (reduction and layout-conversion
# scratch, cluster exchanges) when the staged loads take the rest.
STAGED_RESERVE = 16 * 1024


class _Load:
    """A qualifying load of the loop body and the ops that compute its pointers and mask."""

    def __init__(self, op: Op, ops: List[Op]):
        self.op, self.ops = op, ops

    @property
    def type(self) -> TileType:
        return self.op.results[0].type

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.type.shape:
            n *= s
        return n * self.type.dtype.itemsize

    @property
    def shared_by_threads(self) -> bool:
        """Some element of the tile is held by more than one thread."""
        bs = self.type.encoding.bases(self.type.shape)
        return any(not any(b) for b in bs.lane + bs.warp)


def _qualifies(op: Op, body) -> Optional[_Load]:
    return _qualifies_why(op, body)[0]


def _qualifies_why(op: Op, body):
    """(the staged load `op` makes, or None and why not; "" where `op` is no load of this
    loop's to stage at all: the compiler's remarks name only the others)."""
    if not isinstance(op, (T.LoadOp, T.LoadMaskedOp)) or op.parent is not body:
        return None, ""
    t = op.results[0].type
    if not isinstance(t, TileType) or not isinstance(t.encoding, DistributedLayout) or t.dtype is None:
        return None, ""
    if t.dtype is dt.bool_:
        return None, "a bool tile (bits in registers, bytes in memory) is not staged"
    if t.dtype.itemsize * copy_vec(op) not in (4, 8, 16):
        return None, (f"it moves {t.dtype.itemsize * copy_vec(op)} bytes per access and cp.async copies 4, 8 or "
                      f"16 (contiguity or alignment of the view not known)")
    if any(isinstance(u, LocalStoreOp) for u, _ in op.results[0].uses):
        return None, ""  # a tensor-core operand: pipeline_loads' ring, or a synchronous load
    roots = list(op.operands[:2]) if isinstance(op, T.LoadMaskedOp) else [op.operands[0]]
    iv = body.args[0]
    ops = loop_slice(body, roots, iv)
    if ops is None:
        return None, "its addresses or mask depend on values the loop computes besides its induction variable"
    if not any(v is iv for v in roots + [o for x in ops for o in x.operands]):
        return None, ""  # the same tile every iteration: staging it would only copy it again
    return _Load(op, ops), ""


def _plan(loads: List[_Load], wanted: int, shared_limit: int, placed: int) -> Tuple[int, int]:
    """(stages, slots) of a loop asking for `wanted` stages: `wanted` slots where they fit,
    else as many slots as fit, read first (stages = slots + 1); (0, 0) when none fits."""
    budget = shared_limit - STAGED_RESERVE - placed
    fit = budget // sum(ld.nbytes for ld in loads)
    if fit >= wanted:
        return wanted, wanted
    slots = min(fit, wanted - 1)
    return (slots + 1, slots) if slots >= 1 else (0, 0)


def _buffer(at: Builder, ld: _Load, slots: int) -> Value:
    rank = len(ld.type.shape)
    order = tuple(d + 1 for d in range(rank - 1, -1, -1)) + (0,)  # row-major slots, slot slowest
    return at.create(AllocOp, shape=[slots] + list(ld.type.shape), layout=SharedLayout(1, 1, 1, order),
                     result_types=[PointerType(ld.type.dtype, SHARED)]).result


def _stage(loop: T.ForOp, loads: List[_Load], stages: int, slots: int) -> None:
    body = loop.body
    iv = body.args[0]
    lb, ub, step = loop.operands[:3]
    i32 = ScalarType(dt.int32)
    ahead = stages - 1
    read_first = slots < stages
    pre = Builder().before(loop)
    pre.loc = loop.loc
    bufs = [_buffer(pre, ld, slots) for ld in loads]
    for s in range(ahead):
        iv_s = iteration_at(pre, lb, step, s)
        live = iteration_live(pre, lb, step, s, ub)
        for ld, buf in zip(loads, bufs):
            issue_copy(pre, ld.ops, ld.op, iv, iv_s, buf, build_constant(pre, i32, s), lambda _: live)
        pre.create(AsyncCommitOp)

    first = min(body.ops.index(ld.op) for ld in loads)
    at = Builder().before(body.ops[first])
    at.loc = loop.loc
    count = iteration_count(at, iv, lb, step)
    n = build_constant(at, i32, slots)
    read_slot = at.value(T.ModOp, count, n)
    # Read first: the slot just read takes iteration c + S - 1 ((c + S - 1) % (S - 1) = c % (S - 1)).
    write_slot = read_slot if read_first else at.value(T.ModOp, at.value(T.AddOp, count, build_constant(at, i32, ahead)), n)
    barrier = any(ld.shared_by_threads for ld in loads)
    at.create(AsyncWaitOp, pending=stages - 2)
    if barrier:
        at.create(BarrierOp)
    held = [at.create(LocalLoadOp, buf, read_slot, result_types=[ld.type]).result if read_first else None
            for ld, buf in zip(loads, bufs)]
    if read_first and barrier:
        at.create(BarrierOp)
    iv_next = iteration_at(at, iv, step, ahead)
    live = iteration_live(at, iv, step, ahead, ub)
    for ld, buf in zip(loads, bufs):
        issue_copy(at, ld.ops, ld.op, iv, iv_next, buf, write_slot, lambda _: live)
    at.create(AsyncCommitOp)

    for ld, buf, value in zip(loads, bufs, held):
        op = ld.op
        nb = Builder().before(op)
        nb.loc = op.loc
        if value is None:
            value = nb.create(LocalLoadOp, buf, read_slot, result_types=[ld.type]).result
        if isinstance(op, T.LoadMaskedOp) and not _is_zero(op.operands[2]):
            value = nb.value(T.SelectOp, op.operands[1], value, op.operands[2])
        op.results[0].replace_all_uses_with(value)
        op.erase()

    post = Builder().before(loop)
    post.index += 1
    post.create(AsyncWaitOp, pending=0, loc=loop.loc)


def prefetch_loads(module: Module, *, shared_limit: int, remarks) -> Module:
    """Stage the loads of tc.range(num_stages=) loops through cp.async buffers, within
    `shared_limit` bytes of shared memory per CTA (the pipeline runs it on cp.async targets).
    `remarks` (tilec.remarks.Remarks) hears, per loop with loads to stage, whether they were
    and why not."""
    changed = False
    for loop in [op for op in module.walk() if isinstance(op, T.ForOp)]:
        wanted = loop.attrs.pop("num_stages", None)
        ringed = any(isinstance(op, AsyncCopyOp) for op in loop.walk())   # pipeline_loads' ring
        if wanted is None:
            if remarks is not None and not ringed:
                _remark_plain(loop, remarks)
            continue
        changed = True
        if ringed:
            continue
        found = [(op, _qualifies_why(op, loop.body)) for op in list(loop.body.ops)]
        loads = [ld for _, (ld, _) in found if ld is not None]
        if wanted < 2:
            if loads and remarks is not None:
                remarks.add("loop", f"loads at {_lines(ld.op for ld in loads)} not pipelined: num_stages=1", loop.loc)
            continue
        placed = sum(op.nbytes for op in module.walk() if isinstance(op, AllocOp))
        stages, slots = _plan(loads, wanted, shared_limit, placed) if loads else (0, 0)
        if remarks is not None:
            _remark_staged(loop, remarks, found, loads, wanted, stages, slots, shared_limit - STAGED_RESERVE - placed)
        if stages >= 2:
            _stage(loop, loads, stages, slots)
    return dce(module) if changed else module


def _lines(ops) -> str:
    lines = sorted({op.loc.line for op in ops})
    return ("line " if len(lines) == 1 else "lines ") + ", ".join(str(n) for n in lines)


def _remark_plain(loop: T.ForOp, remarks) -> None:
    """A plain `range` loop with loads tc.range(num_stages=) would stage: say so."""
    loads = [ld for ld in (_qualifies(op, loop.body) for op in list(loop.body.ops)) if ld is not None]
    if loads:
        remarks.add("loop", f"loads at {_lines(ld.op for ld in loads)} not pipelined: the loop is a plain "
                            f"`range`, and only tc.range(..., num_stages=S) loops stage their loads through "
                            f"cp.async (issued S - 1 iterations ahead)", loop.loc)


def _remark_staged(loop, remarks, found, loads, wanted, stages, slots, budget) -> None:
    for op, (ld, why) in found:
        if ld is None and why:
            remarks.add("loop", f"the load at line {op.loc.line} is not pipelined: {why}", loop.loc)
    if not loads:
        return
    where = _lines(ld.op for ld in loads)
    if stages < 2:
        need = sum(ld.nbytes for ld in loads)
        remarks.add("loop", f"loads at {where} not pipelined: one slot of their tiles ({need} bytes) does not "
                            f"fit the {max(budget, 0)} bytes of shared memory left", loop.loc)
    else:
        fewer = f", read first ({wanted} slots do not fit shared memory)" if slots < stages else ""
        remarks.add("loop", f"pipelined: loads at {where} staged through cp.async, {stages} stages in {slots} "
                            f"slot(s){fewer}", loop.loc)
