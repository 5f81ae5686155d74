"""Elementwise ops of the interpreter against independent references, on random shapes
and values of every dtype."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from interp_helpers import T, build, const, dt, load_all, scalar, storage, store_all, tile, view
from tilec.interpreter import run

INT_TYPES = [dt.int8, dt.int16, dt.int32, dt.int64, dt.uint8, dt.uint16, dt.uint32, dt.uint64]
FLOAT_TYPES = [dt.float16, dt.bfloat16, dt.float32, dt.float64, dt.float8e4m3, dt.float8e5m2]
SHAPES = st.sampled_from([(1,), (4,), (32,), (2, 8), (4, 4), (1, 16), (2, 2, 4)])
# one unit in the last place, relative, of each float type (transcendentals may be off by one)
ULP = {"f16": 2**-10, "bf16": 2**-7, "f32": 2**-21, "f64": 2**-48, "f8e4m3": 2**-3, "f8e5m2": 2**-2}


def run_ew(op_class, d, inputs, out_dtype=None, **attrs):
    """Load every input tile, apply the op, store the result; return the result array."""
    shape = inputs[0].shape
    out_d = out_dtype or d

    def body(b, *views):
        tiles = [load_all(b, v, shape) for v in views[:-1]]
        store_all(b, views[-1], b.value(op_class, *tiles, **attrs))

    m = build([view(d, len(shape))] * len(inputs) + [view(out_d, len(shape))], body)
    out = np.zeros(shape, out_d.np)
    run(m, [np.ascontiguousarray(x) for x in inputs] + [out], (1,))
    return out


def rand_ints(rng, d, shape, small=False):
    info = np.iinfo(d.np)
    lo, hi = (max(info.min, -9), min(info.max, 9)) if small else (info.min, info.max)
    return rng.integers(lo, hi, size=shape, endpoint=True, dtype=d.np)


def rand_floats(rng, d, shape, specials=True, scale=None):
    top = {"f8e4m3": 8, "f8e5m2": 14, "f16": 14, "bf16": 30, "f32": 30, "f64": 60}[d.name]
    mag = np.exp2(rng.uniform(-top / 2, top / 2 if scale is None else scale, size=shape))
    x = mag * rng.choice([-1.0, 1.0], size=shape)
    if specials:
        pick = rng.random(shape)
        x = np.where(pick < 0.05, 0.0, x)
        x = np.where((pick > 0.05) & (pick < 0.08), np.inf * np.sign(x), x)
        if d is not dt.float8e4m3:  # e4m3 has no inf: the conversion gives NaN
            x = np.where((pick > 0.08) & (pick < 0.1), np.nan, x)
    return storage(d, x)


def wrap(v: int, d) -> int:
    v &= (1 << d.bits) - 1
    return v - (1 << d.bits) if d.kind == "i" and v >= 1 << (d.bits - 1) else v


def _shl(a, b, d):
    n = b % (1 << d.bits)
    return 0 if n >= d.bits else a << n


def _shr(a, b, d):
    n = b % (1 << d.bits)
    return (-1 if a < 0 else 0) if n >= d.bits else a >> n


INT_REF = {
    T.AddOp: lambda a, b, d: a + b, T.SubOp: lambda a, b, d: a - b, T.MulOp: lambda a, b, d: a * b,
    T.FloorDivOp: lambda a, b, d: a // b if b else 0, T.ModOp: lambda a, b, d: a % b if b else 0,
    T.MinimumOp: lambda a, b, d: min(a, b), T.MaximumOp: lambda a, b, d: max(a, b),
    T.AndOp: lambda a, b, d: a & b, T.OrOp: lambda a, b, d: a | b, T.XorOp: lambda a, b, d: a ^ b,
    T.ShlOp: _shl, T.ShrOp: _shr,
}
INT_UNARY_REF = {T.NegOp: lambda a: -a, T.InvertOp: lambda a: ~a, T.AbsOp: abs}


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.sampled_from(sorted(INT_REF, key=lambda c: c.name)), st.sampled_from(INT_TYPES),
       SHAPES, st.integers(0, 2**32 - 1), st.booleans())
def test_integer_binary_ops_wrap(op_class, d, shape, seed, small):
    rng = np.random.default_rng(seed)
    a = rand_ints(rng, d, shape, small)
    b = rand_ints(rng, d, shape, small or op_class in (T.ShlOp, T.ShrOp) and rng.random() < 0.7)
    got = run_ew(op_class, d, [a, b])
    want = np.array([wrap(INT_REF[op_class](int(x), int(y), d), d) for x, y in zip(a.flat, b.flat)],
                    dtype=object).reshape(shape)
    assert got.tolist() == want.tolist()


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.sampled_from([T.NegOp, T.InvertOp, T.AbsOp]), st.sampled_from(INT_TYPES), SHAPES,
       st.integers(0, 2**32 - 1))
def test_integer_unary_ops_wrap(op_class, d, shape, seed):
    a = rand_ints(np.random.default_rng(seed), d, shape)
    a.flat[0] = np.iinfo(d.np).min  # abs/neg of the most negative value wrap to itself
    got = run_ew(op_class, d, [a])
    want = [wrap(INT_UNARY_REF[op_class](int(x)), d) for x in a.flat]
    assert got.ravel().tolist() == want


BOOL_REF = {
    T.AddOp: lambda a, b: (a + b) % 2, T.SubOp: lambda a, b: (a - b) % 2, T.MulOp: lambda a, b: a * b,
    T.FloorDivOp: lambda a, b: a // b if b else 0, T.ModOp: lambda a, b: a % b if b else 0,
    T.MinimumOp: min, T.MaximumOp: max, T.AndOp: lambda a, b: a & b, T.OrOp: lambda a, b: a | b,
    T.XorOp: lambda a, b: a ^ b,
}


@pytest.mark.parametrize("op_class", sorted(BOOL_REF, key=lambda c: c.name), ids=lambda c: c.name)
def test_bool_ops_are_arithmetic_modulo_two(op_class):
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    got = run_ew(op_class, dt.bool_, [a, b])
    assert got.tolist() == [bool(BOOL_REF[op_class](int(x), int(y))) for x, y in zip(a, b)]


def test_bool_unary_ops():
    a = np.array([False, True, True, False])
    assert run_ew(T.InvertOp, dt.bool_, [a]).tolist() == [True, False, False, True]
    assert run_ew(T.NegOp, dt.bool_, [a]).tolist() == a.tolist()
    assert run_ew(T.AbsOp, dt.bool_, [a]).tolist() == a.tolist()


FLOAT_EXACT = {T.AddOp: np.add, T.SubOp: np.subtract, T.MulOp: np.multiply, T.DivOp: np.divide,
               T.MinimumOp: np.minimum, T.MaximumOp: np.maximum}


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.sampled_from(sorted(FLOAT_EXACT, key=lambda c: c.name)), st.sampled_from(FLOAT_TYPES),
       SHAPES, st.integers(0, 2**32 - 1))
def test_float_basic_ops_are_correctly_rounded(op_class, d, shape, seed):
    rng = np.random.default_rng(seed)
    a, b = rand_floats(rng, d, shape), rand_floats(rng, d, shape)
    got = run_ew(op_class, d, [a, b])
    want = storage(d, FLOAT_EXACT[op_class](a.astype(np.float64), b.astype(np.float64)))
    np.testing.assert_array_equal(got, want)
    assert got.dtype == d.np


FLOAT_UNARY = {
    T.ExpOp: (np.exp, 3), T.Exp2Op: (np.exp2, 3), T.LogOp: (np.log, None), T.Log2Op: (np.log2, None),
    T.SqrtOp: (np.sqrt, None), T.RsqrtOp: (lambda x: 1 / np.sqrt(x), None), T.SinOp: (np.sin, 2),
    T.CosOp: (np.cos, 2), T.TanhOp: (np.tanh, 3), T.SigmoidOp: (lambda x: 1 / (1 + np.exp(-x)), 3),
    T.ErfOp: (np.vectorize(math.erf, otypes=[float]), 2), T.FloorOp: (np.floor, None),
    T.CeilOp: (np.ceil, None), T.NegOp: (np.negative, None), T.AbsOp: (np.abs, None),
}


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(FLOAT_UNARY, key=lambda c: c.name)), st.sampled_from(FLOAT_TYPES),
       SHAPES, st.integers(0, 2**32 - 1))
def test_float_unary_ops_within_one_ulp(op_class, d, shape, seed):
    fn, scale = FLOAT_UNARY[op_class]
    rng = np.random.default_rng(seed)
    a = rand_floats(rng, d, shape, scale=scale)
    got = run_ew(op_class, d, [a]).astype(np.float64)
    want = storage(d, fn(a.astype(np.float64))).astype(np.float64)
    # one ulp of the type; sin/cos of large arguments lose absolute accuracy in f32
    atol = 4 * ULP[d.name] * (np.abs(a.astype(np.float64)) if op_class in (T.SinOp, T.CosOp) else 0) + 1e-30
    with np.errstate(invalid="ignore"):
        close = (got == want) | (np.abs(got - want) <= atol + 1.01 * ULP[d.name] * np.abs(want))
    close |= np.isnan(got) & np.isnan(want)
    assert close.all(), (a[~close], got[~close], want[~close])


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.sampled_from(FLOAT_TYPES), SHAPES, st.integers(0, 2**32 - 1))
def test_fma_rounds_once(d, shape, seed):
    rng = np.random.default_rng(seed)
    a, b, c = (rand_floats(rng, d, shape, specials=False) for _ in range(3))
    got = run_ew(T.FmaOp, d, [a, b, c])
    # compare against exact rationals: no neighbour of the result is closer
    from fractions import Fraction
    for g, x, y, z in zip(got.ravel(), a.flat, b.flat, c.flat):
        e = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        g = float(g)
        assert math.isfinite(g)
        for direction in (+1, -1):  # no neighbour of the result is closer to the exact value
            n = _next(d, g, direction)
            if math.isfinite(n):
                assert abs(Fraction(g) - e) <= abs(Fraction(n) - e)


def _next(d, x, direction):
    """The neighbour of x in type d (one step in the given direction)."""
    from tilec.interpreter.numerics import from_bits, to_bits
    bits = int(to_bits(np.asarray(x, d.np), d))
    sign = -1 if math.copysign(1.0, x) < 0 else 1
    if x == 0:
        return direction * float(from_bits(np.asarray(1, f"u{max(d.bits, 8) // 8}"), d))
    step = direction * sign
    return float(from_bits(np.asarray(bits + step, np.uint64).astype(f"u{max(d.bits, 8) // 8}"), d))


def test_float_floordiv_and_mod_follow_python():
    a = np.array([7.0, -7.0, 7.0, -7.0, 1.0, 5.5, -0.5, 3.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 0.5, 4.0, 3.0], np.float32)
    assert run_ew(T.FloorDivOp, dt.float32, [a, b]).tolist() == [3.0, -4.0, -4.0, 3.0, math.inf, 11.0, -1.0, 1.0]
    assert run_ew(T.ModOp, dt.float32, [a, b])[:4].tolist() == [1.0, 1.0, -1.0, -1.0]


def test_pow_and_division_by_zero_are_ieee():
    a = np.array([2.0, -1.0, 0.0, 3.0], np.float32)
    b = np.array([10.0, 0.0, 0.0, 0.5], np.float32)
    div = run_ew(T.DivOp, dt.float32, [a, b])
    assert div[1] == -math.inf and math.isnan(div[2])
    np.testing.assert_allclose(run_ew(T.PowOp, dt.float32, [a, b]), [1024.0, 1.0, 1.0, math.sqrt(3)], rtol=1e-7)


@pytest.mark.parametrize("pred,fn", [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                                     ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)])
@pytest.mark.parametrize("d", [dt.int8, dt.uint32, dt.float32, dt.bfloat16, dt.bool_])
def test_comparisons(pred, fn, d):
    rng = np.random.default_rng(1)
    if d.is_bool:
        a, b = rng.random(16) < 0.5, rng.random(16) < 0.5
    elif d.is_int:
        a, b = rand_ints(rng, d, (16,), small=True), rand_ints(rng, d, (16,), small=True)
    else:
        a, b = rand_floats(rng, d, (16,)), rand_floats(rng, d, (16,))
        b[:4] = a[:4]
    got = run_ew(T.CmpOp, d, [a, b], out_dtype=dt.bool_, pred=pred)
    np.testing.assert_array_equal(got, fn(a, b))


def test_scalar_ops_and_select():
    def body(b, out, x, y):
        s = b.value(T.AddOp, x, y)  # scalar i32 arithmetic wraps
        c = b.value(T.CmpOp, x, y, pred="gt")
        pick = b.value(T.SelectOp, c, x, y)
        big = b.value(T.SelectOp, b.value(T.SplatOp, c, shape=[4]),
                      const(b, 1, dt.int32, [4]), const(b, 2, dt.int32, [4]))
        both = b.value(T.CatOp, b.value(T.SplatOp, s, shape=[2]),
                       b.value(T.SplatOp, pick, shape=[2]), axis=0)
        store_all(b, out, b.value(T.CatOp, both, big, axis=0))

    m = build([view(dt.int32, 1), scalar(dt.int32), scalar(dt.int32)], body)
    out = np.zeros(8, np.int32)
    run(m, [out, 2**31 - 1, 5], (1,))
    assert out.tolist() == [-2**31 + 4] * 2 + [2**31 - 1] * 2 + [1] * 4
    run(m, [out, 3, 5], (1,))
    assert out.tolist() == [8, 8, 5, 5, 2, 2, 2, 2]


def _round_int_bf16(v: int) -> float:
    """v rounded once to bf16 (8 significant bits, ties to even), exactly, with Python ints."""
    m, n = abs(v), abs(v).bit_length()
    if n <= 8:
        return float(v)
    q, r = divmod(m, 1 << (n - 8))
    half = 1 << (n - 9)
    if r > half or (r == half and q & 1):
        q += 1
    return float((-1 if v < 0 else 1) * q * (1 << (n - 8)))


def test_cast_of_wide_integers_to_bf16_rounds_once():
    # Found by the fuzzer's review of casts (tests/fuzz): int64 -> f64 -> bf16 rounded twice, so
    # 2**62 + 2**54 + 1 (just above a bf16 tie) went down to 2**62 instead of up.
    from tilec import dtypes as dt
    from tilec.interpreter.numerics import cast
    vals = [2**62 + 2**54 + 1, -(2**62 + 2**54 + 1), 2**62 + 2**54, 2**63 - 1, -2**63, 2**53 + 1,
            2**30 + 2**22 + 1, 12345, 0, -1]
    got = cast(np.array(vals, np.int64), dt.bfloat16)
    assert [float(g) for g in got] == [_round_int_bf16(v) for v in vals]
    uvals = [2**64 - 1, 2**63 + 2**55 + 1, 2**63 + 2**55, 7]
    got = cast(np.array(uvals, np.uint64), dt.bfloat16)
    assert [float(g) for g in got] == [_round_int_bf16(v) for v in uvals]
    assert float(cast(np.int64(2**62 + 2**54 + 1), dt.bfloat16)) == 2.0**62 + 2.0**55   # scalars too
