"""stdlib attention_decode on the GPU against float64 torch: random (non-monotonic) page
tables, pages of 1, 3, 8, 16, 32, 48, 64 and 256 (one test with NaN in every pool row no
sequence holds), contiguous caches, contexts up to ~5000 that are not multiples of a page or
a tile, zero-length sequences, q_len 1, 2 and 4, GQA, head dims 64, 96 and 128, k_new/v_new
appends."""
from __future__ import annotations

import math

import pytest

from tilec.stdlib_kernels import attention_decode

pytestmark = pytest.mark.gpu


def decode_ref(torch, q, k_cache, v_cache, lens, table=None, causal=True, window=None, softcap=None):
    """(out, lse) in float64, flash_attn_with_kvcache's rule: the q_len tokens are the last
    positions of each sequence of lens[b] keys; rows that see no key give 0 and -inf."""
    batch, q_len, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    outs, lses = [], []
    for b in range(batch):
        n = int(lens[b])
        j = torch.arange(n, device=q.device)
        if table is None:
            k, v = k_cache[b, :n], v_cache[b, :n]
        else:
            page = k_cache.shape[1]
            pages = table[b].long()[j // page]
            k, v = k_cache[pages, j % page], v_cache[pages, j % page]
        k = k.double().repeat_interleave(heads // kv_heads, dim=1)     # (n, heads, dim)
        v = v.double().repeat_interleave(heads // kv_heads, dim=1)
        s = torch.einsum("thd,nhd->htn", q[b].double(), k) / math.sqrt(dim)
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(q_len, device=q.device)[:, None] + (n - q_len)
        keep = torch.ones(q_len, n, dtype=torch.bool, device=q.device)
        if causal:
            keep &= j[None, :] <= pos
        if window is not None:
            if window[0] >= 0:
                keep &= j[None, :] >= pos - window[0]
            if window[1] >= 0:
                keep &= j[None, :] <= pos + window[1]
        s = s.masked_fill(~keep, -math.inf)
        lse = torch.logsumexp(s, dim=-1) if n else torch.full((heads, q_len), -math.inf, device=q.device,
                                                              dtype=torch.float64)
        p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None]) if n else s
        o = torch.einsum("htn,nhd->thd", p, v) if n else torch.zeros(q_len, heads, dim, device=q.device,
                                                                      dtype=torch.float64)
        outs.append(o)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def make_cache(torch, batch, capacity, page, kv_heads, dim, dtype, spare=5):
    """Contiguous (page 0) or paged caches of random values, a random permutation of the
    pool as the block table."""
    if not page:
        shape = (batch, capacity, kv_heads, dim)
        return (torch.randn(shape, device="cuda", dtype=dtype), torch.randn(shape, device="cuda", dtype=dtype), None)
    blocks = -(-capacity // page)
    pool = batch * blocks + spare
    shape = (pool, page, kv_heads, dim)
    table = torch.randperm(pool, device="cuda")[:batch * blocks].reshape(batch, blocks).to(torch.int32)
    return torch.randn(shape, device="cuda", dtype=dtype), torch.randn(shape, device="cuda", dtype=dtype), table


def check(torch, o, lse, want_o, want_lse, dtype):
    tol = 2e-2 if dtype is torch.bfloat16 else 4e-3
    assert (o.double() - want_o).abs().max().item() < tol
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    fin = torch.isfinite(want_lse)
    assert torch.allclose(lse.double()[fin], want_lse[fin], rtol=1e-4, atol=1e-4)


CASES = [
    # page (0: contiguous), batch, (heads, kv_heads), q_len, capacity, dtype, splits
    (16, 8, (32, 8), 1, 5003, "bfloat16", None),
    (64, 8, (32, 8), 4, 4999, "float16", None),
    (16, 3, (8, 8), 1, 4100, "float16", None),
    (64, 2, (32, 8), 1, 3000, "bfloat16", 1),
    (16, 5, (16, 2), 4, 2000, "bfloat16", 7),
    (0, 4, (32, 8), 1, 5000, "bfloat16", None),
    (0, 6, (32, 32), 4, 1500, "float16", 1),
    (256, 2, (32, 8), 1, 4000, "bfloat16", None),
    (16, 2, (32, 4), 16, 1200, "bfloat16", None),    # 128 rows: two 64-row blocks (S on m64n32k16)
    (0, 3, (16, 2), 8, 900, "float16", 2),            # 64 rows, contiguous, split
]


@pytest.mark.parametrize("page,batch,heads,q_len,capacity,dtype,splits", CASES)
def test_decode_matches_float64(torch, page, batch, heads, q_len, capacity, dtype, splits):
    torch.manual_seed(page + batch + capacity)
    tdt = getattr(torch, dtype)
    h, hk = heads
    kc, vc, table = make_cache(torch, batch, capacity, page, hk, 128, tdt)
    lens = torch.randint(1, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
    lens[0] = 0                         # an empty sequence
    lens[-1] = capacity                 # a full one
    q = torch.randn(batch, q_len, h, 128, device="cuda", dtype=tdt)
    o, lse = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits, return_lse=True)
    want_o, want_lse = decode_ref(torch, q, kc, vc, lens.tolist(), table)
    assert o.shape == q.shape and o.dtype == tdt and lse.shape == (batch, h, q_len)
    check(torch, o, lse, want_o, want_lse, tdt)
    assert not o[0].any()


@pytest.mark.parametrize("page", [0, 16, 64])
def test_k_new_is_appended_and_attended(torch, page):
    torch.manual_seed(17 + page)
    batch, h, hk, q_len, capacity, tdt = 4, 32, 8, 4, 3000, torch.bfloat16
    kc, vc, table = make_cache(torch, batch, capacity, page, hk, 128, tdt)
    lens = torch.tensor([0, 1234, 2996, 77], device="cuda", dtype=torch.int32)
    k_new = torch.randn(batch, q_len, hk, 128, device="cuda", dtype=tdt)
    v_new = torch.randn(batch, q_len, hk, 128, device="cuda", dtype=tdt)
    q = torch.randn(batch, q_len, h, 128, device="cuda", dtype=tdt)
    k_before, v_before = kc.clone(), vc.clone()
    o, lse = attention_decode(q, kc, vc, lens, block_table=table, k_new=k_new, v_new=v_new, return_lse=True)
    want_k, want_v = k_before.clone(), v_before.clone()
    for b in range(batch):
        for t in range(q_len):
            pos = int(lens[b]) + t
            at = (int(table[b, pos // page]), pos % page) if page else (b, pos)
            want_k[at], want_v[at] = k_new[b, t], v_new[b, t]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
    want_o, want_lse = decode_ref(torch, q, kc, vc, (lens + q_len).tolist(), table)
    check(torch, o, lse, want_o, want_lse, tdt)


@pytest.mark.parametrize("kw", [dict(window=(300, -1)), dict(softcap=20.0), dict(causal=False, window=(100, 2))])
def test_windows_and_softcap(torch, kw):
    torch.manual_seed(3)
    batch, h, hk, q_len, capacity, tdt = 3, 16, 4, 4, 2500, torch.float16
    kc, vc, table = make_cache(torch, batch, capacity, 16, hk, 128, tdt)
    lens = torch.tensor([2500, 2, 1000], device="cuda", dtype=torch.int32)
    q = torch.randn(batch, q_len, h, 128, device="cuda", dtype=tdt)
    for splits in (1, 4):
        o, lse = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits, return_lse=True, **kw)
        want_o, want_lse = decode_ref(torch, q, kc, vc, lens.tolist(), table, causal=kw.get("causal", True),
                                      window=kw.get("window"), softcap=kw.get("softcap"))
        check(torch, o, lse, want_o, want_lse, tdt)


def test_unwritten_rows_hold_nan(torch):
    # an uninitialized cache past each sequence (NaN here) never reaches the output
    torch.manual_seed(9)
    batch, h, hk, capacity, tdt = 3, 8, 2, 1000, torch.bfloat16
    kc = torch.full((batch, capacity, hk, 128), float("nan"), device="cuda", dtype=tdt)
    vc = kc.clone()
    lens = torch.tensor([999, 35, 500], device="cuda", dtype=torch.int32)
    for b, n in enumerate(lens.tolist()):
        kc[b, :n] = torch.randn(n, hk, 128, device="cuda", dtype=tdt)
        vc[b, :n] = torch.randn(n, hk, 128, device="cuda", dtype=tdt)
    q = torch.randn(batch, 1, h, 128, device="cuda", dtype=tdt)
    for splits in (None, 1, 3):
        o, lse = attention_decode(q, kc, vc, lens, num_splits=splits, return_lse=True)
        want_o, want_lse = decode_ref(torch, q, kc, vc, lens.tolist())
        check(torch, o, lse, want_o, want_lse, tdt)


@pytest.mark.parametrize("page,dim", [(1, 128), (3, 96), (8, 128), (16, 96), (16, 128), (48, 64), (32, 128),
                                      (64, 96)])
def test_paged_tiles_read_only_the_sequence(torch, page, dim):
    # pages smaller than the 32-key tile, or not a multiple of it, are gathered key by key,
    # larger ones a tile per page (staged with cp.async, interior tiles unmasked, no bounds
    # checks); every pool row that no sequence holds is NaN, so a read past a sequence or of
    # another page shows in the output
    torch.manual_seed(31 + page + dim)
    batch, h, hk, q_len, capacity, tdt = 4, 16, 4, 2, 1700, torch.bfloat16
    kc, vc, table = make_cache(torch, batch, capacity, page, hk, dim, tdt)
    lens = torch.tensor([0, 1700, 1, 1003], device="cuda", dtype=torch.int32)
    held = torch.zeros(kc.shape[:2], dtype=torch.bool, device="cuda")
    for b, n in enumerate(lens.tolist()):
        j = torch.arange(n, device="cuda")
        held[table[b].long()[j // page], j % page] = True
    kc[~held] = float("nan")
    vc[~held] = float("nan")
    q = torch.randn(batch, q_len, h, dim, device="cuda", dtype=tdt)
    for kw in ({}, {"window": (300, -1)}):
        for splits in (None, 1, 5):
            o, lse = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits, return_lse=True, **kw)
            want_o, want_lse = decode_ref(torch, q, kc, vc, lens.tolist(), table, window=kw.get("window"))
            check(torch, o, lse, want_o, want_lse, tdt)


def test_host_and_device_arrays_do_not_mix(torch):
    import numpy as np
    q = torch.randn(2, 1, 4, 64, device="cuda", dtype=torch.float16)
    kc = torch.randn(2, 100, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(TypeError, match="cache_seqlens"):
        attention_decode(q, kc, kc, np.array([10, 20], np.int32))


def test_a_second_call_replays_on_new_data(torch):
    # the second call of one layout replays the first's launches (_plan.planned) on new arrays
    torch.manual_seed(21)
    batch, h, hk, capacity, tdt = 2, 32, 8, 3000, torch.bfloat16
    for page in (16, 0):
        for _ in range(2):
            kc, vc, table = make_cache(torch, batch, capacity, page, hk, 128, tdt)
            lens = torch.randint(0, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
            q = torch.randn(batch, 1, h, 128, device="cuda", dtype=tdt)
            o, lse = attention_decode(q, kc, vc, lens, block_table=table, return_lse=True)
            want_o, want_lse = decode_ref(torch, q, kc, vc, lens.tolist(), table)
            check(torch, o, lse, want_o, want_lse, tdt)
