"""Elementwise ops: arithmetic, logic, comparisons, math, select and casts."""
from __future__ import annotations

from ... import dtypes as dt
from ..core import Op, register_op
from ..types import ScalarType, shape_of, with_element
from .common import EW, A, _dtype


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

    def verify_op(self):
        # numbers only: codegen has no conversion of a pointer (or anything else) to a number
        if _dtype(self.operands[0].type) is None:
            raise self.error(f"cast converts numbers, got {self.operands[0].type}")


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
