"""gpu ops of the sm_90a TMA path: tensor-map copies into shared memory completing on mbarriers.

    gpu.tma_origin %view, %i, %j {tag = 0, box = [128, 64]}   (marks the tile.load_view tagged 0)
    %bar = gpu.alloc {shape = [4], layout = #shared{...}} : ptr<i64, 3>   (one mbarrier per slot)
    gpu.mbarrier_init %bar                       (thread 0 initializes every slot's barrier, count 1)
    gpu.mbarrier_expect %bar, %slot, %live {bytes = 49152}   (thread 0: arrive + expect the bytes)
    gpu.tma_load %buf, %slot, %bar, %view, %i, %j, %live {box = [128, 64]}
    gpu.mbarrier_wait %bar, %slot, %parity       (every thread: the slot's phase `parity` completed)
    gpu.mbarrier_arrive %bar, %slot, %live {every = 128}   (where `live`: one arrival per 128 threads)

Clusters (the `cluster` option): a load promised the same for every program of the cluster
(tile.load_view {multicast}) gets `multicast = N` on its marker and copy: program rank r of
the N issues the boxes b with b % N == r, each written to the same offset of every
program's buffer and completing on the same slot's mbarrier of every program (so each
still expects the whole tile's bytes). A slot may then be refilled only once every program
of the cluster has read it: gpu.mbarrier_arrive {cluster = N} arrives on the slot's
mbarrier in each of the N programs. Only warp_specialize's ring (which has those `empty`
barriers) keeps multicast; it strips the attribute from any other ring.

gpu.tma_origin is a marker set before lower_views (tma_loads) on a tile.load_view that
TMA may replace: it keeps the view and the tile indices, which lowering turns into
pointer arithmetic, until pipeline_loads decides. It does nothing and pipeline_loads
always removes it.

gpu.tma_load copies the tile (i, j) of the view (shape = one slot of the buffer) with
`cp.async.bulk.tensor.2d`, one copy per `box`: the box is as wide as one 128-byte
swizzle row (64 16-bit, 32 f32 or 128 f8 elements), so a wider tile is several boxes,
stored one after the other as the buffer's 128-byte-swizzled layout has it (column
blocks). Box and copy run in the storage order of the view: for a column-major view
(first stride 1) the box is [columns of the tile, 128 bytes of its rows], which lands
the tile transposed, rows contiguous (the K-major B buffer of tf32/f8 wgmma). Elements
outside the view arrive as zeros. Only thread 0 issues, only where `%live` holds.
The view's tensor map is a kernel parameter (dsl/abi.py "tmap" slots, built by the
runtime), one per (view, box): `tma_params` lists them.

    gpu.tma_store %view, %i, %j, %tile {box = [128, 64]}   (tma_stores: the epilogue's store)

gpu.tma_store writes the register tile (i, j) of a row-major view through shared memory:
every thread puts its elements into a scratch buffer in the 128-byte-swizzled column-block
layout (allocate_shared places it, `_smem_offset`, where the K loop's ring was; a barrier
first where it reuses bytes, `_smem_sync`), fences them into the async proxy, and after a
barrier thread 0 copies the column blocks out with `cp.async.bulk.tensor` (one box each;
the copy clips whatever lies outside the view) and waits until they have been read from
shared memory. A tile over MAX_SCRATCH_BYTES (128 x 256 f32) goes in rounds of
`group_blocks` column blocks through a scratch of that size. Full 128-byte lines leave the SM instead of the accumulator layout's
4-byte pieces. A view of rank 3 to 5 takes one index per dimension and a box of 1 in every
dimension but its rows' and the last (`gpu.tma_store %o, %z, %m, %c0, %tile {box = [1, 128,
64]}`: attention's output tile of a `(batch·heads, seq, D)` view).
"""
from __future__ import annotations

from typing import List, Tuple

from tilec import dtypes as dt
from tilec.ir.core import AttrSpec as A, Module, Op, register_op
from tilec.ir.types import ScalarType, TileType, ViewType

from .ops import AllocOp

