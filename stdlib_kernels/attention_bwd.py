"""attention_backward(do, q, k, v, o, lse, ...): dq, dk, dv of `attention`, flash-style.

The forward pass kept, per query row, the natural log-sum-exp of its scaled scores, so
P = exp(S - lse) is rebuilt block by block and no (seq_q × seq_k) matrix reaches memory.
With δ = rowsum(dO ∘ O) (one small kernel, `attention_bwd_delta_kernel`):

    dV = Pᵀ dO        dP = dO Vᵀ        dS = P ∘ (dP - δ)        dK = dSᵀ Q · scale        dQ = dS K · scale

(`examples/flash_attention_bwd.py`, here on the (batch, heads, seq, dim) views of
attention.py.) Two kernels share the work without atomics: `attention_bwd_dkdv_kernel`
owns BN keys of one key/value head and walks the query blocks of every query head of
its group (grouped-query attention sums dK and dV over the group inside one program,
no temporaries); `attention_bwd_dq_kernel` owns BM query rows and walks the key blocks.
The dK/dV kernel computes Sᵀ = K Qᵀ directly, so Pᵀ and dSᵀ come out in the orientation
their products need.

Masks are the forward's rule (query row i sees key j when i + off - left <= j <= i + off
+ right, off = seq_k - seq_q): each kernel walks only the blocks the band reaches,
masking the blocks on its edges. Padding makes the ragged ends free: padded query rows
load lse = +inf (P = 0) and dO = 0, padded keys K = V = 0 (their dS meets K = 0 in dQ,
their own dK/dV rows are never stored). A row that saw no key (lse = -inf) gets P = 0.

Packed variable-length sequences (attention_varlen.py) run the same program bodies
(`_dkdv_tile`, `_dq_tile` with VARLEN set) in `attention_varlen_bwd_dkdv_kernel` and
`attention_varlen_bwd_dq_kernel`, and δ with the dense kernel over the packed rows.

softcap: the score is c · tanh(x / c) of x = q·k · scale, whose derivative is
1 - tanh², so dS is multiplied by it before the products. `dlse` (a gradient flowing
into the forward's lse, as when chunks of attention are merged) enters as δ - dlse:
∂lse_i/∂S_ij = P_ij.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import tilec as tc
from tilec.target import Target

from ._common import HOST_TARGET, Arr, next_pow2, output, target_of, view
from ._plan import named, planned
from .launches import Launch, Operands, Temp, execute
from .tuning import AttentionBwdTuning, tuning_for
from .attention import (LOG2E, _as_bhsd, _window, band_blocks, check_4d, check_qkv, has_mods, heavy_first_section,
                        kv_pair_bytes, output_shape, program_block, scales, section_grid, tile_bounds)

__all__ = ["attention_backward", "attention_bwd_delta_kernel", "attention_bwd_dkdv_kernel", "attention_bwd_dq_kernel",
           "attention_bwd_group_sum_kernel", "attention_bwd_dkdv_dq_kernel", "attention_bwd_delta_zero_kernel",
           "attention_bwd_dq_convert_kernel", "gqa_split", "bwd_order", "BwdOrder",
           "attention_varlen_bwd_dkdv_kernel", "attention_varlen_bwd_dq_kernel",
           "AttentionBwdConfig", "bwd_config_for", "plan_backward", "delta_launch", "backward_operands", "SIGNATURES", "EXTRA_SIGNATURES"]

DELTA_ROWS = 64       # rows of δ per program
GROUP_SUM_ROWS = 32   # rows per program of the GQA partials' sum (64 spill at 4 partials of 128)


@tc.func
def _delta_rows(o, do, dlse, delta, b, h, mblk, DLSE: tc.constexpr, BM: tc.constexpr, DV: tc.constexpr):
    ot = tc.reshape(tc.load(o, index=(b, h, mblk, 0), shape=(1, 1, BM, DV), padding=0.0), (BM, DV))
    dot_ = tc.reshape(tc.load(do, index=(b, h, mblk, 0), shape=(1, 1, BM, DV), padding=0.0), (BM, DV))
    d = tc.sum(ot.astype(tc.float32) * dot_.astype(tc.float32), axis=1)
    if DLSE:
        d = d - tc.reshape(tc.load(dlse, index=(b, h, mblk), shape=(1, 1, BM), padding=0.0), (BM,))
    tc.store(delta, index=(b, h, mblk), tile=tc.reshape(d, (1, 1, BM)))


@tc.kernel
def attention_bwd_delta_kernel(o, do, dlse, delta, DLSE: tc.constexpr, BM: tc.constexpr, DV: tc.constexpr):
    mblk = tc.program_id(0)
    h = tc.program_id(1)
    b = tc.program_id(2)
    _delta_rows(o, do, dlse, delta, b, h, mblk, DLSE, BM, DV)


@tc.kernel
def attention_bwd_delta_zero_kernel(o, do, dlse, lse, delta, lse_rows, dq_acc, DLSE: tc.constexpr, BM: tc.constexpr,
                                    DV: tc.constexpr, DK: tc.constexpr):
    """attention_bwd_delta_kernel for the fused dK/dV kernel (attention_bwd_dkdv_dq_kernel):
    also zeroes its rows of the f32 dQ accumulator that kernel adds into, and copies lse into
    `lse_rows`. `delta` and `lse_rows` have their rows padded to a multiple of BM (δ 0, lse
    +inf there: P = 0), so that the fused kernel reads whole blocks of rows, unmasked (a
    masked read of lse and δ rows spills 4 bytes there at head dim 128)."""
    mblk = tc.program_id(0)
    h = tc.program_id(1)
    b = tc.program_id(2)
    _delta_rows(o, do, dlse, delta, b, h, mblk, DLSE, BM, DV)
    tc.store(lse_rows, index=(b, h, mblk),
             tile=tc.load(lse, index=(b, h, mblk), shape=(1, 1, BM), padding=float("inf")))
    tc.store(dq_acc, index=(b, h, mblk, 0), tile=tc.zeros((1, 1, BM, DK), tc.float32))


@tc.kernel
def attention_bwd_dq_convert_kernel(dq_acc, dq, scale, BM: tc.constexpr, D: tc.constexpr):
    """dq = the f32 accumulator the fused dK/dV kernel filled (the sum of dS K), scaled and cast."""
    t = tc.load(dq_acc, index=(tc.program_id(2), tc.program_id(1), tc.program_id(0), 0), shape=(1, 1, BM, D))
    tc.store(dq, index=(tc.program_id(2), tc.program_id(1), tc.program_id(0), 0), tile=(t * scale).astype(dq.dtype))


@tc.func
def _row_stats(lse, delta, b, h, i, q_start, BM: tc.constexpr, VARLEN: tc.constexpr):
    # (lse in base 2, δ) of query block i; padded rows and rows that saw no key get +inf: P = 0
    if VARLEN:   # rows of the packed sequence from q_start (those past its end are masked by _probs)
        lse_i = tc.reshape(tc.load(lse, offset=(b, h, q_start + i * BM), shape=(1, 1, BM), padding=float("inf")),
                           (BM,))
    else:
        lse_i = tc.reshape(tc.load(lse, index=(b, h, i), shape=(1, 1, BM), padding=float("inf")), (BM,))
    l2 = tc.where(lse_i == float("-inf"), float("inf"), lse_i * LOG2E)
    if VARLEN:
        d = tc.reshape(tc.load(delta, offset=(b, h, q_start + i * BM), shape=(1, 1, BM), padding=0.0), (BM,))
    else:
        d = tc.reshape(tc.load(delta, index=(b, h, i), shape=(1, 1, BM), padding=0.0), (BM,))
    return l2, d


@tc.func
def _probs(x, dp, l2, rows, cols, qk_scale, cap, left, right, n_kv, MASKED: tc.constexpr, SOFTCAP: tc.constexpr,
           VARLEN: tc.constexpr):
    """(P, dP'), of raw scores x = q·k and dP' = dP - δ, with l2, rows (query index + off) and
    cols (key index) broadcast to x's orientation; under SOFTCAP dP' times tanh's derivative
    1 - tanh²(x · cap) (applied before P is formed: tanh's values die there, not after P, which
    at head dim 128 spills). VARLEN: rows past the sequence (query index >= n_q, i.e. rows >=
    n_kv) are the next sequence's, not padding: P = 0 and dP' = 0 there whatever their lse and
    δ (masked here, not with a `where` on the loaded rows: that spills 20-40 bytes at the
    head dim 128 wgmma blocks)."""
    t = x
    if SOFTCAP:
        t = tc.tanh(x * cap)
        dp = dp - dp * t * t   # (dp · (1 - t²) spills 8 bytes at the head dim 128 wgmma blocks)
    s = t * qk_scale
    if MASKED:
        keep = (cols < n_kv) & (cols >= rows - left) & (cols <= rows + right)
        if VARLEN:   # and dP' = 0 there too: another sequence's lse and δ may be NaN
            keep = keep & (rows < n_kv)
            return tc.exp2(tc.where(keep, s - l2, float("-inf"))), tc.where(keep, dp, 0.0)
        s = tc.where(keep, s, float("-inf"))
    return tc.exp2(s - l2), dp


@tc.func
def _qrows(a, b, h, i, q_start, BM: tc.constexpr, D: tc.constexpr, VARLEN: tc.constexpr):
    """Block i of rows (BM, D) of q, dO, k or v: batch b's, or (VARLEN) the packed rows from q_start."""
    if VARLEN:
        return tc.reshape(tc.load(a, offset=(b, h, q_start + i * BM, 0), shape=(1, 1, BM, D), padding=0.0), (BM, D))
    return tc.reshape(tc.load(a, index=(b, h, i, 0), shape=(1, 1, BM, D), padding=0.0), (BM, D))


@tc.func
def _own_rows(a, b, h, i, start, n, BM: tc.constexpr, D: tc.constexpr, VARLEN: tc.constexpr, MASKED: tc.constexpr):
    """_qrows' block i of rows (BM, D) of head h of `a`, with the rows from n on
    read as zeros where they are another packed sequence's (VARLEN, in a masked block): P = 0
    there, and 0 · inf would be NaN. Those rows are masked in the load itself (64-bit packed-row
    offsets), which still goes through the loop's cp.async ring; a `where` on the loaded tile
    would keep it out of the ring, in registers (at head dim 128 that spills)."""
    if VARLEN:
        if MASKED:
            rows = tc.arange(0, BM)
            cols = tc.arange(0, D)
            packed = (start + i * BM + rows).astype(tc.int64)
            return tc.load(a.ptr + h * a.stride(1) + packed[:, None] * a.stride(2) + cols[None, :],
                           mask=(i * BM + rows < n)[:, None] & (cols < a.shape[3])[None, :], other=0.0)
    return _qrows(a, b, h, i, start, BM, D, VARLEN)


@tc.func
def _store_rows(x, a, b, h, i, start, n, BM: tc.constexpr, D: tc.constexpr, VARLEN: tc.constexpr):
    """Block i of rows (BM, D) of head h into `a`: batch b's, or (VARLEN) the packed rows from
    `start`, only those of the sequence's n (the next rows are another sequence's)."""
    if VARLEN:
        rows = tc.arange(0, BM)
        packed = (start + i * BM + rows).astype(tc.int64)
        cols = tc.arange(0, D)
        tc.store(a.ptr + h * a.stride(1) + packed[:, None] * a.stride(2) + cols[None, :], x.astype(a.dtype),
                 mask=(i * BM + rows < n)[:, None] & (cols < a.shape[3])[None, :])
    else:
        tc.store(a, index=(b, h, i, 0), tile=tc.reshape(x.astype(a.dtype), (1, 1, BM, D)))


@tc.func
def _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk, dv, n0, off, qk_scale, cap, left, right, n_kv, q_start,
                MASKED: tc.constexpr, SOFTCAP: tc.constexpr, VARLEN: tc.constexpr,
                BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr,
                dq_acc=None, DQ: tc.constexpr = False):
    # (another sequence's q and dO rows are not zeroed here, unlike K and V in _dq_block: at the
    # wgmma blocks of head dim 64 that spills 128 bytes on sm_90a; their P and dP - δ are zeroed
    # in _probs' mask)
    qt = _qrows(q, b, h, i, q_start, BM, DK, VARLEN)
    dot_ = _qrows(do, b, h, i, q_start, BM, DV, VARLEN)
    l2, d = _row_stats(lse, delta, b, h, i, q_start, BM, VARLEN)
    rows = i * BM + off + tc.arange(0, BM)
    cols = n0 + tc.arange(0, BN)
    # dPᵀ - δ first (δ as the product's initial accumulator, no δ live beside it), then Sᵀ:
    # Pᵀ in registers for no other product's duration (at head dim 128 that spills)
    dpt = tc.dot(vt, dot_.T, tc.zeros((BN, BM), tc.float32) - d[None, :])
    if DQ:
        return _dkdv_dq_step(kt, qt, dot_, dpt, l2, rows, cols, dq_acc, b, h, i, dk, dv, qk_scale, left, right,
                             MASKED, BM, BN, DK)
    pt, dpt = _probs(tc.dot(kt, qt.T), dpt, l2[None, :], rows[None, :], cols[:, None], qk_scale, cap, left, right,
                     n_kv, MASKED, SOFTCAP, VARLEN)                   # Pᵀ: (BN, BM)
    dst = pt * dpt                                                    # dSᵀ = Pᵀ ∘ (dPᵀ - δ)
    dv = tc.dot(pt.astype(do.dtype), dot_, dv)
    dk = tc.dot(dst.astype(q.dtype), qt, dk)
    return dk, dv


