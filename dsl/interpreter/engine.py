"""The interpreter's engine: compiles a tile.func into Python closures once, then runs them
for every program of the grid.

Every SSA value gets a register number; a program's state is one Python list
`regs`. Register 0 holds the program id (a 3-tuple of numpy i32), register 1
the grid, register 2 the run's `Memory` (the argument buffers), register 3 the
program's `cluster.ClusterMember` (None without clusters). Constants are computed at
compile time and sit in their registers from the start. The registers are
reused from program to program: SSA guarantees each is written before it is read.

A rule turns one op into a closure `step(regs)` (or None when it needs no
run-time work); rules live in the table `RULES`, keyed by op class, filled by
the `rules_*` modules. Rules never modify their operands in place, so values
(constants, broadcast views) may be shared.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import numpy as np

from ..errors import InterpreterError
from ..ir.core import Block, Module, Op, Region, Value
from ..ir.verifier import verify

RULES: Dict[type, Callable] = {}

PID, GRID, MEM, CLUSTER = 0, 1, 2, 3
FIRST_VALUE = 4


def rule(*op_classes):
    """Register a rule `fn(op, cx) -> step | None` for the given op classes."""
    def deco(fn):
        for c in op_classes:
            if c in RULES:
                raise ValueError(f"two interpreter rules for {c.name}")
            RULES[c] = fn
        return fn
    return deco


class OpFault(Exception):
    """A defined run-time failure of one op (out-of-bounds access, zero loop step, ...)."""


class EarlyReturn(Exception):
    """tile.return inside a nested region: ends the program."""


class Body:
    """A compiled block: its argument registers, its steps, and the registers its terminator
    hands on (yield / condition operands)."""

    __slots__ = ("args", "steps", "ops", "term", "term_op")

    def __init__(self, args, steps, ops, term, term_op):
        self.args: List[int] = args
        self.steps: List[Callable] = steps
        self.ops: List[Op] = ops
        self.term: List[int] = term
        self.term_op: Optional[Op] = term_op


def run_body(body: Body, regs: list) -> None:
    i = 0
    try:
        for i, step in enumerate(body.steps):
            step(regs)
    except (InterpreterError, EarlyReturn):
        raise
    except Exception as e:
        raise fault(body.ops[i], regs, e) from None


def fault(op: Op, regs: list, err: Exception) -> InterpreterError:
    pid = tuple(int(p) for p in regs[PID])
    where = f" at {op.loc.file}:{op.loc.line}" if op.loc.known else ""
    msg = str(err) if isinstance(err, OpFault) else f"{type(err).__name__}: {err}"
    return InterpreterError(f"in program {pid}, '{op.name}'{where}: {msg}")


class Compiler:
    """Hands out registers and compiles blocks; the `cx` argument of every rule."""

    def __init__(self):
        self.slots: Dict[int, int] = {}
        self.presets: Dict[int, object] = {}

    def slot(self, v: Value) -> int:
        s = self.slots.get(id(v))
        if s is None:
            s = self.slots[id(v)] = len(self.slots) + FIRST_VALUE
        return s

    def out(self, op: Op, i: int = 0) -> int:
        return self.slot(op.results[i])

    def ins(self, op: Op) -> List[int]:
        return [self.slot(v) for v in op.operands]

    def preset(self, v: Value, value) -> None:
        """Give `v` a value known at compile time."""
        self.presets[self.slot(v)] = value

    def body(self, region: Region) -> Body:
        return self.block(region.block)

    def block(self, block: Block) -> Body:
        args = [self.slot(a) for a in block.args]
        steps, ops = [], []
        term, term_op = [], None
        for op in block.ops:
            if op.has_trait("terminator"):
                term_op = op
                term = self.ins(op)
                if op.name == "tile.return" and block.parent.parent.name != "tile.func":
                    steps.append(_raise_return)
                    ops.append(op)
                continue
            fn = RULES.get(type(op))
            if fn is None:
                raise InterpreterError(f"the interpreter cannot run '{op.name}'"
                                       + (f" at {op.loc}" if op.loc.known else ""))
            step = fn(op, self)
            if step is not None:
                steps.append(step)
                ops.append(op)
        return Body(args, steps, ops, term, term_op)


def _raise_return(regs):
    raise EarlyReturn()


class Program:
    """One compiled tile.func: the entry body, its argument types and the register template."""

    def __init__(self, func: Op):
        self.func = func
        self.cx = Compiler()
        self.entry = self.cx.block(func.regions[0].block)
        self.arg_types = [a.type for a in func.regions[0].block.args]
        self.arg_names = list(func.attrs.get("arg_names", []))
        self.num_regs = len(self.cx.slots) + FIRST_VALUE

    def new_regs(self) -> list:
        regs = [None] * self.num_regs
        for s, v in self.cx.presets.items():
            regs[s] = v
        return regs


_CACHE_ATTR = "_tilec_interpreter_program"


def compiled(module: Module) -> Program:
    """The module's compiled program, built once and kept on the module object."""
    prog = module.__dict__.get(_CACHE_ATTR)
    if prog is None:
        verify(module)
        funcs = [o for o in module.ops if o.name == "tile.func"]
        if len(funcs) != 1:
            raise InterpreterError(f"the interpreter runs a module with one tile.func, found {len(funcs)}")
        with np.errstate(all="ignore"):  # constants such as NaN or inf are folded here
            prog = Program(funcs[0])
        module.__dict__[_CACHE_ATTR] = prog
    return prog