__all__ = ["TmaOriginOp", "MbarrierInitOp", "MbarrierExpectOp", "MbarrierWaitOp", "MbarrierArriveOp", "TmaLoadOp",
           "TmaStoreOp", "BulkReadWaitOp", "tma_params", "copy_attrs", "check_box", "check_scalar", "copies_as_it_lies",
           "storage_tile", "rows_dim", "column_major", "tile_transposed", "TMA_BOX_BYTES"]

TMA_BOX_BYTES = 128  # a box's contiguous extent: one row of the 128-byte swizzle
# Programs sharing a multicast copy (each issues a share of its rows): clusters of 1, 2, 4
# or 8; the tma_loads pass multicasts only in such clusters.
MULTICAST_SIZES = (1, 2, 4, 8)
MAX_SCRATCH_BYTES = 64 * 1024  # a gpu.tma_store's scratch: a 128 x 256 tile of 16-bit elements


def check_scalar(op: Op, idx: int, want, what: str) -> None:
    """Operand `idx` of `op` is a scalar of one of the dtypes `want`, else an error naming `what`."""
    t = op.operands[idx].type
    if not isinstance(t, ScalarType) or t.dtype not in want:
        raise op.error(f"{what} must be a scalar of {'/'.join(d.name for d in want)}, got {t}")


def _barriers(op: Op, idx: int) -> AllocOp:
    alloc = op.operands[idx].owner
    if not isinstance(alloc, AllocOp) or alloc.results[0].type.pointee is not dt.int64 \
            or len(alloc.attrs["shape"]) != 1:
        raise op.error("the barrier operand must be a 1-D gpu.alloc of i64 (one mbarrier per slot)")
    return alloc


_INDEX = (dt.int32, dt.int64)


def _check_cluster(op: Op, n: int, what: str) -> None:
    if n not in MULTICAST_SIZES:
        raise op.error(f"{what} must be 1, 2, 4 or 8 programs, got {n}")


@register_op
class TmaOriginOp(Op):
    """Marker: the tile.load_view tagged `tag` reads the tile at `indices` of `view` and may
    become TMA (`transposed`: the loaded tile is the transpose of the box's storage rows and
    columns, a view of rank 3 or more read with order [1, 0]; `offsets`: the indices are the
    tile's first element per dimension, a load in "offset" mode, not tile indices)."""
    name = "gpu.tma_origin"
    operands_spec = ("view", "indices*")
    attributes = {"tag": A("int"), "box": A("ints"), "multicast": A("int", True), "transposed": A("bool", True),
                  "offsets": A("bool", True)}
    num_results = 0
    traits = frozenset({"writes"})  # kept by dce until pipeline_loads removes it

    def verify_op(self):
        vt = self.operands[0].type
        if not isinstance(vt, ViewType):
            raise self.error(f"operand 0 must be a view, got {vt}")
        if len(self.operands) - 1 != vt.rank:
            raise self.error(f"expected {vt.rank} indices (one per dimension of the view), got {len(self.operands) - 1}")
        for k in range(1, len(self.operands)):
            check_scalar(self, k, _INDEX, f"index {k - 1}")


@register_op
class MbarrierInitOp(Op):
    """Thread 0 initializes every mbarrier of the buffer with an arrival count of `count`
    (1: the one thread that expects the TMA bytes; the consumer threads of a warp-specialized
    ring for its `empty` barriers)."""
    name = "gpu.mbarrier_init"
    operands_spec = ("barriers",)
    attributes = {"count": A("int", True)}
    num_results = 0
    traits = frozenset({"writes"})

    @property
    def count(self) -> int:
        return self.attrs.get("count") or 1

    def verify_op(self):
        _barriers(self, 0)
        if not 1 <= self.count < (1 << 20):
            raise self.error(f"count must be from 1 to 2^20 - 1, got {self.count}")


@register_op
class MbarrierExpectOp(Op):
    """Thread 0, where `live`: arrive on the slot's mbarrier, expecting `bytes` more bytes."""
    name = "gpu.mbarrier_expect"
    operands_spec = ("barriers", "slot", "live")
    attributes = {"bytes": A("int")}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        _barriers(self, 0)
        check_scalar(self, 1, (dt.int32,), "the slot")
        check_scalar(self, 2, (dt.bool_,), "live")
        if not 0 < self.attrs["bytes"] < (1 << 20):
            raise self.error(f"bytes must be from 1 to 2^20 - 1, got {self.attrs['bytes']}")


