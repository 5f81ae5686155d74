"""GPU tier: topk against torch.topk, and sample's properties (greedy, top-k, top-p nucleus in
float64, frequencies, determinism, the interpreter's tokens), through the stdlib and torch.ops.tilec."""
from __future__ import annotations

import numpy as np
import pytest

import tilec.stdlib_kernels as S

pytestmark = pytest.mark.gpu
DTYPES = ["float32", "float16", "bfloat16"]


def _randn(torch, shape, dtype, scale=1.0):
    return (torch.randn(shape, device="cuda", dtype=torch.float32) * scale).to(getattr(torch, dtype))


# ----------------------------------------------------------------------------- topk
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k", [((7, 1), 1), ((5, 1000), 64), ((3, 4099), 1), ((4, 128256), 64),
                                     ((2, 300001), 50), ((2, 3, 777), 17)])
def test_topk_against_torch(torch, dtype, shape, k):
    x = _randn(torch, shape, dtype, 3.0)
    vals, idx = S.topk(x, k)
    want_v, _ = torch.topk(x, k, dim=-1, largest=True, sorted=True)
    assert idx.dtype == torch.int64 and vals.dtype == x.dtype and vals.shape == want_v.shape
    assert torch.equal(vals, want_v)
    assert torch.equal(torch.gather(x, -1, idx), vals)
    ordered = idx.sort(-1).values
    assert (ordered[..., 1:] != ordered[..., :-1]).all()   # distinct indices per row
    if dtype != "float32":   # (the smallest once: each flavour compiles its own kernels)
        return
    small_v, small_i = S.topk(x, k, largest=False)
    assert torch.equal(small_v, torch.topk(x, k, dim=-1, largest=False, sorted=True)[0])
    assert torch.equal(torch.gather(x, -1, small_i), small_v)


def test_topk_ties_by_increasing_index(torch):
    x = torch.randint(-3, 4, (6, 20000), device="cuda").float()
    x[0, :] = float("-inf")
    x[0, 12345] = 1.0
    vals, idx = S.topk(x, 64)
    sv, si = torch.sort(x, dim=-1, descending=True, stable=True)
    assert torch.equal(vals, sv[:, :64]) and torch.equal(idx, si[:, :64])


def test_topk_torch_op_and_its_gradient(torch):
    from tilec.stdlib_kernels import torch_ops as T
    x = torch.randn(9, 3000, device="cuda", dtype=torch.float32, requires_grad=True)
    vals, idx = T.topk(x, 10)
    w = torch.randn_like(vals)
    (vals * w).sum().backward()
    x64 = x.detach().double().requires_grad_()
    v64, _ = torch.topk(x64, 10)
    (v64 * w.double()).sum().backward()
    assert torch.equal(vals.double(), v64.detach())
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=0, atol=0)
    torch.library.opcheck(torch.ops.tilec.topk.default, (x.detach().requires_grad_(), 10, True))
    torch.library.opcheck(torch.ops.tilec.sample.default, (x.detach(), 0.8, 5, 0.9, 3, 1))
    torch.library.opcheck(torch.ops.tilec.argmax.default, (x.detach(), -1, True))


def test_fake_shapes(torch):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from tilec.stdlib_kernels import torch_ops as T
    T.register()
    with FakeTensorMode():
        x = torch.empty(2, 5, 100, device="cuda", dtype=torch.bfloat16)
        v, i = T.topk(x, 7)
        assert tuple(v.shape) == (2, 5, 7) and v.dtype == torch.bfloat16 and i.dtype == torch.int64
        t = T.sample(x, top_k=3, top_p=0.5, seed=1)
        assert tuple(t.shape) == (2, 5) and t.dtype == torch.int64
        assert tuple(T.argmax(x, -1, keepdim=True).shape) == (2, 5, 1)


# ----------------------------------------------------------------------------- sample
@pytest.mark.parametrize("dtype", DTYPES)
def test_greedy_and_top_k_one_are_argmax(torch, dtype):
    x = _randn(torch, (33, 128256), dtype, 3.0)
    want = torch.argmax(x, dim=-1)
    assert torch.equal(S.sample(x, temperature=0.0, seed=0), want)
    assert torch.equal(S.sample(x, top_k=1, seed=1), want)
    assert torch.equal(S.sample(x, top_k=1, top_p=0.2, temperature=3.0, seed=2), want)
    assert torch.equal(S.argmax(x, -1), want)
    assert torch.equal(S.argmax(x, -1, keepdim=True), torch.argmax(x, dim=-1, keepdim=True))
    from tilec.stdlib_kernels import torch_ops as T
    assert torch.equal(T.argmax(x[:5, :1000], -1), torch.argmax(x[:5, :1000], dim=-1))