@tc.func
def _dkdv_dq_step(kt, qt, dot_, dpt, l2, rows, cols, dq_acc, b, h, i, dk, dv, qk_scale, left, right,
                  MASKED: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr):
    """The rest of a fused step (attention_bwd_dkdv_dq_kernel; dense, no softcap): Pᵀ, dK, dV,
    and this key block's share of dQ = dS K added into f32 (a TMA reduction on sm_90a),
    unscaled (attention_bwd_dq_convert_kernel scales). What fits 255 registers at head dim 128
    with no spill (at any length, with grouped heads too: the padded lse and δ rows,
    _head_block's HEADS_INNER walk): each row's lse enters as Sᵀ's initial accumulator
    (-lse / qk_scale, so Pᵀ = exp2(acc · qk_scale): no lse row live beside the product), dK
    before dV, dQ last; and no key mask (padded keys are zeros: their dS meets K = 0 in dQ,
    their dK and dV rows are not stored)."""
    xs = tc.dot(kt, qt.T, tc.zeros((BN, BM), tc.float32) - (l2 / qk_scale)[None, :])
    pt = tc.exp2(xs * qk_scale)                                       # Pᵀ: (BN, BM); +inf lse rows: 0
    if MASKED:
        keep = (cols[:, None] >= rows[None, :] - left) & (cols[:, None] <= rows[None, :] + right)
        pt = tc.where(keep, pt, 0.0)
    dst = (pt * dpt).astype(qt.dtype)
    dk = tc.dot(dst, qt, dk)
    dv = tc.dot(pt.astype(dot_.dtype), dot_, dv)
    tc.atomic_add(dq_acc, tc.reshape(tc.dot(dst.T, kt), (1, 1, BM, DK)), index=(b, h, i, 0), sem="relaxed")
    return dk, dv


