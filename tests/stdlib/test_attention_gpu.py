"""stdlib attention on the GPU against float64, on sequence lengths that are not multiples of a block."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.stdlib_kernels import attention

from attention_ref import attention_ref

pytestmark = pytest.mark.gpu

CASES = [
    # layout, (b, h, hk), (n_q, n_k), (d, dv), dtype, masks
    ("bshd", (2, 4, 4), (1000, 1000), (64, 64), "float16", dict()),
    ("bshd", (2, 4, 4), (1000, 1000), (128, 128), "bfloat16", dict(causal=True)),
    ("bhsd", (1, 8, 2), (333, 777), (128, 128), "float16", dict(causal=True)),
    ("bhsd", (1, 8, 2), (777, 333), (64, 64), "float16", dict(causal=True)),
    ("bshd", (2, 6, 1), (513, 513), (96, 96), "bfloat16", dict(window=(100, 0))),
    ("bshd", (1, 4, 2), (200, 300), (192, 128), "float16", dict(causal=True, softcap=30.0)),
    ("bshd", (1, 2, 2), (130, 130), (256, 256), "bfloat16", dict(window=(17, 9))),
    ("bshd", (3, 2, 2), (1, 77), (64, 64), "float16", dict(causal=True)),
]


@pytest.mark.parametrize("layout,heads,lens,dims,dtype,kw", CASES)
def test_attention_matches_float64(torch, layout, heads, lens, dims, dtype, kw):
    torch.manual_seed(sum(lens) + sum(dims))
    (b, h, hk), (n_q, n_k), (d, dv) = heads, lens, dims
    tdt = getattr(torch, dtype)

    def shape(n, hh, dd):
        return (b, n, hh, dd) if layout == "bshd" else (b, hh, n, dd)
    q = torch.randn(shape(n_q, h, d), device="cuda", dtype=tdt)
    k = torch.randn(shape(n_k, hk, d), device="cuda", dtype=tdt)
    v = torch.randn(shape(n_k, hk, dv), device="cuda", dtype=tdt)
    o, lse = attention(q, k, v, layout=layout, return_lse=True, **kw)
    want_o, want_lse = attention_ref(*(t.float().cpu().numpy() for t in (q, k, v)), layout=layout, **kw)
    got = o.double().cpu().numpy()
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    assert np.abs(got - want_o).max() < tol
    lse = lse.cpu().numpy()
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-4, atol=1e-4)


def test_attention_agrees_with_sdpa_on_strided_views(torch):
    # q, k, v as views of one packed (b, s, 3, h, d) projection, as a fused QKV linear makes them
    qkv = torch.randn(2, 300, 3, 4, 64, device="cuda", dtype=torch.float16)
    q, k, v = qkv.unbind(2)
    o = attention(q, k, v, causal=True)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v)), is_causal=True).transpose(1, 2)
    assert (o.float() - want).abs().max().item() < 4e-3
