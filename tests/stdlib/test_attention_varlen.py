"""stdlib attention with packed variable-length sequences (cu_seqlens) on the interpreter:
against a float64 reference looping over sequences; its plans (launches whatever the
batch); its argument errors; ptxas on the kernels the plans launch."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.stdlib_kernels import attention, attention_backward
from tilec.stdlib_kernels.attention import config_for
from tilec.stdlib_kernels.attention_bwd import bwd_config_for
from tilec.stdlib_kernels.launches import spec
from tilec.target import Target

from attention_ref import attention_ref
from ptxas_checks import assert_assembles_clean

V = importlib.import_module("tilec.stdlib_kernels.attention_varlen")
L = importlib.import_module("tilec.stdlib_kernels.launches")

LQ = [0, 1, 37, 130, 64]
LK = [5, 1, 37, 64, 130]


def _cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def _packed(rng, lq, lk, h, hk, d):
    return (rng.standard_normal((sum(lq), h, d)).astype(np.float16),
            rng.standard_normal((sum(lk), hk, d)).astype(np.float16),
            rng.standard_normal((sum(lk), hk, d)).astype(np.float16))


def _ref(q, k, v, lq, lk, **kw):
    """float64 (out (total_q, h, dv), lse (h, total_q)) sequence by sequence."""
    cq, ck = _cu(lq), _cu(lk)
    outs, lses = [], []
    for i in range(len(lq)):
        qs, ks, vs = q[cq[i]:cq[i + 1]][None], k[ck[i]:ck[i + 1]][None], v[ck[i]:ck[i + 1]][None]
        if lk[i] == 0:   # no key: zeros and lse = -inf
            outs.append(np.zeros((lq[i], q.shape[1], v.shape[2])))
            lses.append(np.full((q.shape[1], lq[i]), -np.inf))
            continue
        o, lse = attention_ref(qs, ks, vs, **kw)
        outs.append(o[0])
        lses.append(lse[0])
    return np.concatenate(outs), np.concatenate(lses, axis=1)


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window=(20, 5)), dict(softcap=5.0),
                                dict(causal=True, window=(30, -1))],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
@pytest.mark.parametrize("lq,lk", [(LQ, LK), (LK, LQ), ([0, 1, 37, 130, 64], [0, 1, 37, 130, 64])])
def test_varlen_matches_float64_per_sequence(kw, lq, lk):
    rng = np.random.default_rng(sum(lq) * 7 + sum(lk))
    q, k, v = _packed(rng, lq, lk, 4, 2, 64)   # GQA: 2 query heads per kv head
    out, lse = attention(q, k, v, cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk), return_lse=True, **kw)
    want, want_lse = _ref(q, k, v, lq, lk, **kw)
    assert out.shape == q.shape and lse.shape == (4, sum(lq)) and lse.dtype == np.float32
    np.testing.assert_allclose(out.astype(np.float64), want, atol=2e-2)
    assert np.array_equal(np.isinf(lse), np.isinf(want_lse))
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[fin], want_lse[fin], atol=1e-2)


def test_varlen_zero_length_k_gives_zeros_and_minus_inf():
    rng = np.random.default_rng(3)
    lq, lk = [3, 5], [0, 4]
    q, k, v = _packed(rng, lq, lk, 2, 2, 16)
    out, lse = attention(q, k, v, cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk), return_lse=True)
    assert np.all(out[:3] == 0) and np.all(lse[:, :3] == -np.inf)
    assert np.all(np.isfinite(lse[:, 3:]))


def test_varlen_head_dim_256_and_given_max_seqlen():
    rng = np.random.default_rng(4)
    lq, lk = [9, 40], [17, 3]
    q, k, v = _packed(rng, lq, lk, 2, 1, 256)
    out = attention(q, k, v, cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk), max_seqlen_q=40, max_seqlen_k=17,
                    causal=True)
    np.testing.assert_allclose(out.astype(np.float64), _ref(q, k, v, lq, lk, causal=True)[0], atol=2e-2)


@pytest.mark.parametrize("max_k", [None, 2000], ids=["short-tiling", "long-tiling"])
def test_varlen_head_dim_128_at_both_tilings(max_k):
    # up to 1024 keys (the longest sequence, or a given max_seqlen_k) the 64-row tiles over
    # one warpgroup, above them the 128-row ones
    assert config_for(128, 128, Target.from_arch("sm_90a"), varlen=True, n_kv=150).bm == 64
    rng = np.random.default_rng(6)
    lq, lk = [70, 131, 3], [150, 45, 3]
    q, k, v = _packed(rng, lq, lk, 4, 4, 128)   # (with grouped heads the long tiling stays)
    out = attention(q, k, v, cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk), max_seqlen_k=max_k, causal=True)
    np.testing.assert_allclose(out.astype(np.float64), _ref(q, k, v, lq, lk, causal=True)[0], atol=2e-2)


def _args():
    rng = np.random.default_rng(5)
    q, k, v = _packed(rng, [3, 4], [2, 5], 2, 2, 16)
    return q, k, v, _cu([3, 4]), _cu([2, 5])


@pytest.mark.parametrize("call,exc,match", [
    (lambda q, k, v, cq, ck: attention(q, k, v, cu_seqlens_q=cq.astype(np.int64), cu_seqlens_k=ck),
     TypeError, "int32"),
    (lambda q, k, v, cq, ck: attention(q, k, v, cu_seqlens_q=np.array([0, 5, 7], np.int32)[[0, 2, 1]],
                                       cu_seqlens_k=ck), ValueError, "non-decreasing"),
    (lambda q, k, v, cq, ck: attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=np.array([0, 7], np.int32)),
     ValueError, "one batch"),
    (lambda q, k, v, cq, ck: attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck[:-1]), ValueError, "ends at"),
    (lambda q, k, v, cq, ck: attention(q, k, v, cu_seqlens_q=cq), ValueError, "both"),
    (lambda q, k, v, cq, ck: attention(q[None], k, v, cu_seqlens_q=cq, cu_seqlens_k=ck), ValueError, "3 dim"),
    (lambda q, k, v, cq, ck: attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, layout="bhsd"),
     ValueError, "packed"),
    (lambda q, k, v, cq, ck: attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=2),
     ValueError, "max_seqlen_q"),
])
def test_varlen_argument_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call(*_args())


def _grads_ref(q, k, v, do, lq, lk, dlse=None, **kw):
    """float64 (dq, dk, dv) sequence by sequence; zero where a sequence has no query or no key."""
    from attention_ref import attention_grads_ref   # noqa: PLC0415
    cq, ck = _cu(lq), _cu(lk)
    dq, dk, dv = (np.zeros(a.shape) for a in (q, k, v))
    for i in range(len(lq)):
        if lq[i] == 0 or lk[i] == 0:
            continue
        sq, sk = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        g = attention_grads_ref(q[sq][None], k[sk][None], v[sk][None], do[sq][None], dlse=None if dlse is None
                                else dlse[None, :, sq], **kw)
        dq[sq], dk[sk], dv[sk] = (x[0] for x in g)
    return dq, dk, dv


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window=(20, 5)), dict(softcap=5.0)],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
@pytest.mark.parametrize("with_dlse", [False, True])
def test_varlen_gradients_match_float64(kw, with_dlse):
    rng = np.random.default_rng(11)
    lq, lk = [0, 1, 37, 130, 64, 9], [5, 1, 37, 64, 130, 0]
    q, k, v = _packed(rng, lq, lk, 4, 2, 64)
    do = rng.standard_normal(q.shape).astype(np.float16)
    dlse = rng.standard_normal((4, sum(lq))).astype(np.float32) if with_dlse else None
    cu = dict(cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk))
    o, lse = attention(q, k, v, return_lse=True, **cu, **kw)
    got = attention_backward(do, q, k, v, o, lse, dlse=dlse, **cu, **kw)
    want = _grads_ref(q, k, v, do, lq, lk, dlse=dlse, **kw)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.shape == w.shape, name
        err = np.abs(g.astype(np.float64) - w).max()
        assert err < 4e-3 * max(np.abs(w).max(), 1.0), (name, err)
    assert np.all(got[1][:5] == 0) and np.all(got[2][:5] == 0)
    assert np.all(got[0][-9:] == 0)   # the last sequence has no key


@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(40, 70))],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_varlen_gradients_at_head_dim_128_on_the_wgmma_blocks(kw):
    # the dK/dV kernel owns 128 keys and steps 64 query rows (as the dense kernel), so its
    # masked steps read the next sequence's rows and its blocks end mid-sequence
    assert bwd_config_for(128, Target.from_arch("sm_90a"), path="varlen").kv_block == 128
    rng = np.random.default_rng(5)
    lq, lk = [70, 131, 3], [150, 45, 3]
    q, k, v = _packed(rng, lq, lk, 4, 2, 128)
    do = rng.standard_normal(q.shape).astype(np.float16)
    cu = dict(cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk))
    o, lse = attention(q, k, v, return_lse=True, **cu, **kw)
    got = attention_backward(do, q, k, v, o, lse, **cu, **kw)
    for name, g, w in zip(("dq", "dk", "dv"), got, _grads_ref(q, k, v, do, lq, lk, **kw)):
        err = np.abs(g.astype(np.float64) - w).max()
        assert err < 4e-3 * max(np.abs(w).max(), 1.0), (name, err)


def test_next_sequence_non_finite_lse_and_delta_stay_out_of_dk_dv():
    # the middle sequence's keys are inf, so its lse and δ are not finite (its q and dO are):
    # the first sequence's last query step reads those rows, whose P and dP - δ must be 0
    rng = np.random.default_rng(29)
    lq, lk = [37, 20, 30], [37, 20, 30]
    q, k, v = _packed(rng, lq, lk, 2, 1, 128)
    do = rng.standard_normal(q.shape).astype(np.float16)
    k[37:57] = np.inf
    v[37:57] = np.inf
    cu = dict(cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk))
    out, lse = attention(q, k, v, return_lse=True, **cu)
    assert not np.all(np.isfinite(lse[:, 37:57]))
    grads = attention_backward(do, q, k, v, out, lse, **cu)
    for s0, s1 in ((0, 37), (57, 87)):
        one = dict(cu_seqlens_q=_cu([s1 - s0]), cu_seqlens_k=_cu([s1 - s0]))
        o1, l1 = attention(q[s0:s1], k[s0:s1], v[s0:s1], return_lse=True, **one)
        g1 = attention_backward(do[s0:s1], q[s0:s1], k[s0:s1], v[s0:s1], o1, l1, **one)
        for name, g, w in zip(("dq", "dk", "dv"), grads, g1):
            assert np.all(np.isfinite(w.astype(np.float64))), name
            np.testing.assert_array_equal(g[s0:s1], w, err_msg=name)


def test_varlen_backward_lse_shape_error():
    q, k, v, cq, ck = _args()
    with pytest.raises(ValueError, match="lse"):
        attention_backward(q, q, k, v, q, np.zeros((2, 6), np.float32), cu_seqlens_q=cq, cu_seqlens_k=ck)


# ----------------------------------------------------------------------------- plans
def _cdiv(a, b):
    return -(-a // b)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("d,dv", [(64, 64), (128, 128), (192, 128)])
def test_plans_launch_counts_do_not_depend_on_batch(arch, d, dv):
    target = Target.from_arch(arch)
    q, k, v = spec((301, 8, d), tc.bfloat16), spec((413, 2, d), tc.bfloat16), spec((413, 2, dv), tc.bfloat16)
    fcfg, bcfg = config_for(d, dv, target, varlen=True), bwd_config_for(d, target, dv, path="varlen")
    for batch in (1, 2, 17, 4096):
        fwd = V.plan_forward(q, k, v, batch, 130, target, lse=True)
        bwd = V.plan_backward(q, k, v, batch, 130, 77, target)
        assert [ln.name for ln in fwd] == ["attention_varlen_fwd_kernel"]
        assert [ln.name for ln in bwd] == ["attention_bwd_delta_kernel", "attention_varlen_bwd_dkdv_kernel",
                                           "attention_varlen_bwd_dq_kernel"]
        assert fwd[0].grid == (_cdiv(130, fcfg.bm), 8, batch)
        assert fwd[0].consts["GROUP"] == 4 and fwd[0].consts["LSE"] is True
        assert bwd[0].grid == (_cdiv(301, 64), 8, 1)            # δ over the packed rows, not per sequence
        assert bwd[1].grid == (_cdiv(77, bcfg.kv_block), 2, batch)
        assert bwd[2].grid == (_cdiv(130, bcfg.q_block), 8, batch)
        assert all(ln.schedule == "varlen" for ln in fwd + bwd)


def test_plans_without_rows_launch_nothing():
    target = Target.from_arch("sm_90a")
    q, k, v = spec((0, 2, 64), tc.float16), spec((9, 2, 64), tc.float16), spec((9, 2, 64), tc.float16)
    assert V.plan_forward(q, k, v, 3, 0, target) == []
    assert V.plan_forward(q, k, v, 0, 5, target) == []
    # no query row: the dK/dV launch still writes the keys' zeros; no δ, no dQ
    assert [ln.name for ln in V.plan_backward(q, k, v, 3, 0, 9, target)] == ["attention_varlen_bwd_dkdv_kernel"]


@pytest.mark.parametrize("batch", [2, 9])
def test_entry_points_launch_one_and_three_kernels(monkeypatch, batch):
    seen = []
    real = L.launch
    monkeypatch.setattr(L, "launch", lambda kernel, grid, *a, **kw: (seen.append((kernel.name, grid)),
                                                                    real(kernel, grid, *a, **kw)))
    rng = np.random.default_rng(batch)
    lq, lk = [int(x) for x in rng.integers(0, 20, batch)], [int(x) for x in rng.integers(1, 20, batch)]
    lq[0] = 19
    q, k, v = _packed(rng, lq, lk, 2, 1, 16)
    cu = dict(cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk))
    o, lse = attention(q, k, v, return_lse=True, causal=True, **cu)
    assert [n for n, _ in seen] == ["attention_varlen_fwd_kernel"] and seen[0][1][2] == batch
    seen.clear()
    grads = attention_backward(q, q, k, v, o, lse, causal=True, **cu)
    assert [n for n, _ in seen] == ["attention_bwd_delta_kernel", "attention_varlen_bwd_dkdv_kernel",
                                    "attention_varlen_bwd_dq_kernel"]
    want = _grads_ref(q, k, v, q, lq, lk, causal=True)
    for g, w in zip(grads, want):
        assert np.abs(g.astype(np.float64) - w).max() < 4e-3 * max(np.abs(w).max(), 1.0)


def test_seqlens_of_host_prefix_sums():
    # (batch, max_seqlen_q, max_seqlen_k): from the prefix sums, or the given (larger) maxima
    assert V.seqlens(_cu([0, 3, 2]), _cu([4, 0, 1]), 5, 5) == (3, 3, 4)
    assert V.seqlens(_cu([0, 3, 2]), _cu([4, 0, 1]), 5, 5, 10, 4) == (3, 10, 4)
    assert V.seqlens(_cu([]), _cu([]), 0, 0) == (0, 0, 0)
    with pytest.raises(ValueError, match="max_seqlen_k"):
        V.seqlens(_cu([0, 3, 2]), _cu([4, 0, 1]), 5, 5, None, 3)
    with pytest.raises(ValueError, match="max_seqlen_q"):
        V.seqlens(_cu([1]), _cu([1]), 1, 1, True)


def test_varlen_backward_needs_lse():
    q, k, v, cq, ck = _args()
    with pytest.raises(ValueError, match="lse"):
        attention_backward(q, q, k, v, q, None, cu_seqlens_q=cq, cu_seqlens_k=ck)


# ----------------------------------------------------------------------------- numerics
def test_rows_that_see_no_key_give_zeros_and_minus_inf_and_no_nan_gradients():
    # causal bottom-right with seq_q > seq_k: the first rows of a sequence see no key
    rng = np.random.default_rng(21)
    lq, lk = [7, 40, 1], [3, 20, 1]
    q, k, v = _packed(rng, lq, lk, 2, 2, 32)
    cu = dict(cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk))
    out, lse = attention(q, k, v, causal=True, return_lse=True, **cu)
    assert np.all(out[:4] == 0) and np.all(lse[:, :4] == -np.inf) and np.all(np.isfinite(lse[:, 4:7]))
    assert np.all(out[7:27] == 0) and np.all(lse[:, 7:27] == -np.inf)
    want, want_lse = _ref(q, k, v, lq, lk, causal=True)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=2e-2)
    do = rng.standard_normal(q.shape).astype(np.float16)
    dq, dk, dv = attention_backward(do, q, k, v, out, lse, causal=True, **cu)
    assert all(np.all(np.isfinite(g.astype(np.float64))) for g in (dq, dk, dv))
    assert np.all(dq[:4] == 0) and np.all(dq[7:27] == 0)
    for g, w in zip((dq, dk, dv), _grads_ref(q, k, v, do, lq, lk, causal=True)):
        assert np.abs(g.astype(np.float64) - w).max() < 4e-3 * max(np.abs(w).max(), 1.0)


def test_larger_max_seqlen_and_out_rows_of_other_sequences_untouched():
    # a grid sized for longer sequences than there are: the extra programs end at once
    rng = np.random.default_rng(22)
    lq, lk = [5, 0, 33], [9, 4, 30]
    q, k, v = _packed(rng, lq, lk, 2, 1, 16)
    out = np.full(q.shape, 7.0, np.float16)
    attention(q, k, v, window=(6, 2), out=out, max_seqlen_q=300, max_seqlen_k=100,
              cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk))
    np.testing.assert_allclose(out.astype(np.float64), _ref(q, k, v, lq, lk, window=(6, 2))[0], atol=2e-2)


def test_non_finite_rows_stay_in_their_sequence():
    # a block that ends one sequence reads the next one's rows: they must not reach it as 0 · inf
    # (except dK/dV of the sequence before, whose last query block reads q and dO rows unzeroed:
    # docs/stdlib.md)
    rng = np.random.default_rng(23)
    lq, lk = [37, 20, 30], [37, 20, 30]
    q, k, v = _packed(rng, lq, lk, 2, 1, 16)
    do = rng.standard_normal(q.shape).astype(np.float16)
    for a in (q, k, v, do):
        a[37:57] = np.inf                     # the middle sequence is all inf
    cu = dict(cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk), causal=True)
    out, lse = attention(q, k, v, return_lse=True, **cu)
    keep = np.r_[0:37, 57:87]
    assert np.all(np.isfinite(out[keep].astype(np.float64))) and np.all(np.isfinite(lse[:, keep]))
    grads = attention_backward(do, q, k, v, out, lse, **cu)
    for s0, s1 in ((0, 37), (57, 87)):   # the other sequences as alone
        one = dict(cu_seqlens_q=_cu([s1 - s0]), cu_seqlens_k=_cu([s1 - s0]), causal=True)
        o1, l1 = attention(q[s0:s1], k[s0:s1], v[s0:s1], return_lse=True, **one)
        np.testing.assert_array_equal(out[s0:s1], o1)
        g1 = attention_backward(do[s0:s1], q[s0:s1], k[s0:s1], v[s0:s1], o1, l1, **one)
        for name, g, w in zip(("dq", "dk", "dv"), grads, g1):
            if name == "dq" or s0 == 57:
                assert np.all(np.isfinite(w.astype(np.float64)))
                np.testing.assert_array_equal(g[s0:s1], w)


@settings(max_examples=12, deadline=None)
@given(lens=st.lists(st.tuples(st.integers(0, 70), st.integers(0, 70)), min_size=1, max_size=4),
       hk=st.sampled_from([1, 2]), mask=st.sampled_from(["none", "causal", "window", "softcap"]))
def test_forward_and_backward_for_any_length_split(lens, hk, mask):
    lq, lk = [a for a, _ in lens], [b for _, b in lens]
    kw = {"none": {}, "causal": dict(causal=True), "window": dict(window=(9, 3)), "softcap": dict(softcap=4.0)}[mask]
    rng = np.random.default_rng(sum(lq) * 131 + sum(lk))
    q, k, v = _packed(rng, lq, lk, 2, hk, 16)
    cu = dict(cu_seqlens_q=_cu(lq), cu_seqlens_k=_cu(lk))
    out, lse = attention(q, k, v, return_lse=True, **cu, **kw)
    want, want_lse = _ref(q, k, v, lq, lk, **kw)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=2e-2)
    assert np.array_equal(np.isinf(lse), np.isinf(want_lse))
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[fin], want_lse[fin], atol=1e-2)
    do = rng.standard_normal(q.shape).astype(np.float16)
    got = attention_backward(do, q, k, v, out, lse, **cu, **kw)
    for name, g, w in zip(("dq", "dk", "dv"), got, _grads_ref(q, k, v, do, lq, lk, **kw)):
        err = np.abs(g.astype(np.float64) - w).max(initial=0.0)
        assert err < 4e-3 * max(np.abs(w).max(initial=0.0), 1.0), (name, err)


# ----------------------------------------------------------------------------- PTX
@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(V.SHIPPED)))
def test_planned_launches_assemble_without_spills(case):
    # each launch the plans make (sm_80 and sm_90a targets), compiled with the plan's own warps and stages
    arch, ln, dtype = V.SHIPPED[case]
    compiled = compile_kernel(ln.kernel, parse_signature(ln.kernel, V.signature(ln, dtype)),
                              CompileOptions(arch=arch, num_warps=ln.num_warps, fast_math=True, **dict(ln.options)),
                              use_cache=False)
    report = compiled.metadata["ptxas"]
    assert_assembles_clean(report)
