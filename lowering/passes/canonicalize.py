"""Canonicalization: algebraic identities and structural simplifications, as a pattern table.

`PATTERNS` maps an op class to the rewrites tried on each op of that class (first
match wins); `apply_patterns` reruns the table over the module until nothing fires.
Each rewrite is exact: it never changes a result bit, so float identities are only
those IEEE guarantees (x * 1, x - 0.0, x + -0.0; never x * 0 or x - x, which differ
for NaN, infinities and signed zeros). It handles what a constant *partially* decides
(one constant operand, a constant condition, constant loop bounds) and shape ops that
do nothing. Ops whose operands are all constants are folded by the `fold` pass's rule,
applied here in the same fixed point, because each kind of rewrite exposes the other: a
condition computed from constants (a specialized 1 compared with 1) must fold before
its tile.if can go, and the body of a loop run once becomes foldable once inlined.
"""
from __future__ import annotations

from tilec.ir import Module, Op, defined_inside
from tilec.ir import tile_ops as T
from tilec.ir.types import TileType

from .fold import fold_op
from .rewrite import (NOT_CONSTANT, PatternTable, apply_patterns, constant_of, dtype_of, inline_block_before,
                      is_constant, make_constant, replace_op)

__all__ = ["canonicalize", "PATTERNS", "exactly_holds"]


# ----------------------------------------------------------------------------- helpers
def _forward(op: Op, v) -> bool:
    """Replace `op` (one result) by the existing value `v`."""
    replace_op(op, [v])
    return True


def _to_constant(op: Op, value) -> bool:
    replace_op(op, [make_constant(op, op.results[0].type, value)])
    return True


def _is_int(op: Op) -> bool:
    d = dtype_of(op.operands[0])
    return d is not None and (d.is_int or d.is_bool)


def _all_ones(v) -> bool:
    """A constant whose every bit is set: true for i1, -1 / the maximum for integers."""
    c = constant_of(v)
    if c is NOT_CONSTANT:
        return False
    d = dtype_of(v)
    if d.is_bool:
        return bool(c)
    return d.is_int and isinstance(c, int) and c & ((1 << d.bits) - 1) == (1 << d.bits) - 1


def _is_zero_bits(v) -> bool:
    return is_constant(v, 0) and _is_int_valued(v)


def _is_int_valued(v) -> bool:
    d = dtype_of(v)
    return d is not None and (d.is_int or d.is_bool)


def _binary_identity(op: Op, identity_ok) -> bool:
    """x op e -> x (and e op x -> x when commutative) where `identity_ok(e)` holds."""
    a, b = op.operands
    if identity_ok(b):
        return _forward(op, a)
    if op.has_trait("commutative") and identity_ok(a):
        return _forward(op, b)
    return False


def _binary_absorb(op: Op, absorbing) -> bool:
    """x op z -> z (either side) where `absorbing(z)` holds."""
    a, b = op.operands
    for z in (b, a):
        if absorbing(z):
            return _forward(op, z)
    return False


# ----------------------------------------------------------------------------- arithmetic
def add_zero(op: Op) -> bool:
    """x + 0 -> x for integers; x + -0.0 -> x for floats (x + 0.0 would turn -0.0 into 0.0)."""
    if _is_int(op):
        return _binary_identity(op, lambda v: is_constant(v, 0))
    return _binary_identity(op, lambda v: is_constant(v, -0.0))


def sub_zero(op: Op) -> bool:
    """x - 0 -> x (exact for floats too: -0.0 - 0.0 is -0.0)."""
    if _is_int(op):
        return _binary_identity(op, lambda v: is_constant(v, 0))
    return _binary_identity(op, lambda v: is_constant(v, 0.0))


def sub_self(op: Op) -> bool:
    """x - x -> 0 for integers."""
    a, b = op.operands
    return a is b and _is_int(op) and _to_constant(op, 0)


def mul_one(op: Op) -> bool:
    return _binary_identity(op, lambda v: is_constant(v, 1))


def mul_zero(op: Op) -> bool:
    """x * 0 -> 0 for integers only (NaN * 0 is NaN)."""
    return _is_int(op) and _binary_absorb(op, _is_zero_bits)


def floordiv_one(op: Op) -> bool:
    return _is_int(op) and _binary_identity(op, lambda v: is_constant(v, 1))


def mod_one(op: Op) -> bool:
    return _is_int(op) and is_constant(op.operands[1], 1) and _to_constant(op, 0)


def shift_zero(op: Op) -> bool:
    return _binary_identity(op, lambda v: is_constant(v, 0))


def idempotent_self(op: Op) -> bool:
    """min(x, x), max(x, x), x & x, x | x -> x."""
    a, b = op.operands
    return a is b and _forward(op, a)


