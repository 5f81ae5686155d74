"""The byte count of a prefix-masked cp.async group (codegen/rules_mma._common_conjuncts):
a group's mask bits are typically liveness & row bound & each column's bound; the count is
then select(liveness & row bound, Σ column bounds, 0), the column part loop-invariant."""
from __future__ import annotations

from llvmlite import ir

from tilec.lowering.codegen.rules_mma import _common_conjuncts


def _builder(n_args):
    fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [ir.IntType(1)] * n_args), "f")
    return ir.IRBuilder(fn.append_basic_block()), fn.args


def test_shared_conjuncts_are_factored_out_of_every_bit():
    b, (live, row, c0, c1, c2) = _builder(5)
    bits = [b.and_(live, b.and_(row, c)) for c in (c0, c1, c2)]
    common, rest = _common_conjuncts(b, bits)
    assert rest == [c0, c1, c2]
    assert common.opname == "and" and {id(x) for x in common.operands} == {id(live), id(row)}


def test_operand_order_does_not_matter_and_unshared_bits_stay():
    b, (live, c0, c1) = _builder(3)
    bits = [b.and_(c0, live), b.and_(live, c1)]
    common, rest = _common_conjuncts(b, bits)
    assert common is live and rest == [c0, c1]
    mixed = [b.and_(c0, live), c1]                   # one bit is no `and`: nothing to factor
    assert _common_conjuncts(b, mixed) == (None, mixed)
    unshared = [b.and_(c0, c1), b.and_(live, c1)]    # c1 shared, c0 / live not
    common, rest = _common_conjuncts(b, unshared)
    assert common is c1 and rest == [c0, live]
