"""pipeline_loads: software pipelining of the loads that feed tensor cores, with cp.async.

After accelerate_dot a K loop reads, each iteration, global tiles into
registers and stores them into shared buffers that ldmatrix then reads:

    %x = tile.load_masked %ptrs, %mask, %zero        (ptrs/mask from the iv and loop invariants)
    gpu.barrier
    gpu.local_store %buf, %x    ...
    gpu.barrier
    %a = gpu.ldmatrix %buf

With S = num_stages, each buffer gets S slots and the copies run S - 1
iterations ahead, straight from global to shared memory (cp.async, zero-fill
where the mask is off or the iteration does not exist):

    prologue:  for s in 0 .. S-2: copies of iteration s into slot s; gpu.async_commit
    loop (iteration c, slot c % S):
        gpu.async_wait {pending = S - 2}     (this thread's copies of iteration c landed)
        gpu.barrier                          (everyone's landed; everyone finished iteration c-1)
        copies of iteration c + S - 1 into slot (c - 1) % S; gpu.async_commit
        %a = gpu.ldmatrix %buf, c % S  ...
    after:     gpu.async_wait {pending = 0}  (nothing lands in memory that is reused later)

The prefetch goes into the slot read in iteration c - 1, never the one being
read, and only after the barrier that follows every warp's last read of it.

wgmma (sm_90a). The group is `barrier; stores; gpu.fence_proxy_async; barrier` and
the reader a gpu.wgmma. cp.async writes reach wgmma's async proxy only through a
fence, so the wait becomes `gpu.async_wait; gpu.fence_proxy_async; gpu.barrier`.
With S >= 3 one wgmma group stays in flight: the body's `gpu.wgmma_wait` keeps
1 group pending (a `pending = 0` wait follows the loop) and the copies run
D = S - 2 iterations ahead instead of S - 1, into slot (c - 2) % S, whose wgmma
(iteration c - 2) every thread retired before the barrier:

    loop (iteration c):
        gpu.async_wait {pending = D - 1}; gpu.fence_proxy_async; gpu.barrier
        copies of iteration c + D into slot (c + D) % S; gpu.async_commit
        %d = gpu.wgmma %bufA, %bufB, %acc, c % S
        %e = gpu.wgmma_wait %d {pending = 1}

The same holds in a chain for the wgmma that accumulates into a carried value through
elementwise ops (attention's O = P V + O · alpha): its wait keeps 1 group pending, the
carried value is waited for just before the next iteration first reads it
(`gpu.wgmma_wait %o {pending = 0}`: ptxas serializes a kernel's wgmmas when a group
carried over the back edge is retired by a partial wait), the result after the loop; the
loop's other wgmmas (S = Q Kᵀ) are retired in their iteration. With `carry=False` (the
compiler's second build of a kernel that spilled or that ptxas serialized) only a loop's
one wgmma of the ring stays in flight, as in GEMM.

A load qualifies when its only use is such a store, its pointers and mask are
computed in the loop body from the induction variable and loop invariants
only, its padding is zero, and it moves 4, 8 or 16 bytes per access (`_vec`).

Every group of the loop body takes part (attention has two dots: K for q @ k.T, V for
p @ v): the copies of all of an iteration's qualifying loads form one commit group, issued
where the first group's barriers were; a later group whose stores all became copies loses
its barriers (the wait and barrier at the top cover its slots), one that keeps a store (p,
a register tile) keeps them around it. A group with a load that cannot be copied stays as
it is. Where the slots of `num_stages` do not fit the
shared memory beside the buffers already allocated, the ring is shallower (2 at least).

TMA (sm_90a): when tma_loads tagged every load of the groups, one wgmma group can stay in
flight and `num_stages` slots fit, the ring is filled with TMA copies on mbarriers instead
(pipeline_tma.py): attention's K and V among them, with no per-thread address arithmetic,
predicates or proxy fence in the body. Groups that stage only tiles computed in registers
(the backward's dS for dQ = dS K) are not the ring's: they stay in the body as they are.
The tma_origin markers are removed either way.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Op, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import ScalarType, TileType

from ..gpu.layouts import SharedLayout
from ..gpu.mma_ops import AsyncCommitOp, AsyncCopyOp, AsyncWaitOp, LdMatrixOp
from ..gpu.ops import AllocOp, BarrierOp, LocalStoreOp
from ..gpu.tma_ops import TmaOriginOp, TmaStoreOp, copies_as_it_lies, tile_transposed
from ..gpu.wgmma_ops import FenceProxyAsyncOp, WgmmaOp, WgmmaWaitOp
from .axis_info import copy_vec, uniform_vec
from .dce import dce
from .pipeline_tma import pipeline_tma, tma_markers, tma_origin
from .shared_alloc import live_alloc_bytes
from .rewrite import (build_constant, clone_ops, holder_in, is_side_effect_free, iteration_at, iteration_count,
                      iteration_live, loop_slice)

__all__ = ["pipeline_loads", "issue_copy"]


def _with_slots(layout: SharedLayout) -> SharedLayout:
    order = tuple(d + 1 for d in layout.order) + (0,)
    return SharedLayout(layout.vec, layout.per_phase, layout.max_phase, order, layout.swizzle_bytes)


def _is_zero(v: Value) -> bool:
    op = v.owner
    return isinstance(op, T.ConstantOp) and op.attrs.get("value") in (0, 0.0, False)


class _Candidate:
    def __init__(self, store: LocalStoreOp, load: Op, alloc: AllocOp, ops: List[Op]):
        self.store, self.load, self.alloc, self.ops = store, load, alloc, ops


def _candidate(store: LocalStoreOp, loop: T.ForOp) -> Optional[_Candidate]:
    return _candidate_why(store, loop)[0]


def _candidate_why(store: LocalStoreOp, loop: T.ForOp):
    """(the copy that can replace `store`, or None and why not: for the compiler's remarks)."""
    body = loop.body
    load = store.operands[1].owner
    alloc = store.operands[0].owner
    if not isinstance(load, (T.LoadOp, T.LoadMaskedOp)) or load.parent is not body:
        return None, "the operand is not loaded directly in the loop body"
    if len(load.results[0].uses) != 1 or not isinstance(alloc, AllocOp):
        return None, "the loaded tile has uses besides the dot"
    if loop in _ancestors(alloc):
        return None, "its buffer is allocated in the loop"
    if any(not isinstance(u, (LdMatrixOp, LocalStoreOp, WgmmaOp)) for u, _ in alloc.results[0].uses):
        return None, "its buffer has other readers"
    if isinstance(load, T.LoadMaskedOp) and not _is_zero(load.operands[2]):
        return None, "its padding is not zero (cp.async fills zeros)"
    elem = load.results[0].type.dtype
    vec = copy_vec(load)
    if vec * elem.itemsize not in (4, 8, 16):
        return None, (f"it moves {vec * elem.itemsize} bytes per access and cp.async copies 4, 8 or 16 "
                      f"(contiguity or alignment of the view not known)")
    rank = len(alloc.attrs["shape"])
    if vec > 1 and alloc.attrs["layout"].order[0] != load.attrs.get("_contig_dim", rank - 1):
        # a copy's elements must stay consecutive in the buffer (K-major wgmma B)
        return None, "its contiguous dimension is not the buffer's"
    ops = loop_slice(body, list(load.operands[:2]), body.args[0])
    if ops is None and not _writes_global(loop):
        # addresses read from memory the loop does not write (a paged cache's block table):
        # the look-ups are repeated for the iteration being prefetched (clone_guarded)
        ops = loop_slice(body, list(load.operands[:2]), body.args[0], pointer_loads=True)
    if ops is None:
        return None, "its addresses or mask depend on values the loop computes besides its induction variable"
    return _Candidate(store, load, alloc, ops), ""


def _writes_global(loop: Op) -> bool:
    """Whether anything in `loop` may write global memory (then a value loaded in one iteration
    may differ when loaded ahead of time for a later one): a tile-dialect op that writes
    (stores, atomics, and conservatively fences, prints, asserts) or a TMA store."""
    return any((o.has_trait("writes") and o.name.startswith("tile.")) or isinstance(o, TmaStoreOp)
               for o in loop.walk() if o is not loop)


def clone_guarded(ops: List[Op], at: Builder, mapping: Dict[int, Value], live: Value) -> None:
    """clone_ops, but each tile.load / tile.load_masked among `ops` reads only where `live` (the
    iteration the copies are for exists; 0 elsewhere): a look-up for an iteration past the
    loop's end must not read past its table."""
    for op in ops:
        if not isinstance(op, (T.LoadOp, T.LoadMaskedOp)):
            clone_ops([op], at, mapping)
            continue
        ptrs = mapping.get(id(op.operands[0]), op.operands[0])
        rt = op.results[0].type
        if isinstance(ptrs.type, TileType):
            guard = at.value(T.SplatOp, live, shape=list(ptrs.type.shape),
                             result_types=[TileType(ptrs.type.shape, ScalarType(dt.bool_), ptrs.type.encoding)])
        else:
            guard = live
        if isinstance(op, T.LoadMaskedOp):
            guard = at.value(T.AndOp, mapping.get(id(op.operands[1]), op.operands[1]), guard)
            other = mapping.get(id(op.operands[2]), op.operands[2])
        else:
            other = build_constant(at, rt, 0)
        new = T.LoadMaskedOp([ptrs, guard, other], [rt], dict(op.attrs), (), op.loc)
        at.insert(new)
        mapping[id(op.results[0])] = new.results[0]


def _ancestors(op: Op) -> List[Op]:
    out = []
    p = op.parent_op()
    while p is not None:
        out.append(p)
        p = p.parent_op()
    return out




def issue_copy(at: Builder, ops: List[Op], load: Op, iv: Value, iv_value: Value, buf: Value, slot: Value,
               live) -> None:
    """cp.async copies of `load` for the iteration whose induction variable is `iv_value`:
    `ops` (from _slice) recompute its pointers and mask from it, and `live(at)` is the i1
    scalar "that iteration exists" (copies of others fill zeros, and their look-ups read
    nothing)."""
    mapping: Dict[int, Value] = {id(iv): iv_value}
    exists = live(at)
    clone_guarded(ops, at, mapping, exists)
    ptrs = mapping.get(id(load.operands[0]), load.operands[0])
    pt = ptrs.type
    mask_t = TileType(pt.shape, ScalarType(dt.bool_), pt.encoding)
    mask = at.value(T.SplatOp, exists, shape=list(pt.shape), result_types=[mask_t])
    if isinstance(load, T.LoadMaskedOp):
        mask = at.value(T.AndOp, mapping.get(id(load.operands[1]), load.operands[1]), mask)
    vec = copy_vec(load)
    prefix = {"prefix": True} if vec > uniform_vec(load) else {}
    at.create(AsyncCopyOp, buf, slot, ptrs, mask, vec=vec, **prefix)


def _issue(at: Builder, c: _Candidate, iv_value: Value, live: Value, slot: Value, buf: Value, iv: Value) -> None:
    """Copies of `c`'s load for the iteration whose induction variable is `iv_value`, where
    `live` (iteration_live) says that iteration exists."""
    issue_copy(at, c.ops, c.load, iv, iv_value, buf, slot, lambda _: live)


def _wgmma_lag(loop: T.ForOp, cands: List[_Candidate], stages: int, strict: bool = False) -> Optional[tuple]:
    """(wgmma_wait, carried index) when a wgmma of the loop may stay in flight across
    iterations: S >= 3, it reads a ring buffer, its wait's result is only yielded and its
    accumulator is that carried value (GEMM's K loop) or computed from it (attention's
    O += P V, whose O is rescaled first: `_ready_before_use` then waits for the carried
    value where the next iteration first reads it). `strict` (the TMA ring) takes only the
    first form, with the carried value feeding nothing but the wgmma. None otherwise."""
    if stages < 3:
        return None
    body = loop.body
    users = {id(u): u for c in cands for u, _ in c.alloc.results[0].uses if isinstance(u, WgmmaOp)}
    if strict and len(users) != 1:
        return None
    term = body.ops[-1]
    for mma in users.values():
        waits = [u for u, _ in mma.results[0].uses]
        if mma.parent is not body or len(waits) != 1 or not isinstance(waits[0], WgmmaWaitOp):
            continue
        wait = waits[0]
        uses = wait.results[0].uses
        if len(uses) != 1 or uses[0][0] is not term:
            continue
        j = uses[0][1]
        arg = body.args[1 + j]
        if mma.operands[2] is arg and len(arg.uses) == 1:
            return wait, j
        if not strict and _computed_from(mma.operands[2], arg, body):
            return wait, j
    return None


def _computed_from(v: Value, arg: Value, body) -> bool:
    """`v` is `arg` or computed from it by elementwise ops of the loop body (attention's
    acc · alpha)."""
    seen, todo = set(), [v]
    while todo:
        x = todo.pop()
        if x is arg:
            return True
        op = x.owner
        if id(x) in seen or op is None or getattr(op, "parent", None) is not body \
                or not isinstance(op, (T.ElementwiseOp, T.BroadcastOp, T.ExpandDimsOp, T.SplatOp)):
            continue
        seen.add(id(x))
        todo.extend(op.operands)
    return False


def _ready_before_use(body, mma: WgmmaOp, arg: Value) -> None:
    """The carried accumulator of a wgmma left in flight is read (other than by that wgmma)
    only after a wait that retires it: one `gpu.wgmma_wait {pending = 0}` before its first
    such use. Not `pending = n` for the n groups this iteration issued before that point,
    though groups retire in order: ptxas cannot count groups across the back edge, and a
    partial wait there made it serialize every wgmma of the kernel (C7514: an attention
    loop written with the next block's scores first, 408 against 517 TFLOP/s on an H200)."""
    others = [(u, i) for u, i in arg.uses if u is not mma]
    if not others:
        return
    first = min(body.ops.index(holder_in(body, u)) for u, _ in others)
    ready = WgmmaWaitOp([arg], [arg.type], {"pending": 0}, (), mma.loc)
    body.insert(first, ready)
    for u, i in others:
        u.set_operand(i, ready.results[0])


def _slot_buffers(cands: List[_Candidate], stages: int) -> Dict[int, Value]:
    """A buffer with a slot per stage for each candidate's buffer, by id of the old alloc."""
    bufs = {}
    for c in cands:
        old = c.alloc
        if id(old) in bufs:
            continue
        b = Builder().before(old)
        b.loc = old.loc
        new = b.create(AllocOp, shape=[stages] + list(old.attrs["shape"]), layout=_with_slots(old.attrs["layout"]),
                       result_types=[old.results[0].type])
        bufs[id(old)] = new.result
    return bufs


_STAGING = (LocalStoreOp, FenceProxyAsyncOp, BarrierOp)


def _op_before(loop: T.ForOp) -> Optional[Op]:
    ops = loop.parent.ops
    i = ops.index(loop)
    return ops[i - 1] if i else None


def _issue_before_staging(loop: T.ForOp, before: Optional[Op]) -> None:
    """Move a TMA ring's prologue (the ops after `before`, up to the loop) above the staging
    of tiles loaded before the loop (attention's Q: its stores to shared memory, their fence
    and barrier), so the first copies are in flight while those loads land instead of after.
    It passes only staging ops and side-effect-free ones, none defining a value it uses, and
    moves only where it passes a staging op (a GEMM's K loop, with none, keeps its order).
    Not for cp.async rings: their per-thread addresses, live across the staging, cost
    registers (the MLA decode kernel spilled)."""
    ops = loop.parent.ops
    if before is not None and before.parent is not loop.parent:
        return   # erased by the rewrite: where the prologue begins is not known
    start = ops.index(before) + 1 if before is not None else 0
    group = ops[start:ops.index(loop)]
    used = {id(v) for op in group for v in op.operands}
    top = start
    for k in range(start - 1, -1, -1):
        x = ops[k]
        if x.regions or any(id(r) in used for r in x.results):
            break
        if isinstance(x, _STAGING):
            top = k
        elif not is_side_effect_free(x):
            break
    if top == start:
        return
    for op in group:
        ops.remove(op)
    ops[top:top] = group


def _pipeline(loop: T.ForOp, groups: List["_Group"], cands: List[_Candidate], stages: int, lag) -> None:
    """Ring `cands` (the stores of `groups` that copies can replace; a group's other stores,
    such as a register tile's, stay between its barriers) in `stages` slots."""
    body = loop.body
    ahead_by = stages - 1 - (1 if lag else 0)  # iterations the copies run ahead
    iv = body.args[0]
    lb, ub, step = loop.operands[:3]
    i32 = ScalarType(dt.int32)
    bufs = _slot_buffers(cands, stages)
    # prologue
    pre = Builder().before(loop)
    pre.loc = loop.loc
    for s in range(ahead_by):
        iv_s = iteration_at(pre, lb, step, s)
        slot = build_constant(pre, i32, s)
        live = iteration_live(pre, lb, step, s, ub)
        for c in cands:
            _issue(pre, c, iv_s, live, slot, bufs[id(c.alloc)], iv)
        pre.create(AsyncCommitOp)
    # the first group's two barriers become wait + barrier + prefetch (every group's copies
    # of an iteration in one commit group); a later group whose stores all became copies
    # needs no barriers of its own: that wait and barrier covered its slots too
    ringed = {id(c.store) for c in cands}
    barrier = groups[0].before
    at = Builder().before(barrier)
    at.loc = loop.loc
    count = iteration_count(at, iv, lb, step)
    nst = build_constant(at, i32, stages)
    read_slot = at.value(T.ModOp, count, nst)
    write_slot = at.value(T.ModOp, at.value(T.AddOp, count, build_constant(at, i32, ahead_by)), nst)
    ahead = iteration_at(at, iv, step, ahead_by)
    at.create(AsyncWaitOp, pending=ahead_by - 1)
    if any(g.fence is not None for g in groups if any(id(st) in ringed for st in g.stores)):
        at.create(FenceProxyAsyncOp)  # cp.async writes, then wgmma reads through the async proxy
    at.create(BarrierOp)
    live = iteration_live(at, iv, step, ahead_by, ub)
    for c in cands:
        _issue(at, c, ahead, live, write_slot, bufs[id(c.alloc)], iv)
    at.create(AsyncCommitOp)
    for i, g in enumerate(groups):
        kept = [st for st in g.stores if id(st) not in ringed]
        for st in g.stores:
            if id(st) in ringed:
                st.erase()
        if i == 0 or not kept:
            g.before.erase()   # the first group's role is the wait's barrier now
        if not kept:
            if g.fence is not None:
                g.fence.erase()
            g.after.erase()
    for c in cands:
        for user, i in list(c.alloc.results[0].uses):
            if isinstance(user, WgmmaOp):
                _reslot_wgmma(user, bufs, read_slot)
            elif isinstance(user, LdMatrixOp):
                nb = Builder().before(user)
                new = nb.create(LdMatrixOp, bufs[id(c.alloc)], read_slot, result_types=[user.results[0].type],
                                loc=user.loc)
                user.results[0].replace_all_uses_with(new.result)
                user.erase()
    for c in cands:
        if not c.load.results[0].uses:
            c.load.erase()
        if c.alloc.parent is not None and not c.alloc.results[0].uses:
            c.alloc.erase()
    post = Builder().before(loop)
    post.index += 1
    post.create(AsyncWaitOp, pending=0, loc=loop.loc)
    if lag:
        wait, j = lag
        wait.attrs["pending"] = 1
        _ready_before_use(body, wait.operands[0].owner, body.args[1 + j])
        res = loop.results[j]
        done = post.create(WgmmaWaitOp, res, pending=0, result_types=[res.type], loc=loop.loc)
        for user, i in list(res.uses):
            if user is not done:
                user.set_operand(i, done.results[0])


def _reslot_wgmma(user: WgmmaOp, bufs, read_slot: Value) -> None:
    """The wgmma reading slot `read_slot` of the new multi-slot buffers."""
    a, b, acc = user.operands[:3]
    nb = Builder().before(user)
    new = nb.create(WgmmaOp, bufs.get(id(a.owner), a), bufs.get(id(b.owner), b), acc, read_slot,
                    result_types=[user.results[0].type], loc=user.loc, **user.attrs)
    user.results[0].replace_all_uses_with(new.result)
    user.erase()


class _Group:
    """accelerate_dot's `barrier; stores; [gpu.fence_proxy_async]; barrier` in a loop body."""
    def __init__(self, before: BarrierOp, stores: List[LocalStoreOp], fence, after: BarrierOp):
        self.before, self.stores, self.fence, self.after = before, stores, fence, after


def _store_groups(loop: T.ForOp) -> List[_Group]:
    """Every such group of the loop body, in order (one per dot that stages operands)."""
    ops, out, i = loop.body.ops, [], 0
    while i < len(ops):
        if isinstance(ops[i], LocalStoreOp) and i > 0 and isinstance(ops[i - 1], BarrierOp):
            j = i
            while j < len(ops) and isinstance(ops[j], LocalStoreOp):
                j += 1
            fence = ops[j] if j < len(ops) and isinstance(ops[j], FenceProxyAsyncOp) else None
            k = j + 1 if fence is not None else j
            if k < len(ops) and isinstance(ops[k], BarrierOp):
                out.append(_Group(ops[i - 1], list(ops[i:j]), fence, ops[k]))
                i = k + 1
                continue
        i += 1
    return out


def _computed(store: LocalStoreOp) -> bool:
    """Whether a group's store stages a tile computed in registers, not one loaded."""
    return not isinstance(store.operands[1].owner, (T.LoadOp, T.LoadMaskedOp))


def _tma_candidates(groups: List["_Group"], loop: T.ForOp):
    """(candidates, their tma_origin markers) when TMA can fill every store of every group
    (attention: K's and V's)."""
    markers = tma_markers(loop)
    cands, origins = [], []
    for store in [st for g in groups for st in g.stores]:
        load, alloc = store.operands[1].owner, store.operands[0].owner
        origin = tma_origin(load, markers) if isinstance(load, T.LoadMaskedOp) else None
        if origin is None or load.parent is not loop.body or len(load.results[0].uses) != 1 \
                or not isinstance(alloc, AllocOp) or loop in _ancestors(alloc) \
                or any(not isinstance(u, (LocalStoreOp, WgmmaOp)) for u, _ in alloc.results[0].uses) \
                or loop_slice(loop.body, list(origin.operands[1:]), loop.body.args[0]) is None \
                or not copies_as_it_lies(alloc.attrs["layout"], origin.operands[0].type, has_slot=False,
                                         transposed=tile_transposed(origin)):
            return None
        cands.append(_Candidate(store, load, alloc, []))
        origins.append(origin)
    return cands, origins


def _ring_lag(module: Module, loop: T.ForOp, cands: List[_Candidate], stages: int, carry: bool):
    """_wgmma_lag of the ring: the chain's form only with `carry`, and then the module says it
    carries a wgmma beyond GEMM's form (compile_module builds it again without where it spills)."""
    strict = _wgmma_lag(loop, cands, stages, strict=True)
    if strict is not None or not carry:
        return strict
    lag = _wgmma_lag(loop, cands, stages)
    if lag is not None:
        module.attrs["carried_wgmma"] = True
    return lag


def _tma_slice(origin):
    body = origin.parent
    return loop_slice(body, list(origin.operands[1:]), body.args[0])


def _ringed_groups(groups: List[_Group], loop: T.ForOp, remarks=None):
    """(the groups that take part, their candidates): a group takes part when each of its
    stores is a candidate or stores a tile computed in registers (p of attention); a load
    that cannot be a copy (2-byte accesses) keeps its group synchronous, as it was (and
    `remarks` hears why)."""
    out, cands = [], []
    for g in groups:
        mine = [_candidate_why(st, loop) for st in g.stores]
        bad = [(st.operands[1].owner, why) for (c, why), st in zip(mine, g.stores)
               if c is None and not _computed(st)]
        if bad:
            if remarks is not None:
                load, why = bad[0]
                remarks.add("loop", f"the tc.dot operand loaded at line {load.loc.line} is not pipelined "
                                    f"(read synchronously each iteration): {why}", loop.loc)
            continue
        out.append(g)
        cands += [c for c, _ in mine if c is not None]
    return out, cands


def _fitting_stages(loop: Op, cands: List[_Candidate], stages: int, shared_limit: int) -> int:
    """The most stages, at most `stages`, whose slots fit `shared_limit` beside the buffers
    live during `loop` (each candidate's buffer is one slot of its ring; buffers of other
    loops, which allocate_shared lets share bytes with this one's, do not count)."""
    func = loop
    while func.parent_op() is not None:
        func = func.parent_op()
    placed = live_alloc_bytes(func, loop)
    ring = sum({id(c.alloc): c.alloc.nbytes for c in cands}.values())
    while stages >= 2 and placed + (stages - 1) * ring > shared_limit:
        stages -= 1
    return stages


def pipeline_loads(module: Module, *, num_stages: int, shared_limit: int, remarks, carry: bool = True) -> Module:
    """Ring the loads that feed tensor-core dots in every loop, `num_stages` slots deep (a
    tc.range loop's own num_stages instead; fewer where `shared_limit` bytes per CTA do not
    hold them; none below 2). `remarks` (tilec.remarks.Remarks) hears, per such loop, the
    ring it got or why none. `carry=False` keeps a wgmma in flight across iterations only
    where it is the loop's one wgmma reading the ring (GEMM's K loop), as `_wgmma_lag`'s
    `strict` (the compiler's second build of a kernel whose first one spilled); with
    `carry`, a module that keeps one in flight beyond that form says so
    (`module.attrs["carried_wgmma"]`)."""
    def remark(loop, text):
        if remarks is not None:
            remarks.add("loop", text, loop.loc)

    changed = False
    for loop in [op for op in module.walk() if isinstance(op, T.ForOp)]:
        wanted = loop.attrs.get("num_stages") or num_stages   # tc.range(num_stages=) sets its own
        groups = _store_groups(loop)
        if not groups:
            continue
        if wanted < 2:
            remark(loop, f"the loads of the loop's tc.dot operands are not pipelined: num_stages={wanted}")
            continue
        # groups that stage only tiles computed in registers (dS of the backward's dQ = dS K)
        # stay as they are: the ring is the loads'
        loaded = [g for g in groups if not all(_computed(st) for st in g.stores)]
        tma = _tma_candidates(loaded, loop) if loaded else None
        # a TMA ring keeps its depth (cp.async's may be shallower) and a wgmma in flight
        lag = _ring_lag(module, loop, tma[0], wanted, carry) \
            if tma is not None and _fitting_stages(loop, tma[0], wanted, shared_limit) == wanted else None
        if lag is not None:
            cands, origins = tma
            before = _op_before(loop)
            pipeline_tma(loop, loaded, cands, origins, wanted, lag, _slot_buffers, _tma_slice, clone_ops,
                         _reslot_wgmma, _ready_before_use)
            _issue_before_staging(loop, before)
            remark(loop, f"pipelined: the tc.dot operands' loads go through a TMA ring of {wanted} stages "
                         f"(mbarriers), one wgmma group in flight")
            changed = True
            continue
        groups, cands = _ringed_groups(groups, loop, remarks)
        stages = _fitting_stages(loop, cands, wanted, shared_limit) if cands else 0
        if cands and stages < 2:
            remark(loop, f"the tc.dot operands' loads are not pipelined: 2 slots of their "
                         f"{sum({id(c.alloc): c.alloc.nbytes for c in cands}.values())}-byte buffers do not fit "
                         f"the {shared_limit} bytes of shared memory beside the other buffers")
        if stages < 2:
            continue
        lag = _ring_lag(module, loop, cands, stages, carry)
        fewer = f" ({wanted} asked; more do not fit shared memory)" if stages < wanted else ""
        remark(loop, f"pipelined: {len(cands)} tc.dot operand load(s) go through a cp.async ring of {stages} "
                     f"stages{fewer}" + (", one wgmma group in flight" if lag else ""))
        _pipeline(loop, groups, cands, stages, lag)
        changed = True
    for op in [o for o in module.walk() if isinstance(o, TmaOriginOp)]:
        op.erase()  # markers of loads that TMA did not take: they only held operands alive
        changed = True
    return dce(module) if changed else module
