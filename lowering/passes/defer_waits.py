"""defer_wgmma_waits: a wgmma whose result only leaves the loop iteration is waited for at the
end of the iteration, not right after it is issued.

accelerate_dot waits for every wgmma at once (`gpu.wgmma_wait {pending = 0}` after the
`gpu.wgmma`). When the accumulator is used by nothing but the loop's `tile.yield` (the
next iteration's first dot that `rotate_dot_chains` moved ahead), waiting there keeps
the tensor cores and the CUDA cores working at once: everything between the issue and
the end of the body (the softmax of this block) runs while the wgmma does. The wait
moves to just before the yield, so the wgmma still completes inside its iteration. Only
a `pending = 0` wait moves (a ring's `pending = 1` wait frees a slot for the copies that
follow it), and only when nothing after it in the iteration writes a buffer the wgmma
reads (a local_store, cp.async or TMA copy into it). A later
`pending = 0` wait in the same iteration (the second dot's) already retires it, since
wgmma groups complete in order; the moved wait then costs nothing.
"""
from __future__ import annotations

from tilec.ir import Module, Op
from tilec.ir import tile_ops as T

from ..gpu.mma_ops import AsyncCopyOp
from ..gpu.ops import LocalStoreOp
from ..gpu.tma_ops import TmaLoadOp
from ..gpu.wgmma_ops import WgmmaWaitOp

__all__ = ["defer_wgmma_waits"]


_WRITERS = (LocalStoreOp, AsyncCopyOp, TmaLoadOp)   # ops that write a shared buffer (operand 0)


def _writes_operands(wgmma: Op, ops) -> bool:
    """Some op of `ops` (or nested in one) writes a buffer `wgmma` reads."""
    bufs = {id(v) for v in wgmma.operands[:2]}
    return any(isinstance(o, _WRITERS) and id(o.operands[0]) in bufs for op in ops for o in op.walk())


def defer_wgmma_waits(module: Module) -> Module:
    for wait in [op for op in module.walk() if isinstance(op, WgmmaWaitOp)]:
        body = wait.parent
        loop = wait.parent_op()
        if not isinstance(loop, T.ForOp) or body.terminator is None or wait.attrs["pending"] != 0:
            continue   # a ring's `pending = 1` wait frees a slot for the copies after it: it stays
        term = body.terminator
        uses = wait.results[0].uses
        if not uses or any(user is not term for user, _ in uses):
            continue
        after = body.ops[body.ops.index(wait) + 1:body.ops.index(term)]
        if _writes_operands(wait.operands[0].owner, after):
            continue   # its operand buffers are refilled before the end of the iteration
        body.ops.remove(wait)
        body.insert(body.ops.index(term), wait)
    return module
