"""assign_layouts: give every tile value a register layout, converting only where needed.

1. Values that must share a layout form groups (union-find): the operands and
   results of elementwise ops, of loads/stores/atomics, of broadcast (one layout
   serves both shapes: on the smaller one its bits along broadcast dimensions
   wrap to copies), and the values a loop or branch carries.
2. Anchors: each pointer-tile access asks for the blocked layout that gives it
   `_vec`-element (up to 16-byte) accesses along its contiguous dimension, lanes
   then warps ordered along that dimension (coalescing). A group takes the
   widest request among its accesses.
3. Propagation across ops that relate different layouts, until nothing changes:
   reduce (result = slice of the input along the axis), expand_dims (input =
   slice of the result), dot (the FMA operand layouts derive from the
   accumulator's), reshape/permute (same placement, renumbered coordinates),
   cat (the operands are the result without the register bit that picks the
   half; a result whose halves lie in different threads is produced in a layout
   where that bit is a register, then converted).
   A group nothing reaches gets a default blocked layout over its largest shape
   (then propagation resumes).
4. Types are rewritten; where an op's requirement and its operand's group
   disagree (placement differs, not merely spelling), a gpu.convert_layout is
   inserted.

What each op class contributes to steps 1, 3 and 4 is its `LayoutRule` in `_RULES` (its
group, step, required and result parts), as axis_info's rules are a table by op class.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from tilec.ir import Builder, Module, Op, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import TileType

from ..gpu.layouts import (Bases, BlockedLayout, DistributedLayout, LayoutError, LinearLayout, MmaLayout,
                           SliceLayout, default_blocked, equivalent)
from ..gpu.ops import ConvertLayoutOp
from .accelerate_dot import dot_acc_layout, dot_operand_layout
from .axis_info import axis_info
from .rewrite import invariant_loop

__all__ = ["assign_layouts", "fma_operand_layout", "fma_acc_layout", "cat_layouts"]

_MEM = (T.LoadOp, T.LoadMaskedOp, T.StoreOp, T.StoreMaskedOp, T.AtomicRMWOp, T.AtomicCASOp)


class _Groups:
    def __init__(self):
        self.parent: Dict[int, int] = {}
        self.values: Dict[int, Value] = {}

    def add(self, v: Value) -> None:
        if isinstance(v.type, TileType) and id(v) not in self.parent:
            self.parent[id(v)] = id(v)
            self.values[id(v)] = v

    def find(self, v) -> int:
        k = v if isinstance(v, int) else id(v)
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, *vs: Value) -> None:
        vs = [v for v in vs if isinstance(v.type, TileType)]
        for v in vs:
            self.add(v)
        for v in vs[1:]:
            a, b = self.find(vs[0]), self.find(v)
            if a != b:
                self.parent[b] = a

    def members(self) -> Dict[int, List[Value]]:
        out: Dict[int, List[Value]] = {}
        for k, v in self.values.items():
            out.setdefault(self.find(k), []).append(v)
        return out


def _build_groups(func) -> _Groups:
    g = _Groups()
    for a in func.body.args:
        g.add(a)
    for op in func.walk():
        for v in list(op.operands) + list(op.results):
            g.add(v)
        for r in op.regions:
            for blk in r.blocks:
                for a in blk.args:
                    g.add(a)
        if op.has_trait("elementwise"):
            _union_all(g, op)
            continue
        rule = _RULES.get(type(op))
        if rule is not None and rule.group is not None:
            rule.group(g, op)
    return g


def fma_operand_layout(acc: DistributedLayout, acc_shape, op_idx: int, k: int) -> LinearLayout:
    """Layout of dot operand `op_idx` for the FMA lowering: each thread holds, for every row
    (A) or column (B) of the accumulator it owns, the whole K extent in registers, K bits
    first (register index = k + K * row_or_col_index)."""
    bs = acc.bases(acc_shape)
    keep = 0 if op_idx == 0 else 1  # the accumulator dimension this operand shares

    def place(b):
        x = b[keep] if not b[1 - keep] else 0
        return (x, 0) if op_idx == 0 else (0, x)
    kbits = [(0, 1 << j) if op_idx == 0 else (1 << j, 0) for j in range(k.bit_length() - 1)]
    reg = kbits + [place(b) for b in bs.reg if b[keep] and not b[1 - keep]]
    return LinearLayout(tuple(reg), tuple(place(b) for b in bs.lane), tuple(place(b) for b in bs.warp))


def fma_acc_layout(shape, num_warps: int) -> BlockedLayout:
    """Accumulator layout of the FMA dot: lanes 4 x 8 and warps 2-D over the tile, so each
    thread owns a block of rows and columns as close to square as the tile allows."""
    m, n = shape
    tpw = [min(4, m), 32 // min(4, m)]
    wpc = [1, 1]
    left = num_warps
    while left > 1:
        d = 0 if m // (tpw[0] * wpc[0]) >= n // (tpw[1] * wpc[1]) else 1
        wpc[d] *= 2
        left //= 2
    spt = [max(1, m // (tpw[0] * wpc[0])), max(1, n // (tpw[1] * wpc[1]))]
    return BlockedLayout(tuple(spt), tuple(tpw), tuple(wpc), (1, 0))


def _renumber(bases: Bases, src_shape, dst_shape, coord_map) -> Optional[LinearLayout]:
    """Bases over src_shape moved to dst_shape by a bit-permuting coordinate map."""
    out = []
    for grp in bases:
        new = []
        for b in grp:
            if not any(b):
                new.append((0,) * len(dst_shape))
                continue
            nb = coord_map(b)
            if nb is None:
                return None
            new.append(nb)
        out.append(tuple(new))
    try:
        return LinearLayout(*out)
    except LayoutError:
        return None


def cat_layouts(result: DistributedLayout, shape, axis: int, num_warps: int):
    """(operand layout, layout the cat produces) for a cat along `axis` into a tile of `shape`
    whose layout is `result`. The bit of the axis coordinate that picks lhs or rhs must be
    a register bit, so that each thread holds its elements of both halves; when `result`
    gives it to a lane or a warp, that basis becomes a copy and a register takes the bit
    (the produced layout then differs from `result`: a conversion follows)."""
    half = shape[axis] // 2
    shape = tuple(shape)
    bs = result.bases(shape)
    one_bit = all(sum(1 for x in b if x) <= 1 and not (x & (x - 1)) for g in bs for b in g for x in b)
    if not one_bit:
        bs = default_blocked(shape, num_warps).bases(shape)
    top = tuple(half if d == axis else 0 for d in range(len(shape)))
    zero = (0,) * len(shape)
    if top in bs.reg:
        produced = bs
    else:
        produced = Bases(bs.reg + (top,), tuple(zero if b == top else b for b in bs.lane),
                         tuple(zero if b == top else b for b in bs.warp))
    k = produced.reg.index(top)
    operand = LinearLayout(produced.reg[:k] + produced.reg[k + 1:], produced.lane, produced.warp)
    if produced == bs and one_bit and isinstance(result, DistributedLayout):
        return operand, result
    return operand, LinearLayout.of(produced)


def _reshape_coord(c, src, dst):
    """The coordinate in shape `dst` of the element at `c` in shape `src` (row-major)."""
    return tuple(int(x) for x in np.unravel_index(np.ravel_multi_index(c, src), dst))


def _dot_operand(op, acc, idx: int):
    """Layout operand `idx` of a dot must have, given its accumulator's layout."""
    if isinstance(acc, MmaLayout):  # tensor cores (accelerate_dot)
        return dot_operand_layout(acc, idx, op.operands[0].type.dtype)
    return fma_operand_layout(acc, op.results[0].type.shape, idx, op.operands[0].type.shape[1])


