"""tma_stores: the GEMM epilogue's store goes out through shared memory and TMA (sm_90a).

Runs before lower_views, while a store still names its view and tile indices:

    %c16 = tile.cast %acc {to = bf16}
    tile.store_view %c, %pid_m, %pid_n, %c16 {mode = "index"}

becomes

    gpu.tma_store %c, %pid_m, %pid_n, %c16 {box = [128, 64]}

(gpu/tma_ops.py says what it does). Stored straight from the wgmma accumulator's
registers, every warp instruction writes 8 rows x 16 bytes; through shared memory the
tile leaves in whole 128-byte lines, issued by one thread. A store qualifies when

- the target is sm_90a and the `tma` option is on;
- it sits in the kernel's top-level block, after the K loop: its scratch buffer then takes
  the bytes of the loop's ring, which is dead by then (a store inside a loop, such as a
  persistent tile loop, would need scratch beside a live ring, and keeps its plain stores);
- the value comes from a dot that wgmma computes, through elementwise ops only (the
  epilogue: scaling, bias, activation, cast);
- the view is a kernel argument that TMA can address (tma_loads.tma_view_ok), row-major,
  in "index" mode (its bounds are the tensor map's: what the copy clips is what the plain
  store masks);
- at rank 3 to 5, the tile is squeezed to 2-D from 1 in every dimension but the last and
  one other (attention's `(1, BM, D)` output tile of a `(batch·heads, seq, D)` view, box
  `[1, BM, 64]`; the stdlib's `(1, BM, 1, D)`);
- the tile is at most 256 rows, a multiple of 8, its columns a multiple of one 128-byte
  swizzle row (64 f16/bf16, 32 f32 elements), and at most MAX_TILE_BYTES (a 128 x 256 f32
  result goes out in two rounds of 64 KB: TmaStoreOp.group_blocks).
"""
from __future__ import annotations

from tilec.ir import Builder, Module, Value
from tilec.ir import tile_ops as T
from tilec.ir.core import BlockArgument
from tilec.ir.types import TileType, ViewType

from ..gpu.tma_ops import REDUCE_DTYPES, REDUCE_KINDS, TMA_BOX_BYTES, BulkReadWaitOp, TmaStoreOp, rows_dim
from .accelerate_dot import dot_acc_layout
from .rewrite import enclosing_loops
from .tma_loads import tma_view_ok

__all__ = ["tma_stores", "MAX_TILE_BYTES"]

MAX_TILE_BYTES = 128 * 1024   # 128 x 256 f32; a tile the layout cannot split takes this much scratch
_SEARCH_LIMIT = 64              # ops visited looking for the dot behind a stored value


def _wgmma_dot(v: Value, num_warps: int) -> bool:
    """Whether `v` is computed from a wgmma dot's result by elementwise ops (a loop's result
    counts as the value its body yields)."""
    todo, seen = [v], set()
    while todo and len(seen) < _SEARCH_LIMIT:
        x = todo.pop()
        if id(x) in seen or not isinstance(x.type, TileType):
            continue
        seen.add(id(x))
        op = x.owner
        if op is None or isinstance(x, BlockArgument):  # a block argument's owner is its block
            continue
        if isinstance(op, T.DotOp):
            # before axis_info: the N-major rule (a narrow K-major B dot counts as mma.sync)
            acc = dot_acc_layout(op, num_warps, wgmma=True)
            if acc is not None and acc.version == 3:
                return True
        elif isinstance(op, T.ForOp):
            idx = list(op.results).index(x)
            todo.append(op.body.terminator.operands[idx])
        elif op.has_trait("elementwise"):
            todo.extend(op.operands)
    return False


def _box(op, num_warps: int):
    """The TMA box of `op`'s tile when the store (or reduction) qualifies (module docstring),
    else None."""
    view, tile = op.operands[0], op.operands[-1]
    reduction = isinstance(op, T.AtomicRMWViewOp)
    if op.attrs.get("mode", "index") != "index" or not (reduction or isinstance(op.parent_op(), T.FuncOp)):
        return None
    vt = view.type
    if not isinstance(view, BlockArgument) or not isinstance(vt, ViewType) or not tma_view_ok(vt) \
            or vt.strides[-1] != 1 or not isinstance(view.block.parent.parent, T.FuncOp) \
            or not (reduction or view.block is op.parent):
        return None
    t = tile.type
    squeeze = op.attrs.get("squeeze")
    at = (None if squeeze else 0) if vt.rank == 2 else rows_dim(squeeze, vt.rank)
    if not isinstance(t, TileType) or t.rank != 2 or t.dtype is not vt.dtype or at is None:
        return None
    rows, cols = t.shape
    width = TMA_BOX_BYTES // vt.dtype.itemsize
    if rows > 256 or rows % 8 or cols % width or t.numel * vt.dtype.itemsize > MAX_TILE_BYTES:
        return None
    if not _wgmma_dot(tile, num_warps):
        return None
    box = [1] * vt.rank
    box[at], box[-1] = rows, width
    return box


def _reduces(op) -> bool:
    """An atomic on a view that a TMA reduction can do: a relaxed add at gpu scope whose old
    values nobody reads, on f32/f16/bf16."""
    return (op.attrs["kind"] in REDUCE_KINDS and op.attrs.get("sem") == "relaxed"
            and op.attrs.get("scope", "gpu") == "gpu" and not op.results[0].uses
            and op.operands[-1].type.dtype in REDUCE_DTYPES)


def tma_stores(module: Module, *, num_warps: int) -> Module:
    """Send wgmma results out through TMA (the pipeline runs it on wgmma targets with `tma`)."""
    for op in [o for o in module.walk() if isinstance(o, (T.StoreViewOp, T.AtomicRMWViewOp))]:
        if isinstance(op, T.AtomicRMWViewOp) and not _reduces(op):
            continue
        box = _box(op, num_warps)
        if box is None:
            continue
        extra = {"reduce": op.attrs["kind"]} if isinstance(op, T.AtomicRMWViewOp) else {}
        loops = enclosing_loops(op)
        if loops:   # a reduction in a loop (stores qualify only at the top level)
            extra["deferred_read"] = True
            outer = loops[-1]
            after = Builder().before(outer)
            after.index += 1
            ops = outer.parent.ops
            if after.index == len(ops) or not isinstance(ops[after.index], BulkReadWaitOp):
                after.create(BulkReadWaitOp, loc=outer.loc)
        Builder().before(op).create(TmaStoreOp, op.operands[0], *op.group("indices"), op.operands[-1], box=box,
                                    loc=op.loc, **extra)
        op.erase()
    return module

