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
"""
from __future__ import annotations

from tilec.ir.core import AttrSpec as A, Op, register_op

__all__ = ["WarpSpecializeOp", "PRODUCER_WARPS"]

PRODUCER_WARPS = 4          # setmaxnreg acts on whole warpgroups


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
