"""Shared helpers of the local rewrite passes: constants, replacement, a pattern driver.

A pattern is a function `pattern(op) -> bool` that either rewrites `op` (replacing
its results and erasing it, or changing it in place) and returns True, or leaves
the IR untouched and returns False. `apply_patterns` runs a table of them
(op class -> patterns) over a module until none fires.
"""
from __future__ import annotations

import math

from typing import Callable, Dict, List, Optional, Sequence

from tilec import dtypes as dt
from tilec.ir import Block, BlockArgument, Builder, Module, Op, Value, defined_inside
from tilec.ir import tile_ops as T
from tilec.ir.types import ScalarType, element_type

__all__ = [
    "NOT_CONSTANT", "constant_of", "is_constant", "make_constant", "build_constant", "replace_op", "dtype_of",
    "is_side_effect_free", "is_removable", "apply_patterns", "PatternTable", "inline_block_before",
    "normalize_constant", "iteration_count", "iteration_at", "iteration_live", "loop_slice", "clone_ops",
    "invariant_loop", "enclosing_loops",
]

Pattern = Callable[[Op], bool]
PatternTable = Dict[type, Sequence[Pattern]]


class _NotConstant:
    def __repr__(self) -> str:
        return "NOT_CONSTANT"


# Constants may hold 0, False or None-like values, so "not a constant" needs its own marker.
NOT_CONSTANT = _NotConstant()


def constant_of(v: Value):
    """The value attribute of the tile.constant defining `v`, or NOT_CONSTANT."""
    op = v.owner
    if isinstance(op, T.ConstantOp):
        return op.attrs["value"]
    return NOT_CONSTANT


def is_constant(v: Value, *values) -> bool:
    """`v` is a constant; if `values` are given, one equal (as a number) to one of them.

    Booleans compare as 0/1 so that a mask written `true` or `1` is recognized alike.
    """
    c = constant_of(v)
    if c is NOT_CONSTANT:
        return False
    return not values or any(_same_number(c, w) for w in values)


def _same_number(c, w) -> bool:
    if isinstance(c, (list, dict)) or c != w:
        return False
    # 0.0 and -0.0 compare equal but are different constants (x + -0.0 == x, x + 0.0 is not)
    return not (c == 0 and math.copysign(1.0, c) != math.copysign(1.0, w))


def dtype_of(v: Value):
    e = element_type(v.type)
    return e.dtype if isinstance(e, ScalarType) else None


def normalize_constant(dtype, value):
    """The Python value a constant of `dtype` holds: bool for i1, int for ints, float for floats."""
    if dtype.is_bool:
        return bool(value)
    if dtype.is_int:
        return int(value)
    return float(value)


def make_constant(before: Op, type_, value) -> Value:
    """Insert a tile.constant of `type_` holding `value` just before `before`."""
    value = normalize_constant(element_type(type_).dtype, value)
    c = T.ConstantOp([], [type_], {"value": value}, (), before.loc)
    blk = before.parent
    blk.insert(blk.ops.index(before), c)
    return c.result


def build_constant(at: Builder, type_, value) -> Value:
    """A tile.constant of `type_` holding `value`, created where the builder `at` stands."""
    return at.create(T.ConstantOp, result_types=[type_], value=value).result


def trip_count(at: Builder, lb: Value, ub: Value, step: Value) -> Value:
    """How many iterations a loop from `lb` to `ub` by a positive `step` runs, as an i32 (0 when
    ub <= lb)."""
    one = build_constant(at, lb.type, 1)
    n = at.value(T.FloorDivOp, at.value(T.SubOp, at.value(T.AddOp, at.value(T.SubOp, ub, lb), step), one), step)
    n = at.value(T.MaximumOp, n, build_constant(at, lb.type, 0))
    return n if n.type == ScalarType(dt.int32) else at.value(T.CastOp, n, to=dt.int32)


