"""Casts, shape ops, reductions, scans and dot in the interpreter."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from interp_helpers import T, build, const, dt, load_all, storage, store_all, view
from test_interp_elementwise import FLOAT_TYPES, INT_TYPES, rand_floats, rand_ints, run_ew
from tilec.interpreter import run
from tilec.interpreter.numerics import from_bits, to_bits

ALL = INT_TYPES + FLOAT_TYPES + [dt.bool_]
SHAPES2 = st.sampled_from([(1, 1), (1, 8), (4, 1), (2, 16), (8, 8), (16, 4)])


def rand_values(rng, d, shape, **kw):
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_int:
        return rand_ints(rng, d, shape, **kw)
    return rand_floats(rng, d, shape)


def run_unary(fn, d_in, d_out, x, out_shape):
    """Load x, apply fn(b, tile) -> value, store it (a scalar result is splat to shape (1,))."""
    def body(b, src, dst):
        v = fn(b, load_all(b, src, x.shape))
        if not out_shape:
            v = b.value(T.SplatOp, v, shape=[1])
        store_all(b, dst, v)

    out = np.zeros(out_shape or (1,), d_out.np)
    run(build([view(d_in, x.ndim), view(d_out, max(len(out_shape), 1))], body), [x, out], (1,))
    return out if out_shape else out[0]


# ----------------------------------------------------------------------------- casts
@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.sampled_from(ALL), st.sampled_from(ALL), st.integers(0, 2**32 - 1))
def test_cast_between_every_pair(src, to, seed):
    rng = np.random.default_rng(seed)
    x = rand_values(rng, src, (16,))
    if src.is_float and to.is_int:  # in range: out-of-range float -> int is target defined
        info = np.iinfo(to.np)
        x = storage(src, np.clip(np.nan_to_num(x.astype(np.float64)), max(info.min, -1e4), min(info.max, 1e4)))
    if src.bits == 64 and src.is_int and to.is_float:
        x = x >> 12  # keep int64 sources exact in the float64 reference
    got = run_ew(T.CastOp, src, [x], out_dtype=to, to=to)
    if to.is_bool:
        want = x.astype(np.float64) != 0
    elif to.is_int:
        # integers wrap; floats truncate toward zero
        vals = [int(v) if src.is_int or src.is_bool else math.trunc(float(v)) for v in x.flat]
        want = np.array([(v & ((1 << to.bits) - 1)) for v in vals], dtype=np.uint64).astype(to.np)
    else:
        want = storage(to, x.astype(np.float64))
    np.testing.assert_array_equal(got, want)


def test_cast_rounds_to_nearest_even_and_saturates_like_pytorch():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, -1e-45, 460.0, 464.0, 61440.0, np.inf,
                  464.5, 0, 0, 0, 0, 0, 0, 0], np.float32)
    bf = run_ew(T.CastOp, dt.float32, [x], out_dtype=dt.bfloat16, to=dt.bfloat16)
    assert bf[:3].tolist() == [1.0, 1 + 2**-6, math.inf] and bf[3] == 0 and math.copysign(1, bf[3]) < 0
    e4 = run_ew(T.CastOp, dt.float32, [x], out_dtype=dt.float8e4m3, to=dt.float8e4m3)
    # e4m3fn has no inf: past 464 NaN; 464 is the tie of 448 and 480, to even: 448 (torch, ml_dtypes)
    assert e4[4] == 448.0 and e4[5] == 448.0 and math.isnan(e4[8]) and math.isnan(e4[7])
    e5 = run_ew(T.CastOp, dt.float32, [x], out_dtype=dt.float8e5m2, to=dt.float8e5m2)
    assert e5[4] == 448.0 and e5[6] == math.inf and e5[7] == math.inf


@pytest.mark.parametrize("src,to", [(dt.float32, dt.int32), (dt.int16, dt.float16), (dt.bfloat16, dt.uint16),
                                    (dt.float8e4m3, dt.uint8), (dt.uint8, dt.float8e5m2), (dt.float64, dt.int64)])
def test_bitcast_round_trips_bit_patterns(src, to):
    bits = np.arange(0, 256, dtype=np.uint64).astype(f"u{src.itemsize}") * (1 if src.bits == 8 else 257)
    x = np.asarray(from_bits(bits, src))
    got = run_ew(T.BitcastOp, src, [x], out_dtype=to, to=to)
    back = to_bits(got, to)
    same = back == bits
    if src.is_fp8 or to.is_fp8:  # f8 NaNs are canonicalized
        same |= np.isnan(x.astype(np.float64)) | np.isnan(got.astype(np.float64))
    assert same.all()


# ----------------------------------------------------------------------------- shape ops
def test_shape_ops():
    x = np.arange(32, dtype=np.int16).reshape(4, 8)

    def body(b, src, dst):
        t = load_all(b, src, (4, 8))
        p = b.value(T.PermuteOp, t, order=[1, 0])                       # 8x4
        r = b.value(T.ReshapeOp, p, shape=[4, 8])                       # row-major
        col = b.value(T.ExpandDimsOp, b.value(T.ArangeOp, start=0, end=4), axis=1)  # 4x1 i32
        colb = b.value(T.BroadcastOp, b.value(T.CastOp, col, to=dt.int16), shape=[4, 8])
        s = b.value(T.AddOp, r, colb)
        store_all(b, dst, b.value(T.CatOp, s, t, axis=0))

    out = np.zeros((8, 8), np.int16)
    run(build([view(dt.int16, 2), view(dt.int16, 2)], body), [x, out], (1,))
    want = x.T.reshape(4, 8) + np.arange(4, dtype=np.int16)[:, None]
    np.testing.assert_array_equal(out, np.concatenate([want, x]))


# ----------------------------------------------------------------------------- reductions
def ref_reduce(kind, x, axis, d):
    if kind in ("argmax", "argmin"):
        return getattr(np, kind)(x, axis=axis).astype(np.int32)
    if kind in ("max", "min"):
        return getattr(np, kind)(x, axis=axis)
    if d.is_bool:
        return (np.sum(x, axis=axis) % 2 == 1) if kind == "sum" else np.all(x, axis=axis)
    if d.is_int:  # exact in Python integers, then wrapped
        fn = np.sum if kind == "sum" else np.prod
        v = fn(x.astype(object), axis=axis)
        return np.array([int(e) & ((1 << d.bits) - 1) for e in np.ravel(v)], np.uint64).astype(d.np).reshape(np.shape(v))
    fn = np.sum if kind == "sum" else np.prod
    return storage(d, fn(x.astype(np.float64), axis=axis))


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.sampled_from(["sum", "prod", "max", "min", "argmax", "argmin"]), st.sampled_from(ALL),
       SHAPES2, st.integers(0, 1), st.integers(0, 2**32 - 1))
def test_reduce(kind, d, shape, axis, seed):
    rng = np.random.default_rng(seed)
    x = rand_values(rng, d, shape, small=True) if kind == "prod" else rand_values(rng, d, shape)
    if d.is_float and kind in ("sum", "prod"):
        x = storage(d, np.nan_to_num(rng.uniform(-2, 2, shape)))  # finite, so tolerances apply
    out_d = dt.int32 if kind.startswith("arg") else d
    out_shape = tuple(s for i, s in enumerate(shape) if i != axis)
    got = run_unary(lambda b, t: b.value(T.ReduceOp, t, axis=axis, kind=kind), d, out_d, x, out_shape)
    want = ref_reduce(kind, x, axis, d)
    if d.is_float and kind in ("sum", "prod"):
        tol = {"f8e4m3": 0.13, "f8e5m2": 0.26, "bf16": 2**-7, "f16": 2**-10, "f32": 1e-5, "f64": 1e-12}[d.name]
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                   rtol=tol, atol=tol * shape[axis] * 4)
    else:
        np.testing.assert_array_equal(got, want)


def test_argmax_first_index_on_ties_and_nan():
    x = np.array([[1, 5, 5, 2], [np.nan, 3, np.nan, 9]], np.float32)
    got = run_unary(lambda b, t: b.value(T.ReduceOp, t, axis=1, kind="argmax"), dt.float32, dt.int32, x, (2,))
    assert got.tolist() == [1, 0]
    got = run_unary(lambda b, t: b.value(T.ReduceOp, t, axis=1, kind="max"), dt.float32, dt.float32, x, (2,))
    assert got[0] == 5 and math.isnan(got[1])


def test_f16_sum_accumulates_in_f32():
    x = np.ones(64, np.float16)  # 2048 + 1 is not an f16: a running f16 sum would stay at 2048
    x[0] = 2048.0
    got = run_unary(lambda b, t: b.value(T.ReduceOp, t, axis=0, kind="sum"), dt.float16, dt.float16, x, ())
    assert float(got) == 2112.0


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["sum", "prod", "max", "min"]), st.sampled_from(INT_TYPES + [dt.float32, dt.float64]),
       SHAPES2, st.integers(0, 1), st.booleans(), st.integers(0, 2**32 - 1))
def test_scan(kind, d, shape, axis, reverse, seed):
    rng = np.random.default_rng(seed)
    x = rand_ints(rng, d, shape, small=True) if d.is_int else storage(d, rng.uniform(-2, 2, shape))
    got = run_unary(lambda b, t: b.value(T.ScanOp, t, axis=axis, kind=kind, reverse=reverse), d, d, x, shape)
    src = np.flip(x, axis) if reverse else x
    fn = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate, "min": np.minimum.accumulate}[kind]
    if d.is_int and kind in ("sum", "prod"):
        v = fn(src.astype(object), axis=axis)
        want = np.array([int(e) & ((1 << d.bits) - 1) for e in v.flat], np.uint64).astype(d.np).reshape(shape)
    else:
        want = fn(src.astype(np.float64), axis=axis)
    want = np.flip(want, axis) if reverse else want
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-5 * 16)


def _combiner(d, body_fn):
    def make(b, t):
        from tilec.ir import Block, Region
        blk = Block([t.type.element, t.type.element])
        inner = b.__class__().at_end(blk)
        inner.create(T.YieldOp, body_fn(inner, *blk.args))
        return b.value(T.ReduceGenericOp, t, axis=1, regions=[Region([blk])])
    return make


def test_reduce_generic_tree_order():
    x = np.arange(32, dtype=np.int32).reshape(4, 8) * 3 % 11
    # a non-commutative combiner shows the order: a * 2 + b
    comb = _combiner(dt.int32, lambda b, p, q: b.value(T.AddOp, b.value(T.MulOp, p, const(b, 2, dt.int32)), q))
    got = run_unary(comb, dt.int32, dt.int32, x, (4,))
    want = x.astype(np.int64)
    while want.shape[1] > 1:
        h = want.shape[1] // 2
        want = want[:, :h] * 2 + want[:, h:]
    assert got.tolist() == want[:, 0].tolist()


def test_reduce_generic_with_select_combiner():
    x = np.array([[3, -7, 5, 1], [0, 2, -1, 1]], np.float32)

    def absmax(b, p, q):  # keep the operand with the larger magnitude
        bigger = b.value(T.CmpOp, b.value(T.AbsOp, p), b.value(T.AbsOp, q), pred="ge")
        return b.value(T.SelectOp, bigger, p, q)
    got = run_unary(_combiner(dt.float32, absmax), dt.float32, dt.float32, x, (2,))
    assert got.tolist() == [-7.0, 2.0]


# ----------------------------------------------------------------------------- dot
@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.sampled_from([dt.float16, dt.bfloat16, dt.float32, dt.float8e4m3, dt.float8e5m2]),
       st.sampled_from([(16, 16, 16), (1, 8, 2), (32, 16, 8)]), st.booleans(), st.integers(0, 2**32 - 1))
def test_dot_accumulates_in_f32(d, mkn, tf32, seed):
    m, k, n = mkn
    rng = np.random.default_rng(seed)
    a, b = storage(d, rng.uniform(-2, 2, (m, k))), storage(d, rng.uniform(-2, 2, (k, n)))
    c = rng.uniform(-1, 1, (m, n)).astype(np.float32)

    def body(bld, va, vb, vc, out):
        ta, tb, tc = load_all(bld, va, (m, k)), load_all(bld, vb, (k, n)), load_all(bld, vc, (m, n))
        store_all(bld, out, bld.value(T.DotOp, ta, tb, tc, allow_tf32=tf32))

    out = np.zeros((m, n), np.float32)
    mod = build([view(d, 2), view(d, 2), view(dt.float32, 2), view(dt.float32, 2)], body)
    run(mod, [a, b, c, out], (1,))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if tf32 and d is dt.float32:  # inputs truncated to 10 mantissa bits
        a64, b64 = _tf32(a64), _tf32(b64)
    np.testing.assert_allclose(out, a64 @ b64 + c, rtol=1e-5, atol=1e-5 * k)


def _tf32(v):
    """Truncate to 11 significant bits (toward zero), as the tensor cores read f32 for tf32."""
    mant, e = np.frexp(v)
    return np.ldexp(np.sign(mant) * np.floor(np.abs(mant) * 2**11) / 2**11, e)


def test_dot_int8_accumulates_in_int32_with_wraparound():
    a = np.full((16, 16), 127, np.int8)
    b = np.full((16, 16), 127, np.int8)
    c = np.full((16, 16), 2**31 - 16 * 127 * 127 + 5, np.int32)

    def body(bld, va, vb, vc, out):
        t = bld.value(T.DotOp, load_all(bld, va, (16, 16)), load_all(bld, vb, (16, 16)), load_all(bld, vc, (16, 16)))
        store_all(bld, out, t)

    out = np.zeros((16, 16), np.int32)
    run(build([view(dt.int8, 2)] * 2 + [view(dt.int32, 2)] * 2, body), [a, b, c, out], (1,))
    assert (out == -2**31 + 5).all()
