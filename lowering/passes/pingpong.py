"""pingpong: the two consumer warpgroups of a warp-specialized chain take turns at the tensor cores.

In a loop running a chain of two wgmmas (S = Q Kᵀ, then O += P V with P in registers),
both warpgroups would issue their products together and then run their softmax together,
leaving the tensor cores idle for the length of a softmax. With turns (FlashAttention-3's
ping-pong schedule), warpgroup 0 issues O += P(j) V(j) and S(j + 1), then warpgroup 1 does,
while warpgroup 0 runs the softmax of S(j + 1):

    tile.for %j ... {
      gpu.mbarrier_wait %full, ...
      %s = gpu.wgmma ...                      S(j)
      gpu.pingpong_pass %not_first, %true     warpgroup 0 after S(1) .. S(n - 1), 1 after each
      ... softmax of S(j) ...
      gpu.pingpong_wait                        each warpgroup's turn, before O += P(j) V(j)
      %o = gpu.wgmma %p, ...
    }
    gpu.pingpong_pass %ran, %false            warpgroup 0 hands on its last turn

Per loop, each warpgroup waits once per iteration and the other passes to it once per
iteration, so every phase of the two named barriers has its 128 waiting and 128 arriving
threads, and no turn crosses a loop boundary (a block barrier between loops stays safe).
Runs after warp_specialize on kernels it split with two consumer warpgroups; other kernels
are left as they are.
"""
from __future__ import annotations

from typing import List

from tilec import dtypes as dt
from tilec.ir import Builder, Module
from tilec.ir import tile_ops as T
from tilec.ir.types import ScalarType, TileType

from ..gpu.wgmma_ops import WgmmaOp
from ..gpu.ws_ops import PingpongPassOp, PingpongWaitOp, WarpSpecializeOp
from .rewrite import build_constant, trip_count
from .warp_specialize import WARPGROUP

__all__ = ["pingpong"]

_I32 = ScalarType(dt.int32)
_BOOL = ScalarType(dt.bool_)


def _chain(loop: T.ForOp) -> List[WgmmaOp]:
    """The loop body's two wgmmas when the second takes its A from registers, else []."""
    dots = [op for op in loop.body.ops if isinstance(op, WgmmaOp)]
    return dots if len(dots) == 2 and isinstance(dots[1].operands[0].type, TileType) else []


def _take_turns(loop: T.ForOp, first, second) -> None:
    body = loop.body
    at = Builder().before(first)
    at.index += 1
    at.loc = first.loc
    not_first = at.value(T.CmpOp, body.args[0], loop.operands[0], pred="ne")
    at.create(PingpongPassOp, not_first, build_constant(at, _BOOL, True))
    wait = Builder().before(second)
    wait.loc = second.loc
    wait.create(PingpongWaitOp)
    after = Builder().before(loop)
    after.index += 1
    after.loc = loop.loc
    ran = after.value(T.CmpOp, trip_count(after, *loop.operands[:3]), build_constant(after, _I32, 0), pred="gt")
    after.create(PingpongPassOp, ran, build_constant(after, _BOOL, False))


def pingpong(module: Module, *, num_warps: int) -> Module:
    """Turns for the chain loops of a warp-specialized kernel with two consumer warpgroups."""
    if num_warps * 32 != 2 * WARPGROUP:
        return module
    for split in [op for op in module.walk() if isinstance(op, WarpSpecializeOp)]:
        for loop in [o for op in split.regions[1].block.ops for o in op.walk() if isinstance(o, T.ForOp)]:
            dots = _chain(loop)
            if dots:
                _take_turns(loop, *dots)
    return module
