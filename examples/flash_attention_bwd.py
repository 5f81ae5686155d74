"""Flash attention, backward: dQ, dK and dV from dO without the (seq × seq) matrices.

    python examples/flash_attention_bwd.py

The forward pass (`flash_attention.py`) saved, per query row, lse: log2 of the
softmax denominator in the scores' base-2 units, so P = exp2(S·log2e - lse) is
rebuilt block by block. With δ = rowsum(dO ∘ O) (one small kernel), the
gradients are

    dV = Pᵀ dO        dP = dO Vᵀ        dS = P ∘ (dP - δ)        dK = dSᵀ Q · scale        dQ = dS K · scale

Two kernels share the work without atomics: `attention_bwd_dkdv` owns a block of
keys and walks the query blocks, accumulating dK and dV; `attention_bwd_dq` owns
a block of queries and walks the key blocks, accumulating dQ. The dK/dV kernel
computes Sᵀ = K Qᵀ directly, so Pᵀ and dSᵀ come out in the orientation their
products need. Padding makes the ragged ends free: padded query rows have lse =
+inf (P = 0) and dO = 0, padded keys have K = V = 0, so only the causal
diagonal needs a mask.
"""
import math

import numpy as np

import tilec as tc
from _harness import Target, check, finish

import flash_attention as fwd

LOG2E = 1.4426950408889634


