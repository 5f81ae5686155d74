"""stdlib attention backward on the GPU against torch autograd in float64, on sequence
lengths that are not multiples of a block."""
from __future__ import annotations

import importlib

import pytest

from tilec.stdlib_kernels import attention, attention_backward

from attention_ref import torch_attention_ref

pytestmark = pytest.mark.gpu

CASES = [
    # layout, (b, h, hk), (n_q, n_k), (d, dv), dtype, masks
    ("bshd", (2, 4, 4), (1000, 1000), (64, 64), "float16", dict()),
    ("bshd", (2, 4, 4), (1000, 1000), (128, 128), "bfloat16", dict(causal=True)),
    ("bhsd", (1, 8, 2), (333, 777), (128, 128), "float16", dict(causal=True)),
    ("bhsd", (1, 8, 2), (777, 333), (64, 64), "float16", dict(causal=True)),
    ("bshd", (2, 6, 1), (513, 513), (96, 96), "bfloat16", dict(window=(100, 0))),
    ("bshd", (2, 4, 2), (611, 450), (128, 128), "float16", dict(window=(70, 200))),   # the wgmma blocks, GQA
    ("bshd", (1, 4, 2), (200, 300), (128, 64), "float16", dict(causal=True, softcap=30.0)),
    ("bshd", (1, 2, 2), (130, 130), (32, 32), "bfloat16", dict(window=(17, 9), scale=0.2)),
    ("bshd", (3, 2, 2), (1, 77), (64, 64), "float16", dict(causal=True)),
    ("bshd", (1, 4, 2), (300, 300), (192, 128), "bfloat16", dict(causal=True)),
    ("bhsd", (1, 2, 2), (130, 200), (256, 256), "float16", dict(window=(50, 20))),
]


def reference(torch, q, k, v, do, layout, **kw):
    """(dq, dk, dv) by torch autograd in float64 of the forward's semantics."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    o, _ = torch_attention_ref(torch, q, k, v, layout=layout, **kw)
    (o * do.double()).sum().backward()
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("layout,heads,lens,dims,dtype,kw", CASES)
def test_gradients_match_float64_autograd(torch, layout, heads, lens, dims, dtype, kw):
    _check_case(torch, layout, heads, lens, dims, dtype, kw)


@pytest.mark.parametrize("split", [1, 2])
def test_grouped_heads_unsplit_and_half_split(torch, split, monkeypatch):
    # these small cases split each group over all its query heads (gqa_split); the other
    # ways, as a large batch or a share of a group takes them
    monkeypatch.setattr(importlib.import_module("tilec.stdlib_kernels.attention_bwd"), "gqa_split",
                        lambda programs, group, target: split)
    _check_case(torch, "bshd", (2, 4, 2), (611, 450), (128, 128), "float16", dict(causal=True))
    _check_case(torch, "bhsd", (1, 8, 2), (333, 777), (64, 64), "bfloat16", dict(window=(90, 10)))


def _check_case(torch, layout, heads, lens, dims, dtype, kw):
    torch.manual_seed(sum(lens) + sum(dims))
    (b, h, hk), (n_q, n_k), (d, dv) = heads, lens, dims
    tdt = getattr(torch, dtype)

    def shape(n, hh, dd):
        return (b, n, hh, dd) if layout == "bshd" else (b, hh, n, dd)
    q = torch.randn(shape(n_q, h, d), device="cuda", dtype=tdt)
    k = torch.randn(shape(n_k, hk, d), device="cuda", dtype=tdt)
    v = torch.randn(shape(n_k, hk, dv), device="cuda", dtype=tdt)
    do = torch.randn(shape(n_q, h, dv), device="cuda", dtype=tdt)
    o, lse = attention(q, k, v, layout=layout, return_lse=True, **kw)
    got = attention_backward(do, q, k, v, o, lse, layout=layout, **kw)
    want = reference(torch, q, k, v, do, layout, **kw)
    tol = 3e-2 if dtype == "bfloat16" else 5e-3
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.shape == w.shape and g.dtype == tdt, name
        err = (g.double() - w).abs().max().item()
        assert err < tol * max(w.abs().max().item(), 1.0), (name, err)


def test_given_gradients_are_written_in_place_on_strided_views(torch):
    # q, k, v as views of one packed (b, s, 3, h, d) projection, their gradients into one buffer
    torch.manual_seed(0)
    qkv = torch.randn(2, 300, 3, 4, 64, device="cuda", dtype=torch.float16)
    q, k, v = qkv.unbind(2)
    do = torch.randn(2, 300, 4, 64, device="cuda", dtype=torch.float16)
    grads = torch.zeros_like(qkv)
    dq, dk, dv = grads.unbind(2)
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    out = attention_backward(do, q, k, v, o, lse, causal=True, dq=dq, dk=dk, dv=dv)
    assert all(a is b for a, b in zip(out, (dq, dk, dv)))
    want = reference(torch, q, k, v, do, "bshd", causal=True)
    for g, w in zip((dq, dk, dv), want):
        assert (g.double() - w).abs().max().item() < 5e-3 * max(w.abs().max().item(), 1.0)


@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(200, 30))], ids=["causal", "window"])
def test_deterministic_gradients_repeat_bit_for_bit(torch, kw):
    # no atomics anywhere: GQA's dK/dV sums over the group and dQ's over key blocks run in a
    # fixed order, so five calls give the same bits (deterministic=True asks for nothing more)
    torch.manual_seed(5)
    q = torch.randn(2, 999, 8, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 999, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    first = attention_backward(do, q, k, v, o, lse, deterministic=True, **kw)
    for _ in range(4):
        again = attention_backward(do, q, k, v, o, lse, deterministic=True, **kw)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


FUSED_CASES = [c for c in CASES if max(c[3]) in (64, 128) and "softcap" not in c[5]]


@pytest.mark.parametrize("layout,heads,lens,dims,dtype,kw", FUSED_CASES)
def test_dq_in_the_dkdv_kernel_matches_float64_autograd(torch, layout, heads, lens, dims, dtype, kw, monkeypatch):
    # the fused form (AttentionBwdTuning.fused_dq_head_dims: 128 in the shipped table), forced on at 64 too
    from dataclasses import replace

    tuning = importlib.import_module("tilec.stdlib_kernels.tuning")
    bwd = importlib.import_module("tilec.stdlib_kernels.attention_bwd")
    saved = tuning.TABLES["sm_90"]
    monkeypatch.setitem(tuning.TABLES, "sm_90", replace(saved, attention_bwd=replace(
        saved.attention_bwd, fused_dq_head_dims=(64, 128))))
    monkeypatch.setattr(bwd, "gqa_split", lambda programs, group, target: 1)
    plans = importlib.import_module("tilec.stdlib_kernels._plan")
    plans.clear_plans()   # earlier tests' launch plans of the same shapes are the two-kernel ones
    try:
        _check_case(torch, layout, heads, lens, dims, dtype, kw)
    finally:
        plans.clear_plans()
