"""stdlib attention with packed variable-length sequences on the GPU against torch float64
per sequence (forward out/lse, backward by autograd), cu_seqlens on the device: one launch
forward, three backward, nothing read back when max_seqlen is given (a CUDA graph captures it)."""
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


def _inputs(torch, lq, lk, h, hk, d, dv, tdt):
    q = torch.randn(sum(lq), h, d, device="cuda", dtype=tdt)
    k = torch.randn(sum(lk), hk, d, device="cuda", dtype=tdt)
    v = torch.randn(sum(lk), hk, dv, device="cuda", dtype=tdt)
    return q, k, v


def _check_forward(torch, q, k, v, o, lse, lq, lk, tol, **kw):
    """o and lse against torch float64, sequence by sequence."""
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


def _check_backward(torch, q, k, v, do, grads, lq, lk, tol, **kw):
    """(dq, dk, dv) against torch autograd in float64, sequence by sequence (every query row
    must see a key)."""
    dq, dk, dv = grads
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
                assert (got.double() - want).abs().max().item() < tol * max(want.abs().max().item(), 1.0)
        sq, sk = sq + nq, sk + nk


CASES = [
    # (lq, lk), (h, hk), (d, dv), dtype, masks
    (([0, 1, 37, 130, 64], [5, 1, 37, 64, 130]), (4, 2), (64, 64), "float16", dict()),
    (([0, 1, 37, 130, 64], [0, 1, 37, 130, 64]), (4, 4), (128, 128), "bfloat16", dict(causal=True)),
    (([300, 7, 129], [500, 0, 129]), (8, 1), (96, 96), "float16", dict(window=(50, 0))),
    (([33, 200], [200, 33]), (2, 2), (256, 256), "bfloat16", dict(softcap=20.0, causal=True)),
    (([1000, 3, 517, 1], [999, 3, 700, 2]), (8, 2), (128, 128), "float16", dict(causal=True)),
]


@pytest.mark.parametrize("lens,heads,dims,dtype,kw", CASES)
def test_varlen_forward_matches_float64(torch, lens, heads, dims, dtype, kw):
    (lq, lk), (h, hk), (d, dv) = lens, heads, dims
    torch.manual_seed(sum(lq) + d)
    tdt = getattr(torch, dtype)
    q, k, v = _inputs(torch, lq, lk, h, hk, d, dv, tdt)
    o, lse = attention(q, k, v, cu_seqlens_q=_cu(torch, lq), cu_seqlens_k=_cu(torch, lk),
                       max_seqlen_q=max(lq), max_seqlen_k=max(lk), return_lse=True, **kw)
    assert o.shape == (sum(lq), h, dv) and lse.shape == (h, sum(lq)) and lse.dtype == torch.float32
    _check_forward(torch, q, k, v, o, lse, lq, lk, 2e-2 if dtype == "bfloat16" else 4e-3, **kw)


BWD_CASES = [
    # (lq, lk), (h, hk), (d, dv), dtype, masks; every query row sees a key
    (([0, 1, 37, 130, 64], [5, 1, 64, 130, 200]), (4, 2), (64, 64), "float16", dict()),
    (([0, 1, 37, 130, 64], [5, 1, 64, 130, 200]), (4, 2), (64, 64), "float16", dict(causal=True)),
    (([0, 1, 37, 130, 64], [5, 1, 64, 130, 200]), (4, 2), (64, 64), "float16", dict(softcap=20.0, window=(40, 10))),
    (([301, 1, 77], [333, 2, 77]), (8, 2), (128, 128), "bfloat16", dict(causal=True)),
    # head dim 128 on the wgmma blocks (sm_90a: dK/dV 128 keys x 64-row steps), f16, no GQA
    (([70, 131, 3], [150, 45, 3]), (4, 4), (128, 128), "float16", dict()),
    (([129, 50], [129, 61]), (2, 1), (192, 128), "bfloat16", dict(window=(30, 30))),
]


@pytest.mark.parametrize("lens,heads,dims,dtype,kw", BWD_CASES)
def test_varlen_backward_matches_float64(torch, lens, heads, dims, dtype, kw):
    (lq, lk), (h, hk), (d, dv) = lens, heads, dims
    torch.manual_seed(7 + d)
    tdt = getattr(torch, dtype)
    q, k, v = _inputs(torch, lq, lk, h, hk, d, dv, tdt)
    do = torch.randn(sum(lq), h, dv, device="cuda", dtype=tdt)
    cu = dict(cu_seqlens_q=_cu(torch, lq), cu_seqlens_k=_cu(torch, lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk))
    o, lse = attention(q, k, v, return_lse=True, **cu, **kw)
    grads = attention_backward(do, q, k, v, o, lse, **cu, **kw)
    _check_backward(torch, q, k, v, do, grads, lq, lk, 3e-2 if dtype == "bfloat16" else 5e-3, **kw)


def test_max_seqlen_is_derived_on_the_host_when_not_given(torch):
    # a synchronization, but the same launch as with the maxima given
    torch.manual_seed(3)
    lq, lk = [4, 6, 0, 45], [9, 6, 3, 20]
    q, k, v = _inputs(torch, lq, lk, 2, 2, 64, 64, torch.float16)
    cu = dict(cu_seqlens_q=_cu(torch, lq), cu_seqlens_k=_cu(torch, lk))
    o, lse = attention(q, k, v, return_lse=True, **cu)
    o2, lse2 = attention(q, k, v, return_lse=True, max_seqlen_q=45, max_seqlen_k=20, **cu)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    _check_forward(torch, q, k, v, o, lse, lq, lk, 4e-3)


def test_forward_and_backward_captured_in_a_cuda_graph(torch):
    """With max_seqlen given nothing is read back: the varlen launches capture and replay."""
    torch.manual_seed(11)
    lq, lk = [77, 0, 1, 130], [100, 5, 1, 130]
    q, k, v = _inputs(torch, lq, lk, 4, 2, 64, 64, torch.float16)
    do = torch.randn(sum(lq), 4, 64, device="cuda", dtype=torch.float16)
    cu = dict(cu_seqlens_q=_cu(torch, lq), cu_seqlens_k=_cu(torch, lk), max_seqlen_q=130, max_seqlen_k=130,
              causal=True)
    o, lse = attention(q, k, v, return_lse=True, **cu)     # compile and load before capturing
    attention_backward(do, q, k, v, o, lse, **cu)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o, lse = attention(q, k, v, return_lse=True, **cu)
        grads = attention_backward(do, q, k, v, o, lse, **cu)
    q.copy_(torch.randn(q.shape, device="cuda", dtype=torch.float16))
    g.replay()
    torch.cuda.synchronize()
    _check_forward(torch, q, k, v, o, lse, lq, lk, 4e-3, causal=True)
    _check_backward(torch, q, k, v, do, grads, lq, lk, 5e-3, causal=True)