def _reshape_layout(layout, src, dst):
    return _renumber(layout.bases(src), src, dst, lambda b: _reshape_coord(b, src, dst))


class _Assigner:
    def __init__(self, func, num_warps: int, wgmma: bool, widen: bool = True):
        self.func = func
        self.widen = widen
        self.num_warps = num_warps
        self.wgmma = wgmma
        self.groups = _build_groups(func)
        self.layout: Dict[int, DistributedLayout] = {}
        self.members = self.groups.members()
        self._hoisted: Dict[Tuple[int, int, str], Value] = {}   # (value, loop, layout) -> its conversion

    def of(self, v: Value) -> Optional[DistributedLayout]:
        if not isinstance(v.type, TileType):
            return None
        if id(v) not in self.groups.parent:
            # a conversion `apply` inserted (a reduce's or a cat's result converted to its
            # group's layout, which its users now read): its type carries its layout
            return v.type.encoding
        return self.layout.get(self.groups.find(v))

    def _shapes(self, gid) -> set:
        return {tuple(v.type.shape) for v in self.members[gid]}

    def offer(self, v: Value, lay) -> bool:
        """Give `v`'s group the layout `lay` unless it has one (a #linear fits one shape only)."""
        if lay is None or not isinstance(v.type, TileType):
            return False
        gid = self.groups.find(v)
        if gid in self.layout:
            return False
        if isinstance(lay, LinearLayout) and len(self._shapes(gid)) > 1:
            return False
        self.layout[gid] = lay
        return True

    def anchors(self) -> None:
        best: Dict[int, Tuple[int, BlockedLayout]] = {}
        for op in self.func.walk():
            if isinstance(op, _MEM) and isinstance(op.operands[0].type, TileType):
                rank = len(op.operands[0].type.shape)
                vec = op.attrs.get("_vec", 1)
                dim = op.attrs.get("_contig_dim", rank - 1)
                order = [dim] + [d for d in range(rank - 1, -1, -1) if d != dim]
                gid = self.groups.find(op.operands[0])
                if gid not in best or vec > best[gid][0]:
                    # Spread over the group's largest shape, not the access's: a store of a
                    # (1, 1, 16) column result broadcast against (1, 256, 16) tiles would
                    # otherwise put its spare lanes and warps on dimensions of extent 1, and
                    # every thread would hold all 256 rows of the big ones.
                    best[gid] = (vec, default_blocked(self._largest(gid), self.num_warps, vec, order))
        for gid, (_, lay) in best.items():
            self.layout[gid] = lay
        # an FMA dot's operands hold, per thread, its accumulator rows and columns over all
        # of K: a square-ish block per thread keeps that small, so the dot outranks accesses
        dots = [op for op in self.func.walk() if isinstance(op, T.DotOp)]
        # a dot whose result reaches another dot's A through elementwise ops (one group)
        a_groups = {self.groups.find(op.operands[0]) for op in dots}
        acc_groups = {self.groups.find(op.results[0]) for op in dots}
        by_group: Dict[int, List[Tuple[Op, bool]]] = {}
        for op in dots:
            chained = self.groups.find(op.results[0]) in a_groups or self.groups.find(op.operands[0]) in acc_groups
            by_group.setdefault(self.groups.find(op.results[0]), []).append((op, chained))
        for gid, ops in by_group.items():
            self.layout[gid] = self._acc_layout(ops)
        # Row statistics of a tensor-core accumulator that a loop carries (attention's running
        # max and sum) stay in the slice of its layout, where the row reduction leaves them: an
        # access anchor (the lse store after the loop) would make them blocked and convert them
        # through shared memory, with barriers, several times per iteration.
        carried = self._loop_carried()
        for op in self.func.walk():
            if isinstance(op, (T.ReduceOp, T.ReduceGenericOp)) and op.operands[0].type.rank >= 2:
                src = self.layout.get(self.groups.find(op.operands[0]))
                gid = self.groups.find(op.results[0])
                if isinstance(src, MmaLayout) and gid in carried:
                    self.layout[gid] = SliceLayout(op.attrs["axis"], src)

    def _acc_layout(self, ops: List[Tuple[Op, bool]]) -> DistributedLayout:
        """The accumulator layout of a group holding the accumulators of the dots `ops`
        ((dot, chained) pairs, in program order). Several dots share one group when their
        accumulators meet in one value (a zeros tile that CSE made one, a bias two dots add
        to): the layout must be one that every one of them computes in. Of the layouts they
        ask `dot_acc_layout` for, the last one's that all can compute in (a wgmma layout only
        the dots whose tile takes the same wgmma shape, an mma.sync one every tensor-core dot);
        else the FMA layout, which every dot computes in."""
        asked = [dot_acc_layout(op, self.num_warps, self.wgmma, chained) for op, chained in ops]
        for lay in reversed(asked):
            if lay is not None and all(_computes_in(op, lay, own) for (op, _), own in zip(ops, asked)):
                return lay
        if all(lay is not None for lay in asked):   # wgmma for some, not others: all on mma.sync
            return dot_acc_layout(ops[-1][0], self.num_warps, False, any(chained for _, chained in ops))
        return fma_acc_layout(ops[0][0].results[0].type.shape, self.num_warps)

    def _loop_carried(self) -> set:
        """The groups of values that a loop carries (its body's arguments after the index)."""
        out = set()
        for op in self.func.walk():
            if isinstance(op, T.ForOp):
                out.update(self.groups.find(a) for a in op.body.args[1:] if isinstance(a.type, TileType))
        return out

    def propagate(self) -> None:
        changed = True
        while changed:
            changed = False
            for op in self.func.walk():
                changed |= self._step(op)

    def _step(self, op: Op) -> bool:
        """Propagate a layout across `op` (its rule's `step`); whether a group got one."""
        rule = _RULES.get(type(op))
        return rule.step(self, op) if rule is not None and rule.step is not None else False

    def _largest(self, gid) -> Tuple[int, ...]:
        """The largest shape among a group's values (all of one rank: broadcasts keep it)."""
        return max(self._shapes(gid), key=lambda s: (_numel(s), s))

    def defaults(self) -> bool:
        for gid, vs in self.members.items():
            if gid not in self.layout:
                self.layout[gid] = default_blocked(self._largest(gid), self.num_warps)
                return True
        return False

    def required(self, op: Op) -> List[Tuple[int, DistributedLayout]]:
        """(operand index, layout it must have) for the ops that relate layouts (their rule's `required`)."""
        rule = _RULES.get(type(op))
        return rule.required(self, op) if rule is not None and rule.required is not None else []

    def _cat_from_operands(self, op) -> Optional[LinearLayout]:
        """When both halves of a cat share a layout, the cat can produce its result from them
        as they are (the half-picking bit a register): at most the result is converted."""
        a, b = self.of(op.operands[0]), self.of(op.operands[1])
        shape = op.operands[0].type.shape
        if not equivalent(a, b, shape):
            return None
        axis = op.attrs["axis"]
        bs = a.bases(shape)
        top = tuple(shape[axis] if d == axis else 0 for d in range(len(shape)))
        return LinearLayout(bs.reg + (top,), bs.lane, bs.warp)

    def apply(self) -> None:
        for k, v in self.groups.values.items():
            lay = self.layout[self.groups.find(k)]
            v.type = TileType(v.type.shape, v.type.element, lay)
        for op in list(self.func.walk()):
            # the layout an op produces follows from its operands' layouts before `required`
            # converts them (a cat that takes converted halves produces cat_layouts' layout)
            rule = _RULES.get(type(op))
            want = rule.result(self, op) if rule is not None and rule.result is not None else None
            for idx, need in self.required(op):
                self._convert_operand(op, idx, need)
            if want is not None:
                r = op.results[0]
                if not equivalent(want, r.type.encoding, r.type.shape):
                    final = r.type
                    r.type = TileType(final.shape, final.element, want)
                    b = Builder().before(op)
                    b.index += 1
                    cv = b.create(ConvertLayoutOp, r, result_types=[final], loc=op.loc).result
                    for user, i in list(r.uses):
                        if user is not cv.owner:
                            user.set_operand(i, cv)

    def clamp_vectors(self) -> None:
        """An access moves `_vec` elements at once only if they are consecutive registers
        running along its contiguous dimension in the layout its group got."""
        for op in self.func.walk():
            if isinstance(op, _MEM) and "_vec" in op.attrs and isinstance(op.operands[0].type, TileType):
                t = op.operands[0].type
                dim = op.attrs.get("_contig_dim", t.rank - 1)
                run = 0
                for b in t.encoding.bases(t.shape).reg:
                    if b != tuple((1 << run) if d == dim else 0 for d in range(t.rank)):
                        break
                    run += 1
                op.attrs["_vec"] = min(op.attrs["_vec"], 1 << run)  # _mask_vec is read as at most this

    def _convert_operand(self, op: Op, idx: int, want) -> None:
        v = op.operands[idx]
        if want is None or equivalent(v.type.encoding, want, v.type.shape):
            return
        # (holding more elements a thread than the value converted would: only where no floor of
        # programs per SM bounds the registers)
        shape = v.type.shape
        ops = _recomputable(v) if invariant_loop(op, v) is None and (
            self.widen or want.elems_per_thread(shape) <= v.type.encoding.elems_per_thread(shape)) else None
        if ops is not None:
            # a value a loop computes each iteration is computed again in `want` where `op` is,
            # not converted through shared memory (a store, barriers and a load per iteration)
            op.set_operand(idx, _recompute(ops, v, want, Builder().before(op)))
            return
        # A value the loops around `op` do not define is converted once, before the outermost
        # of them, not every iteration (attention's row statistics: a trip through shared
        # memory, with barriers, per key block); the ops of one loop needing one layout share it,
        # and so do the later loops of the same block (the dQ kernel's three key loops: one
        # conversion per loop kept the source live through the earlier loops to convert it again).
        loop = invariant_loop(op, v)
        if loop is not None:
            key = (id(v), id(loop.parent), repr(want))
            cv = self._hoisted.get(key)
            if cv is None:
                b = Builder().before(loop)
                cv = self._hoisted[key] = b.create(ConvertLayoutOp, v, result_types=[TileType(
                    v.type.shape, v.type.element, want)], loc=op.loc).result
            op.set_operand(idx, cv)
            return
        b = Builder().before(op)
        cv = b.create(ConvertLayoutOp, v, result_types=[TileType(v.type.shape, v.type.element, want)],
                      loc=op.loc).result
        op.set_operand(idx, cv)