@register_op
class MbarrierWaitOp(Op):
    """Every thread waits until the phase of the slot's mbarrier with parity `parity` completed."""
    name = "gpu.mbarrier_wait"
    operands_spec = ("barriers", "slot", "parity")
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        _barriers(self, 0)
        check_scalar(self, 1, (dt.int32,), "the slot")
        check_scalar(self, 2, (dt.int32,), "the parity")


@register_op
class MbarrierArriveOp(Op):
    """Where `live`: one arrival on the slot's mbarrier (a consumer releasing the slot it has
    finished reading) from every `every`-th thread (thread ids that are multiples of it;
    128: one per warpgroup, once its wgmma.wait_group has returned; default 1: every thread)."""
    name = "gpu.mbarrier_arrive"
    operands_spec = ("barriers", "slot", "live")
    attributes = {"every": A("int", True), "cluster": A("int", True)}
    num_results = 0
    traits = frozenset({"writes"})

    @property
    def every(self) -> int:
        return self.attrs.get("every") or 1

    @property
    def cluster(self) -> int:
        """Programs whose copy of the barrier receives the arrival (0, 1: this one only)."""
        return self.attrs.get("cluster") or 1

    def verify_op(self):
        _barriers(self, 0)
        check_scalar(self, 1, (dt.int32,), "the slot")
        check_scalar(self, 2, (dt.bool_,), "live")
        if self.every < 1 or self.every & (self.every - 1):
            raise self.error(f"every must be a power of two, got {self.every}")
        _check_cluster(self, self.cluster, "cluster")


COPY_ATTRS = ("multicast", "transposed", "offsets")


def copy_attrs(op: Op) -> dict:
    """The attributes of a TmaOriginOp (or TmaLoadOp) that a TmaLoadOp issued for it carries."""
    return {k: op.attrs[k] for k in COPY_ATTRS if op.attrs.get(k)}


@register_op
class TmaLoadOp(Op):
    """Thread 0, where `live`: copy the tile at `indices` of `view` into slot `slot` of
    `buffer` with TMA, completing on the slot's mbarrier (`transposed`, `offsets`: as
    TmaOriginOp)."""
    name = "gpu.tma_load"
    operands_spec = ("buffer", "slot", "barriers", "view", "indices*", "live")
    attributes = {"box": A("ints"), "multicast": A("int", True), "transposed": A("bool", True),
                  "offsets": A("bool", True)}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        buf = self.operands[0].owner
        if not isinstance(buf, AllocOp) or len(buf.attrs["shape"]) != 3:
            raise self.error("the buffer must be a gpu.alloc with slots (rank 3)")
        check_scalar(self, 1, (dt.int32,), "the slot")
        _barriers(self, 2)
        vt = self.operands[3].type
        if not isinstance(vt, ViewType) or not 2 <= vt.rank <= 5:
            raise self.error(f"operand 3 must be a view of rank 2 to 5, got {vt}")
        if vt.dtype is not buf.results[0].type.pointee:
            raise self.error("the view and the buffer must have one element type")
        if len(self.operands) - 5 != vt.rank:
            raise self.error(f"expected {vt.rank} indices (one per dimension of the view), got {len(self.operands) - 5}")
        for k in range(4, len(self.operands) - 1):
            check_scalar(self, k, _INDEX, f"index {k - 4}")
        check_scalar(self, len(self.operands) - 1, (dt.bool_,), "live")
        if vt.rank > 2 and vt.strides[-1] != 1:
            raise self.error(f"a view of rank {vt.rank} is copied row-major (last stride 1), got strides {list(vt.strides)}")
        trans = tile_transposed(self)
        check_box(self, storage_tile(buf.attrs["shape"][1:], vt, trans), vt)
        lay = buf.attrs["layout"]
        if lay.swizzle_bytes != 128:
            raise self.error(f"TMA writes 128-byte-swizzled buffers here, got {lay}")
        if not copies_as_it_lies(lay, vt, has_slot=True, transposed=trans):
            raise self.error(f"the buffer's contiguous dimension (layout {lay}) must be the view's "
                             f"unit-stride one (strides {list(vt.strides)})")
        _check_cluster(self, self.multicast, "multicast")

    @property
    def multicast(self) -> int:
        """Programs of the cluster that share the copy (0, 1: none)."""
        return self.attrs.get("multicast") or 1

    @property
    def nbytes(self) -> int:
        rows, cols = self.operands[0].owner.attrs["shape"][1:]
        return rows * cols * self.operands[3].type.dtype.itemsize


