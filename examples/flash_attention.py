"""Flash attention, forward: O = softmax(Q Kᵀ · scale) V without the (seq × seq) scores.

    python examples/flash_attention.py

q, k, v and o are (batch·heads, seq, head_dim). Each program owns BM query rows of
one head and streams that head's keys and values BN at a time. It keeps, per row,
the running max m of the scores, the running sum l of exp(score - m) and the
output accumulator; when a block raises the max, l and the accumulator are
rescaled by exp(m_old - m_new) ("online softmax"), so one pass over K and V gives
the exact result. Scores are kept in base 2 (scale · log2 e folded into the
scale), so each exponential is one `exp2`.

Masks cost only where they are needed: the loop is split into the key blocks
every row of the tile sees whole (no mask) and the few it sees in part (the
causal diagonal, or the ragged last block when seq is not a multiple of BN).
"""
import math

import numpy as np

import tilec as tc
from _harness import Target, check, finish

LOG2E = 1.4426950408889634


@tc.func
def attend_block(qt, k, v, z, j, m_i, l_i, acc, qk_scale, q0, n_kv,
                 MASKED: tc.constexpr, CAUSAL: tc.constexpr,
                 BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    kt = tc.reshape(tc.load(k, index=(z, j, 0), shape=(1, BN, D), padding=0.0), (BN, D))
    vt = tc.reshape(tc.load(v, index=(z, j, 0), shape=(1, BN, D), padding=0.0), (BN, D))
    s = tc.dot(qt, kt.T)   # unscaled: the scale goes into the max (one multiply per row) and exp2's fma
    if MASKED:
        cols = j * BN + tc.arange(0, BN)
        keep = cols[None, :] < n_kv
        if CAUSAL:
            rows = q0 + tc.arange(0, BM)
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tc.where(keep, s, float("-inf"))
    m_new = tc.maximum(m_i, tc.max(s, axis=1) * qk_scale)   # qk_scale > 0: max(s)·c = max(s·c)
    p = tc.exp2(s * qk_scale - m_new[:, None])
    alpha = tc.exp2(m_i - m_new)
    l_new = l_i * alpha + tc.sum(p, axis=1)
    acc = tc.dot(p.astype(v.dtype), vt, acc * alpha[:, None])
    return m_new, l_new, acc


@tc.kernel
def attention_fwd(q, k, v, o, lse, scale, CAUSAL: tc.constexpr,
                  BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    # the last query blocks first: under CAUSAL they see the most keys, and the programs
    # launched last, the short ones, then end together (1.09x at 16k tokens on an H200)
    mblk = tc.num_programs(0) - 1 - tc.program_id(0)
    z = tc.program_id(1)
    n_kv = k.shape[1]
    q0 = mblk * BM
    qt = tc.reshape(tc.load(q, index=(z, mblk, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    qk_scale = scale * LOG2E

    m_i = tc.full((BM,), float("-inf"), tc.float32)
    l_i = tc.zeros((BM,), tc.float32)
    acc = tc.zeros((BM, D), tc.float32)

    if CAUSAL:   # keys up to the tile's last row; those before its first row are seen whole
        n_full = q0 // BN
        n_all = tc.cdiv(tc.minimum(q0 + BM, n_kv), BN)
    else:
        n_full = n_kv // BN
        n_all = tc.cdiv(n_kv, BN)
    for j in range(n_full):
        m_i, l_i, acc = attend_block(qt, k, v, z, j, m_i, l_i, acc, qk_scale, q0, n_kv,
                                     False, CAUSAL, BM, BN, D)
    for j in range(n_full, n_all):
        m_i, l_i, acc = attend_block(qt, k, v, z, j, m_i, l_i, acc, qk_scale, q0, n_kv,
                                     True, CAUSAL, BM, BN, D)

    out = acc / l_i[:, None]
    tc.store(o, index=(z, mblk, 0), tile=tc.reshape(out.astype(o.dtype), (1, BM, D)))
    # log2 of each row's softmax denominator, in the scores' base-2 units: the backward
    # pass rebuilds P = exp2(s - lse) from it without the running max.
    tc.store(lse, index=(z, mblk), tile=tc.reshape(m_i + tc.log2(l_i), (1, BM)))


# What a launch on contiguous f16 tensors specializes to (strides divisible by 16).
_T = "f16[?,?,?]:stride_div=16x16x1"
SIGNATURES = {
    "attention_fwd": f"q={_T}, k={_T}, v={_T}, o={_T}, lse=f32[?,?]:stride_div=16x1, scale=f32, "
                     "CAUSAL=True, BM=128, BN=64, D=64",
}
OPTIONS = {"attention_fwd": {"num_warps": 8, "fast_math": True}}


def reference(q, k, v, scale, causal):
    """softmax(q kᵀ · scale) v in float64, per head."""
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = np.einsum("zqd,zkd->zqk", q, k) * scale
    if causal:
        n_q, n_k = s.shape[1], s.shape[2]
        s = np.where(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return np.einsum("zqk,zkd->zqd", p / p.sum(axis=2, keepdims=True), v)


SHORT, SHORT_CAUSAL = 1024, 4096   # the longest sequences that take the one-warpgroup tiles


def blocks_for(d, target=None, seq=None, causal=False):
    """(BM, BN, warps) at head dim d on `target` (a tc.Target; default: the current device's)
    for `seq` query rows: 128 query rows over two warpgroups stepping by 64 keys; by 32 at
    head dim 128 without wgmma (sm_80: mma.sync fragments, and 64 keys spill there). Short
    sequences at head dim 128 with wgmma (causal up to 4096 rows, else up to 1024) take 64
    rows over one warpgroup: two programs fit an SM, so one's prologue and epilogue run
    under the other's loop (measured on an H200: docs/benchmarks.md, "Short sequences")."""
    t = tc.Target.current() if target is None else target
    if t.has_wgmma and d > 64 and seq is not None and seq <= (SHORT_CAUSAL if causal else SHORT):
        return (64, 64, 4)
    return (128, 64 if t.has_wgmma or d <= 64 else 32, 8)


def attention(q, k, v, causal, target, bm=None, bn=None):
    """(o, lse) for numpy q, k, v of shape (batch·heads, seq, dim); blocks_for's tiles unless
    `bm` and `bn` say otherwise."""
    zh, seq, d = q.shape
    bm_, bn_, _ = blocks_for(d, seq=seq, causal=causal)
    bm, bn = bm or bm_, bn or bn_
    warps = bm // 16   # a warpgroup per 64 rows
    o = target.to_device(np.zeros(q.shape, q.dtype))
    lse = target.to_device(np.zeros((zh, seq), np.float32))
    args = [target.to_device(t) for t in (q, k, v)]
    with target.launching():
        attention_fwd[(tc.cdiv(seq, bm), zh)](*args, o, lse, 1.0 / math.sqrt(d), CAUSAL=causal,
                                              BM=bm, BN=bn, D=d, num_warps=warps, fast_math=True)
    return target.to_host(o), target.to_host(lse)


def main():
    rng = np.random.default_rng()
    target = Target()
    # A sequence that is a multiple of neither block; small on the interpreter.
    seq = int(rng.integers(600, 900)) if target.on_gpu else int(rng.integers(130, 200))
    zh, d = 3, 64
    q, k, v = (rng.standard_normal((zh, seq, d)).astype(np.float16) for _ in range(3))
    ok = True
    for causal in (False, True):
        got, _ = attention(q, k, v, causal, target)
        want = reference(q, k, v, 1.0 / math.sqrt(d), causal)
        # P is rounded to f16 before the second product: ~1e-3 relative on outputs of size ~1.
        ok &= check(f"attention_fwd causal={causal}", got, want, rtol=5e-3, atol=5e-3)
    finish(target, ok)


if __name__ == "__main__":
    main()