# ----------------------------------------------------------------------------- rules
# One LayoutRule per op class that relates layouts (elementwise ops, which share one, need none:
# `_build_groups` unions them by their trait). Each part is optional.
@dataclass(frozen=True)
class LayoutRule:
    group: Optional[Callable] = None      # (groups, op): union the values that must share a layout
    step: Optional[Callable] = None       # (assigner, op) -> bool: offer a layout across the op
    required: Optional[Callable] = None   # (assigner, op) -> [(operand index, layout it must have)]
    result: Optional[Callable] = None     # (assigner, op) -> the layout it produces its result in, or None


_RULES: Dict[type, LayoutRule] = {}


def _rule(*classes, **parts) -> None:
    for c in classes:
        _RULES[c] = LayoutRule(**parts)


def _union_all(g: _Groups, op: Op) -> None:
    g.union(*op.operands, *op.results)


def _dot_group(g: _Groups, op: Op) -> None:
    g.union(op.operands[2], op.results[0])


def _for_group(g: _Groups, op: Op) -> None:
    y = op.body.terminator
    for i, init in enumerate(op.group("inits")):
        g.union(init, op.body.args[i + 1], y.operands[i], op.results[i])


def _if_group(g: _Groups, op: Op) -> None:
    for r in op.regions:
        for i, v in enumerate(r.block.terminator.operands):
            g.union(op.results[i], v)


