"""Structured control flow: tile.for / tile.while / tile.if become basic blocks and phis.

Loop-carried tiles become one phi per register element (see walker.flatten). A
region may also end in tile.return (an early exit of the whole kernel, which the
interpreter allows too): that block returns, and contributes nothing to the phis.
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from .casts import cast_bool
from .walker import flatten, lower_region, rule, unflatten


def _phis(b, like):
    return [b.phi(v.type) for v in flatten(like)]


def _add_incoming(phis, vals, block):
    for p, v in zip(phis, flatten(vals)):
        p.add_incoming(v, block)


def _yielded(ctx, term, what):
    if term is None:
        raise ValueError(f"{what} region has no terminator")
    return [ctx.get(v) for v in term.operands]


def _returns(ctx, term) -> bool:
    """Lower an early tile.return ending a region; True when it did."""
    if term is None or not isinstance(term, T.ReturnOp):
        return False
    if term.operands:
        raise ValueError("a kernel cannot return values")
    ctx.builder.ret_void()
    return True


def trip_count(b, lb, ub, step):
    """How many iterations range(lb, ub, step) runs, unsigned, of the bounds' width. Taken
    from the distance between the bounds, so only real iterations need `iv + step` to be
    representable: a loop ending within one step of the type's limit ends there instead of
    wrapping around to a value that passes `iv < ub`."""
    zero, one = ir.Constant(lb.type, 0), ir.Constant(lb.type, 1)

    def runs(lo, hi, stride):  # (hi - lo - 1) // stride + 1 when hi > lo, else 0
        n = b.add(b.udiv(b.sub(b.sub(hi, lo), one), stride), one)
        return b.select(b.icmp_signed(">", hi, lo), n, zero)

    if isinstance(step, ir.Constant):  # the usual case: one direction, a division by a constant
        return runs(lb, ub, step) if step.constant > 0 else runs(ub, lb, b.neg(step))
    positive = b.icmp_signed(">", step, zero)
    return b.select(positive, runs(lb, ub, step), runs(ub, lb, b.neg(step)))


@rule(T.ForOp)
def _for(ctx, op):
    b = ctx.builder
    lb, ub, step = (ctx.get(v) for v in op.operands[:3])
    inits = [ctx.get(v) for v in op.group("inits")]
    trips = trip_count(b, lb, ub, step)
    pre = b.block
    header, body, exit_ = ctx.new_block("for.header"), ctx.new_block("for.body"), ctx.new_block("for.exit")
    b.branch(header)
    b.position_at_end(header)
    left = b.phi(lb.type, name="left")   # iterations still to run: one register, as `ub` was
    iv = b.phi(lb.type, name="iv")
    carried = _phis(b, inits)
    left.add_incoming(trips, pre)
    iv.add_incoming(lb, pre)
    _add_incoming(carried, inits, pre)
    # range() semantics for either sign of the step, counted: see trip_count.
    b.cbranch(b.icmp_unsigned("!=", left, ir.Constant(lb.type, 0)), body, exit_)
    b.position_at_end(body)
    cur = unflatten(list(carried), inits)
    term = lower_region(ctx, op.body, [iv] + cur)
    if not _returns(ctx, term):
        nxt = _yielded(ctx, term, "tile.for body")
        latch = b.block
        left_next = b.sub(left, ir.Constant(lb.type, 1), name="left.next")
        iv_next = b.add(iv, step, name="iv.next")
        b.branch(header)
        left.add_incoming(left_next, latch)
        iv.add_incoming(iv_next, latch)
        _add_incoming(carried, nxt, latch)
    b.position_at_end(exit_)
    for r, v in zip(op.results, unflatten(list(carried), inits)):
        ctx.set(r, v)


@rule(T.WhileOp)
def _while(ctx, op):
    b = ctx.builder
    inits = [ctx.get(v) for v in op.operands]
    pre = b.block
    before, after, exit_ = ctx.new_block("while.cond"), ctx.new_block("while.body"), ctx.new_block("while.exit")
    b.branch(before)
    b.position_at_end(before)
    carried = _phis(b, inits)
    _add_incoming(carried, inits, pre)
    term = lower_region(ctx, op.regions[0].block, unflatten(list(carried), inits))
    if term is None or term.name != "tile.condition":
        raise ValueError("the before region of tile.while must end in tile.condition")
    cond = cast_bool(b, ctx.get(term.operands[0]))
    fwd = [ctx.get(v) for v in term.operands[1:]]
    b.cbranch(cond, after, exit_)
    # The results are the values forwarded by tile.condition when it says stop.
    b.position_at_end(after)
    # The forwarded values dominate the body and the exit, so both read them directly.
    term2 = lower_region(ctx, op.regions[1].block, fwd)
    if not _returns(ctx, term2):
        nxt = _yielded(ctx, term2, "tile.while body")
        _add_incoming(carried, nxt, b.block)
        b.branch(before)
    b.position_at_end(exit_)
    for r, v in zip(op.results, fwd):
        ctx.set(r, v)


@rule(T.IfOp)
def _if(ctx, op):
    b = ctx.builder
    cond = cast_bool(b, ctx.get(op.operands[0]))
    then, els, merge = ctx.new_block("if.then"), ctx.new_block("if.else"), ctx.new_block("if.end")
    b.cbranch(cond, then, els)
    outs = []
    for blk, region in ((then, op.regions[0]), (els, op.regions[1])):
        b.position_at_end(blk)
        vals = []
        if region.blocks:
            term = lower_region(ctx, region.block, [])
            if _returns(ctx, term):
                continue
            vals = _yielded(ctx, term, "tile.if branch") if op.results else []
        outs.append((vals, b.block))
        b.branch(merge)
    b.position_at_end(merge)
    if op.results:
        if not outs:  # both branches return: the results are never used
            for r in op.results:
                ctx.set(r, _undef_like(ctx, r))
            return
        like = outs[0][0]
        phis = _phis(b, like)
        for vals, blk in outs:
            _add_incoming(phis, vals, blk)
        for r, v in zip(op.results, unflatten(list(phis), like)):
            ctx.set(r, v)


def _undef_like(ctx, v):
    u = ir.Constant(ctx.ltype(v.type), ir.Undefined)
    return [u] * ctx.num_elems(v.type) if ctx.layout_of(v.type) is not None else u
