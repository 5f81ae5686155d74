"""warp_specialize: a producer warpgroup fills pipeline_loads' TMA ring, the num_warps consume it.

Runs with the `warp_specialize` option on sm_90a, on a kernel whose body holds one TMA
ring (pipeline_tma's form) at its top level. The ring of S slots gets a second row of
mbarriers, `empty`, on which the consumer warpgroups release a slot once the wgmma that
read it has retired (one arrival per consumer warpgroup); the loads move to a producer loop that waits for a slot to be empty
before refilling it, so the producer runs up to S iterations ahead and the consumers
never stop at a block barrier:

    %full = gpu.alloc {shape = [S]} ; %empty = gpu.alloc {shape = [S]}
    gpu.mbarrier_init %full ; gpu.mbarrier_init %empty {count = num_warps / 4} ; gpu.barrier
    gpu.warp_specialize {producer_warps = 4, producer_regs = 40, consumer_regs = ...} (
      { for k: c = (k - lb) / step
          gpu.mbarrier_wait %empty, c % S, ((c / S) & 1) ^ 1    (use n of a slot waits for release n - 1)
          gpu.mbarrier_expect %full, c % S, true ; gpu.tma_load ... (iteration k) }
      { for k: gpu.mbarrier_wait %full, c % S, (c / S) & 1
               %d = gpu.wgmma ... ; %e = gpu.wgmma_wait %d {pending = 1}
               gpu.mbarrier_arrive %empty, (c + S - 1) % S, c > 0 {every = 128}   (c - 1 has retired)
        the epilogue }
    )

A fresh mbarrier counts as having completed the phase before its first, so the first
wait on each empty slot (parity 1) passes at once.

Copies shared by a cluster of N programs (gpu.tma_load {multicast = N}) write every
program's slot: a slot is empty only once the consumers of all N programs released it, so
each consumer warpgroup arrives on the slot's `empty` barrier of every program
(gpu.mbarrier_arrive {cluster = N}; init count = num_warps / 4 * N); the barrier after
the inits becomes a tile.cluster_sync (no copy reaches a program before its barriers
exist), and a second one ends the kernel (no program exits while another still arrives
on its barriers). Multicast stays only in a specialized ring (other rings have no
`empty` barriers): the pass strips it everywhere else. The kernel runs 32 * (num_warps + 4)
threads (the module's `num_threads`); the consumers keep thread ids 0 .. 32 * num_warps - 1.
Kernels without such a ring are left as they are.

Several rings of the same shape in loops one after another at the top level (a chain's
unmasked and masked key loops) become one ring: the later loops take the first ring's slot
buffers and `full` barriers, and every loop counts on from the iterations of the loops
before it, in the producer and the consumers alike. Ops before the first ring that touch
memory per thread (a Q tile loaded and staged by the consumers) go to the consumer region;
the producer recomputes the pure values its loops need (bounds, copy coordinates).
"""
from __future__ import annotations

from typing import List, Optional

from tilec import dtypes as dt
from tilec.ir import Block, Builder, Module, Op, Region, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, ScalarType

from ..gpu.ops import SHARED, AllocOp, BarrierOp
from ..gpu.tma_ops import MbarrierArriveOp, MbarrierExpectOp, MbarrierInitOp, MbarrierWaitOp, TmaLoadOp, copy_attrs
from ..gpu.wgmma_ops import WgmmaOp, WgmmaWaitOp
from ..gpu.ws_ops import PRODUCER_WARPS, WarpSpecializeOp
from .dce import dce
from .rewrite import build_constant, clone_ops, loop_slice, trip_count

__all__ = ["warp_specialize", "PRODUCER_REGS"]

PRODUCER_REGS = 40  # the producer only computes tile indices and issues copies
WARPGROUP = 128     # threads; wgmma.wait_group retires a warpgroup's reads together: one arrival each
_I32 = ScalarType(dt.int32)
_BOOL = ScalarType(dt.bool_)


