"""Backward kernels on the CPU interpreter: their plans (no launch), analytic float64 numpy
references on odd shapes in f32/f16/bf16, and central finite differences of float64
forward references on small cases (the references themselves are thereby checked)."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import backward as B
CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
from tilec.stdlib_kernels.launches import spec
from tilec.stdlib_kernels.schedules import LOOPED, ONE_TILE, SPLIT
from tilec.target import Target
import tilec as tc

from launch_spy import retune

erf = np.vectorize(math.erf)    # (no scipy among the test dependencies)
H100 = Target.from_arch("sm_90a")
A100 = Target.from_arch("sm_80")


# ----------------------------------------------------------------------------- float64 references
def softmax64(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def ref_softmax_bwd(dy, y, log):
    if log:
        return dy - np.exp(y) * dy.sum(-1, keepdims=True)
    return y * (dy - (dy * y).sum(-1, keepdims=True))


def ln64(x, w, b, eps, rms):
    if rms:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    else:
        y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1.0 if w is None else w) + (0.0 if b is None else b)


def ref_norm_bwd(dy, x, w, eps, rms):
    n = x.shape[-1]
    mean = 0.0 if rms else x.mean(-1, keepdims=True)
    var = (x * x).mean(-1, keepdims=True) if rms else x.var(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    g = dy * (1.0 if w is None else w)
    dx = g - xhat * (g * xhat).mean(-1, keepdims=True)
    if not rms:
        dx = dx - g.mean(-1, keepdims=True)
    return dx * rstd, (dy * xhat).reshape(-1, n).sum(0), dy.reshape(-1, n).sum(0)


def numeric_grad(f, x, h=1e-6):
    """d f / d x (f scalar, float64) by central differences."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + h
        fp = f(x)
        x[i] = old - h
        fm = f(x)
        x[i] = old
        g[i] = (fp - fm) / (2 * h)
    return g


# ----------------------------------------------------------------------------- plans
def _scheds(launches):
    return [(ln.name, ln.schedule) for ln in launches]


@pytest.mark.parametrize("target", [H100, A100])
def test_softmax_backward_plans(target):
    f32 = tc.float32
    one = B.softmax_backward_plan(spec((5, 3, 1000), f32), False, target)
    assert _scheds(one) == [("softmax_bwd_tile_kernel", ONE_TILE)]
    assert one[0].consts == {"LOG": False, "ROWS": 2, "BLOCK": 1024} and one[0].grid == (8,)
    looped = B.softmax_backward_plan(spec((300, 20000), tc.bfloat16), True, target)
    assert _scheds(looped) == [("softmax_bwd_loop_kernel", LOOPED)] and looped[0].grid == (300,)
    split = B.softmax_backward_plan(spec((2, 100000), f32), False, target)
    assert _scheds(split) == [("softmax_bwd_partial_kernel", SPLIT), ("softmax_bwd_finish_kernel", SPLIT)]
    chunks = split[0].grid[1]
    per = split[0].args[3]
    assert chunks >= 2 and (chunks - 1) * per < math.ceil(100000 / 4096) <= chunks * per
    assert split[1].consts["CHUNKS"] >= chunks
    assert B.softmax_backward_plan(spec((0, 7), f32), False, target) == []


@pytest.mark.parametrize("target", [H100, A100])
def test_norm_backward_plans(target):
    f32 = tc.float32
    tile = B.norm_backward_plan(spec((1000, 3000), f32), False, True, True, target)
    assert _scheds(tile) == [("norm_bwd_tile_kernel", ONE_TILE), ("norm_bwd_reduce_kernel", "reduce")]
    programs = 2 * target.sm_count
    assert tile[0].grid == (programs,)
    assert [t.shape for t in tile[0].temps] == [(programs, 4096), (programs, 4096)]
    assert tile[1].grid == (math.ceil(3000 / 256),) and tile[1].consts["BC"] == 256
    # no weight, no bias: no partials, no reduction
    bare = B.norm_backward_plan(spec((7, 33), f32), True, False, False, target)
    assert _scheds(bare) == [("norm_bwd_tile_kernel", ONE_TILE)] and bare[0].temps == ()
    assert bare[0].grid == (1,) and bare[0].consts["ROWS"] == 8
    looped = B.norm_backward_plan(spec((3, 9001), tc.bfloat16), True, True, False, target)
    assert _scheds(looped) == [("norm_bwd_stats_kernel", LOOPED), ("norm_bwd_cols_kernel", LOOPED),
                               ("norm_bwd_reduce_kernel", "reduce")]
    assert looped[0].grid == (3,) and looped[1].grid == (3, 3)
    assert [t.name for t in looped[1].temps] == ["c1", "c2", "dw_part"] and looped[1].temps[2].shape == (3, 3 * 4096)
    many = B.norm_backward_plan(spec((1000, 20000), tc.float32), False, True, True, target)
    assert many[1].grid == (math.ceil(2 * target.sm_count / 5), 5)


