"""The accurate math library, JIT-compiled for the host and measured in ulps against numpy
(the bounds are the ones documented in mathlib.py)."""
import math
import zlib

import numpy as np
import pytest
from llvmlite import ir

from hostjit import vectorize
from tilec.lowering.codegen.mathlib import call_math

F32, F64 = ir.FloatType(), ir.DoubleType()
_ERF = np.frompyfunc(math.erf, 1, 1)


def _ulps(got, ref, dt):
    """Error of `got` in units of the last place of the correctly rounded reference."""
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = ref.astype(dt)
        exact = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
        spacing = np.spacing(np.abs(rounded)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref) / spacing
    return np.where(exact, 0.0, err)


def _inputs(name, dt, rng):
    n = 20000
    big = dt == np.float64
    return {
        "exp": rng.uniform(-750, 710, n) if big else rng.uniform(-110, 90, n),
        "exp2": rng.uniform(-1080, 1025, n) if big else rng.uniform(-155, 130, n),
        "log": np.exp(rng.uniform(-700 if big else -100, 700 if big else 88, n)),
        "log2": np.concatenate([np.exp(rng.uniform(-100, 88, n)), rng.uniform(0.5, 2, n)]),
        "sin": np.concatenate([rng.uniform(-10, 10, n), rng.uniform(-1e5, 1e5, n)]),
        "cos": np.concatenate([rng.uniform(-10, 10, n), rng.uniform(-1e5, 1e5, n)]),
        "tanh": np.concatenate([rng.uniform(-25, 25, n), rng.uniform(-1e-3, 1e-3, n)]),
        "sigmoid": rng.uniform(-80, 80, n),
        "erf": np.concatenate([rng.uniform(-7, 7, n), rng.uniform(-1e-3, 1e-3, n)]),
        "sqrt": np.exp(rng.uniform(-80, 80, n)),
        "rsqrt": np.exp(rng.uniform(-80, 80, n)),
    }[name].astype(dt)


_REF = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "sqrt": np.sqrt,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x.astype(np.longdouble))),
    "rsqrt": lambda x: 1 / np.sqrt(x.astype(np.longdouble)),
    "erf": lambda x: _ERF(x).astype(np.float64),
}
# documented maximum errors in ulps: (f32, f64)
_BOUND = {"exp": (1, 1), "exp2": (1, 1), "log": (2, 1), "log2": (2, 1), "sin": (2, 2), "cos": (2, 2),
          "tanh": (3, 3), "sigmoid": (3, 2), "erf": (3, 2), "sqrt": (0, 0), "rsqrt": (2, 1)}


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(_REF))
def test_accuracy(name, dt):
    ty = F32 if dt == np.float32 else F64
    f = vectorize(lambda b, x: call_math(b, name, [x]), 1, ty)
    x = _inputs(name, dt, np.random.default_rng(zlib.crc32(name.encode())))
    with np.errstate(all="ignore"):
        ref = np.asarray(_REF[name](x.astype(np.float64)), dtype=np.float64)
    err = _ulps(f(x), ref, dt)
    bound = _BOUND[name][dt == np.float64]
    assert err.max() <= bound + 0.01, f"{name}: {err.max():.2f} ulp at x={x[err.argmax()]!r}"


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_special_values(dt):
    ty = F32 if dt == np.float32 else F64
    nan, inf = np.nan, np.inf
    cases = {
        "exp": ([-inf, inf, nan, 0.0], [0.0, inf, nan, 1.0]),
        "log": ([0.0, -1.0, inf, nan, 1.0], [-inf, nan, inf, nan, 0.0]),
        "log2": ([8.0, 0.25, 0.0], [3.0, -2.0, -inf]),
        "sin": ([inf, nan, 0.0], [nan, nan, 0.0]),
        "tanh": ([inf, -inf, nan, 0.0], [1.0, -1.0, nan, 0.0]),
        "erf": ([inf, -inf, 0.0], [1.0, -1.0, 0.0]),
        "sigmoid": ([inf, -inf, 0.0], [1.0, 0.0, 0.5]),
    }
    for name, (x, want) in cases.items():
        got = vectorize(lambda b, v, name=name: call_math(b, name, [v]), 1, ty)(np.array(x, dt))
        np.testing.assert_array_equal(got, np.array(want, dt), err_msg=name)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_pow(dt):
    ty = F32 if dt == np.float32 else F64
    f = vectorize(lambda b, x, y: call_math(b, "pow", [x, y]), 2, ty)
    rng = np.random.default_rng(7)
    x, y = rng.uniform(0, 10, 20000).astype(dt), rng.uniform(-30, 30, 20000).astype(dt)
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), y.astype(np.float64))
    err = _ulps(f(x, y), ref, dt)
    # f32 goes through f64; f64 loses about abs(y * log2(x)) ulps (documented)
    assert err.max() <= (1 if dt == np.float32 else 256)
    xs = np.array([-2, -2, -8, 0, 0, 1, -1, np.nan, 2], dt)
    ys = np.array([3, 0.5, 1 / 3, -1, 0, np.nan, np.inf, 0, -np.inf], dt)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(f(xs, ys), np.power(xs, ys))
