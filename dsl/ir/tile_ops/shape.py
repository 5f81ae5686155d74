"""Shape ops, reductions, scans and dot."""
from __future__ import annotations

from ... import dtypes as dt
from ..core import Op, register_op
from ..types import ScalarType, TileType, Type, element_type, shape_of
from .common import PURE, A, _check_shape


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
