"""The numpy interpreter of tile IR: the reference semantics that the GPU path must match.

    tilec.interpreter.run(module, args, grid)

runs the module's tile.func once per program of `grid` (x fastest, then y,
then z), one program after another (`run(..., cluster=N)`: the N programs of a
thread-block cluster at the same time, see cluster.py), on `args` in entry-block order: numpy
arrays for views (written in place), Python or numpy scalars for scalars.
The op-by-op semantics are documented in the rule modules (rules_*.py) and in
numerics.py (number formats) and memory.py (pointers and memory). NumPy's
floating-point warnings are silenced: wrap-around, inf and NaN are defined
results here.

Arrays for bf16/f8 views hold their values in float32 (rounded to the type on
load; results are rounded before they are stored), or use the ml_dtypes types.
The compiled form of a module is cached on the module object, so a module must
not be changed after it has been run.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from .. import dtypes as dt
from ..errors import InterpreterError
from ..ir.types import ScalarType, ViewType
from ..options import check_cluster_size, check_grid_limits
from . import rules_control, rules_elementwise, rules_memory, rules_tile  # noqa: F401  (fill RULES)
from .cluster import run_clusters
from .engine import GRID, MEM, PID, EarlyReturn, compiled, run_body
from .memory import Memory
from .numerics import cast

__all__ = ["run", "InterpreterError"]


def run(module, args: Sequence, grid, cluster: int = 1) -> None:
    """Execute `module` for every program id of `grid` (a tuple of 1 to 3 non-negative ints
    within CUDA's limits, `tilec.options.GRID_LIMITS`: else a ValueError, as on a GPU).

    `cluster` > 1 runs the programs in thread-block clusters of that many along x
    (cluster.py): grid x must be a multiple of it."""
    prog = compiled(module)
    grid3 = _grid(grid)
    check_grid_limits(grid3, prog.func.attrs["sym_name"])  # as a GPU launch would fail
    cluster = _cluster(cluster, grid3)
    regs = prog.new_regs()
    memory = Memory()
    if len(args) != len(prog.arg_types):
        names = ", ".join(prog.arg_names)
        raise TypeError(f"kernel '{prog.func.attrs['sym_name']}' takes {len(prog.arg_types)} "
                        f"run-time arguments ({names}), got {len(args)}")
    for i, (a, t) in enumerate(zip(args, prog.arg_types)):
        name = prog.arg_names[i] if i < len(prog.arg_names) else f"#{i}"
        regs[prog.entry.args[i]] = _bind(a, t, name, memory)
    regs[MEM] = memory
    regs[GRID] = tuple(np.int32(g) for g in grid3)
    if cluster > 1:
        memory.lock = threading.Lock()
        run_clusters(prog, regs, grid3, cluster)
        return
    gx, gy, gz = grid3
    with np.errstate(all="ignore"):
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    regs[PID] = (np.int32(x), np.int32(y), np.int32(z))
                    try:
                        run_body(prog.entry, regs)
                    except EarlyReturn:
                        pass


def _cluster(cluster, grid3) -> int:
    cluster = check_cluster_size(cluster)
    if grid3[0] % cluster:
        raise ValueError(f"with cluster={cluster} the grid's x extent must be a multiple of {cluster} "
                         f"(programs {cluster} * c .. {cluster} * c + {cluster - 1} form cluster c), got grid {grid3}")
    return cluster


def _grid(grid):
    if isinstance(grid, (int, np.integer)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3 or not all(
            isinstance(g, (int, np.integer)) and not isinstance(g, bool) for g in grid):
        raise TypeError(f"grid must be a tuple of 1 to 3 ints, got {grid!r}")
    if any(g < 0 for g in grid):
        raise ValueError(f"grid extents must be >= 0, got {tuple(grid)}")
    return tuple(int(g) for g in grid) + (1,) * (3 - len(grid))


def _bind(a, t, name: str, memory: Memory):
    if isinstance(t, ViewType):
        return _bind_view(a, t, name, memory)
    if isinstance(t, ScalarType):
        return _bind_scalar(a, t.dtype, name)
    raise TypeError(f"argument '{name}' has IR type {t}, which the interpreter cannot pass")


def _bind_view(a, t: ViewType, name: str, memory: Memory):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"argument '{name}' must be a numpy array of {t.dtype.name}, got {type(a).__name__}")
    if a.ndim != t.rank:
        raise ValueError(f"argument '{name}' must be a rank-{t.rank} array, got shape {a.shape}")
    try:
        got = dt.from_numpy(a.dtype)
    except TypeError:
        got = None
    emulated_ok = a.dtype == np.float32 and t.dtype.np == np.float32
    if got is not t.dtype and not emulated_ok:
        raise TypeError(f"argument '{name}' must hold {t.dtype.name}, got an array of {a.dtype}")
    limit = 2**31 if t.index is dt.int32 else 2**63
    if any(n >= limit for n in a.shape):
        raise ValueError(f"argument '{name}' has shape {a.shape}, too large for {t.index.name} indices")
    view = memory.add_view(a, name, t.dtype, t.index)
    for d, (want, have) in enumerate(zip(t.strides, view.strides)):
        if want is not None and a.shape[d] > 1 and want != have:
            raise ValueError(f"argument '{name}' must have stride {want} in dimension {d} "
                             f"(the kernel was specialized for it), got {have}")
    return view


def _bind_scalar(a, d: dt.DType, name: str):
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    if not isinstance(a, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise TypeError(f"argument '{name}' must be a {d.name} scalar, got {type(a).__name__}")
    if d.is_int:
        if isinstance(a, (float, np.floating)):
            raise TypeError(f"argument '{name}' must be an integer ({d.name}), got {a!r}")
        lo, hi = (-(1 << (d.bits - 1)), 1 << (d.bits - 1)) if d.kind == "i" else (0, 1 << d.bits)
        if not lo <= int(a) < hi:
            raise ValueError(f"argument '{name}' = {int(a)} does not fit in {d.name}")
        return d.np.type(int(a))
    if d.is_bool:
        return np.bool_(bool(a))
    with np.errstate(all="ignore"):
        return cast(np.float64(a), d)
