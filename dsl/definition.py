"""What a `@tc.kernel` is before anything runs it: its function, parameters, constexprs,
`do_not_specialize` set and source hash. The frontend, the specializer and the compiler
read kernels through this class; `tilec.kernel.Kernel` adds launching and compiling on top."""
from __future__ import annotations

import ast
import hashlib
import inspect
import re
import textwrap
import types
from typing import Any, Dict, Optional

from .dtypes import DType
from .errors import CompilationError
from .ir.core import Location
from .language import Func, constexpr
from .options import RESERVED_KWARGS, unknown_keyword
from .version import __version__

__all__ = ["KernelDef", "def_location", "is_constexpr_annotation", "dependency_hash"]


def is_constexpr_annotation(ann) -> bool:
    if ann is constexpr or isinstance(ann, constexpr):
        return True
    if not isinstance(ann, str):
        return False
    ann = ann.strip("'\" ")  # a string annotation under `from __future__ import annotations` keeps its quotes
    return ann == "constexpr" or ann.endswith(".constexpr")


def def_location(fn, param: Optional[str] = None) -> Location:
    """Where `fn` is defined: the parameter `param` when given and found, else the `def`."""
    code = fn.__code__
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return Location(code.co_filename, code.co_firstlineno, 1)
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(("def ", "async def ")):
            if param is not None:
                m = re.search(rf"\b{re.escape(param)}\b", line[line.index("def ") + 4:])
                if m:
                    return Location(code.co_filename, first + i, line.index("def ") + 4 + m.start() + 1)
            return Location(code.co_filename, first + i, len(line) - len(stripped) + 1)
    return Location(code.co_filename, code.co_firstlineno, 1)


class KernelDef:
    """A kernel's definition: the decorated function and what its parameters are."""

    def __init__(self, fn, do_not_specialize=()):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tc.kernel decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.param_names = list(self.signature.parameters)
        for p in self.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise CompilationError(f"kernel parameters must be plain names, not *{p.name} or **{p.name}",
                                       def_location(fn, p.name), kernel=self.name)
            if p.name in RESERVED_KWARGS:
                raise CompilationError(f"parameter '{p.name}' has the name of a launch option ({', '.join(RESERVED_KWARGS)}); "
                                       "rename it", def_location(fn, p.name), kernel=self.name)
        self.constexprs = frozenset(p.name for p in self.signature.parameters.values()
                                    if is_constexpr_annotation(p.annotation))
        dns = []
        for d in do_not_specialize:
            if isinstance(d, int) and not isinstance(d, bool):
                if not 0 <= d < len(self.param_names):
                    raise ValueError(f"do_not_specialize index {d} is out of range for kernel '{self.name}'")
                d = self.param_names[d]
            if d not in self.param_names:
                raise ValueError(f"do_not_specialize names '{d}', which is not a parameter of kernel '{self.name}'")
            dns.append(d)
        self.do_not_specialize = frozenset(dns)
        self._source_hash = None
        self._source_positions = None

    def __repr__(self) -> str:
        return f"<tilec kernel {self.name}>"

    def bind_args(self, args, kwargs) -> Dict[str, Any]:
        """All arguments by parameter name (defaults applied), or TypeError naming the problem."""
        for k in kwargs:
            if k not in self.signature.parameters:
                raise unknown_keyword(self.name, k, self.param_names)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"kernel '{self.name}': {e}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def source_hash(self) -> str:
        """sha256 of this kernel's source, every @tc.func it calls (transitively), the constant
        globals it reads and the tilec version."""
        if self._source_hash is None:
            self._source_hash = dependency_hash(self.fn)
        return self._source_hash

    def source_positions(self) -> str:
        """File and first line of this kernel and of every @tc.func it calls: the line
        numbers the PTX's line information holds (a compile-cache key, apart from
        source_hash, which a kernel moved within or between files keeps)."""
        if self._source_positions is None:
            seen: Dict[int, Any] = {}
            _collect_dependencies(self.fn, seen, {})
            self._source_positions = "\n".join(sorted(
                f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}" for fn in seen.values()))
        return self._source_positions


def dependency_hash(fn) -> str:
    """sha256 of `fn`'s source, every @tc.func it calls (transitively), the constant globals
    and closure values it reads and the tilec version: what a kernel's, or a @tc.func passed
    as a constexpr's, generated code depends on."""
    h = hashlib.sha256(__version__.encode())
    seen: Dict[int, Any] = {}
    consts: Dict[str, str] = {}
    _collect_dependencies(fn, seen, consts)
    for f in sorted(seen.values(), key=lambda f: (f.__module__ or "", f.__qualname__)):
        h.update(f"{f.__module__}.{f.__qualname__}\n".encode())
        h.update(_source_text(f).encode())
    for k in sorted(consts):
        h.update(f"{k}={consts[k]}\n".encode())
    return h.hexdigest()


def _source_text(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return fn.__code__.co_code.hex()


def _collect_dependencies(fn, seen: Dict[int, Any], consts: Dict[str, str]) -> None:
    if id(fn) in seen:
        return
    seen[id(fn)] = fn
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return
    env = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:
                pass

    def visit_value(key, v):
        if isinstance(v, Func):
            _collect_dependencies(v.fn, seen, consts)
        elif isinstance(v, constexpr):
            consts[key] = repr(v.value)
        elif v is None or isinstance(v, (bool, int, float, str, tuple, DType)):
            consts[key] = repr(v)

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in env:
            visit_value(f"{fn.__module__}.{node.id}", env[node.id])
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            mod = env.get(node.value.id)
            if isinstance(mod, types.ModuleType) and hasattr(mod, node.attr):
                visit_value(f"{mod.__name__}.{node.attr}", getattr(mod, node.attr))
