"""Code that runs only where a condition holds: a branch around it, its value merged."""
from __future__ import annotations

from .casts import cast_bool

__all__ = ["guarded"]


def guarded(ctx, mask, emit, fallback=None):
    """Run `emit()` only where `mask` holds; returns its value merged with `fallback`."""
    if mask is None:
        return emit()
    b = ctx.builder
    cur = b.block
    then, merge = ctx.new_block("mask.then"), ctx.new_block("mask.end")
    b.cbranch(cast_bool(b, mask), then, merge)
    b.position_at_end(then)
    val = emit()
    then_end = b.block
    b.branch(merge)
    b.position_at_end(merge)
    if fallback is None:
        return None
    phi = b.phi(val.type)
    phi.add_incoming(val, then_end)
    phi.add_incoming(fallback, cur)
    return phi
