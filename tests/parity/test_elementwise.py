"""Elementwise ops on both backends against numpy: every integer op over every integer
dtype (wrap-around, Python floor division and modulo signs, shifts past the width),
bool logic, float arithmetic and math functions over every float dtype (bf16 and f8
computed from f32 storage through casts), comparisons, and NaN through where/min/max."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import tilec as tc
from parity_helpers import (EMULATED_FLOATS, INT_DTYPES, NATIVE_FLOATS, assert_float_close, random_floats,
                            random_ints, rounded, storage_dtype)

N = 1000     # four programs of 256, the last one partial
BLOCK = 256

INT_OPS = ("add", "sub", "mul", "floordiv", "mod", "and", "or", "xor", "shl", "shr", "min", "max",
           "neg", "abs", "invert")
CMP_OPS = ("eq", "ne", "lt", "le", "gt", "ge")


@tc.func
def int_op(a, b, s, OP: tc.constexpr):
    if OP == "add":
        r = a + b
    elif OP == "sub":
        r = a - b
    elif OP == "mul":
        r = a * b
    elif OP == "floordiv":
        r = a // b
    elif OP == "mod":
        r = a % b
    elif OP == "and":
        r = a & b
    elif OP == "or":
        r = a | b
    elif OP == "xor":
        r = a ^ b
    elif OP == "shl":
        r = a << s
    elif OP == "shr":
        r = a >> s
    elif OP == "min":
        r = tc.minimum(a, b)
    elif OP == "max":
        r = tc.maximum(a, b)
    elif OP == "neg":
        r = -a
    elif OP == "abs":
        r = abs(a)
    else:
        r = ~a
    return r


@tc.func
def compare(a, b, OP: tc.constexpr):
    if OP == "eq":
        r = a == b
    elif OP == "ne":
        r = a != b
    elif OP == "lt":
        r = a < b
    elif OP == "le":
        r = a <= b
    elif OP == "gt":
        r = a > b
    else:
        r = a >= b
    return r


@tc.kernel
def int_ops_kernel(x, y, s, out, cmp, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    a = tc.load(x.ptr + offs, mask=m, other=1)
    b = tc.load(y.ptr + offs, mask=m, other=1)
    sh = tc.load(s.ptr + offs, mask=m, other=0)
    for i in tc.static_range(len(INT_OPS)):
        tc.store(out.ptr + i * n + offs, int_op(a, b, sh, INT_OPS[i]), mask=m)
    for i in tc.static_range(len(CMP_OPS)):
        tc.store(cmp.ptr + i * n + offs, compare(a, b, CMP_OPS[i]), mask=m)


def _int_inputs(rng, d):
    """Half full-range values (wrap-around), half small ones (signs of // and %); divisors
    nonzero and never MIN // -1; shift amounts up to the width + 2."""
    half = N // 2
    x = np.concatenate([random_ints(rng, d, half), random_ints(rng, d, N - half, -9, 9)])
    y = np.concatenate([random_ints(rng, d, half), random_ints(rng, d, N - half, -9, 9)])
    rng.shuffle(y)
    y[y == 0] = 3
    if d.kind == "i":
        x[(x == np.iinfo(d.np).min) & (y == -1)] += 1
    s = rng.integers(0, d.bits + 3, size=N).astype(d.np)
    return x, y, s


def _int_reference(x, y, s, d):
    bits = d.bits
    amount = np.minimum(s, bits - 1).astype(d.np)
    sign_fill = np.where(x < 0, -1, 0).astype(d.np) if d.kind == "i" else np.zeros_like(x)
    with np.errstate(over="ignore"):
        return {
            "add": x + y, "sub": x - y, "mul": x * y,
            "floordiv": np.floor_divide(x, y), "mod": np.remainder(x, y),
            "and": x & y, "or": x | y, "xor": x ^ y,
            "shl": np.where(s >= bits, 0, np.left_shift(x, amount)).astype(d.np),
            "shr": np.where(s >= bits, sign_fill, np.right_shift(x, amount)).astype(d.np),
            "min": np.minimum(x, y), "max": np.maximum(x, y),
            "neg": (0 - x).astype(d.np), "abs": np.where(x < 0, 0 - x, x).astype(d.np), "invert": ~x,
        }


@pytest.mark.parametrize("d", INT_DTYPES, ids=str)
def test_integer_ops_and_comparisons(backend, d):
    rng = np.random.default_rng(d.bits * 7 + (d.kind == "u"))
    x, y, s = _int_inputs(rng, d)
    out = np.zeros((len(INT_OPS), N), d.np)
    cmp = np.zeros((len(CMP_OPS), N), np.bool_)
    backend.launch(int_ops_kernel, (tc.cdiv(N, BLOCK),), x, y, s, out, cmp, N, BLOCK=BLOCK)
    want = _int_reference(x, y, s, d)
    for i, op in enumerate(INT_OPS):
        np.testing.assert_array_equal(out[i], want[op], err_msg=f"{op} on {d}")
    cmp_want = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}
    for i, op in enumerate(CMP_OPS):
        np.testing.assert_array_equal(cmp[i], cmp_want[op], err_msg=f"{op} on {d}")


