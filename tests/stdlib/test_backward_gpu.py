"""GPU tier of the backward kernels: torch CUDA tensors against torch autograd in float64,
on shapes that are not multiples of the tiles, per schedule (ONE_TILE, LOOPED, SPLIT)."""
from __future__ import annotations

import importlib
import math

import pytest

import tilec.stdlib_kernels as sk

pytestmark = pytest.mark.gpu
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
DTYPES = ["float32", "float16", "bfloat16"]


def _close(torch, got, want, dtype_name, scale=1.0):
    tol = TOL[dtype_name]
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol * scale, equal_nan=True)


def _within(torch, got, want, extra, dtype_name):
    """|got - want| <= tol (1 + |want| + extra), elementwise: `extra` bounds (in units of the
    dtype's tolerance) what the rounding of a stored input can move the result."""
    tol = TOL[dtype_name]
    err = (got.double() - want).abs()
    bound = tol * (1.0 + want.abs() + extra)
    assert bool((err <= bound).all()), f"exceeds its bound by up to {(err - bound).max().item()}"


def _grads(torch, out, inputs, dy):
    return torch.autograd.grad(out, inputs, dy)


# (7, 1): one column; (5, 3, 1000): packed rows; (300, 20001): LOOPED; (3, 262144): SPLIT
SOFTMAX_SHAPES = [(7, 1), (5, 3, 1000), (1000, 4097), (300, 20001), (3, 262144)]


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_against_autograd(torch, shape, dtype_name, log):
    dtype = getattr(torch, dtype_name)
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    x64 = x.double().requires_grad_()
    y64 = torch.log_softmax(x64, -1) if log else torch.softmax(x64, -1)
    (want,) = _grads(torch, y64, (x64,), dy.double())
    y = (sk.log_softmax if log else sk.softmax)(x)
    got = (sk.log_softmax_backward if log else sk.softmax_backward)(dy, y)
    assert got.dtype == dtype and got.shape == x.shape
    # The kernel sees y rounded to its dtype (relative error ~ tol): dx moves by up to
    # softmax: y (|dy - sum(dy y)| + max |dy|) tol; log_softmax: exp(y) |y| |sum(dy)| tol.
    y64, dy64 = y.double(), dy.double()
    if log:
        extra = 2 * y64.exp() * y64.abs() * dy64.sum(-1, keepdim=True).abs()
    else:
        s = (dy64 * y64).sum(-1, keepdim=True)
        extra = 2 * y64 * ((dy64 - s).abs() + dy64.abs().amax(-1, keepdim=True))
    _within(torch, got, want, extra, dtype_name)


# (7, 1), packed rows, (1000, 4097) one tile, (300, 9001) and (40, 16385): LOOPED rows
NORM_SHAPES = [(7, 1), (5, 3, 1000), (1000, 4097), (300, 9001), (40, 16385)]


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_layer_norm_backward_against_autograd(torch, shape, dtype_name):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    n = shape[-1]
    x = (2 * torch.randn(shape, device="cuda", dtype=torch.float64) + 1).to(dtype)
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, b))
    want = _grads(torch, F.layer_norm(x64, (n,), w64, b64, 1e-5), (x64, w64, b64), dy.double())
    _, mean, rstd = sk.layer_norm(x, w, b, return_stats=True)
    dx, dw, db = sk.layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    assert dx.dtype == dtype and dw.dtype == dtype and db.dtype == dtype
    rows = math.prod(shape[:-1])
    _close(torch, dx, want[0], dtype_name, scale=8)
    _close(torch, dw, want[1], dtype_name, scale=8 * math.sqrt(rows))
    _close(torch, db, want[2], dtype_name, scale=8 * math.sqrt(rows))


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_rms_norm_backward_against_autograd(torch, shape, dtype_name):
    dtype = getattr(torch, dtype_name)
    n = shape[-1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=torch.float32)
    x64, w64 = (t.double().requires_grad_() for t in (x, w))
    y64 = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w64
    want = _grads(torch, y64, (x64, w64), dy.double())
    _, rstd = sk.rms_norm(x, w, return_stats=True)
    dx, dw = sk.rms_norm_backward(dy, x, w, rstd)
    assert dx.dtype == dtype and dw.dtype == torch.float32
    _close(torch, dx, want[0], dtype_name, scale=8)
    # dw is f32 but sums x-dtype products: the x dtype's tolerance
    _close(torch, dw, want[1], dtype_name, scale=8 * math.sqrt(math.prod(shape[:-1])))


