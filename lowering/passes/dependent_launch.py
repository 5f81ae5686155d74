"""wait_for_prior_grid: a kernel compiled with `dependent_launch=True` waits at its start
for the kernel before it, unless it says where to wait.

The runtime launches such a kernel with programmatic stream serialization (sm_90+): it may
start while the kernel ahead of it in the stream still runs. Its reads of that kernel's
results (and its writes) must come after a `tile.grid_dependency_wait`. A kernel that calls
`tc.grid_dependency_wait()` itself placed it after the work that may overlap; one that
calls none gets it here, first in its body:

    tile.func @k(...) {
      tile.grid_dependency_wait          (inserted)
      <body>
    }

Before sm_90 the option changes nothing (no instruction exists; the launch is plain).
"""
from __future__ import annotations

from tilec.ir import Builder, Module
from tilec.ir import tile_ops as T

__all__ = ["wait_for_prior_grid"]


def wait_for_prior_grid(module: Module) -> Module:
    """Insert a grid-dependency wait at the start of every kernel without one (the pipeline
    runs it for `dependent_launch` on targets that have dependent launches)."""
    for func in module.ops:
        if isinstance(func, T.FuncOp) and not any(isinstance(op, T.GridDependencyWaitOp) for op in func.walk()):
            body = func.body
            Builder().before(body.ops[0]).create(T.GridDependencyWaitOp, loc=func.loc)
    return module
