"""Records the kernels the stdlib entry points launch, for tests that assert which path a shape
takes while they check its numbers, and plan the grids of shapes too large to run. Ops with a
`plan` (the row ops) are observed through it: what their entry point planned, launch by launch;
the others through their module's `launch`. Tests of a path alone call the ops' `plan`
directly (test_row_plans.py)."""
import math

import numpy as np

import tilec.options
from tilec.stdlib_kernels._common import as_array


def spy_launches(monkeypatch, modules, record):
    """Wraps `plan` (else `launch`) in each of `modules`; returns the list that gets
    `record(kernel, cluster, constexprs)` of every launch, in order (constexprs with the
    launch's compile options under "options" where it has any)."""
    seen = []
    for mod in modules:
        if hasattr(mod, "plan"):
            def planned(*args, _real=mod.plan, **kwargs):
                launches = _real(*args, **kwargs)
                for ln in launches:
                    seen.append(record(ln.kernel, ln.cluster, launch_constexprs(ln)))
                return launches
            monkeypatch.setattr(mod, "plan", planned)
            continue

        def spy(kernel, grid, args, num_warps=4, fast_math=True, cluster=1, _real=mod.launch, **constexprs):
            seen.append(record(kernel, cluster, constexprs))
            return _real(kernel, grid, args, num_warps, fast_math, cluster, **constexprs)
        monkeypatch.setattr(mod, "launch", spy)
    return seen


def launch_constexprs(ln) -> dict:
    """A plan's Launch as the launch spy records it: its constexprs, its options under "options"."""
    c = dict(ln.constexprs)
    if ln.options:
        c["options"] = dict(ln.options)
    return c


def plan_grids(monkeypatch, modules, allocating=()):
    """Replaces `plan` (else `launch`) in each of `modules` by a recorder of (kernel name, grid,
    constexprs) that runs nothing, and `empty_like` in each of `allocating` by `huge` arrays:
    the grids an entry point plans for shapes too large to allocate. Returns the list of records."""
    seen = []

    def record(kernel, grid, args, num_warps=4, fast_math=True, cluster=1, **constexprs):
        seen.append((kernel.name, tuple(grid), constexprs))

    for mod in modules:
        if hasattr(mod, "plan"):   # what the entry point planned, none of it executed
            def planned(*args, _real=mod.plan, **kwargs):
                seen.extend((ln.name, ln.grid, launch_constexprs(ln)) for ln in _real(*args, **kwargs))
                return []
            monkeypatch.setattr(mod, "plan", planned)
            continue
        monkeypatch.setattr(mod, "launch", record)
    for mod in allocating:
        monkeypatch.setattr(mod, "empty_like", lambda a, shape, dtype: as_array(huge(shape, dtype.np), "out"))
    return seen


def huge(shape, dtype, strides=None):
    """A numpy array of `shape` (contiguous unless `strides` are given, in elements) over one
    element of memory: for planning only, never to be read or written."""
    dtype = np.dtype(dtype)
    if strides is None:
        strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), tuple(shape), tuple(s * dtype.itemsize for s in strides))


def limit_grid_axis1(monkeypatch, most: int) -> None:
    """Grid axis 1 holds at most `most` programs, for the interpreter and for
    `reductions.slab_grid`: small shapes take the layout of strips past 65535."""
    limits = (tilec.options.GRID_LIMITS[0], most, tilec.options.GRID_LIMITS[2])
    monkeypatch.setattr(tilec.options, "GRID_LIMITS", limits)


def retune(monkeypatch, op: str, **fields) -> None:
    """Every family's tuning table (stdlib_kernels/tuning.py) with `op`'s ("softmax", "norm",
    "cross_entropy", "cluster") `fields` changed, for this test."""
    from dataclasses import replace  # noqa: PLC0415
    from tilec.stdlib_kernels import tuning  # noqa: PLC0415
    for family, table in list(tuning.TABLES.items()):
        monkeypatch.setitem(tuning.TABLES, family, replace(table, **{op: replace(getattr(table, op), **fields)}))
