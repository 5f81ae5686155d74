"""The generic textual form of the IR, derived from op definitions (no per-op code).

    #loc0 = "f.py":3:7
    module {
      %r = dialect.op %a, %b {attr = value} ({ ^bb0(%x: f32): ... }) : type loc(#loc0)
    }

A module prints each source location once, as an alias above it, so that an op's line
does not repeat the file's path; `print_op` (one op, no module) writes it in place,
`loc("f.py":3:7)`. The parser reads both.
"""
from __future__ import annotations

import json
import math
from typing import Dict

from ..dtypes import DType
from .core import Block, Module, Op, Value
from .types import Type

__all__ = ["print_module", "print_op", "format_attr", "Namer", "LocAliases"]


def format_attr(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if ("." in r or "e" in r) else r + ".0"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (DType, Type)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if hasattr(v, "attr_name"):
        return format_dialect_attr(v)
    raise TypeError(f"cannot print attribute value {v!r}")


def format_dialect_attr(v) -> str:
    body = ", ".join(f"{k} = {format_attr(x)}" for k, x in v.fields().items())
    return f"#{v.attr_name}{{{body}}}"


def format_attrs(attrs: dict) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k} = {format_attr(v)}" for k, v in attrs.items()) + "}"


class Namer:
    """Gives every value a unique printable name, preferring its name hint."""

    def __init__(self):
        self.names: Dict[int, str] = {}
        self.used: set = set()
        self.counter = 0

    def name(self, v: Value) -> str:
        n = self.names.get(id(v))
        if n is None:
            n = self._fresh(v.name_hint)
            self.names[id(v)] = n
        return n

    def _fresh(self, hint) -> str:
        if hint:
            base = "".join(c if (c.isalnum() or c == "_") else "_" for c in hint)
            if base[0].isdigit():
                base = "v" + base
            cand, k = base, 1
            while cand in self.used:
                cand = f"{base}_{k}"
                k += 1
        else:
            while str(self.counter) in self.used:
                self.counter += 1
            cand = str(self.counter)
            self.counter += 1
        self.used.add(cand)
        return "%" + cand


def _loc_text(loc) -> str:
    return f"{json.dumps(loc.file)}:{loc.line}:{loc.col}"


class LocAliases:
    """Numbers the source locations of a module in order of first use: `#loc0`, `#loc1`, ..."""

    def __init__(self):
        self.names: Dict[tuple, str] = {}

    def name(self, loc) -> str:
        key = (loc.file, loc.line, loc.col)
        n = self.names.get(key)
        if n is None:
            n = self.names[key] = f"#loc{len(self.names)}"
        return n

    def header(self) -> list:
        return [f"{n} = {json.dumps(f)}:{line}:{col}" for (f, line, col), n in self.names.items()]


def _print_block(b: Block, namer: Namer, indent: int, label: str, out: list, locs=None) -> None:
    pad = "  " * indent
    args = ", ".join(f"{namer.name(a)}: {a.type}" for a in b.args)
    out.append(f"{pad}^{label}({args}):")
    for o in b.ops:
        _print_op(o, namer, indent + 1, out, locs)


def _print_op(op: Op, namer: Namer, indent: int, out: list, locs: "LocAliases" = None) -> None:
    pad = "  " * indent
    head = ""
    if op.results:
        head = ", ".join(namer.name(r) for r in op.results) + " = "
    text = pad + head + op.name
    if op.operands:
        text += " " + ", ".join(namer.name(v) for v in op.operands)
    text += format_attrs(op.attrs)
    if op.regions:
        out.append(text + " (")
        for ri, r in enumerate(op.regions):
            out.append(pad + "  {")
            for bi, b in enumerate(r.blocks):
                _print_block(b, namer, indent + 2, f"bb{bi}", out, locs)
            out.append(pad + "  }" + ("," if ri + 1 < len(op.regions) else ""))
        text = pad + ")"
    if op.results:
        text += " : " + ", ".join(str(r.type) for r in op.results)
    if op.loc.known:
        text += f" loc({locs.name(op.loc) if locs is not None else _loc_text(op.loc)})"
    out.append(text)


def print_op(op: Op, namer: Namer = None) -> str:
    out: list = []
    _print_op(op, namer or Namer(), 0, out)
    return "\n".join(out)


def print_module(m: Module) -> str:
    namer, locs = Namer(), LocAliases()
    out = ["module" + (" attributes" + format_attrs(m.attrs) if m.attrs else "") + " {"]
    for o in m.ops:
        _print_op(o, namer, 1, out, locs)
    out.append("}")
    return "\n".join(locs.header() + out) + "\n"
