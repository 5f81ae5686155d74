"""A flash-attention forward written as a user would (issue 44), shared by the interpreter,
PTX and GPU tests, with its float64 reference. q, k, v, o are (batch * heads, seq, D); each
program takes BM query rows of one head and streams the keys in blocks of BN."""
from __future__ import annotations

import numpy as np

import tilec as tc


@tc.func
def _start(q, bh, mblk, BM: tc.constexpr, D: tc.constexpr):
    """The program's Q tile, its row statistics and its accumulator, as a loop starts them."""
    qt = tc.reshape(tc.load(q, index=(bh, mblk, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    return qt, tc.full((BM,), float("-inf"), tc.float32), tc.zeros((BM,), tc.float32), tc.zeros((BM, D), tc.float32)


@tc.kernel
def attn_fwd(q, k, v, o, scale, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    bh = tc.program_id(1)
    mblk = tc.program_id(0)
    n_kv = k.shape[1]
    qt, m_i, l_i, acc = _start(q, bh, mblk, BM, D)
    qk_scale = scale * 1.4426950408889634
    for j in range(tc.cdiv(n_kv, BN)):
        kt = tc.reshape(tc.load(k, index=(bh, j, 0), shape=(1, BN, D), padding=0.0), (BN, D))
        vt = tc.reshape(tc.load(v, index=(bh, j, 0), shape=(1, BN, D), padding=0.0), (BN, D))
        s = tc.dot(qt, kt.T) * qk_scale
        cols = j * BN + tc.arange(0, BN)
        s = tc.where(cols[None, :] < n_kv, s, float("-inf"))
        m_new = tc.maximum(m_i, tc.max(s, axis=1))
        p = tc.exp2(s - m_new[:, None])
        alpha = tc.exp2(m_i - m_new)
        l_i = l_i * alpha + tc.sum(p, axis=1)
        acc = tc.dot(p.astype(q.dtype), vt, acc * alpha[:, None])
        m_i = m_new
    out = acc / l_i[:, None]
    tc.store(o, index=(bh, mblk, 0), tile=tc.reshape(out.astype(o.dtype), (1, BM, D)))


@tc.kernel
def attn_fwd_next_scores_first(q, k, v, o, scale, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    """attn_fwd with the next block's scores issued before this block's O += P V (FA3's
    order, written by the user): S(j+1) is carried into the next iteration's softmax."""
    bh = tc.program_id(1)
    mblk = tc.program_id(0)
    n_kv = k.shape[1]
    qt, m_i, l_i, acc = _start(q, bh, mblk, BM, D)
    qk_scale = scale * 1.4426950408889634
    k0 = tc.reshape(tc.load(k, index=(bh, 0, 0), shape=(1, BN, D), padding=0.0), (BN, D))
    s = tc.dot(qt, k0.T)
    for j in range(tc.cdiv(n_kv, BN)):
        kn = tc.reshape(tc.load(k, index=(bh, j + 1, 0), shape=(1, BN, D), padding=0.0), (BN, D))
        vt = tc.reshape(tc.load(v, index=(bh, j, 0), shape=(1, BN, D), padding=0.0), (BN, D))
        cols = j * BN + tc.arange(0, BN)
        s = tc.where(cols[None, :] < n_kv, s * qk_scale, float("-inf"))
        m_new = tc.maximum(m_i, tc.max(s, axis=1))
        p = tc.exp2(s - m_new[:, None])
        alpha = tc.exp2(m_i - m_new)
        l_i = l_i * alpha + tc.sum(p, axis=1)
        s = tc.dot(qt, kn.T)
        acc = tc.dot(p.astype(q.dtype), vt, acc * alpha[:, None])
        m_i = m_new
    out = acc / l_i[:, None]
    tc.store(o, index=(bh, mblk, 0), tile=tc.reshape(out.astype(o.dtype), (1, BM, D)))


def grid(q, BM: int):
    return ((q.shape[1] + BM - 1) // BM, q.shape[0])


def ref_attention(q, k, v, scale: float) -> np.ndarray:
    """softmax(scale * q k^T) v in float64."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = scale * q @ np.swapaxes(k, 1, 2)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return (p / p.sum(axis=2, keepdims=True)) @ v


def signature(dtype: str, BM: int, BN: int, D: int) -> str:
    """The signature a launch on contiguous (batch * heads, seq, D) tensors of any sequence
    length specializes (D, 64 or 128, divisible by 16)."""
    view = f"{dtype}[?,?,?]:div=1x1x16:stride_div=16x16x1"
    return f"q={view}, k={view}, v={view}, o={view}, scale=f32, BM={BM}, BN={BN}, D={D}"
