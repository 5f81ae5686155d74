"""Launch grids: the one place where what users write as a grid becomes (gx, gy, gz)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

__all__ = ["normalize_grid"]


def normalize_grid(grid, named_args: Optional[Mapping[str, Any]] = None,
                   kernel: Optional[str] = None) -> Tuple[int, int, int]:
    """`grid` as a 3-tuple: an int, 1 to 3 ints, or a callable of the arguments by name
    (`named_args`) returning one. TypeError/ValueError say what is wrong, naming `kernel`."""
    where = f"kernel '{kernel}': " if kernel else ""
    if callable(grid):
        grid = grid(dict(named_args or {}))
    if hasattr(grid, "__index__") and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise TypeError(f"{where}the grid must be an int or a tuple of 1 to 3 ints (or a callable returning "
                        f"one), got {grid!r}")
    out = []
    for g in grid:
        if not hasattr(g, "__index__") or isinstance(g, bool):
            raise TypeError(f"{where}grid extents must be ints, got {g!r}")
        g = int(g.__index__())
        if g < 0:
            raise ValueError(f"{where}grid extents must be >= 0, got {g} in {tuple(grid)!r}")
        out.append(g)
    return tuple(out) + (1,) * (3 - len(out))
