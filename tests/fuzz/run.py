"""Running one generated program: the interpreter, the compiler (sm_80 and sm_90a, ptxas),
the GPU, and the comparison.

`check(program, archs, gpu)` returns a `Finding` or None. Stages, in order:

- "interpret": the numpy interpreter raised on a program the language accepts;
- "compile": the frontend, a pass, the verifier (TILEC_VERIFY=1), codegen or LLVM failed
  (LLVM runs in a forked child, TILEC_LLVM_ISOLATE=1, so that an LLVM abort fails the
  compile rather than the process), or ptxas rejected the PTX;
- "gpu": the launch raised (a CompilationError there, the kernel compiled for the device's
  arch at its first launch, is a "compile" finding: no launch happened);
- "mismatch": an output differs from the interpreter's by more than its bound.

Comparison: each output carries an absolute error bound per element computed by the
generator (programs.py); 0 means bit for bit (all integers, and floats computed only by
correctly rounded ops: + - * fma, casts, min/max, abs, floor/ceil, where). Otherwise
|gpu - interp| <= SLACK * bound, and NaN and infinities must sit at the same places.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

import numpy as np

from .program import Program

os.environ.setdefault("TILEC_VERIFY", "1")        # the IR verifier after every pass
os.environ.setdefault("TILEC_LLVM_ISOLATE", "1")  # an LLVM abort fails one compile, not the process

import warnings  # noqa: E402

import tilec as tc  # noqa: E402
from tilec.compiler import compile_kernel  # noqa: E402
from tilec.options import CompileOptions  # noqa: E402

ARCHS = ("sm_80", "sm_90a")
warnings.simplefilter("ignore", tc.SpillWarning)  # a spill is slow, not wrong
SLACK = 4.0   # the bounds are estimates: both sides' roundings, composed loosely


@dataclass
class Finding:
    stage: str      # "interpret", "compile", "gpu", "mismatch"
    detail: str     # the exception's message or the mismatching elements
    arch: str = ""
    # the GPU run failed in a way that may have lost this process' CUDA context (a fault):
    # every later launch would fail too, so the fuzzer stops drawing (`loses_context`)
    context_lost: bool = False

    def key(self) -> str:
        """What shrinking keeps fixed: the stage and the first line of the message."""
        first = self.detail.strip().splitlines()[0] if self.detail.strip() else ""
        return f"{self.stage}:{self.arch}:{_norm(first)}"

    def __str__(self) -> str:
        return f"[{self.stage}{' ' + self.arch if self.arch else ''}] {self.detail}"


def _norm(line: str) -> str:
    """A message without its numbers and names (a shrunk program keeps the same bug)."""
    import re
    line = re.sub(r"tilec_fuzz_[0-9a-f]+", "M", line)
    line = re.sub(r"\d+", "N", line)
    return line[:160]


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def interpret(p: Program) -> Dict[str, np.ndarray]:
    kernel = p.load_kernel()
    args = p.fresh_args()
    with tc.interpret():
        kernel[p.grid](*args, **_launch_options(p))
    return {n: a for (n, _), a in zip(p.args, args) if n in p.outputs}


def _launch_options(p: Program) -> dict:
    return dict(p.options)


def compile_for(p: Program, arch: str):
    kernel = p.load_kernel()
    spec = kernel.specialization(*[v for _, v in p.args])
    return compile_kernel(kernel, spec, CompileOptions(arch=arch, **p.options), use_cache=False)


def run_gpu(p: Program) -> Dict[str, np.ndarray]:
    kernel = p.load_kernel()
    host = p.fresh_args()
    dev = [tc.from_numpy(a) if isinstance(a, np.ndarray) else a for a in host]
    kernel[p.grid](*dev, **_launch_options(p))
    tc.synchronize()
    return {n: d.to_numpy() for (n, _), d in zip(p.args, dev) if n in p.outputs}


def loses_context(e: BaseException) -> bool:
    """Whether a failed GPU run may have lost the CUDA context. A DriverError says so itself
    (`context_lost`: a sticky error, a fault); anything else (an argument the launch refused,
    a launch the driver turned down for its resources) leaves the context usable unless the
    driver has seen a fault meanwhile. When the driver cannot answer, assume it was lost."""
    if isinstance(e, tc.DriverError):
        return bool(e.context_lost)
    try:
        from tilec.runtime.driver import context_lost
        return context_lost()
    except Exception:  # noqa: BLE001 - no driver to ask
        return True


def compare(p: Program, want: Dict[str, np.ndarray], got: Dict[str, np.ndarray]) -> Optional[str]:
    for name, bound in p.outputs.items():
        w, g = want[name], got[name]
        bad = mismatches(w, g, bound)
        if bad is not None and bad.any():
            idx = np.argwhere(bad)[:5]
            shown = ", ".join(f"{tuple(int(i) for i in ix)}: got {g[tuple(ix)]!r} want {w[tuple(ix)]!r}" for ix in idx)
            return f"{name} ({w.dtype}, bound {bound:.3g}): {int(bad.sum())} of {bad.size} elements differ: {shown}"
    return None


def mismatches(want: np.ndarray, got: np.ndarray, bound: float) -> np.ndarray:
    """A bool array: where `got` is not within `bound` (times SLACK) of `want`."""
    if want.dtype.kind != "f":
        return want != got
    w, g = want.astype(np.float64), got.astype(np.float64)
    nan = np.isnan(w) != np.isnan(g)
    both = ~np.isnan(w) & ~np.isnan(g)
    if bound == 0.0:
        return nan | (both & (w != g))   # bit for bit, but for the sign of zero
    inf = np.isinf(w) | np.isinf(g)
    with np.errstate(invalid="ignore"):
        far = np.abs(w - g) > SLACK * bound + 1e-30
    return nan | (both & inf & (w != g)) | (both & ~inf & far)


def check(p: Program, archs: Sequence[str] = ARCHS, gpu: bool = False) -> Optional[Finding]:
    try:
        want = interpret(p)
    except Exception as e:  # noqa: BLE001 - every failure is a finding
        return Finding("interpret", _error(e) + "\n" + traceback.format_exc(limit=-3))
    for arch in archs:
        try:
            compiled = compile_for(p, arch)
        except Exception as e:  # noqa: BLE001
            return Finding("compile", _error(e), arch)
        if not compiled.asm.get("cubin"):
            return Finding("compile", "ptxas did not run (is it installed?)", arch)
    if gpu:
        try:
            got = run_gpu(p)
        except tc.CompilationError as e:   # the compile at the first launch: nothing ran
            return Finding("compile", _error(e), "device")
        except Exception as e:  # noqa: BLE001
            return Finding("gpu", _error(e), context_lost=loses_context(e))
        bad = compare(p, want, got)
        if bad:
            return Finding("mismatch", bad)
    return None