@tc.kernel
def int_pow_kernel(x, out, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,))
    p = t ** 2
    tc.static_assert(p.dtype == tc.float32, "** computes in floats, as /")
    tc.store(out, index=(0,), tile=p)
    tc.store(out, index=(1,), tile=2 ** t)


def test_integer_power_is_a_float(backend):
    """`**` converts integer operands to f32 like `/` (docs/language.md, "Division and
    powers"): `x ** 2` and `2 ** x` of an i32 tile are f32 tiles (pow to within 2 ulps)."""
    x = np.arange(-8, 8, dtype=np.int32) * 3
    out = np.zeros(32, np.float32)
    backend.launch(int_pow_kernel, (1,), x, out, BLOCK=16)
    np.testing.assert_allclose(out[:16], x.astype(np.float64) ** 2, rtol=2.0 ** -22)
    np.testing.assert_allclose(out[16:], 2.0 ** x.astype(np.float64), rtol=2.0 ** -22)


BOOL_OPS = ("and", "or", "xor", "eq", "ne", "where")


@tc.kernel
def bool_ops_kernel(x, y, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    a = tc.load(x.ptr + offs, mask=m, other=False)
    b = tc.load(y.ptr + offs, mask=m, other=False)
    tc.store(out.ptr + offs, a & b, mask=m)
    tc.store(out.ptr + n + offs, a | b, mask=m)
    tc.store(out.ptr + 2 * n + offs, a ^ b, mask=m)
    tc.store(out.ptr + 3 * n + offs, a == b, mask=m)
    tc.store(out.ptr + 4 * n + offs, a != b, mask=m)
    tc.store(out.ptr + 5 * n + offs, tc.where(a, b, ~b), mask=m)


def test_bool_logic(backend):
    rng = np.random.default_rng(5)
    x, y = rng.random(N) < 0.5, rng.random(N) < 0.3
    out = np.zeros((len(BOOL_OPS), N), np.bool_)
    backend.launch(bool_ops_kernel, (tc.cdiv(N, BLOCK),), x, y, out, N, BLOCK=BLOCK)
    want = [x & y, x | y, x ^ y, x == y, x != y, np.where(x, y, ~y)]
    for i, op in enumerate(BOOL_OPS):
        np.testing.assert_array_equal(out[i], want[i], err_msg=op)


# ----------------------------------------------------------------------------- floats
# (name, operands, units of roundoff allowed, absolute slack in units of roundoff)
FLOAT_OPS = (
    ("add", 2, 0, 0), ("sub", 2, 0, 0), ("mul", 2, 0, 0), ("div", 2, 1, 0), ("floordiv", 2, 0, 0),
    ("mod", 2, 0, 0), ("min", 2, 0, 0), ("max", 2, 0, 0), ("neg", 1, 0, 0), ("abs", 1, 0, 0),
    ("fma", 3, 0, 0), ("clamp", 1, 0, 0), ("where", 2, 0, 0), ("floor", 1, 0, 0), ("ceil", 1, 0, 0),
)
MATH_OPS = (
    ("exp", 1, 4, 0), ("exp2", 1, 4, 0), ("log", 1, 4, 4), ("log2", 1, 4, 4), ("sqrt", 1, 1, 0),
    ("rsqrt", 1, 2, 0), ("sin", 1, 4, 4), ("cos", 1, 4, 4), ("tanh", 1, 4, 4), ("sigmoid", 1, 4, 4),
    ("erf", 1, 4, 4), ("pow", 2, 16, 4),
)
FLOAT_NAMES = tuple(op[0] for op in FLOAT_OPS)
MATH_NAMES = tuple(op[0] for op in MATH_OPS)


@tc.func
def float_op(a, b, c, p, OP: tc.constexpr):
    """`p` is positive: the operand of log, sqrt, rsqrt and pow's base."""
    if OP == "add":
        r = a + b
    elif OP == "sub":
        r = a - b
    elif OP == "mul":
        r = a * b
    elif OP == "div":
        r = a / b
    elif OP == "floordiv":
        r = a // b
    elif OP == "mod":
        r = a % b
    elif OP == "min":
        r = tc.minimum(a, b)
    elif OP == "max":
        r = tc.maximum(a, b)
    elif OP == "neg":
        r = -a
    elif OP == "abs":
        r = abs(a)
    elif OP == "fma":
        r = tc.fma(a, b, c)
    elif OP == "clamp":
        r = tc.clamp(a, -1.5, 2.0)
    elif OP == "where":
        r = tc.where(a > b, a, b * 2)
    elif OP == "floor":
        r = tc.floor(a)
    elif OP == "ceil":
        r = tc.ceil(a)
    elif OP == "exp":
        r = tc.exp(a)
    elif OP == "exp2":
        r = tc.exp2(a)
    elif OP == "log":
        r = tc.log(p)
    elif OP == "log2":
        r = tc.log2(p)
    elif OP == "sqrt":
        r = tc.sqrt(p)
    elif OP == "rsqrt":
        r = tc.rsqrt(p)
    elif OP == "sin":
        r = tc.sin(a)
    elif OP == "cos":
        r = tc.cos(a)
    elif OP == "tanh":
        r = tc.tanh(a)
    elif OP == "sigmoid":
        r = tc.sigmoid(a)
    elif OP == "erf":
        r = tc.erf(a)
    else:
        r = p ** b
    return r


@tc.kernel
def float_ops_kernel(x, y, z, q, out, cmp, n, OPS: tc.constexpr, COMPUTE: tc.constexpr,
                     BLOCK: tc.constexpr):
    """Loads from storage, converts to COMPUTE (bf16/f8 live in f32 arrays), applies each
    op and stores it converted back to the storage dtype."""
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    a = tc.load(x.ptr + offs, mask=m, other=1.0).astype(COMPUTE)
    b = tc.load(y.ptr + offs, mask=m, other=1.0).astype(COMPUTE)
    c = tc.load(z.ptr + offs, mask=m, other=1.0).astype(COMPUTE)
    p = tc.load(q.ptr + offs, mask=m, other=1.0).astype(COMPUTE)
    for i in tc.static_range(len(OPS)):
        tc.store(out.ptr + i * n + offs, float_op(a, b, c, p, OPS[i]).astype(out.dtype), mask=m)
    for i in tc.static_range(len(CMP_OPS)):
        tc.store(cmp.ptr + i * n + offs, compare(a, b, CMP_OPS[i]), mask=m)


def _float_reference(op, a, b, c, p):
    """float64 results on the (already rounded) float64 operands."""
    with np.errstate(all="ignore"):
        return {
            "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
            "floordiv": lambda: np.floor_divide(a, b), "mod": lambda: np.remainder(a, b),
            "min": lambda: np.minimum(a, b), "max": lambda: np.maximum(a, b), "neg": lambda: -a,
            "abs": lambda: np.abs(a), "fma": lambda: exact_fma(a, b, c), "clamp": lambda: np.clip(a, -1.5, 2.0),
            "where": lambda: np.where(a > b, a, b * 2), "floor": lambda: np.floor(a), "ceil": lambda: np.ceil(a),
            "exp": lambda: np.exp(a), "exp2": lambda: np.exp2(a), "log": lambda: np.log(p),
            "log2": lambda: np.log2(p), "sqrt": lambda: np.sqrt(p), "rsqrt": lambda: 1 / np.sqrt(p),
            "sin": lambda: np.sin(a), "cos": lambda: np.cos(a), "tanh": lambda: np.tanh(a),
            "sigmoid": lambda: 1 / (1 + np.exp(-a)), "erf": lambda: _erf(a), "pow": lambda: p ** b,
        }[op]()


def exact_fma(a, b, c):
    """a * b + c with one rounding to float64 (exact rational arithmetic, then float())."""
    return np.array([float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)])


