"""Distributed and shared-memory layouts: which thread holds which tile element.

A distributed layout maps (register, lane, warp) to a coordinate of the tile.
Every layout here is *linear over bits*: for a given tile shape it is described
by one basis vector (a coordinate tuple) per register bit, per lane bit (5) and
per warp bit, and the coordinate of (r, l, w) is the XOR of the bases of the
bits set in r, l and w. Bases of bits that would land outside the tile are
zero: those threads or registers hold copies (replication), which is how a
layout larger than its tile covers it. For blocked, slice and mma layouts the
nonzero bases are distinct powers of two in one dimension each, so XOR equals
addition and coordinates are computed with shifts, masks and adds.

The bases drive everything generic: `elems_per_thread`, `coords` (with an `ops`
object, so the same code gives numpy arrays in tests and llvmlite values in
codegen), layout equivalence (no conversion needed when bases agree), and the
reduction lowering (which bits of a layout run along the reduced axis).

Layouts are dialect attributes, written for example

    #blocked{size_per_thread = [1, 4], threads_per_warp = [8, 4], warps_per_cta = [4, 1], order = [1, 0]}
    #slice{dim = 1, parent = #blocked{...}}
    #mma{version = 2, warps_per_cta = [2, 2], instr_shape = [16, 8]}
    #dot_op{op_idx = 0, parent = #mma{...}, k_width = 2}
    #linear{reg = [[0, 1]], lane = [[0, 2], ...], warp = [[1, 0]]}
    #shared{vec = 8, per_phase = 1, max_phase = 8, order = [1, 0], swizzle_bytes = 128}
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import List, NamedTuple, Sequence, Tuple

import numpy as np

from tilec.ir.core import register_attr

__all__ = [
    "LayoutError", "Bases", "DistributedLayout", "BlockedLayout", "SliceLayout", "MmaLayout",
    "DotOperandLayout", "LinearLayout", "SharedLayout", "NumpyOps", "equivalent", "registers_match", "check_layout",
    "default_blocked",
]

WARP_SIZE = 32
Coord = Tuple[int, ...]


class LayoutError(ValueError):
    """An invalid layout: inconsistent fields, or a layout that cannot describe a tile."""


def _pow2(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and (n & (n - 1)) == 0


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _ints(name: str, xs) -> Tuple[int, ...]:
    if not isinstance(xs, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in xs):
        raise LayoutError(f"{name} must be a list of integers, got {xs!r}")
    return tuple(xs)


def _check_order(order: Tuple[int, ...], rank: int) -> None:
    if sorted(order) != list(range(rank)):
        raise LayoutError(f"order {list(order)} is not a permutation of the {rank} dimensions")


class Bases(NamedTuple):
    reg: Tuple[Coord, ...]
    lane: Tuple[Coord, ...]
    warp: Tuple[Coord, ...]


class NumpyOps:
    """The `ops` of `coords` over numpy integer arrays (tests, host-side checks)."""

    def const(self, v): return np.int64(v)
    def add(self, a, b): return a + b
    def sub(self, a, b): return a - b
    def mul(self, a, b): return a * b
    def udiv(self, a, b): return a // b
    def urem(self, a, b): return a % b
    def and_(self, a, b): return a & b
    def or_(self, a, b): return a | b
    def xor(self, a, b): return a ^ b
    def shl(self, a, b): return a << b
    def lshr(self, a, b): return a >> b


def _mask(b: Coord, shape: Sequence[int]) -> Coord:
    """Wrap a basis into the tile: a component at or past the extent is a copy (0)."""
    return tuple(x & (s - 1) for x, s in zip(b, shape))


def _xor(a: Coord, b: Coord) -> Coord:
    return tuple(x ^ y for x, y in zip(a, b))


def _unit(rank: int, dim: int, value: int) -> Coord:
    return tuple(value if d == dim else 0 for d in range(rank))


class DistributedLayout:
    """Base of register layouts. Subclasses give `_raw_bases(shape)` (before wrapping)."""

    attr_name = "<abstract>"
    rank: int

    # --- what subclasses define
    def _raw_bases(self, shape: Tuple[int, ...]) -> Bases:
        raise NotImplementedError

    @property
    def num_warps(self) -> int:
        raise NotImplementedError

    # --- derived, generic
    def bases(self, shape: Sequence[int]) -> Bases:
        return _bases_cached(self, tuple(int(s) for s in shape))

    def elems_per_thread(self, shape: Sequence[int]) -> int:
        return 1 << len(self.bases(shape).reg)

    def reg_offsets(self, shape: Sequence[int]) -> List[Coord]:
        """Per register, in register order, its coordinate offset from the thread's base."""
        reg = self.bases(shape).reg
        out = []
        for r in range(1 << len(reg)):
            c = (0,) * len(shape)
            for k, b in enumerate(reg):
                if r >> k & 1:
                    c = _xor(c, b)
            out.append(c)
        return out

    def thread_base(self, shape: Sequence[int], lane, warp, ops) -> tuple:
        """Per dimension, the coordinate of the thread's register 0."""
        bs = self.bases(shape)
        return _thread_base(bs, len(shape), lane, warp, ops, _disjoint(bs))

    def coords(self, shape: Sequence[int], lane, warp, ops) -> List[tuple]:
        """Per register element (in register order) the tuple of coordinates it holds."""
        shape = tuple(shape)
        bs = self.bases(shape)
        disjoint = _disjoint(bs)
        base = _thread_base(bs, len(shape), lane, warp, ops, disjoint)
        combine = ops.add if disjoint else ops.xor
        out = []
        for off in self.reg_offsets(shape):
            out.append(tuple(combine(b, ops.const(o)) if o else b for b, o in zip(base, off)))
        return out

    def check_shape(self, shape: Sequence[int]) -> None:
        if len(shape) != self.rank:
            raise LayoutError(f"{self} is a rank-{self.rank} layout, the tile has shape {list(shape)}")

    def __str__(self) -> str:
        from tilec.ir.printer import format_dialect_attr
        return format_dialect_attr(self)


