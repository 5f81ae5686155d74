"""axis_info: contiguity, divisibility and constancy of integer and pointer tiles.

For each dimension d of a value:
- contiguity[d]: the values come in runs of this many consecutive integers
  (x, x+1, ...) along d, the runs starting at multiples of it;
- divisibility[d]: the first value of each run is a multiple of this (bytes for
  pointers, a power of two);
- constancy[d]: the values come in runs of this many equal values along d.

The rules (after Triton's axis analysis) cover what index arithmetic is made of:
constants, arange, splat, broadcast, expand_dims, add/sub/mul, casts between
integers, addptr, view_ptr (the view's alignment), view_dim (the extents and
strides the view type marks divisible, e.g. by 16), and kernel arguments marked
divisible by 16 (`arg_divisibility` on the function). Anything else is unknown
(1, 1, 1).

The pass stores on every pointer-tile load/store `_vec`: how many consecutive
elements along the contiguous dimension (`_contig_dim`) one access may move,
min(contiguity, alignment / element size, 16 bytes / element size), used by
assign_layouts and by codegen's vectorized loads and stores. A masked access whose
mask changes inside such a group also gets `_mask_vec` (the mask's runs): codegen
then loads the aligned group when any of its elements is wanted and selects per
element, and stores it at once only when all are (`access_vec`). Where that mask is
moreover a prefix of every group (`offs < n` with offs running through the group: the
end of a row whose length a launch does not know divisible), the access gets
`_mask_prefix`: a cp.async copy then moves the group at once, reading only the wanted
elements' bytes and filling zeros after them (`copy_vec`, `prefix_run`).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Dict, Tuple

from tilec.ir import Module, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import PointerType, ScalarType, TileType, shape_of

__all__ = ["AxisInfo", "analyze", "axis_info", "uniform_vec", "copy_vec", "prefix_run", "realign_vec", "MAX_DIV"]

MAX_DIV = 1 << 30  # "divisible by anything" (e.g. the constant 0)


@dataclass(frozen=True)
class AxisInfo:
    contiguity: Tuple[int, ...]
    divisibility: Tuple[int, ...]
    constancy: Tuple[int, ...]

    @staticmethod
    def unknown(rank: int) -> "AxisInfo":
        return AxisInfo((1,) * rank, (1,) * rank, (1,) * rank)

    @staticmethod
    def uniform(shape, div: int) -> "AxisInfo":
        if not shape:  # a scalar keeps its divisibility (read by _scalar_div)
            return AxisInfo((), (div,), ())
        return AxisInfo((1,) * len(shape), (div,) * len(shape), tuple(shape))


def _pow2_div(c: int) -> int:
    c = abs(int(c))
    return MAX_DIV if c == 0 else min(MAX_DIV, c & -c)


def _run_div(contiguity: int, divisibility: int, cap: int) -> int:
    """What divides an operand's value at the start of each run of a result whose runs
    are `cap` (in the operand's units) long: its own runs' divisibility where those are
    single elements, else at most `cap` (the runs' later elements are x + c, x + 2c, ...)."""
    return divisibility if contiguity == 1 else min(divisibility, _pow2_div(cap))


def _elem_bytes(v: Value) -> int:
    e = v.type.element if isinstance(v.type, TileType) else v.type
    if isinstance(e, PointerType):
        return e.pointee.itemsize
    return 1


class _Analysis:
    def __init__(self):
        self.info: Dict[int, AxisInfo] = {}

    def get(self, v: Value) -> AxisInfo:
        i = self.info.get(id(v))
        return i if i is not None else AxisInfo.unknown(len(shape_of(v.type)))

    def set(self, v: Value, i: AxisInfo) -> None:
        self.info[id(v)] = i

    def run_func(self, func) -> None:
        divs = func.attrs.get("arg_divisibility") or []
        for a, d in zip(func.body.args, list(divs) + [1] * len(func.body.args)):
            if isinstance(a.type, ScalarType) and a.type.dtype.is_int:
                self.set(a, AxisInfo((), (), ()) if d <= 1 else AxisInfo((), (d,), ()))
        for op in func.walk():
            if op is not func:
                self.visit(op)

    def visit(self, op) -> None:
        rule = _RULES.get(type(op))
        if rule is None or not op.results:
            return
        r = op.results[0]
        shape = shape_of(r.type)
        info = rule(self, op, shape)
        if info is not None:
            self.set(r, info)

    def _scalar_div(self, v: Value) -> int:
        i = self.get(v)
        return i.divisibility[0] if i.divisibility else 1

    def _is_one(self, v: Value, rank: int):
        op = v.owner
        val = op.attrs.get("value") if isinstance(op, T.ConstantOp) else None
        if isinstance(op, T.SplatOp) and isinstance(op.operands[0].owner, T.ConstantOp):
            val = op.operands[0].owner.attrs.get("value")
        return (val == 1 and isinstance(val, int),) * rank


# ----------------------------------------------------------------------------- rules
# One function per op class: (analysis, op, result shape) -> the result's AxisInfo, or None
# where the rule knows nothing (the result then reads as unknown).
_RULES = {}


def _rule(*classes):
    def register(fn):
        for c in classes:
            _RULES[c] = fn
        return fn
    return register


@_rule(T.ConstantOp)
def _constant(a, op, shape):
    value = op.attrs["value"]
    return AxisInfo.uniform(shape, _pow2_div(value)) if isinstance(value, int) else None


@_rule(T.ArangeOp)
def _arange(a, op, shape):
    return AxisInfo((shape[0],), (_pow2_div(op.attrs["start"]),), (1,))


@_rule(T.SplatOp)
def _splat(a, op, shape):
    return AxisInfo.uniform(shape, a._scalar_div(op.operands[0]))


@_rule(T.ViewPtrOp)
def _view_ptr(a, op, shape):
    return AxisInfo((), (max(1, op.operands[0].type.align),), ())


@_rule(T.ViewDimOp)
def _view_dim(a, op, shape):
    vt, d = op.operands[0].type, op.attrs["dim"]
    return AxisInfo((), (vt.shape_div[d] if op.attrs["kind"] == "shape" else vt.stride_div[d],), ())


@_rule(T.BroadcastOp)
def _broadcast(a, op, shape):
    s = a.get(op.operands[0])
    src = op.operands[0].type.shape
    return AxisInfo(tuple(1 if x == 1 and y != 1 else c for x, y, c in zip(src, shape, s.contiguity)),
                    s.divisibility,
                    tuple(y if x == 1 else c for x, y, c in zip(src, shape, s.constancy)))


@_rule(T.ExpandDimsOp)
def _expand_dims(a, op, shape):
    x = op.operands[0]
    if not isinstance(x.type, TileType):
        return AxisInfo.uniform(shape, a._scalar_div(x))
    s = a.get(x)
    ax = op.attrs["axis"]

    def ins(t, v):
        return t[:ax] + (v,) + t[ax:]
    # Along the new dimension every element is a run of its own: a multiple of what
    # divides all of them. A contiguous run (x, x+1, ...) holds odd values, however
    # divisible its first one is.
    div = min((1 if c > 1 else d for c, d in zip(s.contiguity, s.divisibility)), default=1)
    return AxisInfo(ins(s.contiguity, 1), ins(s.divisibility, div), ins(s.constancy, 1))


@_rule(T.AddOp, T.SubOp, T.AddPtrOp)
def _add(an, op, shape):
    x, y = op.operands[:2]
    scale = _elem_bytes(x) if isinstance(op, T.AddPtrOp) else 1
    if not shape:
        return AxisInfo((), (min(an._scalar_div(x), an._scalar_div(y) * scale),), ())
    a, b = an.get(x), an.get(y)
    contig = [max(gcd(a.contiguity[d], b.constancy[d]),
                  gcd(b.contiguity[d], a.constancy[d]) if not isinstance(op, T.SubOp) else 1)
              for d in range(len(shape))]
    # The result's runs (c long) start inside an operand's longer runs at multiples of
    # c: there that operand is only as divisible as c (both contiguous: c = 1).
    div = tuple(min(_run_div(a.contiguity[d], a.divisibility[d], c * scale),
                    _run_div(b.contiguity[d], b.divisibility[d], c) * scale)
                for d, c in enumerate(contig))
    return AxisInfo(tuple(contig), div, tuple(gcd(p, q) for p, q in zip(a.constancy, b.constancy)))


@_rule(T.MulOp)
def _mul(an, op, shape):
    x, y = op.operands[:2]
    if not shape:
        return AxisInfo((), (min(MAX_DIV, an._scalar_div(x) * an._scalar_div(y)),), ())
    a, b = an.get(x), an.get(y)
    rank = len(shape)
    one_a, one_b = an._is_one(x, rank), an._is_one(y, rank)
    contig = tuple(max(ca if cb_is_one else 1, cb if ca_is_one else 1)
                   for ca, cb, ca_is_one, cb_is_one in zip(a.contiguity, b.contiguity, one_a, one_b))
    # Unless the other factor is 1, a contiguous run's elements are scaled one by one:
    # only its first is as divisible as the run says (x, x+1, ... hold odd values).
    da = tuple(1 if c > 1 and not o else d for c, d, o in zip(a.contiguity, a.divisibility, one_b))
    db = tuple(1 if c > 1 and not o else d for c, d, o in zip(b.contiguity, b.divisibility, one_a))
    div = tuple(min(MAX_DIV, p * q) for p, q in zip(da, db))
    return AxisInfo(contig, div, tuple(gcd(p, q) for p, q in zip(a.constancy, b.constancy)))


@_rule(T.CastOp)
def _cast(a, op, shape):
    r, x = op.results[0], op.operands[0]
    return a.get(x) if r.type and _int_like(r) and _int_like(x) else None


@_rule(T.CmpOp)
def _cmp(an, op, shape):
    if not shape:
        return None
    a, b = an.get(op.operands[0]), an.get(op.operands[1])
    const = tuple(gcd(x, y) for x, y in zip(a.constancy, b.constancy))
    # A run x, x+1, ... compared with a bound c constant over it changes where x
    # reaches c: at a multiple of both divisibilities, for x < c and x >= c (c > x,
    # c <= x). x <= c and x > c change after x = c, and x == c, x != c at it and after.
    pred = op.attrs["pred"]
    run, bound = (a, b) if pred in ("lt", "ge") else (b, a) if pred in ("gt", "le") else (None, None)
    if run is not None:
        const = tuple(max(c, min(cr, dr, db, cb)) for c, cr, dr, db, cb in zip(
            const, run.contiguity, run.divisibility, bound.divisibility, bound.constancy))
    return AxisInfo((1,) * len(shape), (1,) * len(shape), const)


@_rule(T.AndOp, T.OrOp)
def _and_or(an, op, shape):
    if not shape:
        return None
    a, b = an.get(op.operands[0]), an.get(op.operands[1])
    return AxisInfo((1,) * len(shape), (1,) * len(shape), tuple(gcd(x, y) for x, y in zip(a.constancy, b.constancy)))


def _int_like(v: Value) -> bool:
    e = v.type.element if isinstance(v.type, TileType) else v.type
    return isinstance(e, ScalarType) and e.dtype.is_int


def analyze(func) -> _Analysis:
    """Axis info of every value of `func` (`.get(value) -> AxisInfo`)."""
    a = _Analysis()
    a.run_func(func)
    return a


_MEM = (T.LoadOp, T.LoadMaskedOp, T.StoreOp, T.StoreMaskedOp)


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def access_vec(info: _Analysis, op) -> Tuple[int, int, int, int]:
    """(contiguous dimension, elements one access may move, elements over which the mask
    is uniform, elements the pointers' alignment proves) of a pointer-tile access (the
    second exceeds the last only for a realigned load: `realign_vec`).

    The width does not depend on the mask. Where the mask varies inside a group, codegen
    loads the whole group if any element is wanted and selects per element: the group's
    first address is a multiple of its bytes, so it lies in one aligned 16-byte block with
    an element the mask wants, hence on a page the program may read. It stores the group
    at once where every element is wanted, else element by element."""
    ptr = op.operands[0]
    if not isinstance(ptr.type, TileType):
        return -1, 1, 1, 1
    pi = info.get(ptr)
    rank = ptr.type.rank
    dim = max(range(rank), key=lambda d: (pi.contiguity[d], d))
    esize = ptr.type.element.pointee.itemsize
    aligned = vec = _proven_vec(pi, dim, esize)
    if op.attrs.get("realign"):
        vec = max(aligned, realign_vec(pi.contiguity[dim], esize))
    mask = op.operand("mask") if "mask" in [s.rstrip("*?") for s in op.operands_spec] else None
    uniform = vec
    if mask is not None and isinstance(mask.type, TileType):
        uniform = _pow2_floor(min(vec, info.get(mask).constancy[dim]))
    return dim, vec, uniform, aligned


_PREFIX_PREDS = {"lt": 0, "le": 0, "gt": 1, "ge": 1}   # which operand runs: x < n, x <= n, n > x, n >= x


def prefix_run(info: _Analysis, mask: Value, dim: int) -> int:
    """The longest power-of-two G such that `mask` is, over every aligned group of G elements
    along `dim`, a prefix (true, then false): constant over the group, a run x, x+1, ... of
    signed integers compared below a value constant over it, or an and / or / broadcast of
    such masks. (Unsigned runs may wrap inside a group: a window's `cols.astype(uint32) < n`
    is false, then true.)"""
    t = mask.type
    if not isinstance(t, TileType):
        return MAX_DIV
    const = info.get(mask).constancy[dim]
    op = mask.owner
    run = 1
    if isinstance(op, T.CmpOp) and op.attrs["pred"] in _PREFIX_PREDS:
        i = _PREFIX_PREDS[op.attrs["pred"]]
        if op.operands[i].type.dtype.is_signed:
            x, n = info.get(op.operands[i]), info.get(op.operands[1 - i])
            run = min(x.contiguity[dim], n.constancy[dim])
    elif isinstance(op, (T.AndOp, T.OrOp)):
        run = min(prefix_run(info, op.operands[0], dim), prefix_run(info, op.operands[1], dim))
    elif isinstance(op, T.BroadcastOp) and op.operands[0].type.shape[dim] == t.shape[dim]:
        run = prefix_run(info, op.operands[0], dim)
    elif isinstance(op, T.ExpandDimsOp) and isinstance(op.operands[0].type, TileType) and dim != op.attrs["axis"]:
        run = prefix_run(info, op.operands[0], dim - (dim > op.attrs["axis"]))
    return _pow2_floor(max(const, run))


def realign_vec(contiguity: int, esize: int) -> int:
    """The elements a realigned load (`tc.load(realign=True)`) moves per access: the
    contiguous run up to 16 bytes, where that is at least 4 bytes (two aligned blocks and a
    funnel shift of 32-bit words, codegen/realign.py); else 1."""
    vec = _pow2_floor(min(contiguity, max(1, 16 // esize)))
    return vec if vec * esize >= 4 else 1


def copy_vec(op) -> int:
    """The elements one cp.async copy of load `op` may move: `_vec` where its mask is a
    prefix of every group (`_mask_prefix`: the copy reads that prefix and fills zeros),
    else `uniform_vec`; a realigned load's aligned width (`_aligned_vec`: a copy cannot
    shift)."""
    if "_aligned_vec" in op.attrs:
        return min(op.attrs["_aligned_vec"], uniform_vec(op))
    return op.attrs.get("_vec", 1) if op.attrs.get("_mask_prefix") else uniform_vec(op)


def uniform_vec(op) -> int:
    """The elements one access of `op` moves under a single mask bit (`_mask_vec` where
    the group is wider than the mask's runs, else `_vec`): what a copy that cannot
    select per element (cp.async) may move at once."""
    vec = op.attrs.get("_vec", 1)
    return min(vec, op.attrs.get("_mask_vec", vec))


def _proven_vec(pi: AxisInfo, dim: int, esize: int) -> int:
    # the elements one access may move by the pointers' contiguity and proven alignment
    return _pow2_floor(min(pi.contiguity[dim], max(1, pi.divisibility[dim] // esize), max(1, 16 // esize)))


def axis_info(module: Module) -> Module:
    for func in module.ops:
        if not isinstance(func, T.FuncOp):
            continue
        info = analyze(func)
        for op in func.walk():
            if isinstance(op, _MEM):
                dim, vec, uniform, aligned = access_vec(info, op)
                if dim >= 0:
                    op.attrs["_contig_dim"] = dim
                    op.attrs["_vec"] = vec
                    if op.attrs.get("realign"):
                        op.attrs["_aligned_vec"] = aligned
                    if uniform < vec:
                        op.attrs["_mask_vec"] = uniform
                        if isinstance(op, T.LoadMaskedOp) and prefix_run(info, op.operands[1], dim) >= vec:
                            op.attrs["_mask_prefix"] = 1
    return module
