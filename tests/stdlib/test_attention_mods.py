"""attention with score_mod / mask_mod / block_mask on the interpreter, against a float64
numpy reference: relative position bias, ALiBi, document mask, prefix-LM, causal as a
mask_mod; the block mask's classes and lists against brute force; argument errors."""
from __future__ import annotations

import dataclasses
import importlib
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilec.stdlib_kernels import attention, attention_backward, block_mask

from attention_mods_funcs import (H, PREFIX, REL_OFFSET, alibi, alibi_doc, bias_grad, bias_grad_1, causal, document,
                                  document_causal, keep_nothing, late_rows, prefix_lm, rel_bias, table_bias, striped,
                                  tanh_cap, tanh_cap_grad)
from attention_ref import attention_mods_ref, attention_ref
from ptxas_checks import assert_assembles_clean

M = importlib.import_module("tilec.stdlib_kernels.attention_mask")

B, HK, D = 2, 2, 64


def _docs(rng, n):
    """(batch, n) int32 document ids: random lengths, some of one position."""
    out = np.zeros((B, n), np.int32)
    for b in range(B):
        cuts = np.sort(rng.choice(np.arange(1, n), size=5, replace=False))
        out[b] = np.searchsorted(cuts, np.arange(n), side="right")
    return out


def _np_mods(table=None, doc=None):
    slope = lambda h: 2.0 ** (-8.0 * (h + 1) / H)   # noqa: E731
    return {
        "rel_bias": lambda s, b, h, q, k: s + 0.03 * (q - k),
        "alibi": lambda s, b, h, q, k: s + slope(h) * (k - q),
        "table_bias": lambda s, b, h, q, k: s + table[h, q - k + REL_OFFSET],
        "tanh_cap": lambda s, b, h, q, k: 4.0 * np.tanh(s / 4.0),
        "causal": lambda b, h, q, k: q >= k,
        "prefix_lm": lambda b, h, q, k: (k < PREFIX) | (q >= k),
        "document": lambda b, h, q, k: doc[b, q] == doc[b, k],
        "document_causal": lambda b, h, q, k: (doc[b, q] == doc[b, k]) & (q >= k),
        "late_rows": lambda b, h, q, k: (q >= 10) & (k <= q) & (k > q - 40),
        "striped": lambda b, h, q, k: ((k // 64) % 2 == 0) | (q == k),
    }


GRADS = {"rel_bias": lambda s, *a: np.ones_like(s), "alibi": lambda s, *a: np.ones_like(s),
         "table_bias": lambda s, *a: np.ones_like(s), "tanh_cap": lambda s, *a: 1 - np.tanh(s / 4.0) ** 2}
TC_GRADS = {"rel_bias": bias_grad, "alibi": bias_grad, "table_bias": bias_grad_1, "tanh_cap": tanh_cap_grad}


def _inputs(rng, n_q, n_k, layout="bshd"):
    def shape(n, heads):
        return (B, n, heads, D) if layout == "bshd" else (B, heads, n, D)
    return tuple(rng.standard_normal(shape(n, hh)).astype(np.float16)
                 for n, hh in ((n_q, H), (n_k, HK), (n_k, HK), (n_q, H)))


def _close(got, want, tol):
    err = np.abs(np.asarray(got, np.float64) - want).max()
    assert err < tol, err


# (score_mod, mask_mod, whether mod_args holds the table / the documents)
CASES = [("rel_bias", None), ("alibi", None), ("table_bias", None), (None, "causal"), (None, "prefix_lm"),
         ("rel_bias", "striped"),
         (None, "document"), ("alibi", "document_causal"), ("tanh_cap", "late_rows")]


def _setup(rng, score, mask, n):
    table = rng.standard_normal((H, 2 * REL_OFFSET + 1)).astype(np.float32) * 0.5
    doc = _docs(rng, n)
    np_mods = _np_mods(table, doc)
    tc_mods = {f.fn.__name__: f for f in (rel_bias, alibi, table_bias, tanh_cap, causal, prefix_lm, document,
                                          document_causal, late_rows, striped)}
    args = (table,) if score == "table_bias" else (doc,) if mask and mask.startswith("document") else ()
    return (tc_mods.get(score), tc_mods.get(mask), args,
            np_mods.get(score), np_mods.get(mask))


@pytest.mark.parametrize("score,mask", CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("block", [64, 128])
def test_forward_matches_float64(score, mask, block):
    rng = np.random.default_rng(zlib.crc32(f'{score}{mask}{block}'.encode()))
    n = 150
    q, k, v, _ = _inputs(rng, n, n)
    sm, mm, args, sf, mf = _setup(rng, score, mask, n)
    bm = block_mask(mm, B, H, n, n, BLOCK=block, mod_args=args) if mm is not None else None
    o, lse = attention(q, k, v, score_mod=sm, block_mask=bm, mod_args=args, return_lse=True)
    want_o, want_lse = attention_mods_ref(q, k, v, sf, mf)
    _close(o, want_o, 3e-3)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[fin], want_lse[fin], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("score,mask", CASES, ids=lambda c: str(c))
def test_backward_matches_float64(score, mask):
    rng = np.random.default_rng(zlib.crc32(f'{score}{mask}'.encode()))
    n_q = n_k = 100
    q, k, v, do = _inputs(rng, n_q, n_k, layout="bhsd")
    sm, mm, args, sf, mf = _setup(rng, score, mask, n_q)
    kw = dict(score_mod=sm, mask_mod=mm, mod_args=args, layout="bhsd")
    o, lse = attention(q, k, v, return_lse=True, **kw)
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, score_mod_grad=TC_GRADS.get(score), **kw)
    _, _, wdq, wdk, wdv = attention_mods_ref(q, k, v, sf, mf, layout="bhsd", do=do, grad_fn=GRADS.get(score))
    for got, want in ((dq, wdq), (dk, wdk), (dv, wdv)):
        _close(got, want, 1e-2)


@pytest.mark.parametrize("score,mask,hk", [("alibi", None, 2), ("alibi", "causal", 4), ("table_bias", None, 4)])
def test_backward_at_head_dim_128_matches_float64(score, mask, hk):
    # the wgmma blocks (ALiBi alone with GQA, ALiBi + causal with one query head per kv head) and
    # the mma.sync dK/dV tiles of a "mods_heavy" call (a bias table), on lengths off the tiles
    rng = np.random.default_rng(zlib.crc32(f'{score}{mask}{hk}'.encode()))
    n_q, n_k, d = 150, 133, 128
    q, do = (rng.standard_normal((1, n_q, H, d)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, n_k, hk, d)).astype(np.float16) for _ in range(2))
    sm, mm, args, sf, mf = _setup(rng, score, mask, max(n_q, n_k))
    bm = block_mask(mm, 1, H, n_q, n_k, mod_args=args) if mm is not None else None
    kw = dict(score_mod=sm, block_mask=bm, mod_args=args)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    grads = attention_backward(do, q, k, v, o, lse, score_mod_grad=TC_GRADS[score], **kw)
    want = attention_mods_ref(q, k, v, sf, mf, do=do, grad_fn=GRADS[score])
    for got, w in zip(grads, want[2:]):
        _close(got, w, 1e-2 * max(1.0, np.abs(w).max()))


@settings(max_examples=10, deadline=None)
@given(n_q=st.integers(1, 160), n_k=st.integers(1, 160), hk=st.sampled_from([1, 2, 4]),
       score=st.sampled_from([None, "alibi", "rel_bias"]), mask=st.sampled_from([None, "causal", "prefix_lm"]),
       block=st.sampled_from([64, 128]))
def test_forward_and_backward_for_any_lengths(n_q, n_k, hk, score, mask, block):
    rng = np.random.default_rng(n_q * 1000 + n_k)
    q, do = (rng.standard_normal((1, n_q, H, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, n_k, hk, D)).astype(np.float16) for _ in range(2))
    tc_mods = {"alibi": alibi, "rel_bias": rel_bias, "causal": causal, "prefix_lm": prefix_lm}
    bm = block_mask(tc_mods[mask], 1, H, n_q, n_k, BLOCK=block) if mask else None
    kw = dict(score_mod=tc_mods.get(score), block_mask=bm)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    grads = attention_backward(do, q, k, v, o, lse, score_mod_grad=bias_grad if score else None, **kw)
    np_mods = _np_mods()
    want = attention_mods_ref(q, k, v, np_mods.get(score), np_mods.get(mask), do=do, grad_fn=GRADS.get(score))
    _close(o, want[0], 3e-3)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want[1]))
    for got, w in zip(grads, want[2:]):   # dk, dv sum many rows when keys are few: relative to their size
        _close(got, w, 1e-2 * max(1.0, np.abs(w).max()))


