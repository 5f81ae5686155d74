"""The `gpu` dialect: ops that only make sense once tiles have layouts.

Tile ops (tile.add, tile.load, ...) stay in gpu IR with layout-encoded types
(`tile<64x64xf32, #blocked{...}>`); codegen handles them. These ops add what the
tile dialect cannot say: moving a tile between layouts, shared-memory buffers,
barriers, warp shuffles, and the stages of a reduction.

    %b = gpu.convert_layout %a : tile<128xf32, #blocked{...}>
    %s = gpu.alloc {shape = [4, 64], layout = #shared{...}, offset = 0} : ptr<f32, 3>
    gpu.local_store %s, %t
    gpu.barrier
    %u = gpu.local_load %s : tile<4x64xf32, #linear{...}>
    %p = gpu.reduce_thread %t {axis = 1} ({ ^bb0(%x: f32, %y: f32): ... tile.yield %z }) : tile<...>
    %q = gpu.reduce_lanes %p {axis = 1} ({ ... }) : tile<...>
    %v = gpu.shuffle %x {kind = "xor", offset = 16} : f32
    %p, %t = gpu.scan_lanes %p0, %t0 {axis = 0, bits = [2, 3, 4, 5, 6]} ({ ... }) : tile<...>, tile<...>
"""
from __future__ import annotations

from tilec import dtypes as dt
from tilec.ir.core import AttrSpec as A, Op, register_op
from tilec.ir.types import PointerType, ScalarType, TileType

from .layouts import DistributedLayout, LayoutError, SharedLayout, equivalent
from .scan import scan_segments, warps_buffer_shape
from .stages import drop_axis, stage_result

__all__ = ["ConvertLayoutOp", "AllocOp", "LocalStoreOp", "LocalLoadOp", "BarrierOp", "ShuffleOp",
           "ReduceThreadOp", "ReduceLanesOp", "ScanThreadOp", "ScanLanesOp", "ScanWarpsOp", "LaneIdOp", "WarpIdOp",
           "SHARED", "gpu_op_classes"]

SHARED = 3  # the shared-memory address space
SHUFFLE_KINDS = ("xor", "up", "down", "idx")


def _layout_of(op: Op, t, what: str) -> DistributedLayout:
    if not isinstance(t, TileType) or not isinstance(t.encoding, DistributedLayout):
        raise op.error(f"{what} must be a tile with a register layout, got {t}")
    try:
        t.encoding.check_shape(t.shape)
        t.encoding.bases(t.shape)
    except LayoutError as e:
        raise op.error(str(e)) from None
    return t.encoding


@register_op
class ConvertLayoutOp(Op):
    """The same tile in another layout (through registers, shuffles or shared memory)."""
    name = "gpu.convert_layout"
    operands_spec = ("x",)
    traits = frozenset({"pure"})

    def verify_op(self):
        src, dst = self.operands[0].type, self.results[0].type
        _layout_of(self, src, "source")
        _layout_of(self, dst, "result")
        if src.shape != dst.shape or src.element != dst.element:
            raise self.error(f"cannot convert {src} to {dst}: shape or element type differ")


@register_op
class AllocOp(Op):
    """A shared-memory buffer of `shape` elements laid out by `layout`; `offset` (bytes from
    the kernel's shared-memory base) is set by allocate_shared, -1 before."""
    name = "gpu.alloc"
    attributes = {"shape": A("ints"), "layout": A("any"), "offset": A("int", True, -1)}

    def verify_op(self):
        t = self.results[0].type
        if not isinstance(t, PointerType) or t.addrspace != SHARED:
            raise self.error(f"result must be a shared-memory pointer ptr<T, {SHARED}>, got {t}")
        lay = self.attrs["layout"]
        if not isinstance(lay, SharedLayout):
            raise self.error(f"layout must be a #shared layout, got {lay}")
        if lay.rank != len(self.attrs["shape"]):
            raise self.error(f"{lay} is rank {lay.rank}, the buffer has shape {self.attrs['shape']}")

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.attrs["shape"]:
            n *= s
        return n * self.results[0].type.pointee.itemsize


def _alloc_of(op: Op, v) -> AllocOp:
    owner = v.owner
    if not isinstance(owner, AllocOp):
        raise op.error("the buffer operand must be the result of gpu.alloc")
    return owner


@register_op
class LocalStoreOp(Op):
    """Write a register tile into a shared buffer of the same shape (copies write once)."""
    name = "gpu.local_store"
    operands_spec = ("buffer", "value")
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        alloc = _alloc_of(self, self.operands[0])
        t = self.operands[1].type
        _layout_of(self, t, "stored value")
        if list(t.shape) != alloc.attrs["shape"] or t.dtype is not alloc.results[0].type.pointee:
            raise self.error(f"cannot store {t} into a buffer of {alloc.attrs['shape']} "
                             f"{alloc.results[0].type.pointee}")


