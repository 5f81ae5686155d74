"""Running one kernel on either backend with numpy arrays in and out, and the numpy
references the parity tests share.

`Backend.launch(kernel, grid, *args, **constexprs)` takes numpy arrays on both
backends: the interpreter works on them in place; the GPU path copies each one to
device memory (`tc.from_numpy`), launches, synchronizes and copies it back into the
same numpy array, so a test reads its results the same way on both.
"""
from __future__ import annotations

import numpy as np

import tilec as tc
from tilec import dtypes as dt
from tilec.interpreter.numerics import cast

INT_DTYPES = [dt.int8, dt.int16, dt.int32, dt.int64, dt.uint8, dt.uint16, dt.uint32, dt.uint64]
# Floats numpy holds natively, and those a kernel reaches by casting from f32 storage.
NATIVE_FLOATS = [dt.float16, dt.float32, dt.float64]
EMULATED_FLOATS = [dt.bfloat16, dt.float8e4m3, dt.float8e5m2]
ALL_DTYPES = [dt.bool_, *INT_DTYPES, *NATIVE_FLOATS, *EMULATED_FLOATS]
# Unit roundoff (half an ulp, relative) of each float dtype.
EPS = {"f16": 2.0**-11, "bf16": 2.0**-8, "f32": 2.0**-24, "f64": 2.0**-53,
       "f8e4m3": 2.0**-4, "f8e5m2": 2.0**-3}


class Backend:
    """Where a kernel runs: "interpreter" or "gpu"."""

    def __init__(self, name: str):
        self.name = name

    @property
    def gpu(self) -> bool:
        return self.name == "gpu"

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    def launch(self, kernel, grid, *args, **kwargs) -> None:
        """`kernel[grid](*args, **kwargs)`; numpy arrays among `args` receive the results."""
        if not self.gpu:
            with tc.interpret():
                kernel[grid](*args, **kwargs)
            return
        dev = [tc.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
        kernel[grid](*dev, **kwargs)
        tc.synchronize()
        for a, d in zip(args, dev):
            if isinstance(a, np.ndarray):
                a[...] = d.to_numpy()


def storage_dtype(d: dt.DType) -> np.dtype:
    """The numpy dtype a test keeps `d`'s values in (f32 for bf16 and f8)."""
    return np.dtype(np.float32) if d in EMULATED_FLOATS else np.dtype(d.np)


def rounded(values, d: dt.DType) -> np.ndarray:
    """`values` converted to `d` (bf16/f8 rounded to nearest even, held in f32)."""
    return np.asarray(cast(np.asarray(values), d))


def random_ints(rng, d: dt.DType, shape, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(d.np)
    lo = info.min if lo is None else max(lo, info.min)
    hi = info.max if hi is None else min(hi, info.max)
    return rng.integers(lo, hi, size=shape, endpoint=True, dtype=d.np)


def random_floats(rng, d: dt.DType, shape, lo=-4.0, hi=4.0) -> np.ndarray:
    """Uniform values in [lo, hi) rounded to `d` (in `storage_dtype(d)`)."""
    return rounded(rng.uniform(lo, hi, size=shape), d).astype(storage_dtype(d))


def assert_float_close(got, want, d: dt.DType, ulps: float = 1.0, atol: float = 0.0, what: str = ""):
    """`got` within `ulps` units of `d`'s roundoff of the float64 `want`; NaN where it is NaN,
    infinities equal."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=2 * ulps * EPS[d.name], atol=atol, equal_nan=True,
                               err_msg=what)
