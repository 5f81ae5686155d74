"""The `tile` dialect: hardware-agnostic ops on scalars, tiles, pointers and views.

Conventions every pass, the interpreter and codegen rely on:
- Elementwise ops take operands of one identical type (scalar, or tile of one
  shape); the frontend inserts `tile.splat`/`tile.broadcast`/`tile.cast` first.
- `//` and `%` have Python (floor) semantics; `/` is defined for floats only.
- Shapes are static powers of two.
"""
from __future__ import annotations

from typing import List

from .. import dtypes as dt
from .core import AttrSpec, Op, register_op
from .types import PointerType, ScalarType, TileType, Type, ViewType, element_type, is_pow2, shape_of, tile, with_element

A = AttrSpec
PURE = frozenset({"pure"})
EW = frozenset({"pure", "elementwise"})
TERM = frozenset({"terminator"})


def _dtype(t: Type):
    e = element_type(t)
    return e.dtype if isinstance(e, ScalarType) else None


def _check_shape(op: Op, shape):
    for s in shape:
        if not is_pow2(int(s)):
            raise op.error(f"tile shapes must be powers of two, got {list(shape)}")


# ----------------------------------------------------------------------------- functions
@register_op
class FuncOp(Op):
    """A kernel: one region whose entry block arguments are the kernel parameters."""
    name = "tile.func"
    num_results = 0
    num_regions = 1
    attributes = {"sym_name": A("str"), "arg_names": A("strs"), "arg_divisibility": A("ints", True)}

    @property
    def body(self):
        return self.regions[0].block

    def verify_op(self):
        if len(self.attrs["arg_names"]) != len(self.body.args):
            raise self.error("arg_names must name every entry block argument")


@register_op
class ReturnOp(Op):
    name = "tile.return"
    operands_spec = ("values*",)
    num_results = 0
    traits = TERM

    def infer_types(self):
        return []


@register_op
class YieldOp(Op):
    name = "tile.yield"
    operands_spec = ("values*",)
    num_results = 0
    traits = TERM

    def infer_types(self):
        return []


@register_op
class ConditionOp(Op):
    """Ends the `before` region of tile.while: continue while `cond`, forwarding `values`."""
    name = "tile.condition"
    operands_spec = ("cond", "values*")
    num_results = 0
    traits = TERM

    def infer_types(self):
        return []


# ----------------------------------------------------------------------------- constants and grid
@register_op
class ConstantOp(Op):
    """A scalar constant, or a tile whose elements all hold `value`."""
    name = "tile.constant"
    attributes = {"value": A("any")}
    traits = PURE

    def verify_op(self):
        t = self.results[0].type
        if _dtype(t) is None:
            raise self.error("constants must be of a numeric type")
        if isinstance(t, TileType):
            _check_shape(self, t.shape)


@register_op
class ArangeOp(Op):
    name = "tile.arange"
    attributes = {"start": A("int"), "end": A("int")}
    traits = PURE

    def infer_types(self):
        return [tile([self.attrs["end"] - self.attrs["start"]], dt.int32)]

    def verify_op(self):
        _check_shape(self, [self.attrs["end"] - self.attrs["start"]])


class _GridOp(Op):
    attributes = {"axis": A("int")}
    traits = PURE

    def infer_types(self):
        return [ScalarType(dt.int32)]

    def verify_op(self):
        if self.attrs["axis"] not in (0, 1, 2):
            raise self.error("axis must be 0, 1 or 2")


@register_op
class ProgramIdOp(_GridOp):
    name = "tile.program_id"


@register_op
class NumProgramsOp(_GridOp):
    name = "tile.num_programs"


# ----------------------------------------------------------------------------- elementwise
class ElementwiseOp(Op):
    """Operands of one type; result of that type (comparisons: i1)."""
    traits = EW
    allowed = "any"  # any | int | float | intbool

    def infer_types(self):
        return [self.operands[0].type]

    def verify_op(self):
        t0 = self.operands[0].type
        for v in self.operands[1:]:
            if v.type != t0:
                raise self.error(f"operands must have one type, got {t0} and {v.type}")
        d = _dtype(t0)
        if d is None:
            raise self.error(f"operands must be numeric, got {t0}")
        ok = {"any": True, "int": d.is_int, "float": d.is_float,
              "intbool": d.is_int or d.is_bool}[self.allowed]
        if not ok:
            raise self.error(f"not defined for {d.name} operands")