@register_op
class LocalLoadOp(Op):
    """Read a shared buffer (or, with an i32 `slot`, slot `slot` of a buffer whose leading
    dimension counts the slots) into registers, in the result type's layout."""
    name = "gpu.local_load"
    operands_spec = ("buffer", "slot?")
    traits = frozenset({"reads"})

    def verify_op(self):
        alloc = _alloc_of(self, self.operands[0])
        t = self.results[0].type
        _layout_of(self, t, "result")
        shape = alloc.attrs["shape"]
        if len(self.operands) > 1:
            st = self.operands[1].type
            if not isinstance(st, ScalarType) or st.dtype is not dt.int32:
                raise self.error(f"the slot index must be an i32 scalar, got {st}")
            shape = shape[1:]
        if list(t.shape) != shape or t.dtype is not alloc.results[0].type.pointee:
            raise self.error(f"cannot load {t} from a buffer of {shape} {alloc.results[0].type.pointee}")


@register_op
class BarrierOp(Op):
    """All threads of the CTA wait here; shared-memory writes before it are visible after.
    `id` names the hardware barrier (0: the one __syncthreads uses)."""
    name = "gpu.barrier"
    attributes = {"id": A("int", True, 0)}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        if not 0 <= self.attrs["id"] < 16:
            raise self.error("barrier id must be from 0 to 15")


@register_op
class ShuffleOp(Op):
    """Each register of `x` from another lane of the warp: lane ^ offset (xor), lane - offset
    (up), lane + offset (down), or lane `offset` (idx). Out-of-range up/down keep their own."""
    name = "gpu.shuffle"
    operands_spec = ("x",)
    attributes = {"kind": A("str"), "offset": A("int")}

    def infer_types(self):
        return [self.operands[0].type]

    def verify_op(self):
        if self.attrs["kind"] not in SHUFFLE_KINDS:
            raise self.error(f"kind must be one of {SHUFFLE_KINDS}")
        if not 0 <= self.attrs["offset"] < 32:
            raise self.error("offset must be a lane number from 0 to 31")
        e = self.operands[0].type
        e = e.element if isinstance(e, TileType) else e
        if not isinstance(e, ScalarType) or e.dtype.bits > 64 or e.dtype.is_bool:
            raise self.error(f"cannot shuffle {self.operands[0].type}")


class _LaneOrWarp(Op):
    traits = frozenset({"pure"})

    def infer_types(self):
        from tilec import dtypes
        return [ScalarType(dtypes.int32)]


@register_op
class LaneIdOp(_LaneOrWarp):
    name = "gpu.lane_id"


@register_op
class WarpIdOp(_LaneOrWarp):
    name = "gpu.warp_id"


class _ReduceStage(Op):
    """One stage of a reduction of the tiles `xs` (values, plus indices for argmax/argmin)
    along `axis`. The region is the combiner on scalars: ^bb0(a..., b...): tile.yield c...
    The results keep the axis, shrunk (stages.py); when `drop_axis` is set the axis, of
    extent 1 by then, is removed (a rank-1 tile gives scalars)."""
    operands_spec = ("xs*",)
    attributes = {"axis": A("int"), "drop_axis": A("bool", True, False)}
    num_results = None
    num_regions = 1
    traits = frozenset({"pure"})
    stage = "<abstract>"

    def expected(self):
        x = self.operands[0].type
        lay = _layout_of(self, x, "reduced value")
        axis = self.attrs["axis"]
        if not 0 <= axis < x.rank:
            raise self.error(f"axis {axis} out of range for {x}")
        try:
            shape, bases = stage_result(lay, x.shape, axis, self.stage)
        except LayoutError as e:
            raise self.error(str(e)) from None
        if self.attrs.get("drop_axis"):
            if shape[axis] != 1:
                raise self.error(f"drop_axis needs the axis reduced to extent 1, it is {shape[axis]}")
            shape = shape[:axis] + shape[axis + 1:]
            bases = drop_axis(bases, axis)
        return shape, bases

    def verify_op(self):
        xs = self.operands
        if not xs or any(v.type.shape != xs[0].type.shape or v.type.encoding != xs[0].type.encoding
                         for v in xs if isinstance(v.type, TileType)):
            raise self.error("reduced tiles must share one shape and layout")
        if len(self.results) != len(xs):
            raise self.error("one result per reduced tile")
        shape, bases = self.expected()
        blk = self.regions[0].block
        elems = [v.type.element for v in xs]
        if [a.type for a in blk.args] != elems + elems:
            raise self.error(f"the combiner takes ({', '.join(map(str, elems + elems))})")
        for v, r in zip(xs, self.results):
            t = r.type
            if not shape:
                if t != v.type.element:
                    raise self.error(f"result must be the scalar {v.type.element}, got {t}")
                if any(b for g in bases for b in g):
                    raise self.error("a scalar result needs every thread to hold the whole reduction")
                continue
            if not isinstance(t, TileType) or t.shape != shape or t.element != v.type.element:
                raise self.error(f"result must be a tile of shape {list(shape)} of {v.type.element}, got {t}")
            try:
                ok = isinstance(t.encoding, DistributedLayout) and t.encoding.bases(shape) == bases
            except LayoutError:
                ok = False
            if not ok:
                raise self.error(f"result layout {t.encoding} does not place the partials where this stage does")