class _Ring:
    """pipeline_tma's ring in a loop: its barriers, wait, barrier, issue ops and prologue; and
    the loop the split wraps: the ring's own, or the one loop (a persistent tile loop) around it."""

    def __init__(self, loop: T.ForOp, wait: MbarrierWaitOp):
        self.loop, self.wait = loop, wait
        self.full = wait.operands[0].owner
        self.stages = self.full.attrs["shape"][0]
        body = loop.body.ops
        self.barrier = next((op for op in body if isinstance(op, BarrierOp)), None)
        self.issues = [op for op in body if isinstance(op, (MbarrierExpectOp, TmaLoadOp))]
        block = loop.parent
        upto = block.ops.index(loop)
        bar = wait.operands[0]
        self.prologue = [op for op in block.ops[:upto]
                         if (isinstance(op, MbarrierExpectOp) and op.operands[0] is bar)
                         or (isinstance(op, TmaLoadOp) and op.operands[2] is bar)]
        self.init = next((op for op in block.ops[:upto] if isinstance(op, MbarrierInitOp)
                          and op.operands[0] is wait.operands[0]), None)
        self.init_barrier = None
        if self.init is not None:  # the loop comes after it at the latest
            after = block.ops[block.ops.index(self.init) + 1]
            self.init_barrier = after if isinstance(after, BarrierOp) else None
        self.lag = next((op for op in body if isinstance(op, WgmmaWaitOp) and op.attrs.get("pending") == 1), None)
        parent = loop.parent_op()
        self.outer = parent if isinstance(parent, T.ForOp) else None
        self.top = loop if self.outer is None else self.outer

    def valid(self) -> bool:
        loads = [op for op in self.issues if isinstance(op, TmaLoadOp)]
        lives = {id(op.operands[-1]) for op in self.issues}
        body = self.loop.body
        return (isinstance(self.barrier, BarrierOp) and self.init_barrier is not None and self.lag is not None
                and len(loads) >= 1 and len(lives) == 1
                and all(loop_slice(body, list(op.group("indices")), body.args[0]) is not None for op in loads)
                and all(op.operands[0] is self.wait.operands[0] for op in self.issues
                        if isinstance(op, MbarrierExpectOp))
                and all(op.operands[2] is self.wait.operands[0] for op in loads)
                and (self.outer is None or (not self.outer.results and len(self.outer.body.args) == 1
                                            and loop_slice(self.outer.body, _outer_needs(self), self.outer.body.args[0])
                                            is not None)))


_BEFORE_SPLIT = (AllocOp, MbarrierInitOp, BarrierOp, MbarrierExpectOp, TmaLoadOp)


def _uniform(ops) -> bool:
    """Whether every thread may run `ops` (the producer included): no per-thread memory access."""
    return all(isinstance(op, _BEFORE_SPLIT)
               or (not op.regions and (op.has_trait("pure") or op.has_trait("elementwise"))) for op in ops)


def _find_rings(func: Op) -> Optional[List[_Ring]]:
    """The kernel's rings, in order: one (maybe in a persistent tile loop), or several of one
    shape in top-level loops (unified below); None when the pass does not apply."""
    entry = func.regions[0].block
    rings = [_Ring(op.parent_op(), op) for op in func.walk()
             if isinstance(op, MbarrierWaitOp) and isinstance(op.parent_op(), T.ForOp)]
    if not rings or not all(r.top.parent is entry and r.valid() for r in rings):
        return None
    if len(rings) > 1 and (any(r.outer is not None for r in rings)
                           or not all(_same_shape(rings[0], r) for r in rings[1:])):
        return None
    if rings[0].outer is not None and not _uniform(entry.ops[:entry.ops.index(rings[0].top)]):
        return None
    return rings


def _loads(ring: _Ring) -> List[TmaLoadOp]:
    return [op for op in ring.issues if isinstance(op, TmaLoadOp)]


def _same_shape(a: _Ring, b: _Ring) -> bool:
    """Whether ring `b` may run in ring `a`'s slots: its copies one for one into buffers of
    the same shape and layout, with the same boxes."""
    la, lb = _loads(a), _loads(b)
    bytes_ = [[op.attrs["bytes"] for op in r.issues if isinstance(op, MbarrierExpectOp)] for r in (a, b)]
    return (a.stages == b.stages and len(la) == len(lb) and bytes_[0] == bytes_[1]
            and all(x.operands[0].type == y.operands[0].type and x.attrs == y.attrs
                    and x.operands[0].owner.attrs == y.operands[0].owner.attrs for x, y in zip(la, lb)))


def _unify(rings: List[_Ring]) -> None:
    """Later rings take the first one's buffers and barriers; their own inits and prologues go
    (the producer issues every iteration)."""
    first = rings[0]
    for r in rings[1:]:
        for x, y in zip(_loads(first), _loads(r)):
            old = y.operands[0]
            if old is not x.operands[0]:
                old.replace_all_uses_with(x.operands[0])
                old.owner.erase()
        for op in r.prologue + [r.init, r.init_barrier]:
            op.erase()
        r.full.results[0].replace_all_uses_with(first.full.results[0])
        r.full.erase()
        r.full = first.full