class BinaryOp(ElementwiseOp):
    operands_spec = ("lhs", "rhs")


class UnaryOp(ElementwiseOp):
    operands_spec = ("x",)


@register_op
class AddOp(BinaryOp):
    name = "tile.add"
    traits = EW | {"commutative"}


@register_op
class SubOp(BinaryOp):
    name = "tile.sub"


@register_op
class MulOp(BinaryOp):
    name = "tile.mul"
    traits = EW | {"commutative"}


@register_op
class DivOp(BinaryOp):
    """True division, floats only (the frontend casts integer operands of `/`)."""
    name = "tile.div"
    allowed = "float"


@register_op
class FloorDivOp(BinaryOp):
    """Python `//`: rounds toward negative infinity."""
    name = "tile.floordiv"


@register_op
class ModOp(BinaryOp):
    """Python `%`: the result has the sign of the divisor."""
    name = "tile.mod"


@register_op
class PowOp(BinaryOp):
    name = "tile.pow"
    allowed = "float"


@register_op
class MinimumOp(BinaryOp):
    """Elementwise minimum; NaN propagates (numpy semantics)."""
    name = "tile.minimum"
    traits = EW | {"commutative"}


@register_op
class MaximumOp(BinaryOp):
    name = "tile.maximum"
    traits = EW | {"commutative"}


@register_op
class AndOp(BinaryOp):
    name = "tile.and"
    allowed = "intbool"
    traits = EW | {"commutative"}


@register_op
class OrOp(BinaryOp):
    name = "tile.or"
    allowed = "intbool"
    traits = EW | {"commutative"}


@register_op
class XorOp(BinaryOp):
    name = "tile.xor"
    allowed = "intbool"
    traits = EW | {"commutative"}


@register_op
class ShlOp(BinaryOp):
    name = "tile.shl"
    allowed = "int"


@register_op
class ShrOp(BinaryOp):
    """Arithmetic shift for signed types, logical for unsigned."""
    name = "tile.shr"
    allowed = "int"


CMP_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")


@register_op
class CmpOp(BinaryOp):
    name = "tile.cmp"
    attributes = {"pred": A("str")}

    def infer_types(self):
        return [with_element(self.operands[0].type, ScalarType(dt.bool_))]

    def verify_op(self):
        super().verify_op()
        if self.attrs["pred"] not in CMP_PREDICATES:
            raise self.error(f"pred must be one of {CMP_PREDICATES}")


@register_op
class NegOp(UnaryOp):
    name = "tile.neg"


@register_op
class InvertOp(UnaryOp):
    """Bitwise not (`~`); logical not on i1."""
    name = "tile.invert"
    allowed = "intbool"


@register_op
class AbsOp(UnaryOp):
    name = "tile.abs"


class FloatUnaryOp(UnaryOp):
    allowed = "float"


@register_op
class ExpOp(FloatUnaryOp):
    name = "tile.exp"


@register_op
class Exp2Op(FloatUnaryOp):
    name = "tile.exp2"


@register_op
class LogOp(FloatUnaryOp):
    name = "tile.log"


@register_op
class Log2Op(FloatUnaryOp):
    name = "tile.log2"


@register_op
class SqrtOp(FloatUnaryOp):
    name = "tile.sqrt"


@register_op
class RsqrtOp(FloatUnaryOp):
    name = "tile.rsqrt"


@register_op
class SinOp(FloatUnaryOp):
    name = "tile.sin"


@register_op
class CosOp(FloatUnaryOp):
    name = "tile.cos"


@register_op
class TanhOp(FloatUnaryOp):
    name = "tile.tanh"


@register_op
class SigmoidOp(FloatUnaryOp):
    name = "tile.sigmoid"


@register_op
class ErfOp(FloatUnaryOp):
    name = "tile.erf"


@register_op
class FloorOp(FloatUnaryOp):
    name = "tile.floor"


@register_op
class CeilOp(FloatUnaryOp):
    name = "tile.ceil"


@register_op
class FmaOp(ElementwiseOp):
    """a * b + c with one rounding."""
    name = "tile.fma"
    operands_spec = ("a", "b", "c")
    allowed = "float"


@register_op
class SelectOp(Op):
    """`tc.where(cond, a, b)`: cond is i1 of the same shape as a and b."""
    name = "tile.select"
    operands_spec = ("cond", "a", "b")
    traits = EW

    def infer_types(self):
        return [self.operands[1].type]

    def verify_op(self):
        c, a, b = (v.type for v in self.operands)
        if a != b:
            raise self.error(f"both branches must have one type, got {a} and {b}")
        if shape_of(c) != shape_of(a) or _dtype(c) is not dt.bool_:
            raise self.error(f"condition must be i1 of shape {list(shape_of(a))}, got {c}")