def _while_group(g: _Groups, op: Op) -> None:
    before, after = op.regions[0].block, op.regions[1].block
    cond, y = before.terminator, after.terminator
    for i, init in enumerate(op.operands):
        g.union(init, before.args[i], y.operands[i])
    for j, v in enumerate(cond.operands[1:]):
        g.union(v, after.args[j], op.results[j])


def _reduce_step(a: "_Assigner", op: Op) -> bool:
    # the result is the input's slice along the axis, and back
    src = a.of(op.operands[0])
    if src is not None and src.rank >= 2:
        return a.offer(op.results[0], SliceLayout(op.attrs["axis"], src))
    out = a.of(op.results[0])
    if isinstance(out, SliceLayout) and out.dim == op.attrs["axis"]:
        return a.offer(op.operands[0], out.parent)
    return False


def _reduce_result(a: "_Assigner", op: Op):
    if op.operands[0].type.rank >= 2:
        return SliceLayout(op.attrs["axis"], op.operands[0].type.encoding)
    return None


def _expand_step(a: "_Assigner", op: Op) -> bool:
    # the input is the result's slice along the axis, and back
    if not isinstance(op.operands[0].type, TileType):
        return False
    out = a.of(op.results[0])
    if out is not None:
        return a.offer(op.operands[0], SliceLayout(op.attrs["axis"], out))
    src = a.of(op.operands[0])
    if isinstance(src, SliceLayout) and src.dim == op.attrs["axis"]:
        return a.offer(op.results[0], src.parent)
    return False