def test_full_blocks_that_are_not_consecutive():
    # striped keys, blocks of 64: key blocks 0 and 2 are full, 1 and 3 partial or none, so a
    # query block's full list [0, 2] has a run of 1 (walked by index) and one listed block
    rng = np.random.default_rng(12)
    q, k, v, do = _inputs(rng, 300, 300)
    bm = block_mask(striped, B, H, 300, 300, BLOCK=64)
    assert bm.full_kv_num[0, 0, 0] == 2 and bm.full_kv_run[0, 0, 0] == 1
    o, lse = attention(q, k, v, block_mask=bm, return_lse=True)
    grads = attention_backward(do, q, k, v, o, lse, block_mask=bm)
    want = attention_mods_ref(q, k, v, mask_fn=_np_mods()["striped"], do=do)
    _close(o, want[0], 3e-3)
    for got, w in zip(grads, want[2:]):
        _close(got, w, 1e-2 * max(1.0, np.abs(w).max()))


def test_causal_mask_mod_matches_causal_flag():
    rng = np.random.default_rng(5)
    q, k, v, do = _inputs(rng, 130, 130)
    o1, l1 = attention(q, k, v, mask_mod=causal, return_lse=True)
    o2, l2 = attention(q, k, v, causal=True, return_lse=True)
    _close(o1, np.asarray(o2, np.float64), 2e-3)
    np.testing.assert_allclose(l1, l2, rtol=1e-5, atol=1e-5)
    g1 = attention_backward(do, q, k, v, o1, l1, mask_mod=causal)
    g2 = attention_backward(do, q, k, v, o2, l2, causal=True)
    for a, b_ in zip(g1, g2):
        _close(a, np.asarray(b_, np.float64), 5e-3)