def test_determinism_and_offsets(torch):
    from tilec.stdlib_kernels import torch_ops as T
    x = _randn(torch, (64, 32000), "bfloat16", 0.5)
    a = S.sample(x, seed=42, offset=7)
    assert torch.equal(a, S.sample(x, seed=42, offset=7))
    assert torch.equal(a, T.sample(x, seed=42, offset=7))
    assert (a != S.sample(x, seed=42, offset=8)).sum().item() > 32
    assert torch.equal(S.sample(x, seed=2 ** 64 - 1), T.sample(x, seed=-1))


def test_tokens_match_the_interpreter(torch):
    # the same Philox noise on the GPU and the CPU interpreter: equal tokens, but where f32
    # rounding (fast-math logs) may swap two near-equal scores
    x = _randn(torch, (16, 5000), "float32", 2.0)
    got = S.sample(x, temperature=0.9, seed=99, offset=5).cpu().numpy()
    want = S.sample(x.cpu().numpy(), temperature=0.9, seed=99, offset=5)
    assert (got == want).sum() >= 15, (got, want)


def test_split_rows_match_the_interpreter(torch):
    # batch 8 over a 128k vocabulary: chunks' draws merged (SPLIT), on the GPU as on the CPU
    # (greedy exactly; a draw may differ only where two scores are within f32 rounding)
    x = _randn(torch, (8, 128256), "float32", 1.0)
    assert torch.equal(S.sample(x, temperature=0.0, seed=3).cpu(), torch.from_numpy(
        np.asarray(S.sample(x.cpu().numpy(), temperature=0.0, seed=3))))
    got = S.sample(x, seed=3).cpu().numpy()
    want = np.asarray(S.sample(x.cpu().numpy(), seed=3))
    assert (got == want).sum() >= 7, (got, want)


@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.95])
@pytest.mark.parametrize("top_k", [None, 200])
def test_tokens_are_in_the_float64_nucleus(torch, top_p, top_k):
    x = _randn(torch, (8, 128256), "bfloat16", 4.0)
    temperature = 0.7
    for seed in range(4):
        tok = S.sample(x, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        z = x.double() / temperature
        if top_k is not None:
            kth = torch.topk(z, top_k, dim=-1).values[:, -1:]
            assert (torch.gather(z, -1, tok[:, None]) >= kth).all()
            z = torch.where(z >= kth, z, torch.full_like(z, float("-inf")))
        p = torch.softmax(z, dim=-1)
        p_tok = torch.gather(p, -1, tok[:, None])
        above = (p * (p > p_tok)).sum(-1)
        assert (above < top_p + 1e-4).all(), (above, top_p)


@pytest.mark.parametrize("kw,support", [
    ({}, [0, 1, 2, 3, 4, 5, 6, 7]),
    ({"top_k": 3}, [2, 3, 7]),
    ({"top_p": 0.8}, [2, 3, 6, 7]),   # probabilities .403 .244 .148 .090 | .055 ...
    ({"temperature": 0.5, "top_k": 4, "top_p": 0.7}, [3, 7]),
])
def test_frequencies_follow_the_filtered_softmax(torch, kw, support):
    logits = np.array([0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 1.5, 2.5])
    rows = 200000
    x = torch.tensor(logits, dtype=torch.float32, device="cuda").repeat(rows, 1)
    counts = torch.bincount(S.sample(x, seed=2024, **kw), minlength=8).cpu().numpy()
    z = logits / kw.get("temperature", 1.0)
    p = np.zeros(8)
    p[support] = np.exp(z[support] - z.max())
    p /= p.sum()
    assert counts[p == 0].sum() == 0, counts
    e = p[p > 0] * rows
    chi2 = float(((counts[p > 0] - e) ** 2 / e).sum())
    assert chi2 < 35.0, (counts, e)   # 7 degrees of freedom at most: P(chi2 > 35) < 2e-5