def _erf(x):
    import math
    return np.vectorize(math.erf)(x)


def _run_float_ops(backend, d, ops, seed):
    rng = np.random.default_rng(seed)
    x, y, z = (random_floats(rng, d, N) for _ in range(3))
    y = np.where(np.abs(y) < 0.125, np.asarray(0.5, y.dtype), y)  # no division by (almost) zero
    q = random_floats(rng, d, N, 0.0625, 8.0)
    names = tuple(op[0] for op in ops)
    out = np.zeros((len(ops), N), storage_dtype(d))
    cmp = np.zeros((len(CMP_OPS), N), np.bool_)
    backend.launch(float_ops_kernel, (tc.cdiv(N, BLOCK),), x, y, z, q, out, cmp, N,
                   OPS=names, COMPUTE=d, BLOCK=BLOCK)
    a, b, c, p = (v.astype(np.float64) for v in (x, y, z, q))
    for i, (op, _, ulps, slack) in enumerate(ops):
        want = rounded(_float_reference(op, a, b, c, p), d).astype(np.float64)
        assert_float_close(out[i], want, d, ulps=ulps, atol=slack * 2 * 2.0**-24, what=f"{op} on {d}")
    cmp_want = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}
    for i, op in enumerate(CMP_OPS):
        np.testing.assert_array_equal(cmp[i], cmp_want[op], err_msg=f"{op} on {d}")


