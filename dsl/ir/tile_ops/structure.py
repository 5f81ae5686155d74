"""Functions, terminators, constants, grid ids, control flow and debugging ops."""
from __future__ import annotations

from ... import dtypes as dt
from ..core import Op, register_op
from ..types import ScalarType, TileType, is_pow2, next_pow2, tile
from .common import PURE, TERM, A, _check_shape, _dtype


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


@register_op
class YieldOp(Op):
    name = "tile.yield"
    operands_spec = ("values*",)
    num_results = 0
    traits = TERM


@register_op
class ConditionOp(Op):
    """Ends the `before` region of tile.while: continue while `cond`, forwarding `values`."""
    name = "tile.condition"
    operands_spec = ("cond", "values*")
    num_results = 0
    traits = TERM


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


@register_op
class ClusterRankOp(Op):
    """The program's rank in its cluster (0 .. cluster - 1; program_id(0) % cluster): the
    `cluster` option groups programs along axis 0 into clusters that run at the same time."""
    name = "tile.cluster_rank"
    traits = PURE

    def infer_types(self):
        return [ScalarType(dt.int32)]


@register_op
class BarrierOp(Op):
    """Every thread of the program waits here; memory its threads wrote before it is
    visible to all of them after it."""
    name = "tile.barrier"
    num_results = 0
    traits = frozenset({"writes"})


@register_op
class GridDependencyWaitOp(Op):
    """Wait until the grid launched before this one in the stream has finished and its
    memory writes are visible (programmatic dependent launch, sm_90+; nothing before)."""
    name = "tile.grid_dependency_wait"
    num_results = 0
    traits = frozenset({"writes"})  # a fence: no memory access moves across it


@register_op
class LaunchDependentsOp(Op):
    """Let the stream's next grid, launched as a dependent, start before this one ends."""
    name = "tile.launch_dependents"
    num_results = 0
    traits = frozenset({"writes"})


@register_op
class ClusterSyncOp(Op):
    """Every program of the cluster waits here for all the others; the memory writes made
    before it are visible to every program of the cluster after it (release / acquire)."""
    name = "tile.cluster_sync"
    num_results = 0
    traits = frozenset({"writes"})


@register_op
class ClusterGatherOp(Op):
    """Every program of the cluster contributes its scalars `values`; result i holds value i
    of every program, by rank (`size` = the cluster's programs), in a tile of the next power
    of two's entries: those past `size` hold `padding[i]` (required when size is not a power
    of two). One exchange: every program reaches it equally often, and its values reach
    every program; unlike tile.cluster_sync it orders no other memory access."""
    name = "tile.cluster_gather"
    operands_spec = ("values*",)
    num_results = None
    attributes = {"size": A("int"), "padding": A("any", True)}
    traits = frozenset({"writes"})

    @property
    def entries(self) -> int:
        """The results' length: `size` rounded up to a power of two."""
        return next_pow2(self.attrs["size"])

    def infer_types(self):
        return [TileType((self.entries,), ScalarType(v.type.dtype)) for v in self.operands]

    def verify_op(self):
        if not self.operands:
            raise self.error("tile.cluster_gather needs at least one value")
        for v in self.operands:
            if not isinstance(v.type, ScalarType) or v.type.dtype not in (dt.float32, dt.int32):
                raise self.error(f"tile.cluster_gather takes f32 or i32 scalars, got {v.type}")
        size, padding = self.attrs["size"], self.attrs.get("padding")
        if size not in range(1, 9):
            raise self.error(f"size must be 1 to 8 programs, got {size}")
        if padding is None and not is_pow2(size):
            raise self.error(f"size {size} is not a power of two: padding (one number per value) is required")
        if padding is not None and (not isinstance(padding, list) or len(padding) != len(self.operands)
                                    or not all(isinstance(p, (int, float)) and not isinstance(p, bool)
                                               for p in padding)):
            raise self.error(f"padding must be a list of {len(self.operands)} numbers, got {padding!r}")


# ----------------------------------------------------------------------------- control flow
@register_op
class ForOp(Op):
    """for iv in range(lb, ub, step) with loop-carried values; results are the final values.
    The body block takes (iv, *carried) and ends in tile.yield of the next carried values."""
    name = "tile.for"
    operands_spec = ("lb", "ub", "step", "inits*")
    # tc.range(num_stages=S): prefetch_loads issues the body's loads S - 1 iterations ahead
    attributes = {"num_stages": A("int", True, None)}
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


@register_op
class AssertOp(Op):
    """device_assert: every element of `cond` must hold, else the kernel fails with `msg`."""
    name = "tile.assert"
    operands_spec = ("cond",)
    attributes = {"msg": A("str")}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        if _dtype(self.operands[0].type) is not dt.bool_:
            raise self.error("assert condition must be i1")
