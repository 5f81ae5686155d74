"""Codegen rules of thread-block clusters (sm_90+, the `cluster` option): rank, barrier, gather.

The kernel declares its cluster shape (`.reqnctapercluster N, 1, 1`, walker._annotate), so
an ordinary launch runs it in clusters of N programs along grid axis 0. The cluster
barrier is the non-aligned form: threads may reach it from divergent paths (the
producer and the consumers of a warp-specialized kernel).
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from .types import I32
from .walker import rule


@rule(T.ClusterRankOp)
def _cluster_rank(ctx, op):
    ctx.set(op.result, ctx.special_reg("cluster.ctarank"))


@rule(T.ClusterSyncOp)
def _cluster_sync(ctx, op):
    """barrier.cluster.arrive (release) + wait (acquire): every thread of every program."""
    ctx.intrinsic("llvm.nvvm.barrier.cluster.arrive", ir.VoidType(), [])
    ctx.intrinsic("llvm.nvvm.barrier.cluster.wait", ir.VoidType(), [])


def _cluster_barrier(ctx) -> None:
    ctx.intrinsic("llvm.nvvm.barrier.cluster.arrive", ir.VoidType(), [])
    ctx.intrinsic("llvm.nvvm.barrier.cluster.wait", ir.VoidType(), [])


@rule(T.ClusterGatherOp)
def _cluster_gather(ctx, op):
    """Thread 0 of each program writes its values into slot `rank` of every program's buffer
    (mapa + st.shared::cluster; value i in row i of the round), the cluster barrier orders
    those writes (arrive: release, wait: acquire), then every thread reads the values it
    holds from its own buffer. The buffer has two rounds used in turn: a program writes
    round k + 2 only after the barrier of k + 1, which no program passes before it has read
    round k."""
    size = op.attrs["size"]
    cluster = int(getattr(ctx.options, "cluster", 1) or 1)
    if size != cluster:
        raise ValueError(f"tc.cluster_gather(..., {size}) in a kernel compiled with cluster={cluster}: "
                         "the size must be the `cluster` option")
    xs = [ctx.get(v) for v in op.operands]
    if size == 1:
        _cluster_barrier(ctx)
        for r, x in zip(op.results, xs):
            ctx.set(r, [x] * len(ctx.coords(r.type)))
        return
    b = ctx.builder
    counter = ctx.kernel_variable(I32, ir.Constant(I32, 0))   # the round, 0 or 1
    k = b.load(counter)
    row = 4 * size
    base = b.ptrtoint(b.gep(ctx.shared_base(), [ir.Constant(I32, 0), ir.Constant(I32, op.attrs["_smem_offset"])],
                            inbounds=True), I32)
    round_ = b.add(base, b.mul(k, ir.Constant(I32, row * len(xs))))
    mine = b.add(round_, b.mul(ctx.special_reg("cluster.ctarank"), ir.Constant(I32, 4)))
    with b.if_then(b.icmp_unsigned("==", ctx.tid, ir.Constant(I32, ctx.leader_tid))):
        mapa = ir.FunctionType(I32, [I32, I32])
        store = ir.FunctionType(ir.VoidType(), [I32, I32])
        for r in range(size):
            remote = b.asm(mapa, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", [mine, ir.Constant(I32, r)], False)
            for i, x in enumerate(xs):
                bits = b.bitcast(x, I32) if x.type != I32 else x
                b.asm(store, f"st.shared::cluster.b32 [$0+{i * row}], $1;", "r,r", [remote, bits], True)
    _cluster_barrier(ctx)
    for i, (res, x) in enumerate(zip(op.results, xs)):
        vals = []
        for c in ctx.coords(res.type):
            addr = b.add(round_, b.add(b.mul(c[0], ir.Constant(I32, 4)), ir.Constant(I32, i * row)))
            v = b.load(b.inttoptr(addr, I32.as_pointer(addrspace=3)))
            vals.append(b.bitcast(v, x.type) if x.type != I32 else v)
        ctx.set(res, vals)
    b.store(b.xor(k, ir.Constant(I32, 1)), counter)