def double_negation(op: Op) -> bool:
    """neg(neg(x)), invert(invert(x)) -> x (exact, integers wrap both ways)."""
    inner = op.operands[0].owner
    return type(inner) is type(op) and _forward(op, inner.operands[0])


# ----------------------------------------------------------------------------- logic
def and_mask(op: Op) -> bool:
    """x & all-ones -> x; x & 0 -> 0 (covers the all-true masks of unmasked atomics)."""
    return _binary_identity(op, _all_ones) or _binary_absorb(op, _is_zero_bits)


def or_mask(op: Op) -> bool:
    """x | 0 -> x; x | all-ones -> all-ones."""
    return _binary_identity(op, _is_zero_bits) or _binary_absorb(op, _all_ones)


def xor_zero(op: Op) -> bool:
    return _binary_identity(op, _is_zero_bits)


def xor_self(op: Op) -> bool:
    a, b = op.operands
    return a is b and _to_constant(op, 0)


_SELF_CMP = {"eq": True, "le": True, "ge": True, "ne": False, "lt": False, "gt": False}


def cmp_self(op: Op) -> bool:
    """cmp(x, x) is decided for integers (floats: NaN compares unequal to itself)."""
    a, b = op.operands
    return a is b and _is_int(op) and _to_constant(op, _SELF_CMP[op.attrs["pred"]])


def select_simplify(op: Op) -> bool:
    """select(const, a, b) -> a or b; select(c, x, x) -> x; select(c, true, false) -> c."""
    c, a, b = op.operands
    cond = constant_of(c)
    if cond is not NOT_CONSTANT:
        return _forward(op, a if cond else b)
    if a is b:
        return _forward(op, a)
    if dtype_of(a).is_bool and is_constant(a, True) and is_constant(b, False):
        return _forward(op, c)
    return False


def addptr_zero(op: Op) -> bool:
    return is_constant(op.operands[1], 0) and _forward(op, op.operands[0])


# ----------------------------------------------------------------------------- casts
# Float formats: (significand bits including the implicit one, max exponent, min normal exponent)
_FLOAT_FORMAT = {"f8e4m3": (4, 8, -6), "f8e5m2": (3, 15, -14), "f16": (11, 15, -14),
                 "bf16": (8, 127, -126), "f32": (24, 127, -126), "f64": (53, 1023, -1022)}


def exactly_holds(wide, narrow) -> bool:
    """Every value of dtype `narrow` is a value of dtype `wide`, so narrow -> wide -> narrow
    is the identity (i1 round-trips through every type: 0/1 come back as false/true)."""
    if narrow.is_bool:
        return True
    if wide.is_bool:
        return False
    if narrow.is_int:
        magnitude = narrow.bits - (1 if narrow.is_signed else 0)
        if wide.is_int:
            if narrow.is_signed and not wide.is_signed:
                return False
            return wide.bits - (1 if wide.is_signed else 0) >= magnitude
        p, emax, _ = _FLOAT_FORMAT[wide.name]
        return p >= magnitude and emax >= magnitude
    if not wide.is_float:
        return False
    pn, emaxn, eminn = _FLOAT_FORMAT[narrow.name]
    pw, emaxw, eminw = _FLOAT_FORMAT[wide.name]
    return pw >= pn and emaxw >= emaxn and eminw <= eminn


def cast_same_type(op: Op) -> bool:
    return op.operands[0].type == op.results[0].type and _forward(op, op.operands[0])


def cast_round_trip(op: Op) -> bool:
    """cast(cast(x: A, B), A) -> x when B holds every value of A."""
    inner = op.operands[0].owner
    if not isinstance(inner, T.CastOp):
        return False
    x = inner.operands[0]
    if x.type != op.results[0].type:
        return False
    return exactly_holds(dtype_of(inner.results[0]), dtype_of(x)) and _forward(op, x)


# ----------------------------------------------------------------------------- shape ops
def _retype_uniform(op: Op, source) -> bool:
    """A shape op applied to a uniform tile (constant or splat) is that uniform tile
    in the result's shape."""
    c = constant_of(source)
    if c is not NOT_CONSTANT:
        return _to_constant(op, c)
    owner = source.owner
    if isinstance(owner, T.SplatOp):
        shape = list(op.results[0].type.shape)
        # the result type is kept as is: in gpu IR it carries the layout
        new = T.SplatOp.build(owner.operands[0], loc=op.loc, result_types=[op.results[0].type], shape=shape)
        op.parent.insert(op.parent.ops.index(op), new)
        return _forward(op, new.result)
    return False


