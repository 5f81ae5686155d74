"""Codegen rules of the TMA ops (sm_90a): mbarriers and cp.async.bulk.tensor (loads into shared
memory, and the epilogue's stores out of it), as inline PTX.

Shared addresses are 32-bit (`--nvptx-short-ptr`); an mbarrier is 8 bytes of its gpu.alloc
buffer, one per slot. The wait is a loop around `mbarrier.try_wait.parity` built in LLVM
IR, or (`wait_parity(inline_loop=True)`) inside one inline PTX block whose label `${:uid}`
makes unique per emitted copy. Copies and
arrivals are issued by thread 0 only, inside an `if`.
"""
from __future__ import annotations

from llvmlite import ir

from ..gpu import tma_ops as G
from ..gpu.layouts import SharedLayout
from ..gpu.tma_ops import TMA_BOX_BYTES
from .rules_gpu import barrier, store_tile
from .rules_mma import slot_pointer
from .types import I32
from .walker import rule

I8 = ir.IntType(8)


def _smem_addr(ctx, alloc, slot, byte_offset=0):
    ptr = slot_pointer(ctx, alloc, slot, I8, byte_offset)
    return ctx.builder.ptrtoint(ptr, I32)


def _barrier_addr(ctx, bar_value, slot_value):
    """32-bit shared address of the mbarrier of slot `slot_value` (an IR value)."""
    bar = bar_value.owner
    b = ctx.builder
    base = _smem_addr(ctx, bar, None)
    return b.add(base, b.mul(ctx.get(slot_value), ir.Constant(I32, 8)))


def _thread0(ctx, live=None):
    """An `if` for the one thread that issues (thread 0, or the producer's first thread)."""
    b = ctx.builder
    cond = b.icmp_unsigned("==", ctx.tid, ir.Constant(I32, ctx.leader_tid))
    if live is not None:
        cond = b.and_(cond, live)
    return b.if_then(cond)


def _asm(ctx, text, cons, args):
    fty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    ctx.builder.asm(fty, text, cons, args, True)


@rule(G.TmaOriginOp)
def _tma_origin(ctx, op):
    """A marker pipeline_loads removes; nothing to emit if a partial pipeline left it."""