def test_fully_masked_rows_give_zeros_and_minus_inf():
    rng = np.random.default_rng(6)
    q, k, v, do = _inputs(rng, 70, 70)
    o, lse = attention(q, k, v, mask_mod=late_rows, return_lse=True)
    assert np.all(np.asarray(o)[:, :10] == 0) and np.all(np.isneginf(lse[:, :, :10]))
    assert np.all(np.isfinite(lse[:, :, 10:]))
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, mask_mod=late_rows)
    assert np.all(np.asarray(dq)[:, :10] == 0)
    assert all(np.isfinite(np.asarray(g, np.float64)).all() for g in (dq, dk, dv))


def test_none_blocks_are_never_read():
    # causal, blocks of 64: query block 0 never reads key block 1, so NaN there cannot reach it
    rng = np.random.default_rng(7)
    q, k, v, _ = _inputs(rng, 128, 128)
    want = attention_ref(q, k, v, causal=True)[0]
    k[:, 64:], v[:, 64:] = np.nan, np.nan
    o = attention(q, k, v, block_mask=block_mask(causal, B, H, 128, 128, BLOCK=64))
    _close(np.asarray(o)[:, :64], want[:, :64], 3e-3)


def test_full_blocks_skip_the_mask_mod():
    # a block mask of causal's classes with a mask_mod that keeps nothing: the full blocks (below
    # the diagonal) are attended without calling it, the partial ones (diagonal) see no key
    rng = np.random.default_rng(8)
    q, k, v, _ = _inputs(rng, 128, 128)
    bm = dataclasses.replace(block_mask(causal, B, H, 128, 128, BLOCK=64), mask_mod=keep_nothing)
    o, lse = attention(q, k, v, block_mask=bm, return_lse=True)
    below = lambda b, h, qi, ki: (qi // 64) > (ki // 64)   # noqa: E731
    want_o, want_lse = attention_mods_ref(q, k, v, mask_fn=below)
    _close(o, want_o, 3e-3)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))