def iteration_count(at: Builder, iv: Value, lb: Value, step: Value) -> Value:
    """(iv - lb) // step as an i32: the iteration of a loop whose induction variable is `iv`
    (the slot a ring of copies reads is this count modulo its stages)."""
    count = at.value(T.FloorDivOp, at.value(T.SubOp, iv, lb), step)
    i32 = ScalarType(dt.int32)
    return count if count.type == i32 else at.value(T.CastOp, count, to=dt.int32)


def iteration_at(at: Builder, iv: Value, step: Value, ahead: int) -> Value:
    """`iv + ahead * step` in `iv`'s type: the induction variable `ahead` iterations after `iv`
    (`iv` itself for 0). Staged loops issue the copies of that iteration."""
    if ahead == 0:
        return iv
    return at.value(T.AddOp, iv, at.value(T.MulOp, step, build_constant(at, step.type, ahead)))


def iteration_live(at: Builder, iv: Value, step: Value, ahead: int, ub: Value) -> Value:
    """The i1 scalar "iteration `iv + ahead * step` of the loop exists": below `ub` counting
    up, above it counting down (a constant step picks its direction at compile time). An
    i32 loop compares in i64: near the top of the i32 range `iv + ahead * step` would wrap
    to a negative value below `ub`, and the copies issued for that iteration would read
    outside the tensor."""
    wide = (iv, step, ub)
    if iv.type != ScalarType(dt.int64):
        wide = tuple(at.value(T.CastOp, v, to=dt.int64) for v in wide)
    value = iteration_at(at, wide[0], wide[1], ahead)
    ub = wide[2]
    known = constant_of(step)
    if known is not NOT_CONSTANT:
        return at.value(T.CmpOp, value, ub, pred="lt" if known > 0 else "gt")
    zero = build_constant(at, step.type, 0)
    up = at.value(T.AndOp, at.value(T.CmpOp, step, zero, pred="gt"), at.value(T.CmpOp, value, ub, pred="lt"))
    down = at.value(T.AndOp, at.value(T.CmpOp, step, zero, pred="lt"), at.value(T.CmpOp, value, ub, pred="gt"))
    return at.value(T.OrOp, up, down)



def holder_in(body, op: Op) -> Optional[Op]:
    """The op of block `body` that is `op` or holds it in its regions; None when `op` lies
    outside `body`."""
    while op is not None and op.parent is not body:
        op = op.parent_op()
    return op


def enclosing_loops(op: Op) -> List[Op]:
    """The loops around `op`, innermost first (through every kind of region)."""
    out = []
    p = op.parent_op()
    while p is not None:
        if isinstance(p, (T.ForOp, T.WhileOp)):
            out.append(p)
        p = p.parent_op()
    return out


def invariant_loop(op: Op, v: Value) -> Optional[Op]:
    """The outermost of the loops around `op` (through loops only) that do not define `v`:
    where work on `v` alone can be done once, before it; None when the innermost defines it."""
    best, p = None, op.parent_op()
    while isinstance(p, (T.ForOp, T.WhileOp)) and not defined_inside(v, p):
        best, p = p, p.parent_op()
    return best


def loop_slice(body, roots: Sequence[Value], iv: Value, view_loads: bool = False,
               pointer_loads: bool = False) -> Optional[List[Op]]:
    """The ops of the loop body `body` that compute `roots` from its induction variable `iv`
    and loop invariants, in body order: pure and elementwise ops (and `tile.load_view`s with
    `view_loads`: they read padding outside their view, so any index is safe; and tile.load /
    tile.load_masked with `pointer_loads`: the caller must make a copy for another iteration
    safe, see pipeline_loads' `clone_guarded`). None if one of them depends on a carried
    value, has regions or other effects."""
    need: Dict[int, Op] = {}
    todo = list(roots)
    while todo:
        v = todo.pop()
        if isinstance(v, BlockArgument):
            if v is not iv and v.block is body:
                return None  # a loop-carried value
            continue
        op = v.owner
        if op is None or op.parent is not body or id(op) in need:
            continue  # defined outside the loop (invariant), or seen
        if op.regions or not (op.has_trait("pure") or op.has_trait("elementwise")
                              or (view_loads and isinstance(op, T.LoadViewOp))
                              or (pointer_loads and isinstance(op, (T.LoadOp, T.LoadMaskedOp)))):
            return None
        need[id(op)] = op
        todo.extend(op.operands)
    return [op for op in body.ops if id(op) in need]


