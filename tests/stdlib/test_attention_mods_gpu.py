"""attention with score_mod / mask_mod / block_mask on the GPU: forward and backward against
torch autograd in float64 of FlexAttention's semantics (the mods written again in torch, so
score_mod_grad is checked against a derivative that autograd forms), block masks computed on
the device against brute force, sequence lengths that are not multiples of a block."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.stdlib_kernels import attention, attention_backward, block_mask

from attention_mods_funcs import (H, PREFIX, REL_OFFSET, alibi, bias_grad, bias_grad_1, causal, document_causal,
                                  prefix_lm, rel_bias, table_bias, tanh_cap, tanh_cap_grad)

pytestmark = pytest.mark.gpu


def _torch_mods(torch, table=None, doc=None):
    return {
        "rel_bias": lambda s, b, h, q, k: s + 0.03 * (q - k),
        "alibi": lambda s, b, h, q, k: s + 2.0 ** (-8.0 * (h + 1) / H) * (k - q),
        "table_bias": lambda s, b, h, q, k: s + table.double()[h, q - k + REL_OFFSET],
        "tanh_cap": lambda s, b, h, q, k: 4.0 * torch.tanh(s / 4.0),
        "causal": lambda b, h, q, k: q >= k,
        "prefix_lm": lambda b, h, q, k: (k < PREFIX) | (q >= k),
        "document_causal": lambda b, h, q, k: (doc[b, q] == doc[b, k]) & (q >= k),
    }


def reference(torch, q, k, v, score_fn, mask_fn, layout):
    """out of FlexAttention's semantics in float64 by torch (q, k, v leaves for autograd)."""
    qh, kh, vh = ((t.transpose(1, 2) if layout == "bshd" else t) for t in (q, k, v))
    b_, h, n_q, d = qh.shape
    g = h // kh.shape[1]
    kr, vr = kh.repeat_interleave(g, dim=1), vh.repeat_interleave(g, dim=1)
    dev = q.device
    bi = torch.arange(b_, device=dev)[:, None, None, None]
    hi = torch.arange(h, device=dev)[None, :, None, None]
    qi = torch.arange(n_q, device=dev)[None, None, :, None]
    ki = torch.arange(kh.shape[2], device=dev)[None, None, None, :]
    s = qh @ kr.transpose(-1, -2) / d ** 0.5
    if score_fn is not None:
        s = score_fn(s, bi, hi, qi, ki)
    if mask_fn is not None:
        s = s.masked_fill(~mask_fn(bi, hi, qi, ki).expand(s.shape), float("-inf"))
    o = torch.softmax(s, dim=-1).nan_to_num(0.0) @ vr
    return o.transpose(1, 2) if layout == "bshd" else o


CASES = [
    # layout, (b, h, hk), n, d, dtype, score_mod, mask_mod
    ("bshd", (2, H, 2), 1000, 64, "float16", "alibi", "causal"),
    ("bshd", (2, H, 4), 777, 128, "bfloat16", "rel_bias", None),
    ("bhsd", (1, H, 1), 555, 64, "float16", "table_bias", "prefix_lm"),
    ("bshd", (2, H, 2), 1000, 128, "float16", "alibi", "document_causal"),
    ("bhsd", (2, H, 2), 300, 64, "bfloat16", "tanh_cap", "document_causal"),
    ("bshd", (1, H, 2), 1234, 128, "bfloat16", None, "prefix_lm"),
    # head dim 128 on the wgmma blocks in both kernels (sm_90a, bwd_path "mods"): block lists
    # with one query head per kv head, and DENSE with a GQA group walked inside the loop
    ("bhsd", (1, H, H), 999, 128, "float16", "alibi", "causal"),
    ("bshd", (2, H, 2), 600, 128, "float16", "alibi", None),
]
TC = {"alibi": alibi, "rel_bias": rel_bias, "table_bias": table_bias, "tanh_cap": tanh_cap, "causal": causal,
      "prefix_lm": prefix_lm, "document_causal": document_causal}
TC_GRAD = {"alibi": bias_grad, "rel_bias": bias_grad, "table_bias": bias_grad_1, "tanh_cap": tanh_cap_grad}


def _docs(torch, b, n):
    """(b, n) int32 document ids on the GPU: 6 documents of random lengths per row."""
    cuts = torch.sort(torch.randperm(n - 1)[:5] + 1).values
    ids = torch.searchsorted(cuts, torch.arange(n), right=True).to(torch.int32)
    return ids[None].repeat(b, 1).cuda()