@rule(G.MbarrierInitOp)
def _mbarrier_init(ctx, op):
    alloc = op.operands[0].owner
    base = _smem_addr(ctx, alloc, None)
    with _thread0(ctx):
        for s in range(alloc.attrs["shape"][0]):
            addr = ctx.builder.add(base, ir.Constant(I32, 8 * s))
            _asm(ctx, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r", [addr, ir.Constant(I32, op.count)])
        # the initialized barriers become visible to the async proxy (TMA's complete_tx)
        _asm(ctx, "fence.mbarrier_init.release.cluster;", "", [])
        ctx.intrinsic("llvm.nvvm.fence.proxy.async.shared_cta", ir.VoidType(), [])


@rule(G.MbarrierExpectOp)
def _mbarrier_expect(ctx, op):
    bar = _barrier_addr(ctx, op.operands[0], op.operands[1])
    with _thread0(ctx, ctx.get(op.operands[2])):
        _asm(ctx, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
             [bar, ir.Constant(I32, op.attrs["bytes"])])


@rule(G.MbarrierArriveOp)
def _mbarrier_arrive(ctx, op):
    b = ctx.builder
    bar = _barrier_addr(ctx, op.operands[0], op.operands[1])
    live = ctx.get(op.operands[2])
    if op.every > 1:
        first = b.icmp_unsigned("==", b.and_(ctx.tid, ir.Constant(I32, op.every - 1)), ir.Constant(I32, 0))
        live = b.and_(live, first)
    with b.if_then(live):
        if op.cluster == 1:
            _asm(ctx, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r", [bar])
            return
        # the same barrier in every program of the cluster (this one's included), through
        # its shared::cluster address; the default release.cta order is enough (the reads it
        # publishes are wgmma's, retired by wgmma.wait_group), and a cluster-scope release
        # would stall the warpgroup on every arrival
        fty = ir.FunctionType(I32, [I32, I32])
        for rank in range(op.cluster):
            remote = b.asm(fty, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", [bar, ir.Constant(I32, rank)], False)
            _asm(ctx, "mbarrier.arrive.shared::cluster.b64 _, [$0];", "r", [remote])


@rule(G.MbarrierWaitOp)
def _mbarrier_wait(ctx, op):
    wait_parity(ctx, _barrier_addr(ctx, op.operands[0], op.operands[1]), ctx.get(op.operands[2]))


def wait_parity(ctx, bar, parity, order: str = "", inline_loop: bool = False) -> None:
    """Spin until the phase of parity `parity` (an i32, 0 or 1) of the mbarrier at shared
    address `bar` has completed. `order`: the wait's qualifiers (e.g. ".acquire.cluster";
    the default is acquire at CTA scope). `inline_loop`: the loop inside one inline PTX
    block (its label made unique by ${:uid}), which ptxas allocates around with fewer
    registers than a loop in the LLVM CFG (the cluster rows at 128 registers spilled)."""
    b = ctx.builder

    def wait(bar_operand, parity_operand):
        return f"mbarrier.try_wait.parity{order}.shared::cta.b64 p, [{bar_operand}], {parity_operand};"
    if inline_loop:
        b.asm(ir.FunctionType(ir.VoidType(), [I32, I32]),
              f"{{ .reg .pred p; WAIT${{:uid}}: {wait('$0', '$1')} @!p bra WAIT${{:uid}}; }}", "r,r",
              [bar, parity], True)
        return
    spin = ctx.func.append_basic_block("mbar_wait")
    done = ctx.func.append_basic_block("mbar_done")
    b.branch(spin)
    b.position_at_end(spin)
    fty = ir.FunctionType(I32, [I32, I32])
    ready = b.asm(fty, f"{{ .reg .pred p; {wait('$1', '$2')} selp.u32 $0, 1, 0, p; }}", "=r,r,r", [bar, parity], True)
    b.cbranch(b.icmp_unsigned("!=", ready, ir.Constant(I32, 0)), done, spin)
    b.position_at_end(done)


def _i32(ctx, v):
    x = ctx.get(v)
    return ctx.builder.trunc(x, I32) if x.type.width > 32 else x


def _tile_starts(ctx, index_vs, extents):
    """(the innermost coordinate, the outer ones innermost first) of the tile at tile indices
    `index_vs`, `extents` elements per index step in each dimension (a map's coordinates)."""
    b = ctx.builder
    starts = [b.mul(_i32(ctx, v), ir.Constant(I32, n)) for v, n in zip(index_vs, extents)]
    return starts[-1], starts[-2::-1]


def _tma_load_text(rank: int, multicast: bool) -> str:
    """cp.async.bulk.tensor of a `rank`-D box: $0 destination, $1 map, the coordinates
    (innermost first), then the mbarrier (and the 16-bit mask of programs)."""
    coords = ", ".join(f"${k + 2}" for k in range(rank))
    bar = rank + 2
    tail = f".multicast::cluster [$0], [$1, {{{coords}}}], [${bar}], ${bar + 1};" if multicast \
        else f" [$0], [$1, {{{coords}}}], [${bar}];"
    return f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" + tail


@rule(G.TmaLoadOp)
def _tma_load(ctx, op):
    buf_v, slot_v, bar_v, view_v = op.operands[:4]
    index_vs, live_v = op.group("indices"), op.operands[-1]
    buf = buf_v.owner
    tile_rows, tile_cols = buf.attrs["shape"][1:]
    box = tuple(op.attrs["box"])
    tmap = ctx.memo["tmap"][(view_v.index, box)]
    b = ctx.builder
    vt = view_v.type
    trans = G.tile_transposed(op)
    rows, cols = G.storage_tile((tile_rows, tile_cols), vt, trans)
    step = op.attrs.get("offsets")   # indices that are offsets: the coordinates as they are
    if vt.rank == 2:
        col0, outer = _tile_starts(ctx, index_vs, (1, 1) if step else (tile_rows, tile_cols))
        if trans:
            # the map's rows are the view's columns (asked of the view: a square tile's storage
            # shape is its own, and comparing shapes left the coordinates unswapped)
            col0, outer = outer[0], [col0]
    else:
        # storage order: the tile is `box` in every dimension but the last, `cols` there
        col0, outer = _tile_starts(ctx, index_vs, [1] * vt.rank if step else list(box[:-1]) + [cols])
    bar = _barrier_addr(ctx, bar_v, slot_v)
    dst0 = _smem_addr(ctx, buf, slot_v)
    n = op.multicast
    text = _tma_load_text(vt.rank, n > 1)
    cons = "r,l," + "r," * vt.rank + "r" + (",h" if n > 1 else "")
    if n > 1:  # every program of the cluster receives the box, at the same offset and barrier
        mask = ir.Constant(ir.IntType(16), (1 << n) - 1)
        rank = ctx.special_reg("cluster.ctarank")
    with _thread0(ctx, ctx.get(live_v)):
        tmap_addr = b.ptrtoint(tmap, ir.IntType(64))
        for blk in range(cols // box[-1]):
            # column block `blk` of the 128-byte-swizzled buffer: rows x 128 bytes, one box
            dst = b.add(dst0, ir.Constant(I32, blk * rows * TMA_BOX_BYTES))
            col = b.add(col0, ir.Constant(I32, blk * box[-1]))
            args = [dst, tmap_addr, col, *outer, bar]
            if n == 1:
                _asm(ctx, text, cons, args)
                continue
            with b.if_then(b.icmp_unsigned("==", rank, ir.Constant(I32, blk % n))):  # this program's share
                _asm(ctx, text, cons, args + [mask])


def _tma_store_text(rank: int, reduce=None) -> str:
    """cp.async.bulk.tensor out of shared memory, a `rank`-D box: $0 map, the coordinates
    (innermost first), then the source; with `reduce` ("add") cp.reduce.async.bulk.tensor,
    which combines the box with what memory holds (the tensor map's element type)."""
    coords = ", ".join(f"${k + 1}" for k in range(rank))
    if reduce is not None:
        return (f"cp.reduce.async.bulk.tensor.{rank}d.global.shared::cta.{reduce}.tile.bulk_group "
                f"[$0, {{{coords}}}], [${rank + 1}];")
    return f"cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group [$0, {{{coords}}}], [${rank + 1}];"


@rule(G.TmaStoreOp)
def _tma_store(ctx, op):
    view_v, tile_v = op.operands[0], op.operands[-1]
    index_vs = op.group("indices")
    t = tile_v.type
    rows, cols = t.shape
    box = tuple(op.attrs["box"])
    if "_smem_offset" not in op.attrs:
        raise ValueError("a TMA store needs the scratch buffer allocate_shared places")
    off = op.attrs["_smem_offset"]
    layout = SharedLayout.for_swizzle(TMA_BOX_BYTES, t.dtype.itemsize)  # column blocks, as the boxes read them
    b = ctx.builder
    tmap = ctx.memo["tmap"][(view_v.index, box)]
    # the tile's extent per dimension: the box's ([rows, ...] at rank 2) but in the last
    col0, outer = _tile_starts(ctx, index_vs, list(box[:-1]) + [cols])
    text = _tma_store_text(len(box), op.attrs.get("reduce"))
    cons = "l," + "r," * len(box) + "r"
    vals = ctx.elems(tile_v)
    per = op.group_blocks
    deferred = op.attrs.get("deferred_read")
    for first in range(0, cols // box[-1], per):   # rounds of `per` column blocks through the scratch
        if deferred:   # the last round's copies (this iteration's or the one before) have read the scratch
            _await_reads(ctx)
        elif first or op.attrs.get("_smem_sync", True):
            barrier(ctx)  # the scratch reuses bytes (the ring's, the last round's) others may still read
        columns = None if per * box[-1] == cols else (first * box[-1], per * box[-1])
        store_tile(ctx, t, vals, layout, off, columns)
        # this thread's st.shared become visible to the bulk copy (async proxy) before the barrier
        ctx.intrinsic("llvm.nvvm.fence.proxy.async.shared_cta", ir.VoidType(), [])
        barrier(ctx)
        with _thread0(ctx):
            src0 = b.ptrtoint(b.gep(ctx.shared_base(), [ir.Constant(I32, 0), ir.Constant(I32, off)], inbounds=True),
                              I32)
            tmap_addr = b.ptrtoint(tmap, ir.IntType(64))
            for blk in range(per):
                src = b.add(src0, ir.Constant(I32, blk * rows * TMA_BOX_BYTES))
                col = b.add(col0, ir.Constant(I32, (first + blk) * box[-1]))
                _asm(ctx, text, cons, [tmap_addr, col, *outer, src])
            _asm(ctx, "cp.async.bulk.commit_group;", "", [])
            # the scratch may be reused (or the program exit) only once the copies have read it
            # (deferred: before the next round's writes, and after the loop: gpu.bulk_read_wait)
            if not deferred:
                _asm(ctx, "cp.async.bulk.wait_group.read 0;", "", [])


@rule(G.BulkReadWaitOp)
def _bulk_read_wait(ctx, op):
    _await_reads(ctx)


def _await_reads(ctx):
    """Thread 0 waits until its bulk copies have read their shared sources, then a barrier:
    every thread may write those bytes again."""
    with _thread0(ctx):
        _asm(ctx, "cp.async.bulk.wait_group.read 0;", "", [])
    barrier(ctx)