def _expand_required(a: "_Assigner", op: Op):
    if not isinstance(op.operands[0].type, TileType):
        return []
    return [(0, SliceLayout(op.attrs["axis"], a.of(op.results[0])))]


def _dot_step(a: "_Assigner", op: Op) -> bool:
    acc = a.of(op.results[0])
    if acc is not None:
        x = a.offer(op.operands[0], _dot_operand(op, acc, 0))
        y = a.offer(op.operands[1], _dot_operand(op, acc, 1))
        return x or y
    return False


def _dot_required(a: "_Assigner", op: Op):
    acc = a.of(op.results[0])
    return [(0, _dot_operand(op, acc, 0)), (1, _dot_operand(op, acc, 1))]


def _cat_step(a: "_Assigner", op: Op) -> bool:
    out = a.of(op.results[0])
    if out is not None:
        want, _ = cat_layouts(out, op.results[0].type.shape, op.attrs["axis"], a.num_warps)
        return a.offer(op.operands[0], want) | a.offer(op.operands[1], want)
    return False


def _cat_required(a: "_Assigner", op: Op):
    if a._cat_from_operands(op) is not None:   # noqa: SLF001 - the assigner's own helper
        return []
    want, _ = cat_layouts(a.of(op.results[0]), op.results[0].type.shape, op.attrs["axis"], a.num_warps)
    return [(0, want), (1, want)]