@lru_cache(maxsize=4096)
def _bases_cached(layout: DistributedLayout, shape: Tuple[int, ...]) -> Bases:
    layout.check_shape(shape)
    raw = layout._raw_bases(shape)
    return Bases(*(tuple(_mask(b, shape) for b in group) for group in raw))


def _disjoint(bs: Bases) -> bool:
    """True when every nonzero basis is one bit, and no two share it: XOR is then addition."""
    seen = set()
    for b in bs.reg + bs.lane + bs.warp:
        for d, x in enumerate(b):
            if x == 0:
                continue
            if x & (x - 1) or (d, x) in seen or sum(1 for y in b if y) != 1:
                return False
            seen.add((d, x))
    return True


def _bits_to_coord(bases: Sequence[Coord], v, dim: int, ops, disjoint: bool):
    """The `dim` coordinate contributed by the bits of the run-time value `v`."""
    terms = []
    if disjoint:
        # runs of consecutive bits of `v` that map to consecutive coordinate bits: one shift+mask each
        k = 0
        while k < len(bases):
            x = bases[k][dim]
            if x == 0:
                k += 1
                continue
            n = 1
            while k + n < len(bases) and bases[k + n][dim] == x << n:
                n += 1
            t = ops.and_(ops.lshr(v, ops.const(k)) if k else v, ops.const((1 << n) - 1))
            p = _log2(x)
            terms.append(ops.shl(t, ops.const(p)) if p else t)
            k += n
        combine = ops.add
    else:
        for k, b in enumerate(bases):
            if b[dim]:
                bit = ops.and_(ops.lshr(v, ops.const(k)) if k else v, ops.const(1))
                terms.append(ops.mul(bit, ops.const(b[dim])))
        combine = ops.xor
    if not terms:
        return ops.const(0)
    acc = terms[0]
    for t in terms[1:]:
        acc = combine(acc, t)
    return acc