@register_op
class CastOp(Op):
    """`astype`: numeric conversion (floats to ints truncate toward zero, as numpy)."""
    name = "tile.cast"
    operands_spec = ("x",)
    attributes = {"to": A("dtype")}
    traits = EW

    def infer_types(self):
        return [with_element(self.operands[0].type, ScalarType(self.attrs["to"]))]


@register_op
class BitcastOp(Op):
    """Reinterpret the bits of each element as another type of the same width."""
    name = "tile.bitcast"
    operands_spec = ("x",)
    attributes = {"to": A("dtype")}
    traits = EW

    def infer_types(self):
        return [with_element(self.operands[0].type, ScalarType(self.attrs["to"]))]

    def verify_op(self):
        if _dtype(self.operands[0].type).bits != self.attrs["to"].bits:
            raise self.error("bitcast needs types of one width")


# ----------------------------------------------------------------------------- shape ops
class _ShapeOp(Op):
    traits = PURE

    def verify_op(self):
        _check_shape(self, shape_of(self.results[0].type))


@register_op
class SplatOp(_ShapeOp):
    """A tile of `shape` whose elements all equal the scalar operand."""
    name = "tile.splat"
    operands_spec = ("x",)
    attributes = {"shape": A("ints")}

    def infer_types(self):
        return [TileType(tuple(self.attrs["shape"]), self.operands[0].type)]


@register_op
class BroadcastOp(_ShapeOp):
    """Expand the extent-1 dimensions of a tile to `shape` (ranks equal)."""
    name = "tile.broadcast"
    operands_spec = ("x",)
    attributes = {"shape": A("ints")}

    def infer_types(self):
        return [TileType(tuple(self.attrs["shape"]), self.operands[0].type.element)]

    def verify_op(self):
        super().verify_op()
        src, dst = self.operands[0].type.shape, tuple(self.attrs["shape"])
        if len(src) != len(dst) or any(s != d and s != 1 for s, d in zip(src, dst)):
            raise self.error(f"cannot broadcast shape {list(src)} to {list(dst)}")


@register_op
class ExpandDimsOp(_ShapeOp):
    name = "tile.expand_dims"
    operands_spec = ("x",)
    attributes = {"axis": A("int")}

    def infer_types(self):
        t = self.operands[0].type
        shape = list(shape_of(t))
        shape.insert(self.attrs["axis"], 1)
        return [TileType(tuple(shape), element_type(t))]

    def verify_op(self):
        if not 0 <= self.attrs["axis"] <= len(shape_of(self.operands[0].type)):
            raise self.error("axis out of range")


@register_op
class ReshapeOp(_ShapeOp):
    """Row-major reshape to a shape with the same number of elements."""
    name = "tile.reshape"
    operands_spec = ("x",)
    attributes = {"shape": A("ints")}

    def infer_types(self):
        return [TileType(tuple(self.attrs["shape"]), element_type(self.operands[0].type))]

    def verify_op(self):
        super().verify_op()
        n = 1
        for s in self.attrs["shape"]:
            n *= s
        if n != self.operands[0].type.numel:
            raise self.error(f"cannot reshape {self.operands[0].type} to {list(self.attrs['shape'])}")


@register_op
class PermuteOp(_ShapeOp):
    name = "tile.permute"
    operands_spec = ("x",)
    attributes = {"order": A("ints")}

    def infer_types(self):
        t = self.operands[0].type
        return [TileType(tuple(t.shape[i] for i in self.attrs["order"]), t.element)]

    def verify_op(self):
        if sorted(self.attrs["order"]) != list(range(self.operands[0].type.rank)):
            raise self.error(f"order {self.attrs['order']} is not a permutation")


@register_op
class CatOp(_ShapeOp):
    name = "tile.cat"
    operands_spec = ("lhs", "rhs")
    attributes = {"axis": A("int")}

    def infer_types(self):
        a, b = self.operands[0].type, self.operands[1].type
        ax = self.attrs["axis"]
        shape = list(a.shape)
        shape[ax] = a.shape[ax] + b.shape[ax]
        return [TileType(tuple(shape), a.element)]

    def verify_op(self):
        a, b = self.operands[0].type, self.operands[1].type
        ax = self.attrs["axis"]
        if a.element != b.element or a.rank != b.rank or any(
                x != y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != ax):
            raise self.error(f"cannot concatenate {a} and {b} along axis {ax}")
        super().verify_op()


