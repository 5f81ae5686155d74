"""Records the kernels the stdlib entry points plan, for tests that assert which path a shape
takes while they check its numbers, and plan the grids of shapes too large to run. Every op is
observed through its module's plans (`plan` and `plan_*`, which its entry point calls): what the
entry point planned, launch by launch; `launch` is never replaced. Tests of a path alone call the
ops' plans directly (test_row_plans.py, test_op_plans.py)."""
import math

import numpy as np

import tilec.options


def plans_of(mod):
    """The names of `mod`'s plan functions: `plan` and `plan_*`."""
    names = [n for n in vars(mod) if (n == "plan" or n.startswith("plan_")) and callable(getattr(mod, n))]
    if not names:
        raise AttributeError(f"{mod.__name__} has no plan")
    return names


def spy_launches(monkeypatch, modules, record):
    """Wraps the plans (`plans_of`) of each of `modules`; returns the list that gets
    `record(kernel, cluster, constexprs)` of every launch, in order (constexprs with the
    launch's compile options under "options" where it has any)."""
    seen = []
    for mod in modules:
        for name in plans_of(mod):
            def planned(*args, _real=getattr(mod, name), **kwargs):
                launches = _real(*args, **kwargs)
                for ln in launches:
                    seen.append(record(ln.kernel, ln.cluster, launch_constexprs(ln)))
                return launches
            monkeypatch.setattr(mod, name, planned)
    return seen


def launch_constexprs(ln) -> dict:
    """A plan's Launch as the launch spy records it: its constexprs, its options under "options"."""
    c = dict(ln.constexprs)
    if ln.options:
        c["options"] = dict(ln.options)
    return c


def plan_grids(monkeypatch, modules):
    """Replaces the plans (`plans_of`) of each of `modules` by recorders of (kernel name, grid,
    constexprs) that return no launch: the grids an entry point plans for shapes too large to
    run (pass `out`: nothing is allocated). Returns the list of records."""
    seen = []
    for mod in modules:
        for name in plans_of(mod):
            def planned(*args, _real=getattr(mod, name), **kwargs):
                seen.extend((ln.name, ln.grid, launch_constexprs(ln)) for ln in _real(*args, **kwargs))
                return []
            monkeypatch.setattr(mod, name, planned)
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
