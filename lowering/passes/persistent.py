"""make_persistent: one program per SM slot, looping over the program ids the launch asked for.

With `persistent=True` the runtime launches a 1-D grid of at most (SMs x resident CTAs per
SM) programs and passes the grid the user asked for, (gx, gy, gz), as three hidden
trailing i32 parameters (dsl/abi.py "grid" slots). This pass makes the kernel walk that
virtual grid: the body moves into

    ^bb0(<user args>, %grid_x: i32, %grid_y: i32, %grid_z: i32):
      %pid = tile.program_id {axis = 0}            (the real program)
      %nprog = tile.num_programs {axis = 0}        (the real, launched grid)
      %total = gx * gy * gz
      tile.for %pid, %total, %nprog ({
        ^bb0(%vpid: i32):                          vpid = x + gx * (y + gy * z)
          <body: program_id(a) -> the coordinate a of vpid, num_programs(a) -> %grid_a>
          tile.yield
      })
      tile.return

Only the coordinates the body reads are computed (two integer divisions at most per
virtual program). The module gets `persistent = true`, which tells codegen that the
last three entry-block arguments are the grid slots, not kernel arguments.

An early exit cannot leave one virtual program without leaving the loop, so a
`tile.return` anywhere but at the end of the kernel is an error naming its line (the
frontend makes returns structural, so only hand-written IR has them).
"""
from __future__ import annotations

from typing import Dict, List

from tilec import dtypes as dt
from tilec.ir import Block, Builder, Module, Region, Value
from tilec.ir import tile_ops as T
from tilec.ir.types import ScalarType

__all__ = ["make_persistent", "GRID_ARG_NAMES", "PERSISTENT_ATTR"]

GRID_ARG_NAMES = ("grid.x", "grid.y", "grid.z")  # not Python identifiers: never a user parameter's name
PERSISTENT_ATTR = "persistent"                   # module attribute: the entry ends in the grid arguments
_I32 = ScalarType(dt.int32)


def make_persistent(module: Module) -> Module:
    """Wrap every kernel's body in a loop over the virtual program ids (the pipeline runs it
    for `persistent=True`); a module already persistent is left as it is."""
    if module.attrs.get(PERSISTENT_ATTR):
        return module
    for func in module.ops:
        if isinstance(func, T.FuncOp):
            _check_returns(func)
            _wrap_body(func)
    module.attrs[PERSISTENT_ATTR] = True
    return module


def _check_returns(func: T.FuncOp) -> None:
    final = func.body.terminator
    for op in func.walk():
        if isinstance(op, T.ReturnOp) and op is not final:
            raise op.error("persistent=True needs the kernel to return only at its end (an early return "
                           "would end every program id this program still has to run); guard the rest of "
                           "the kernel with an if instead")


def _grid_ops(func: T.FuncOp):
    """The body's tile.program_id and tile.num_programs ops, by axis."""
    pids: Dict[int, List[T.ProgramIdOp]] = {}
    nprogs: Dict[int, List[T.NumProgramsOp]] = {}
    for op in func.walk():
        if isinstance(op, T.ProgramIdOp):
            pids.setdefault(op.attrs["axis"], []).append(op)
        elif isinstance(op, T.NumProgramsOp):
            nprogs.setdefault(op.attrs["axis"], []).append(op)
    return pids, nprogs


def _wrap_body(func: T.FuncOp) -> None:
    entry = func.body
    loc = func.loc
    pids, nprogs = _grid_ops(func)  # collected before the loop's own program_id/num_programs exist
    grid = [entry.add_arg(_I32, f"grid_{a}") for a in "xyz"]
    func.attrs["arg_names"] = list(func.attrs["arg_names"]) + list(GRID_ARG_NAMES)
    if "arg_divisibility" in func.attrs:
        func.attrs["arg_divisibility"] = list(func.attrs["arg_divisibility"]) + [1, 1, 1]

    final = entry.terminator
    moved = [op for op in entry.ops if op is not final]
    entry.ops = [final] if final is not None else []
    b = Builder(entry, 0)
    b.loc = loc
    first = b.value(T.ProgramIdOp, axis=0)
    launched = b.value(T.NumProgramsOp, axis=0)
    total = b.value(T.MulOp, b.value(T.MulOp, grid[0], grid[1]), grid[2])

    body = Block([_I32], ["vpid"])
    for op in moved:
        body.append(op)
    loop = T.ForOp.build(first, total, launched, regions=[Region([body])], loc=loc)
    b.insert(loop)
    if final is None:
        b.create(T.ReturnOp)

    inner = Builder(body, 0)
    inner.loc = loc
    coords = _coordinates(inner, body.args[0], grid, needed=set(pids))
    for axis, ops in pids.items():
        _replace(ops, coords[axis])
    for axis, ops in nprogs.items():
        _replace(ops, grid[axis])
    inner.at_end(body).create(T.YieldOp)


def _coordinates(b: Builder, vpid: Value, grid: List[Value], needed) -> Dict[int, Value]:
    """(x, y, z) of vpid = x + gx * (y + gy * z), only the axes in `needed` (and what they need)."""
    out: Dict[int, Value] = {}
    if not needed:
        return out
    rest = b.value(T.FloorDivOp, vpid, grid[0])  # y + gy * z: one division serves x too
    if 0 in needed:
        out[0] = b.value(T.SubOp, vpid, b.value(T.MulOp, rest, grid[0]))
    if 1 in needed or 2 in needed:
        z = b.value(T.FloorDivOp, rest, grid[1])
        if 1 in needed:
            out[1] = b.value(T.SubOp, rest, b.value(T.MulOp, z, grid[1]))
        if 2 in needed:
            out[2] = z
    return out


def _replace(ops, value: Value) -> None:
    for op in ops:
        op.result.replace_all_uses_with(value)
        op.erase()