def _split_point(entry: Block, rings: List[_Ring]) -> Op:
    """The first op the consumers run alone: the first ring's loop, or an earlier op that
    touches memory per thread (the rest before it runs on every thread)."""
    top = rings[0].top
    if rings[0].outer is not None:
        return top
    return next((op for op in entry.ops[:entry.ops.index(top)] if not _uniform([op])), top)


def _entry_slice(entry: Block, roots, start: int) -> Optional[List[Op]]:
    """The ops of `entry` from index `start` on that compute `roots` (pure ones only; None
    otherwise), in block order."""
    pos = {id(op): i for i, op in enumerate(entry.ops)}
    need = {}
    todo = list(roots)
    while todo:
        v = todo.pop()
        op = v.owner
        if op is None or pos.get(id(op), -1) < start or id(op) in need:
            continue
        if op.regions or not (op.has_trait("pure") or op.has_trait("elementwise")):
            return None
        need[id(op)] = op
        todo.extend(op.operands)
    return [op for op in entry.ops if id(op) in need]


def _loop_needs(ring: _Ring) -> List[Value]:
    """Values from outside the ring's loop that its producer loop reads (bounds, coordinates)."""
    body = ring.loop.body
    need = list(ring.loop.operands[:3])
    for op in _loads(ring):
        for o in (loop_slice(body, list(op.group("indices")), body.args[0]) or []) + [op]:
            need.extend(o.operands)
    return need


def _mapped(v: Value, lmap) -> Value:
    return lmap.get(id(v), v) if lmap else v


def _count(at: Builder, loop: T.ForOp, iv: Value, base: Optional[Value], lmap=None) -> Value:
    """base + (iv - lb) / step as i32: the ring's running iteration number (`lmap`: clones of
    the loop's bounds, by id of the original)."""
    lb, _, step = (_mapped(v, lmap) for v in loop.operands[:3])
    c = at.value(T.FloorDivOp, at.value(T.SubOp, iv, lb), step)
    c = c if iv.type == _I32 else at.value(T.CastOp, c, to=dt.int32)
    return c if base is None else at.value(T.AddOp, base, c)


def _trips(at: Builder, loop: T.ForOp, lmap=None) -> Value:
    """How many iterations `loop` runs (its bounds through `lmap`), as i32."""
    return trip_count(at, *(_mapped(v, lmap) for v in loop.operands[:3]))


def _new_loop(at: Builder, lb, ub, step, inits, names, loc) -> T.ForOp:
    body = Block([lb.type] + [v.type for v in inits], names)
    loop = T.ForOp([lb, ub, step, *inits], [v.type for v in inits], {}, [Region([body])], loc)
    at.insert(loop)
    return loop


def _producer_loop(ring: _Ring, at: Builder, empty: Value, base: Optional[Value], lmap) -> None:
    """The producer's ring loop: wait for an empty slot, expect its bytes, issue its copies."""
    loop = ring.loop
    lb, ub, step = (_mapped(v, lmap) for v in loop.operands[:3])
    for_op = _new_loop(at, lb, ub, step, [], ["k"], loop.loc)
    k = for_op.body.args[0]
    b = Builder().at_end(for_op.body)
    b.loc = loop.loc
    count = _count(b, loop, k, base, lmap)
    nst = build_constant(b, _I32, ring.stages)
    slot = b.value(T.ModOp, count, nst)
    one = build_constant(b, _I32, 1)
    parity = b.value(T.XorOp, b.value(T.AndOp, b.value(T.FloorDivOp, count, nst), one), one)
    b.create(MbarrierWaitOp, empty, slot, parity)
    live = build_constant(b, _BOOL, True)  # the producer's loop runs only the iterations that exist
    body = loop.body
    ahead = _issued_iteration(body, ring.issues)
    for op in ring.issues:
        if isinstance(op, MbarrierExpectOp):
            b.create(MbarrierExpectOp, ring.full.result, slot, live, bytes=op.attrs["bytes"])
            continue
        mapping = dict(lmap)
        if ahead is not None:
            mapping[id(ahead)] = k
        ops = loop_slice(body, list(op.group("indices")), body.args[0])
        clone_ops([o for o in ops if ahead not in o.results], b, mapping)
        indices = [mapping.get(id(v), v) for v in op.group("indices")]
        shared = copy_attrs(op)
        b.create(TmaLoadOp, op.operands[0], slot, ring.full.result, op.operands[3], *indices, live,
                 box=list(op.attrs["box"]), **shared)
    b.create(T.YieldOp)


