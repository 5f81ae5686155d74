"""tma_loads: mark the tensor-view loads of a K loop that TMA can copy (sm_90a).

Runs before lower_views, while a load still names its view and tile indices:

    %at = tile.load_view %a, %pid_m, %k {shape = [128, 64]}

gets a tag and, just before it, a marker holding what lowering turns into pointer
arithmetic:

    gpu.tma_origin %a, %pid_m, %k {tag = 0, box = [128, 64]}
    %at = tile.load_view %a, %pid_m, %k {shape = [128, 64], _tma = 0}

lower_views carries the tag to the tile.load_masked it makes; pipeline_loads, when it
turns the loop's loads into a ring, copies tagged loads with TMA (gpu.tma_load) and
removes every marker. A load qualifies when

- the target is sm_90a, the `tma` option is on (the default), and the ring has at least
  3 stages (one wgmma group in flight);
- it is a direct child of a tile.for, its only use is operand a or b of a tile.dot
  that wgmma computes (f16/bf16, f32 accumulator, `wgmma_shape` takes the tile);
- the view is a kernel argument of rank 2, f16/bf16, last stride 1, row stride a
  known multiple of 16 bytes (the specialization's stride_div), base aligned to 16
  bytes: what cuTensorMapEncodeTiled requires; other views keep cp.async;
- the tile is at most 256 rows (a box's limit), a multiple of 8 rows and of 64
  columns (boxes one 128-byte swizzle row wide), read in "index" mode with zero
  padding (TMA fills out-of-bounds elements with zeros);
- every TMA load of that view uses the same box (one tensor map per view).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Op
from tilec.ir.core import BlockArgument
from tilec.ir import tile_ops as T
from tilec.ir.types import ViewType

from ..gpu.tma_ops import TMA_BOX_BYTES, TmaOriginOp
from ..gpu.wgmma_fragments import wgmma_shape

__all__ = ["tma_loads", "tma_view_ok"]

_TMA_DTYPES = (dt.float16, dt.bfloat16)


def tma_view_ok(vt: ViewType) -> bool:
    """Whether cuTensorMapEncodeTiled accepts every tensor this view type specializes."""
    if vt.rank != 2 or vt.dtype not in _TMA_DTYPES or vt.strides[1] != 1 or vt.align < 16:
        return False
    row = vt.strides[0]
    row_bytes_div = row * vt.dtype.itemsize if row is not None else vt.stride_div[0] * vt.dtype.itemsize
    return row_bytes_div % 16 == 0


def _dot_user(op: Op) -> Optional[T.DotOp]:
    uses = op.results[0].uses
    if len(uses) != 1:
        return None
    user, idx = uses[0]
    return user if isinstance(user, T.DotOp) and idx in (0, 1) else None


def _box(op: T.LoadViewOp, num_warps: int) -> Optional[Tuple[int, int]]:
    """The TMA box of `op`'s tile when the load qualifies (module docstring), else None."""
    if not isinstance(op.parent_op(), T.ForOp) or op.attrs.get("mode", "index") != "index":
        return None
    if op.attrs.get("padding", 0) not in (0, 0.0):
        return None
    view = op.operands[0]
    if not isinstance(view, BlockArgument) or not isinstance(view.type, ViewType) or not tma_view_ok(view.type):
        return None
    region = view.block.parent
    if region is None or region.parent is None or region.parent.parent_op() is not None:
        return None  # a region argument, not the kernel's
    dot = _dot_user(op)
    if dot is None or dot.operands[2].type.dtype is not dt.float32:
        return None
    a, b, c = (v.type for v in dot.operands)
    if a.dtype is not b.dtype or a.dtype not in _TMA_DTYPES:
        return None
    if wgmma_shape(c.shape[0], c.shape[1], a.shape[1], a.dtype.itemsize, num_warps) is None:
        return None
    rows, cols = op.attrs["shape"]
    width = TMA_BOX_BYTES // view.type.dtype.itemsize
    if rows > 256 or rows % 8 or cols % width:
        return None
    return rows, width


def tma_loads(module: Module, arch: Optional[str] = None, num_stages: int = 3, num_warps: int = 4,
              tma: bool = True, **_options) -> Module:
    if not tma or arch != "sm_90a" or num_stages < 3:
        return module
    boxes: Dict[int, Tuple[int, int]] = {}
    tag = 0
    for op in [o for o in module.walk() if isinstance(o, T.LoadViewOp)]:
        box = _box(op, num_warps)
        view = op.operands[0]
        if box is None or boxes.setdefault(id(view), box) != box:
            continue
        b = Builder().before(op)
        i, j = op.group("indices")
        b.create(TmaOriginOp, view, i, j, tag=tag, box=list(box), loc=op.loc)
        op.attrs["_tma"] = tag
        tag += 1
    return module
