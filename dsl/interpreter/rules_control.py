"""Rules of structured control flow and the debugging ops.

- tile.for runs like Python's `range(lb, ub, step)` (a negative step counts
  down; a zero step is an error); the carried values enter the body's block
  arguments and tile.yield gives the next ones.
- tile.while runs its `before` region, stops when tile.condition's flag is
  false (the forwarded values become the results), else runs `after`.
- tile.print writes what the GPU's vprintf writes, to stdout: with tile
  operands one line per element, in row-major order,
  `pid (x, y, z) idx (i, j) <fmt> v1 v2 ...` (a scalar operand repeats on every
  line); with scalars only, one line `pid (x, y, z) <fmt> v1 ...`. Floats print
  as C's %f, integers and i1 in decimal.
- tile.assert fails when any element of its condition is false, raising
  InterpreterError("device_assert failed in program (x, y, z) at file:line: msg").
"""
from __future__ import annotations

import numpy as np

from ..errors import InterpreterError
from ..ir import tile_ops as T
from ..ir.types import TileType
from .engine import PID, OpFault, run_body, rule
from .rules_elementwise import dtype_of


def _move(r, src, dst):
    vals = [r[s] for s in src]
    for s, v in zip(dst, vals):
        r[s] = v


@rule(T.ForOp)
def _for(op, cx):
    ins = cx.ins(op)
    lb, ub, st, inits = ins[0], ins[1], ins[2], ins[3:]
    res = [cx.slot(v) for v in op.results]
    body = cx.body(op.regions[0])
    iv, carried = body.args[0], body.args[1:]
    iv_type = op.operands[0].type.dtype.np.type

    def step(r):
        stride = int(r[st])
        if stride == 0:
            raise OpFault("loop step is zero")
        _move(r, inits, carried)
        for i in range(int(r[lb]), int(r[ub]), stride):
            r[iv] = iv_type(i)
            run_body(body, r)
            _move(r, body.term, carried)
        _move(r, carried, res)
    return step


@rule(T.WhileOp)
def _while(op, cx):
    inits = cx.ins(op)
    res = [cx.slot(v) for v in op.results]
    before, after = cx.body(op.regions[0]), cx.body(op.regions[1])
    cond, forwarded = before.term[0], before.term[1:]

    def step(r):
        _move(r, inits, before.args)
        while True:
            run_body(before, r)
            if not r[cond]:
                break
            _move(r, forwarded, after.args)
            run_body(after, r)
            _move(r, after.term, before.args)
        _move(r, forwarded, res)
    return step


@rule(T.IfOp)
def _if(op, cx):
    (c,) = cx.ins(op)
    res = [cx.slot(v) for v in op.results]
    then, other = cx.body(op.regions[0]), cx.body(op.regions[1])

    def step(r):
        branch = then if r[c] else other
        run_body(branch, r)
        _move(r, branch.term, res)
    return step


def _pid_text(r) -> str:
    x, y, z = (int(p) for p in r[PID])
    return f"({x}, {y}, {z})"


def format_element(v, d) -> str:
    """One element as the GPU's printf directive for its type writes it."""
    return f"{float(v):f}" if d.is_float else str(int(v))


@rule(T.PrintOp)
def _print(op, cx):
    vals, fmt = cx.ins(op), op.attrs["fmt"]
    dtypes = [dtype_of(v) for v in op.operands]
    tiles = [i for i, v in enumerate(op.operands) if isinstance(v.type, TileType)]
    shape = op.operands[tiles[0]].type.shape if tiles else None

    def step(r):
        head = f"pid {_pid_text(r)}"
        if shape is None:
            print(head + " " + fmt + "".join(" " + format_element(r[v], d) for v, d in zip(vals, dtypes)))
            return
        flat = [np.ravel(r[v]) for v in vals]
        for k, idx in enumerate(np.ndindex(*shape)):
            items = "".join(" " + format_element(f[k % f.size], d) for f, d in zip(flat, dtypes))
            print(f"{head} idx ({', '.join(str(i) for i in idx)}) {fmt}{items}")
    return step


@rule(T.AssertOp)
def _assert(op, cx):
    (c,), msg, loc = cx.ins(op), op.attrs["msg"], op.loc

    def step(r):
        if not np.all(r[c]):
            raise InterpreterError(f"device_assert failed in program {_pid_text(r)} "
                                   f"at {loc.file}:{loc.line}: {msg}")
    return step