def _thread_base(bs: Bases, rank: int, lane, warp, ops, disjoint: bool) -> tuple:
    combine = ops.add if disjoint else ops.xor
    out = []
    for d in range(rank):
        parts = []
        if any(b[d] for b in bs.lane):
            parts.append(_bits_to_coord(bs.lane, lane, d, ops, disjoint))
        if any(b[d] for b in bs.warp):
            parts.append(_bits_to_coord(bs.warp, warp, d, ops, disjoint))
        if not parts:
            out.append(ops.const(0))
        elif len(parts) == 1:
            out.append(parts[0])
        else:
            out.append(combine(parts[0], parts[1]))
    return tuple(out)


def equivalent(a, b, shape: Sequence[int]) -> bool:
    """Two layouts put every element of a tile of `shape` in the same register of the same thread."""
    if a == b:
        return True
    if not (isinstance(a, DistributedLayout) and isinstance(b, DistributedLayout)):
        return False
    if a.num_warps != b.num_warps:
        return False
    return a.bases(shape) == b.bases(shape)


def registers_match(a, b, shape: Sequence[int]) -> bool:
    """Converting a tile of `shape` from layout `a` to `b` is a renumbering of each thread's
    registers: lanes and warps hold the same elements (no shuffle, no shared memory)."""
    if not (isinstance(a, DistributedLayout) and isinstance(b, DistributedLayout)) or a.num_warps != b.num_warps:
        return False
    x, y = a.bases(shape), b.bases(shape)
    return x.lane == y.lane and x.warp == y.warp and sorted(x.reg) == sorted(y.reg)


def check_layout(layout, shape: Sequence[int], num_warps: int = None) -> None:
    """Raise LayoutError unless `layout` can describe a tile of `shape` (with `num_warps` warps)."""
    if not isinstance(layout, DistributedLayout):
        raise LayoutError(f"{layout} is not a register layout")
    layout.check_shape(shape)
    if num_warps is not None and layout.num_warps != num_warps:
        raise LayoutError(f"{layout} spreads over {layout.num_warps} warps, the kernel runs {num_warps}")