@pytest.mark.parametrize("target", [H100, A100])
def test_cross_entropy_grad_plans(target):
    lab = spec((40,), tc.int64)
    one = CE.plan(spec((40, 1000), tc.bfloat16), lab, "mean", target, grad=True)
    assert _scheds(one) == [("ce_scale_kernel", "scale"), ("ce_grad_tile_kernel", ONE_TILE),
                            ("ce_reduce_kernel", "reduce")]
    split = CE.plan(spec((40, 70001), tc.float32), lab, "none", target, grad=True)
    assert _scheds(split) == [("ce_scale_kernel", "scale"), ("ce_loop_kernel", SPLIT), ("ce_combine_kernel", SPLIT),
                              ("ce_grad_chunk_kernel", SPLIT)]
    # the gradient's chunks are the partials' chunks: 4 tiles per step
    assert split[3].grid == split[1].grid and split[3].args[-1] == 4 * split[1].args[-1]
    assert split[3].consts["BLOCK"] == split[1].consts["BLOCK"] and split[1].consts["WINDOW"] == 0
    big = CE.plan(spec((2000, 20000), tc.bfloat16), spec((2000,), tc.int64), "sum", target, grad=True)
    assert _scheds(big) == [("ce_scale_kernel", "scale"), ("ce_grad_loop_kernel", LOOPED),
                            ("ce_reduce_kernel", "reduce")]
    # the forward alone is unchanged
    assert "ce_scale_kernel" not in [n for n, _ in _scheds(CE.plan(spec((40, 1000), tc.bfloat16), lab, "mean",
                                                                     target))]


