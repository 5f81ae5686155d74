"""label_smoothing of cross_entropy and linear_cross_entropy (torch's semantics): the plans,
the interpreter against a float64 numpy reference (every schedule, each reduction, ignored
rows, the gradient in place), argument errors; on the GPU (`gpu`) against
torch.nn.functional.cross_entropy(label_smoothing=) in float64, through the custom ops and
tilec.nn's modules."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels.launches import spec
from tilec.stdlib_kernels.schedules import LOOPED, ONE_TILE, SPLIT
from tilec.stdlib_kernels import torch_ops as T
from tilec.target import Target

from launch_spy import retune

CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
H100 = Target.from_arch("sm_90a")


def ref_ce(x, t, ignore_index, reduction, eps):
    """(loss, dlogits) in float64 as torch defines them: target distribution (1 - eps) onehot + eps / C;
    dlogits of the loss ("none": of the sum of the row losses)."""
    x = np.asarray(x, np.float64)
    c = x.shape[-1]
    m = x.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]
    ignored = t == ignore_index
    tt = np.where(ignored, 0, t)
    picked = np.take_along_axis(x, tt[..., None], -1)[..., 0]
    logp = x - lse[..., None]
    rows = -(1 - eps) * picked + (1 - eps) * lse - eps / c * logp.sum(-1)
    rows = np.where(ignored, 0.0, rows)
    onehot = np.zeros_like(x)
    np.put_along_axis(onehot, tt[..., None], 1.0, -1)
    g = np.where(ignored[..., None], 0.0, np.exp(logp) - (1 - eps) * onehot - eps / c)
    n = (~ignored).sum()
    if reduction == "mean":
        return rows.sum() / n, g / n
    if reduction == "sum":
        return rows.sum(), g
    return rows, g


def _names(launches):
    return [(ln.name, ln.schedule) for ln in launches]


# ----------------------------------------------------------------------------- plans
def test_plans_with_and_without_smoothing():
    lab = spec((40,), tc.int64)
    plain = CE.plan(spec((40, 1000), tc.bfloat16), lab, "mean", H100)
    assert "ce_smooth_kernel" not in [ln.name for ln in plain]
    one = CE.plan(spec((40, 1000), tc.bfloat16), lab, "mean", H100, smoothing=0.1)
    assert _names(one) == [("ce_smooth_kernel", "smooth"), ("ce_tile_kernel", ONE_TILE),
                           ("ce_smooth_add_kernel", "smooth"), ("ce_reduce_kernel", "reduce")]
    assert one[0].consts["EPS"] == 0.1 and one[0].grid == (40,)
    # the row kernels' losses go to the f32 "raw", which the add turns into "loss"
    assert "raw" in one[1].args and "loss" not in one[1].args and one[2].args == ("raw", "smooth", "loss")
    assert [tmp.name for tmp in one[1].temps] == ["raw"] and one[1].temps[0].dtype is tc.float32
    split = CE.plan(spec((40, 70001), tc.float32), lab, "none", H100, grad=True, smoothing=0.25)
    assert _names(split) == [("ce_smooth_kernel", "smooth"), ("ce_scale_kernel", "scale"), ("ce_loop_kernel", SPLIT),
                             ("ce_combine_kernel", SPLIT), ("ce_grad_chunk_kernel", SPLIT),
                             ("ce_smooth_add_kernel", "smooth")]
    assert split[4].consts["EPS"] == 0.25 and "raw" in split[2].args and "raw" in split[3].args
    assert sum(tmp.name == "raw" for ln in split for tmp in ln.temps) == 1   # allocated once
    # without smoothing the gradient kernels keep their default EPS (the PTX of before)
    assert "EPS" not in CE.plan(spec((40, 1000), tc.bfloat16), lab, "mean", H100, grad=True)[1].consts


# ----------------------------------------------------------------------------- interpreter
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,eps", [((5, 37), 0.1), ((3, 4, 301), 0.3), ((2, 20001), 0.05), ((1, 7), 1.0)])
def test_matches_float64_reference(shape, eps, reduction):
    rng = np.random.default_rng(sum(shape))
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    t = rng.integers(0, shape[-1], shape[:-1])
    if t.size > 1:
        t.flat[1] = -100
    want, want_g = ref_ce(x, t, -100, reduction, eps)
    loss = sk.cross_entropy(x, t, reduction=reduction, label_smoothing=eps)
    np.testing.assert_allclose(loss, want, rtol=2e-5, atol=2e-5)
    loss2, g = sk.cross_entropy(x, t, reduction=reduction, label_smoothing=eps, return_grad=True)
    np.testing.assert_allclose(loss2, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(g, want_g, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_two_byte_logits(rowwise, dtype):
    rng = np.random.default_rng(3)
    x = rowwise.host((2 * rng.standard_normal((9, 130))).astype(np.float32), dtype)
    t = rng.integers(0, 130, 9)
    t[4] = -100
    want, want_g = ref_ce(rowwise.f64(x), t, -100, "none", 0.2)
    loss, g = sk.cross_entropy(x, t, reduction="none", label_smoothing=0.2, return_grad=True)
    rowwise.close(loss, want, dtype, scale=4)
    rowwise.close(g, want_g, dtype)


def test_looped_rows_in_place(monkeypatch):
    retune(monkeypatch, "cross_entropy", split_rows=1)
    rng = np.random.default_rng(4)
    x = (3 * rng.standard_normal((3, 16385 + 100))).astype(np.float32)
    t = np.array([5, 16384 + 50, -100])
    names = _names(CE.plan(spec(x.shape, tc.float32), spec((3,), tc.int64), "mean", H100, grad=True, smoothing=0.1))
    assert ("ce_grad_loop_kernel", LOOPED) in names
    want, want_g = ref_ce(x, t, -100, "mean", 0.1)
    np.testing.assert_allclose(sk.cross_entropy(x, t, label_smoothing=0.1), want, rtol=2e-5)
    buf = x.copy()
    loss, g = sk.cross_entropy(buf, t, return_grad=True, grad=buf, label_smoothing=0.1)
    # the row sums are read before the gradient overwrites the logits
    assert g is buf
    np.testing.assert_allclose(loss, want, rtol=2e-5)
    np.testing.assert_allclose(buf, want_g, rtol=2e-5, atol=1e-8)


def test_ignored_and_invalid_rows():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 50)).astype(np.float32)
    t = np.array([-100, 50, 3, 7])      # ignored, out of range (NaN), two valid rows
    loss, g = sk.cross_entropy(x, t, reduction="none", label_smoothing=0.1, return_grad=True)
    assert loss[0] == 0 and np.isnan(loss[1]) and (g[0] == 0).all() and np.isnan(g[1]).all()
    want, want_g = ref_ce(x[2:], t[2:], -100, "none", 0.1)
    np.testing.assert_allclose(loss[2:], want, rtol=2e-5)
    np.testing.assert_allclose(g[2:], want_g, rtol=2e-5, atol=1e-8)
    # every row ignored: the mean of nothing is NaN (as torch), the gradient zero
    loss, g = sk.cross_entropy(x, np.full(4, -100), label_smoothing=0.3, return_grad=True)
    assert np.isnan(loss) and (g == 0).all()


def test_zero_smoothing_is_the_plain_loss():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 33)).astype(np.float32)
    t = rng.integers(0, 33, 6)
    np.testing.assert_array_equal(sk.cross_entropy(x, t, label_smoothing=0.0), sk.cross_entropy(x, t))


def test_finite_differences():
    rng = np.random.default_rng(8)
    x, t, eps = rng.standard_normal((4, 6)), np.array([1, 5, -100, 0]), 0.3
    _, g = sk.cross_entropy(x.astype(np.float32), t, return_grad=True, label_smoothing=eps)
    num = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += 1e-6
        lo[idx] -= 1e-6
        num[idx] = (ref_ce(hi, t, -100, "mean", eps)[0] - ref_ce(lo, t, -100, "mean", eps)[0]) / 2e-6
    np.testing.assert_allclose(g, num, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_linear_cross_entropy(reduction):
    rng = np.random.default_rng(5)
    h = rng.standard_normal((300, 16)).astype(np.float32)
    w = (0.5 * rng.standard_normal((71, 16))).astype(np.float32)
    b = rng.standard_normal(71).astype(np.float32)
    t = rng.integers(0, 71, 300)
    t[::7] = -100
    logits = h.astype(np.float64) @ w.T.astype(np.float64) + b
    want, want_g = ref_ce(logits, t, -100, reduction, 0.2)
    loss = sk.linear_cross_entropy(h, w, t, bias=b, reduction=reduction, chunk=128, label_smoothing=0.2,
                                   return_grad=False)
    np.testing.assert_allclose(loss, want, rtol=2e-5, atol=2e-5)
    if reduction == "none":
        return
    loss, dh, dw, db = sk.linear_cross_entropy(h, w, t, bias=b, reduction=reduction, chunk=128, label_smoothing=0.2)
    np.testing.assert_allclose(loss, want, rtol=2e-5)
    np.testing.assert_allclose(dh, want_g @ w.astype(np.float64), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(dw, want_g.T @ h.astype(np.float64), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(db, want_g.sum(0), rtol=1e-4, atol=1e-6)


def test_custom_op_impls_take_it():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 40)).astype(np.float32)
    t = rng.integers(0, 40, 5)
    want, want_g = ref_ce(x, t, -100, "sum", 0.4)
    np.testing.assert_allclose(T.OPS["cross_entropy"].impl(x, t, -100, "sum", 0.4), want, rtol=2e-5)
    loss, g = T.OPS["cross_entropy_with_grad"].impl(x, t, -100, "sum", 0.4)
    np.testing.assert_allclose(loss, want, rtol=2e-5)
    np.testing.assert_allclose(g, want_g, rtol=2e-5, atol=1e-8)
    w = rng.standard_normal((40, 8)).astype(np.float32)
    h = rng.standard_normal((5, 8)).astype(np.float32)
    want = ref_ce(h.astype(np.float64) @ w.T, t, -100, "mean", 0.4)[0]
    np.testing.assert_allclose(T.OPS["linear_cross_entropy_loss"].impl(h, w, t, None, -100, "mean", None, 0.4),
                               want, rtol=2e-5)
    assert T._arg_names(T.OPS["cross_entropy"].schema)[-1] == "label_smoothing"


@pytest.mark.parametrize("bad,err", [(-0.1, ValueError), (1.5, ValueError), (float("nan"), ValueError),
                                     ("0.1", TypeError), (True, TypeError), (None, TypeError)])
def test_bad_label_smoothing_is_named(bad, err):
    x = np.zeros((2, 3), np.float32)
    t = np.zeros(2, np.int64)
    with pytest.raises(err, match="label_smoothing"):
        sk.cross_entropy(x, t, label_smoothing=bad)
    with pytest.raises(err, match="label_smoothing"):
        sk.linear_cross_entropy(x, np.zeros((4, 3), np.float32), t, label_smoothing=bad)


# ----------------------------------------------------------------------------- GPU
def _rel(torch, got, want):
    got, want = got.double(), want.double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,dtype_name", [((3, 7), "float32"), ((1000, 1000), "bfloat16"),    # ONE_TILE
                                              ((40, 50257), "float32"), ((40, 50257), "bfloat16"),  # SPLIT
                                              ((1100, 16500), "float32"), ((1100, 16500), "bfloat16")])  # LOOPED
def test_gpu_against_torch(torch, shape, dtype_name, reduction):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    n_rows, n_cls = shape
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    t = torch.randint(0, n_cls, (n_rows,), device="cuda")
    t[::5] = -100
    x64 = x.double().requires_grad_()
    loss64 = F.cross_entropy(x64, t, ignore_index=-100, reduction=reduction, label_smoothing=0.1)
    (want,) = torch.autograd.grad(loss64.sum(), (x64,))
    tol = 2e-5 if dtype_name == "float32" else 1.6e-2
    loss = sk.cross_entropy(x, t, reduction=reduction, label_smoothing=0.1)
    torch.testing.assert_close(loss.double(), loss64.detach(), rtol=tol, atol=tol * 8)
    loss, g = sk.cross_entropy(x, t, reduction=reduction, return_grad=True, label_smoothing=0.1)
    assert g.dtype == dtype
    torch.testing.assert_close(loss.double(), loss64.detach(), rtol=tol, atol=tol * 8)
    torch.testing.assert_close(g.double(), want, rtol=tol, atol=tol)
    buf = x.clone()   # in place: the row sums are read before the gradient overwrites the logits
    loss2, _ = sk.cross_entropy(buf, t, reduction=reduction, return_grad=True, grad=buf, label_smoothing=0.1)
    torch.testing.assert_close(loss2, loss, rtol=0, atol=0)
    torch.testing.assert_close(buf, g, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gpu_custom_op_and_module_autograd(torch, reduction):
    from tilec import nn as tnn   # noqa: PLC0415 - imports torch
    F = torch.nn.functional
    x = torch.randn(37, 5003, device="cuda", dtype=torch.float32, requires_grad=True)
    t = torch.randint(0, 5003, (37,), device="cuda")
    t[3] = -100
    for fn in (lambda a: T.cross_entropy(a, t, reduction=reduction, label_smoothing=0.2),
               lambda a: tnn.CrossEntropyLoss(reduction=reduction, label_smoothing=0.2)(a, t)):
        x.grad = None
        loss = fn(x)
        up = torch.randn_like(loss)
        loss.backward(up)
        x64 = x.detach().double().requires_grad_(True)
        ref = F.cross_entropy(x64, t, reduction=reduction, label_smoothing=0.2)
        ref.backward(up.double())
        assert _rel(torch, loss, ref) < 1e-5 and _rel(torch, x.grad, x64.grad) < 1e-4
    torch.library.opcheck(torch.ops.tilec.cross_entropy_with_grad.default, (x.detach(), t, -100, reduction, 0.2))


@pytest.mark.gpu
@pytest.mark.parametrize("chunk,with_bias", [(None, True), (64, False)])
def test_gpu_linear_cross_entropy_autograd(torch, chunk, with_bias):
    from tilec import nn as tnn   # noqa: PLC0415 - imports torch
    F = torch.nn.functional
    h = torch.randn(3, 101, 136, device="cuda", dtype=torch.float32, requires_grad=True)   # 303 tokens
    w = (torch.randn(5003, 136, device="cuda") / 136 ** 0.5 * 3).requires_grad_(True)
    b = torch.randn(5003, device="cuda", requires_grad=True) if with_bias else None
    t = torch.randint(0, 5003, (3, 101), device="cuda")
    t[1, :7] = -100
    loss = tnn.LinearCrossEntropyLoss(chunk=chunk, label_smoothing=0.15)(h, w, t, b)
    (loss * 2.5).backward()
    h64, w64 = (a.detach().double().requires_grad_(True) for a in (h, w))
    b64 = b.detach().double().requires_grad_(True) if with_bias else None
    ref = F.cross_entropy(F.linear(h64, w64, b64).reshape(-1, 5003), t.reshape(-1), label_smoothing=0.15)
    (ref * 2.5).backward()
    assert _rel(torch, loss, ref) < 1e-4
    pairs = [(h.grad, h64.grad), (w.grad, w64.grad)] + ([(b.grad, b64.grad)] if with_bias else [])
    for got, want in pairs:
        assert _rel(torch, got, want) < 3e-4