def splat_constant(op: Op) -> bool:
    c = constant_of(op.operands[0])
    return c is not NOT_CONSTANT and _to_constant(op, c)


def shape_noop(op: Op) -> bool:
    """broadcast/reshape to the operand's own shape, permute by the identity."""
    x = op.operands[0]
    if isinstance(op, T.PermuteOp):
        if op.attrs["order"] == list(range(len(op.attrs["order"]))):
            return _forward(op, x)
        return False
    return x.type == op.results[0].type and _forward(op, x)


def shape_of_uniform(op: Op) -> bool:
    return isinstance(op.operands[0].type, TileType) and _retype_uniform(op, op.operands[0])


def _rebuild(op: Op, cls, source, **attrs) -> bool:
    new = cls.build(source, loc=op.loc, result_types=[op.results[0].type], **attrs)
    op.parent.insert(op.parent.ops.index(op), new)
    return _forward(op, new.result)


def broadcast_chain(op: Op) -> bool:
    """broadcast(broadcast(x)) -> broadcast(x)."""
    inner = op.operands[0].owner
    if isinstance(inner, T.BroadcastOp):
        return _rebuild(op, T.BroadcastOp, inner.operands[0], shape=list(op.attrs["shape"]))
    return False


def reshape_chain(op: Op) -> bool:
    """reshape(reshape(x)), reshape(expand_dims(x)) -> reshape(x) (both are row-major
    reinterpretations); the result is x itself when the shapes agree."""
    inner = op.operands[0].owner
    if isinstance(inner, (T.ReshapeOp, T.ExpandDimsOp)) and isinstance(inner.operands[0].type, TileType):
        x = inner.operands[0]
        if x.type == op.results[0].type:
            return _forward(op, x)
        return _rebuild(op, T.ReshapeOp, x, shape=list(op.attrs["shape"]))
    return False


def permute_chain(op: Op) -> bool:
    """permute(permute(x, p), q) -> permute(x, [p[i] for i in q])."""
    inner = op.operands[0].owner
    if isinstance(inner, T.PermuteOp):
        p, q = inner.attrs["order"], op.attrs["order"]
        return _rebuild(op, T.PermuteOp, inner.operands[0], order=[p[i] for i in q])
    return False


def _dropped_unit_dims(full, short):
    """The dimensions of `full` (each of extent 1) whose removal leaves `short`, else None."""
    full, short = list(full), list(short)
    drop, j = [], 0
    for d, n in enumerate(full):
        if j < len(short) and short[j] == n:
            j += 1
        elif n == 1:
            drop.append(d)
        else:
            return None
    return drop if j == len(short) and drop else None


def load_view_squeeze(op: Op) -> bool:
    """reshape(load_view(x) {shape = [1, BM, D]}) to [BM, D] -> load_view {squeeze = [0]}: the
    rank-3 view's tile is loaded as the rank-2 tile it is (its unit index in the base
    pointer), so it vectorizes, and takes cp.async and TMA, as a 2-D load does."""
    load = op.operands[0].owner
    if not isinstance(load, T.LoadViewOp) or len(op.operands[0].uses) != 1 or load.attrs.get("order"):
        return False
    have = load.attrs.get("squeeze") or []
    kept = [d for d in range(len(load.attrs["shape"])) if d not in have]
    drop = _dropped_unit_dims(load.results[0].type.shape, op.results[0].type.shape)
    if drop is None:
        return False
    return _load_instead(op, load, squeeze=sorted(have + [kept[d] for d in drop]))


def load_view_permute(op: Op) -> bool:
    """permute(load_view(x), p) -> load_view(x) {order = p} where the permute feeds only a
    tile.dot: the load builds its pointers in the permuted order, so `tc.load(k, ...).T`
    reads runs along its contiguous dimension straight into the transposed tile, which the
    dot stores K-major as it is (no register shuffle). Elsewhere (a transpose that is
    stored) the register permute stays: one conversion lets both accesses be 16-byte."""
    load = op.operands[0].owner
    if not isinstance(load, T.LoadViewOp) or len(op.operands[0].uses) != 1:
        return False
    if not op.results[0].uses or any(not isinstance(u, T.DotOp) or i == 2 for u, i in op.results[0].uses):
        return False
    p = op.attrs["order"]
    old = load.attrs.get("order") or list(range(len(p)))
    return _load_instead(op, load, order=[old[i] for i in p])


def _load_instead(op: Op, load: Op, **attrs) -> bool:
    """Replace `op` (a shape op whose only operand is `load`, used by nothing else) by `load`
    rebuilt with `attrs` and `op`'s result type."""
    new = T.LoadViewOp.build(*load.operands, loc=load.loc, result_types=[op.results[0].type],
                             **{**load.attrs, **attrs})
    load.parent.insert(load.parent.ops.index(load), new)
    new.results[0].name_hint = op.results[0].name_hint or load.results[0].name_hint
    _forward(op, new.results[0])
    load.erase()
    return True


