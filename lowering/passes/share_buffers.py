"""share_staged_operands: a tile staged into several shared buffers is staged once.

accelerate_dot gives every tensor-core dot its own operand buffers. A tile that several
dots read (attention's q: once before each key loop, two or three loops in a kernel with
masked and unmasked parts) is then stored into
as many identical buffers: at a head dim of 128 that is four 32 KB copies, which leaves
pipeline_loads no room for the K/V ring. Where two buffers of one shape and layout are
each written once, by a `gpu.local_store` of the same value, and only read otherwise
(ldmatrix, local_load, wgmma), and the first store comes before the second in program
order at the same or an enclosing level, the second buffer's readers read the first
and its store goes. The first store was followed by its barrier (and proxy fence) before
anything read it, and every reader of the second comes after the second store, so the
readers see the same bytes.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from tilec.ir import Module, Op

from ..gpu.mma_ops import LdMatrixOp
from ..gpu.ops import AllocOp, LocalLoadOp, LocalStoreOp
from ..gpu.wgmma_ops import WgmmaOp

__all__ = ["share_staged_operands"]

_READERS = (LdMatrixOp, LocalLoadOp, WgmmaOp)


def _only_store(alloc: AllocOp) -> Optional[LocalStoreOp]:
    """The one op writing `alloc` when it is a local_store and every other use reads."""
    uses = alloc.results[0].uses
    stores = [u for u, i in uses if isinstance(u, LocalStoreOp) and i == 0]
    if len(stores) != 1 or any(not isinstance(u, _READERS) and u is not stores[0] for u, _ in uses):
        return None
    return stores[0]


def _precedes(first: Op, second: Op) -> bool:
    """`first` runs before `second` whenever `second` runs: `second`, or an op enclosing it,
    sits after `first` in `first`'s block."""
    op = second
    while op is not None:
        if op.parent is first.parent:
            ops = first.parent.ops
            return ops.index(first) < ops.index(op)
        op = op.parent_op()
    return False


def _key(alloc: AllocOp, store: LocalStoreOp) -> Tuple:
    return id(store.operands[1]), str(alloc.results[0].type), repr(sorted(alloc.attrs.items(), key=lambda kv: kv[0]))


def share_staged_operands(module: Module) -> Module:
    groups: Dict[Tuple, List[Tuple[AllocOp, LocalStoreOp]]] = {}
    order = {id(op): i for i, op in enumerate(module.walk())}
    for alloc in [op for op in module.walk() if isinstance(op, AllocOp)]:
        store = _only_store(alloc)
        if store is not None:
            groups.setdefault(_key(alloc, store), []).append((alloc, store))
    for members in groups.values():   # in program order of the stores: the earliest is kept
        members.sort(key=lambda m: order[id(m[1])])
    for members in groups.values():
        kept: List[Tuple[AllocOp, LocalStoreOp]] = []
        for alloc, store in members:
            first = next(((a, s) for a, s in kept if _precedes(s, store)), None)
            if first is None:
                kept.append((alloc, store))
                continue
            store.erase()
            alloc.results[0].replace_all_uses_with(first[0].results[0])
            alloc.erase()
    return module