# ----------------------------------------------------------------------------- reductions and scans
REDUCE_KINDS = ("sum", "prod", "max", "min", "argmax", "argmin")


def _reduced_type(t: TileType, axis: int, elem) -> Type:
    shape = [s for i, s in enumerate(t.shape) if i != axis]
    return TileType(tuple(shape), elem) if shape else elem


@register_op
class ReduceOp(Op):
    """Reduce along `axis`; a rank-1 tile reduces to a scalar. argmax/argmin give i32 indices
    (the first index on ties)."""
    name = "tile.reduce"
    operands_spec = ("x",)
    attributes = {"axis": A("int"), "kind": A("str")}
    traits = PURE

    def infer_types(self):
        t = self.operands[0].type
        kind = self.attrs["kind"]
        elem = ScalarType(dt.int32) if kind.startswith("arg") else t.element
        return [_reduced_type(t, self.attrs["axis"], elem)]

    def verify_op(self):
        t = self.operands[0].type
        if not isinstance(t, TileType) or not 0 <= self.attrs["axis"] < t.rank:
            raise self.error(f"axis {self.attrs['axis']} out of range for {t}")
        if self.attrs["kind"] not in REDUCE_KINDS:
            raise self.error(f"kind must be one of {REDUCE_KINDS}")


@register_op
class ReduceGenericOp(Op):
    """Reduce along `axis` with a combiner region `^bb(%a: T, %b: T): ... tile.yield %c`."""
    name = "tile.reduce_generic"
    operands_spec = ("x",)
    attributes = {"axis": A("int")}
    num_regions = 1
    traits = PURE

    def infer_types(self):
        t = self.operands[0].type
        return [_reduced_type(t, self.attrs["axis"], t.element)]

    def verify_op(self):
        t = self.operands[0].type
        blk = self.regions[0].block
        if [a.type for a in blk.args] != [t.element, t.element]:
            raise self.error(f"combiner must take two {t.element} arguments")


SCAN_KINDS = ("sum", "prod", "max", "min")


@register_op
class ScanOp(Op):
    """Inclusive scan along `axis` (`reverse` scans from the end)."""
    name = "tile.scan"
    operands_spec = ("x",)
    attributes = {"axis": A("int"), "kind": A("str"), "reverse": A("bool", True, False)}
    traits = PURE

    def infer_types(self):
        return [self.operands[0].type]

    def verify_op(self):
        if self.attrs["kind"] not in SCAN_KINDS:
            raise self.error(f"kind must be one of {SCAN_KINDS}")


# ----------------------------------------------------------------------------- dot
@register_op
class DotOp(Op):
    """acc + a @ b for 2-D tiles: (M, K) x (K, N) + (M, N)."""
    name = "tile.dot"
    operands_spec = ("a", "b", "acc")
    attributes = {"allow_tf32": A("bool", True, False)}
    traits = PURE

    def infer_types(self):
        return [self.operands[2].type]

    def verify_op(self):
        a, b, c = (v.type for v in self.operands)
        if not all(isinstance(t, TileType) and t.rank == 2 for t in (a, b, c)):
            raise self.error("dot needs 2-D tiles")
        if a.shape[1] != b.shape[0] or c.shape != (a.shape[0], b.shape[1]):
            raise self.error(f"shapes do not match: {a} @ {b} + {c}")
        if a.dtype is not b.dtype:
            raise self.error(f"operands must have one dtype, got {a.dtype} and {b.dtype}")
        if c.dtype not in (dt.float32, dt.float16, dt.int32, dt.float64):
            raise self.error(f"accumulator must be f32, f16, f64 or i32, got {c.dtype}")


# ----------------------------------------------------------------------------- views and pointers
@register_op
class ViewDimOp(Op):
    """`x.shape[dim]` or `x.stride(dim)` of a tensor view, in the view's index type."""
    name = "tile.view_dim"
    operands_spec = ("view",)
    attributes = {"dim": A("int"), "kind": A("str")}
    traits = PURE

    def infer_types(self):
        return [ScalarType(self.operands[0].type.index)]

    def verify_op(self):
        v = self.operands[0].type
        if not isinstance(v, ViewType) or not 0 <= self.attrs["dim"] < v.rank:
            raise self.error(f"dim {self.attrs['dim']} out of range for {v}")
        if self.attrs["kind"] not in ("shape", "stride"):
            raise self.error("kind must be shape or stride")


