"""What every example's main() shares: where to run, moving arrays there and back,
and checking a result against numpy.

Not an example itself: the kernels live in the other files of this folder.
"""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np

import tilec as tc


def _interpret_forced() -> bool:
    return os.environ.get("TILEC_INTERPRET", "") not in ("", "0")


def _gpu_name():
    """The GPU's name when one can run kernels, else None (no runtime, driver or device)."""
    if _interpret_forced():
        return None
    try:
        from tilec.runtime import device_name, gpu_available
    except ImportError:
        return None
    return device_name() if gpu_available() else None


class Target:
    """The GPU when there is one, otherwise the CPU interpreter."""

    def __init__(self):
        self.gpu = _gpu_name()

    @property
    def on_gpu(self) -> bool:
        return self.gpu is not None

    def describe(self) -> str:
        if self.on_gpu:
            return f"ran on the GPU ({self.gpu})"
        if _interpret_forced():
            return "ran on the CPU interpreter (TILEC_INTERPRET=1)"
        return "ran on the CPU interpreter (no GPU found)"

    def to_device(self, a: np.ndarray):
        # The interpreter works on numpy arrays in place; the GPU needs device memory.
        return tc.from_numpy(a) if self.on_gpu else a

    def to_host(self, a) -> np.ndarray:
        return a.to_numpy() if self.on_gpu else a

    def launching(self):
        """Context for the launches: nothing on the GPU, `tc.interpret()` otherwise."""
        return contextlib.nullcontext() if self.on_gpu else tc.interpret()


def check(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """Compare in float64; print the worst error. False on a mismatch."""
    got64 = np.asarray(got, dtype=np.float64)
    want64 = np.asarray(want, dtype=np.float64)
    if got64.shape != want64.shape:
        print(f"{name}: shape {got64.shape}, expected {want64.shape}")
        return False
    err = np.abs(got64 - want64)
    bad = err > atol + rtol * np.abs(want64)
    worst = float(err.max()) if err.size else 0.0
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        print(f"{name}: MISMATCH in {int(bad.sum())} of {bad.size} elements, max error {worst:.3g}; "
              f"first at {first}: got {got64[first]}, expected {want64[first]}")
        return False
    print(f"{name}: ok (max error {worst:.3g})")
    return True


def finish(target: Target, ok: bool) -> None:
    """Say where the example ran and exit non-zero when a check failed."""
    print(target.describe())
    if not ok:
        sys.exit(1)
