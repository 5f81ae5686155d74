"""defer_wgmma_waits: each wgmma is waited for where its result is first needed, not right
after it is issued.

accelerate_dot waits for every wgmma at once (`gpu.wgmma_wait {pending = 0}` after the
`gpu.wgmma`). Such a wait in a loop body moves down to just before the first use of its
result in the iteration: the loop's `tile.yield` at the latest, an op with regions at the
latest. Its `pending` becomes the number of wgmma groups issued between its wgmma and the
new place (fewer where a wait in between allows fewer), so those stay in flight: in
FlashAttention-3's order, `S(j+1) = Q Kᵀ` issued, `O += P(j) V(j)` issued, then the
softmax of S(j+1), the softmax runs on the CUDA cores while O's product runs on the tensor
cores. Only `pending = 0` waits move (a ring's `pending = 1` wait keeps a group in flight on
purpose), and only when nothing passed writes a buffer the wgmma reads (a local_store,
cp.async or TMA copy into it). Groups retire in order, so a later wait that retires a group
issued after this one retires this one too.
"""
from __future__ import annotations

from tilec.ir import Module, Op
from tilec.ir import tile_ops as T

from ..gpu.mma_ops import AsyncCopyOp
from ..gpu.ops import LocalStoreOp
from ..gpu.tma_ops import TmaLoadOp
from ..gpu.wgmma_ops import WgmmaOp, WgmmaWaitOp
from .rewrite import holder_in

__all__ = ["defer_wgmma_waits"]


_WRITERS = (LocalStoreOp, AsyncCopyOp, TmaLoadOp)   # ops that write a shared buffer (operand 0)


def _writes_operands(wgmma: Op, ops) -> bool:
    """Some op of `ops` (or nested in one) writes a buffer `wgmma` reads."""
    bufs = {id(v) for v in wgmma.operands[:2]}
    return any(isinstance(o, _WRITERS) and id(o.operands[0]) in bufs for op in ops for o in op.walk())


def _sink_to_first_use(wait: WgmmaWaitOp) -> None:
    """Move `wait` to just before its first use in the iteration (at the latest before an op
    with regions), past the wgmmas issued in between, which its `pending` leaves in flight."""
    body = wait.parent
    start = body.ops.index(wait)
    users = {id(holder_in(body, user)) for user, _ in wait.results[0].uses}
    issued, stop = 0, len(body.ops) - 1
    for i in range(start + 1, len(body.ops)):
        op = body.ops[i]
        if id(op) in users or op.regions or op is body.terminator:
            stop = i
            break
        if isinstance(op, WgmmaOp):
            issued += 1
        elif isinstance(op, WgmmaWaitOp):   # at most `pending` newer groups outlive it
            issued = min(issued, op.attrs["pending"])
    if stop == start + 1 or issued > 7 or (issued == 0 and body.ops[stop] is not body.terminator):
        return
    if _writes_operands(wait.operands[0].owner, body.ops[start + 1:stop]):
        return
    body.ops.remove(wait)
    body.insert(stop - 1, wait)
    wait.attrs["pending"] = issued


def defer_wgmma_waits(module: Module) -> Module:
    for wait in [op for op in module.walk() if isinstance(op, WgmmaWaitOp)]:
        if wait.attrs["pending"] == 0 and isinstance(wait.parent_op(), T.ForOp) and wait.parent.terminator is not None:
            _sink_to_first_use(wait)
    return module
