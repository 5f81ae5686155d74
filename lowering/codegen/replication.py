"""Which copy of a replicated tile element acts: one owner per element for side effects.

A layout larger than its tile holds some elements in several places (a zero
basis for a lane, warp or register bit, see gpu/layouts.py; in a linear layout
also a basis that is the XOR of earlier ones). Loads and arithmetic do not
care, but an atomic performed by every copy counts several times, a print
prints several lines and a store writes the same bytes again. Scalars are
held by every thread.

The owner of an element: take the layout's bits in the order registers, lanes,
warps; a bit whose basis is linearly independent (over XOR) of the bases of the
bits before it is a *pivot*. Every element is reached by exactly one
combination of pivot bits, so the copy whose non-pivot bits are all zero is the
one owner. A thread is an owner thread when its lane and warp have no
non-pivot bit set; within it, a register with a non-pivot register bit holds
the same element as the register with those bits resolved (`reg_owner`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence, Tuple

__all__ = ["Replication", "replication", "scalar_replication", "owner_flag"]


@dataclass(frozen=True)
class Replication:
    reg_owner: Tuple[int, ...]  # per register: the register of the same thread whose copy acts
    lane_mask: int              # lane bits that must be zero in an owner thread
    warp_mask: int              # warp bits that must be zero in an owner thread
    lane_copies_only: bool      # every non-pivot lane bit has a zero basis and warps none: the owner
                                # of register r is register r of lane `lane & ~lane_mask`

    @property
    def threads_replicated(self) -> bool:
        return bool(self.lane_mask or self.warp_mask)

    @property
    def replicated(self) -> bool:
        return self.threads_replicated or any(o != r for r, o in enumerate(self.reg_owner))


def _encode(coord: Sequence[int], shape: Sequence[int]) -> int:
    """A coordinate as one bit vector (row-major bit fields; extents are powers of two)."""
    code = 0
    for c, s in zip(coord, shape):
        code = (code << (int(s).bit_length() - 1)) | int(c)
    return code


class _Span:
    """Incremental GF(2) row reduction: is a vector independent of those added so far?"""

    def __init__(self):
        self.rows = {}  # leading bit -> row

    def reduce(self, v: int) -> int:
        while v:
            top = v.bit_length() - 1
            row = self.rows.get(top)
            if row is None:
                return v
            v ^= row
        return 0

    def add(self, v: int) -> bool:
        v = self.reduce(v)
        if v:
            self.rows[v.bit_length() - 1] = v
        return bool(v)


@lru_cache(maxsize=1024)
def replication(layout, shape: Tuple[int, ...]) -> Replication:
    """The owner rule of a tile of `shape` in the distributed `layout`."""
    shape = tuple(int(s) for s in shape)
    bs = layout.bases(shape)
    span = _Span()
    reg_pivot = [span.add(_encode(b, shape)) for b in bs.reg]
    lane_pivot = [span.add(_encode(b, shape)) for b in bs.lane]
    warp_pivot = [span.add(_encode(b, shape)) for b in bs.warp]
    lane_mask = sum(1 << k for k, p in enumerate(lane_pivot) if not p)
    warp_mask = sum(1 << k for k, p in enumerate(warp_pivot) if not p)
    # registers: the copy made of pivot bits only is the owner of each element of the thread
    codes = []
    for r in range(1 << len(bs.reg)):
        c = 0
        for k, b in enumerate(bs.reg):
            if r >> k & 1:
                c ^= _encode(b, shape)
        codes.append(c)
    pivot_only = {codes[r]: r for r in range(len(codes))
                  if all(reg_pivot[k] or not r >> k & 1 for k in range(len(bs.reg)))}
    reg_owner = tuple(pivot_only[c] for c in codes)
    zero_lanes = all(not any(bs.lane[k]) for k in range(len(bs.lane)) if not lane_pivot[k])
    return Replication(reg_owner, lane_mask, warp_mask, zero_lanes and warp_mask == 0)


def scalar_replication(num_warps: int) -> Replication:
    """A scalar is held by every thread: thread 0 owns it."""
    return Replication((0,), 31, max(0, num_warps - 1), num_warps == 1)


def owner_flag(rep: Replication, lane, warp, ops):
    """Zero exactly in owner threads (`ops` as in layout.coords: ints, numpy or llvmlite)."""
    parts = []
    if rep.lane_mask:
        parts.append(ops.and_(lane, ops.const(rep.lane_mask)))
    if rep.warp_mask:
        parts.append(ops.and_(warp, ops.const(rep.warp_mask)))
    if not parts:
        return ops.const(0)
    return parts[0] if len(parts) == 1 else ops.or_(parts[0], parts[1])
