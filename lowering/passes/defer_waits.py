"""defer_wgmma_waits: a wgmma whose result only leaves the loop iteration is waited for at the
end of the iteration, not right after it is issued.

accelerate_dot waits for every wgmma at once (`gpu.wgmma_wait {pending = 0}` after the
`gpu.wgmma`). When the accumulator is used by nothing but the loop's `tile.yield` (the
next iteration's first dot that `rotate_dot_chains` moved ahead), waiting there keeps
the tensor cores and the CUDA cores working at once: everything between the issue and
the end of the body (the softmax of this block) runs while the wgmma does. The wait
moves to just before the yield, so the wgmma still completes inside its iteration: the
shared-memory slots it reads are refilled only in a later iteration, as before. A later
`pending = 0` wait in the same iteration (the second dot's) already retires it, since
wgmma groups complete in order; the moved wait then costs nothing.
"""
from __future__ import annotations

from tilec.ir import Module
from tilec.ir import tile_ops as T

from ..gpu.wgmma_ops import WgmmaWaitOp

__all__ = ["defer_wgmma_waits"]


def defer_wgmma_waits(module: Module) -> Module:
    for wait in [op for op in module.walk() if isinstance(op, WgmmaWaitOp)]:
        body = wait.parent
        loop = wait.parent_op()
        if not isinstance(loop, T.ForOp) or body.terminator is None:
            continue
        term = body.terminator
        uses = wait.results[0].uses
        if not uses or any(user is not term for user, _ in uses):
            continue
        body.ops.remove(wait)
        body.insert(body.ops.index(term), wait)
    return module