# ----------------------------------------------------------------------------- softmax
SOFTMAX_SHAPES = [(1,), (3, 7), (2, 3, 33), (5, 1000), (3, 4099), (2, 20001)]   # the last: SPLIT


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_matches_float64(rowwise, shape, dtype, log):
    rng = np.random.default_rng(sum(shape) + log)
    x = 3 * rng.standard_normal(shape)
    y = rowwise.host((np.log(softmax64(x)) if log else softmax64(x)), dtype)
    dy = rowwise.host(rng.standard_normal(shape), dtype)
    got = (B.log_softmax_backward if log else B.softmax_backward)(dy, y)
    assert type(got) is type(dy)
    want = ref_softmax_bwd(rowwise.f64(dy), rowwise.f64(y), log)
    # the row's sum is over n terms of |dy|: scale atol with sqrt(n)
    rowwise.close(got, want, dtype, scale=max(1.0, math.sqrt(shape[-1]) / 4))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_looped_rows(monkeypatch, log):
    retune(monkeypatch, "softmax", split_rows=1)      # two long rows: one program each
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16385 + 4096))
    y = (np.log(softmax64(x)) if log else softmax64(x)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    launches = B.softmax_backward_plan(spec(x.shape, tc.float32), log, H100)
    assert [ln.schedule for ln in launches] == [LOOPED]
    got = (B.log_softmax_backward if log else B.softmax_backward)(dy, y)
    np.testing.assert_allclose(got, ref_softmax_bwd(dy.astype(np.float64), y.astype(np.float64), log),
                               rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_finite_differences(log):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 5))
    dy = rng.standard_normal(x.shape)

    def f(v):
        y = softmax64(v)
        return float(((np.log(y) if log else y) * dy).sum())
    want = numeric_grad(f, x.copy())
    y = softmax64(x)
    y = np.log(y) if log else y
    got = (B.log_softmax_backward if log else B.softmax_backward)(dy.astype(np.float32), y.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_softmax_backward_in_place_and_errors():
    rng = np.random.default_rng(1)
    y = softmax64(rng.standard_normal((4, 9))).astype(np.float32)
    dy = rng.standard_normal((4, 9)).astype(np.float32)
    want = ref_softmax_bwd(dy.astype(np.float64), y.astype(np.float64), False)
    got = B.softmax_backward(dy, y, out=dy)
    assert got is dy
    np.testing.assert_allclose(dy, want, rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError, match="dy has shape"):
        B.softmax_backward(dy[:, :4], y)
    with pytest.raises(TypeError, match="dy"):
        B.softmax_backward(dy.astype(np.int32), y)


# ----------------------------------------------------------------------------- norms
NORM_SHAPES = [(1, 1), (3, 7), (2, 3, 33), (300, 257), (5, 3000), (3, 9001)]   # the last: LOOPED


def _norm_inputs(rowwise, shape, dtype, seed, offset=0.0):
    rng = np.random.default_rng(seed)
    x = rowwise.host(offset + 2 * rng.standard_normal(shape), dtype)
    dy = rowwise.host(rng.standard_normal(shape), dtype)
    n = shape[-1]
    w = rowwise.host(rng.standard_normal(n), dtype)
    b = rowwise.host(rng.standard_normal(n), dtype)
    return x, dy, w, b


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_layer_norm_backward_matches_float64(rowwise, shape, dtype):
    x, dy, w, b = _norm_inputs(rowwise, shape, dtype, sum(shape))
    _, mean, rstd = sk.layer_norm(x, w, b, return_stats=True)
    dx, dw, db = B.layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    assert type(dx) is type(dy) and type(dw) is type(w) and type(db) is type(b)
    x64, dy64, w64 = rowwise.f64(x), rowwise.f64(dy), rowwise.f64(w)
    want_dx, want_dw, want_db = ref_norm_bwd(dy64, x64, w64, 1e-5, False)
    rows = math.prod(shape[:-1])
    rowwise.close(dx, want_dx, dtype, scale=4)
    # column sums over the rows: f32 sums, stored in the parameter's dtype
    rowwise.close(dw, want_dw, dtype, scale=4 * math.sqrt(rows))
    rowwise.close(db, want_db, dtype, scale=4 * math.sqrt(rows))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_rms_norm_backward_matches_float64(rowwise, shape, dtype):
    x, dy, w, _ = _norm_inputs(rowwise, shape, dtype, 1 + sum(shape))
    _, rstd = sk.rms_norm(x, w, return_stats=True)
    dx, dw = B.rms_norm_backward(dy, x, w, rstd)
    want_dx, want_dw, _ = ref_norm_bwd(rowwise.f64(dy), rowwise.f64(x), rowwise.f64(w), 1e-6, True)
    rowwise.close(dx, want_dx, dtype, scale=4)
    rowwise.close(dw, want_dw, dtype, scale=4 * math.sqrt(math.prod(shape[:-1])))


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(3000, 300), (140, 8200)])   # 750 steps on 264 programs; 140 rows on 88
def test_norm_backward_partials_over_many_rows_are_deterministic(shape):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) + 5).astype(np.float32)    # a large mean next to the spread
    dy = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    b = np.zeros(shape[-1], np.float32)
    _, mean, rstd = sk.layer_norm(x, w, b, return_stats=True)
    first = B.layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    again = B.layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    for u, v in zip(first, again):
        assert np.array_equal(u, v)
    want = ref_norm_bwd(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64), 1e-5, False)
    np.testing.assert_allclose(first[0], want[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(first[1], want[1], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(first[2], want[2], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rms", [False, True])
def test_norm_backward_without_parameters(rms):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 19)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    if rms:
        _, rstd = sk.rms_norm(x, return_stats=True)
        dx, dw = B.rms_norm_backward(dy, x, None, rstd)
    else:
        _, mean, rstd = sk.layer_norm(x, return_stats=True)
        dx, dw, db = B.layer_norm_backward(dy, x, None, mean, rstd)
        assert db is None
    assert dw is None
    want = ref_norm_bwd(dy.astype(np.float64), x.astype(np.float64), None, 1e-6 if rms else 1e-5, rms)[0]
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rms", [False, True])
def test_norm_backward_finite_differences(rms):
    rng = np.random.default_rng(9)
    x, dy = rng.standard_normal((3, 6)), rng.standard_normal((3, 6))
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    eps = 1e-5
    loss = lambda xv, wv, bv: float((ln64(xv, wv, bv, eps, rms) * dy).sum())   # noqa: E731
    want_dx = numeric_grad(lambda v: loss(v, w, b), x.copy())
    want_dw = numeric_grad(lambda v: loss(x, v, b), w.copy())
    f32 = lambda a: a.astype(np.float32)   # noqa: E731
    if rms:
        _, rstd = sk.rms_norm(f32(x), f32(w), eps=eps, return_stats=True)
        dx, dw = B.rms_norm_backward(f32(dy), f32(x), f32(w), rstd)
        # rms_norm has no bias: its forward reference above added b, which has no gradient in x or w
    else:
        _, mean, rstd = sk.layer_norm(f32(x), f32(w), f32(b), eps=eps, return_stats=True)
        dx, dw, db = B.layer_norm_backward(f32(dy), f32(x), f32(w), mean, rstd, bias=f32(b))
        np.testing.assert_allclose(db, numeric_grad(lambda v: loss(x, w, v), b.copy()), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-3, atol=1e-4)


def test_norm_backward_errors():
    x = np.ones((2, 5), np.float32)
    _, mean, rstd = sk.layer_norm(x, return_stats=True)
    with pytest.raises(TypeError, match="rstd has dtype"):
        B.layer_norm_backward(x, x, None, mean, rstd.astype(np.float16))
    with pytest.raises(ValueError, match="mean has shape"):
        B.layer_norm_backward(x, x, None, mean[:1], rstd)
    with pytest.raises(ValueError, match="weight has shape"):
        B.rms_norm_backward(x, x, np.ones(4, np.float32), rstd)
    with pytest.raises(ValueError, match="dy has shape"):
        B.rms_norm_backward(x[:, :3], x, None, rstd)


# ----------------------------------------------------------------------------- cross_entropy's gradient
def ref_ce_grad(x, t, ignore_index, reduction):
    n = x.shape[-1]
    p = softmax64(x.reshape(-1, n))
    tf = t.reshape(-1)
    valid = tf != ignore_index
    p[np.arange(len(tf))[valid], tf[valid]] -= 1.0
    p[~valid] = 0.0
    if reduction == "mean" and valid.any():   # every row ignored: a zero gradient (NaN mean)
        p /= valid.sum()
    return p.reshape(x.shape)


CE_SHAPES = [(1, 1), (3, 7), (2, 5, 33), (40, 1000), (3, 20001)]   # the last: SPLIT


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", CE_SHAPES)
def test_cross_entropy_grad_matches_float64(rowwise, shape, dtype, reduction):
    rng = np.random.default_rng(sum(shape))
    x = rowwise.host(3 * rng.standard_normal(shape), dtype)
    t = rng.integers(0, shape[-1], shape[:-1])
    t.reshape(-1)[-1] = -100
    loss, g = sk.cross_entropy(x, t, reduction=reduction, return_grad=True)
    assert type(g) is type(x) and rowwise.f64(g).shape == shape
    np.testing.assert_array_equal(rowwise.f64(loss), rowwise.f64(sk.cross_entropy(x, t, reduction=reduction)))
    rowwise.close(g, ref_ce_grad(rowwise.f64(x), t, -100, reduction), dtype)


def test_cross_entropy_grad_looped_rows_in_place(monkeypatch):
    retune(monkeypatch, "cross_entropy", split_rows=1)
    rng = np.random.default_rng(4)
    x = (3 * rng.standard_normal((3, 16385 + 100))).astype(np.float32)
    t = np.array([5, 16384 + 50, -100])
    assert [ln.schedule for ln in CE.plan(spec(x.shape, tc.float32), spec((3,), tc.int64), "mean", H100,
                                          grad=True)][1] == LOOPED
    want_loss = sk.cross_entropy(x, t)
    buf = x.copy()
    loss, g = sk.cross_entropy(buf, t, return_grad=True, grad=buf)
    assert g is buf
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    np.testing.assert_allclose(buf, ref_ce_grad(x.astype(np.float64), t, -100, "mean"), rtol=2e-5, atol=1e-8)


@pytest.mark.parametrize("shape", [(6, 50), (3, 20001)])
def test_cross_entropy_grad_in_place_ignored_and_invalid_rows(shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.integers(0, shape[-1], shape[0])
    t[0], t[1] = 7 - 100 - 7, shape[-1]      # ignored (-100), out of range (NaN)
    buf = x.copy()
    loss, g = sk.cross_entropy(buf, t, reduction="sum", return_grad=True, grad=buf)
    assert g is buf and np.isnan(loss)
    assert (buf[0] == 0).all() and np.isnan(buf[1]).all()
    want = ref_ce_grad(x[2:].astype(np.float64), t[2:], -100, "sum")
    np.testing.assert_allclose(buf[2:], want, rtol=2e-5, atol=1e-7)
    # every row ignored: a NaN mean, a zero gradient
    loss, g = sk.cross_entropy(x, np.full(shape[0], -100), return_grad=True)
    assert np.isnan(loss) and (g == 0).all()


def test_cross_entropy_grad_finite_differences():
    rng = np.random.default_rng(8)
    x, t = rng.standard_normal((4, 6)), np.array([1, 5, -100, 0])

    def loss(v):
        lse = np.log(np.exp(v).sum(-1))
        keep = t != -100
        return float((lse[keep] - v[np.arange(4)[keep], t[keep]]).mean())
    _, g = sk.cross_entropy(x.astype(np.float32), t, return_grad=True)
    np.testing.assert_allclose(g, numeric_grad(loss, x.copy()), rtol=1e-4, atol=1e-6)


def test_cross_entropy_grad_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="return_grad"):
        sk.cross_entropy(x, np.zeros(2, np.int64), grad=x)
    with pytest.raises(ValueError, match="grad has shape"):
        sk.cross_entropy(x, np.zeros(2, np.int64), return_grad=True, grad=x[:, :2])
    with pytest.raises(TypeError, match="grad has dtype"):
        sk.cross_entropy(x, np.zeros(2, np.int64), return_grad=True, grad=x.astype(np.float16))


# ----------------------------------------------------------------------------- elementwise
def gelu64(x, approx):
    if approx == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def ref_gelu_bwd(dy, x, approx):
    if approx == "tanh":
        k = math.sqrt(2 / math.pi)
        th = np.tanh(k * (x + 0.044715 * x ** 3))
        return dy * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x))
    return dy * (0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))


