"""Codegen rules of thread-block clusters (sm_90+, the `cluster` option): rank and barrier.

The kernel declares its cluster shape (`.reqnctapercluster N, 1, 1`, walker._annotate), so
an ordinary launch runs it in clusters of N programs along grid axis 0. The cluster
barrier is the non-aligned form: threads may reach it from divergent paths (the
producer and the consumers of a warp-specialized kernel).
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from .walker import rule


@rule(T.ClusterRankOp)
def _cluster_rank(ctx, op):
    ctx.set(op.result, ctx.special_reg("cluster.ctarank"))


@rule(T.ClusterSyncOp)
def _cluster_sync(ctx, op):
    """barrier.cluster.arrive (release) + wait (acquire): every thread of every program."""
    ctx.intrinsic("llvm.nvvm.barrier.cluster.arrive", ir.VoidType(), [])
    ctx.intrinsic("llvm.nvvm.barrier.cluster.wait", ir.VoidType(), [])