# ----------------------------------------------------------------------------- blocked
@register_attr
@dataclass(frozen=True)
class BlockedLayout(DistributedLayout):
    """Each thread holds `size_per_thread` contiguous elements per dimension; threads of a warp,
    then warps, tile the rest; `order[0]` is the fastest-varying (contiguous) dimension.
    A tile larger than the CTA's extent repeats the pattern (more registers); a smaller
    one wraps around (copies).

    Register order: dimensions in `order`, the first fastest; within a dimension the
    `size_per_thread` elements first, then the repetitions.
    """
    size_per_thread: Tuple[int, ...]
    threads_per_warp: Tuple[int, ...]
    warps_per_cta: Tuple[int, ...]
    order: Tuple[int, ...]

    attr_name = "blocked"

    def __post_init__(self):
        for name in ("size_per_thread", "threads_per_warp", "warps_per_cta", "order"):
            object.__setattr__(self, name, _ints(name, getattr(self, name)))
        r = len(self.order)
        if not (len(self.size_per_thread) == len(self.threads_per_warp) == len(self.warps_per_cta) == r) or r == 0:
            raise LayoutError("blocked layout fields must all have one entry per dimension")
        _check_order(self.order, r)
        for name in ("size_per_thread", "threads_per_warp", "warps_per_cta"):
            if not all(_pow2(x) for x in getattr(self, name)):
                raise LayoutError(f"blocked layout {name} must be powers of two, got {list(getattr(self, name))}")
        if _prod(self.threads_per_warp) != WARP_SIZE:
            raise LayoutError(f"threads_per_warp {list(self.threads_per_warp)} must multiply to {WARP_SIZE}")

    @property
    def rank(self) -> int:
        return len(self.order)

    @property
    def num_warps(self) -> int:
        return _prod(self.warps_per_cta)

    def cta_extent(self) -> Tuple[int, ...]:
        return tuple(s * t * w for s, t, w in zip(self.size_per_thread, self.threads_per_warp, self.warps_per_cta))

    def _raw_bases(self, shape):
        r = self.rank
        ext = self.cta_extent()
        reg, lane, warp = [], [], []
        for d in self.order:
            spt = self.size_per_thread[d]
            reg += [_unit(r, d, 1 << k) for k in range(_log2(spt))]
            reps = max(1, shape[d] // ext[d])
            reg += [_unit(r, d, ext[d] << k) for k in range(_log2(reps))]
        for d in self.order:
            lane += [_unit(r, d, self.size_per_thread[d] << k) for k in range(_log2(self.threads_per_warp[d]))]
        for d in self.order:
            step = self.size_per_thread[d] * self.threads_per_warp[d]
            warp += [_unit(r, d, step << k) for k in range(_log2(self.warps_per_cta[d]))]
        return Bases(tuple(reg), tuple(lane), tuple(warp))

    def fields(self):
        return {"size_per_thread": list(self.size_per_thread), "threads_per_warp": list(self.threads_per_warp),
                "warps_per_cta": list(self.warps_per_cta), "order": list(self.order)}

    @classmethod
    def from_fields(cls, f):
        return cls(f.get("size_per_thread"), f.get("threads_per_warp"), f.get("warps_per_cta"), f.get("order"))


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def default_blocked(shape: Sequence[int], num_warps: int, vec: int = 1, order: Sequence[int] = None) -> BlockedLayout:
    """A blocked layout for a tile of `shape`: `vec` elements per thread along the contiguous
    dimension `order[0]` (default: the last), lanes then warps filling the contiguous
    dimension first and the others after, so that few threads hold copies."""
    rank = len(shape)
    order = tuple(order) if order is not None else tuple(range(rank - 1, -1, -1))
    if not _pow2(num_warps):
        raise LayoutError(f"num_warps must be a power of two, got {num_warps}")
    spt = [1] * rank
    c = order[0]
    spt[c] = max(1, min(vec, shape[c]))
    tpw = [1] * rank
    left = WARP_SIZE
    for d in order:
        room = max(1, shape[d] // spt[d])
        t = min(left, room)
        tpw[d] = t
        left //= t
    tpw[order[-1]] *= left  # a tile too small for a warp: the slowest dimension takes the copies
    wpc = [1] * rank
    left = num_warps
    for d in order:
        room = max(1, shape[d] // (spt[d] * tpw[d]))
        w = min(left, room)
        wpc[d] = w
        left //= w
    wpc[order[-1]] *= left
    return BlockedLayout(tuple(spt), tuple(tpw), tuple(wpc), order)


# ----------------------------------------------------------------------------- slice
@register_attr
@dataclass(frozen=True)
class SliceLayout(DistributedLayout):
    """The layout of `parent` with dimension `dim` removed: what a reduction along `dim`
    leaves (each thread keeps the elements of the other dimensions it held)."""
    dim: int
    parent: DistributedLayout

    attr_name = "slice"

    def __post_init__(self):
        if not isinstance(self.parent, DistributedLayout):
            raise LayoutError(f"slice parent must be a register layout, got {self.parent!r}")
        if not isinstance(self.dim, int) or not 0 <= self.dim < self.parent.rank:
            raise LayoutError(f"slice dim {self.dim!r} out of range for a rank-{self.parent.rank} parent")
        if self.parent.rank < 2:
            raise LayoutError("a slice needs a parent of rank 2 or more")

    @property
    def rank(self) -> int:
        return self.parent.rank - 1

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def parent_shape(self, shape) -> Tuple[int, ...]:
        s = list(shape)
        s.insert(self.dim, 1)
        return tuple(s)

    def _raw_bases(self, shape):
        if isinstance(self.parent, LinearLayout):
            # explicit bases (a reshape's, a cat's) already span the operand the reduction
            # read, whose extent along `dim` is not 1: take them as they are
            pb = Bases(self.parent.reg, self.parent.lane, self.parent.warp)
        else:
            pb = self.parent._raw_bases(self.parent_shape(shape))

        def drop(b):
            return b[:self.dim] + b[self.dim + 1:]
        # registers that only walked the removed dimension are gone; lanes and warps along
        # it now hold copies (their basis becomes zero)
        reg = tuple(drop(b) for b in pb.reg if not (b[self.dim] and not any(drop(b))))
        return Bases(reg, tuple(drop(b) for b in pb.lane), tuple(drop(b) for b in pb.warp))

    def fields(self):
        return {"dim": self.dim, "parent": self.parent}

    @classmethod
    def from_fields(cls, f):
        return cls(f.get("dim"), f.get("parent"))


# ----------------------------------------------------------------------------- tensor cores
@register_attr
@dataclass(frozen=True)
class MmaLayout(DistributedLayout):
    """Accumulator layout of mma.sync (version 2, instr_shape [16, 8]: m16n8) and wgmma
    (version 3, instr_shape [16, n]: a warpgroup's m64nN, 16 rows per warp).

    Per warp and instruction tile (PTX ISA, g = lane / 4, t = lane % 4):
    c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1], then (wgmma)
    the same for each further 8 columns. Warps: the first `warps_per_cta[0]` along M.
    Register order: the 4 values, the 8-column blocks (wgmma), then repetitions
    along N, then along M.
    """
    version: int
    warps_per_cta: Tuple[int, ...]
    instr_shape: Tuple[int, ...]

    attr_name = "mma"

    def __post_init__(self):
        object.__setattr__(self, "warps_per_cta", _ints("warps_per_cta", self.warps_per_cta))
        object.__setattr__(self, "instr_shape", _ints("instr_shape", self.instr_shape))
        if self.version not in (2, 3):
            raise LayoutError(f"mma version must be 2 (mma.sync) or 3 (wgmma), got {self.version!r}")
        if len(self.warps_per_cta) != 2 or not all(_pow2(w) for w in self.warps_per_cta):
            raise LayoutError(f"mma warps_per_cta must be two powers of two, got {list(self.warps_per_cta)}")
        if len(self.instr_shape) != 2 or self.instr_shape[0] != 16:
            raise LayoutError(f"mma instr_shape must be [16, n] (rows per warp, columns), got {list(self.instr_shape)}")
        n = self.instr_shape[1]
        if self.version == 2 and n != 8:
            raise LayoutError("mma.sync (version 2) has instr_shape [16, 8]")
        if self.version == 3:
            if not (_pow2(n) and 8 <= n <= 256):
                raise LayoutError(f"wgmma n must be a power of two from 8 to 256, got {n}")
            if self.warps_per_cta[0] % 4:
                raise LayoutError("wgmma needs warps_per_cta[0] to be a multiple of 4 (whole warpgroups along M)")

    rank = 2

    @property
    def num_warps(self) -> int:
        return self.warps_per_cta[0] * self.warps_per_cta[1]

    def _raw_bases(self, shape):
        wm, wn = self.warps_per_cta
        n = self.instr_shape[1]
        reg = [(0, 1), (8, 0)] + [(0, 8 << k) for k in range(_log2(n // 8))]
        reg += [(0, (n * wn) << k) for k in range(_log2(max(1, shape[1] // (n * wn))))]
        reg += [((16 * wm) << k, 0) for k in range(_log2(max(1, shape[0] // (16 * wm))))]
        lane = [(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)]
        warp = [(16 << k, 0) for k in range(_log2(wm))] + [(0, n << k) for k in range(_log2(wn))]
        return Bases(tuple(reg), tuple(lane), tuple(warp))

    def fields(self):
        return {"version": self.version, "warps_per_cta": list(self.warps_per_cta),
                "instr_shape": list(self.instr_shape)}

    @classmethod
    def from_fields(cls, f):
        return cls(f.get("version"), f.get("warps_per_cta"), f.get("instr_shape"))


@register_attr
@dataclass(frozen=True)
class DotOperandLayout(DistributedLayout):
    """Register layout of an mma operand: A (op_idx 0, M x K) or B (op_idx 1, K x N).

    `k_width` elements of K share one 32-bit register (2 for f16/bf16, 1 for tf32,
    4 for f8), and one instruction covers K = 8 * k_width. With g = lane / 4,
    t = lane % 4 and kw = k_width (PTX ISA fragments, m16n8k16 for kw = 2):
    A: a0 = A[g][kw*t ..], a1 = A[g+8][kw*t ..], a2 = A[g][kw*t + 4kw ..], a3 = A[g+8][kw*t + 4kw ..];
    B: b0 = B[kw*t ..][g], b1 = B[kw*t + 4kw ..][g].
    A is replicated over the warps along N, B over the warps along M. A wgmma
    parent (version 3) takes A from registers only.
    """
    op_idx: int
    parent: MmaLayout
    k_width: int

    attr_name = "dot_op"

    def __post_init__(self):
        if not isinstance(self.parent, MmaLayout):
            raise LayoutError(f"dot operand parent must be an #mma layout, got {self.parent!r}")
        if self.op_idx not in (0, 1):
            raise LayoutError(f"op_idx must be 0 (A) or 1 (B), got {self.op_idx!r}")
        if self.k_width not in (1, 2, 4):
            raise LayoutError(f"k_width must be 1, 2 or 4 elements per 32-bit register, got {self.k_width!r}")
        if self.parent.version == 3 and self.op_idx == 1:
            raise LayoutError("wgmma reads its B operand from shared memory, not registers")

    rank = 2

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _raw_bases(self, shape):
        kw = self.k_width
        wm, wn = self.parent.warps_per_cta
        within = [1 << j for j in range(_log2(kw))]
        if self.op_idx == 0:
            reg = [(0, x) for x in within] + [(8, 0), (0, 4 * kw)]
            reg += [(0, (8 * kw) << k) for k in range(_log2(max(1, shape[1] // (8 * kw))))]
            reg += [((16 * wm) << k, 0) for k in range(_log2(max(1, shape[0] // (16 * wm))))]
            lane = [(0, kw), (0, 2 * kw), (1, 0), (2, 0), (4, 0)]
            warp = [(16 << k, 0) for k in range(_log2(wm))] + [(0, 0)] * _log2(wn)
        else:
            n = self.parent.instr_shape[1]
            reg = [(x, 0) for x in within] + [(4 * kw, 0)]
            reg += [((8 * kw) << k, 0) for k in range(_log2(max(1, shape[0] // (8 * kw))))]
            reg += [(0, (n * wn) << k) for k in range(_log2(max(1, shape[1] // (n * wn))))]
            lane = [(kw, 0), (2 * kw, 0), (0, 1), (0, 2), (0, 4)]
            warp = [(0, 0)] * _log2(wm) + [(0, n << k) for k in range(_log2(wn))]
        return Bases(tuple(reg), tuple(lane), tuple(warp))

    def fields(self):
        return {"op_idx": self.op_idx, "parent": self.parent, "k_width": self.k_width}

    @classmethod
    def from_fields(cls, f):
        return cls(f.get("op_idx"), f.get("parent"), f.get("k_width"))


# ----------------------------------------------------------------------------- explicit bases
@register_attr
@dataclass(frozen=True)
class LinearLayout(DistributedLayout):
    """A layout given by its bases directly (the partial results of a reduction use these)."""
    reg: Tuple[Coord, ...]
    lane: Tuple[Coord, ...]
    warp: Tuple[Coord, ...]

    attr_name = "linear"

    def __post_init__(self):
        for name in ("reg", "lane", "warp"):
            v = getattr(self, name)
            if not isinstance(v, (list, tuple)):
                raise LayoutError(f"linear layout {name} must be a list of coordinates")
            object.__setattr__(self, name, tuple(_ints(name, b) for b in v))
        if len(self.lane) != _log2(WARP_SIZE):
            raise LayoutError(f"a linear layout needs {_log2(WARP_SIZE)} lane bases, got {len(self.lane)}")
        ranks = {len(b) for b in self.reg + self.lane + self.warp}
        if len(ranks) != 1 or 0 in ranks:
            raise LayoutError("linear layout bases must all have the tile's rank")
        if any(x < 0 for b in self.reg + self.lane + self.warp for x in b):
            raise LayoutError("linear layout bases must be non-negative")

    @property
    def rank(self) -> int:
        return len(self.lane[0])

    @property
    def num_warps(self) -> int:
        return 1 << len(self.warp)

    def _raw_bases(self, shape):
        for b in self.reg + self.lane + self.warp:
            if any(x >= s != 1 for x, s in zip(b, shape)):
                raise LayoutError(f"linear layout basis {list(b)} lies outside a tile of shape {list(shape)}")
        if any(s == 1 for s in shape):   # a broadcast's source: bits along its unit dimensions are copies
            r = self.restricted(shape)
            return Bases(r.reg, r.lane, r.warp)
        return Bases(self.reg, self.lane, self.warp)

    @classmethod
    def of(cls, bases: Bases) -> "LinearLayout":
        return cls(bases.reg, bases.lane, bases.warp)

    def restricted(self, shape) -> "LinearLayout":
        """This layout for a smaller tile of `shape` that broadcasts to the tiles it was made
        for (extent 1 where they have more; one layout serves a broadcast's source and result):
        each basis' coordinate past the smaller extent becomes 0, a copy, as a blocked
        layout's bits along a broadcast dimension wrap."""
        def cut(b):
            return tuple(x if x < s else 0 for x, s in zip(b, shape))
        return LinearLayout([cut(b) for b in self.reg], [cut(b) for b in self.lane], [cut(b) for b in self.warp])

    def fields(self):
        return {k: [list(b) for b in getattr(self, k)] for k in ("reg", "lane", "warp")}

    @classmethod
    def from_fields(cls, f):
        return cls(f.get("reg", []), f.get("lane", []), f.get("warp", []))


# ----------------------------------------------------------------------------- shared memory
@register_attr
@dataclass(frozen=True)
class SharedLayout:
    """A tile in shared memory, row-major along `order` (order[0] contiguous), with an XOR
    swizzle: in row r, the `vec`-element chunk c is stored at chunk
    c ^ ((r // per_phase) % max_phase). vec = per_phase = max_phase = 1 is no swizzle.

    `swizzle_bytes` 32/64/128 names the wgmma/TMA swizzle modes, which are this swizzle
    with 16-byte chunks: per_phase = 128 / swizzle_bytes, max_phase = swizzle_bytes / 16
    (the box's contiguous extent is swizzle_bytes wide); 0 means a plain XOR swizzle.
    """
    vec: int = 1
    per_phase: int = 1
    max_phase: int = 1
    order: Tuple[int, ...] = (1, 0)
    swizzle_bytes: int = 0

    attr_name = "shared"

    def __post_init__(self):
        object.__setattr__(self, "order", _ints("order", self.order))
        _check_order(self.order, len(self.order))
        for name in ("vec", "per_phase", "max_phase"):
            if not _pow2(getattr(self, name)):
                raise LayoutError(f"shared layout {name} must be a power of two, got {getattr(self, name)!r}")
        if self.swizzle_bytes not in (0, 32, 64, 128):
            raise LayoutError(f"swizzle_bytes must be 0, 32, 64 or 128, got {self.swizzle_bytes!r}")
        if self.swizzle_bytes and (self.per_phase != 128 // self.swizzle_bytes
                                   or self.max_phase != self.swizzle_bytes // 16):
            raise LayoutError(f"a {self.swizzle_bytes}-byte swizzle has per_phase = {128 // self.swizzle_bytes} "
                              f"and max_phase = {self.swizzle_bytes // 16}")

    @classmethod
    def for_swizzle(cls, swizzle_bytes: int, elem_bytes: int, order=(1, 0)) -> "SharedLayout":
        """The wgmma/TMA swizzle mode `swizzle_bytes` for elements of `elem_bytes` bytes."""
        if swizzle_bytes == 0:
            return cls(1, 1, 1, tuple(order), 0)
        return cls(16 // elem_bytes, 128 // swizzle_bytes, swizzle_bytes // 16, tuple(order), swizzle_bytes)

    @property
    def rank(self) -> int:
        return len(self.order)

    def offset(self, shape: Sequence[int], coord: Sequence, ops):
        """The element offset of `coord` in a buffer of `shape` (ops as in `coords`).

        The phase is limited to the chunks a row has, so narrow rows stay in place."""
        if len(shape) != self.rank or len(coord) != self.rank:
            raise LayoutError(f"{self} is a rank-{self.rank} layout, the buffer has shape {list(shape)}")
        c = self.order[0]
        ncol = shape[c]
        width = self.vec * self.max_phase
        if self.swizzle_bytes and ncol > width:
            return self._block_offset(shape, coord, width, ops)
        row = ops.const(0)
        stride = 1
        for d in self.order[1:]:
            row = ops.add(row, ops.mul(coord[d], ops.const(stride))) if stride > 1 else ops.add(row, coord[d])
            stride *= shape[d]
        col = coord[c]
        phases = min(self.max_phase, max(1, ncol // self.vec))
        if phases > 1:
            phase = ops.and_(ops.udiv(row, ops.const(self.per_phase)), ops.const(phases - 1))
            col = ops.xor(col, ops.mul(phase, ops.const(self.vec)))
        return ops.add(ops.mul(row, ops.const(ncol)), col)

    def _block_offset(self, shape, coord, width: int, ops):
        """wgmma/TMA form of a row wider than the swizzle: the contiguous dimension is cut
        into `width`-element column blocks (one TMA box, one wgmma core-matrix column), each
        stored whole (all rows of order[1]) before the next; dimensions past order[1]
        (slots) are outermost."""
        c, r = self.order[0], self.order[1]
        rows = shape[r]
        col = coord[c]
        block = ops.udiv(col, ops.const(width))
        within = ops.and_(col, ops.const(width - 1))
        phase = ops.and_(ops.udiv(coord[r], ops.const(self.per_phase)), ops.const(self.max_phase - 1))
        within = ops.xor(within, ops.mul(phase, ops.const(self.vec)))
        off = ops.add(ops.mul(ops.add(ops.mul(block, ops.const(rows)), coord[r]), ops.const(width)), within)
        stride = rows * shape[c]
        for d in self.order[2:]:
            off = ops.add(off, ops.mul(coord[d], ops.const(stride)))
            stride *= shape[d]
        return off

    def fields(self):
        return {"vec": self.vec, "per_phase": self.per_phase, "max_phase": self.max_phase,
                "order": list(self.order), "swizzle_bytes": self.swizzle_bytes}

    @classmethod
    def from_fields(cls, f):
        return cls(f.get("vec", 1), f.get("per_phase", 1), f.get("max_phase", 1), f.get("order", (1, 0)),
                   f.get("swizzle_bytes", 0))

    def __str__(self) -> str:
        from tilec.ir.printer import format_dialect_attr
        return format_dialect_attr(self)
