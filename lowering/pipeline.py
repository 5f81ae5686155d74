"""The pass pipeline: which passes run for a target, in which order, and how they are driven.

A pass is a function `pass_(module, *, explicit arguments) -> Module` (it may mutate the
module and return it). `PASSES` says, in one table, how each is called from the Target
and the CompileOptions; `PHASES` say, in one place, which passes run for a target and
options (reading `target.has_wgmma` and such: no pass tests the arch). Passes that decide what the
user would want to know record compiler remarks into `options.remarks` (tilec.remarks), a
collector the compiler sets per compile (None: nothing recorded). `passes_for(target,
options)` lists them; `run_pipeline` runs them and then stamps the launch shape and the
target on the module (`stamp`), which is all codegen reads.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from tilec.errors import CompilationError
from tilec.ir import Module, VerifyError, verify
from tilec.options import CompileOptions
from tilec.target import Target

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
from .passes.share_buffers import share_staged_operands
from .passes.defer_waits import defer_wgmma_waits
from .passes.pipeline_loads import pipeline_loads
from .passes.prefetch_loads import prefetch_loads
from .passes.pingpong import pingpong
from .passes.warp_specialize import drop_multicast, warp_specialize
from .passes.reductions import lower_reductions
from .passes.scans import lower_scans
from .passes.shared_alloc import allocate_shared

__all__ = ["PASSES", "PHASES", "TILE_PASSES", "get_pass", "pass_names", "passes_for", "phases_for", "run_passes",
           "run_pipeline", "stamp", "dump_to_directory"]

Pass = Callable[[Module, Target, CompileOptions], Module]

# Generic tile-IR cleanups: valid on any tile or gpu IR, used by the pipeline and by tests.
TILE_PASSES: List[Tuple[str, Callable[[Module], Module]]] = [
    ("canonicalize", canonicalize),
    ("fold", fold),
    ("cse", cse),
    ("dce", dce),
]

# Every pass, in the order they run, and the arguments each takes from the target (t) and options (o).
PASSES: Dict[str, Pass] = {
    "canonicalize": lambda m, t, o: canonicalize(m),
    "fold": lambda m, t, o: fold(m),
    "cse": lambda m, t, o: cse(m),
    "dce": lambda m, t, o: dce(m),
    "make_persistent": lambda m, t, o: make_persistent(m),
    "wait_for_prior_grid": lambda m, t, o: wait_for_prior_grid(m),
    "index_width": lambda m, t, o: index_width(m),
    "tma_loads": lambda m, t, o: tma_loads(m, num_warps=o.num_warps, cluster=o.cluster),
    "tma_stores": lambda m, t, o: tma_stores(m, num_warps=o.num_warps),
    "lower_views": lambda m, t, o: lower_views(m),
    "axis_info": lambda m, t, o: axis_info(m),
    "assign_layouts": lambda m, t, o: assign_layouts(m, num_warps=o.num_warps, wgmma=t.has_wgmma,
                                                     widen=o.min_programs_per_sm <= 1),
    "accelerate_dot": lambda m, t, o: accelerate_dot(m, wgmma=t.has_wgmma, num_warps=o.num_warps, remarks=o.remarks),
    "share_staged_operands": lambda m, t, o: share_staged_operands(m),
    "pipeline_loads": lambda m, t, o: pipeline_loads(m, num_stages=o.num_stages, shared_limit=t.shared_per_block,
                                                     remarks=o.remarks, carry=o.carry_wgmma),
    "defer_wgmma_waits": lambda m, t, o: defer_wgmma_waits(m),
    "prefetch_loads": lambda m, t, o: prefetch_loads(m, shared_limit=t.shared_per_block, remarks=o.remarks),
    "warp_specialize": lambda m, t, o: warp_specialize(m, num_warps=o.num_warps,
                                                       registers_per_sm=t.registers_per_sm),
    "pingpong": lambda m, t, o: pingpong(m, num_warps=o.num_warps),
    "drop_multicast": lambda m, t, o: drop_multicast(m),
    "lower_reductions": lambda m, t, o: lower_reductions(m),
    "lower_scans": lambda m, t, o: lower_scans(m),
    "allocate_shared": lambda m, t, o: allocate_shared(m, limit=t.shared_per_block, arch=t.arch, remarks=o.remarks),
}


def _tma(t: Target, o: CompileOptions) -> bool:
    """Whether view loads and stores around a wgmma dot may go through TMA."""
    return o.tma and t.has_tma and t.has_wgmma


def legalize(t: Target, o: CompileOptions) -> List[str]:
    """Clean-ups, then the rewrites of the program's shape that the options ask for."""
    return [*(n for n, _ in TILE_PASSES),
            *(["make_persistent"] if o.persistent else []),   # before every pass that looks at loops
            *(["wait_for_prior_grid"] if o.dependent_launch and t.has_dependent_launch else []),  # outside that loop
            "index_width"]