@tc.func
def _steps(start, end, GROUP: tc.constexpr, HEADS_INNER: tc.constexpr = False):
    """The steps [lo, hi) of _head_block's walk over blocks [start, end) of GROUP heads."""
    if HEADS_INNER:
        return start * GROUP, end * GROUP
    return 0, GROUP * (end - start)


@tc.func
def _head_block(t, hp, start, end, GROUP: tc.constexpr, HEADS_INNER: tc.constexpr = False):
    """(query head, block) of step t of a walk over blocks [start, end) of each of the GROUP
    query heads hp·GROUP .. in turn (t // blocks: the step stays affine in t, so its loads
    pipeline). HEADS_INNER: the group's heads in turn within each block instead, over
    _steps' [start·GROUP, end·GROUP) (t // GROUP divides by a constant, and nothing but t
    is live: so the fused kernel's GQA walk fits 255 registers at head dim 128, where the
    walk by t // blocks spills 4 bytes)."""
    if HEADS_INNER:
        return hp * GROUP + t % GROUP, t // GROUP
    if GROUP == 1:
        return hp, start + t
    g = t // (end - start)
    return hp * GROUP + g, start + t - g * (end - start)


@tc.func
def _dkdv_tile(q, k, v, do, lse, delta, dk, dv, b, hk, nblk, q_start, n_q, k_start, n_kv,
               qk_scale, cap, scale, left, right, GROUP: tc.constexpr, SOFTCAP: tc.constexpr, VARLEN: tc.constexpr,
               BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr, SPLIT: tc.constexpr = 1,
               dq_acc=None, DQ: tc.constexpr = False):
    """dK, dV of keys [nblk·BN, nblk·BN + BN) of kv head hk of one sequence (see _fwd_tile).
    SPLIT > 1: `hk` is part hk % SPLIT of kv head hk // SPLIT, which walks GROUP (its share)
    of the group's query heads and stores its partial sums as head hk of dk, dv. DQ: also adds
    each step's dQ share into the f32 `dq_acc` (attention_bwd_dkdv_dq_kernel), the group's heads
    walked within each query block (_head_block's HEADS_INNER)."""
    hkv = hk // SPLIT
    off = n_kv - n_q
    n0 = nblk * BN
    kt = _qrows(k, b, hkv, nblk, k_start, BN, DK, VARLEN)
    vt = _qrows(v, b, hkv, nblk, k_start, BN, DV, VARLEN)
    dk_acc = tc.zeros((BN, DK), tc.float32)
    dv_acc = tc.zeros((BN, DV), tc.float32)

    # Query rows that see some key of the block: [lo, hi); that see all of them: [whole_lo, whole_hi).
    lo = tc.maximum(n0 - off - right, 0)
    hi = tc.minimum(n0 + BN - 1 - off + left + 1, n_q)
    whole_lo = tc.maximum(n0 + BN - 1 - off - right, 0)
    whole_hi = tc.minimum(n0 - off + left + 1, n_q)
    first, inner_lo, inner_hi, last = band_blocks(lo, hi, whole_lo, whole_hi, BM)
    # The query heads of the group (GQA) walk within each loop, not around the three: an outer
    # head loop keeps more values live across the inner loops (spills at head dim 128).
    t_lo, t_hi = _steps(first, inner_lo, GROUP, DQ)
    for t in range(t_lo, t_hi):
        h, i = _head_block(t, hk, first, inner_lo, GROUP, DQ)
        dk_acc, dv_acc = _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk_acc, dv_acc, n0, off, qk_scale, cap,
                                     left, right, n_kv, q_start, True, SOFTCAP, VARLEN, BM, BN, DK, DV,
                                     dq_acc, DQ)
    t_lo, t_hi = _steps(inner_lo, inner_hi, GROUP, DQ)
    for t in range(t_lo, t_hi):
        h, i = _head_block(t, hk, inner_lo, inner_hi, GROUP, DQ)
        dk_acc, dv_acc = _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk_acc, dv_acc, n0, off, qk_scale, cap,
                                     left, right, n_kv, q_start, False, SOFTCAP, VARLEN, BM, BN, DK, DV,
                                     dq_acc, DQ)
    t_lo, t_hi = _steps(inner_hi, last, GROUP, DQ)
    for t in range(t_lo, t_hi):
        h, i = _head_block(t, hk, inner_hi, last, GROUP, DQ)
        dk_acc, dv_acc = _dkdv_block(kt, vt, q, do, lse, delta, b, h, i, dk_acc, dv_acc, n0, off, qk_scale, cap,
                                     left, right, n_kv, q_start, True, SOFTCAP, VARLEN, BM, BN, DK, DV,
                                     dq_acc, DQ)
    _store_rows(dk_acc * scale, dk, b, hk, nblk, k_start, n_kv, BN, DK, VARLEN)
    _store_rows(dv_acc, dv, b, hk, nblk, k_start, n_kv, BN, DV, VARLEN)


