"""stdlib attention with packed variable-length sequences on the GPU against torch float64
per sequence (forward out/lse, backward by autograd), cu_seqlens on the device."""
from __future__ import annotations

import pytest

from tilec.stdlib_kernels import attention, attention_backward

from attention_ref import torch_attention_ref

pytestmark = pytest.mark.gpu


def _cu(torch, lens):
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32, device="cuda")


CASES = [
    # (lq, lk), (h, hk), (d, dv), dtype, masks
    (([0, 1, 37, 130, 64], [5, 1, 37, 64, 130]), (4, 2), (64, 64), "float16", dict()),
    (([0, 1, 37, 130, 64], [0, 1, 37, 130, 64]), (4, 4), (128, 128), "bfloat16", dict(causal=True)),
    (([300, 7, 129], [500, 0, 129]), (8, 1), (96, 96), "float16", dict(window=(50, 0))),
    (([33, 200], [200, 33]), (2, 2), (256, 256), "bfloat16", dict(softcap=20.0, causal=True)),
]


@pytest.mark.parametrize("lens,heads,dims,dtype,kw", CASES)
def test_varlen_forward_matches_float64(torch, lens, heads, dims, dtype, kw):
    (lq, lk), (h, hk), (d, dv) = lens, heads, dims
    torch.manual_seed(sum(lq) + d)
    tdt = getattr(torch, dtype)
    q = torch.randn(sum(lq), h, d, device="cuda", dtype=tdt)
    k = torch.randn(sum(lk), hk, d, device="cuda", dtype=tdt)
    v = torch.randn(sum(lk), hk, dv, device="cuda", dtype=tdt)
    o, lse = attention(q, k, v, cu_seqlens_q=_cu(torch, lq), cu_seqlens_k=_cu(torch, lk),
                       max_seqlen_q=max(lq), max_seqlen_k=max(lk), return_lse=True, **kw)
    assert o.shape == (sum(lq), h, dv) and lse.shape == (h, sum(lq)) and lse.dtype == torch.float32
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    sq = sk = 0
    for nq, nk in zip(lq, lk):
        if nq:
            got_o, got_lse = o[sq:sq + nq].double(), lse[:, sq:sq + nq].double()
            if nk == 0:
                assert torch.all(got_o == 0) and torch.all(torch.isneginf(got_lse))
            else:
                wo, wl = torch_attention_ref(torch, *(t[s:s + n][None].double() for t, s, n in
                                                      ((q, sq, nq), (k, sk, nk), (v, sk, nk))), **kw)
                assert (got_o - wo[0]).abs().max().item() < tol
                assert torch.equal(torch.isneginf(got_lse), torch.isneginf(wl[0]))
                fin = torch.isfinite(wl[0])
                assert (got_lse[fin] - wl[0][fin]).abs().max().item() < 1e-3
        sq, sk = sq + nq, sk + nk


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(softcap=20.0, window=(40, 10))],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_varlen_backward_matches_float64(torch, kw):
    lq, lk = [0, 1, 37, 130, 64], [5, 1, 64, 130, 200]   # every query row sees a key
    torch.manual_seed(7)
    q = torch.randn(sum(lq), 4, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(sum(lk), 2, 64, device="cuda", dtype=torch.float16)
    v = torch.randn(sum(lk), 2, 64, device="cuda", dtype=torch.float16)
    do = torch.randn(sum(lq), 4, 64, device="cuda", dtype=torch.float16)
    cu = dict(cu_seqlens_q=_cu(torch, lq), cu_seqlens_k=_cu(torch, lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk))
    o, lse = attention(q, k, v, return_lse=True, **cu, **kw)
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, **cu, **kw)
    sq = sk = 0
    for nq, nk in zip(lq, lk):
        leaves = [t[s:s + n][None].double().requires_grad_() for t, s, n in ((q, sq, nq), (k, sk, nk), (v, sk, nk))]
        if nq == 0:
            assert torch.all(dk[sk:sk + nk] == 0) and torch.all(dv[sk:sk + nk] == 0)
        else:
            wo, _ = torch_attention_ref(torch, *leaves, **kw)
            wo.backward(do[sq:sq + nq][None].double())
            for got, leaf in zip((dq[sq:sq + nq], dk[sk:sk + nk], dv[sk:sk + nk]), leaves):
                want = leaf.grad[0]
                assert (got.double() - want).abs().max().item() < 4e-3 * max(want.abs().max().item(), 1.0)
        sq, sk = sq + nq, sk + nk


def test_device_cu_seqlens_need_max_seqlen(torch):
    q = torch.randn(10, 2, 16, device="cuda", dtype=torch.float16)
    cu = _cu(torch, [4, 6])
    with pytest.raises(ValueError, match="max_seqlen_q"):
        attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu)
