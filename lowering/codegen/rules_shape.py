"""Shape ops that move no data: broadcast, expand_dims, reshape, permute, cat.

Each is lowered to a register renaming when the layouts allow it: every
result register of every thread must find the source element it needs among
that same thread's registers, at a register index that is the same for all
threads. The check runs the layouts' `coords` on concrete lane/warp numbers
(folded in Python by `IndexOps`). When it fails, the layout pass should have
inserted a layout conversion, and the error says so.

The layouts are linear over the bits of (register, lane, warp) (lowering/gpu/
layouts.py), and broadcast, expand_dims, reshape and permute map coordinates
bit-linearly for power-of-two shapes, so checking thread 0 and the threads
with one lane or warp bit set covers every thread; cat, which is not linear,
checks every thread. Results are kept per kernel (CodegenContext.memo).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from ...ir import tile_ops as T
from ...ir.types import TileType
from .indexing import IndexOps
from .walker import rule

__all__ = ["register_map", "thread_coords"]

_PYOPS = IndexOps(None)


@lru_cache(maxsize=4096)
def thread_coords(layout, shape: Tuple[int, ...], lane: int, warp: int) -> Tuple[Tuple[int, ...], ...]:
    """Concrete coordinates of each register element of thread (lane, warp)."""
    return tuple(tuple(int(c) for c in cs) for cs in layout.coords(shape, lane, warp, _PYOPS))


def _threads(num_warps: int, every: bool):
    if every:
        return [(lane, warp) for warp in range(num_warps) for lane in range(32)]
    basis = [(0, 0)] + [(1 << k, 0) for k in range(5)]
    return basis + [(0, 1 << k) for k in range(num_warps.bit_length() - 1)]


def register_map(srcs: Sequence[TileType], dst: TileType, num_warps: int,
                 src_coord: Callable[[Tuple[int, ...]], Tuple[int, Tuple[int, ...]]],
                 linear: bool = True) -> List[Tuple[int, int]]:
    """For each register of `dst`, the (source number, register index) it copies.

    `src_coord` maps a destination coordinate to (source number, source coordinate);
    `linear` says it is bit-linear (see above), so the basis threads suffice.
    Raises ValueError when the mapping differs between threads or needs another
    thread's data.
    """
    result = None
    for lane, warp in _threads(num_warps, not linear):
        index: List[Dict[Tuple[int, ...], int]] = []
        for s in srcs:
            d: Dict[Tuple[int, ...], int] = {}
            for r, c in enumerate(thread_coords(s.encoding, s.shape, lane, warp)):
                d.setdefault(c, r)
            index.append(d)
        m = []
        for c in thread_coords(dst.encoding, dst.shape, lane, warp):
            k, sc = src_coord(c)
            r = index[k].get(sc)
            if r is None:
                raise ValueError(f"the layouts of {list(srcs[k].shape)} -> {list(dst.shape)} put element "
                                 f"{list(sc)} in another thread; a layout conversion is needed first")
            m.append((k, r))
        if result is None:
            result = m
        elif m != result:
            raise ValueError(f"the layouts of {[list(s.shape) for s in srcs]} -> {list(dst.shape)} "
                             "do not map registers uniformly; a layout conversion is needed first")
    return result


def _rename(ctx, op, srcs, src_coord, linear=True):
    dst = op.result.type
    if not isinstance(srcs[0].type, TileType):  # a scalar source fills every element
        ctx.set(op.result, [ctx.get(srcs[0])] * ctx.num_elems(dst))
        return
    for s in srcs:
        ctx.layout_of(s.type)
    ctx.layout_of(dst)
    key = (op.name, repr(sorted(op.attrs.items())), tuple(s.type for s in srcs), dst, ctx.num_warps)
    cache = ctx.memo.setdefault("register_map", {})
    mapping = cache.get(key)
    if mapping is None:
        mapping = cache[key] = register_map([s.type for s in srcs], dst, ctx.num_warps, src_coord, linear)
    vals = [ctx.elems(s) for s in srcs]
    ctx.set(op.result, [vals[k][r] for k, r in mapping])


@rule(T.BroadcastOp)
def _broadcast(ctx, op):
    src = op.operands[0].type.shape
    _rename(ctx, op, op.operands, lambda c: (0, tuple(0 if s == 1 else x for x, s in zip(c, src))))


@rule(T.ExpandDimsOp)
def _expand_dims(ctx, op):
    ax = op.attrs["axis"]
    _rename(ctx, op, op.operands, lambda c: (0, c[:ax] + c[ax + 1:]))


def _reshape_coord(c, src, dst):
    """The coordinate in shape `dst` of the element at `c` in shape `src` (row-major)."""
    return tuple(int(x) for x in np.unravel_index(np.ravel_multi_index(c, src), dst))


@rule(T.ReshapeOp)
def _reshape(ctx, op):
    src, dst = op.operands[0].type.shape, op.result.type.shape
    _rename(ctx, op, op.operands, lambda c: (0, _reshape_coord(c, dst, src)))


@rule(T.PermuteOp)
def _permute(ctx, op):
    order = op.attrs["order"]

    def src_coord(c):
        s = [0] * len(order)
        for i, o in enumerate(order):
            s[o] = c[i]
        return 0, tuple(s)
    _rename(ctx, op, op.operands, src_coord)


@rule(T.CatOp)
def _cat(ctx, op):
    ax = op.attrs["axis"]
    n0 = op.operands[0].type.shape[ax]

    def src_coord(c):
        if c[ax] < n0:
            return 0, c
        return 1, c[:ax] + (c[ax] - n0,) + c[ax + 1:]
    _rename(ctx, op, op.operands, src_coord, linear=False)
