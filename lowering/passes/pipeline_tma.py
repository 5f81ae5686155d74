"""The TMA form of pipeline_loads' ring (sm_90a): bulk tensor copies completing on mbarriers.

When every load of the loop's `barrier; stores; fence; barrier` groups carries a tma_loads
tag (its gpu.tma_origin marker is in the body), one wgmma group may stay in flight
(S >= 3 stages) and S slots fit the shared memory, the ring is filled by TMA instead of
cp.async. Every group takes part, one mbarrier per slot expecting all of an iteration's
bytes (attention: K for S = Q Kᵀ and V for O = P V + O · α, 2 x 64 x 128 f16 a slot at
head dim 128). With D = S - 1:

    %bar = gpu.alloc {shape = [S]} : ptr<i64, 3>          (one mbarrier per slot)
    gpu.mbarrier_init %bar ; gpu.barrier
    for s in 0 .. D-1:   (prologue: iteration s into slot s)
        gpu.mbarrier_expect %bar, s, live(s) {bytes} ; gpu.tma_load %bufA, s, %bar, %a, ... ; (B)
    loop (iteration c, count = (iv - lb) / step):
        gpu.mbarrier_wait %bar, c % S, (c / S) & 1         (slot c % S holds iteration c)
        %d = gpu.wgmma %bufA, %bufB, %acc, c % S
        %e = gpu.wgmma_wait %d {pending = 1}                (the wgmma of c - 1 has retired)
        gpu.barrier                                        (everyone's has)
        gpu.mbarrier_expect %bar, (c + D) % S, live(c + D) ; gpu.tma_load ... (iteration c + D)
    after: %acc = gpu.wgmma_wait {pending = 0}

The copies of c + D go into the slot c - 1 read, once every warpgroup's wgmma of c - 1 has
retired: issued after the wgmma of c, they run S - 1 iterations ahead, and the block
barrier waits while the tensor cores work on c (before the wgmma, it would hold back
their next group). In a chain the wgmma left in flight is the one that accumulates into
the carried value through elementwise ops (attention's O += P V, O rescaled first), as in
pipeline_loads' cp.async ring: the next iteration waits for the carried value just before
it first reads it, and its other wgmmas (S = Q Kᵀ, retired in their iteration) have
retired every earlier group by the time the refill's barrier is reached.

Each slot's barrier completes one phase per use, so the n-th use of a slot (n = c / S)
waits for parity n & 1. Only live iterations (< the loop's bound) issue copies: every
copy issued is waited for inside the loop, so none is in flight when the kernel moves on.
TMA writes and wgmma reads both go through the async proxy: no proxy fence is needed.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from tilec import dtypes as dt
from tilec.ir import Builder, Op, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, ScalarType

from ..gpu.layouts import SharedLayout
from ..gpu.ops import SHARED, AllocOp, BarrierOp
from ..gpu.tma_ops import MbarrierExpectOp, MbarrierInitOp, MbarrierWaitOp, TmaLoadOp, TmaOriginOp, copy_attrs
from ..gpu.wgmma_ops import WgmmaOp, WgmmaWaitOp
from .rewrite import build_constant, iteration_at, iteration_count, iteration_live

__all__ = ["tma_markers", "pipeline_tma"]


def tma_markers(loop: T.ForOp) -> Dict[int, TmaOriginOp]:
    """The tma_origin markers of the loop body, by tag."""
    return {op.attrs["tag"]: op for op in loop.body.ops if isinstance(op, TmaOriginOp)}


def tma_origin(load: Op, markers: Dict[int, TmaOriginOp]) -> Optional[TmaOriginOp]:
    tag = load.attrs.get("_tma")
    return None if tag is None else markers.get(tag)



def _issue(at: Builder, cands, origins, bufs, bar: Value, iv: Value, iv_value: Value, live: Value,
           slot: Value, slice_of, clone) -> None:
    """Thread 0's copies of iteration `iv_value` into `slot`, where `live` says that iteration exists."""
    total = sum(c.alloc.nbytes for c in cands)
    at.create(MbarrierExpectOp, bar, slot, live, bytes=total)
    for c, origin in zip(cands, origins):
        mapping = {id(iv): iv_value}
        clone(slice_of(origin), at, mapping)
        indices = [mapping.get(id(v), v) for v in origin.operands[1:]]
        shared = copy_attrs(origin)
        at.create(TmaLoadOp, bufs[id(c.alloc)], slot, bar, origin.operands[0], *indices, live,
                  box=list(origin.attrs["box"]), **shared)


