"""Common subexpression elimination by scoped value numbering.

Walking each block in order, every pure op without regions gets a key: its name,
the value numbers of its operands (sorted for commutative ops), its attributes
and its result types. An op whose key was seen before in the current block or in
an enclosing one is replaced by the earlier op's results. Scopes nest with the
regions: a nested block starts from a copy of its parent's table, so a value
defined outside a loop or branch can replace one computed inside it, never the
other way round, and two sibling branches never share entries.

Ops that read or write memory, or that own regions, are never merged: two loads
of one address may see different data, and regions would need deep comparison.
"""
from __future__ import annotations

from typing import Dict, Tuple

from tilec.ir import Block, Module, Op
from tilec.ir import tile_ops as T
from tilec.ir.printer import format_attr

from .rewrite import dtype_of, replace_op

__all__ = ["cse", "is_cse_candidate"]


def is_cse_candidate(op: Op) -> bool:
    traits = op.traits
    return (bool(op.results) and not op.regions and ("pure" in traits or "elementwise" in traits)
            and "reads" not in traits and "writes" not in traits)


def _zero_sign_depends_on_order(op: Op) -> bool:
    """Float min/max of +0.0 and -0.0 return their first operand (numpy, hence the
    interpreter), so swapping the operands can change the sign of a zero result."""
    if not isinstance(op, (T.MinimumOp, T.MaximumOp)):
        return False
    d = dtype_of(op.operands[0])
    return d is not None and d.is_float


class _Numbering:
    """Value numbers: an operand is identified by the number of the value that defines it."""

    def __init__(self):
        self.numbers: Dict[int, int] = {}
        self.alive: list = []  # keeps numbered values alive so their ids are never reused

    def of(self, v) -> int:
        n = self.numbers.get(id(v))
        if n is None:
            n = self.numbers[id(v)] = len(self.numbers)
            self.alive.append(v)
        return n


def _key(op: Op, numbering: _Numbering) -> Tuple:
    operands = [numbering.of(v) for v in op.operands]
    if op.has_trait("commutative") and not _zero_sign_depends_on_order(op):
        operands.sort()
    # format_attr distinguishes 0.0 from -0.0 and 1 from 1.0 from true, as it must
    attrs = tuple(sorted((k, format_attr(v)) for k, v in op.attrs.items()))
    return (op.name, tuple(operands), attrs, tuple(str(r.type) for r in op.results))


def _cse_block(block: Block, table: Dict[Tuple, Op], numbering: _Numbering) -> int:
    removed = 0
    for op in list(block.ops):
        if is_cse_candidate(op):
            key = _key(op, numbering)
            earlier = table.get(key)
            if earlier is not None:
                replace_op(op, earlier.results)
                removed += 1
                continue
            table[key] = op
        for region in op.regions:
            for b in region.blocks:
                removed += _cse_block(b, dict(table), numbering)
    return removed


def cse(module: Module) -> Module:
    """Merge identical pure computations (see the module docstring)."""
    for op in module.ops:
        for region in op.regions:
            for b in region.blocks:
                _cse_block(b, {}, _Numbering())
    return module
