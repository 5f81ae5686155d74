"""`@tc.kernel` and `@tc.func`: the objects users decorate, launch, inspect and compile.

A Kernel owns its compile step: the runtime's launcher gets, with the kernel's launch
state, a callable that compiles the kernel for one call's arguments (the runtime
itself never imports the frontend or the compiler)."""
from __future__ import annotations

import functools
import os
from typing import Any, Dict

from .compiler import compile_kernel
from .definition import KernelDef
from .errors import CompilationError, debug_enabled
from .grid import normalize_grid
from .language import Func, _state as _language_state, interpreting
from .options import CompileOptions, split_options
from .runtime.replay import LaunchPlan, launch_plan
from .runtime.launcher import KernelState, launch as _gpu_launch
from .specialize import Specialization, parse_signature, specialize
from .target import Target

__all__ = ["Kernel", "Func", "kernel", "func", "normalize_grid"]


class Kernel(KernelDef):
    """A kernel (`@tc.kernel`): launch with `kernel[grid](*args, **constexprs_and_options)`."""

    def __init__(self, fn, do_not_specialize=()):
        super().__init__(fn, do_not_specialize)
        self._ir_cache: Dict[Any, Any] = {}
        self._launchers: Dict[Any, "_GridLaunch"] = {}
        # what the GPU launcher keeps for this kernel (prepared launches per signature)
        self.launch_state = KernelState(self, compile=self._compile_for_launch)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernels are launched with a grid: {self.name}[grid](*args)")

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
        return _gpu_launch(self.launch_state, grid, args, kwargs)

    def prepare(self, grid, *args, **kwargs) -> LaunchPlan:
        """The GPU launch `self[grid](*args, **kwargs)` prepared once, to replay with new array
        addresses (`LaunchPlan.launch`, runtime/replay.py); compiles and loads, launches nothing."""
        return launch_plan(self.launch_state, grid, args, kwargs)

    def _interpret(self, grid, args, kwargs):
        from .interpreter import run  # noqa: PLC0415 - numpy interpreter, loaded on first use
        opts, _stream, rest = split_options(dict(kwargs))
        # the interpreter runs on no device: an arch left open is checked against the default
        # target's, without asking the driver
        options = CompileOptions(**opts).validated(Target.default())
        spec, runtime_args = specialize(self, args, rest)
        grid3 = normalize_grid(grid, self.bind_args(args, rest), self.name)
        module = self.ir(spec)
        run(module, runtime_args, grid3, cluster=options.cluster)

    # compiling -------------------------------------------------------------------
    def ir(self, spec):
        """The tile IR module of this kernel for `spec` (cached per specialization)."""
        m = self._ir_cache.get(spec)
        if m is None:
            from .frontend import lower_to_ir  # noqa: PLC0415 - the frontend loads on first use
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
        if len(args) == 1 and not kwargs and isinstance(args[0], Specialization):
            return args[0]
        if args and isinstance(args[0], str):
            if len(args) > 1:
                raise TypeError(f"kernel '{self.name}': a signature string comes alone; give constexprs as "
                                f"keywords (got {len(args)} positional arguments)")
            return parse_signature(self, args[0], constexprs=kwargs)
        return specialize(self, args, kwargs)[0]

    def compile(self, *args, **kwargs):
        """Compile for example arguments (arrays, scalars), a signature string or a Specialization;
        keywords give constexprs and compile options. Returns a CompiledKernel."""
        opts, _stream, rest = split_options(dict(kwargs))
        options = CompileOptions(**opts).validated()
        return self._compiled(self.specialization(*args, **rest), options)

    def _compile_for_launch(self, named_args: Dict[str, Any], options: CompileOptions):
        """What the launcher calls for a signature it has not prepared yet."""
        return self._compiled(specialize(self, (), named_args)[0], options)

    def _compiled(self, spec, options):
        try:
            return compile_kernel(self, spec, options)
        except CompilationError as e:
            if debug_enabled():
                raise
            raise e.with_traceback(None) from None


class _GridLaunch:
    """`kernel[grid]`: calling it launches on the interpreter or the GPU."""

    __slots__ = ("kernel", "grid", "state")

    def __init__(self, kernel: Kernel, grid):
        self.kernel, self.grid, self.state = kernel, grid, kernel.launch_state

    def __call__(self, *args, **kwargs):
        if _interpret_env() or _language_state.depth:
            return self.kernel._interpret(self.grid, args, kwargs)
        return _gpu_launch(self.state, self.grid, args, kwargs)


def _interpret_mode() -> bool:
    return interpreting() or _interpret_env()


@functools.lru_cache(maxsize=None)
def _interpret_env() -> bool:
    # Read once per process: launches are a hot path and os.environ lookups cost ~0.5 us.
    return os.environ.get("TILEC_INTERPRET", "") not in ("", "0")


def kernel(fn=None, *, do_not_specialize=()):
    """Decorator: `@tc.kernel` or `@tc.kernel(do_not_specialize=["n"])`."""
    if fn is None:
        return lambda f: Kernel(f, do_not_specialize)
    return Kernel(fn, do_not_specialize)


def func(fn):
    """Decorator: `@tc.func` makes a device helper that kernels inline."""
    return Func(fn)
