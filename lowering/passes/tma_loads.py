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
  that wgmma computes (f16/bf16, tf32, f8 e4m3/e5m2; f32 accumulator), or it is a 16-bit
  tile that is operand b of several such dots, as loaded or turned over by a
  tile.permute [1, 0] (the backward's Q and dO: accelerate_dot stores it once, as it lies);
- the view is a kernel argument, base aligned to 16 bytes, of rank 2 with one unit stride
  and the other a known multiple of 16 bytes (the specialization's stride_div), or of rank
  3 to 5 with a unit last stride and the others multiples of 16 bytes: what
  cuTensorMapEncodeTiled requires; other views keep cp.async;
- at rank 3 to 5 the tile is 1 in every dimension but the last and one other (the
  attention examples' `(1, BN, D)` of a `(batch·heads, seq, D)` view, the stdlib's
  `(1, BN, 1, D)` of `(batch, seq, heads, D)`), squeezed to 2-D, read as it lies or with
  order [1, 0] (`k.T`: the marker's `transposed`, the tile lands turned over, as from a
  column-major 2-D view);
- a copy cannot transpose, so the view's contiguous dimension must be the buffer's:
  row-major (last stride 1) for A and for the N-major B of f16/bf16; column-major (first
  stride 1: storage N x K, K contiguous) or turned over for a K-major B (tf32/f8 always;
  f16/bf16 loaded K-contiguous, as accelerate_dot stores it: x @ w.T of a row-major w),
  and for a 16-bit A (storage K x M: accelerate_dot stores such an A M-major, wgmma's
  imm-trans-a);
- in storage order, the tile is at most 256 rows (a box's limit), a multiple of 8 rows
  and of one 128-byte swizzle row of columns (64 f16/bf16, 32 f32, 128 f8 elements), read
  with zero padding (TMA fills out-of-bounds elements with zeros) in "index" mode or in
  "offset" mode (the marker's `offsets`: its indices are the tile's first elements, the
  box's coordinates as they are; the stdlib's varlen kernels, whose blocks start at a
  sequence's first row);
- every TMA load of that view uses the same box (one tensor map per view).

The box is in storage order: [rows, 128 bytes of columns] of a row-major view, [N, 128
bytes of K] of a column-major B, [K, 128 bytes of M] of a column-major A; at rank 3 to 5
one entry per dimension, 1 but for the rows and the last (`[1, 64, 64]`). A load promised the same for the whole cluster
(`multicast`, with the `cluster` option 2, 4 or 8) gets `multicast = cluster` on its marker.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from tilec import dtypes as dt
from tilec.ir import Builder, Module, Op
from tilec.ir.core import BlockArgument
from tilec.ir import tile_ops as T
from tilec.ir.types import ViewType

from ..gpu.tma_ops import MULTICAST_SIZES, TMA_BOX_BYTES, TmaOriginOp, column_major, rows_dim, storage_tile
from ..gpu.wgmma_fragments import b_k_major
from .accelerate_dot import dot_acc_layout

__all__ = ["tma_loads", "tma_view_ok"]

_TMA_DTYPES = (dt.float16, dt.bfloat16, dt.float32, dt.float8e4m3, dt.float8e5m2)


def tma_view_ok(vt: ViewType) -> bool:
    """Whether cuTensorMapEncodeTiled accepts every tensor this view type specializes:
    row-major (last stride 1) or, at rank 2, column-major (first stride 1), the other
    strides multiples of 16 bytes; ranks 2 to 5."""
    if not 2 <= vt.rank <= 5 or vt.dtype not in _TMA_DTYPES or vt.align < 16:
        return False
    if vt.rank > 2:
        return vt.strides[-1] == 1 and all(
            ((st if st is not None else div) * vt.dtype.itemsize) % 16 == 0
            for st, div in zip(vt.strides[:-1], vt.stride_div[:-1]))
    if 1 not in vt.strides:
        return False
    outer = 0 if vt.strides[1] == 1 else 1
    stride = vt.strides[outer]
    stride_bytes_div = (stride if stride is not None else vt.stride_div[outer]) * vt.dtype.itemsize
    return stride_bytes_div % 16 == 0


def _dot_user(op: Op) -> Optional[T.DotOp]:
    uses = op.results[0].uses
    if len(uses) != 1:
        return None
    user, idx = uses[0]
    return user if isinstance(user, T.DotOp) and idx in (0, 1) else None


def _shared_b(op: Op) -> Optional[List[T.DotOp]]:
    """The dots of a tile that is operand B of several, as loaded or turned over by a
    tile.permute [1, 0] (the backward's Q and dO, the dQ kernel's K): accelerate_dot stores
    it once, as it lies, and the wgmmas read it N-major or K-major. None for other uses."""
    dots = []
    for user, idx in op.results[0].uses:
        if isinstance(user, T.PermuteOp) and list(user.attrs.get("order") or []) == [1, 0] \
                and len(user.results[0].uses) == 1:
            user, idx = user.results[0].uses[0]
        if not isinstance(user, T.DotOp) or idx != 1:
            return None
        dots.append(user)
    return dots if len(dots) > 1 else None


def _box(op: T.LoadViewOp, num_warps: int) -> Optional[Tuple[Tuple[int, ...], bool]]:
    """(the TMA box in storage order, whether the tile lands turned over) when `op` qualifies
    (module docstring)."""
    if not isinstance(op.parent_op(), T.ForOp) or op.attrs.get("mode", "index") not in ("index", "offset"):
        return None
    if op.attrs.get("padding", 0) not in (0, 0.0):
        return None
    view = op.operands[0]
    if not isinstance(view, BlockArgument) or not isinstance(view.type, ViewType) or not tma_view_ok(view.type):
        return None
    tile = _storage_rows(op, view.type.rank)
    if tile is None:
        return None
    region = view.block.parent
    if region is None or region.parent is None or region.parent.parent_op() is not None:
        return None  # a region argument, not the kernel's
    dot = _dot_user(op)
    shared = None if dot is not None or op.attrs.get("order") else _shared_b(op)
    if dot is None and shared is None:
        return None
    for d in shared or [dot]:
        a, b, _ = (v.type for v in d.operands)
        # before axis_info: the N-major rule (accelerate_dot.b_runs_along_k is False), so never
        # wgmma where assign_layouts would not say so (a narrow K-major B dot is not TMA-fed)
        acc = dot_acc_layout(d, num_warps, wgmma=True)
        if a.dtype is not b.dtype or a.dtype not in _TMA_DTYPES or acc is None or acc.version != 3:
            return None
    elem = view.type.dtype.itemsize
    if shared is not None and elem != 2:
        return None   # only 16-bit B reads either major order from one buffer
    idx = 1 if shared is not None else op.results[0].uses[0][1]
    (rows, cols), at, transposed = tile
    if transposed:
        # the transpose of the storage: B's K-major buffer (tf32 and f8 have no other; a 16-bit
        # B loaded K-contiguous is stored so too), a 16-bit A's M-major one
        if idx == 0 and elem != 2:
            return None
    elif idx == 1 and b_k_major(elem):
        return None       # a row-major B into a K-major buffer would need a transposing copy
    width = TMA_BOX_BYTES // elem
    if rows > 256 or rows % 8 or cols % width:
        return None
    if view.type.rank == 2:
        return (rows, width), False
    box = [1] * view.type.rank
    box[at], box[-1] = rows, width
    return tuple(box), transposed


def _storage_rows(op: T.LoadViewOp, rank: int):
    """((rows, columns) of the tile in the view's storage order, the dimension of those rows,
    whether the tile as read is the storage turned over) when a TMA box can copy it: at rank 2,
    a tile read as it lies (a column-major view's is turned over); at rank 3 to 5, a tile that
    is 1 in every dimension but the last and exactly one other, squeezed to 2-D, read as it
    lies or with order [1, 0]."""
    shape, squeeze, order = list(op.attrs["shape"]), op.attrs.get("squeeze"), op.attrs.get("order")
    if rank == 2:
        if squeeze or order:
            return None
        return storage_tile(shape, op.operands[0].type), 0, column_major(op.operands[0].type)
    at = rows_dim(squeeze, rank)
    if at is None or order not in (None, [0, 1], [1, 0]):
        return None
    return (shape[at], shape[-1]), at, order == [1, 0]


def tma_loads(module: Module, *, num_warps: int, cluster: int) -> Module:
    """Tag the loads TMA can copy (the pipeline runs it on wgmma targets with `tma` and 3+ stages)."""
    boxes: Dict[int, Tuple[int, ...]] = {}
    tag = 0
    for op in [o for o in module.walk() if isinstance(o, T.LoadViewOp)]:
        found = _box(op, num_warps)
        view = op.operands[0]
        if found is None or boxes.setdefault(id(view), found[0]) != found[0]:
            continue
        box, transposed = found
        b = Builder().before(op)
        indices = op.group("indices")
        # (clusters of 3, 5, 6 or 7 copy as ordinary loads: a program issues a power-of-two share)
        multicast = cluster > 1 and cluster in MULTICAST_SIZES and op.attrs.get("multicast")
        shared = {"multicast": cluster} if multicast else {}
        if transposed and view.type.rank > 2:
            shared["transposed"] = True
        if op.attrs.get("mode") == "offset":
            shared["offsets"] = True
        b.create(TmaOriginOp, view, *indices, tag=tag, box=list(box), loc=op.loc, **shared)
        op.attrs["_tma"] = tag
        tag += 1
    return module