@pytest.mark.parametrize("d", NATIVE_FLOATS + EMULATED_FLOATS, ids=str)
def test_float_arithmetic(backend, d):
    _run_float_ops(backend, d, FLOAT_OPS, seed=11 + d.bits)


@pytest.mark.parametrize("d", [tc.float16, tc.bfloat16, tc.float32, tc.float64], ids=str)
def test_math_functions(backend, d):
    _run_float_ops(backend, d, MATH_OPS, seed=23 + d.bits)


@tc.kernel
def fma_kernel(x, y, z, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    a = tc.load(x.ptr + offs, mask=m, other=0.0)
    b = tc.load(y.ptr + offs, mask=m, other=0.0)
    c = tc.load(z.ptr + offs, mask=m, other=0.0)
    tc.store(out.ptr + offs, tc.fma(a, b, c), mask=m)


@pytest.mark.parametrize("where", [
    "interpreter",
    pytest.param("gpu", marks=pytest.mark.gpu)])
def test_f64_fma_rounds_once(where):
    from parity_helpers import Backend
    rng = np.random.default_rng(31)
    x, y, z = (rng.uniform(-4, 4, N) for _ in range(3))
    out = np.zeros(N)
    Backend(where).launch(fma_kernel, (tc.cdiv(N, BLOCK),), x, y, z, out, N, BLOCK=BLOCK)
    np.testing.assert_array_equal(out, exact_fma(x, y, z))


@tc.kernel
def nan_kernel(x, y, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    a = tc.load(x.ptr + offs, mask=m, other=0.0)
    b = tc.load(y.ptr + offs, mask=m, other=0.0)
    tc.store(out.ptr + offs, tc.minimum(a, b), mask=m)
    tc.store(out.ptr + n + offs, tc.maximum(a, b), mask=m)
    tc.store(out.ptr + 2 * n + offs, tc.where(a < b, a, b), mask=m)
    tc.store(out.ptr + 3 * n + offs, tc.where(a != a, b, a), mask=m)
    tc.store(out.ptr + 4 * n + offs, tc.clamp(a, -1.0, 1.0), mask=m)


@pytest.mark.parametrize("np_dtype", [np.float16, np.float32, np.float64])
def test_nan_and_inf_through_where_minimum_maximum(backend, np_dtype):
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 3.0], np_dtype)
    x = np.repeat(specials, len(specials))
    y = np.tile(specials, len(specials))
    n = len(x)  # 64 pairs, in programs of 32 elements
    out = np.zeros((5, n), np_dtype)
    backend.launch(nan_kernel, (tc.cdiv(n, 32),), x, y, out, n, BLOCK=32)
    want = [np.minimum(x, y), np.maximum(x, y), np.where(x < y, x, y), np.where(np.isnan(x), y, x),
            np.clip(x, -1.0, 1.0)]
    for i, name in enumerate(["minimum", "maximum", "where(<)", "where(isnan)", "clamp"]):
        np.testing.assert_array_equal(out[i], want[i], err_msg=name)