def test_block_mask_is_reused_across_calls_and_layouts():
    rng = np.random.default_rng(9)
    q, k, v, _ = _inputs(rng, 90, 90)
    bm = block_mask(prefix_lm, B, H, 90, 90)
    o1 = attention(q, k, v, block_mask=bm)
    qh, kh, vh = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v))
    o2 = attention(qh, kh, vh, block_mask=bm, mask_mod=prefix_lm, layout="bhsd")
    want = attention_mods_ref(q, k, v, mask_fn=_np_mods()["prefix_lm"])[0]
    _close(o1, want, 3e-3)
    _close(np.asarray(o2).transpose(0, 2, 1, 3), want, 3e-3)


def test_a_mask_without_batch_and_heads_serves_any():
    # B = H = None (FlexAttention's broadcast): one row of blocks for every (b, h), forward and backward
    rng = np.random.default_rng(11)
    q, k, v, do = _inputs(rng, 140, 140)
    bm = block_mask(prefix_lm, None, None, 140, 140, BLOCK=64)
    assert bm.classes.shape == (1, 1, 3, 3) and bm.shape == (None, None, 140, 140)
    o, lse = attention(q, k, v, score_mod=alibi, block_mask=bm, return_lse=True)
    grads = attention_backward(do, q, k, v, o, lse, score_mod=alibi, score_mod_grad=bias_grad, block_mask=bm)
    want = attention_mods_ref(q, k, v, _np_mods()["alibi"], _np_mods()["prefix_lm"], do=do,
                              grad_fn=GRADS["alibi"])
    _close(o, want[0], 3e-3)
    for got, w in zip(grads, want[2:]):
        _close(got, w, 1e-2)
    with pytest.raises(ValueError, match="Q_LEN"):
        attention(q[:, :100], k, v, block_mask=bm)