@tc.kernel
def attention_bwd_dkdv_kernel(q, k, v, do, lse, delta, dk, dv, qk_scale, cap, scale, left, right,
                              GROUP: tc.constexpr, SOFTCAP: tc.constexpr,
                              BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr,
                              SPLIT: tc.constexpr = 1, SECTION: tc.constexpr = 0):
    # SPLIT > 1 (GQA with too few programs for the SMs): program (nblk, hk·SPLIT + s) walks
    # share s of kv head hk's GROUP query heads, its dk, dv the f32 partials (b, hk·SPLIT + s)
    # that attention_bwd_group_sum_kernel then adds up.
    # causal: the first key blocks see the most queries
    nblk, hk, b = program_block(k.shape[1] * SPLIT, False, SECTION)
    _dkdv_tile(q, k, v, do, lse, delta, dk, dv, b, hk, nblk, 0, q.shape[2], 0, k.shape[2], qk_scale, cap, scale,
               left, right, GROUP // SPLIT, SOFTCAP, False, BM, BN, DK, DV, SPLIT)


@tc.kernel
def attention_bwd_dkdv_dq_kernel(q, k, v, do, lse, delta, dk, dv, dq_acc, qk_scale, scale, left, right,
                                 GROUP: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr,
                                 DV: tc.constexpr, SECTION: tc.constexpr = 0):
    """attention_bwd_dkdv_kernel that also computes dQ (FlashAttention-2's five products for the
    backward's seven), without softcap: each step's dS K is added into the f32 `dq_acc` (zeroed
    by attention_bwd_delta_zero_kernel, scaled and cast by attention_bwd_dq_convert_kernel); the
    order of the additions varies, so `deterministic=True` keeps the dQ kernel."""
    nblk, hk, b = program_block(k.shape[1], False, SECTION)
    _dkdv_tile(q, k, v, do, lse, delta, dk, dv, b, hk, nblk, 0, q.shape[2], 0, k.shape[2], qk_scale, 0.0, scale,
               left, right, GROUP, False, False, BM, BN, DK, DV, 1, dq_acc, True)


@tc.kernel
def attention_bwd_group_sum_kernel(part, out, SPLIT: tc.constexpr, BM: tc.constexpr, D: tc.constexpr):
    # out[b, hk, rows] = the sum of part[b, hk·SPLIT + s, rows] over s, in a fixed order.
    i = tc.program_id(0)
    hk = tc.program_id(1)
    b = tc.program_id(2)
    acc = tc.zeros((1, 1, BM, D), tc.float32)
    for s in tc.static_range(SPLIT):
        acc += tc.load(part, index=(b, hk * SPLIT + s, i, 0), shape=(1, 1, BM, D))
    tc.store(out, index=(b, hk, i, 0), tile=acc.astype(out.dtype))


@tc.kernel
def attention_varlen_bwd_dkdv_kernel(q, k, v, do, lse, delta, dk, dv, cu_q, cu_k, qk_scale, cap, scale, left, right,
                                     GROUP: tc.constexpr, SOFTCAP: tc.constexpr,
                                     BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    """attention_bwd_dkdv_kernel over packed sequences (as attention_varlen_fwd_kernel):
    program (nblk, hk, b) owns key block nblk of sequence b, whose bounds it reads from cu_k."""
    nblk = tc.program_id(0)
    hk = tc.program_id(1)
    k_start, n_kv, q_start, n_q = tile_bounds(cu_k, cu_q, nblk, BN)
    _dkdv_tile(q, k, v, do, lse, delta, dk, dv, 0, hk, nblk, q_start, n_q, k_start, n_kv, qk_scale, cap, scale,
               left, right, GROUP, SOFTCAP, True, BM, BN, DK, DV)


@tc.func
def _dq_block(qt, dot_, l2, d, k, v, b, hk, j, dq, q0, off, qk_scale, cap, left, right, n_kv, k_start,
              MASKED: tc.constexpr, SOFTCAP: tc.constexpr, VARLEN: tc.constexpr,
              BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    kt = _own_rows(k, b, hk, j, k_start, n_kv, BN, DK, VARLEN, MASKED)
    vt = _own_rows(v, b, hk, j, k_start, n_kv, BN, DV, VARLEN, MASKED)
    rows = q0 + off + tc.arange(0, BM)
    cols = j * BN + tc.arange(0, BN)
    # (rows past the sequence are not stored: no VARLEN row mask needed here)
    dp = tc.dot(dot_, vt.T, tc.zeros((BM, BN), tc.float32) - d[:, None])   # dP - δ (as in _dkdv_block)
    p, dp = _probs(tc.dot(qt, kt.T), dp, l2[:, None], rows[:, None], cols[None, :], qk_scale, cap, left, right, n_kv,
                   MASKED, SOFTCAP, False)                            # P: (BM, BN)
    ds = p * dp
    return tc.dot(ds.astype(k.dtype), kt, dq)


@tc.func
def _dq_tile(q, k, v, do, lse, delta, dq, b, h, mblk, q_start, n_q, k_start, n_kv, qk_scale, cap, scale, left, right,
             GROUP: tc.constexpr, SOFTCAP: tc.constexpr, VARLEN: tc.constexpr,
             BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    """dQ of query rows [mblk·BM, mblk·BM + BM) of head h of one sequence (see _fwd_tile)."""
    hk = h // GROUP
    q0 = mblk * BM
    off = n_kv - n_q
    qt = _qrows(q, b, h, mblk, q_start, BM, DK, VARLEN)
    dot_ = _qrows(do, b, h, mblk, q_start, BM, DV, VARLEN)
    l2, d = _row_stats(lse, delta, b, h, mblk, q_start, BM, VARLEN)
    dq_acc = tc.zeros((BM, DK), tc.float32)

    # The forward's key ranges: keys some row sees [lo, hi), every row sees [whole_lo, whole_hi).
    lo = tc.maximum(q0 + off - left, 0)
    hi = tc.minimum(q0 + BM - 1 + off + right + 1, n_kv)
    whole_lo = tc.maximum(q0 + BM - 1 + off - left, 0)
    whole_hi = tc.minimum(q0 + off + right + 1, n_kv)
    first, inner_lo, inner_hi, last = band_blocks(lo, hi, whole_lo, whole_hi, BN)
    for j in range(first, inner_lo):
        dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, hk, j, dq_acc, q0, off, qk_scale, cap, left, right, n_kv,
                           k_start, True, SOFTCAP, VARLEN, BM, BN, DK, DV)
    for j in range(inner_lo, inner_hi):
        dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, hk, j, dq_acc, q0, off, qk_scale, cap, left, right, n_kv,
                           k_start, False, SOFTCAP, VARLEN, BM, BN, DK, DV)
    for j in range(inner_hi, last):
        dq_acc = _dq_block(qt, dot_, l2, d, k, v, b, hk, j, dq_acc, q0, off, qk_scale, cap, left, right, n_kv,
                           k_start, True, SOFTCAP, VARLEN, BM, BN, DK, DV)
    _store_rows(dq_acc * scale, dq, b, h, mblk, q_start, n_q, BM, DK, VARLEN)


@tc.kernel
def attention_bwd_dq_kernel(q, k, v, do, lse, delta, dq, qk_scale, cap, scale, left, right,
                            GROUP: tc.constexpr, SOFTCAP: tc.constexpr,
                            BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr,
                            SECTION: tc.constexpr = 0):
    # causal: the last query blocks see the most keys
    mblk, h, b = program_block(q.shape[1], True, SECTION)
    _dq_tile(q, k, v, do, lse, delta, dq, b, h, mblk, 0, q.shape[2], 0, k.shape[2], qk_scale, cap, scale, left, right,
             GROUP, SOFTCAP, False, BM, BN, DK, DV)


@tc.kernel
def attention_varlen_bwd_dq_kernel(q, k, v, do, lse, delta, dq, cu_q, cu_k, qk_scale, cap, scale, left, right,
                                   GROUP: tc.constexpr, SOFTCAP: tc.constexpr,
                                   BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    """attention_bwd_dq_kernel over packed sequences (as attention_varlen_fwd_kernel)."""
    mblk = tc.program_id(0)
    h = tc.program_id(1)
    q_start, n_q, k_start, n_kv = tile_bounds(cu_q, cu_k, mblk, BM)
    _dq_tile(q, k, v, do, lse, delta, dq, 0, h, mblk, q_start, n_q, k_start, n_kv, qk_scale, cap, scale, left, right,
             GROUP, SOFTCAP, True, BM, BN, DK, DV)


@dataclass(frozen=True)
class AttentionBwdConfig:
    """How one backward call is tiled: per kernel, the rows a program owns and the step of
    its loop (dK/dV: keys owned, query rows per step; dQ: query rows owned, keys per step);
    the tile head dims and warps."""
    kv_block: int
    q_step: int
    q_block: int
    kv_step: int
    dk: int       # q/k head dim of the tile (a power of two >= the tensors')
    dv: int
    num_warps: int
    num_stages: int = 3   # the K/V (dQ) and Q/dO (dK/dV) rings' depth
    dkdv_programs: int = 0   # the dense dK/dV kernel's floor of programs per SM (0: ptxas's choice)

    def dkdv_options(self) -> dict:
        """Compile options of the dense dK/dV kernel."""
        floor = {"min_programs_per_sm": self.dkdv_programs} if self.dkdv_programs else {}
        return {"num_stages": self.num_stages, **floor}


PATHS = ("dense", "varlen", "mods", "mods_heavy")


def bwd_config_for(head_dim: int, target: Target, head_dim_v: Optional[int] = None,
                   softcap: bool = False, path: str = "dense") -> AttentionBwdConfig:
    """The backward's tiling for these head dims on `target`; a pure function (no launch):
    per kernel, the wgmma blocks where the target has wgmma and they fit the kernels of
    `path` ("dense": this module's; "varlen": attention_varlen.py's; "mods", "mods_heavy":
    attention_mods.py's, the second for calls whose dK/dV program holds more, see
    attention_mods.bwd_path) without spills (`AttentionBwdTuning`; softcap's dK/dV kernels
    up to wgmma_max_head_dim_softcap_dkdv), else the mma.sync tiles."""
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    t = tuning_for(target).attention_bwd
    dkdv = t.wgmma_max_head_dim_mods_heavy_dkdv if path == "mods_heavy" else t.wgmma_max_head_dim
    dq = t.wgmma_max_head_dim
    if softcap:
        dkdv = min(dkdv, t.wgmma_max_head_dim_softcap_dkdv)
    if not target.has_wgmma:
        dkdv = dq = 0
    return _tiling(head_dim, head_dim_v, t, dkdv, dq, small=path in ("dense", "varlen"))


def bwd_config_within(head_dim: int, target: Target, head_dim_v: Optional[int], q_block: int,
                      kv_block: int, path: str) -> AttentionBwdConfig:
    """bwd_config_for's tiling where its blocks divide a block mask's (q_block x kv_block)
    blocks, else the mma.sync tiling (blocks of at most 64), which does."""
    cfg = bwd_config_for(head_dim, target, head_dim_v, path=path)
    if q_block % cfg.q_block or q_block % cfg.q_step or kv_block % cfg.kv_block or kv_block % cfg.kv_step:
        cfg = _tiling(head_dim, head_dim_v, tuning_for(target).attention_bwd, 0, 0)
    return cfg


def _tiling(head_dim: int, head_dim_v: Optional[int], t: AttentionBwdTuning, dkdv_wgmma_up_to: int,
            dq_wgmma_up_to: int, small: bool = False) -> AttentionBwdConfig:
    """8 warps: at 4, 64 keys per dK/dV program spill with softcap on mma.sync. The dK/dV
    kernel holds two (keys x dim) f32 accumulators and Pᵀ and dPᵀ - δ of one step (K and V
    stay in shared memory). Each kernel takes the wgmma blocks up to its head dim limit (0:
    none): two warpgroups of 64 owned rows and steps of 64 on the other side, every product
    a wgmma with Pᵀ and dSᵀ from registers (measured: docs/benchmarks.md, "Backward"); at
    head dim 128 the dK/dV kernel fits them only with dPᵀ - δ formed before Sᵀ (_dkdv_block).
    `small` (the dense and varlen kernels): up to t.wgmma_small_max_head_dim, where both
    kernels take wgmma, t.wgmma_small's one-warpgroup blocks instead."""
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    dk, dv = max(next_pow2(head_dim), 16), max(next_pow2(head_dim_v), 16)
    wide = max(dk, dv)
    if wide > 128:
        # 256-wide tiles: both head dims padded to 256 (a 256/128 pair spills where 256/256 does
        # not: ptxas's allocation is that close to the limit), 16-row steps, a 2-deep ring
        return AttentionBwdConfig(16, 16, 16, 16, wide, wide, 8, 2)
    if small and wide <= min(t.wgmma_small_max_head_dim, dkdv_wgmma_up_to, dq_wgmma_up_to):
        *blocks, warps = t.wgmma_small
        return AttentionBwdConfig(*blocks, dk, dv, warps, dkdv_programs=t.wgmma_small_dkdv_programs)
    kv_block, q_step, q_block, kv_step = t.mma_64 if wide <= 64 else t.mma_128
    if wide <= dkdv_wgmma_up_to:
        kv_block, q_step = t.wgmma_dkdv
    if wide <= dq_wgmma_up_to:
        q_block, kv_step = t.wgmma_dq
    return AttentionBwdConfig(kv_block, q_step, q_block, kv_step, dk, dv, 8)


@named
def attention_backward(do, q, k, v, o, lse, *, causal: bool = False, scale: Optional[float] = None, window=None,
                       softcap: Optional[float] = None, layout: str = "bshd", dq=None, dk=None, dv=None, dlse=None,
                       cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                       score_mod=None, mask_mod=None, block_mask=None, mod_args=(), score_mod_grad=None,
                       deterministic: bool = False):
    """(dq, dk, dv) of `attention(q, k, v, ...)` for the upstream gradient `do` (shaped like
    out), from the forward's `o` and `lse` (`return_lse=True`); the same keyword arguments
    as the forward call. `dq`, `dk`, `dv`: arrays to write (shaped like q, k, v), else new
    ones. `dlse`: a gradient of lse too, f32 (batch, heads, seq_q). Head dims up to 256, as the forward.
    With `cu_seqlens_q/k`: packed variable-length sequences, lse and dlse (heads, total_q)
    (stdlib_kernels/attention_varlen.py). With the forward's mods: `score_mod_grad`, the
    derivative of score_mod (stdlib_kernels/attention_mods.py). `deterministic` (flash-attn's
    switch): True keeps every sum in a fixed order (dK/dV per key block, dQ by a kernel of its
    own); False lets the dense path add dQ in the dK/dV kernel where AttentionBwdTuning says
    (f32 additions in a varying order), which the other paths never do."""
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic: expected True or False, got {deterministic!r}")
    mods = has_mods(score_mod, mask_mod, block_mask, mod_args, score_mod_grad)
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        if mods:
            raise ValueError("score_mod / mask_mod / block_mask: not supported with cu_seqlens (variable length)")
        from .attention_varlen import attention_backward_varlen  # noqa: PLC0415
        return attention_backward_varlen(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                         max_seqlen_q, max_seqlen_k, causal=causal, scale=scale, window=window,
                                         softcap=softcap, layout=layout, dq=dq, dk=dk, dv=dv, dlse=dlse)
    if not mods:
        return _attention_backward_dense(do, q, k, v, o, lse, causal, scale, window, softcap, layout, dq, dk, dv, dlse,
                                         None, deterministic)
    return _backward(do, q, k, v, o, lse, causal, scale, window, softcap, layout, dq, dk, dv, dlse,
                     (score_mod, mask_mod, block_mask, mod_args, score_mod_grad))


def _backward(do, q, k, v, o, lse, causal, scale, window, softcap, layout, dq, dk, dv, dlse, mods=None,
              deterministic=False):
    """attention_backward's dense (`mods` None) and mods paths."""
    x, arrs = check_qkv(q, k, v, layout, extra=(("do", do), ("o", o), ("lse", lse), ("dlse", dlse)))
    qa = x.q
    o_shape = output_shape(x, layout)
    for name in ("do", "o"):
        a = arrs[name]
        check_4d(a, name, layout)
        if a.shape != o_shape:
            raise ValueError(f"{name}: expected the forward output's shape {o_shape}, got {a.shape}")
        if a.dtype is not qa.dtype:
            raise TypeError(f"{name}: expected q's dtype {qa.dtype.name}, got {a.dtype.name}")
    rows = (x.batch, x.heads, x.n_q)
    for name in ("lse", "dlse"):
        a = arrs.get(name)
        if a is None:
            continue
        if a.shape != rows:
            raise ValueError(f"{name}: expected the log-sum-exp's shape (batch, heads, seq_q) = {rows}, got {a.shape}")
        if a.dtype is not tc.float32:
            raise TypeError(f"{name}: expected float32, got {a.dtype.name}")
    left, right = _window(causal, window)
    qk_scale, cap, scale_ = scales(scale, softcap, x.d)
    grads = [output(g, a, a.shape, qa.dtype, name) for g, a, name in ((dq, x.q, "dq"), (dk, x.k, "dk"), (dv, x.v, "dv"))]
    for name, g in zip(("dq", "dk", "dv"), grads):
        check_4d(g, name, layout)
    if mods is not None:
        from .attention_mods import attention_backward_mods  # noqa: PLC0415
        score_mod, mask_mod, block_mask, mod_args, score_mod_grad = mods
        return attention_backward_mods(x, arrs, grads, layout, scale, score_mod, score_mod_grad, mask_mod,
                                       block_mask, mod_args, causal=causal, window=window, softcap=softcap)
    values = backward_operands(x, arrs, grads, layout)
    values.update(qk_scale=qk_scale, cap=cap, scale=scale_, left=left, right=right)
    execute(plan_backward(x, target_of(qa), causal=causal, softcap=softcap is not None, dlse=dlse is not None,
                          deterministic=deterministic),
            Operands({"q": qa}, values))
    return tuple(g.obj for g in grads)


def backward_operands(x, arrs, grads, layout: str) -> dict:
    """The arrays the backward plans name: (batch, heads, seq, dim) views "q", "k", "v", "o",
    "do", "dq", "dk", "dv" (`layout`'s arrays seen so) and the rows "lse" (and "dlse" where
    `arrs` holds one)."""
    def bhsd(a: Arr, dim: int):
        shape, strides = _as_bhsd(a, layout)
        return view(a, shape[:3] + (dim,), strides)

    rows = (x.batch, x.heads, x.n_q)
    qv, kv, vv = x.views()
    dqa, dka, dva = grads
    values = {"q": qv, "k": kv, "v": vv, "o": bhsd(arrs["o"], x.dv), "do": bhsd(arrs["do"], x.dv),
              "lse": view(arrs["lse"], rows, arrs["lse"].strides), "dq": bhsd(dqa, x.d), "dk": bhsd(dka, x.d),
              "dv": bhsd(dva, x.dv)}
    if arrs.get("dlse") is not None:
        values["dlse"] = view(arrs["dlse"], rows, arrs["dlse"].strides)
    return values


# The dense backward is a function of the arrays' layouts and the arguments' values only: a
# repeated call replays the first one's launches (a launch plan, _plan.py). The varlen and mods
# paths read device data or functions: the general path.
_attention_backward_dense = planned(_backward, label="attention_backward")


@dataclass(frozen=True)
class BwdOrder:
    """How the dense backward's programs are laid out (`bwd_order`)."""
    split: int          # shares of a GQA group over dK/dV programs (gqa_split; 1: none)
    dkdv_section: int   # program_block's SECTION of the dK/dV launch (0: grid order)
    dq_section: int     # ... of the dQ launch


def bwd_order(x, cfg: AttentionBwdConfig, target: Target, causal: bool) -> BwdOrder:
    """The dense backward's program layout for the checked q, k, v `x` at `cfg`'s blocks; a
    pure function (no launch). The GQA split from the dK/dV programs' count; under a causal
    mask each launch with more than one block walks heaviest first (attention.program_block),
    in sections of pairs whose reads fit the L2 budget: dK/dV's Q and dO (its share of the
    group's), dQ's K and V."""
    group = x.heads // x.kv_heads
    split = gqa_split(-(-x.n_kv // cfg.kv_block) * x.kv_heads * x.batch, group, target)
    dkdv = dq = 0
    if causal and x.n_kv > cfg.kv_block:
        dkdv = heavy_first_section(x.kv_heads * split * x.batch,
                                   x.n_q * (x.d + x.dv) * x.q.dtype.itemsize * group // split, target)
    if causal and x.n_q > cfg.q_block:
        dq = heavy_first_section(x.heads * x.batch, kv_pair_bytes(x), target)
    return BwdOrder(split, dkdv, dq)


def gqa_split(programs: int, group: int, target: Target) -> int:
    """Into how many shares the dK/dV kernel divides each group of `group` query heads
    sharing a kv head (1: none), given `programs` (key blocks x kv heads x batch) without a
    split: the least divisor of the group that gives `AttentionBwdTuning.gqa_split_waves`
    programs per SM, at most the whole group. A pure function (no launch)."""
    want = tuning_for(target).attention_bwd.gqa_split_waves * target.sm_count
    if group == 1 or programs >= want:
        return 1
    return next((d for d in range(2, group + 1) if group % d == 0 and programs * d >= want), group)


def delta_launch(batch: int, heads: int, rows: int, cfg: AttentionBwdConfig, dlse: bool = False,
                 schedule: str = "delta") -> Launch:
    """The launch of δ = rowsum(dO ∘ O) (minus "dlse" when `dlse`) into the Temp "delta",
    (batch, heads, rows) f32, for the dK/dV and dQ launches after it (operands "o", "do")."""
    delta = Temp("delta", (batch, heads, rows), tc.float32, like="q")
    return Launch.of(attention_bwd_delta_kernel, (-(-rows // DELTA_ROWS), heads, batch),
                     ("o", "do", "dlse" if dlse else "delta", "delta"), delta_warps(cfg.dv), temps=(delta,),
                     schedule=schedule, DLSE=dlse, BM=DELTA_ROWS, DV=cfg.dv)


def fused_dq(x, cfg: AttentionBwdConfig, target: Target, deterministic: bool, split: int,
             softcap: bool = False, causal: bool = False) -> bool:
    """Whether the dense backward computes dQ in its dK/dV kernel (attention_bwd_dkdv_dq_kernel):
    on wgmma targets at AttentionBwdTuning.fused_dq_head_dims, grouped query heads too (the
    kernel walks the group's heads within each query block, _head_block; `causal`, groups of
    up to fused_dq_max_group_causal), not with `deterministic` (the f32 additions' order
    varies), a GQA split (its dK/dV programs write partials) or softcap (the fused step has no
    tanh). A pure function."""
    t = tuning_for(target).attention_bwd
    return (target.has_wgmma and not deterministic and not softcap and split == 1
            and max(cfg.dk, cfg.dv) in t.fused_dq_head_dims and cfg.q_step == cfg.kv_step
            and (not causal or x.heads // x.kv_heads <= t.fused_dq_max_group_causal))


def plan_backward(x, target: Target, *, causal: bool = False, softcap: bool = False,
                  dlse: bool = False, deterministic: bool = False) -> List[Launch]:
    """The dense backward's launches for the checked q, k, v `x` (attention.check_qkv); a pure
    function (no launch). δ = rowsum(dO ∘ O) (minus dlse) into the Temp "delta"; the dK/dV
    kernel over `bwd_order`'s programs (a GQA split writes f32 partials, Temps "dk_part" and
    "dv_part", then summed into dk and dv); the dQ kernel. The operands it names: (batch,
    heads, seq, dim) views "q", "k", "v", "o", "do", "dq", "dk", "dv", the (batch, heads,
    seq_q) rows "lse" (and "dlse" when `dlse`), the scalars "qk_scale", "cap", "scale",
    "left", "right"."""
    cfg = bwd_config_for(x.d, target, x.dv, softcap)
    b_, h, hk, n_q, n_kv = x.batch, x.heads, x.kv_heads, x.n_q, x.n_kv
    order = bwd_order(x, cfg, target, causal)
    if fused_dq(x, cfg, target, deterministic, order.split, softcap, causal):
        return _plan_fused(x, cfg, order, dlse)
    out = [delta_launch(b_, h, n_q, cfg, dlse)]
    delta, = out[0].temps
    # With no query rows the dK/dV programs walk no block and store zeros; with no keys, the dQ ones.
    common = dict(GROUP=h // hk, SOFTCAP=softcap, DK=cfg.dk, DV=cfg.dv)
    ins = ("q", "k", "v", "do", "lse", "delta")
    split, extra, temps, outs = order.split, {}, (delta,), ("dk", "dv")
    if split > 1:   # f32 partials per share of the group, then summed (attention_bwd_group_sum_kernel)
        temps += tuple(Temp(name, (b_, hk * split, n_kv, dim), tc.float32, like="q")
                       for name, dim in (("dk_part", x.d), ("dv_part", x.dv)))
        outs, extra = ("dk_part", "dv_part"), {"SPLIT": split}
    if order.dkdv_section:
        extra["SECTION"] = order.dkdv_section
    options = {"num_stages": cfg.num_stages}
    out.append(Launch.of(attention_bwd_dkdv_kernel,
                         section_grid(-(-n_kv // cfg.kv_block), hk * split, b_, order.dkdv_section),
                         ins + outs + ("qk_scale", "cap", "scale", "left", "right"), cfg.num_warps,
                         options=cfg.dkdv_options(), temps=temps, schedule="dkdv", BM=cfg.q_step, BN=cfg.kv_block,
                         **common, **extra))
    if split > 1:
        out += [Launch.of(attention_bwd_group_sum_kernel, (-(-n_kv // GROUP_SUM_ROWS), hk, b_), (part, grad), 4,
                          temps=temps, schedule="group_sum", SPLIT=split, BM=GROUP_SUM_ROWS, D=pad)
                for part, grad, pad in (("dk_part", "dk", cfg.dk), ("dv_part", "dv", cfg.dv))]
    dq_order = {"SECTION": order.dq_section} if order.dq_section else {}
    out.append(Launch.of(attention_bwd_dq_kernel, section_grid(-(-n_q // cfg.q_block), h, b_, order.dq_section),
                         ins + ("dq", "qk_scale", "cap", "scale", "left", "right"), cfg.num_warps, options=options,
                         temps=(delta,), schedule="dq", BM=cfg.q_block, BN=cfg.kv_step, **common, **dq_order))
    return out


def _plan_fused(x, cfg: AttentionBwdConfig, order: BwdOrder, dlse: bool) -> List[Launch]:
    """plan_backward's launches with dQ in the dK/dV kernel: δ (and the f32 accumulator
    "dq_acc" zeroed), the fused dK/dV kernel, dq cast from the accumulator."""
    b_, h, hk, n_q, n_kv = x.batch, x.heads, x.kv_heads, x.n_q, x.n_kv
    blocks = -(-n_q // DELTA_ROWS)
    # δ and lse rows padded to whole blocks (attention_bwd_delta_zero_kernel's doc)
    delta, lse_rows = (Temp(name, (b_, h, blocks * DELTA_ROWS), tc.float32, like="q") for name in ("delta", "lse_rows"))
    acc = Temp("dq_acc", (b_, h, n_q, cfg.dk), tc.float32, like="q")
    temps = (delta, lse_rows, acc)
    out = [Launch.of(attention_bwd_delta_zero_kernel, (blocks, h, b_),
                     ("o", "do", "dlse" if dlse else "delta", "lse", "delta", "lse_rows", "dq_acc"),
                     delta_warps(cfg.dv), temps=temps, schedule="delta", DLSE=dlse, BM=DELTA_ROWS, DV=cfg.dv,
                     DK=cfg.dk)]
    extra = {"SECTION": order.dkdv_section} if order.dkdv_section else {}
    out.append(Launch.of(attention_bwd_dkdv_dq_kernel,
                         section_grid(-(-n_kv // cfg.kv_block), hk, b_, order.dkdv_section),
                         ("q", "k", "v", "do", "lse_rows", "delta", "dk", "dv", "dq_acc", "qk_scale", "scale",
                          "left", "right"), cfg.num_warps, options={"num_stages": cfg.num_stages}, temps=temps,
                         schedule="dkdv", GROUP=h // hk, BM=cfg.q_step, BN=cfg.kv_block, DK=cfg.dk,
                         DV=cfg.dv, **extra))
    out.append(Launch.of(attention_bwd_dq_convert_kernel, (blocks, h, b_), ("dq_acc", "dq", "scale"), 4, temps=temps,
                         schedule="dq", BM=DELTA_ROWS, D=cfg.dk))
    return out


def delta_warps(dv: int) -> int:
    """Warps of the δ kernel: at 4, 256-wide rows spill on sm_90a (12-16 bytes per thread)."""
    return 4 if dv <= 128 else 8


def _signature(kernel: str, dtype: str, cfg: AttentionBwdConfig, softcap: bool = False, group: int = 1,
               split: int = 1, section: int = 0) -> str:
    # what a launch on (b, s, h, d) tensors specializes to, with `cfg`'s tiles
    v4, rows = f"{dtype}[?,?,?,?]:stride_div=16x16x16x1", "f32[?,?,?]:stride_div=16x16x1"
    part = "f32[?,?,?,?]:stride_div=16x16x16x1"
    if kernel == "attention_bwd_delta_kernel":
        return f"o={v4}, do={v4}, dlse={rows}, delta={rows}, DLSE=False, BM={DELTA_ROWS}, DV={cfg.dv}"
    if kernel == "attention_bwd_group_sum_kernel":
        return f"part={part}, out={v4}, SPLIT={split}, BM={GROUP_SUM_ROWS}, D={cfg.dk}"
    ins = f"q={v4}, k={v4}, v={v4}, do={v4}, lse={rows}, delta={rows}, "
    outs, bm, bn = ((f"dk={part if split > 1 else v4}, dv={part if split > 1 else v4}, ", cfg.q_step, cfg.kv_block)
                    if kernel == "attention_bwd_dkdv_kernel" else (f"dq={v4}, ", cfg.q_block, cfg.kv_step))
    return (ins + outs + f"qk_scale=f32, cap=f32, scale=f32, left=i32, right=i32, GROUP={group}, SOFTCAP={softcap}, "
            f"BM={bm}, BN={bn}, DK={cfg.dk}, DV={cfg.dv}" + (f", SPLIT={split}" if split > 1 else "")
            + (f", SECTION={section}" if section else ""))


_CFG64, _CFG128, _CFG256 = (bwd_config_for(d, HOST_TARGET) for d in (64, 128, 256))
_SM80 = Target.from_arch("sm_80")
_KERNELS = ("attention_bwd_delta_kernel", "attention_bwd_dkdv_kernel", "attention_bwd_dq_kernel")
# tests/test_ptxas.py (sm_80 and sm_90a): head dim 64 as an A100 plans it, the mma.sync tiles;
# the wgmma blocks, which sm_80 never runs (they spill
# there), are EXTRA_SIGNATURES, which tests/stdlib/test_attention_bwd.py assembles only for
# the archs whose plan launches them
_CFG64_SM80 = bwd_config_for(64, _SM80)
SIGNATURES = {name: _signature(name, "f16", _CFG64_SM80) for name in _KERNELS}
OPTIONS = {name: {"num_warps": 4 if name == "attention_bwd_delta_kernel" else _CFG64_SM80.num_warps, "fast_math": True}
           for name in _KERNELS}
# head dims 64 and 128 at the wgmma blocks (sm_90a), 128 at sm_80's mma.sync tiles (with softcap
# too), 256 and 192 / 128 (launched at bwd_config_for's warps), softcap and grouped heads, bf16
EXTRA_SIGNATURES = [(name, _signature(name, dt, cfg, softcap, group))
                    for name in _KERNELS[1:]
                    for dt, cfg, softcap, group in (("f16", _CFG64, False, 1), ("bf16", _CFG64, False, 2),
                                                    ("bf16", _CFG128, False, 4), ("f16", _CFG128, False, 1),
                                                    ("f16", bwd_config_for(128, HOST_TARGET, softcap=True), True, 1),
                                                    ("bf16", bwd_config_for(128, HOST_TARGET, softcap=True), True, 4),
                                                    ("bf16", bwd_config_for(128, _SM80), False, 4),
                                                    ("f16", bwd_config_for(128, _SM80, softcap=True), True, 1),
                                                    ("bf16", bwd_config_for(64, HOST_TARGET, softcap=True), True, 2),
                                                    ("bf16", _CFG256, False, 1), ("f16", _CFG256, True, 2),
                                                    ("bf16", bwd_config_for(192, HOST_TARGET, 128), False, 1))]
# the δ kernel of 256-wide value rows (launched at delta_warps' 8)
EXTRA_SIGNATURES.append(("attention_bwd_delta_kernel", _signature("attention_bwd_delta_kernel", "bf16", _CFG256)))
# causal launches at their heaviest-first order (attention.program_block)
EXTRA_SIGNATURES += [(name, _signature(name, "bf16", _CFG128, False, 4, split, 8))
                     for name, split in (("attention_bwd_dkdv_kernel", 4), ("attention_bwd_dq_kernel", 1))]
# GQA groups split over programs (gqa_split): the dK/dV kernel's f32 partials and their sum
EXTRA_SIGNATURES += [("attention_bwd_dkdv_kernel", _signature("attention_bwd_dkdv_kernel", "bf16", _CFG128, False, 4, 4)),
                     ("attention_bwd_dkdv_kernel", _signature("attention_bwd_dkdv_kernel", "f16", _CFG64, False, 4, 2)),
                     ("attention_bwd_group_sum_kernel", _signature("attention_bwd_group_sum_kernel", "bf16", _CFG128,
                                                                   split=4))]