@register_op
class ViewPtrOp(Op):
    """`x.ptr`: the base pointer of a view."""
    name = "tile.view_ptr"
    operands_spec = ("view",)
    traits = PURE

    def infer_types(self):
        return [PointerType(self.operands[0].type.dtype)]


class _ViewAccess(Op):
    """Common checks of tile.load_view / tile.store_view.

    mode "index": the tile starts at element `indices[d] * shape[d]`;
    mode "offset": at element `indices[d]`.
    """

    def _check_indices(self, shape):
        v = self.operands[0].type
        idx = self.group("indices")
        if not isinstance(v, ViewType):
            raise self.error(f"first operand must be a tensor view, got {v}")
        if len(idx) != v.rank or len(shape) != v.rank:
            raise self.error(f"a rank-{v.rank} view needs {v.rank} indices and a rank-{v.rank} shape")
        for i in idx:
            if not isinstance(i.type, ScalarType) or not i.type.dtype.is_int:
                raise self.error(f"indices must be integer scalars, got {i.type}")
        if self.attrs["mode"] not in ("index", "offset"):
            raise self.error("mode must be index or offset")
        _check_shape(self, shape)


@register_op
class LoadViewOp(_ViewAccess):
    name = "tile.load_view"
    operands_spec = ("view", "indices*")
    attributes = {"shape": A("ints"), "padding": A("any", True, 0), "mode": A("str", True, "index")}
    traits = frozenset({"reads"})

    def infer_types(self):
        return [tile(self.attrs["shape"], self.operands[0].type.dtype)]

    def verify_op(self):
        self._check_indices(self.attrs["shape"])


@register_op
class StoreViewOp(_ViewAccess):
    name = "tile.store_view"
    operands_spec = ("view", "indices*", "value")
    attributes = {"mode": A("str", True, "index")}
    num_results = 0
    traits = frozenset({"writes"})

    def infer_types(self):
        return []

    def verify_op(self):
        val = self.operands[-1].type
        if not isinstance(val, TileType):
            raise self.error(f"stored value must be a tile, got {val}")
        if val.dtype is not self.operands[0].type.dtype:
            raise self.error(f"stored tile is {val.dtype}, the view holds {self.operands[0].type.dtype}")
        self._check_indices(val.shape)


@register_op
class AddPtrOp(Op):
    """Pointer (or pointer tile) plus an element offset of the same shape."""
    name = "tile.addptr"
    operands_spec = ("ptr", "offset")
    traits = EW

    def infer_types(self):
        return [self.operands[0].type]

    def verify_op(self):
        p, o = self.operands[0].type, self.operands[1].type
        if not isinstance(element_type(p), PointerType):
            raise self.error(f"first operand must be a pointer, got {p}")
        if shape_of(p) != shape_of(o) or not (_dtype(o) and _dtype(o).is_int):
            raise self.error(f"offset must be an integer of shape {list(shape_of(p))}, got {o}")


def _pointee(t: Type):
    e = element_type(t)
    return e.pointee if isinstance(e, PointerType) else None


@register_op
class LoadOp(Op):
    name = "tile.load"
    operands_spec = ("ptr",)
    traits = frozenset({"reads"})

    def infer_types(self):
        return [with_element(self.operands[0].type, ScalarType(_pointee(self.operands[0].type)))]


@register_op
class LoadMaskedOp(Op):
    """Load where `mask`; elsewhere the result is `other`."""
    name = "tile.load_masked"
    operands_spec = ("ptr", "mask", "other")
    traits = frozenset({"reads"})

    def infer_types(self):
        return [with_element(self.operands[0].type, ScalarType(_pointee(self.operands[0].type)))]

    def verify_op(self):
        p, m, o = (v.type for v in self.operands)
        if shape_of(m) != shape_of(p) or _dtype(m) is not dt.bool_:
            raise self.error(f"mask must be i1 of shape {list(shape_of(p))}, got {m}")
        if o != self.results[0].type:
            raise self.error(f"other must be {self.results[0].type}, got {o}")