def _brute_classes(keep, qb, kb):
    """(B, H, q blocks, kv blocks) classes of a boolean (B, H, n_q, n_k) mask, by definition."""
    b_, h, n_q, n_k = keep.shape
    nq, nk = -(-n_q // qb), -(-n_k // kb)
    out = np.zeros((b_, h, nq, nk), np.int32)
    for i in range(nq):
        for j in range(nk):
            blk = keep[:, :, i * qb:(i + 1) * qb, j * kb:(j + 1) * kb]
            whole = blk.shape[3] == kb
            out[:, :, i, j] = np.where(blk.all((2, 3)) & whole, M.FULL, np.where(blk.any((2, 3)), M.PARTIAL, M.NONE))
    return out


def _check_lists(classes, num, idx, full_num, full_idx, full_run):
    for pos in np.ndindex(classes.shape[:3]):
        row = classes[pos]
        assert list(idx[pos][:num[pos]]) == list(np.flatnonzero(row == M.PARTIAL))
        full = np.flatnonzero(row == M.FULL)
        assert list(full_idx[pos][:full_num[pos]]) == list(full)
        run = int(np.argmin(np.diff(full) == 1)) + 1 if len(full) > 1 and not np.all(np.diff(full) == 1) \
            else len(full)
        assert full_run[pos] == run, (pos, full, full_run[pos])


@pytest.mark.parametrize("mask", ["causal", "prefix_lm", "document", "late_rows", "striped"])
@pytest.mark.parametrize("n_q,n_k,block", [(150, 150, 64), (100, 260, (64, 128)), (200, 70, 128), (64, 64, 64)])
def test_block_mask_classes_match_brute_force(mask, n_q, n_k, block):
    rng = np.random.default_rng(10)
    doc = _docs(rng, max(n_q, n_k))
    tc_mods = {"causal": causal, "prefix_lm": prefix_lm, "document": document, "late_rows": late_rows,
               "striped": striped}
    args = (doc,) if mask == "document" else ()
    bm = block_mask(tc_mods[mask], B, H, n_q, n_k, BLOCK=block, mod_args=args)
    bi, hi = np.arange(B)[:, None, None, None], np.arange(H)[None, :, None, None]
    qi, ki = np.arange(n_q)[None, None, :, None], np.arange(n_k)[None, None, None, :]
    keep = np.broadcast_to(_np_mods(doc=doc)[mask](bi, hi, qi, ki), (B, H, n_q, n_k))
    qb, kb = (block, block) if isinstance(block, int) else block
    want = _brute_classes(keep, qb, kb)
    assert np.array_equal(bm.classes, want)
    _check_lists(want, bm.kv_num, bm.kv_idx, bm.full_kv_num, bm.full_kv_idx, bm.full_kv_run)
    _check_lists(want.transpose(0, 1, 3, 2), bm.q_num, bm.q_idx, bm.full_q_num, bm.full_q_idx, bm.full_q_run)
    assert bm.sparsity() == pytest.approx((want == M.NONE).mean())


@settings(max_examples=12, deadline=None)
@given(n_q=st.integers(1, 300), n_k=st.integers(1, 300), qb=st.sampled_from([64, 128]),
       kb=st.sampled_from([64, 128, 256]), mask=st.sampled_from(["causal", "prefix_lm", "late_rows", "striped"]))
def test_block_mask_lists_match_brute_force_for_any_shape(n_q, n_k, qb, kb, mask):
    tc_mods = {"causal": causal, "prefix_lm": prefix_lm, "late_rows": late_rows, "striped": striped}
    bm = block_mask(tc_mods[mask], 1, 1, n_q, n_k, BLOCK=(qb, kb))
    qi, ki = np.arange(n_q)[None, None, :, None], np.arange(n_k)[None, None, None, :]
    keep = np.broadcast_to(_np_mods()[mask](0, 0, qi, ki), (1, 1, n_q, n_k))
    want = _brute_classes(keep, qb, kb)
    assert np.array_equal(bm.classes, want)
    _check_lists(want, bm.kv_num, bm.kv_idx, bm.full_kv_num, bm.full_kv_idx, bm.full_kv_run)
    _check_lists(want.transpose(0, 1, 3, 2), bm.q_num, bm.q_idx, bm.full_q_num, bm.full_q_idx, bm.full_q_run)


def test_empty_block_mask():
    bm = block_mask(causal, 1, 2, 0, 5)
    assert bm.classes.shape == (1, 2, 0, 1) and bm.q_num.shape == (1, 2, 1) and not bm.q_num.any()


def _qkv_small():
    rng = np.random.default_rng(0)
    return _inputs(rng, 8, 8)


@pytest.mark.parametrize("call,err,match", [
    (lambda q, k, v: attention(q, k, v, score_mod=lambda s, b, h, i, j: s), TypeError, "score_mod.*@tc.func"),
    (lambda q, k, v: attention(q, k, v, mask_mod=np.ones(3)), TypeError, "mask_mod"),
    (lambda q, k, v: attention(q, k, v, mask_mod=causal, causal=True), ValueError, "causal"),
    (lambda q, k, v: attention(q, k, v, score_mod=rel_bias, softcap=3.0), ValueError, "softcap"),
    (lambda q, k, v: attention(q, k, v, block_mask=block_mask(causal, B, H, 8, 9)), ValueError, "Q_LEN"),
    (lambda q, k, v: attention(q, k, v, block_mask=block_mask(causal, B, H + 1, 8, 8)), ValueError, "block_mask"),
    (lambda q, k, v: attention(q, k, v, mask_mod=prefix_lm, block_mask=block_mask(causal, B, H, 8, 8)), ValueError,
     "mask_mod"),
    (lambda q, k, v: attention(q, k, v, block_mask="causal"), TypeError, "block_mask"),
    (lambda q, k, v: attention(q, k, v, mod_args=(np.zeros(3),)), ValueError, "mod_args"),
    (lambda q, k, v: attention(q, k, v, mask_mod=document, mod_args=(np.zeros(3),) * 3), ValueError, "at most"),
    (lambda q, k, v: attention(q, k, v, mask_mod=document, mod_args=np.zeros(3, np.int32)), TypeError, "tuple"),
    (lambda q, k, v: attention(q[0], k[0], v[0], mask_mod=causal, cu_seqlens_q=np.array([0, 8], np.int32),
                               cu_seqlens_k=np.array([0, 8], np.int32)), ValueError, "cu_seqlens"),
    (lambda q, k, v: attention(q, k, v, mask_mod=document), ValueError, r"mask_mod: expected the parameters"),
    (lambda q, k, v: block_mask(document, B, H, 8, 8), ValueError, r"mask_mod: expected the parameters"),
    (lambda q, k, v: block_mask(causal, B, H, 8, 8, BLOCK=48), ValueError, "BLOCK"),
    (lambda q, k, v: block_mask(causal, B, H, 8, 8, BLOCK=(64,)), TypeError, "BLOCK"),
    (lambda q, k, v: block_mask(causal, B, H, -1, 8), ValueError, "Q_LEN"),
    (lambda q, k, v: block_mask(lambda b, h, i, j: True, B, H, 8, 8), TypeError, "@tc.func"),
])
def test_bad_arguments_say_what_was_expected(call, err, match):
    q, k, v, _ = _qkv_small()
    with pytest.raises(err, match=match):
        call(q, k, v)


def test_backward_of_a_score_mod_needs_its_derivative():
    q, k, v, do = _qkv_small()
    o, lse = attention(q, k, v, score_mod=rel_bias, return_lse=True)
    with pytest.raises(ValueError, match="score_mod_grad"):
        attention_backward(do, q, k, v, o, lse, score_mod=rel_bias)
    with pytest.raises(ValueError, match="score_mod_grad"):
        attention_backward(do, q, k, v, o, lse, score_mod_grad=bias_grad)


# ---------------------------------------------------------------------------- ptxas
_V4 = "[?,?,?,?]:stride_div=16x16x16x1"
_R3, _I4 = "i32[?,?,?]:stride_div=16x16x1", "i32[?,?,?,?]:stride_div=16x16x16x1"
_ROWS = "f32[?,?,?]:stride_div=16x16x1"


def _mods_signatures(d: int, dv: int = None, q_block: int = 128, path: str = None, arch: str = "sm_90a"):
    """(kernel, signature, constexprs, options) of the three kernels for ALiBi + a document
    mask (one mod array) on a q_block x 128 block mask (the forward's; the backward's 128 x
    128), bf16, at the entry points' tiles and warps (the backward's as `arch` plans them: sm_80
    never runs the wgmma blocks); then the block mask's two kernels (head dim aside)."""
    from tilec.target import Target
    from tilec.stdlib_kernels.attention import config_for
    from tilec.stdlib_kernels.attention_bwd import bwd_config_for
    A = importlib.import_module("tilec.stdlib_kernels.attention_mods")
    h100 = Target.from_arch("sm_90a")
    dv = d if dv is None else dv
    # (the backward's tiles of bwd_path's plan for this call, unless `path` is given)
    f, c = config_for(d, dv, h100, specialize=False), bwd_config_for(d, Target.from_arch(arch), path=path or A.bwd_path((1, 1, 1),
                                                                                                   False, 2))
    bm = min(f.bm, q_block)   # attention_mods' rows and warps for the block mask
    warps = f.num_warps if bm == f.bm or max(f.dk, f.dv) > 128 else 4
    lists = (f"{{}}num={_R3}, {{}}idx={_I4}, full_num={_R3}, full_idx={_I4}, full_run={_R3}, "
             "aux0=i32[?,?]:stride_div=16x1, aux1=i32[?], ")
    tail = "sm_scale=f32, DENSE=False, GROUP=2, "
    dims = f"DK={d}, DV={d}"
    ins = f"q=bf16{_V4}, k=bf16{_V4}, v=bf16{_V4}, do=bf16{_V4}, lse={_ROWS}, delta={_ROWS}, "
    mods = dict(SCORE_MOD=alibi_doc, MASK_MOD=document, N_AUX=(1, 1, 1))
    return [
        (A.attention_mods_fwd_kernel,
         f"q=bf16{_V4}, k=bf16{_V4}, v=bf16{_V4}, o=bf16{_V4}, lse={_ROWS}, " + lists.format("kv_", "kv_") + tail
         + f"LSE=True, SUB_Q={q_block // bm}, SUB_K={128 // f.bn}, BM={bm}, BN={f.bn}, DK={f.dk}, DV={f.dv}",
         mods, dict(num_warps=warps, num_stages=f.num_stages)),
        (A.attention_mods_dkdv_kernel,
         ins + f"dk=bf16{_V4}, dv=bf16{_V4}, " + lists.format("q_", "q_") + tail
         + f"SUB_Q={128 // c.q_step}, SUB_K={128 // c.kv_block}, BM={c.q_step}, BN={c.kv_block}, " + dims,
         dict(mods, GRAD=bias_grad_1), dict(num_warps=c.num_warps, num_stages=c.num_stages)),
        (A.attention_mods_dq_kernel,
         ins + f"dq=bf16{_V4}, " + lists.format("kv_", "kv_") + tail
         + f"SUB_Q={128 // c.q_block}, SUB_K={128 // c.kv_step}, BM={c.q_block}, BN={c.kv_step}, " + dims,
         dict(mods, GRAD=bias_grad_1), dict(num_warps=c.num_warps, num_stages=c.num_stages)),
        (M.block_mask_kernel, f"cls={_I4}, aux0=i32[?,?]:stride_div=16x1, aux1=i32[?], n_q=i32, n_kv=i32, N_AUX=1, "
         f"QB=128, KB=128, SUB={M.MASK_SUB}", dict(MASK_MOD=document), dict(num_warps=8)),
        (M.block_lists_kernel, f"cls={_I4}, num={_R3}, idx={_I4}, full_num={_R3}, full_idx={_I4}, full_run={_R3}, "
         "NC=256", {},
         dict(num_warps=4)),
    ]


def test_bwd_path_keeps_heavy_dkdv_programs_on_mma_sync():
    A = importlib.import_module("tilec.stdlib_kernels.attention_mods")
    assert A.bwd_path((0, 0, 0), True, 4) == A.bwd_path((0, 0, 0), False, 1) == "mods"
    assert A.bwd_path((1, 0, 1), True, 1) == A.bwd_path((0, 1, 0), False, 1) == "mods_heavy"
    assert A.bwd_path((0, 0, 0), False, 2) == "mods_heavy"


def test_mods_plans_from_descriptions():
    # plan_mods / plan_mods_backward: pure functions of the descriptions, the mods and the
    # block mask's blocks (None: DENSE)
    A = importlib.import_module("tilec.stdlib_kernels.attention_mods")
    from tilec.target import Target
    from tilec.stdlib_kernels.attention import config_for, describe
    from tilec.stdlib_kernels.attention_bwd import bwd_config_for, bwd_config_within
    h100 = Target.from_arch("sm_90a")
    x = describe(2, 4, 2, 300, 500, 64, 64)
    cfg = config_for(64, 64, h100)
    fwd, = A.plan_mods(x, h100, score_mod=alibi, n_aux=(0, 0, 0), lse=True)
    assert fwd.grid == (-(-300 // cfg.bm), 4, 2) and fwd.num_warps == cfg.num_warps
    assert fwd.consts["DENSE"] is True and fwd.consts["SUB_Q"] == fwd.consts["SUB_K"] == 1
    assert fwd.consts["SCORE_MOD"] is alibi and fwd.consts["GROUP"] == 2 and fwd.consts["LSE"] is True
    assert fwd.args[5:10] == A._list_names("kv") and fwd.args[-3:] == ("aux0", "aux1", "sm_scale")
    # a block mask finer than the tile: its rows, 4 warps; coarser: sub-blocks
    fine, = A.plan_mods(x, h100, mask_mod=causal, blocks=(cfg.bm // 2, 128))
    assert fine.consts["BM"] == cfg.bm // 2 and fine.num_warps == 4 and fine.consts["DENSE"] is False
    assert fine.consts["SUB_K"] == 128 // cfg.bn
    assert A.plan_mods(describe(1, 1, 1, 0, 8, 64, 64), h100) == []
    # backward: delta, dK/dV over the q lists, dQ over the kv lists; bwd_path's tiles
    lns = A.plan_mods_backward(x, h100, score_mod=alibi, score_mod_grad=bias_grad, n_aux=(0, 0, 0), dlse=True)
    assert [ln.name for ln in lns] == ["attention_bwd_delta_kernel", "attention_mods_dkdv_kernel",
                                       "attention_mods_dq_kernel"]
    c = bwd_config_for(64, h100, 64, path=A.bwd_path((0, 0, 0), True, 2))
    assert lns[0].args[2] == "dlse" and lns[1].grid == (-(-500 // c.kv_block), 2, 2)
    assert lns[1].args[8:13] == A._list_names("q") and lns[2].args[7:12] == A._list_names("kv")
    assert lns[2].consts["BM"] == c.q_block and lns[1].consts["GRAD"] is bias_grad
    lns = A.plan_mods_backward(x, h100, mask_mod=causal, blocks=(128, 128))
    c = bwd_config_within(64, h100, 64, 128, 128, path=A.bwd_path((0, 0, 0), False, 2))
    assert lns[1].consts["SUB_Q"] == 128 // c.q_step and lns[2].consts["SUB_K"] == 128 // c.kv_step


def _wgmma_backward(which: int, group: int, dense: bool):
    """(kernel, specialization, options) of the mods backward kernel `which` (1: dK/dV, 2: dQ)
    at head dim 128 for ALiBi (no mod arrays): on a causal block mask (one query head per
    kv head) or DENSE (any group), bf16, on the wgmma blocks its plan takes."""
    A = importlib.import_module("tilec.stdlib_kernels.attention_mods")
    from tilec.target import Target
    from tilec.stdlib_kernels.attention_bwd import bwd_config_for
    path = A.bwd_path((0, 0, 0), dense, group)
    c = bwd_config_for(128, Target.from_arch("sm_90a"), path=path)
    assert path == "mods" and c.kv_block == c.q_block == 128
    kernel, sig, _, options = _mods_signatures(128, path=path)[which]
    assert f"BN={c.kv_block}" in sig if which == 1 else f"BM={c.q_block}" in sig
    sig = sig.replace("GROUP=2", f"GROUP={group}")
    if dense:
        sig = sig.replace("DENSE=False", "DENSE=True").replace("SUB_Q=2", "SUB_Q=1").replace("SUB_K=2", "SUB_K=1")
    mods = dict(SCORE_MOD=alibi, GRAD=bias_grad, MASK_MOD=None if dense else causal, N_AUX=(0, 0, 0))
    return kernel, kernel.specialization(sig, **mods), options


@pytest.mark.slow
@pytest.mark.parametrize("which,group,dense", [(1, 1, False), (1, 4, True), (2, 1, False), (2, 4, True)],
                         ids=["dkdv-causal", "dkdv-dense-gqa", "dq-causal", "dq-dense-gqa"])
def test_mods_backward_at_head_dim_128_on_wgmma_assembles_without_spills(which, group, dense):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    kernel, spec, options = _wgmma_backward(which, group, dense)
    compiled = compile_kernel(kernel, spec, CompileOptions(arch="sm_90a", fast_math=True, **options), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert_assembles_clean(report)


@pytest.mark.slow
@pytest.mark.parametrize("d,dv,q_block", [(256, 256, 128), (192, 128, 128), (192, 128, 64)])
def test_mods_forward_assembles_without_spills_at_wide_heads(d, dv, q_block):
    # sm_90a, at config_for's tiling for head dims above 128 (the backward's spills there: attention_bwd.py)
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    kernel, sig, constexprs, options = _mods_signatures(d, dv, q_block)[0]
    compiled = compile_kernel(kernel, kernel.specialization(sig, **constexprs),
                              CompileOptions(arch="sm_90a", fast_math=True, **options), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert_assembles_clean(report)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("which", [0, 1, 2, 3, 4], ids=["fwd", "dkdv", "dq", "block_mask", "block_lists"])
def test_mods_assemble_without_spills(d, which, arch):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    kernel, sig, constexprs, options = _mods_signatures(d, arch=arch)[which]
    spec = kernel.specialization(sig, **constexprs)
    compiled = compile_kernel(kernel, spec, CompileOptions(arch=arch, fast_math=True, **options), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert_assembles_clean(report)
