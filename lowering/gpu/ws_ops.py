"""gpu.warp_specialize: a program split into a producer warpgroup and the consumer warps (sm_90a).

    gpu.warp_specialize {producer_warps = 4, producer_regs = 40, consumer_regs = 232} (
      { producer: runs on warps num_warps .. num_warps + producer_warps - 1 ... tile.yield }
      { consumer: runs on warps 0 .. num_warps - 1 ... tile.yield }
    )

The consumer warps keep thread ids 0 .. 32 * num_warps - 1, so every layout of the
consumer region means what it meant before the split. The producer warpgroup comes
after them: the kernel launches 32 * (num_warps + producer_warps) threads. On entry each
side moves its register budget with `setmaxnreg` (the producer gives registers up, the
consumers take them); inside the consumer region a barrier synchronizes the consumer
threads only (a named barrier with their count), since the producer never reaches it.
Only the first warp of the producer runs the producer region; one of its threads issues
the copies.

Two consumer warpgroups take turns at the tensor cores (pingpong pass):

    gpu.pingpong_wait                 warpgroup w waits on its turn barrier (bar.sync 2 + w, 256)
    gpu.pingpong_pass %wg0, %wg1      warpgroup w, where its operand says so, gives the other its
                                      turn (bar.arrive 3 - w, 256)
"""
from __future__ import annotations

from tilec import dtypes as dt
from tilec.ir.core import AttrSpec as A, Op, register_op

from .tma_ops import check_scalar

__all__ = ["WarpSpecializeOp", "PingpongWaitOp", "PingpongPassOp", "PRODUCER_WARPS", "TURN_BARRIER"]

PRODUCER_WARPS = 4          # setmaxnreg acts on whole warpgroups
TURN_BARRIER = 2            # named barriers 2 and 3: the turns of consumer warpgroups 0 and 1


@register_op
class WarpSpecializeOp(Op):
    """Regions: producer, consumer (each ends in tile.yield with no values)."""
    name = "gpu.warp_specialize"
    attributes = {"producer_warps": A("int"), "producer_regs": A("int"), "consumer_regs": A("int")}
    num_results = 0
    num_regions = 2
    traits = frozenset({"writes"})

    def verify_op(self):
        if self.attrs["producer_warps"] != PRODUCER_WARPS:
            raise self.error(f"the producer is one warpgroup ({PRODUCER_WARPS} warps), got "
                             f"{self.attrs['producer_warps']}")
        for key in ("producer_regs", "consumer_regs"):
            regs = self.attrs[key]
            if not 24 <= regs <= 256 or regs % 8:
                raise self.error(f"{key} must be a multiple of 8 from 24 to 256 (setmaxnreg), got {regs}")
        if any(not r.blocks for r in self.regions):
            raise self.error("gpu.warp_specialize needs a producer and a consumer region")


@register_op
class PingpongWaitOp(Op):
    """Consumer warpgroup w (of two) waits until the other passed it the turn (gpu.pingpong_pass)."""
    name = "gpu.pingpong_wait"
    num_results = 0
    traits = frozenset({"writes"})


@register_op
class PingpongPassOp(Op):
    """Consumer warpgroup 0 where `wg0`, warpgroup 1 where `wg1`, gives the other its turn."""
    name = "gpu.pingpong_pass"
    operands_spec = ("wg0", "wg1")
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        for i in range(2):
            check_scalar(self, i, (dt.bool_,), f"wg{i} (whether warpgroup {i} passes)")
