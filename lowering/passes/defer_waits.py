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
cp.async or TMA copy into it), or into the slot of a ring it reads: a refill of the ring's
slot `(c + k) % S` passes a wgmma that reads slot `c % S` (k not a multiple of S), so the
wait of a score product issued for the next block (`S(j+1)` before `O += P(j) V(j)`, written
so by the user) can reach the loop's yield, leaving O's product in flight into the next
iteration's softmax. Groups retire in order, so a later wait that retires a group issued
after this one retires this one too.
"""
from __future__ import annotations

from tilec.ir import Module, Op, Value
from tilec.ir import tile_ops as T

from ..gpu.mma_ops import AsyncCopyOp
from ..gpu.ops import LocalStoreOp
from ..gpu.tma_ops import TmaLoadOp
from ..gpu.wgmma_ops import WgmmaOp, WgmmaWaitOp
from .rewrite import NOT_CONSTANT, constant_of, holder_in

__all__ = ["defer_wgmma_waits"]


_WRITERS = (LocalStoreOp, AsyncCopyOp, TmaLoadOp)   # ops that write a shared buffer (operand 0)


def _slot_form(v: Value):
    """(the value, the constant added, the modulus) of a slot index `(x + k) % S` or `x % S`,
    else None."""
    op = v.owner
    if not isinstance(op, T.ModOp):
        return None
    modulus = constant_of(op.operands[1])
    x, k = op.operands[0], 0
    if isinstance(x.owner, T.AddOp) and constant_of(x.owner.operands[1]) is not NOT_CONSTANT:
        x, k = x.owner.operands[0], constant_of(x.owner.operands[1])
    if modulus is NOT_CONSTANT or not isinstance(modulus, int) or modulus <= 0 or not isinstance(k, int):
        return None
    return x, k, modulus


def distinct_slots(a: Value, b: Value) -> bool:
    """Slot indices `a` and `b` differ for every count: both are one count plus constants
    modulo the ring's size, the constants apart by anything but a multiple of it (a count of
    iterations is never negative)."""
    x, y = _slot_form(a), _slot_form(b)
    return x is not None and y is not None and x[0] is y[0] and x[2] == y[2] and (x[1] - y[1]) % x[2] != 0


def _other_slot(write: Op, wgmma: Op) -> bool:
    """`write` (a copy into a ring) fills a slot other than the one `wgmma` reads."""
    if not isinstance(write, (AsyncCopyOp, TmaLoadOp)) or len(wgmma.operands) < 4 or wgmma.operands[3] is None:
        return False
    return distinct_slots(wgmma.operands[3], write.operands[1])


def _writes_operands(wgmma: Op, ops) -> bool:
    """Some op of `ops` (or nested in one) writes a buffer `wgmma` reads (into the slot it
    reads, for a ring)."""
    bufs = {id(v) for v in wgmma.operands[:2]}
    return any(isinstance(o, _WRITERS) and id(o.operands[0]) in bufs and not _other_slot(o, wgmma)
               for op in ops for o in op.walk())


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
