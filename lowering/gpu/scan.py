"""Inclusive scans over a distributed layout, one group of axis bits at a time.

The coordinate along the scanned axis is a number whose bits are owned by
register, lane or warp bases of the layout (layouts.py). A scan processes those
bits from the lowest to the highest, in *segments*: maximal runs of consecutive
bit positions owned by one kind ("thread", "lanes", "warps"). Every element
carries two values:

- prefix: the inclusive scan of its aligned block of 2^p elements (p = bits
  processed so far), i.e. of the elements of that block up to itself;
- total:  the combination of that whole block (shared by its elements).

Both start as the element itself (p = 0). A segment of k bits joins 2^k
neighbouring blocks: an element of block j takes as carry-in the totals of
blocks 0..j-1 (j+1.. when reversed), and every total becomes the combination of
all 2^k blocks. How blocks meet depends on the owner:

- thread: the blocks are registers of one thread, walked in order;
- lanes:  one butterfly step per lane bit: shuffle the total with lane ^ 2^b;
          the upper half (lower, when reversed) adds it to its prefix;
- warps:  each warp writes its block totals to shared memory, a barrier, and
          every thread reads the totals of the warps along the axis.

No identity element is needed (carries are selected, never initialised), so
the same code serves sum, prod, max, min and user combiners. The functions take
an `engine` that provides the arithmetic, so codegen (llvmlite values) and the
tests (numpy arrays of per-thread values) run exactly this code.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence, Tuple

from .layouts import Bases, DistributedLayout, LayoutError

__all__ = ["Segment", "scan_segments", "scan_thread", "scan_lanes", "scan_warps", "warps_buffer_shape"]

KINDS = ("thread", "lanes", "warps")


class Segment(NamedTuple):
    kind: str                 # "thread", "lanes" or "warps"
    bits: Tuple[int, ...]     # consecutive axis coordinate bit positions
    index: Tuple[int, ...]    # per position, the index of the owning reg/lane/warp basis


def _owners(bases: Bases, shape, axis: int) -> List[Tuple[str, int]]:
    n = shape[axis].bit_length() - 1
    owners: List = [None] * n
    for kind, group in zip(KINDS, bases):
        for k, b in enumerate(group):
            x = b[axis]
            if not x:
                continue
            if x & (x - 1) or any(y for d, y in enumerate(b) if d != axis):
                raise LayoutError(f"cannot scan along axis {axis}: a basis {list(b)} moves along several bits")
            p = x.bit_length() - 1
            if owners[p] is not None:
                raise LayoutError(f"cannot scan along axis {axis}: bit {p} of the axis has two owners")
            owners[p] = (kind, k)
    if any(o is None for o in owners):
        raise LayoutError(f"cannot scan along axis {axis}: the layout does not cover every coordinate")
    return owners


def scan_segments(layout: DistributedLayout, shape: Sequence[int], axis: int) -> List[Segment]:
    """The segments of a scan of a tile of `shape` along `axis`, lowest bits first."""
    owners = _owners(layout.bases(tuple(shape)), tuple(shape), axis)
    segs: List[Segment] = []
    for p, (kind, k) in enumerate(owners):
        if segs and segs[-1].kind == kind:
            last = segs[-1]
            segs[-1] = Segment(kind, last.bits + (p,), last.index + (k,))
        else:
            segs.append(Segment(kind, (p,), (k,)))
    return segs


def _bit(r: int, k: int) -> int:
    return (r >> k) & 1


def scan_thread(engine, prefix: List, total: List, reg_index: Sequence[int], reverse: bool):
    """Join blocks held in registers: `reg_index` are the register bits of the segment, lowest
    axis bit first. Registers that differ only in those bits form one group."""
    n = len(prefix)
    seg_mask = sum(1 << k for k in reg_index)
    groups: Dict[int, Dict[int, List[int]]] = {}
    for r in range(n):
        j = sum(_bit(r, k) << i for i, k in enumerate(reg_index))
        groups.setdefault(r & ~seg_mask, {}).setdefault(j, []).append(r)
    new_p, new_t = list(prefix), list(total)
    for blocks in groups.values():
        order = sorted(blocks, reverse=reverse)
        carry = None
        for j in order:
            regs = blocks[j]
            if carry is not None:
                for r in regs:
                    new_p[r] = engine.combine(carry, prefix[r]) if not reverse else engine.combine(prefix[r], carry)
            t = total[regs[0]]
            carry = t if carry is None else (engine.combine(carry, t) if not reverse else engine.combine(t, carry))
        for regs in blocks.values():
            for r in regs:
                new_t[r] = carry
    return new_p, new_t


def scan_lanes(engine, prefix: List, total: List, lane_index: Sequence[int], reverse: bool):
    """Join blocks held by lanes: one butterfly step per lane bit in `lane_index`."""
    prefix, total = list(prefix), list(total)
    for k in lane_index:
        upper = engine.lane_bit(k)  # this lane holds the block with the higher coordinates
        memo: Dict[int, Tuple[object, object]] = {}
        for r in range(len(prefix)):
            t = total[r]
            if id(t) not in memo:
                other = engine.shuffle_xor(t, 1 << k)
                lo, hi = engine.select(upper, other, t), engine.select(upper, t, other)
                memo[id(t)] = (t, other, engine.combine(lo, hi))  # t kept alive: ids stay unique
            _, other, joined = memo[id(t)]
            if not reverse:
                prefix[r] = engine.select(upper, engine.combine(other, prefix[r]), prefix[r])
            else:
                prefix[r] = engine.select(upper, prefix[r], engine.combine(prefix[r], other))
            total[r] = joined
    return prefix, total


def warps_buffer_shape(shape: Sequence[int], axis: int, seg: Segment) -> Tuple[int, ...]:
    """Shared buffer of a warps segment: one slot per block total (axis bits below it dropped)."""
    s = list(shape)
    s[axis] = shape[axis] >> seg.bits[0]
    return tuple(s)


def scan_warps(engine, prefix: List, total: List, coords: List[tuple], reg_bases, shape: Sequence[int],
               axis: int, seg: Segment, reverse: bool):
    """Join blocks held by warps through a shared buffer of `warps_buffer_shape` (row-major).

    `coords` are the per-register coordinates (engine.ops values), `reg_bases` the layout's. `engine.store(offset, v)`,
    `engine.barrier()` and `engine.load(offset)` touch the buffer; `engine.ops` does the
    index arithmetic; `engine.ult(a, b)` compares two of its values."""
    ops = engine.ops
    low, k = seg.bits[0], len(seg.bits)
    bshape = warps_buffer_shape(shape, axis, seg)

    def offset(c, j=None):
        a = ops.lshr(c[axis], ops.const(low))
        if j is not None:
            a = ops.or_(ops.and_(a, ops.const(~((1 << k) - 1) & 0x7FFFFFFF)), ops.const(j))
        off = ops.const(0)
        for d, s in enumerate(bshape):
            x = a if d == axis else c[d]
            off = ops.add(ops.mul(off, ops.const(s)), x)
        return off

    # registers of one block share a total: write and read once per block
    below = sum(1 << i for i, b in enumerate(reg_bases) if b[axis] and b[axis] < (1 << low))
    first: Dict[int, int] = {}
    for r in range(len(prefix)):
        first.setdefault(r & ~below, r)
    for r in first.values():
        engine.store(offset(coords[r]), total[r])
    engine.barrier()
    results: Dict[int, Tuple[object, object, object]] = {}
    for key, r in first.items():
        c = coords[r]
        own = ops.and_(ops.lshr(c[axis], ops.const(low)), ops.const((1 << k) - 1))
        tots = [engine.load(offset(c, j)) for j in range(1 << k)]
        order = range(1 << k) if not reverse else range((1 << k) - 1, -1, -1)
        carry, full = None, None
        for j in order:
            before = engine.ult(ops.const(j), own) if not reverse else engine.ult(own, ops.const(j))
            if carry is None:  # blocks are visited in scan order: the first one decides validity
                carry, valid = tots[j], before
            else:
                step = engine.combine(carry, tots[j]) if not reverse else engine.combine(tots[j], carry)
                carry = engine.select(before, step, carry)
            full = tots[j] if full is None else (engine.combine(full, tots[j]) if not reverse
                                                 else engine.combine(tots[j], full))
        results[key] = (carry, valid, full)
    new_p, new_t = [], []
    for r in range(len(prefix)):
        carry, valid, full = results[r & ~below]
        joined = engine.combine(carry, prefix[r]) if not reverse else engine.combine(prefix[r], carry)
        new_p.append(engine.select(valid, joined, prefix[r]))
        new_t.append(full)
    return new_p, new_t