ELEM_SHAPES = [(1,), (4097,), (3, 5, 257), (7, 33)]


@pytest.mark.parametrize("approx", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", ELEM_SHAPES)
def test_gelu_backward_matches_float64(rowwise, shape, dtype, approx):
    rng = np.random.default_rng(len(shape))
    x = rowwise.host(3 * rng.standard_normal(shape), dtype)
    dy = rowwise.host(rng.standard_normal(shape), dtype)
    rowwise.close(sk.gelu_backward(dy, x, approx), ref_gelu_bwd(rowwise.f64(dy), rowwise.f64(x), approx), dtype,
                  scale=2)


@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_gelu_backward_finite_differences(approx):
    x = np.linspace(-6, 6, 25)
    want = numeric_grad(lambda v: float(gelu64(v, approx).sum()), x.copy())
    got = sk.gelu_backward(np.ones(25, np.float32), x.astype(np.float32), approx)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _silu64(g):
    return g / (1 + np.exp(-g))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", ELEM_SHAPES)
def test_swiglu_and_silu_and_mul_backward(rowwise, shape, dtype):
    rng = np.random.default_rng(3 + len(shape))
    g64, u64, d64 = (3 * rng.standard_normal(shape) for _ in range(3))
    g, u, dy = (rowwise.host(v, dtype) for v in (g64, u64, d64))
    g64, u64, d64 = rowwise.f64(g), rowwise.f64(u), rowwise.f64(dy)
    s = 1 / (1 + np.exp(-g64))
    want_dg, want_du = d64 * u64 * s * (1 + g64 * (1 - s)), d64 * g64 * s
    dg, du = sk.swiglu_backward(dy, g, u)
    rowwise.close(dg, want_dg, dtype, scale=8)
    rowwise.close(du, want_du, dtype, scale=8)
    x = rowwise.host(np.concatenate([g64, u64], -1), dtype)
    dx = rowwise.f64(sk.silu_and_mul_backward(dy, x))
    d = shape[-1]
    rowwise.close(dx[..., :d], want_dg, dtype, scale=8)
    rowwise.close(dx[..., d:], want_du, dtype, scale=8)


def test_swiglu_backward_finite_differences():
    rng = np.random.default_rng(12)
    g, u, dy = (rng.standard_normal(9) for _ in range(3))
    dg, du = sk.swiglu_backward(*(v.astype(np.float32) for v in (dy, g, u)))
    np.testing.assert_allclose(dg, numeric_grad(lambda v: float((_silu64(v) * u * dy).sum()), g.copy()),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(du, numeric_grad(lambda v: float((_silu64(g) * v * dy).sum()), u.copy()),
                               rtol=1e-5, atol=1e-6)


def _rope64(x, cos, sin, interleaved):
    # (batch, seq, heads, dim) by (seq, dim / 2)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        return out
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_rope_backward_is_the_transposed_rotation(rowwise, dtype, interleaved):
    rng = np.random.default_rng(6)
    shape = (2, 7, 3, 18)
    ang = rng.uniform(0, 6, (7, 9))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    dy = rowwise.host(rng.standard_normal(shape), dtype)
    got = sk.rope_backward(dy, cos, sin, interleaved=interleaved)
    # rope is linear in x: its gradient is the transpose of the rotation, i.e. the rotation by -angle
    want = _rope64(rowwise.f64(dy), cos.astype(np.float64), -sin.astype(np.float64), interleaved)
    rowwise.close(got, want, dtype, scale=2)
    # and <rope(x), dy> = <x, rope_backward(dy)> for any x
    x = rng.standard_normal(shape)
    lhs = (_rope64(x, cos.astype(np.float64), sin.astype(np.float64), interleaved) * rowwise.f64(dy)).sum()
    assert abs(lhs - (x * rowwise.f64(got)).sum()) < 1e-2 * max(1.0, abs(lhs))


def test_rope_backward_seq_dim():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)      # (batch, heads, seq, dim)
    ang = rng.uniform(0, 6, (5, 4))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    y = sk.rope(x, cos, sin, seq_dim=-2)
    np.testing.assert_allclose(sk.rope_backward(y, cos, sin, seq_dim=-2), x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", [(1,), (3, 37), (5, 3, 64), (2, 4099)])
def test_dropout_backward_regenerates_the_forward_mask(rowwise, shape, dtype):
    rng = np.random.default_rng(len(shape))
    x = rowwise.host(rng.uniform(1, 2, shape), dtype)       # never 0: y == 0 exactly where dropped
    dy = rowwise.host(rng.standard_normal(shape), dtype)
    p, seed = 0.3, 2 ** 40 + 17
    y = rowwise.f64(sk.dropout(x, p, seed))
    kept = y != 0
    scale = y[kept] / rowwise.f64(x)[kept]
    dx = rowwise.f64(sk.dropout_backward(dy, p, seed))
    assert np.array_equal(dx != 0, kept & (rowwise.f64(dy) != 0))
    rowwise.close(dx[kept], rowwise.f64(dy)[kept] * scale, dtype)
    if math.prod(shape) > 100:
        assert 0.2 < 1 - kept.mean() < 0.4
        # another seed, another mask
        assert not np.array_equal(rowwise.f64(sk.dropout_backward(dy, p, seed + 1)) != 0, dx != 0)


def test_dropout_backward_of_strided_rows_keeps_the_flat_mask():
    # the mask follows the element's row-major index, not the memory layout
    rng = np.random.default_rng(3)
    dy = rng.standard_normal((6, 40)).astype(np.float32)
    wide = np.zeros((6, 64), np.float32)
    wide[:, :40] = dy
    np.testing.assert_array_equal(sk.dropout_backward(wide[:, :40], 0.5, 9), sk.dropout_backward(dy, 0.5, 9))


def test_elementwise_backward_errors():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="x has shape"):
        sk.gelu_backward(a, a[:, :2])
    with pytest.raises(ValueError, match="approximate"):
        sk.gelu_backward(a, a, "fast")
    with pytest.raises(ValueError, match="dy has shape"):
        sk.silu_and_mul_backward(a, a)
    with pytest.raises(ValueError, match="up has shape"):
        sk.swiglu_backward(a, a, a[:2])


# ----------------------------------------------------------------------------- PTX of the further specializations
def _warps(kernel: str, consts: dict) -> int:
    # the plans' rule: tile elements / 512, 1..16 (the reduction: 1..8)
    if kernel == "norm_bwd_reduce_kernel":
        return max(1, min(consts["BP"] * consts["BC"] // 512, 8))
    return max(1, min(consts.get("ROWS", 1) * consts["BLOCK"] // 512, 16))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel,sig", B.EXTRA_SIGNATURES, ids=[f"{k}[{s[-40:]}]" for k, s in B.EXTRA_SIGNATURES])
def test_extra_signatures_assemble_without_spills(kernel, sig, arch):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    k = getattr(B, kernel)
    spec_ = parse_signature(k, sig)
    compiled = compile_kernel(k, spec_, CompileOptions(arch=arch, num_warps=_warps(kernel, spec_.constexprs),
                                                       fast_math=True), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


def test_options_are_the_plans_warp_counts():
    from tilec.specialize import parse_signature
    for kernel, sig in B.SIGNATURES.items():
        assert B.OPTIONS[kernel]["num_warps"] == _warps(kernel, parse_signature(getattr(B, kernel), sig).constexprs)


# ----------------------------------------------------------------------------- strided rows, 1-D arrays
def test_backward_of_strided_rows_writes_only_the_rows():
    # dy, y / x as column slices of wider buffers, dx into a slice of a sentinel-filled buffer
    rng = np.random.default_rng(21)
    n = 37
    wide = lambda v: np.concatenate([v, rng.standard_normal((v.shape[0], 11))], -1).astype(np.float32)  # noqa: E731
    x64 = rng.standard_normal((9, n))
    y = wide(softmax64(x64))[:, :n]
    dy = wide(rng.standard_normal((9, n)))[:, :n]
    buf = np.full((9, n + 5), 7.0, np.float32)
    B.softmax_backward(dy, y, out=buf[:, :n])
    np.testing.assert_allclose(buf[:, :n], ref_softmax_bwd(dy.astype(np.float64), y.astype(np.float64), False),
                               rtol=2e-5, atol=2e-6)
    assert (buf[:, n:] == 7.0).all()
    x = wide(x64)[:, :n]
    w = rng.standard_normal(n).astype(np.float32)
    _, mean, rstd = sk.layer_norm(x, w, return_stats=True)
    buf[:] = 7.0
    dx, dw, _ = B.layer_norm_backward(dy, x, w, mean, rstd, out=buf[:, :n])
    want = ref_norm_bwd(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64), 1e-5, False)
    np.testing.assert_allclose(buf[:, :n], want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, want[1], rtol=1e-4, atol=1e-5)
    assert (buf[:, n:] == 7.0).all()
    logits = wide(3 * x64)[:, :n]
    t = rng.integers(0, n, 9)
    gbuf = np.full((9, n + 5), 7.0, np.float32)
    sk.cross_entropy(logits, t, return_grad=True, grad=gbuf[:, :n])
    np.testing.assert_allclose(gbuf[:, :n], ref_ce_grad(logits.astype(np.float64), t, -100, "mean"), rtol=2e-5,
                               atol=1e-7)
    assert (gbuf[:, n:] == 7.0).all()


@pytest.mark.parametrize("rms", [False, True])
def test_norm_backward_of_one_row(rms):
    rng = np.random.default_rng(22)
    x, dy, w = (rng.standard_normal(300).astype(np.float32) for _ in range(3))
    if rms:
        _, rstd = sk.rms_norm(x, w, return_stats=True)
        dx, dw = B.rms_norm_backward(dy, x, w, rstd)
    else:
        _, mean, rstd = sk.layer_norm(x, w, return_stats=True)
        dx, dw, _ = B.layer_norm_backward(dy, x, w, mean, rstd)
    want = ref_norm_bwd(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64),
                        1e-6 if rms else 1e-5, rms)
    assert dx.shape == (300,) and dw.shape == (300,)
    np.testing.assert_allclose(dx, want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, want[1], rtol=1e-4, atol=1e-5)
