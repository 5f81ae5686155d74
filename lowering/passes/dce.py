"""Dead code elimination, including dead results of tile.if and dead loop-carried values.

1. Ops without side effects whose results are unused are erased, walking each
   block backwards so that a chain of dead ops goes in one sweep. "Without side
   effects" (rewrite.is_side_effect_free) admits reads and ops with regions that
   write nothing; tile.while is kept (it may not terminate).
2. A tile.if result nobody uses is dropped, with the values both branches yield for it.
3. A tile.for carried value is dead when its result is unused and nothing that
   matters in the body depends on it. Liveness is a fixed point over the body block:
   an op is needed when it has side effects or feeds a needed value; a carried slot
   is live when its result is used or its block argument is needed; a live slot
   makes its yielded value needed. Dead slots lose their init, block argument,
   yielded value and result, and the ops that only computed them go too.
The three steps repeat until nothing changes.
"""
from __future__ import annotations

from typing import List, Set

from tilec.ir import Block, Module, Op
from tilec.ir import tile_ops as T

from .rewrite import is_removable, is_side_effect_free

__all__ = ["dce", "dead_for_slots"]


def _uses_of_op(op: Op):
    """Every value `op` or anything nested in it uses."""
    for o in op.walk():
        yield from o.operands


def _needed_values(body: Block, live_slots: Set[int]) -> Set[int]:
    """ids of the values the body needs when `live_slots` are the live carried values."""
    term = body.terminator
    needed = {id(term.operands[i]) for i in live_slots}
    for op in reversed(body.ops[:-1]):
        if not is_side_effect_free(op) or any(id(r) in needed for r in op.results):
            needed.update(id(v) for v in _uses_of_op(op))
    return needed


def dead_for_slots(op: T.ForOp) -> List[int]:
    """Indices of the carried values of `op` that nothing needs."""
    body = op.body
    n = len(op.results)
    live = {i for i in range(n) if op.results[i].uses}
    while True:
        needed = _needed_values(body, live)
        grown = live | {i for i in range(n) if id(body.args[i + 1]) in needed}
        if grown == live:
            return [i for i in range(n) if i not in live]
        live = grown


def _replace_terminator(block: Block, keep: List[int]) -> None:
    term = block.terminator
    new = type(term).build(*[term.operands[i] for i in keep], loc=term.loc)
    new.attrs.update(term.attrs)
    term.erase()
    block.append(new)


def _rebuild_with_results(op: Op, operands, keep: List[int]) -> Op:
    """A copy of `op` with `operands`, only the results in `keep`, and `op`'s regions moved over."""
    regions, op.regions = op.regions, []
    new = type(op)(operands, [op.results[i].type for i in keep], dict(op.attrs), regions, op.loc)
    blk = op.parent
    blk.insert(blk.ops.index(op), new)
    for j, i in enumerate(keep):
        new.results[j].name_hint = op.results[i].name_hint
        op.results[i].replace_all_uses_with(new.results[j])
    op.erase()
    return new


def _shrink_if(op: T.IfOp) -> bool:
    keep = [i for i, r in enumerate(op.results) if r.uses]
    if len(keep) == len(op.results):
        return False
    for r in op.regions:
        _replace_terminator(r.block, keep)
    _rebuild_with_results(op, list(op.operands), keep)
    return True


def _shrink_for(op: T.ForOp) -> bool:
    dead = dead_for_slots(op)
    if not dead:
        return False
    n = len(op.results)
    keep = [i for i in range(n) if i not in dead]
    body = op.body
    _replace_terminator(body, keep)
    needed = _needed_values(body, set(range(len(keep))))  # slots renumbered: all kept ones live
    for o in reversed(body.ops[:-1]):
        if is_side_effect_free(o) and not any(id(r) in needed for r in o.results):
            o.erase()
    dead_args = {i + 1 for i in dead}
    body.args = [a for i, a in enumerate(body.args) if i not in dead_args]
    for i, a in enumerate(body.args):
        a.index = i
    inits = op.group("inits")
    _rebuild_with_results(op, list(op.operands[:3]) + [inits[i] for i in keep], keep)
    return True


def _dce_block(block: Block) -> bool:
    changed = False
    for op in reversed(list(block.ops)):
        if op.parent is None:
            continue
        for r in op.regions:
            for b in r.blocks:
                changed |= _dce_block(b)
        if is_removable(op):
            op.erase()
            changed = True
        elif isinstance(op, T.IfOp):
            changed |= _shrink_if(op)
        elif isinstance(op, T.ForOp):
            changed |= _shrink_for(op)
    return changed


def dce(module: Module) -> Module:
    """Erase dead ops, dead if results and dead loop-carried values (see the module docstring)."""
    while any([_dce_block(b) for f in module.ops for r in f.regions for b in r.blocks]):
        pass
    return module
