"""rotate_dot_chains: a loop of chained dots computes the next iteration's first dot one
iteration early, so that its tensor-core work overlaps this iteration's softmax.

In a flash-attention loop

    for j in range(lb, ub):
        k = load_view(K, j)               # depends on j and loop invariants only
        s = dot(q, kᵀ, 0)                 # the first dot: nothing carried feeds it
        p = softmax-like(s, carried m, l)
        acc = dot(p, v, acc · alpha)      # the second dot consumes the first's result

the first dot waits for nothing the loop carries, yet every iteration issues it and
waits for it before the softmax can start, and the tensor cores idle while the softmax
runs. The loop is rotated:

    s0 = dot(q, load_view(K, lb)ᵀ, 0)                   # before the loop
    for j in range(lb, ub) carrying (..., s):
        s_next = dot(q, load_view(K, j + step)ᵀ, 0)     # where the first dot was
        p = softmax-like(s, ...)                        # the carried s in its place
        acc = dot(p, v, acc · alpha)
        yield ..., s_next

The values are the same: iteration j uses the dot of iteration j, computed one
iteration earlier. On sm_90a each dot becomes an asynchronous wgmma; `defer_wgmma_waits`
then waits for s_next only where the loop yields it, so the softmax of block j runs on
the CUDA cores while the wgmma of block j + 1 runs on the tensor cores (FlashAttention-3's
intra-warpgroup overlap).

The first dot's operands must come from tensor-view loads (`tile.load_view`) and pure
ops of the induction variable and loop invariants: a view load reads padding where its
tile lies outside the view, so the extra first dot (at `lb` before an empty loop, at
`ub` in the last iteration) touches no memory it may not. Its accumulator must be a
constant, and a second dot of the same loop body must use its result. The pass runs on
tile IR before the views are lowered (on targets with asynchronous tensor-core dots);
one dot per loop is rotated, and none whose loaded operand other ops of the body also use
(`_shares_a_load`: the backward's S = Q Kᵀ, whose K also feeds dQ += dS K).
"""
from __future__ import annotations

from typing import Dict, List

from tilec.ir import Builder, Module, Op, Value
from tilec.ir import tile_ops as T

from .rewrite import clone_ops, iteration_at, loop_slice

__all__ = ["rotate_dot_chains"]


def _feeds_dot(v: Value, body, first: Op) -> bool:
    """Some other dot of `body` uses `v`, directly or through ops of the body."""
    seen, todo = set(), [v]
    while todo:
        for user, _ in todo.pop().uses:
            while user is not None and user.parent is not body:   # an op nested in a body op
                user = user.parent_op()
            if user is None or id(user) in seen:
                continue
            seen.add(id(user))
            if isinstance(user, T.DotOp) and user is not first:
                return True
            todo.extend(user.results)
    return False


def _shares_a_load(ops: List[Op], dot: T.DotOp) -> bool:
    """A tile the first dot loads is also used outside its chain (attention's backward: K
    is Kᵀ of S = Q Kᵀ and B of dQ += dS K). Rotated, that tile would be loaded twice per
    iteration (next block's for the dot, this block's for the rest), in two copy rings,
    and carried registers grow: on an H200 the backward's kernels ran 0-27% slower rotated."""
    chain = {id(o) for o in ops} | {id(dot)}
    return any(isinstance(o, T.LoadViewOp) and any(id(u) not in chain for r in o.results for u, _ in r.uses)
               for o in ops)


def _rotatable(loop: T.ForOp):
    body = loop.body
    iv = body.args[0]
    for op in body.ops:
        if not isinstance(op, T.DotOp) or not isinstance(op.operands[2].owner, T.ConstantOp):
            continue
        ops = loop_slice(body, list(op.operands), iv, view_loads=True)
        if ops is None or not any(isinstance(o, T.LoadViewOp) for o in ops):
            continue
        if _shares_a_load(ops, op):
            continue
        if _feeds_dot(op.results[0], body, op):
            return op, ops
    return None


def _rotate(loop: T.ForOp, dot: T.DotOp, ops: List[Op]) -> T.ForOp:
    body = loop.body
    iv = body.args[0]
    lb, _, step = loop.operands[:3]
    chain = ops + [dot]
    # before the loop: the first dot of iteration lb
    pre = Builder().before(loop)
    pre.loc = dot.loc
    mapping: Dict[int, Value] = {id(iv): lb}
    clone_ops(chain, pre, mapping)
    s0 = mapping[id(dot.results[0])]
    # the loop with one more carried value
    region = loop.regions[0]
    loop.regions = []
    new = T.ForOp(list(loop.operands) + [s0], [r.type for r in loop.results] + [s0.type], dict(loop.attrs), [],
                  loop.loc)
    new.add_region(region)
    Builder().before(loop).insert(new)
    for old, nr in zip(loop.results, new.results):
        old.replace_all_uses_with(nr)
    loop.erase()
    s_cur = body.add_arg(s0.type, dot.results[0].name_hint)
    # in the body, where the dot was: the first dot of the next iteration
    at = Builder().before(dot)
    at.loc = dot.loc
    mapping = {id(iv): iteration_at(at, iv, step, 1)}
    clone_ops(chain, at, mapping)
    s_next = mapping[id(dot.results[0])]
    dot.results[0].replace_all_uses_with(s_cur)
    term = body.terminator
    Builder().before(term).create(T.YieldOp, *term.operands, s_next)
    term.erase()
    for op in reversed(chain):   # this iteration's copies, now unused
        if all(not r.uses for r in op.results):
            op.erase()
    return new


def rotate_dot_chains(module: Module) -> Module:
    for loop in [op for op in module.walk() if isinstance(op, T.ForOp)]:
        found = _rotatable(loop)
        if found is not None:
            _rotate(loop, *found)
    return module