def _issued_iteration(body: Block, issues) -> Optional[Value]:
    """pipeline_tma's `iv + D * step` (rewrite.iteration_at), the iteration the refill issues,
    among the ops its TMA coordinates read (the only one there that reads the induction
    variable itself); None when the coordinates do not change with the loop."""
    iv = body.args[0]
    for op in issues:
        if isinstance(op, TmaLoadOp):
            for o in loop_slice(body, list(op.group("indices")), iv):
                if isinstance(o, T.AddOp) and o.operands[0] is iv:
                    return o.results[0]
    return None


def _outer_needs(ring: _Ring) -> List[Value]:
    """Values of the outer loop's body the producer's ring loop reads (bounds, tile indices)."""
    body = ring.outer.body
    need = list(ring.loop.operands[:3])
    inner = ring.loop.body
    for op in ring.issues:
        if isinstance(op, TmaLoadOp):
            for o in loop_slice(inner, list(op.group("indices")), inner.args[0]) + [op]:
                need.extend(o.operands)
    return [v for v in need if v.owner is not None and v.owner.parent is body]


def _producer(rings: List[_Ring], empty: Value, pre: Optional[List[Op]]) -> Region:
    """The producer's loops: each ring's in turn after `pre` (the entry's ops they need,
    recomputed), counting on from the rings before it; or the one ring in a persistent tile loop."""
    outer_block = Block()
    at = Builder().at_end(outer_block)
    at.loc = rings[0].loop.loc
    ring = rings[0]
    if ring.outer is None:
        lmap = {}
        clone_ops(pre, at, lmap)
        base = None
        for r in rings:
            _producer_loop(r, at, empty, base, lmap)
            trips = _trips(at, r.loop, lmap)
            base = trips if base is None else at.value(T.AddOp, base, trips)
    else:
        o = ring.outer
        lb, ub, step = o.operands[:3]
        tiles = _new_loop(at, lb, ub, step, [build_constant(at, _I32, 0)], ["tile", "base"], o.loc)
        ob = Builder().at_end(tiles.body)
        ob.loc = o.loc
        lmap = {id(o.body.args[0]): tiles.body.args[0]}
        clone_ops(loop_slice(o.body, _outer_needs(ring), o.body.args[0]), ob, lmap)
        _producer_loop(ring, ob, empty, tiles.body.args[1], lmap)
        ob.create(T.YieldOp, ob.value(T.AddOp, tiles.body.args[1], _trips(ob, ring.loop, lmap)))
    at.create(T.YieldOp)
    return Region([outer_block])


def _with_base(outer: T.ForOp, ring: _Ring) -> Value:
    """Give the outer loop a carried i32: the ring iterations of the tiles before this one."""
    at = Builder().before(outer)
    at.loc = outer.loc
    zero = build_constant(at, _I32, 0)
    region = outer.regions[0]
    outer.regions = []
    new = T.ForOp(list(outer.operands[:3]) + [zero], [_I32], {}, [], outer.loc)
    new.add_region(region)
    at.insert(new)
    outer.erase()
    base = new.body.add_arg(_I32, "base")
    old_yield = new.body.ops[-1]
    yb = Builder().before(old_yield)
    yb.loc = outer.loc
    yb.create(T.YieldOp, yb.value(T.AddOp, base, _trips(yb, ring.loop)))
    old_yield.erase()
    ring.outer = ring.top = new
    return base


def _consume(ring: _Ring, empty: Value, cluster: int, base: Optional[Value]) -> None:
    """The ring's loop without its copies and block barrier, releasing each slot once read;
    `base`: the ring iterations before this loop (earlier loops of a unified ring)."""
    loop = ring.loop
    for op in ring.issues + [ring.barrier]:
        op.erase()
    if ring.outer is not None:
        base = _with_base(ring.outer, ring)
    head = Builder().before(loop.body.ops[0])
    head.loc = loop.loc
    count = _count(head, loop, loop.body.args[0], base)
    nst = build_constant(head, _I32, ring.stages)
    # the slot and parity of the running count (across the tiles of a persistent loop)
    old_slot = ring.wait.operands[1]
    ring.wait.set_operand(1, head.value(T.ModOp, count, nst))
    ring.wait.set_operand(2, head.value(T.AndOp, head.value(T.FloorDivOp, count, nst), build_constant(head, _I32, 1)))
    for user, i in list(old_slot.uses):
        if isinstance(user, WgmmaOp):
            user.set_operand(i, ring.wait.operands[1])
    at = Builder().before(ring.lag)
    at.index += 1
    at.loc = loop.loc
    prev = at.value(T.ModOp, at.value(T.AddOp, count, build_constant(at, _I32, ring.stages - 1)), nst)
    shared = {"cluster": cluster} if cluster > 1 else {}
    at.create(MbarrierArriveOp, empty, prev, at.value(T.CmpOp, count, build_constant(at, _I32, 0), pred="gt"),
              every=WARPGROUP, **shared)