def optimize_for_target(t: Target, o: CompileOptions) -> List[str]:
    """Target features that must see tensor views: TMA copies around wgmma dots (a ring of 3+
    stages). The sanitizer mode (initcheck)
    keeps the epilogue's plain stores: compute-sanitizer's initcheck does not record bulk-tensor
    (TMA) writes, so every element of a TMA-stored result read later counts as uninitialized
    (measured on an H200, docs/benchmarks.md "Sanitizers")."""
    return [*(["tma_loads"] if _tma(t, o) and o.num_stages >= 3 else []),
            *(["tma_stores"] if _tma(t, o) and not o.initcheck else [])]


def lower_to_gpu(t: Target, o: CompileOptions) -> List[str]:
    """Views to pointers, vector widths, register layouts, tensor-core dots (a tile that
    several dots stage, staged once)."""
    return ["lower_views", "axis_info", "assign_layouts", "accelerate_dot", "share_staged_operands"]


def schedule(t: Target, o: CompileOptions) -> List[str]:
    """Loads issued ahead of their use; waits for wgmmas where their results are needed; a TMA
    ring split into producer and consumers, two consumer warpgroups of a chain taking turns."""
    specialize = o.warp_specialize and t.has_wgmma and t.has_setmaxnreg
    return ["pipeline_loads",
            *(["defer_wgmma_waits"] if t.has_wgmma else []),
            *(["prefetch_loads"] if t.has_cp_async else []),   # tc.range(num_stages=) loops
            # multicast copies are safe only in a specialized ring (its `empty` barriers)
            *(["warp_specialize", *(["pingpong"] if o.pingpong else [])] if specialize
              else ["drop_multicast"] if _tma(t, o) else [])]


def allocate(t: Target, o: CompileOptions) -> List[str]:
    """Cross-thread reductions and scans (they add shared buffers), then shared memory placed."""
    return ["lower_reductions", "lower_scans", "allocate_shared"]


PHASES: List[Tuple[str, Callable[[Target, CompileOptions], List[str]]]] = [
    ("legalize", legalize),
    ("optimize_for_target", optimize_for_target),
    ("lower_to_gpu", lower_to_gpu),
    ("schedule", schedule),
    ("allocate", allocate),
]


def phases_for(target: Target, options: CompileOptions) -> List[Tuple[str, List[str]]]:
    """(phase, the names of its passes that run) for `target` and validated `options`."""
    return [(phase, fn(target, options)) for phase, fn in PHASES]


def passes_for(target: Target, options: CompileOptions) -> List[str]:
    """The names of the passes that run for `target` and validated `options`, in order."""
    return [name for _, names in phases_for(target, options) for name in names]


def pass_names() -> List[str]:
    """Names of every pass the pipeline may run, in order."""
    return list(PASSES)


def get_pass(name: str) -> Pass:
    """How the pipeline calls the pass `name`; ValueError listing the known names otherwise."""
    try:
        return PASSES[name]
    except KeyError:
        raise ValueError(f"unknown pass {name!r}; passes are: {', '.join(PASSES)}") from None


def stamp(module: Module, options: CompileOptions) -> Module:
    """Write on the module what codegen needs besides the IR (validated `options`): the
    target's arch, the user's num_warps, the CTA's num_threads (warp_specialize set it when
    it added a producer), cluster, the register floor, fast_math, debug, initcheck and lineinfo."""
    module.attrs.update(target=options.target.arch, num_warps=options.num_warps,
                        num_threads=int(module.attrs.get("num_threads", 32 * options.num_warps)),
                        cluster=options.cluster, min_programs_per_sm=options.min_programs_per_sm,
                        fast_math=options.fast_math, debug=options.debug)
    if options.initcheck:  # only when set: the IR of every other compile reads as before
        module.attrs["initcheck"] = True
    if not options.lineinfo:  # only when off (codegen's default is on): the IR reads as before
        module.attrs["lineinfo"] = False
    return module


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
    """Run the passes called `names`, in that order, except those the pipeline would not run
    for the options' target and the options (`passes_for`), as a compile would skip them;
    see `run_pipeline` for the rest. `options` are validated here (default: CompileOptions())."""
    options = (options or CompileOptions()).validated()
    target = options.target
    check = _verify_enabled(options, verify_each)
    kernel = _kernel_name(module)
    passes = [(name, get_pass(name)) for name in names]  # unknown names fail before any pass runs
    wanted = set(passes_for(target, options))
    for name, fn in passes:
        if name not in wanted:
            continue
        try:
            module = fn(module, target, options)
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
    """Run the passes of `passes_for(target, options)` on `module`, stopping after the pass
    `stop_after` when given (or where it would run, when the target skips it), then `stamp`.

    After each pass: the verifier when `options.debug` (or TILEC_VERIFY=1, or
    `verify_each=True`), then `dump(pass_name, module)`. Any failure becomes a
    CompilationError naming the kernel, the pass and, when known, the source line.
    """
    options = (options or CompileOptions()).validated()
    names = passes_for(options.target, options)
    if stop_after is not None:
        order = pass_names()
        if stop_after not in order:
            raise ValueError(f"unknown pass {stop_after!r}; passes are: {', '.join(order)}")
        names = [n for n in names if order.index(n) <= order.index(stop_after)]
    return stamp(run_passes(module, names, options, verify_each, dump), options)


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
