"""Codegen rule of gpu.warp_specialize (lowering/gpu/ws_ops.py): one branch per role.

    tid >= 32 * num_warps ?  producer: setmaxnreg.dec, then warp num_warps runs the region
                          :  consumers: setmaxnreg.inc, then the region with block barriers
                             turned into a named barrier over the consumer threads

and of the turns of two consumer warpgroups (gpu.pingpong_wait / gpu.pingpong_pass): named
barriers TURN_BARRIER + w of 256 threads, warpgroup w syncing on its own, arriving on the other's.
"""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

from ..gpu.ws_ops import TURN_BARRIER, PingpongPassOp, PingpongWaitOp, WarpSpecializeOp
from .types import I32
from .walker import lower_region, rule

_CONSUMER_BARRIER = 1  # named barrier of the consumer warps (0 stays __syncthreads')


def _setmaxnreg(ctx, kind: str, regs: int) -> None:
    ctx.intrinsic(f"llvm.nvvm.setmaxnreg.{kind}.sync.aligned.u32", ir.VoidType(), [ir.Constant(I32, regs)])


def _lower(ctx, region) -> None:
    term = lower_region(ctx, region.block, [])
    if term is not None and term.operands:
        raise ValueError("a gpu.warp_specialize region yields no values")


@contextmanager
def _setting(ctx, name: str, value):
    """ctx.<name> = value while one role's region is lowered, then what it was."""
    saved = getattr(ctx, name)
    setattr(ctx, name, value)
    try:
        yield
    finally:
        setattr(ctx, name, saved)


@rule(WarpSpecializeOp)
def _warp_specialize(ctx, op):
    b = ctx.builder
    consumers = 32 * ctx.num_warps
    producer, consumer, merge = ctx.new_block("ws.producer"), ctx.new_block("ws.consumer"), ctx.new_block("ws.end")
    b.cbranch(b.icmp_unsigned(">=", ctx.tid, ir.Constant(I32, consumers)), producer, consumer)

    b.position_at_end(producer)
    _setmaxnreg(ctx, "dec", op.attrs["producer_regs"])
    with b.if_then(b.icmp_unsigned("==", ctx.warp, ir.Constant(I32, ctx.num_warps))):
        with _setting(ctx, "leader_tid", consumers):
            _lower(ctx, op.regions[0])
    b.branch(merge)

    b.position_at_end(consumer)
    _setmaxnreg(ctx, "inc", op.attrs["consumer_regs"])
    with _setting(ctx, "named_barrier", (_CONSUMER_BARRIER, consumers)):
        _lower(ctx, op.regions[1])
    b.branch(merge)
    b.position_at_end(merge)


def _turn_barrier(ctx, other: bool):
    """TURN_BARRIER + this consumer warpgroup (or the other one), as an i32."""
    b = ctx.builder
    wg = b.lshr(ctx.tid, ir.Constant(I32, 7))
    return b.add(b.xor(wg, ir.Constant(I32, 1)) if other else wg, ir.Constant(I32, TURN_BARRIER))


@rule(PingpongWaitOp)
def _pingpong_wait(ctx, op):
    ctx.intrinsic("llvm.nvvm.barrier.cta.sync.aligned.count", ir.VoidType(),
                  [_turn_barrier(ctx, False), ir.Constant(I32, 256)])


@rule(PingpongPassOp)
def _pingpong_pass(ctx, op):
    b = ctx.builder
    second = b.icmp_unsigned(">=", ctx.tid, ir.Constant(I32, 128))
    passes = b.select(second, ctx.get(op.operands[1]), ctx.get(op.operands[0]))
    with b.if_then(passes):
        ctx.intrinsic("llvm.nvvm.barrier.cta.arrive.aligned.count", ir.VoidType(),
                      [_turn_barrier(ctx, True), ir.Constant(I32, 256)])