@register_op
class ReduceThreadOp(_ReduceStage):
    """Combine the registers of each thread that differ only along the axis."""
    name = "gpu.reduce_thread"
    stage = "thread"


@register_op
class ReduceLanesOp(_ReduceStage):
    """Combine across the lanes of each warp that differ only along the axis (butterfly
    shuffles: every lane of a group ends with the combined value)."""
    name = "gpu.reduce_lanes"
    stage = "lanes"


class _ScanStage(Op):
    """One segment of an inclusive scan along `axis` (scan.py): operands and results are the
    (prefix, total) pair, in the operand's layout; `bits` are the axis coordinate bits the
    stage joins. The region is the combiner on scalars: ^bb0(a, b): tile.yield c."""
    operands_spec = ("prefix", "total")
    attributes = {"axis": A("int"), "bits": A("ints"), "reverse": A("bool", True, False)}
    num_results = 2
    num_regions = 1
    traits = frozenset({"pure"})
    stage = "<abstract>"

    def infer_types(self):
        return [self.operands[0].type, self.operands[1].type]

    def segment(self):
        t = self.operands[0].type
        lay = _layout_of(self, t, "scanned value")
        axis = self.attrs["axis"]
        if not 0 <= axis < t.rank:
            raise self.error(f"axis {axis} out of range for {t}")
        try:
            segs = scan_segments(lay, t.shape, axis)
        except LayoutError as e:
            raise self.error(str(e)) from None
        for s in segs:
            if s.bits == tuple(self.attrs["bits"]) and s.kind == self.stage:
                return s
        raise self.error(f"bits {self.attrs['bits']} are not a {self.stage} segment of {lay} along axis {axis}; "
                         f"the segments are {[(s.kind, list(s.bits)) for s in segs]}")

    def verify_op(self):
        p, t = self.operands[0].type, self.operands[1].type
        if p != t or [r.type for r in self.results[:2]] != [p, p]:
            raise self.error("prefix, total and both results must have one type")
        self.segment()
        e = p.element
        if [a.type for a in self.regions[0].block.args] != [e, e]:
            raise self.error(f"the combiner takes ({e}, {e})")


@register_op
class ScanThreadOp(_ScanStage):
    """Join blocks held in the registers of each thread."""
    name = "gpu.scan_thread"
    stage = "thread"


@register_op
class ScanLanesOp(_ScanStage):
    """Join blocks held by the lanes of each warp (butterfly shuffles of the totals)."""
    name = "gpu.scan_lanes"
    stage = "lanes"


@register_op
class ScanWarpsOp(_ScanStage):
    """Join blocks held by warps: totals to the shared buffer, a barrier, totals of the other
    warps back. The buffer holds one slot per block total (scan.warps_buffer_shape)."""
    name = "gpu.scan_warps"
    operands_spec = ("prefix", "total", "buffer")
    stage = "warps"
    traits = frozenset({"writes"})

    def verify_op(self):
        super().verify_op()
        alloc = _alloc_of(self, self.operands[2])
        t = self.operands[0].type
        want = list(warps_buffer_shape(t.shape, self.attrs["axis"], self.segment()))
        if alloc.attrs["shape"] != want or alloc.results[0].type.pointee is not t.dtype:
            raise self.error(f"the buffer must hold {want} {t.dtype}, got {alloc.attrs['shape']} "
                             f"{alloc.results[0].type.pointee}")


def gpu_op_classes():
    from tilec.ir.core import OP_REGISTRY
    return [c for n, c in OP_REGISTRY.items() if n.startswith("gpu.")]


# re-exported for passes that compare layouts
__all__.append("equivalent")