def test_norm_backward_is_deterministic_and_takes_no_parameters(torch):
    F = torch.nn.functional
    x = torch.randn(3000, 1000, device="cuda")
    dy = torch.randn(3000, 1000, device="cuda")
    w = torch.randn(1000, device="cuda")
    _, mean, rstd = sk.layer_norm(x, w, return_stats=True)
    first = sk.layer_norm_backward(dy, x, w, mean, rstd)
    again = sk.layer_norm_backward(dy, x, w, mean, rstd)
    assert first[2] is None and torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    x64 = x.double().requires_grad_()
    (want,) = _grads(torch, F.layer_norm(x64, (1000,)), (x64,), dy.double())
    _, mean, rstd = sk.layer_norm(x, return_stats=True)
    dx, dw, db = sk.layer_norm_backward(dy, x, None, mean, rstd)
    assert dw is None and db is None
    _close(torch, dx, want, "float32", scale=8)


# (3, 7), (1000, 1000): ONE_TILE; (40, 50257): SPLIT; (2048, 32001): LOOPED
CE_SHAPES = [(3, 7), (1000, 1000), (40, 50257), (2048, 32001)]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", CE_SHAPES)
def test_cross_entropy_grad_against_autograd(torch, shape, dtype_name, reduction):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    n_rows, n_cls = shape
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    t = torch.randint(0, n_cls, (n_rows,), device="cuda")
    t[::5] = -100
    x64 = x.double().requires_grad_()
    loss64 = F.cross_entropy(x64, t, ignore_index=-100, reduction=reduction)
    (want,) = torch.autograd.grad(loss64.sum(), (x64,))
    loss, g = sk.cross_entropy(x, t, reduction=reduction, return_grad=True)
    assert g.dtype == dtype and g.shape == x.shape
    _close(torch, loss, loss64.detach(), dtype_name, scale=8)
    _close(torch, g, want, dtype_name)
    # in place, into the logits (Liger's way): the same loss and gradient
    buf = x.clone()
    loss2, g2 = sk.cross_entropy(buf, t, reduction=reduction, return_grad=True, grad=buf)
    assert g2.data_ptr() == buf.data_ptr()
    torch.testing.assert_close(loss2, loss, rtol=0, atol=0)
    torch.testing.assert_close(buf, g, rtol=0, atol=0)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (4097,), (3, 1000, 257), (8, 4096)])
