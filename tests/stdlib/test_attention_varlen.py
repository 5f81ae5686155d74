"""stdlib attention with packed variable-length sequences (cu_seqlens) on the interpreter:
against a float64 reference looping over sequences; its plan; its argument errors."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.stdlib_kernels import attention, attention_backward
from tilec.stdlib_kernels.attention_varlen import varlen_plan

from attention_ref import attention_ref

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


def test_varlen_plan_is_pure():
    p = varlen_plan(_cu([0, 3, 2]).astype(np.int64), _cu([4, 0, 1]).astype(np.int64))
    assert p.q_spans == ((0, 0), (0, 3), (3, 2)) and p.k_spans == ((0, 4), (4, 0), (4, 1))
    assert (p.max_seqlen_q, p.max_seqlen_k) == (3, 4)


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


def test_varlen_backward_lse_shape_error():
    q, k, v, cq, ck = _args()
    with pytest.raises(ValueError, match="lse"):
        attention_backward(q, q, k, v, q, np.zeros((2, 6), np.float32), cu_seqlens_q=cq, cu_seqlens_k=ck)
