"""Values that flow through regions: SSA results of tile.if and loop-carried values.

A variable's value is flattened into a structure and leaves (run-time values or
Python numbers); leaves become region results, the structure's constants must
stay the same. `Carried` holds a loop's carried variables and widens a Python
number's type once when the loop body gives it another (`acc = 0; acc += tile`).
"""
from __future__ import annotations

from .. import dtypes as dt
from ..ir.core import Block
from ..ir.types import ScalarType, TileType, element_type
from . import semantic as S
from .context import Undefined
from .values import TensorValue, is_py_scalar, py_scalar

# ----------------------------------------------------------------------------- values through regions
def flatten(v):
    """(structure, leaves): leaves are run-time values or Python numbers; other values are constants
    of the structure that must not change."""
    if isinstance(v, TensorValue) or is_py_scalar(v):
        return ("leaf",), [v]
    if isinstance(v, tuple):
        subs, leaves = [], []
        for x in v:
            s, ls = flatten(x)
            subs.append(s)
            leaves.extend(ls)
        return ("tuple", tuple(subs)), leaves
    return ("const", v), []


def unflatten(struct, it):
    if struct[0] == "leaf":
        return next(it)
    if struct[0] == "tuple":
        return tuple(unflatten(s, it) for s in struct[1])
    return struct[1]