REDUCE_KINDS = ("add",)
REDUCE_DTYPES = (dt.float32,)   # (f16/bf16 adds: not yet run on a GPU)


@register_op
class TmaStoreOp(Op):
    """Store the register tile as the tile at `indices` of the row-major `view`, through a
    shared scratch buffer and TMA (module docstring). A view of rank 3 to 5 takes a 2-D tile
    that is 1 in every dimension but the last and the one `box` gives its rows."""
    name = "gpu.tma_store"
    operands_spec = ("view", "indices*", "value")
    # reduce "add": the copy adds the tile to memory (cp.reduce.async.bulk.tensor; tma_stores'
    # form of a relaxed tc.atomic_add whose old values are unused). deferred_read: the issuing
    # thread waits for the copy's reads of the scratch before the next round writes it, not
    # right after issuing it (a store inside a loop: the reads overlap the iteration's work;
    # a gpu.bulk_read_wait after the loop ends the last one, and the scratch lives until then)
    attributes = {"box": A("ints"), "reduce": A("str", True), "deferred_read": A("bool", True)}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        vt = self.operands[0].type
        if not isinstance(vt, ViewType) or not 2 <= vt.rank <= 5 or vt.strides[-1] != 1:
            raise self.error(f"operand 0 must be a row-major view (last stride 1) of rank 2 to 5, got {vt}")
        if len(self.operands) - 2 != vt.rank:
            raise self.error(f"expected {vt.rank} indices (one per dimension of the view), got {len(self.operands) - 2}")
        for k in range(1, len(self.operands) - 1):
            check_scalar(self, k, _INDEX, f"index {k - 1}")
        t = self.operands[-1].type
        if not isinstance(t, TileType) or t.rank != 2 or t.dtype is not vt.dtype:
            raise self.error(f"the value must be a 2-D tile of {vt.dtype.name}, got {t}")
        check_box(self, tuple(t.shape), vt)
        red = self.attrs.get("reduce")
        if red is not None and (red not in REDUCE_KINDS or t.dtype not in REDUCE_DTYPES):
            raise self.error(f"reduce must be one of {REDUCE_KINDS} on {', '.join(d.name for d in REDUCE_DTYPES)} "
                             f"tiles, got {red!r} on {t.dtype.name}")

    @property
    def group_blocks(self) -> int:
        """Column blocks (one box each) stored per round through the scratch: all of them when
        the tile fits in MAX_SCRATCH_BYTES; otherwise as many as fit (a divisor of the count),
        provided every thread's elements of a block are its own registers' (no lane or warp
        bit of the layout crosses a block: the wgmma accumulator's lanes span 8 columns), so
        the rounds split registers, not threads."""
        t = self.operands[-1].type
        rows, cols = t.shape
        width = self.attrs["box"][-1]
        blocks = cols // width
        fit = max(1, MAX_SCRATCH_BYTES // (rows * TMA_BOX_BYTES))
        if blocks <= fit or t.encoding is None:
            return blocks
        bs = t.encoding.bases(t.shape)
        if any(b[1] >= width for b in list(bs.lane) + list(bs.warp)):
            return blocks
        return max(d for d in range(1, fit + 1) if blocks % d == 0)

    @property
    def scratch_bytes(self) -> int:
        return self.operands[-1].type.shape[0] * TMA_BOX_BYTES * self.group_blocks


@register_op
class BulkReadWaitOp(Op):
    """The issuing thread waits until every bulk copy it issued has read its shared source
    (cp.async.bulk.wait_group.read 0), then a block barrier: after a loop whose TMA stores
    deferred that wait (TmaStoreOp's deferred_read), before their scratch is used again."""
    name = "gpu.bulk_read_wait"
    operands_spec = ()
    num_results = 0
    traits = frozenset({"writes"})


def check_box(op: Op, tile: Tuple[int, int], vt: ViewType) -> None:
    """A copy's box is the tile's rows (storage order) by one 128-byte swizzle row of columns;
    a view of rank 3 or more has its other dimensions 1 (the rows in one of them)."""
    rows, cols = tile
    box = list(op.attrs["box"])
    width = TMA_BOX_BYTES // vt.dtype.itemsize
    if vt.rank == 2:
        fits, want = box == [rows, width], f"[{rows}, {width}]"
    else:
        outer = [n for n in box[:-1] if n != 1]
        fits = len(box) == vt.rank and box[-1] == width and outer == ([rows] if rows != 1 else [])
        want = f"{vt.rank - 1} leading entries, one of them {rows} and the others 1, then {width}"
    if not fits or cols % width or not 0 < rows <= 256:
        raise op.error(f"box {box} must be {want} for a {rows}x{cols} tile (storage order, at most 256 rows)")


def copies_as_it_lies(layout, vt: ViewType, has_slot: bool, transposed: bool = None) -> bool:
    """Whether a buffer of `layout` (a leading ring-slot dimension when `has_slot`) is
    contiguous along `vt`'s unit-stride dimension: a TMA copy cannot transpose. `transposed`
    (default: the view is column-major) says the tile is the storage box turned over."""
    trans = column_major(vt) if transposed is None else transposed
    return layout.order[0] - (1 if has_slot else 0) == (0 if trans else 1)


def column_major(vt: ViewType) -> bool:
    """Whether a 2-D TMA view is stored column-major (its tensor map runs over the transpose)."""
    return vt.rank == 2 and vt.strides[1] != 1


def tile_transposed(op: Op) -> bool:
    """Whether the tile of a TMA origin or load is its box's storage rows and columns turned
    over: a column-major 2-D view, or a higher-rank view read with order [1, 0]."""
    vt = op.operands[0 if isinstance(op, TmaOriginOp) else 3].type
    return column_major(vt) if vt.rank == 2 else bool(op.attrs.get("transposed"))


def storage_tile(shape, vt: ViewType, transposed: bool = None) -> Tuple[int, int]:
    """A tile's (rows, columns) in the view's storage order: transposed for a column-major
    view (first stride 1), whose tensor map runs over the storage, or where `transposed`."""
    rows, cols = shape
    trans = column_major(vt) if transposed is None else transposed
    return (cols, rows) if trans else (rows, cols)


def rows_dim(squeeze, rank: int):
    """The view dimension that holds a 2-D tile's rows when a load or store of a view of rank
    3 to 5 squeezes it to 2-D (`squeeze`: the unit dimensions dropped): the one dimension but
    the last left; None where more or fewer are left."""
    dropped = sorted(squeeze or [])
    kept = [k for k in range(rank - 1) if k not in dropped]
    return kept[0] if len(kept) == 1 and len(dropped) == rank - 2 else None


def _arg_index(view) -> int:
    """Index of a view among the kernel's entry-block arguments."""
    block = view.block
    for i, a in enumerate(block.args):
        if a is view:
            return i
    raise ValueError("a TMA view must be a kernel argument")


def tma_params(module: Module) -> List[Tuple[int, Tuple[int, int]]]:
    """(kernel argument, box) of every tensor map the kernel takes, in parameter order."""
    seen = []
    for op in module.walk():
        if isinstance(op, (TmaLoadOp, TmaStoreOp)):
            view = op.operands[3] if isinstance(op, TmaLoadOp) else op.operands[0]
            key = (_arg_index(view), tuple(op.attrs["box"]))
            if key not in seen:
                seen.append(key)
    return sorted(seen)
