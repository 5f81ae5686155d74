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


def _round_counter(ctx) -> ir.Value:
    """An i32 variable of this op, 0 at kernel entry (an alloca in the prologue: registers)."""
    b = ctx.builder
    here = b.block
    b.position_before(ctx._prologue_br)
    var = b.alloca(I32)
    b.store(ir.Constant(I32, 0), var)
    b.position_at_end(here)
    return var


@rule(T.ClusterGatherOp)
def _cluster_gather(ctx, op):
    """Thread 0 of each program writes its value into slot `rank` of every program's buffer
    (mapa + st.shared::cluster), the cluster barrier orders those writes (arrive: release,
    wait: acquire), then every thread reads the values it holds from its own buffer. The
    buffer has two rounds used in turn: a program writes round k + 2 only after the barrier
    of k + 1, which no program passes before it has read round k."""
    size = op.attrs["size"]
    cluster = int(getattr(ctx.options, "cluster", 1) or 1)
    if size != cluster:
        raise ValueError(f"tc.cluster_gather(..., {size}) in a kernel compiled with cluster={cluster}: "
                         "the size must be the `cluster` option")
    t = op.result.type
    n = len(ctx.coords(t))
    x = ctx.get(op.operands[0])
    if size == 1:
        _cluster_barrier(ctx)
        ctx.set(op.result, [x] * n)
        return
    b = ctx.builder
    counter = _round_counter(ctx)
    k = b.load(counter)
    base = b.ptrtoint(b.gep(ctx.shared_base(), [ir.Constant(I32, 0), ir.Constant(I32, op.attrs["_smem_offset"])],
                            inbounds=True), I32)
    slot = b.add(base, b.mul(k, ir.Constant(I32, 4 * size)))
    mine = b.add(slot, b.mul(ctx.special_reg("cluster.ctarank"), ir.Constant(I32, 4)))
    bits = b.bitcast(x, I32) if x.type != I32 else x
    with b.if_then(b.icmp_unsigned("==", ctx.tid, ir.Constant(I32, ctx.leader_tid))):
        mapa = ir.FunctionType(I32, [I32, I32])
        store = ir.FunctionType(ir.VoidType(), [I32, I32])
        for r in range(size):
            remote = b.asm(mapa, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", [mine, ir.Constant(I32, r)], False)
            b.asm(store, "st.shared::cluster.b32 [$0], $1;", "r,r", [remote, bits], True)
    _cluster_barrier(ctx)
    vals = []
    for c in ctx.coords(t):
        addr = b.add(slot, b.mul(c[0], ir.Constant(I32, 4)))
        v = b.load(b.inttoptr(addr, I32.as_pointer(addrspace=3)))
        vals.append(b.bitcast(v, x.type) if x.type != I32 else v)
    b.store(b.xor(k, ir.Constant(I32, 1)), counter)
    ctx.set(op.result, vals)
