"""Codegen rules of thread-block clusters (sm_90+, the `cluster` option): rank, barrier, gather.

The kernel declares its cluster shape (`.reqnctapercluster N, 1, 1`, walker._annotate), so
an ordinary launch runs it in clusters of N programs along grid axis 0. The cluster
barrier is the non-aligned form: threads may reach it from divergent paths (the
producer and the consumers of a warp-specialized kernel).
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from ..passes.shared_alloc import GATHER_SLOTS
from .rules_tma import wait_parity
from .types import I32
from .walker import rule

# The PTX ISA st.async needs (cluster_gather of more than one program).
GATHER_PTX = 81


@rule(T.ClusterRankOp)
def _cluster_rank(ctx, op):
    ctx.set(op.result, ctx.special_reg("cluster.ctarank"))


@rule(T.ClusterSyncOp)
def _cluster_sync(ctx, op):
    """barrier.cluster.arrive (release) + wait (acquire): every thread of every program."""
    ctx.intrinsic("llvm.nvvm.barrier.cluster.arrive", ir.VoidType(), [])
    ctx.intrinsic("llvm.nvvm.barrier.cluster.wait", ir.VoidType(), [])


@rule(T.ClusterGatherOp)
def _cluster_gather(ctx, op):
    """Thread 0 of each program stores its values into slot `rank` of every program's buffer
    with st.async (value i in row i of the round), each store counted on the receiver's `full`
    mbarrier of that round (complete_tx); every thread waits for its own `full` phase, reads
    the values it holds and arrives on the round's `empty` mbarrier. No cluster barrier and
    no fence: a release at cluster scope (barrier.cluster.arrive, fence.acq_rel.cluster) is a
    MEMBAR.GPU, which waits for every global store still in flight (H200, softmax
    1024x262144 bf16 on persistent clusters: 80% of copy with it, 92% with this exchange).

    Buffer layout (shared_alloc.gather_bytes): `full` and `empty` mbarriers for each of the
    GATHER_SLOTS rounds, then the rounds' values; gather u uses round u % 2, phase u // 2.
    Gather u + 2 reuses round u's buffers: a program stores it into another's only after
    receiving that program's gather u + 1, which the other's thread 0 sends only once the
    previous round's `empty` phase completed (all its threads have read gather u)."""
    size = op.attrs["size"]
    cluster = ctx.cluster
    if size != cluster:
        raise ValueError(f"tc.cluster_gather(..., {size}) in a kernel compiled with cluster={cluster}: "
                         "the size must be the `cluster` option")
    xs = [ctx.get(v) for v in op.operands]
    if size == 1:   # a program alone: its own values, nothing to wait for
        for r, x in zip(op.results, xs):
            ctx.set(r, [x] * len(ctx.coords(r.type)))
        return
    b = ctx.builder
    row = 4 * op.entries    # (a row's slots past `size` receive nothing: their entries read `padding`)
    base = _round_barriers(ctx, op.attrs["_smem_offset"])
    uses = ctx.kernel_variable(I32, ir.Constant(I32, 0))   # gathers done so far
    u = b.load(uses)
    k = b.and_(u, ir.Constant(I32, 1))
    full = b.add(base, b.mul(k, ir.Constant(I32, 8)))
    empty = b.add(full, ir.Constant(I32, 8 * GATHER_SLOTS))
    values = b.add(b.add(base, ir.Constant(I32, 16 * GATHER_SLOTS)), b.mul(k, ir.Constant(I32, row * len(xs))))
    mine = b.add(values, b.mul(ctx.special_reg("cluster.ctarank"), ir.Constant(I32, 4)))
    with b.if_then(b.icmp_unsigned("==", ctx.tid, ir.Constant(I32, ctx.leader_tid))):
        # the previous round read by every thread here (gather -1: a fresh barrier's "previous
        # phase", parity 1, which counts as complete)
        prev = b.sub(u, ir.Constant(I32, 1))
        # the other round's `empty` (the buffer is 16-aligned: bit 3 of the address is k)
        prev_empty = b.xor(empty, ir.Constant(I32, 8))
        prev_parity = b.and_(b.ashr(prev, ir.Constant(I32, 1)), ir.Constant(I32, 1))
        wait_parity(ctx, prev_empty, prev_parity, inline_loop=True)
        void2, void3 = ir.FunctionType(ir.VoidType(), [I32, I32]), ir.FunctionType(ir.VoidType(), [I32, I32, I32])
        b.asm(void2, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
              [full, ir.Constant(I32, size * len(xs) * 4)], True)
        mapa = ir.FunctionType(I32, [I32, I32])
        for r in range(size):
            rank = ir.Constant(I32, r)
            remote = b.asm(mapa, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", [mine, rank], False)
            remote_bar = b.asm(mapa, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", [full, rank], False)
            for i, x in enumerate(xs):
                bits = b.bitcast(x, I32) if x.type != I32 else x
                b.asm(void3, f"st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0+{i * row}], $1, [$2];",
                      "r,r,r", [remote, bits, remote_bar], True)
    wait_parity(ctx, full, b.and_(b.lshr(u, ir.Constant(I32, 1)), ir.Constant(I32, 1)), ".acquire.cluster",
                inline_loop=True)
    padding = op.attrs.get("padding")
    for i, (res, x) in enumerate(zip(op.results, xs)):
        vals = []
        for c in ctx.coords(res.type):
            addr = b.add(values, b.add(b.mul(c[0], ir.Constant(I32, 4)), ir.Constant(I32, i * row)))
            v = b.load(b.inttoptr(addr, I32.as_pointer(addrspace=3)))
            v = b.bitcast(v, x.type) if x.type != I32 else v
            if op.entries != size:
                inside = b.icmp_unsigned("<", c[0], ir.Constant(I32, size))
                v = b.select(inside, v, ir.Constant(x.type, padding[i]))
            vals.append(v)
        ctx.set(res, vals)
    b.asm(ir.FunctionType(ir.VoidType(), [I32]), "mbarrier.arrive.shared::cta.b64 _, [$0];", "r", [empty], True)
    b.store(b.add(u, ir.Constant(I32, 1)), uses)


def _round_barriers(ctx, offset: int) -> ir.Value:
    """The shared address of a gather's buffer (at byte `offset`). In the prologue, thread 0
    initializes its round barriers (`full`: one arrival, its own expect_tx; `empty`: one per
    thread), then one cluster barrier (a relaxed arrive after thread 0's fence), shared by
    every gather of the kernel, makes them visible to the cluster before any program stores
    into another's. (Waiting for it at the first gather instead, so that no load waits for
    the cluster's programs to start, made the kernels at 128 registers spill.)"""
    memo = ctx.memo.setdefault("cluster_gather", {})
    with ctx.in_prologue(memo.get("sync")) as b:
        base = b.ptrtoint(b.gep(ctx.shared_base(), [ir.Constant(I32, 0), ir.Constant(I32, offset)], inbounds=True),
                          I32)
        counts = [1] * GATHER_SLOTS + [32 * ctx.num_warps] * GATHER_SLOTS
        inits = " ".join(f"@p mbarrier.init.shared::cta.b64 [$1+{8 * r}], {n};" for r, n in enumerate(counts))
        init = b.asm(ir.FunctionType(ir.VoidType(), [I32, I32]),
                     f"{{ .reg .pred p; setp.eq.u32 p, $0, {ctx.leader_tid}; {inits} "
                     "@p fence.mbarrier_init.release.cluster; }", "r,r", [ctx.tid, base], True)
        if "sync" not in memo:
            memo["sync"] = init
            ctx.intrinsic("llvm.nvvm.barrier.cluster.arrive.relaxed", ir.VoidType(), [])
            ctx.intrinsic("llvm.nvvm.barrier.cluster.wait", ir.VoidType(), [])
    return base

