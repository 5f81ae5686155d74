"""mla_decode on the GPU against float64 torch: MLA shapes (576-wide latent rows, 512 values),
contexts that are no multiple of the page or the block, random non-monotonic block tables,
NaN in every cache row no sequence owns (a kernel that reads past a sequence's end shows it)."""
from __future__ import annotations

import math

import pytest

from tilec.stdlib_kernels import mla_decode

pytestmark = pytest.mark.gpu

D, DV = 576, 512


def _cache(torch, lens, page, dtype, paged, gen):
    """(kv_cache, block_table or None): every row a sequence owns random, the rest NaN."""
    b = len(lens)
    dev = "cuda"
    if not paged:
        max_seq = max(lens) + 37
        kv = torch.full((b, max_seq, 1, D), float("nan"), device=dev, dtype=dtype)
        for i, n in enumerate(lens):
            kv[i, :n] = torch.randn((n, 1, D), device=dev, dtype=dtype, generator=gen)
        return kv, None
    per = [-(-n // page) for n in lens]
    max_blocks = max(per) + 2
    pool = sum(per) + 7
    perm = torch.randperm(pool, device=dev, generator=gen).to(torch.int32)   # non-monotonic tables
    table = torch.full((b, max_blocks), 10 ** 6, device=dev, dtype=torch.int32)  # unused entries: out of the pool
    kv = torch.full((pool, page, 1, D), float("nan"), device=dev, dtype=dtype)
    at = 0
    for i, n in enumerate(lens):
        table[i, :per[i]] = perm[at:at + per[i]]
        at += per[i]
        j = torch.arange(n, device=dev)
        kv[table[i, j // page].long(), j % page] = torch.randn((n, 1, D), device=dev, dtype=dtype, generator=gen)
    return kv, table


def _reference(torch, q, kv, lens, table, page, scale, causal):
    """(out, lse) in float64: out (b, q_len, heads, DV), lse (b, heads, q_len)."""
    b, t, h, _ = q.shape
    out = torch.zeros((b, t, h, DV), device="cuda", dtype=torch.float64)
    lse = torch.full((b, h, t), float("-inf"), device="cuda", dtype=torch.float64)
    for i, n in enumerate(lens):
        if n == 0:
            continue
        j = torch.arange(n, device="cuda")
        rows = (kv[i, :n, 0] if table is None else kv[table[i, j // page].long(), j % page, 0]).double()
        s = torch.einsum("thd,kd->thk", q[i].double(), rows) * scale
        if causal:
            lim = n - t + torch.arange(t, device="cuda")
            s = s.masked_fill(j[None, None, :] > lim[:, None, None], float("-inf"))
        lse[i] = torch.logsumexp(s, -1).T
        out[i] = torch.einsum("thk,kd->thd", torch.softmax(s, -1), rows[:, :DV])
    return out, lse


CASES = [
    # heads, q_len, lens, page (0: contiguous), dtype, num_splits
    (16, 1, [1000, 2999, 1531, 77], 64, "bfloat16", None),
    (64, 1, [2047, 1000, 3001, 1111], 64, "bfloat16", None),
    (128, 1, [1234, 2500, 999, 3000], 64, "bfloat16", None),
    (128, 2, [1234, 2500, 999, 3000], 64, "bfloat16", 1),
    (64, 2, [1500, 0, 2100, 1024], 16, "bfloat16", None),     # page 16: rows gathered; a zero-length sequence
    (16, 1, [1003, 2001, 5, 2900], 1, "float16", None),       # page 1
    (64, 1, [1003, 2001, 5, 2900], 0, "bfloat16", 3),         # contiguous cache
    (16, 4, [2222, 1717, 1000, 3000], 0, "float16", 1),
    (128, 1, [0, 2500, 64, 1999], 64, "bfloat16", None),    # one page per step with a zero-length sequence
    (64, 3, [777, 0, 130, 2049], 0, "bfloat16", None),      # contiguous, q_len 3, a zero-length sequence
    (128, 1, [1000, 3, 2047, 513], 32, "bfloat16", 2),      # page 32: rows gathered at 128 heads, two splits
]


@pytest.mark.parametrize("heads,q_len,lens,page,dtype,splits", CASES)
def test_mla_decode_matches_float64(torch, heads, q_len, lens, page, dtype, splits):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(heads * 1000 + q_len * 10 + page)
    tdt = getattr(torch, dtype)
    kv, table = _cache(torch, lens, page, tdt, page > 0, gen)
    q = torch.randn((len(lens), q_len, heads, D), device="cuda", dtype=tdt, generator=gen)
    seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    out, lse = mla_decode(q, kv, seqlens, block_table=table, num_splits=splits, return_lse=True)
    assert out.shape == (len(lens), q_len, heads, DV) and out.dtype == tdt
    want, want_lse = _reference(torch, q, kv, lens, table, max(page, 1), 1.0 / math.sqrt(D), True)
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-3, atol=1e-3)


def test_mla_decode_scale_and_no_causal(torch):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    lens = [1300, 777]
    kv, table = _cache(torch, lens, 64, torch.bfloat16, True, gen)
    q = torch.randn((2, 3, 32, D), device="cuda", dtype=torch.bfloat16, generator=gen)
    seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    scale = 0.1
    out = mla_decode(q, kv, seqlens, block_table=table, scale=scale, causal=False)
    want, _ = _reference(torch, q, kv, lens, table, 64, scale, False)
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("page,splits", [(64, None), (16, 1), (0, 2)])
def test_mla_decode_first_value_half(torch, page, splits):
    """head_dim_v 256: the wgmma kernel's one-accumulator form (VB = 1), paged, gathered and
    contiguous, with and without splits."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(31 + page)
    lens = [1500, 3, 2049]
    kv, table = _cache(torch, lens, page, torch.bfloat16, page > 0, gen)
    q = torch.randn((3, 2, 64, D), device="cuda", dtype=torch.bfloat16, generator=gen)
    seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    out, lse = mla_decode(q, kv, seqlens, block_table=table, head_dim_v=256, num_splits=splits, return_lse=True)
    assert out.shape == (3, 2, 64, 256)
    want, want_lse = _reference(torch, q, kv, lens, table, max(page, 1), 1.0 / math.sqrt(D), True)
    torch.testing.assert_close(out.double(), want[..., :256], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-3, atol=1e-3)


def test_a_decode_step_captured_in_a_cuda_graph_replays_on_new_queries(torch):
    """Decode steps are what CUDA graphs are for: the lengths are not read back while capturing."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    lens = [300, 77, 1]
    kv, table = _cache(torch, lens, 64, torch.bfloat16, True, gen)
    seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    q = torch.randn((len(lens), 1, 16, D), device="cuda", dtype=torch.bfloat16, generator=gen)
    mla_decode(q, kv, seqlens, block_table=table)             # compile and load before capturing
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = mla_decode(q, kv, seqlens, block_table=table)
    q.copy_(torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen))
    g.replay()
    torch.cuda.synchronize()
    want, _ = _reference(torch, q, kv, lens, table, 64, 1 / math.sqrt(D), True)
    assert (out.double() - want).abs().max().item() < 3e-2


def test_a_replayed_call_still_validates_and_follows_new_lengths(torch):
    """The entry point is planned: a second call replays the first's launches, yet a call that
    validates still checks its lengths, and a replay reads the lengths it is given."""
    gen = torch.Generator(device="cuda").manual_seed(9)
    lens = [500, 130]
    kv, table = _cache(torch, lens, 64, torch.bfloat16, True, gen)
    q = torch.randn((2, 1, 16, D), device="cuda", dtype=torch.bfloat16, generator=gen)
    first = mla_decode(q, kv, torch.tensor(lens, device="cuda", dtype=torch.int32), block_table=table)
    shorter = [320, 130]
    again = mla_decode(q, kv, torch.tensor(shorter, device="cuda", dtype=torch.int32), block_table=table)
    want, _ = _reference(torch, q, kv, shorter, table, 64, 1 / math.sqrt(D), True)
    assert (again.double() - want).abs().max().item() < 3e-2
    assert (first.double() - again.double()).abs().max().item() > 1e-2      # not the first call's result
    too_long = torch.tensor([table.shape[1] * 64 + 1, 130], device="cuda", dtype=torch.int32)
    with pytest.raises(ValueError, match="cache_seqlens"):
        mla_decode(q, kv, too_long, block_table=table)
