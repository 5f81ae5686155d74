"""How a reduction along one axis changes a layout, stage by stage.

A tile's layout (see layouts.py) spreads the axis' coordinate bits over
registers, lanes and warps. Each stage of a reduction combines the values that
differ only in one of these groups of bits:

- "thread": a thread's own registers (no communication);
- "lanes":  lanes of a warp, by butterfly shuffles (afterwards every lane of
            the group holds the combined value: those lanes become copies);
- across warps the partials go through shared memory and come back as
            registers (`warps_to_registers`), then another "thread" stage.

The partial result of a stage keeps the axis, shrunk to the bits not yet
combined (compacted to the low bits, in order), so it is again an ordinary
tile with a layout; after the last stage the axis has extent 1.
"""
from __future__ import annotations

from typing import Sequence, Tuple

from .layouts import Bases, Coord, DistributedLayout, LayoutError, LinearLayout

__all__ = ["stage_result", "warps_to_registers", "axis_bits", "drop_axis"]


def axis_bits(bases: Bases, axis: int):
    """Indices of the reg, lane and warp bases that move along `axis`."""
    return tuple([k for k, b in enumerate(group) if b[axis]] for group in bases)


def _compact(bases: Bases, axis: int, removed: Sequence[int]) -> Bases:
    """Renumber axis coordinate bits after removing the bit positions in `removed`."""
    removed = sorted(removed)

    def fix(b: Coord) -> Coord:
        x = b[axis]
        if not x:
            return b
        p = x.bit_length() - 1
        if p in removed:
            return b[:axis] + (0,) + b[axis + 1:]
        p -= sum(1 for q in removed if q < p)
        return b[:axis] + (1 << p,) + b[axis + 1:]
    return Bases(*(tuple(fix(b) for b in g) for g in bases))


def _positions(group, idx, axis):
    return [group[k][axis].bit_length() - 1 for k in idx]


def stage_result(layout: DistributedLayout, shape: Sequence[int], axis: int, stage: str
                 ) -> Tuple[Tuple[int, ...], Bases]:
    """Shape and bases of the partial result of one stage ("thread" or "lanes")."""
    shape = tuple(shape)
    bs = layout.bases(shape)
    reg_i, lane_i, _ = axis_bits(bs, axis)
    for g in bs:
        for b in g:
            x = b[axis]
            if x & (x - 1) or (x and sum(1 for y in b if y) != 1):
                raise LayoutError(f"cannot reduce over {layout}: its bases are not one bit each")
    if stage == "thread":
        gone = _positions(bs.reg, reg_i, axis)
        nb = _compact(bs, axis, gone)
        nb = Bases(tuple(b for k, b in enumerate(nb.reg) if k not in reg_i), nb.lane, nb.warp)
    elif stage == "lanes":
        gone = _positions(bs.lane, lane_i, axis)
        nb = _compact(bs, axis, gone)
    else:
        raise LayoutError(f"unknown reduction stage {stage!r}")
    new_shape = shape[:axis] + (shape[axis] >> len(gone),) + shape[axis + 1:]
    return new_shape, nb


def warps_to_registers(layout: DistributedLayout, shape: Sequence[int], axis: int) -> LinearLayout:
    """The layout in which each thread holds, in registers, the partials of every warp along
    `axis` (what it reads back from shared memory): warp bases along the axis become
    register bases."""
    bs = layout.bases(tuple(shape))
    _, _, warp_i = axis_bits(bs, axis)
    zero = (0,) * len(shape)
    moved = tuple(bs.warp[k] for k in warp_i)
    warp = tuple(zero if k in warp_i else b for k, b in enumerate(bs.warp))
    return LinearLayout(bs.reg + moved, bs.lane, warp)


def drop_axis(bases: Bases, axis: int) -> Bases:
    """Bases of an extent-1 axis removed (every basis is zero along it)."""
    return Bases(*(tuple(b[:axis] + b[axis + 1:] for b in g) for g in bases))


def canonical(bases: Bases, candidates) -> DistributedLayout:
    """The first candidate layout with these bases (e.g. the slice of the input), else a #linear."""
    for c, shape in candidates:
        try:
            if c.bases(shape) == bases:
                return c
        except LayoutError:
            continue
    return LinearLayout.of(bases)


__all__.append("canonical")