@register_op
class StoreOp(Op):
    name = "tile.store"
    operands_spec = ("ptr", "value")
    num_results = 0
    traits = frozenset({"writes"})

    def infer_types(self):
        return []

    def verify_op(self):
        p, v = self.operands[0].type, self.operands[1].type
        if shape_of(p) != shape_of(v) or _pointee(p) is not _dtype(v):
            raise self.error(f"cannot store {v} through {p}")


@register_op
class StoreMaskedOp(StoreOp):
    name = "tile.store_masked"
    operands_spec = ("ptr", "value", "mask")


ATOMIC_KINDS = ("add", "max", "min", "xchg", "and", "or", "xor")


@register_op
class AtomicRMWOp(Op):
    """Atomic read-modify-write where `mask`; returns the old values (`other` is 0 elsewhere)."""
    name = "tile.atomic_rmw"
    operands_spec = ("ptr", "value", "mask")
    attributes = {"kind": A("str"), "sem": A("str", True, "acq_rel"), "scope": A("str", True, "gpu")}
    traits = frozenset({"reads", "writes"})

    def infer_types(self):
        return [self.operands[1].type]

    def verify_op(self):
        if self.attrs["kind"] not in ATOMIC_KINDS:
            raise self.error(f"kind must be one of {ATOMIC_KINDS}")
        p, v = self.operands[0].type, self.operands[1].type
        if shape_of(p) != shape_of(v) or _pointee(p) is not _dtype(v):
            raise self.error(f"value {v} does not match pointer {p}")


@register_op
class AtomicCASOp(Op):
    """Compare-and-swap where `mask`: store `value` where the old value equals `cmp`."""
    name = "tile.atomic_cas"
    operands_spec = ("ptr", "cmp", "value", "mask")
    attributes = {"sem": A("str", True, "acq_rel"), "scope": A("str", True, "gpu")}
    traits = frozenset({"reads", "writes"})

    def infer_types(self):
        return [self.operands[2].type]


# ----------------------------------------------------------------------------- control flow
@register_op
class ForOp(Op):
    """for iv in range(lb, ub, step) with loop-carried values; results are the final values.
    The body block takes (iv, *carried) and ends in tile.yield of the next carried values."""
    name = "tile.for"
    operands_spec = ("lb", "ub", "step", "inits*")
    num_results = None
    num_regions = 1

    def infer_types(self):
        return [v.type for v in self.group("inits")]

    @property
    def body(self):
        return self.regions[0].block

    def verify_op(self):
        lb, ub, st = (v.type for v in self.operands[:3])
        if not (lb == ub == st and isinstance(lb, ScalarType) and lb.dtype.is_int):
            raise self.error(f"bounds must be integer scalars of one type, got {lb}, {ub}, {st}")
        want = [lb] + [v.type for v in self.group("inits")]
        if [a.type for a in self.body.args] != want:
            raise self.error("body arguments must be the induction variable and the carried values")


@register_op
class WhileOp(Op):
    """Region 0 (before) takes the carried values and ends in tile.condition;
    region 1 (after) takes the forwarded values and yields the next carried values."""
    name = "tile.while"
    operands_spec = ("inits*",)
    num_results = None
    num_regions = 2

    def infer_types(self):
        return [v.type for v in self.operands]


@register_op
class IfOp(Op):
    """Regions: then, else. Each ends in tile.yield of the results."""
    name = "tile.if"
    operands_spec = ("cond",)
    num_results = None
    num_regions = 2

    def verify_op(self):
        c = self.operands[0].type
        if c != ScalarType(dt.bool_):
            raise self.error(f"condition must be an i1 scalar, got {c}")


# ----------------------------------------------------------------------------- debugging
@register_op
class PrintOp(Op):
    """device_print: `fmt` followed by the values (tiles print every element)."""
    name = "tile.print"
    operands_spec = ("values*",)
    attributes = {"fmt": A("str")}
    num_results = 0
    traits = frozenset({"writes"})

    def infer_types(self):
        return []


@register_op
class AssertOp(Op):
    """device_assert: every element of `cond` must hold, else the kernel fails with `msg`."""
    name = "tile.assert"
    operands_spec = ("cond",)
    attributes = {"msg": A("str")}
    num_results = 0
    traits = frozenset({"writes"})

    def infer_types(self):
        return []

    def verify_op(self):
        if _dtype(self.operands[0].type) is not dt.bool_:
            raise self.error("assert condition must be i1")


def op_classes() -> List[type]:
    """Every tile dialect op class, for documentation and tests."""
    from .core import OP_REGISTRY
    return [c for n, c in OP_REGISTRY.items() if n.startswith("tile.")]