def test_elementwise_backward_against_autograd(torch, shape, dtype_name):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    u = torch.randn(shape, device="cuda", dtype=dtype)
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    x64, u64, dy64 = x.double().requires_grad_(), u.double().requires_grad_(), dy.double()
    for approx in ("none", "tanh"):
        (want,) = _grads(torch, F.gelu(x64, approximate=approx), (x64,), dy64)
        _close(torch, sk.gelu_backward(dy, x, approx), want, dtype_name, scale=2)
    want_g, want_u = _grads(torch, F.silu(x64) * u64, (x64, u64), dy64)
    dg, du = sk.swiglu_backward(dy, x, u)
    _close(torch, dg, want_g, dtype_name, scale=4)
    _close(torch, du, want_u, dtype_name, scale=4)
    cat = torch.cat([x, u], -1)
    dx = sk.silu_and_mul_backward(dy, cat)
    d = shape[-1]
    _close(torch, dx[..., :d], want_g, dtype_name, scale=4)
    _close(torch, dx[..., d:], want_u, dtype_name, scale=4)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_rope_backward_against_autograd(torch, interleaved, dtype_name):
    b, s, h, d = 2, 77, 5, 130
    dtype = getattr(torch, dtype_name)
    x64 = torch.randn(b, s, h, d, device="cuda", dtype=torch.float64, requires_grad=True)
    dy = torch.randn(b, s, h, d, device="cuda", dtype=dtype)
    ang = torch.rand(s, d // 2, device="cuda", dtype=torch.float64) * 6
    c, sn = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    if interleaved:
        x1, x2 = x64[..., 0::2], x64[..., 1::2]
        y64 = torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], -1).flatten(-2)
    else:
        x1, x2 = x64[..., : d // 2], x64[..., d // 2:]
        y64 = torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], -1)
    (want,) = _grads(torch, y64, (x64,), dy.double())
    got = sk.rope_backward(dy, ang.cos().float(), ang.sin().float(), interleaved=interleaved)
    _close(torch, got, want, dtype_name, scale=2)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (4097,), (3, 1000, 257), (8, 4096)])
def test_dropout_backward_regenerates_the_forward_mask(torch, shape, dtype_name):
    dtype = getattr(torch, dtype_name)
    x = torch.rand(shape, device="cuda", dtype=torch.float32).add(1).to(dtype)   # never 0
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    p, seed = 0.25, 1234567
    y = sk.dropout(x, p, seed)
    kept = y != 0
    dx = sk.dropout_backward(dy, p, seed)
    scale = 1.0 / (1.0 - p)
    want = torch.where(kept, dy.double() * scale, torch.zeros_like(dy, dtype=torch.float64))
    _close(torch, dx, want, dtype_name)
    assert torch.equal(dx != 0, kept & (dy != 0))
    # the interpreter draws the same mask
    host = sk.dropout_backward(dy.float().cpu().numpy(), p, seed)
    assert torch.equal(torch.from_numpy(host).cuda() != 0, kept & (dy != 0))


def _replayable(plans, entry) -> bool:
    """One recorded plan for `entry`, and a replayable one (not marked unplannable)."""
    fn = getattr(entry, "__wrapped_entry__", entry)
    table = plans._plans.get(f"{fn.__module__}.{fn.__qualname__}", {})   # noqa: SLF001
    return len(table) == 1 and all(v is not plans._UNPLANNABLE for v in table.values())   # noqa: SLF001


def test_backward_entry_points_replay_their_plans(torch):
    # second and third calls of one layout replay the first's launches (`_plan.planned`) on new
    # data, None gradients included
    F = torch.nn.functional
    plans = importlib.import_module("tilec.stdlib_kernels._plan")
    plans.clear_plans()
    for i in range(3):
        x, dy = torch.randn(37, 300, device="cuda") + i, torch.randn(37, 300, device="cuda")
        w = torch.randn(300, device="cuda")
        _, mean, rstd = sk.layer_norm(x, w, return_stats=True)
        dx, dw, db = sk.layer_norm_backward(dy, x, w, mean, rstd)
        x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
        want = _grads(torch, F.layer_norm(x64, (300,), w64, None, 1e-5), (x64, w64), dy.double())
        assert db is None
        _close(torch, dx, want[0], "float32", scale=8)
        _close(torch, dw, want[1], "float32", scale=8 * math.sqrt(37))
        logits = torch.randn(50, 1000, device="cuda")
        t = torch.randint(0, 1000, (50,), device="cuda")
        loss, g = sk.cross_entropy(logits, t, return_grad=True)
        l64 = logits.double().requires_grad_()
        (want_g,) = torch.autograd.grad(F.cross_entropy(l64, t), (l64,))
        _close(torch, g, want_g, "float32")
    assert _replayable(plans, sk.layer_norm_backward) and _replayable(plans, sk.cross_entropy)