@pytest.mark.parametrize("layout,heads,n,d,dtype,score,mask", CASES)
def test_forward_and_backward_match_float64_autograd(torch, layout, heads, n, d, dtype, score, mask):
    torch.manual_seed(n + d)
    b, h, hk = heads
    tdt = getattr(torch, dtype)

    def shape(hh):
        return (b, n, hh, d) if layout == "bshd" else (b, hh, n, d)
    q, do = (torch.randn(shape(h), device="cuda", dtype=tdt) for _ in range(2))
    k, v = (torch.randn(shape(hk), device="cuda", dtype=tdt) for _ in range(2))
    table = torch.randn(h, 2 * REL_OFFSET + 1, device="cuda", dtype=torch.float32) * 0.5
    doc = _docs(torch, b, n)
    args = (table,) if score == "table_bias" else (doc,) if mask == "document_causal" else ()
    # prefix-LM depends on neither b nor h: its mask is made once for all (B = H = None, stride-0 lists)
    bb, bh = (None, None) if mask == "prefix_lm" else (b, h)
    bm = block_mask(TC[mask], bb, bh, n, n, mod_args=args, device="cuda") if mask else None
    kw = dict(score_mod=TC.get(score), block_mask=bm, mod_args=args, layout=layout)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    got = attention_backward(do, q, k, v, o, lse, score_mod_grad=TC_GRAD.get(score), **kw)

    fns = _torch_mods(torch, table, doc.long())
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    want_o = reference(torch, *leaves, fns.get(score), fns.get(mask), layout)
    (want_o * do.double()).sum().backward()
    tol = 3e-2 if dtype == "bfloat16" else 5e-3
    assert o.shape == want_o.shape and o.dtype == tdt
    assert (o.double() - want_o).abs().max().item() < tol
    for name, g, w in zip(("dq", "dk", "dv"), got, (t.grad for t in leaves)):
        assert g.shape == w.shape and g.dtype == tdt, name
        err = (g.double() - w).abs().max().item()
        assert err < tol * max(w.abs().max().item(), 1.0), (name, err)


def test_block_mask_on_the_device_matches_brute_force(torch):
    torch.manual_seed(1)
    b, n_q, n_k = 2, 700, 900
    doc = _docs(torch, b, max(n_q, n_k))
    bm = block_mask(document_causal, b, H, n_q, n_k, BLOCK=(128, 64), mod_args=(doc,))
    assert bm.classes.is_cuda and bm.kv_idx.is_cuda
    d = doc.long().cpu()
    qi, ki = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    classes = bm.classes.cpu().numpy()
    for bb in range(b):
        keep = ((d[bb, qi] == d[bb, ki]) & (qi >= ki)).numpy()
        for i in range(-(-n_q // 128)):
            for j in range(-(-n_k // 64)):
                blk = keep[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64]
                want = 2 if blk.all() and blk.shape[1] == 64 else 1 if blk.any() else 0
                assert np.all(classes[bb, :, i, j] == want), (bb, i, j)
    # the lists the kernels walk: per query block, its partial then its full key blocks, in order
    num, idx = bm.kv_num.cpu().numpy(), bm.kv_idx.cpu().numpy()
    fnum, fidx = bm.full_kv_num.cpu().numpy(), bm.full_kv_idx.cpu().numpy()
    for pos in np.ndindex(classes.shape[:3]):
        assert list(idx[pos][:num[pos]]) == list(np.flatnonzero(classes[pos] == 1))
        assert list(fidx[pos][:fnum[pos]]) == list(np.flatnonzero(classes[pos] == 2))


def test_torch_ops_attention_mods_is_differentiable(torch):
    from tilec.stdlib_kernels import torch_ops
    torch.manual_seed(3)
    b, h, hk, n, d = 2, H, 2, 600, 64
    q = torch.randn(b, n, h, d, device="cuda", dtype=torch.float16, requires_grad=True)
    k, v = (torch.randn(b, n, hk, d, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(2))
    doc = _docs(torch, b, n)
    bm = block_mask(document_causal, b, h, n, n, mod_args=(doc,))
    o = torch_ops.attention_mods(q, k, v, score_mod=alibi, score_mod_grad=bias_grad, block_mask=bm, mod_args=(doc,))
    o.float().square().sum().backward()   # an upstream gradient that is not all ones

    fns = _torch_mods(torch, doc=doc.long())
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    want = reference(torch, *leaves, fns["alibi"], fns["document_causal"], "bshd")
    want.square().sum().backward()
    assert (o.double() - want).abs().max().item() < 5e-3
    for name, g, w in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), (t.grad for t in leaves)):
        err = (g.double() - w).abs().max().item()
        assert err < 1e-2 * max(w.abs().max().item(), 1.0), (name, err)
    with pytest.raises(ValueError, match="score_mod_grad"):
        torch_ops.attention_mods(q, k, v, score_mod=alibi, block_mask=bm, mod_args=(doc,))
