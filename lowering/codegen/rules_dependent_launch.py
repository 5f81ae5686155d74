"""Codegen rules of programmatic dependent launch (sm_90+): tc.grid_dependency_wait and
tc.launch_dependents.

A kernel launched with the programmatic-serialization attribute (the `dependent_launch`
option) may start while the kernel before it in the stream still runs; `griddepcontrol.wait`
holds it until that kernel has finished and its writes are visible. The instructions are
harmless in a kernel launched plainly (the wait returns at once), so they are emitted
whatever the option; before sm_90 they do not exist and the ops emit nothing.
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from .walker import rule


def _griddepcontrol(ctx, what: str) -> None:
    if ctx.target.has_dependent_launch:
        # the memory clobber keeps every load and store on its side of the instruction
        ctx.inline_asm(ir.VoidType(), f"griddepcontrol.{what};", "~{memory}", [])


@rule(T.GridDependencyWaitOp)
def _grid_dependency_wait(ctx, op):
    _griddepcontrol(ctx, "wait")


@rule(T.LaunchDependentsOp)
def _launch_dependents(ctx, op):
    _griddepcontrol(ctx, "launch_dependents")