@tc.kernel
def attention_bwd_delta(o, do, delta, BM: tc.constexpr, D: tc.constexpr):
    mblk = tc.program_id(0)
    z = tc.program_id(1)
    ot = tc.reshape(tc.load(o, index=(z, mblk, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    dot_ = tc.reshape(tc.load(do, index=(z, mblk, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    d = tc.sum(ot.astype(tc.float32) * dot_.astype(tc.float32), axis=1)
    tc.store(delta, index=(z, mblk), tile=tc.reshape(d, (1, BM)))


@tc.func
def dkdv_block(kt, vt, q, do, lse, delta, z, i, dk, dv, qk_scale, n0,
               MASKED: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    qt = tc.reshape(tc.load(q, index=(z, i, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    dot_ = tc.reshape(tc.load(do, index=(z, i, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    l_i = tc.reshape(tc.load(lse, index=(z, i), shape=(1, BM), padding=float("inf")), (BM,))
    d_i = tc.reshape(tc.load(delta, index=(z, i), shape=(1, BM), padding=0.0), (BM,))
    pt = tc.exp2(tc.dot(kt, qt.T) * qk_scale - l_i[None, :])       # Pᵀ: (BN, BM)
    if MASKED:   # causal diagonal: key n is seen by query m only when n <= m
        keys = n0 + tc.arange(0, BN)
        rows = i * BM + tc.arange(0, BM)
        pt = tc.where(keys[:, None] <= rows[None, :], pt, 0.0)
    dv = tc.dot(pt.astype(do.dtype), dot_, dv)
    dpt = tc.dot(vt, dot_.T)                                         # dPᵀ: (BN, BM)
    dst = pt * (dpt - d_i[None, :])
    dk = tc.dot(dst.astype(q.dtype), qt, dk)
    return dk, dv


@tc.kernel
def attention_bwd_dkdv(q, k, v, do, lse, delta, dk, dv, scale, CAUSAL: tc.constexpr,
                       BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    nblk = tc.program_id(0)
    z = tc.program_id(1)
    n_q = q.shape[1]
    n0 = nblk * BN
    kt = tc.reshape(tc.load(k, index=(z, nblk, 0), shape=(1, BN, D), padding=0.0), (BN, D))
    vt = tc.reshape(tc.load(v, index=(z, nblk, 0), shape=(1, BN, D), padding=0.0), (BN, D))
    qk_scale = scale * LOG2E
    dk_acc = tc.zeros((BN, D), tc.float32)
    dv_acc = tc.zeros((BN, D), tc.float32)
    n_qblk = tc.cdiv(n_q, BM)
    if CAUSAL:   # query blocks from the first that reaches these keys; whole once every row is past them
        first = n0 // BM
        whole = tc.minimum(tc.cdiv(n0 + BN - 1, BM), n_qblk)
    else:
        first = 0
        whole = 0
    for i in range(first, whole):
        dk_acc, dv_acc = dkdv_block(kt, vt, q, do, lse, delta, z, i, dk_acc, dv_acc, qk_scale, n0,
                                    True, BM, BN, D)
    for i in range(tc.maximum(first, whole), n_qblk):
        dk_acc, dv_acc = dkdv_block(kt, vt, q, do, lse, delta, z, i, dk_acc, dv_acc, qk_scale, n0,
                                    False, BM, BN, D)
    tc.store(dk, index=(z, nblk, 0), tile=tc.reshape((dk_acc * scale).astype(dk.dtype), (1, BN, D)))
    tc.store(dv, index=(z, nblk, 0), tile=tc.reshape(dv_acc.astype(dv.dtype), (1, BN, D)))


@tc.func
def dq_block(qt, dot_, l_i, d_i, k, v, z, j, dq, qk_scale, q0,
             MASKED: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    kt = tc.reshape(tc.load(k, index=(z, j, 0), shape=(1, BN, D), padding=0.0), (BN, D))
    vt = tc.reshape(tc.load(v, index=(z, j, 0), shape=(1, BN, D), padding=0.0), (BN, D))
    p = tc.exp2(tc.dot(qt, kt.T) * qk_scale - l_i[:, None])          # (BM, BN)
    if MASKED:
        keys = j * BN + tc.arange(0, BN)
        rows = q0 + tc.arange(0, BM)
        p = tc.where(keys[None, :] <= rows[:, None], p, 0.0)
    dp = tc.dot(dot_, vt.T)
    ds = p * (dp - d_i[:, None])
    return tc.dot(ds.astype(k.dtype), kt, dq)


@tc.kernel
def attention_bwd_dq(q, k, v, do, lse, delta, dq, scale, CAUSAL: tc.constexpr,
                     BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    mblk = tc.num_programs(0) - 1 - tc.program_id(0)   # under CAUSAL the longest first, as the forward
    z = tc.program_id(1)
    n_kv = k.shape[1]
    q0 = mblk * BM
    qt = tc.reshape(tc.load(q, index=(z, mblk, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    dot_ = tc.reshape(tc.load(do, index=(z, mblk, 0), shape=(1, BM, D), padding=0.0), (BM, D))
    l_i = tc.reshape(tc.load(lse, index=(z, mblk), shape=(1, BM), padding=float("inf")), (BM,))
    d_i = tc.reshape(tc.load(delta, index=(z, mblk), shape=(1, BM), padding=0.0), (BM,))
    qk_scale = scale * LOG2E
    dq_acc = tc.zeros((BM, D), tc.float32)
    if CAUSAL:   # keys before the tile's first row are seen whole, then the diagonal blocks
        n_whole = q0 // BN
        n_all = tc.cdiv(tc.minimum(q0 + BM, n_kv), BN)
    else:
        n_whole = tc.cdiv(n_kv, BN)
        n_all = n_whole
    for j in range(n_whole):
        dq_acc = dq_block(qt, dot_, l_i, d_i, k, v, z, j, dq_acc, qk_scale, q0, False, BM, BN, D)
    for j in range(n_whole, n_all):
        dq_acc = dq_block(qt, dot_, l_i, d_i, k, v, z, j, dq_acc, qk_scale, q0, True, BM, BN, D)
    tc.store(dq, index=(z, mblk, 0), tile=tc.reshape((dq_acc * scale).astype(dq.dtype), (1, BM, D)))


# What a launch on contiguous tensors specializes to (strides divisible by 16).
_T = "f16[?,?,?]:stride_div=16x16x1"
_R = "f32[?,?]:stride_div=16x1"
SIGNATURES = {
    "attention_bwd_delta": f"o={_T}, do={_T}, delta={_R}, BM=64, D=64",
    "attention_bwd_dkdv": f"q={_T}, k={_T}, v={_T}, do={_T}, lse={_R}, delta={_R}, dk={_T}, dv={_T}, "
                          "scale=f32, CAUSAL=True, BM=64, BN=64, D=64",
    "attention_bwd_dq": f"q={_T}, k={_T}, v={_T}, do={_T}, lse={_R}, delta={_R}, dq={_T}, scale=f32, "
                        "CAUSAL=True, BM=64, BN=64, D=64",
}
# (BM, BN, warps) per kernel and head dim. At 128, 8 warps: two warpgroups, each owning 64
# of the 128 rows a program owns (keys for dK/dV, queries for dQ) while it steps by 64 over
# the other side: every product is then a wgmma on sm_90a, Pᵀ and dSᵀ its A from registers,
# and Q and dO (K and V) serve as B both ways from one buffer. At 64 one warpgroup owns 64
# rows and steps by 64: smaller programs, more of them per SM. dQ at 128 steps by 128 keys:
# half the steps. (The tilings timed: docs/benchmarks-archive.md, "Backward tilings and forms".)
BLOCKS = {64: {"attention_bwd_dkdv": (64, 64, 4), "attention_bwd_dq": (64, 64, 4)},
          128: {"attention_bwd_dkdv": (64, 128, 8), "attention_bwd_dq": (128, 128, 8)}}
# Without wgmma (sm_80) the products are mma.sync with every fragment in registers: at 128 the
# tiles above spill (dK/dV) or overflow shared memory (dQ); these are 0-spill there.
BLOCKS_MMA = {64: BLOCKS[64],
              128: {"attention_bwd_dkdv": (32, 64, 8), "attention_bwd_dq": (64, 32, 8)}}
OPTIONS = {name: {"num_warps": 4, "fast_math": True} for name in ("attention_bwd_dkdv", "attention_bwd_dq")}


def blocks_for(d, target=None):
    """The tilings for head dim d on `target` (a tc.Target; default: the current device's):
    BLOCKS with wgmma, BLOCKS_MMA without."""
    t = tc.Target.current() if target is None else target
    return (BLOCKS if t.has_wgmma else BLOCKS_MMA)[64 if d <= 64 else 128]


def attention_bwd(q, k, v, o, lse, do, causal, target, blocks=None):
    """(dq, dk, dv) for numpy arrays of shape (batch·heads, seq, dim); lse from the forward pass."""
    zh, seq, d = q.shape
    scale = 1.0 / math.sqrt(d)
    dev = {name: target.to_device(a) for name, a in dict(q=q, k=k, v=v, o=o, lse=lse, do=do).items()}
    delta = target.to_device(np.zeros((zh, seq), np.float32))
    grads = [target.to_device(np.zeros(q.shape, q.dtype)) for _ in range(3)]
    dq, dk, dv = grads
    with target.launching():
        (bm_k, bn_k, w_k), (bm_q, bn_q, w_q) = ((blocks or blocks_for(d))[name]
                                                for name in ("attention_bwd_dkdv", "attention_bwd_dq"))
        attention_bwd_delta[(tc.cdiv(seq, 64), zh)](dev["o"], dev["do"], delta, BM=64, D=d)
        ins = (dev["q"], dev["k"], dev["v"], dev["do"], dev["lse"], delta)
        attention_bwd_dkdv[(tc.cdiv(seq, bn_k), zh)](*ins, dk, dv, scale, CAUSAL=causal,
                                                     BM=bm_k, BN=bn_k, D=d, num_warps=w_k, fast_math=True)
        attention_bwd_dq[(tc.cdiv(seq, bm_q), zh)](*ins, dq, scale, CAUSAL=causal,
                                                   BM=bm_q, BN=bn_q, D=d, num_warps=w_q, fast_math=True)
    return tuple(target.to_host(g) for g in grads)


def reference_bwd(q, k, v, do, scale, causal):
    """(dq, dk, dv) of softmax(q kᵀ · scale) v in float64."""
    q, k, v, do = (t.astype(np.float64) for t in (q, k, v, do))
    s = np.einsum("zqd,zkd->zqk", q, k) * scale
    if causal:
        s = np.where(np.arange(s.shape[2])[None, :] <= np.arange(s.shape[1])[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    dv = np.einsum("zqk,zqd->zkd", p, do)
    dp = np.einsum("zqd,zkd->zqk", do, v)
    ds = p * (dp - (dp * p).sum(axis=2, keepdims=True))
    return np.einsum("zqk,zkd->zqd", ds, k) * scale, np.einsum("zqk,zqd->zkd", ds, q) * scale, dv


def main():
    rng = np.random.default_rng()
    target = Target()
    seq = int(rng.integers(600, 900)) if target.on_gpu else int(rng.integers(70, 130))
    zh, d = 3, 64
    q, k, v, do = (rng.standard_normal((zh, seq, d)).astype(np.float16) for _ in range(4))
    ok = True
    for causal in (False, True):
        o, lse = fwd.attention(q, k, v, causal, target)
        got = attention_bwd(q, k, v, o, lse, do, causal, target)
        want = reference_bwd(q, k, v, do, 1.0 / math.sqrt(d), causal)
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            # P and dS are rounded to f16 before their products: ~1e-3 of the gradients' scale.
            ok &= check(f"attention_bwd {name} causal={causal}", g, w, rtol=1e-2, atol=1e-2)
    finish(target, ok)


if __name__ == "__main__":
    main()