def clone_ops(ops: Sequence[Op], at: Builder, mapping: Dict[int, Value]) -> None:
    """Copies of `ops` (no regions) where `at` stands, their operands through `mapping`
    (id of an old value -> new value), which learns each copy's results."""
    for op in ops:
        new = type(op)([mapping.get(id(v), v) for v in op.operands], [r.type for r in op.results],
                       dict(op.attrs), (), op.loc)
        at.insert(new)
        for r, nr in zip(op.results, new.results):
            mapping[id(r)] = nr

def replace_op(op: Op, values: Sequence[Value]) -> None:
    """Replace every use of `op`'s results by `values` and erase `op`."""
    for r, v in zip(op.results, values):
        if r is not v:
            r.replace_all_uses_with(v)
    op.erase()


def inline_block_before(block: Block, op: Op) -> List[Value]:
    """Move `block`'s ops (its terminator excluded) before `op`; return the terminator's operands.

    The caller replaces the block arguments' uses first when the block has any.
    """
    dest = op.parent
    term = block.terminator
    for o in list(block.ops):
        if o is term:
            break
        block.ops.remove(o)
        dest.insert(dest.ops.index(op), o)
    return list(term.operands) if term is not None else []


_FREE_TRAITS = ("pure", "elementwise", "reads")
_STRUCTURED = (T.IfOp, T.ForOp)  # they terminate and have no effect beyond their bodies


def is_side_effect_free(op: Op) -> bool:
    """Op whose only effect is its results, so that DCE may drop it when they are unused.

    That is an op with a pure, elementwise or reads trait (dropping an unused read changes
    no state), or a tile.if / tile.for, provided nothing nested in it writes. Ops that
    declare none of these (a barrier, a warp collective, an op of a new dialect) are
    kept; tile.while is kept too (it may not terminate).
    """
    if op.has_trait("writes") or op.has_trait("terminator"):
        return False
    if not (isinstance(op, _STRUCTURED) or any(op.has_trait(t) for t in _FREE_TRAITS)):
        return False
    # a nested tile.return is an early exit of the kernel: an effect
    return all((o.has_trait("terminator") and not isinstance(o, T.ReturnOp)) or is_side_effect_free(o)
               for r in op.regions for b in r.blocks for o in b.ops)


def is_removable(op: Op) -> bool:
    """Unused op that DCE may erase."""
    return is_side_effect_free(op) and all(not r.uses for r in op.results)


def _patterns_for(table: PatternTable, cls: type, cache: dict) -> List[Pattern]:
    pats = cache.get(cls)
    if pats is None:
        pats = [p for k in cls.__mro__ if k in table for p in table[k]]
        cache[cls] = pats
    return pats


def _attached(op: Op, module: Module) -> bool:
    while True:
        blk = op.parent
        if blk is None:
            return False
        if blk is module.body:
            return True
        if blk.parent is None or blk.parent.parent is None:
            return False
        op = blk.parent.parent


def apply_patterns(module: Module, table: PatternTable, max_rounds: int = 64) -> int:
    """Apply `table` to every op until no pattern fires; return the number of rewrites.

    Each round walks the module in pre-order; an op erased by an earlier rewrite in
    the same round is skipped. A table that keeps firing past `max_rounds` is a bug
    in a pattern (two rewrites undoing each other), reported as such.
    """
    cache: dict = {}
    total = 0
    for _ in range(max_rounds):
        fired = 0
        for op in list(module.walk()):
            if not _attached(op, module):
                continue  # erased (or inside an erased op) by an earlier rewrite this round
            for pat in _patterns_for(table, type(op), cache):
                if pat(op):
                    fired += 1
                    break
        total += fired
        if not fired:
            return total
    raise RuntimeError(f"rewrite patterns did not reach a fixed point in {max_rounds} rounds")