def same_struct(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "tuple":
        return len(a[1]) == len(b[1]) and all(same_struct(x, y) for x, y in zip(a[1], b[1]))
    if a[0] == "const":
        return a[1] is b[1] or (type(a[1]) is type(b[1]) and _safe_eq(a[1], b[1]))
    return True


def _safe_eq(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def leaf_type(leaf):
    if isinstance(leaf, TensorValue):
        return leaf.type
    return ScalarType(dt.python_scalar_dtype(py_scalar(leaf)))


def materialize(ctx, leaf, ty, name, node) -> TensorValue:
    """`leaf` as a value of type `ty` (Python numbers become constants)."""
    if isinstance(leaf, TensorValue):
        if leaf.type != ty:
            raise ctx.error(f"'{name}' has type {leaf.type} here but {ty} on another path; give it one type "
                            "(convert with .astype(...) or tc.broadcast_to(...))", node)
        return leaf
    d = element_type(ty)
    if not isinstance(d, ScalarType):
        raise ctx.error(f"'{name}' is a pointer on one path and the number {leaf!r} on another", node)
    if isinstance(py_scalar(leaf), float) and not d.dtype.is_float:
        raise ctx.error(f"'{name}' is {ty} on one path and the float {leaf!r} on another; make both floats", node)
    return S.constant(ctx, leaf, d.dtype, ty.shape if isinstance(ty, TileType) else ())


def unify(ctx, name, a, b, node):
    ta, tb = leaf_type(a), leaf_type(b)
    if isinstance(a, TensorValue) and isinstance(b, TensorValue):
        if ta != tb:
            raise ctx.error(f"'{name}' is {ta} in one branch and {tb} in the other; give it one type (convert "
                            "with .astype(...))", node)
        return ta
    if isinstance(a, TensorValue):
        return ta
    if isinstance(b, TensorValue):
        return tb
    return ScalarType(dt.promote(ta.dtype, tb.dtype))


MISSING = object()


def show(v) -> str:
    return v.describe() if hasattr(v, "describe") else repr(v)


def hint(v, name):
    if isinstance(v, TensorValue) and v.value.name_hint is None and not name.startswith("__"):
        v.value.name_hint = name


# ----------------------------------------------------------------------------- loop-carried state
class Carried:
    """The variables a loop carries: their structures, initial leaves and types."""

    def __init__(self, ctx, names, node):
        self.names = names
        self.structs, self.inits, self.from_python = [], [], []
        for n in names:
            s, leaves = flatten(ctx.scope[n])
            self.structs.append(s)
            for leaf in leaves:
                self.from_python.append(None if isinstance(leaf, TensorValue) else py_scalar(leaf))
                self.inits.append(S.to_tensor(ctx, leaf))
        self.node = node

    @property
    def types(self):
        return [v.type for v in self.inits]

    def leaf_names(self):
        out = []
        for n, s in zip(self.names, self.structs):
            out.extend([n] * _count_leaves(s))
        return out

    def bind(self, ctx, values):
        it = iter(values)
        for n, s in zip(self.names, self.structs):
            ctx.scope[n] = unflatten(s, it)

    def collect(self, ctx):
        leaves = []
        for n, s in zip(self.names, self.structs):
            v = ctx.scope.get(n)
            if isinstance(v, Undefined):
                raise ctx.error(f"'{n}' {v.why}", self.node)
            s2, ls = flatten(v)
            if not same_struct(s, s2):
                raise ctx.error(f"'{n}' changes from {show(unflatten(s, iter(self.inits)))} to {show(v)} inside "
                                "the loop; only numbers, tiles and tuples of them can change between iterations",
                                self.node)
            leaves.extend(ls)
        return leaves

    def widen(self, ctx, leaves) -> bool:
        """Give Python-number inits the type the body produces (e.g. `acc = 0` then `acc += tile`).
        Returns False when nothing can be widened."""
        changed = False
        names = self.leaf_names()
        for i, leaf in enumerate(leaves):
            new_t, old_t = leaf_type(leaf), self.inits[i].type
            if _fits(leaf, old_t):
                continue
            old_scalar = not isinstance(old_t, TileType)
            same_dtype = element_type(new_t) == element_type(old_t)
            new_elem = element_type(new_t)
            shape = new_t.shape if isinstance(new_t, TileType) else ()
            if isinstance(new_elem, ScalarType) and self.from_python[i] is not None:
                old = self.inits[i].value.op
                self.inits[i] = S.constant(ctx, self.from_python[i], new_elem.dtype, shape)
                if not old.results[0].uses:
                    old.erase()
                changed = True
            elif isinstance(new_elem, ScalarType) and old_scalar and same_dtype:
                self.inits[i] = S.broadcast_to(ctx, self.inits[i], shape)
                changed = True
            else:
                raise ctx.error(f"loop-carried variable '{names[i]}' changes type from {old_t} to {new_t} inside "
                                "the loop; its type must stay the same (convert with .astype(...) or initialize it "
                                "with the right shape, e.g. tc.zeros(shape, dtype))", self.node)
        return changed

    def yield_values(self, ctx, leaves):
        names = self.leaf_names()
        return [materialize(ctx, leaf, t, n, self.node).value for leaf, t, n in zip(leaves, self.types, names)]


def _count_leaves(struct) -> int:
    if struct[0] == "leaf":
        return 1
    if struct[0] == "tuple":
        return sum(_count_leaves(s) for s in struct[1])
    return 0


def _fits(leaf, ty) -> bool:
    """Whether the body's final `leaf` can be yielded as `ty` (Python numbers adopt the type)."""
    if isinstance(leaf, TensorValue):
        return leaf.type == ty
    d = element_type(ty)
    return isinstance(d, ScalarType) and (d.dtype.is_float or not isinstance(py_scalar(leaf), float))


def _discard(block: Block):
    for op in list(block.ops):
        for o in list(op.walk()):
            o.drop_operands()


def new_block(carried: Carried, lead_types=(), lead_names=()):
    names = list(lead_names) + [n if not n.startswith("__") else None for n in carried.leaf_names()]
    return Block(list(lead_types) + carried.types, names)


def run_loop(ctx, carried: Carried, build):
    """Run `build()` (which makes the regions and returns them with the body's final leaves), widening
    Python-number inits once when the body gives them another type."""
    for attempt in range(2):
        regions, leaves, finish = build()
        if all(_fits(x, t) for x, t in zip(leaves, carried.types)):
            finish()
            return regions
        for r in regions:
            _discard(r.block)
        if attempt == 1 or not carried.widen(ctx, leaves):
            break
    raise ctx.error("loop-carried values change type inside the loop", carried.node)
