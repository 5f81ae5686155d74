"""`@tc.kernel` and `@tc.func`: the objects users decorate, launch, inspect and compile."""
from __future__ import annotations

import ast
import hashlib
import functools
import inspect
import re
import os
import types
from typing import Any, Dict, Optional, Tuple

from .errors import CompilationError, DriverError, debug_enabled
from .ir.core import Location
from .options import RESERVED_KWARGS, CompileOptions, split_options
from .target import Target

__all__ = ["Kernel", "Func", "kernel", "func", "normalize_grid"]


def _is_constexpr_annotation(ann) -> bool:
    from .language import constexpr
    if ann is constexpr or isinstance(ann, constexpr):
        return True
    return isinstance(ann, str) and (ann == "constexpr" or ann.endswith(".constexpr"))


def _def_location(fn, param: Optional[str] = None) -> Location:
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


class Func:
    """A device helper (`@tc.func`), inlined at every call site inside kernels."""

    def __init__(self, fn):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tc.func decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"@tc.func '{self.name}' can only be called inside a @tc.kernel or @tc.func")

    def __repr__(self) -> str:
        return f"<tilec func {self.name}>"


class Kernel:
    """A kernel (`@tc.kernel`): launch with `kernel[grid](*args, **constexprs_and_options)`."""

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
                                       _def_location(fn, p.name), kernel=self.name)
            if p.name in RESERVED_KWARGS:
                raise CompilationError(f"parameter '{p.name}' has the name of a launch option ({', '.join(RESERVED_KWARGS)}); "
                                       "rename it", _def_location(fn, p.name), kernel=self.name)
        self.constexprs = frozenset(p.name for p in self.signature.parameters.values()
                                    if _is_constexpr_annotation(p.annotation))
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
        self._ir_cache: Dict[Any, Any] = {}
        self._source_hash = None
        self._launchers: Dict[Any, "_GridLaunch"] = {}

    def __repr__(self) -> str:
        return f"<tilec kernel {self.name}>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernels are launched with a grid: {self.name}[grid](*args)")

    # arguments -------------------------------------------------------------------
    def bind_args(self, args, kwargs) -> Dict[str, Any]:
        """All arguments by parameter name (defaults applied), or TypeError naming the problem."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"kernel '{self.name}': {e}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    # launching -------------------------------------------------------------------
    def __getitem__(self, grid):
        # One launcher object per grid, reused: `kernel[grid](...)` is the launch hot path.
        try:
            return self._launchers[grid]
        except KeyError:
            pass
        except TypeError:  # an unhashable grid (a list): no caching
            return _GridLaunch(self, grid)
        if len(self._launchers) >= 1024:
            self._launchers.clear()
        launcher = self._launchers[grid] = _GridLaunch(self, grid)
        return launcher

    def run(self, grid, args, kwargs):
        if _interpret_mode():
            return self._interpret(grid, args, kwargs)
        return (_gpu_launch or _load_gpu_launch())(self, grid, args, kwargs)

    def _interpret(self, grid, args, kwargs):
        opts, _stream, rest = split_options(dict(kwargs))
        # the interpreter runs on no device: an arch left open is checked against the default
        # target's, without asking the driver
        options = CompileOptions(**opts).validated(Target.default())
        from .specialize import specialize
        spec, runtime_args = specialize(self, args, rest)
        grid3 = normalize_grid(grid, self.bind_args(args, rest))
        module = self.ir(spec)
        from .interpreter import run
        run(module, runtime_args, grid3, cluster=options.cluster)

    # compiling -------------------------------------------------------------------
    def ir(self, spec):
        """The tile IR module of this kernel for `spec` (cached per specialization)."""
        m = self._ir_cache.get(spec)
        if m is None:
            from .frontend import lower_to_ir
            try:
                m = lower_to_ir(self, spec)
            except CompilationError as e:
                if debug_enabled():
                    raise
                raise e.with_traceback(None) from None
            self._ir_cache[spec] = m
        return m

    def specialization(self, *args, **kwargs):
        """The Specialization for example arguments, a signature string, or a Specialization."""
        from .specialize import Specialization, parse_signature, specialize
        if len(args) == 1 and not kwargs and isinstance(args[0], Specialization):
            return args[0]
        if len(args) == 1 and not kwargs and isinstance(args[0], str):
            return parse_signature(self, args[0])
        return specialize(self, args, kwargs)[0]

    def compile(self, *args, **kwargs):
        """Compile for example arguments (arrays, scalars), a signature string or a Specialization;
        keywords give constexprs and compile options. Returns a CompiledKernel."""
        opts, _stream, rest = split_options(dict(kwargs))
        options = CompileOptions(**opts).validated()
        spec = self.specialization(*args, **rest)
        from .compiler import compile_kernel
        try:
            return compile_kernel(self, spec, options)
        except CompilationError as e:
            if debug_enabled():
                raise
            raise e.with_traceback(None) from None

    def source_hash(self) -> str:
        """sha256 of this kernel's source, every @tc.func it calls (transitively), the constant
        globals it reads and the tilec version."""
        if self._source_hash is None:
            from . import __version__
            h = hashlib.sha256(__version__.encode())
            seen: Dict[int, Any] = {}
            consts: Dict[str, str] = {}
            _collect_dependencies(self.fn, seen, consts)
            for fn in sorted(seen.values(), key=lambda f: (f.__module__ or "", f.__qualname__)):
                h.update(f"{fn.__module__}.{fn.__qualname__}\n".encode())
                h.update(_source_text(fn).encode())
            for k in sorted(consts):
                h.update(f"{k}={consts[k]}\n".encode())
            self._source_hash = h.hexdigest()
        return self._source_hash


def _source_text(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return fn.__code__.co_code.hex()


def _collect_dependencies(fn, seen: Dict[int, Any], consts: Dict[str, str]) -> None:
    from .dtypes import DType
    from .language import constexpr
    if id(fn) in seen:
        return
    seen[id(fn)] = fn
    try:
        tree = ast.parse(__import__("textwrap").dedent(inspect.getsource(fn)))
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


class _GridLaunch:
    """`kernel[grid]`: calling it launches on the interpreter or the GPU."""

    __slots__ = ("kernel", "grid")

    def __init__(self, kernel: Kernel, grid):
        self.kernel, self.grid = kernel, grid

    def __call__(self, *args, **kwargs):
        if _interpret_env() or _language_state().depth:
            return self.kernel._interpret(self.grid, args, kwargs)
        return (_gpu_launch or _load_gpu_launch())(self.kernel, self.grid, args, kwargs)


@functools.lru_cache(maxsize=None)
def _language_state():
    from .language import _state
    return _state


_interpreting = None


def _interpret_mode() -> bool:
    global _interpreting
    if _interpreting is None:  # imported once: language imports this module
        from .language import interpreting
        _interpreting = interpreting
    return _interpreting() or _interpret_env()


@functools.lru_cache(maxsize=None)
def _interpret_env() -> bool:
    # Read once per process: launches are a hot path and os.environ lookups cost ~0.5 us.
    return os.environ.get("TILEC_INTERPRET", "") not in ("", "0")


_gpu_launch = None


def _load_gpu_launch():
    """runtime.launcher.launch, imported on the first GPU launch and kept (launches are a hot path)."""
    global _gpu_launch
    try:
        from .runtime.launcher import launch
    except ImportError as e:
        raise DriverError(f"the GPU runtime is not available ({e}); run kernels on the CPU interpreter with "
                          "TILEC_INTERPRET=1 or inside `with tc.interpret():`") from None
    _gpu_launch = launch
    return launch


def normalize_grid(grid, named_args: Dict[str, Any]) -> Tuple[int, int, int]:
    """A launch grid as a 3-tuple: `grid` is 1-3 ints or a callable of the arguments by name."""
    if callable(grid):
        grid = grid(dict(named_args))
    if hasattr(grid, "__index__") and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise TypeError(f"the grid must be a tuple of 1 to 3 ints (or a callable returning one), got {grid!r}")
    out = []
    for g in grid:
        if hasattr(g, "__index__") and not isinstance(g, bool):
            g = int(g.__index__())
        else:
            raise TypeError(f"grid extents must be ints, got {g!r}")
        if g < 0:
            raise ValueError(f"grid extents must be >= 0, got {g}")
        out.append(g)
    while len(out) < 3:
        out.append(1)
    return tuple(out)


def kernel(fn=None, *, do_not_specialize=()):
    """Decorator: `@tc.kernel` or `@tc.kernel(do_not_specialize=["n"])`."""
    if fn is None:
        return lambda f: Kernel(f, do_not_specialize)
    return Kernel(fn, do_not_specialize)


def func(fn):
    """Decorator: `@tc.func` makes a device helper that kernels inline."""
    return Func(fn)