def pipeline_tma(loop: T.ForOp, groups: List, cands: List, origins: List[TmaOriginOp], stages: int, lag,
                 new_buffers, slice_of, clone, reslot, ready) -> None:
    """Rewrite `loop` as the module docstring shows. `groups` are pipeline_loads' store groups
    (`barrier; stores; fence; barrier`), every store of them a candidate; `new_buffers`,
    `slice_of`, `clone`, `reslot` and `ready` are its helpers (slot buffers, the ops an index
    needs, cloning them, pointing a wgmma at a slot, waiting for a carried accumulator before
    its first other use)."""
    body = loop.body
    ahead_by = stages - 1
    iv = body.args[0]
    lb, ub, step = loop.operands[:3]
    i32 = ScalarType(dt.int32)
    bufs = new_buffers(cands, stages)
    # the mbarriers after the ring's buffers: allocate_shared places in that order, and a few
    # bytes placed first would push a later ring past the kernel's other buffers
    last_alloc = max((b.owner for b in bufs.values()), key=lambda a: a.parent.ops.index(a))
    head = Builder().before(last_alloc)
    head.index += 1
    head.loc = last_alloc.loc
    bar = head.value(AllocOp, shape=[stages], layout=SharedLayout(1, 1, 1, (0,), 0),
                     result_types=[PointerType(dt.int64, SHARED)])
    pre = Builder().before(loop)
    pre.loc = loop.loc
    pre.create(MbarrierInitOp, bar)
    pre.create(BarrierOp)  # every thread sees initialized barriers before waiting on them
    for s in range(ahead_by):
        iv_s = iteration_at(pre, lb, step, s)
        live = iteration_live(pre, lb, step, s, ub)
        _issue(pre, cands, origins, bufs, bar, iv, iv_s, live, build_constant(pre, i32, s), slice_of, clone)
    # the body: the first group's `barrier; stores; fence; barrier` becomes the wait (one
    # mbarrier per slot covers every buffer's copy); the others go; the refill follows the lag
    barrier = groups[0].before
    at = Builder().before(barrier)
    at.loc = loop.loc
    count = iteration_count(at, iv, lb, step)
    nst = build_constant(at, i32, stages)
    read_slot = at.value(T.ModOp, count, nst)
    parity = at.value(T.AndOp, at.value(T.FloorDivOp, count, nst), build_constant(at, i32, 1))
    write_slot = at.value(T.ModOp, at.value(T.AddOp, count, build_constant(at, i32, ahead_by)), nst)
    ahead = iteration_at(at, iv, step, ahead_by)
    at.create(MbarrierWaitOp, bar, read_slot, parity)
    wait, j = lag
    refill = Builder().before(wait)
    refill.index += 1
    refill.loc = loop.loc
    refill.create(BarrierOp)
    live = iteration_live(refill, iv, step, ahead_by, ub)
    _issue(refill, cands, origins, bufs, bar, iv, ahead, live, write_slot, slice_of, clone)
    for g in groups:
        for op in [g.before, *g.stores, *([g.fence] if g.fence is not None else []), g.after]:
            op.erase()
    for c in cands:
        for user, _ in list(c.alloc.results[0].uses):
            if isinstance(user, WgmmaOp):
                reslot(user, bufs, read_slot)
    for c in cands:
        if not c.load.results[0].uses:
            c.load.erase()
        if c.alloc.parent is not None and not c.alloc.results[0].uses:
            c.alloc.erase()
    wait.attrs["pending"] = 1
    ready(body, wait.operands[0].owner, body.args[1 + j])   # O = P V + O · alpha reads O before its wgmma
    post = Builder().before(loop)
    post.index += 1
    res = loop.results[j]
    done = post.create(WgmmaWaitOp, res, pending=0, result_types=[res.type], loc=loop.loc)
    for user, i in list(res.uses):
        if user is not done:
            user.set_operand(i, done.results[0])
