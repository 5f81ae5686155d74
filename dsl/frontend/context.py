"""The frontend's state while lowering one kernel: builder, scopes, source and location."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..errors import CompilationError
from ..ir.core import Builder, Location, Op, VerifyError
from .values import TensorValue

__all__ = ["FunctionSource", "Context", "LoopInfo", "Undefined"]


@dataclass
class FunctionSource:
    """A Python function's parsed source, with what is needed to map AST positions
    back to the user's file (the AST is parsed from dedented text)."""
    fn: Any
    tree: ast.FunctionDef
    file: str
    first_line: int
    indent: int
    globals: Dict[str, Any]
    closure: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, fn) -> "FunctionSource":
        cached = getattr(fn, "__tilec_source__", None)
        if cached is not None:
            return cached
        try:
            lines, first = inspect.getsourcelines(fn)
            file = inspect.getsourcefile(fn) or "<unknown>"
        except (OSError, TypeError):
            raise CompilationError(f"cannot read the source of {fn.__qualname__}: tilec kernels must be "
                                   "defined in a .py file (not typed into an interactive prompt)") from None
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        first_code = next((ln for ln in lines if ln.strip()), "")
        indent = len(first_code) - len(first_code.lstrip())
        tree = ast.parse(dedented)
        fdef = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        closure = {}
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    closure[name] = cell.cell_contents
                except ValueError:  # an unset cell
                    pass
        src = cls(fn, fdef, file, first, indent, fn.__globals__, closure)
        try:
            fn.__tilec_source__ = src
        except AttributeError:
            pass
        return src

    def loc(self, node) -> Location:
        line = getattr(node, "lineno", None)
        if line is None:
            return Location(self.file, self.first_line, 1)
        return Location(self.file, line + self.first_line - 1, node.col_offset + self.indent + 1)


class Undefined:
    """A name bound on some paths only (in one branch of an if, or inside a loop);
    reading it is an error that says why."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why


@dataclass
class LoopInfo:
    """The loop being lowered: `break_flag` names the carried i1 that `break` sets,
    None where the loop cannot break (then `break` is an error)."""
    break_flag: Optional[str]
    kind: str  # "for", "while", "static"


class Context:
    """Everything a node handler needs; handlers receive it as their first argument."""

    def __init__(self, kernel_name: str, source: FunctionSource):
        self.kernel_name = kernel_name
        self.source = source
        self.builder = Builder()
        self.scope: Dict[str, Any] = {}
        self.loc: Location = source.loc(source.tree)
        self.call_stack: List[Any] = []   # @tc.func objects being inlined, for recursion checks
        self.loops: List[LoopInfo] = []
        self.in_func = False              # lowering the body of a @tc.func (returns give values)
        self.failure_loc: Optional[Location] = None
        self._counter = 0

    # locations and errors --------------------------------------------------------
    def set_loc(self, node) -> Location:
        if hasattr(node, "lineno"):
            self.loc = self.source.loc(node)
            self.builder.loc = self.loc
        return self.loc

    def error(self, msg: str, node=None) -> CompilationError:
        loc = self.source.loc(node) if node is not None and hasattr(node, "lineno") else self.loc
        return CompilationError(msg, loc, kernel=self.kernel_name)

    def dispatch(self, handlers, node, unsupported):
        """Run the handler registered for `node`'s type with `node`'s location current.

        `unsupported(node)` gives the message for node types with no handler. The first
        (innermost) location at which an exception passes is kept for internal errors."""
        handler = handlers.get(type(node))
        saved = self.loc
        self.set_loc(node)
        try:
            if handler is None:
                raise self.error(unsupported(node), node)
            return handler(self, node)
        except Exception:
            if self.failure_loc is None:
                self.failure_loc = self.loc
            raise
        finally:
            self.loc = saved
            self.builder.loc = saved

    def fresh_name(self, base: str) -> str:
        self._counter += 1
        return f"__{base}{self._counter}"

    # op creation -----------------------------------------------------------------
    def create(self, cls, *operands, result_types=None, regions=(), **attrs) -> Op:
        """Create an op at the current point with the current location, checking it at once
        so that a mistake is reported at the user's line."""
        vals = [o.value if isinstance(o, TensorValue) else o for o in operands]
        try:
            op = cls.build(*vals, loc=self.loc, regions=regions, result_types=result_types, **attrs)
            if not op.regions:
                from ..ir.verifier import _verify_generic
                _verify_generic(op)
                op.verify_op()
        except VerifyError as e:
            msg = str(e)
            if msg.startswith("'"):  # drop the "'op' at file:line:col:" prefix: the error shows the line
                msg = f"{cls.name}: " + msg.split(": ", 1)[-1]
            raise self.error(msg) from None
        return self.builder.insert(op)

    def value(self, cls, *operands, **kw) -> TensorValue:
        return TensorValue(self.create(cls, *operands, **kw).result)