def _cat_result(a: "_Assigner", op: Op):
    r = op.results[0]
    return a._cat_from_operands(op) or cat_layouts(r.type.encoding, r.type.shape, op.attrs["axis"],  # noqa: SLF001
                                                   a.num_warps)[1]


def _reshape_step(a: "_Assigner", op: Op) -> bool:
    src, dst = op.operands[0].type.shape, op.results[0].type.shape
    out = a.of(op.results[0])
    if out is not None:
        return a.offer(op.operands[0], _reshape_layout(out, dst, src))
    inl = a.of(op.operands[0])
    if inl is not None:
        return a.offer(op.results[0], _reshape_layout(inl, src, dst))
    return False


def _reshape_required(a: "_Assigner", op: Op):
    return [(0, _reshape_layout(a.of(op.results[0]), op.results[0].type.shape, op.operands[0].type.shape))]


def _permute_step(a: "_Assigner", op: Op) -> bool:
    """The transpose of a tensor-core accumulator (`p.T` of attention's P, for dot(p.T, x))
    takes the accumulator's layout with its dimensions swapped: a permute moves no data, so
    the tile stays in the registers the dot left it in. Other permutes get no layout from
    here (loaded tiles' transposes keep the defaults their staging is tuned for)."""
    inl = a.of(op.operands[0])
    if not isinstance(inl, MmaLayout) or a.of(op.results[0]) is not None:
        return False
    order = op.attrs["order"]
    shape = op.operands[0].type.shape
    return a.offer(op.results[0], _renumber(inl.bases(shape), shape, op.results[0].type.shape,
                                            lambda b: tuple(b[o] for o in order)))


