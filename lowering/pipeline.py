"""The pass pipeline: which passes run, in which order, and how they are driven.

A pass is a function `pass_(module, **options) -> Module` (it may mutate the module
and return it). `run_passes` calls it with the fields of `CompileOptions` as
keywords (num_warps, num_stages, arch, fast_math, debug), so a pass takes the ones
it needs and ignores the rest through `**options`.
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from tilec.errors import CompilationError
from tilec.ir import Module, VerifyError, verify
from tilec.options import CompileOptions

from .passes import canonicalize, cse, dce, fold
from .passes.persistent import make_persistent
from .passes.dependent_launch import wait_for_prior_grid
from .passes.index_width import index_width
from .passes.lower_views import lower_views
from .passes.tma_loads import tma_loads
from .passes.tma_stores import tma_stores
from .passes.axis_info import axis_info
from .passes.layouts import assign_layouts
from .passes.accelerate_dot import accelerate_dot
from .passes.pipeline_loads import pipeline_loads
from .passes.prefetch_loads import prefetch_loads
from .passes.warp_specialize import warp_specialize
from .passes.reductions import lower_reductions
from .passes.scans import lower_scans
from .passes.shared_alloc import allocate_shared

__all__ = ["PIPELINE", "TILE_PASSES", "get_pass", "pass_names", "run_passes", "run_pipeline", "dump_to_directory"]

Pass = Callable[..., Module]

# Generic tile-IR cleanups: valid on any tile or gpu IR, used by the pipeline and by tests.
TILE_PASSES: List[Tuple[str, Pass]] = [
    ("canonicalize", canonicalize),
    ("fold", fold),
    ("cse", cse),
    ("dce", dce),
]

# The compiler's passes, in the order they run.
PIPELINE: List[Tuple[str, Pass]] = [
    *TILE_PASSES,
    ("make_persistent", make_persistent),  # persistent=True only; before every pass that looks at loops
    ("wait_for_prior_grid", wait_for_prior_grid),  # dependent_launch=True only; outside a persistent loop
    ("index_width", index_width),
    ("tma_loads", tma_loads),
    ("tma_stores", tma_stores),
    ("lower_views", lower_views),
    ("axis_info", axis_info),
    ("assign_layouts", assign_layouts),
    ("accelerate_dot", accelerate_dot),
    ("pipeline_loads", pipeline_loads),
    ("prefetch_loads", prefetch_loads),    # tc.range(num_stages=) loops
    ("warp_specialize", warp_specialize),
    ("lower_reductions", lower_reductions),
    ("lower_scans", lower_scans),
    ("allocate_shared", allocate_shared),
]


def pass_names() -> List[str]:
    """Names of every pass of PIPELINE, in order (a name may appear more than once)."""
    return [name for name, _ in PIPELINE]


def get_pass(name: str) -> Pass:
    """The pass called `name`; ValueError listing the known names otherwise."""
    for n, fn in PIPELINE + TILE_PASSES:
        if n == name:
            return fn
    raise ValueError(f"unknown pass {name!r}; passes are: {', '.join(dict.fromkeys(pass_names()))}")


def _verify_enabled(options: CompileOptions, verify_flag: Optional[bool]) -> bool:
    if verify_flag is not None:
        return verify_flag
    # TILEC_VERIFY=1 (set by the test suite) checks the IR after every pass, like debug=True
    return options.debug or os.environ.get("TILEC_VERIFY", "") not in ("", "0")


def _kernel_name(module: Module) -> Optional[str]:
    funcs = [o for o in module.ops if "sym_name" in o.attrs]
    return funcs[0].attrs["sym_name"] if len(funcs) == 1 else None


def _wrap(e: Exception, stage: str, kernel: Optional[str]) -> CompilationError:
    if isinstance(e, CompilationError):
        if e.stage is None or e.kernel is None:
            return CompilationError(e.msg, loc=e.loc, kernel=e.kernel or kernel, stage=e.stage or stage)
        return e
    loc = getattr(e, "loc", None)
    if loc is None and getattr(e, "op", None) is not None:
        loc = e.op.loc
    msg = str(e) or type(e).__name__
    if not isinstance(e, (ValueError, TypeError, VerifyError)):
        msg = f"{type(e).__name__}: {msg}"
    return CompilationError(msg, loc=loc, kernel=kernel, stage=stage)


def run_passes(module: Module, names: Sequence[str], options: Optional[CompileOptions] = None,
               verify_each: Optional[bool] = None, dump: Optional[Callable[[str, Module], None]] = None) -> Module:
    """Run the passes called `names` in order (see `run_pipeline` for the rest)."""
    options = options or CompileOptions()
    kwargs = dataclasses.asdict(options)
    check = _verify_enabled(options, verify_each)
    kernel = _kernel_name(module)
    passes = [(name, get_pass(name)) for name in names]  # unknown names fail before any pass runs
    for name, fn in passes:
        try:
            module = fn(module, **kwargs)
            if check:
                verify(module)
        except Exception as e:
            err = _wrap(e, f"pass '{name}'", kernel)
            if err is e:
                raise
            raise err from e
        if dump is not None:
            dump(name, module)
    return module


def run_pipeline(module: Module, options: Optional[CompileOptions] = None, stop_after: Optional[str] = None,
                 dump: Optional[Callable[[str, Module], None]] = None, verify_each: Optional[bool] = None) -> Module:
    """Run PIPELINE on `module`, stopping after the pass `stop_after` when given.

    After each pass: the verifier when `options.debug` (or TILEC_VERIFY=1, or
    `verify_each=True`), then `dump(pass_name, module)`. Any failure becomes a
    CompilationError naming the kernel, the pass and, when known, the source line.
    """
    names = pass_names()
    if stop_after is not None:
        if stop_after not in names:
            raise ValueError(f"unknown pass {stop_after!r}; passes are: {', '.join(dict.fromkeys(names))}")
        names = names[:names.index(stop_after) + 1]
    return run_passes(module, names, options, verify_each, dump)


def dump_to_directory(directory, stem: str) -> Callable[[str, Module], None]:
    """A `dump` callback writing `<directory>/<stem>.<NN>.<pass>.ir` after each pass
    (NN counts the passes run, so a directory listing is in pipeline order)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    safe_stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)
    counter = [0]

    def dump(pass_name: str, module: Module) -> None:
        counter[0] += 1
        (root / f"{safe_stem}.{counter[0]:02d}.{pass_name}.ir").write_text(str(module))

    return dump
