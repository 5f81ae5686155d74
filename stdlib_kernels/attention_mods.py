"""attention with score_mod / mask_mod / block_mask (FlexAttention's semantics, issue 45).

`score_mod(score, b, h, q_idx, kv_idx) -> score` rewrites each scaled score q·k · scale
before the softmax; `mask_mod(b, h, q_idx, kv_idx) -> bool` keeps a position (False:
the key is not seen). Both are user `@tc.func`s passed to the kernels as constexprs and
inlined where the scores are formed: q_idx and kv_idx are i32 tiles broadcast to the
score tile's shape (the query position from 0 to seq_q - 1 and the key position from 0
to seq_k - 1, clamped at the ends, no bottom-right offset), b and h i32 scalars (h the
query head). Arrays a mod reads come as `mod_args` (up to two); each mod gets, after
kv_idx, as many of them as it has further parameters (N_AUX: per score_mod, mask_mod and
score_mod_grad).

The kernels walk FlexAttention's lists (attention_mask.py): per query tile, the key
blocks of its mask row that are full (no mask_mod called, no bounds) and those that are
partial (mask_mod and the key bound); blocks of class none are never loaded. The full
list's leading run of consecutive blocks (a causal, windowed, prefix or document row's
whole interior) is walked by an affine index, which the compiler pipelines as in the
dense kernels; the rest by loaded indices. Without a
mask_mod the kernels walk every key block (DENSE), masking only the ragged last one.
A block of the mask spans whole kernel tiles (SUB_Q x SUB_K of them).

Backward: tilec has no automatic differentiation, so a score_mod's derivative comes
from the user: `score_mod_grad(score, b, h, q_idx, kv_idx) -> d score_mod / d score` (1.0
for an additive bias such as ALiBi or a relative-position bias); with a score_mod and no
score_mod_grad the backward is a ValueError. Gradients flow to q, k and v only, never
into arrays the mods read (a learned bias table gets none). dS of the modified scores is
multiplied by the derivative before the products, as softcap's is in attention_bwd.py.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import tilec as tc
from tilec.target import Target

from ._common import Arr, as_array, check_same_place, output, target_of, view
from .attention import LN2, LOG2E, _as_bhsd, config_for, online_softmax, output_shape
from .attention_bwd import (_head_block, _row_stats, backward_operands, bwd_config_for, bwd_config_within,
                            delta_launch)
from .attention_mask import BlockMask, aux_views, block_mask, call_mask_mod, call_score_mod, mod_arrays, mod_aux
from .launches import Launch, Operands, execute

__all__ = ["attention_mods", "attention_backward_mods", "bwd_path", "plan_mods", "plan_mods_backward",
           "attention_mods_fwd_kernel",
           "attention_mods_dkdv_kernel", "attention_mods_dq_kernel"]


@tc.func
def _scores(x, rows, cols, b, h, sm_scale, n_q, n_kv, aux0, aux1, SCORE_MOD: tc.constexpr,
            MASK_MOD: tc.constexpr, N_AUX: tc.constexpr, PARTIAL: tc.constexpr, GRAD: tc.constexpr = None):
    """(base-2 scores, score_mod's derivative) of raw scores x = q·k; rows and cols: the
    query and key positions, broadcastable to x's orientation. PARTIAL: -inf where the key
    is past n_kv or MASK_MOD drops it. The derivative is GRAD's (x itself when unused)."""
    uses_idx = SCORE_MOD is not None or (PARTIAL and MASK_MOD is not None)
    if uses_idx:
        q_idx = tc.broadcast_to(tc.minimum(rows, n_q - 1), x.shape)
        kv_idx = tc.broadcast_to(tc.minimum(cols, n_kv - 1), x.shape)
    g = x
    if SCORE_MOD is not None:
        score = x * sm_scale
        if GRAD is not None:
            g = call_score_mod(GRAD, score, b, h, q_idx, kv_idx, aux0, aux1, N_AUX[2])
        s = call_score_mod(SCORE_MOD, score, b, h, q_idx, kv_idx, aux0, aux1, N_AUX[0]) * LOG2E
    else:   # one multiply per score, as the dense kernels
        s = x * (sm_scale * LOG2E)
    if PARTIAL:
        keep = tc.broadcast_to(cols < n_kv, x.shape)
        if MASK_MOD is not None:
            keep = keep & call_mask_mod(MASK_MOD, b, h, q_idx, kv_idx, aux0, aux1, N_AUX[1])
        s = tc.where(keep, s, float("-inf"))
    return s, g


@tc.func
def _fwd_block(qt, k, v, b, h, hk, j, m_i, l_i, acc, sm_scale, q0, n_q, n_kv, aux0, aux1,
               SCORE_MOD: tc.constexpr, MASK_MOD: tc.constexpr, N_AUX: tc.constexpr, PARTIAL: tc.constexpr,
               BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    kt = tc.reshape(tc.load(k, index=(b, hk, j, 0), shape=(1, 1, BN, DK), padding=0.0), (BN, DK))
    vt = tc.reshape(tc.load(v, index=(b, hk, j, 0), shape=(1, 1, BN, DV), padding=0.0), (BN, DV))
    rows = q0 + tc.arange(0, BM)
    cols = j * BN + tc.arange(0, BN)
    s, _ = _scores(tc.dot(qt, kt.T), rows[:, None], cols[None, :], b, h, sm_scale, n_q, n_kv, aux0, aux1,
                   SCORE_MOD, MASK_MOD, N_AUX, PARTIAL)
    return online_softmax(s, vt, m_i, l_i, acc)


@tc.func
def _list_row(num, b, h, r):
    # how many blocks row r of a list holds
    return tc.load(num.ptr + b.astype(tc.int64) * num.stride(0) + h * num.stride(1) + r * num.stride(2))


@tc.func
def _list_at(idx, b, h, r, t):
    return tc.load(idx.ptr + b.astype(tc.int64) * idx.stride(0) + h * idx.stride(1) + r * idx.stride(2)
                   + t * idx.stride(3))


@tc.kernel
def attention_mods_fwd_kernel(q, k, v, o, lse, kv_num, kv_idx, full_num, full_idx, full_run, aux0, aux1, sm_scale,
                              SCORE_MOD: tc.constexpr, MASK_MOD: tc.constexpr, N_AUX: tc.constexpr,
                              DENSE: tc.constexpr, GROUP: tc.constexpr, LSE: tc.constexpr,
                              SUB_Q: tc.constexpr, SUB_K: tc.constexpr,
                              BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    mblk = tc.program_id(0)
    h = tc.program_id(1)
    b = tc.program_id(2)
    hk = h // GROUP
    n_q = q.shape[2]
    n_kv = k.shape[2]
    q0 = mblk * BM
    qt = tc.reshape(tc.load(q, index=(b, h, mblk, 0), shape=(1, 1, BM, DK), padding=0.0), (BM, DK))
    m_i = tc.full((BM,), float("-inf"), tc.float32)
    l_i = tc.zeros((BM,), tc.float32)
    acc = tc.zeros((BM, DV), tc.float32)
    if DENSE:   # no mask_mod: every key block, the ragged last one with the bound
        for j in range(0, n_kv // BN):
            m_i, l_i, acc = _fwd_block(qt, k, v, b, h, hk, j, m_i, l_i, acc, sm_scale, q0, n_q, n_kv, aux0, aux1,
                                       SCORE_MOD, MASK_MOD, N_AUX, False, BM, BN, DK, DV)
        for j in range(n_kv // BN, tc.cdiv(n_kv, BN)):
            m_i, l_i, acc = _fwd_block(qt, k, v, b, h, hk, j, m_i, l_i, acc, sm_scale, q0, n_q, n_kv, aux0, aux1,
                                       SCORE_MOD, MASK_MOD, N_AUX, True, BM, BN, DK, DV)
    else:
        mb = mblk // SUB_Q
        # the leading run of consecutive full blocks by affine indices (pipelined as the dense
        # loops), then one flat loop per list (SUB_K tiles per listed block)
        run = _list_row(full_run, b, h, mb)
        lo = _list_at(full_idx, b, h, mb, 0) * SUB_K
        for j in range(lo, lo + run * SUB_K):
            m_i, l_i, acc = _fwd_block(qt, k, v, b, h, hk, j, m_i, l_i, acc, sm_scale, q0, n_q, n_kv,
                                       aux0, aux1, SCORE_MOD, MASK_MOD, N_AUX, False, BM, BN, DK, DV)
        for t in range(run * SUB_K, _list_row(full_num, b, h, mb) * SUB_K):
            j = _list_at(full_idx, b, h, mb, t // SUB_K) * SUB_K + t % SUB_K
            m_i, l_i, acc = _fwd_block(qt, k, v, b, h, hk, j, m_i, l_i, acc, sm_scale, q0, n_q, n_kv,
                                       aux0, aux1, SCORE_MOD, MASK_MOD, N_AUX, False, BM, BN, DK, DV)
        for t in range(0, _list_row(kv_num, b, h, mb) * SUB_K):
            j = _list_at(kv_idx, b, h, mb, t // SUB_K) * SUB_K + t % SUB_K
            m_i, l_i, acc = _fwd_block(qt, k, v, b, h, hk, j, m_i, l_i, acc, sm_scale, q0, n_q, n_kv,
                                       aux0, aux1, SCORE_MOD, MASK_MOD, N_AUX, True, BM, BN, DK, DV)
    seen = l_i > 0.0
    out = acc / tc.where(seen, l_i, 1.0)[:, None]
    tc.store(o, index=(b, h, mblk, 0), tile=tc.reshape(out.astype(o.dtype), (1, 1, BM, DV)))
    if LSE:
        row_lse = tc.where(seen, (m_i + tc.log2(l_i)) * LN2, float("-inf"))
        tc.store(lse, index=(b, h, mblk), tile=tc.reshape(row_lse, (1, 1, BM)))


@tc.func
def _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk, dv, n0, sm_scale, n_q, n_kv, aux0, aux1,
                SCORE_MOD: tc.constexpr, GRAD: tc.constexpr, MASK_MOD: tc.constexpr, N_AUX: tc.constexpr,
                PARTIAL: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    qt = tc.reshape(tc.load(q, index=(b, h, i, 0), shape=(1, 1, BM, DK), padding=0.0), (BM, DK))
    dot_ = tc.reshape(tc.load(do, index=(b, h, i, 0), shape=(1, 1, BM, DV), padding=0.0), (BM, DV))
    l2, d = _row_stats(lse, delta, b, h, i, 0, BM, False)
    rows = i * BM + tc.arange(0, BM)
    cols = n0 + tc.arange(0, BN)
    # as attention_bwd._dkdv_block: dPᵀ - δ first (δ the product's initial accumulator), then
    # Sᵀ, and score_mod's derivative applied before Pᵀ is formed (at head dim 128 the other
    # orders spill)
    dpt = tc.dot(vt, dot_.T, tc.zeros((BN, BM), tc.float32) - d[None, :])
    st, gt = _scores(tc.dot(kt, qt.T), rows[None, :], cols[:, None], b, h, sm_scale, n_q, n_kv, aux0, aux1,
                     SCORE_MOD, MASK_MOD, N_AUX, PARTIAL, GRAD)       # Sᵀ: (BN, BM)
    if SCORE_MOD is not None:
        dpt = dpt * gt
    pt = tc.exp2(st - l2[None, :])
    dst = pt * dpt                                                    # dSᵀ = Pᵀ ∘ (dPᵀ - δ) ∘ g
    dv = tc.dot(pt.astype(do.dtype), dot_, dv)
    dk = tc.dot(dst.astype(q.dtype), qt, dk)
    return dk, dv


@tc.kernel
def attention_mods_dkdv_kernel(q, k, v, do, lse, delta, dk, dv, q_num, q_idx, full_num, full_idx, full_run, aux0, aux1,
                               sm_scale, SCORE_MOD: tc.constexpr, GRAD: tc.constexpr, MASK_MOD: tc.constexpr,
                               N_AUX: tc.constexpr, DENSE: tc.constexpr, GROUP: tc.constexpr,
                               SUB_Q: tc.constexpr, SUB_K: tc.constexpr,
                               BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    nblk = tc.program_id(0)
    hk = tc.program_id(1)
    b = tc.program_id(2)
    n_q = q.shape[2]
    n_kv = k.shape[2]
    n0 = nblk * BN
    kt = tc.reshape(tc.load(k, index=(b, hk, nblk, 0), shape=(1, 1, BN, DK), padding=0.0), (BN, DK))
    vt = tc.reshape(tc.load(v, index=(b, hk, nblk, 0), shape=(1, 1, BN, DV), padding=0.0), (BN, DV))
    dk_acc = tc.zeros((BN, DK), tc.float32)
    dv_acc = tc.zeros((BN, DV), tc.float32)
    kb = nblk // SUB_K
    if DENSE:   # padded query rows have P = 0 (lse +inf); keys past n_kv are never stored
        # the group's query heads walked inside the loop, as attention_bwd._dkdv_tile's (an
        # outer head loop spills at head dim 128)
        for t in range(GROUP * tc.cdiv(n_q, BM)):
            h, i = _head_block(t, hk, 0, tc.cdiv(n_q, BM), GROUP)
            dk_acc, dv_acc = _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk_acc, dv_acc, n0, sm_scale, n_q,
                                         n_kv, aux0, aux1, SCORE_MOD, GRAD, MASK_MOD, N_AUX, False, BM, BN, DK, DV)
    else:
        for g in range(GROUP):   # the lists are per query head: one walk each (spills at 128 for GROUP > 1)
            h = hk * GROUP + g
            run = _list_row(full_run, b, h, kb)
            lo = _list_at(full_idx, b, h, kb, 0) * SUB_Q
            for i in range(lo, lo + run * SUB_Q):
                dk_acc, dv_acc = _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk_acc, dv_acc, n0,
                                             sm_scale, n_q, n_kv, aux0, aux1, SCORE_MOD, GRAD, MASK_MOD, N_AUX,
                                             False, BM, BN, DK, DV)
            for t in range(run * SUB_Q, _list_row(full_num, b, h, kb) * SUB_Q):
                i = _list_at(full_idx, b, h, kb, t // SUB_Q) * SUB_Q + t % SUB_Q
                dk_acc, dv_acc = _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk_acc, dv_acc, n0,
                                             sm_scale, n_q, n_kv, aux0, aux1, SCORE_MOD, GRAD, MASK_MOD, N_AUX,
                                             False, BM, BN, DK, DV)
            for t in range(0, _list_row(q_num, b, h, kb) * SUB_Q):
                i = _list_at(q_idx, b, h, kb, t // SUB_Q) * SUB_Q + t % SUB_Q
                dk_acc, dv_acc = _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk_acc, dv_acc, n0,
                                             sm_scale, n_q, n_kv, aux0, aux1, SCORE_MOD, GRAD, MASK_MOD, N_AUX,
                                             True, BM, BN, DK, DV)
    tc.store(dk, index=(b, hk, nblk, 0), tile=tc.reshape((dk_acc * sm_scale).astype(dk.dtype), (1, 1, BN, DK)))
    tc.store(dv, index=(b, hk, nblk, 0), tile=tc.reshape(dv_acc.astype(dv.dtype), (1, 1, BN, DV)))


@tc.func
def _dq_block(qt, dot_, l2, d, k, v, b, h, hk, j, dq, q0, sm_scale, n_q, n_kv, aux0, aux1,
              SCORE_MOD: tc.constexpr, GRAD: tc.constexpr, MASK_MOD: tc.constexpr, N_AUX: tc.constexpr,
              PARTIAL: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    kt = tc.reshape(tc.load(k, index=(b, hk, j, 0), shape=(1, 1, BN, DK), padding=0.0), (BN, DK))
    vt = tc.reshape(tc.load(v, index=(b, hk, j, 0), shape=(1, 1, BN, DV), padding=0.0), (BN, DV))
    rows = q0 + tc.arange(0, BM)
    cols = j * BN + tc.arange(0, BN)
    s, g = _scores(tc.dot(qt, kt.T), rows[:, None], cols[None, :], b, h, sm_scale, n_q, n_kv, aux0, aux1,
                   SCORE_MOD, MASK_MOD, N_AUX, PARTIAL, GRAD)          # S: (BM, BN)
    p = tc.exp2(s - l2[:, None])
    ds = p * (tc.dot(dot_, vt.T) - d[:, None])
    if SCORE_MOD is not None:
        ds = ds * g
    return tc.dot(ds.astype(k.dtype), kt, dq)


@tc.kernel
def attention_mods_dq_kernel(q, k, v, do, lse, delta, dq, kv_num, kv_idx, full_num, full_idx, full_run, aux0, aux1,
                             sm_scale,
                             SCORE_MOD: tc.constexpr, GRAD: tc.constexpr, MASK_MOD: tc.constexpr,
                             N_AUX: tc.constexpr, DENSE: tc.constexpr, GROUP: tc.constexpr,
                             SUB_Q: tc.constexpr, SUB_K: tc.constexpr,
                             BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    mblk = tc.program_id(0)
    h = tc.program_id(1)
    b = tc.program_id(2)
    hk = h // GROUP
    n_q = q.shape[2]
    n_kv = k.shape[2]
    q0 = mblk * BM
    qt = tc.reshape(tc.load(q, index=(b, h, mblk, 0), shape=(1, 1, BM, DK), padding=0.0), (BM, DK))
    dot_ = tc.reshape(tc.load(do, index=(b, h, mblk, 0), shape=(1, 1, BM, DV), padding=0.0), (BM, DV))
    l2, d = _row_stats(lse, delta, b, h, mblk, 0, BM, False)
    dq_acc = tc.zeros((BM, DK), tc.float32)
    if DENSE:
        for j in range(0, n_kv // BN):
            dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, h, hk, j, dq_acc, q0, sm_scale, n_q, n_kv, aux0, aux1,
                               SCORE_MOD, GRAD, MASK_MOD, N_AUX, False, BM, BN, DK, DV)
        for j in range(n_kv // BN, tc.cdiv(n_kv, BN)):
            dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, h, hk, j, dq_acc, q0, sm_scale, n_q, n_kv, aux0, aux1,
                               SCORE_MOD, GRAD, MASK_MOD, N_AUX, True, BM, BN, DK, DV)
    else:
        mb = mblk // SUB_Q
        run = _list_row(full_run, b, h, mb)
        lo = _list_at(full_idx, b, h, mb, 0) * SUB_K
        for j in range(lo, lo + run * SUB_K):
            dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, h, hk, j, dq_acc, q0, sm_scale, n_q, n_kv,
                               aux0, aux1, SCORE_MOD, GRAD, MASK_MOD, N_AUX, False, BM, BN, DK, DV)
        for t in range(run * SUB_K, _list_row(full_num, b, h, mb) * SUB_K):
            j = _list_at(full_idx, b, h, mb, t // SUB_K) * SUB_K + t % SUB_K
            dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, h, hk, j, dq_acc, q0, sm_scale, n_q, n_kv,
                               aux0, aux1, SCORE_MOD, GRAD, MASK_MOD, N_AUX, False, BM, BN, DK, DV)
        for t in range(0, _list_row(kv_num, b, h, mb) * SUB_K):
            j = _list_at(kv_idx, b, h, mb, t // SUB_K) * SUB_K + t % SUB_K
            dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, h, hk, j, dq_acc, q0, sm_scale, n_q, n_kv,
                               aux0, aux1, SCORE_MOD, GRAD, MASK_MOD, N_AUX, True, BM, BN, DK, DV)
    tc.store(dq, index=(b, h, mblk, 0), tile=tc.reshape((dq_acc * sm_scale).astype(dq.dtype), (1, 1, BM, DK)))


# ----------------------------------------------------------------------------- host side
def check_mod_call(x, mask_mod, block_mask_, mod_args, causal, window, softcap) -> Optional[BlockMask]:
    """The BlockMask a call with mods walks (None: DENSE), checked against the call."""
    mod_arrays(mod_args, x.q)   # TypeError / ValueError for mod_args themselves first
    if causal or window is not None or softcap is not None:
        raise ValueError("score_mod / mask_mod / block_mask do not combine with causal, window or softcap: "
                         "express them as a mask_mod (q_idx >= kv_idx) or a score_mod")
    if block_mask_ is not None and not isinstance(block_mask_, BlockMask):
        raise TypeError(f"block_mask: expected a sk.block_mask(...) result, got {type(block_mask_).__name__}")
    if block_mask_ is not None:
        block_mask_.check(mask_mod, x.batch, x.heads, x.n_q, x.n_kv)
        if tuple(block_mask_.mod_args) and tuple(mod_args) and any(
                a is not b for a, b in zip(block_mask_.mod_args, mod_args)):
            raise ValueError("mod_args: differ from the arrays block_mask was computed with")
        return block_mask_
    if mask_mod is None:
        return None
    # computed here for this call only: pass sk.block_mask(...) to reuse it
    place = x.q
    device = None if place.host else getattr(place.obj, "device", None)
    return block_mask(mask_mod, x.batch, x.heads, x.n_q, x.n_kv, mod_args=tuple(mod_args),
                      device=device if place.kind == "torch" else None)


def _from_mask(bm: Optional[BlockMask], mod_args):
    """(mask_mod, mod_args) of a call: the block mask's (its arrays unless the call gives them)."""
    if bm is None:
        return None, tuple(mod_args)
    return bm.mask_mod, tuple(mod_args) or tuple(bm.mod_args)


def _lists(bm: Optional[BlockMask], like: Arr, orientation: str, batch: int = 1, heads: int = 1):
    """The 5 list arguments of the kernels: bm's kv (per query block) or q (per key block)
    lists, or 1-element dummies (DENSE). A mask made with B or H None is seen with stride 0
    along that dimension, for the call's batch and heads."""
    if bm is None:
        d = output(None, like, (1, 1, 1, 1), tc.int32, "lists")
        n = output(None, like, (1, 1, 1), tc.int32, "lists")
        nv, dv = view(n, n.shape, n.strides), view(d, d.shape, d.strides)
        return [nv, dv, nv, dv, nv]
    names = tuple(f"{n}{orientation}_{s}" for n, s in (("", "num"), ("", "idx"), ("full_", "num"),
                                                        ("full_", "idx"), ("full_", "run")))
    arrs = {n: as_array(getattr(bm, n), f"block_mask.{n}") for n in names}
    check_same_place({"q": like, **arrs})

    def spread(a: Arr):
        shape = (batch if bm.B is None else a.shape[0], heads if bm.H is None else a.shape[1]) + a.shape[2:]
        strides = (0 if bm.B is None else a.strides[0], 0 if bm.H is None else a.strides[1]) + a.strides[2:]
        return view(a, shape, strides)
    return [spread(a) for a in arrs.values()]


def attention_mods(x, layout: str, scale, out, return_lse: bool, score_mod, mask_mod, block_mask_, mod_args,
                   causal=False, window=None, softcap=None):
    """The forward with mods of `attention` (x: attention.check_qkv's QKV)."""
    bm = check_mod_call(x, mask_mod, block_mask_, mod_args, causal, window, softcap)
    mask_mod, mod_args = _from_mask(bm, mod_args)
    aux, _ = mod_arrays(mod_args, x.q)
    n_aux = (mod_aux(score_mod, 5, len(aux), "score_mod"), mod_aux(mask_mod, 4, len(aux), "mask_mod"), 0)
    qa = x.q
    b_, h, n_q = x.batch, x.heads, x.n_q
    sm_scale = float(1.0 / math.sqrt(x.d) if scale is None else scale)
    oa = output(out, qa, output_shape(x, layout), qa.dtype)
    o_bhsd, os_ = _as_bhsd(oa, layout)
    lse = output(None, qa, (b_, h, n_q), tc.float32, "lse") if return_lse else None
    lse_arr = lse if lse is not None else output(None, qa, (1, 1, 1), tc.float32, "lse")
    qv, kv, vv = x.views()
    values = {"q": qv, "k": kv, "v": vv, "o": view(oa, o_bhsd, os_),
              "lse": view(lse_arr, lse_arr.shape, lse_arr.strides), "sm_scale": sm_scale,
              **_list_operands(bm, qa, "kv", b_, h), **_aux_operands(aux, qa)}
    execute(plan_mods(x, target_of(qa), score_mod=score_mod, mask_mod=mask_mod, n_aux=n_aux,
                      blocks=_blocks(bm), lse=lse is not None), Operands({"q": qa}, values))
    result = oa.obj
    return (result, lse.obj) if return_lse else result


_LISTS = ("num", "idx", "full_num", "full_idx", "full_run")


def _list_names(orientation: str) -> Tuple[str, ...]:
    """The operand names of the 5 block-list arguments: kv lists (per query block) or q lists."""
    return tuple(f"{orientation}_{n}" for n in _LISTS)


def _list_operands(bm: Optional[BlockMask], like: Arr, orientation: str, batch: int, heads: int) -> dict:
    return dict(zip(_list_names(orientation), _lists(bm, like, orientation, batch, heads)))


def _aux_operands(aux, like: Arr) -> dict:
    return dict(zip(("aux0", "aux1"), aux_views(aux, like)))


def _blocks(bm: Optional[BlockMask]) -> Optional[Tuple[int, int]]:
    return None if bm is None else (bm.Q_BLOCK, bm.KV_BLOCK)


def plan_mods(x, target: Target, *, score_mod=None, mask_mod=None, n_aux=(0, 0, 0),
              blocks: Optional[Tuple[int, int]] = None, lse: bool = False) -> List[Launch]:
    """The forward's launch with mods for the checked q, k, v `x`; a pure function (no launch).
    `blocks`: the block mask's (Q_BLOCK, KV_BLOCK), None for no mask (DENSE); the tile's rows are
    config_for's or the mask's finer blocks (then 4 warps, but 8 for 256-wide tiles: 4 spill).
    Operands: "q", "k", "v", "o", "lse" views, the kv lists (`_list_names("kv")`), "aux0",
    "aux1", "sm_scale"."""
    if x.batch * x.heads * x.n_q == 0:
        return []
    cfg = config_for(x.d, x.dv, target, specialize=False)
    bm_ = min(cfg.bm, blocks[0]) if blocks else cfg.bm
    warps = cfg.num_warps if bm_ == cfg.bm or max(cfg.dk, cfg.dv) > 128 else 4
    return [Launch.of(attention_mods_fwd_kernel, (-(-x.n_q // bm_), x.heads, x.batch),
                      ("q", "k", "v", "o", "lse") + _list_names("kv") + ("aux0", "aux1", "sm_scale"), warps,
                      options={"num_stages": cfg.num_stages}, schedule="mods", SCORE_MOD=score_mod,
                      MASK_MOD=mask_mod, N_AUX=n_aux, DENSE=blocks is None, GROUP=x.heads // x.kv_heads, LSE=lse,
                      SUB_Q=blocks[0] // bm_ if blocks else 1, SUB_K=blocks[1] // cfg.bn if blocks else 1,
                      BM=bm_, BN=cfg.bn, DK=cfg.dk, DV=cfg.dv)]


def plan_mods_backward(x, target: Target, *, score_mod=None, score_mod_grad=None, mask_mod=None, n_aux=(0, 0, 0),
                       blocks: Optional[Tuple[int, int]] = None, dlse: bool = False) -> List[Launch]:
    """The backward's launches with mods (δ, dK/dV, dQ) for the checked q, k, v `x`; a pure
    function (no launch). Tiles: bwd_config_for's on `bwd_path` (bwd_config_within the mask's
    blocks). Operands: plan_backward's views and "lse" (no scalars but "sm_scale"), both
    orientations' lists, "aux0", "aux1"."""
    b_, h, hk = x.batch, x.heads, x.kv_heads
    path = bwd_path(n_aux, blocks is None, h // hk)
    cfg = (bwd_config_for(x.d, target, x.dv, path=path) if blocks is None
           else bwd_config_within(x.d, target, x.dv, blocks[0], blocks[1], path=path))
    first = delta_launch(b_, h, x.n_q, cfg, dlse)
    common = dict(SCORE_MOD=score_mod, GRAD=score_mod_grad, MASK_MOD=mask_mod, N_AUX=n_aux, DENSE=blocks is None,
                  GROUP=h // hk, DK=cfg.dk, DV=cfg.dv)
    opts = {"num_stages": cfg.num_stages}
    ins = ("q", "k", "v", "do", "lse", "delta")
    tail = ("aux0", "aux1", "sm_scale")
    qb, kb = blocks or (cfg.q_step, cfg.kv_block)
    dkdv = Launch.of(attention_mods_dkdv_kernel, (-(-x.n_kv // cfg.kv_block), hk, b_),
                     ins + ("dk", "dv") + _list_names("q") + tail, cfg.num_warps, options=opts, temps=first.temps,
                     schedule="mods", SUB_Q=qb // cfg.q_step, SUB_K=kb // cfg.kv_block, BM=cfg.q_step,
                     BN=cfg.kv_block, **common)
    qb, kb = blocks or (cfg.q_block, cfg.kv_step)
    dq = Launch.of(attention_mods_dq_kernel, (-(-x.n_q // cfg.q_block), h, b_),
                   ins + ("dq",) + _list_names("kv") + tail, cfg.num_warps, options=opts, temps=first.temps,
                   schedule="mods", SUB_Q=qb // cfg.q_block, SUB_K=kb // cfg.kv_step, BM=cfg.q_block,
                   BN=cfg.kv_step, **common)
    return [first, dkdv, dq]


def bwd_path(n_aux, dense: bool, group: int) -> str:
    """bwd_config_for's path of a backward call with mods: "mods_heavy" (the dK/dV kernel on
    the mma.sync tiles at head dim 128) where a mod reads arrays (a gather per score: an
    ALiBi + document mask spills 36 bytes on the wgmma blocks, a bias table 48) or the block
    lists are walked once per query head of a GQA group (344-508 bytes), else "mods"."""
    return "mods_heavy" if any(n_aux) or (not dense and group > 1) else "mods"


def attention_backward_mods(x, arrs, grads, layout: str, scale, score_mod, score_mod_grad, mask_mod, block_mask_,
                            mod_args, causal=False, window=None, softcap=None):
    """The backward with mods of `attention_backward` (checked arguments from there)."""
    if score_mod is not None and score_mod_grad is None:
        raise ValueError("score_mod_grad: the backward of a score_mod needs its derivative d score_mod / d score "
                         "as a @tc.func of the same arguments (tilec has no automatic differentiation; "
                         "1.0 for an additive bias)")
    if score_mod is None and score_mod_grad is not None:
        raise ValueError("score_mod_grad: given without a score_mod")
    qa = x.q
    bm = check_mod_call(x, mask_mod, block_mask_, mod_args, causal, window, softcap)
    mask_mod, mod_args = _from_mask(bm, mod_args)
    aux, _ = mod_arrays(mod_args, qa)
    n_aux = (mod_aux(score_mod, 5, len(aux), "score_mod"), mod_aux(mask_mod, 4, len(aux), "mask_mod"),
             mod_aux(score_mod_grad, 5, len(aux), "score_mod_grad"))
    sm_scale = float(1.0 / math.sqrt(x.d) if scale is None else scale)
    values = backward_operands(x, arrs, grads, layout)
    values.update(sm_scale=sm_scale, **_list_operands(bm, qa, "kv", x.batch, x.heads),
                  **_list_operands(bm, qa, "q", x.batch, x.heads), **_aux_operands(aux, qa))
    has_dlse = "dlse" in values
    execute(plan_mods_backward(x, target_of(qa), score_mod=score_mod, score_mod_grad=score_mod_grad,
                               mask_mod=mask_mod, n_aux=n_aux, blocks=_blocks(bm), dlse=has_dlse),
            Operands({"q": qa}, values))
    return tuple(g.obj for g in grads)