def _permute_required(a: "_Assigner", op: Op):
    return [(0, _permute_layout(a.of(op.results[0]), op.results[0].type.shape, op.attrs["order"]))]


_rule(*_MEM, T.BroadcastOp, T.ScanOp, group=_union_all)   # (broadcast: one layout serves both shapes)
_rule(T.DotOp, group=_dot_group, step=_dot_step, required=_dot_required)
_rule(T.ForOp, group=_for_group)
_rule(T.IfOp, group=_if_group)
_rule(T.WhileOp, group=_while_group)
_rule(T.ReduceOp, T.ReduceGenericOp, step=_reduce_step, result=_reduce_result)
_rule(T.ExpandDimsOp, step=_expand_step, required=_expand_required)
_rule(T.CatOp, step=_cat_step, required=_cat_required, result=_cat_result)
_rule(T.ReshapeOp, step=_reshape_step, required=_reshape_required)
_rule(T.PermuteOp, step=_permute_step, required=_permute_required)


def _permute_layout(out_layout, out_shape, order):
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    src_shape = tuple(out_shape[inv[d]] for d in range(len(order)))
    return _renumber(out_layout.bases(out_shape), out_shape, src_shape,
                     lambda b: tuple(b[inv[d]] for d in range(len(order))))


def _computes_in(op: Op, lay: MmaLayout, own: Optional[MmaLayout]) -> bool:
    """Whether tensor-core dot `op`, whose own accumulator layout would be `own`, can compute
    in `lay`: mma.sync (version 2) in any, wgmma (version 3) only in its own shape."""
    if own is None:
        return False
    return lay.version == 2 or lay == own


_RECOMPUTE_LIMIT = 12   # ops a value may take to be computed again rather than converted


def _recomputable(v: Value) -> Optional[List[Op]]:
    """The ops that compute tile `v` from aranges, constant tiles and splats of scalars through
    elementwise ops, in program order (at most _RECOMPUTE_LIMIT): index vectors, masks and
    addresses (a step's key indices, a page's row offsets) that cost a few integer ops per
    element, against a conversion's store, barriers and load. None for anything else."""
    order: List[Op] = []
    seen = set()

    def visit(x: Value) -> bool:
        if not isinstance(x.type, TileType):
            return True          # a scalar operand: used as it is
        op = x.owner
        if not isinstance(op, Op) or len(op.results) != 1:
            return False         # a block argument (a loop-carried value), a multi-result op
        if id(op) in seen:
            return True
        if not (isinstance(op, (T.ArangeOp, T.ConstantOp, T.SplatOp)) or op.has_trait("elementwise")):
            return False
        if not all(visit(o) for o in op.operands):
            return False
        seen.add(id(op))
        order.append(op)
        return len(order) <= _RECOMPUTE_LIMIT

    return order if visit(v) else None


def _recompute(ops: List[Op], v: Value, want, b: Builder) -> Value:
    """`ops` (from _recomputable) cloned at `b` with every result in layout `want`: `v`'s value."""
    mapping: Dict[int, Value] = {}
    for op in ops:
        r = op.results[0]
        operands = [mapping.get(id(o), o) for o in op.operands]
        new = type(op)(operands, [TileType(r.type.shape, r.type.element, want)], dict(op.attrs), (), op.loc)
        b.insert(new)
        mapping[id(r)] = new.results[0]
    return mapping[id(v)]


def _numel(s) -> int:
    n = 1
    for x in s:
        n *= x
    return n


def assign_layouts(module: Module, *, num_warps: int, wgmma: bool, widen: bool = True) -> Module:
    """Give every tile value a layout (module docstring). `widen` (no floor of programs per
    SM): a value recomputed in a conversion's stead may hold more elements a thread than the
    one converted."""
    if not any("_vec" in op.attrs for op in module.walk() if isinstance(op, _MEM)):
        axis_info(module)
    for func in module.ops:
        if not isinstance(func, T.FuncOp):
            continue
        a = _Assigner(func, num_warps, wgmma, widen)
        a.anchors()
        a.propagate()
        while a.defaults():
            a.propagate()
        a.apply()
        a.clamp_vectors()
    return module