def store_view_squeeze(op: Op) -> bool:
    """store_view(x, reshape(t) to [1, BM, D]) with t of shape [BM, D] -> store_view(x, t)
    {squeeze = [0]} (load_view_squeeze's store)."""
    r = op.operands[-1].owner
    if not isinstance(r, T.ReshapeOp) or not isinstance(r.operands[0].type, TileType):
        return False
    have = op.attrs.get("squeeze") or []
    kept = [d for d in range(op.operands[0].type.rank) if d not in have]
    drop = _dropped_unit_dims(r.results[0].type.shape, r.operands[0].type.shape)
    if drop is None:
        return False
    op.attrs["squeeze"] = sorted(have + [kept[d] for d in drop])
    op.set_operand(len(op.operands) - 1, r.operands[0])
    if not r.results[0].uses:
        r.erase()
    return True


def atomic_view_squeeze(op: Op) -> bool:
    """store_view_squeeze for an atomic whose old values nobody reads (they would come back
    in the squeezed shape)."""
    if op.results[0].uses or not store_view_squeeze(op):
        return False
    op.results[0].type = op.operands[-1].type
    return True


# ----------------------------------------------------------------------------- control flow
def if_constant_condition(op: Op) -> bool:
    """tile.if on a constant: the taken branch's ops move before the if; its results are
    the values that branch yields."""
    c = constant_of(op.operands[0])
    if c is NOT_CONSTANT:
        return False
    block = op.regions[0 if c else 1].block
    replace_op(op, inline_block_before(block, op))
    return True


def if_same_yield(op: Op) -> bool:
    """A result both branches yield as the same value is that value."""
    then_y, else_y = (r.block.terminator for r in op.regions)
    fired = False
    for r, a, b in zip(op.results, then_y.operands, else_y.operands):
        if a is b and r.uses and not defined_inside(a, op):
            r.replace_all_uses_with(a)
            fired = True
    return fired


def for_constant_trip_count(op: Op) -> bool:
    """tile.for with constant bounds: zero trips -> the inits; one trip -> the body inlined
    with the induction variable replaced by the lower bound."""
    lb, ub, step = (constant_of(v) for v in op.operands[:3])
    if NOT_CONSTANT in (lb, ub, step) or step == 0:
        return False
    trips = len(range(int(lb), int(ub), int(step)))
    inits = op.group("inits")
    if trips == 0:
        replace_op(op, list(inits))
        return True
    if trips == 1:
        body = op.regions[0].block
        for arg, v in zip(body.args, [op.operands[0]] + list(inits)):
            arg.replace_all_uses_with(v)
        replace_op(op, inline_block_before(body, op))
        return True
    return False


PATTERNS: PatternTable = {
    T.AddOp: [add_zero],
    T.SubOp: [sub_zero, sub_self],
    T.MulOp: [mul_one, mul_zero],
    T.FloorDivOp: [floordiv_one],
    T.ModOp: [mod_one],
    T.ShlOp: [shift_zero],
    T.ShrOp: [shift_zero],
    T.MinimumOp: [idempotent_self],
    T.MaximumOp: [idempotent_self],
    T.AndOp: [idempotent_self, and_mask],
    T.OrOp: [idempotent_self, or_mask],
    T.XorOp: [xor_self, xor_zero],
    T.NegOp: [double_negation],
    T.InvertOp: [double_negation],
    T.CmpOp: [cmp_self],
    T.SelectOp: [select_simplify],
    T.AddPtrOp: [addptr_zero],
    T.CastOp: [cast_same_type, cast_round_trip],
    T.SplatOp: [splat_constant],
    T.BroadcastOp: [shape_noop, shape_of_uniform, broadcast_chain],
    T.ReshapeOp: [shape_noop, shape_of_uniform, reshape_chain, load_view_squeeze],
    T.StoreViewOp: [store_view_squeeze],
    T.AtomicRMWViewOp: [atomic_view_squeeze],
    T.ExpandDimsOp: [shape_of_uniform],
    T.PermuteOp: [shape_noop, shape_of_uniform, permute_chain, load_view_permute],
    T.IfOp: [if_constant_condition, if_same_yield],
    T.ForOp: [for_constant_trip_count],
    Op: [fold_op],  # every op, after its own patterns: elementwise ops on constants only
}


def canonicalize(module: Module) -> Module:
    """Apply `PATTERNS` (constant folding included) until none fires."""
    apply_patterns(module, PATTERNS)
    return module