def _consumer(rings: List[_Ring], empty: Value, entry: Block, cluster: int, first: Op) -> Region:
    """The rings' loops as _consume makes them, and everything from `first` on."""
    start = entry.ops.index(first)  # _consume may replace a persistent tile loop (first)
    bases: List[Optional[Value]] = [None]
    for prev, r in zip(rings, rings[1:]):  # counted before the loops change
        at = Builder().before(r.loop)
        at.loc = r.loop.loc
        trips = _trips(at, prev.loop)
        bases.append(trips if bases[-1] is None else at.value(T.AddOp, bases[-1], trips))
    for r, base in zip(rings, bases):
        _consume(r, empty, cluster, base)
    block = Block()
    moved: List[Op] = entry.ops[start:-1]  # up to the function's terminator
    del entry.ops[start:-1]
    for op in moved:
        block.append(op)
    block.append(T.YieldOp([], [], {}, (), rings[0].loop.loc))
    return Region([block])


def drop_multicast(module: Module) -> Module:
    """Plain copies for a ring left unspecialized: only the empty barriers make multicast safe
    (the pipeline runs it instead of warp_specialize where TMA rings may exist)."""
    for op in module.walk():
        if isinstance(op, TmaLoadOp):
            op.attrs.pop("multicast", None)
    return module


def _cluster_bound(ring: _Ring, entry: Block, cluster: int) -> None:
    """Multicast copies write the other programs' buffers and arrive on their barriers: every
    program's barriers are initialized before any copy starts, and none exits while another
    may still write to it."""
    sync = T.ClusterSyncOp([], [], {}, (), ring.init_barrier.loc)
    ring.init_barrier.parent.insert(ring.init_barrier.parent.ops.index(ring.init_barrier), sync)
    ring.init_barrier.erase()
    entry.insert(len(entry.ops) - 1, T.ClusterSyncOp([], [], {}, (), ring.loop.loc))


def warp_specialize(module: Module, *, num_warps: int, registers_per_sm: int) -> Module:
    """Split the kernel's TMA ring into producer and consumers (the pipeline runs it for
    `warp_specialize` on targets with wgmma and setmaxnreg)."""
    func = module.func()
    rings = _find_rings(func)
    if rings is None:
        return drop_multicast(module)
    ring = rings[0]
    entry = func.regions[0].block
    first = _split_point(entry, rings)
    pre = None  # what the producer recomputes from the entry block (top-level rings)
    if ring.outer is None:
        pre = _entry_slice(entry, [v for r in rings for v in _loop_needs(r)], entry.ops.index(first))
        if pre is None:
            return drop_multicast(module)
    cluster = max([op.multicast for op in ring.issues if isinstance(op, TmaLoadOp)])
    _unify(rings)
    for op in ring.prologue:
        op.erase()
    if ring.outer is not None or entry.ops.index(ring.init) > entry.ops.index(first):
        # initialized once, before the split (and before a persistent tile loop)
        at = ring.outer if ring.outer is not None else first
        for op in (ring.init, ring.init_barrier):
            op.parent.ops.remove(op)
            entry.insert(entry.ops.index(at), op)
    head = Builder().before(ring.full)
    head.loc = ring.full.loc
    empty = head.value(AllocOp, shape=[ring.stages], layout=ring.full.attrs["layout"],
                       result_types=[PointerType(dt.int64, SHARED)])
    init = Builder().before(ring.init)
    init.index += 1
    init.loc = ring.init.loc
    init.create(MbarrierInitOp, empty, count=32 * num_warps // WARPGROUP * cluster)
    consumers = 32 * num_warps
    consumer_regs = min(256, (registers_per_sm - 32 * PRODUCER_WARPS * PRODUCER_REGS) // consumers // 8 * 8)
    producer = _producer(rings, empty, pre)
    consumer = _consumer(rings, empty, entry, cluster, first)
    split = WarpSpecializeOp([], [], {"producer_warps": PRODUCER_WARPS, "producer_regs": PRODUCER_REGS,
                                      "consumer_regs": consumer_regs}, [producer, consumer], ring.loop.loc)
    entry.insert(len(entry.ops) - 1, split)
    if cluster > 1:
        _cluster_bound(ring, entry, cluster)
    module.attrs["num_threads"] = consumers + 32 * PRODUCER_WARPS
    return dce(module)
