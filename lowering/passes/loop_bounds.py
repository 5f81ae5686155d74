"""What a loop's bounds prove about the view blocks its induction variable indexes.

A key loop written `for j in range(n // BN)` (or up to `tc.minimum(..., n // BN)`) only
ever loads whole blocks: `j < n // BN` gives `j * BN + BN <= n`, so the row bounds check of
`tc.load(x, index=(j, ...), shape=(BN, ...))`, where n is that view's extent, is always
true. lower_views leaves such checks out; in an attention loop they cost a compare and
select per copied row and iteration.
"""
from __future__ import annotations

from tilec.ir import Value
from tilec.ir import tile_ops as T
from tilec.ir.core import BlockArgument

from .rewrite import constant_of

__all__ = ["below_block_count"]


def _through_casts(v: Value) -> Value:
    while isinstance(v.owner, T.CastOp):
        v = v.owner.operands[0]
    return v


def _at_most_extent(x: Value, view: Value, dim: int) -> bool:
    """x <= view.shape[dim]: that extent, or the minimum of values one of which is."""
    op = _through_casts(x).owner
    if isinstance(op, T.MinimumOp):
        return any(_at_most_extent(o, view, dim) for o in op.operands)
    return (isinstance(op, T.ViewDimOp) and op.operands[0] is view and op.attrs["dim"] == dim
            and op.attrs["kind"] == "shape")


def _at_most_blocks(u: Value, view: Value, dim: int, block: int) -> bool:
    """u <= view.shape[dim] // block."""
    u = _through_casts(u)
    op = u.owner
    if isinstance(op, T.FloorDivOp):
        c = constant_of(op.operands[1])
        return isinstance(c, int) and c > 0 and c % block == 0 and _at_most_extent(op.operands[0], view, dim)
    if isinstance(op, T.MinimumOp):
        return any(_at_most_blocks(o, view, dim, block) for o in op.operands)
    return below_block_count(u, view, dim, block)


def below_block_count(index: Value, view: Value, dim: int, block: int) -> bool:
    """index < view.shape[dim] // block wherever `index` is computed: the induction variable
    of a loop counting up (a constant step above 0) to such a bound, the minimum of values
    one of which is, or such a bound less a positive constant."""
    index = _through_casts(index)
    if isinstance(index, BlockArgument):
        region = index.block.parent
        loop = region.parent if region is not None else None
        if not isinstance(loop, T.ForOp) or loop.body.args[0] is not index:
            return False
        step = constant_of(loop.operands[2])
        return isinstance(step, int) and step > 0 and _at_most_blocks(loop.operands[1], view, dim, block)
    op = index.owner
    if isinstance(op, T.MinimumOp):
        return any(below_block_count(o, view, dim, block) for o in op.operands)
    if isinstance(op, T.SubOp):
        c = constant_of(op.operands[1])
        return isinstance(c, int) and c >= 1 and _at_most_blocks(op.operands[0], view, dim, block)
    return False
