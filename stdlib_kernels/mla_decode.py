"""mla_decode(q, kv_cache, cache_seqlens, ...): DeepSeek-V2/V3 multi-head latent attention, decode.

MLA caches one latent row per token, shared by every head: kv_lora_rank (512) values
followed by the rope part (64), 576 in all. The decode step's queries are already
absorbed into that space (576 per head), and the values are the first `head_dim_v`
(512) columns of the same rows. So all query rows of a sequence, (q_len x heads) of
them, attend to one shared cache: FlashMLA's method is to make those rows the M
dimension of a GEMM against the cache, so each cached byte is read once per M block
instead of once per head.

Two kernels, by target:

- `mla_decode_kernel` (wgmma, sm_90a; MLA's 576 = 256 + 256 + 64): FlashMLA's shape. One
  program of 8 warps (two warpgroups) takes BM = 64 query rows (heads of one or several new
  tokens, row r = token * heads + head; 16 heads are padded to 64) and holds them in shared
  memory for the whole walk (three tiles: the latent halves and the rope part, 72 KB), and
  takes 64 cached rows per step. S = Q Kᵀ (64 x 64) is computed once, three chained wgmmas
  on the step's three staged tiles (cp.async, 2 slots), the two warpgroups splitting the 64
  keys (m64n32k16: the keys' tiles are B K-major, as loaded). After the online softmax, P
  goes through shared memory (each warpgroup holds half of its columns) to O += P V, the
  64 x 512 accumulator split into the two value halves (O_a += P ka, O_b += P kb, V the
  same staged rows' first 512 columns; each m64n128k16 over the two warpgroups): 128
  accumulator registers a thread, and the cache is read once per step for every dot.
  Shared memory: 72 KB of Q, 2 x 72 KB of rows, 8 KB of P (229888 bytes, one program per
  SM); ptxas 13.0 fits it in 232-253 registers with no spill (SM90_SIGNATURES). 128 keys a
  step would need more than sm_90a's 227 KB for two slots. head_dim_v 256 (VB = 1) keeps
  the first half only.
- `mla_chunks_kernel` (targets without wgmma): 8 warps, BN = 32 keys per step, S = Q Kᵀ as
  nine 64-wide chunks in a run-time loop (Q's chunks re-read each step: a 64 x 576 operand
  in mma.sync's register fragments does not fit), cp.async-staged two chunks ahead; two
  programs share an M block, one per 256-wide half of the values (the second's reads of
  the same rows mostly hit L2). A step's value tile is loaded before its S.

Rows past a sequence's length may hold anything (NaN in a fresh pool). Keys need no mask
(their scores become -inf); value rows do: the chunks kernel masks a sequence's last step
only, the wgmma kernel every step (its loads zero-fill through cp.async, as fast as an
unmasked interior and fewer spills).

Cache layouts: contiguous `(batch, max_seq, 1, 576)`, or paged `(num_blocks, page_size,
1, 576)` with `block_table (batch, max_blocks)` int32. A page size that is a multiple of
the step reads each step's rows as one tile of one page (KV_PAGE); any other page size
(1 to 256) gathers the rows one by one through the table (KV_GATHER).

Causal: the q_len new tokens are the last q_len of the sequence's cache_seqlens[b], so
token t sees keys j <= seqlen - q_len + t (bottom-right aligned, as flash-attn). A row
that sees no key (seqlen 0) gets zeros and lse = -inf.

Split-KV (flash-decoding): with few (batch x M blocks) programs the keys of a sequence
are split over `num_splits` programs that write f32 partial outputs and base-2
log-sum-exps; `mla_combine_kernel` merges them by their log-sum-exp (a dependent launch
on sm_90). `plan` picks num_splits from the shapes and the SM count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

import tilec as tc
from tilec.target import Target

from ._common import (DEPENDENT, as_array, capturing, check_float, check_same_place, empty_like, next_pow2, output,
                      target_of, view)
from ._plan import named, planned
from ._split_merge import MERGE_WARPS, merge_chunk, merged_row
from .launches import Launch, Operands, Temp, execute
from .attention import online_softmax, softmax_step
from .tuning import tuning_for

__all__ = ["mla_decode", "mla_decode_kernel", "mla_chunks_kernel", "mla_combine_kernel", "MLAPlan", "config", "plan",
           "split_count", "uses_wgmma",
           "SIGNATURES", "OPTIONS"]

LN2 = 0.6931471805599453
LOG2E = 1.4426950408889634

KV_CONTIG, KV_PAGE, KV_GATHER = 0, 1, 2   # how a step finds its cached rows (module doc)
# The chunks kernel (sm_80): query rows, keys per step, value columns per program, q·k chunk.
# At 8 warps, BN = 64 spilled 12 bytes (200 gathering on sm_80), DV_PART = 512 212 bytes (328
# at 16 warps): ptxas 13.
BM, BN, DV_PART, DC = 64, 32, 256, 64
WARPS = 8
# The wgmma kernel (sm_90a): 64 keys per step (32 a warpgroup in S, K-major: m64n32k16), two
# warpgroups, the latent columns as two 256-wide halves and the rope part (module doc).
WG_BN, WG_HALF, WG_ROPE, WG_WARPS = 64, 256, 64, 8


@tc.func
def _rows_of(kv, tbl, b, j, n, page_size, KV: tc.constexpr, BN: tc.constexpr):
    """Where step j's cached rows are: (page, first row) of the view modes, and for KV_GATHER
    each row's element offset and whether it lies before n. Computed once per step, outside
    the chunk loop, so that the chunks' addresses are the loop's own (staged by cp.async)."""
    keys = j * BN + tc.arange(0, BN)
    valid = keys < n
    if KV == 2:   # KV_GATHER: each row through the block table
        page = tc.load(tbl.ptr + b * tbl.stride(0) + keys // page_size, mask=valid, other=0)
        rows = page.astype(tc.int64) * kv.stride(0) + (keys % page_size).astype(tc.int64) * kv.stride(1)
        return 0, 0, rows, valid
    elif KV == 1:   # KV_PAGE: the BN rows lie in one page
        page = tc.load(tbl.ptr + b * tbl.stride(0) + (j * BN) // page_size)
        return page, (j * BN) % page_size, keys.astype(tc.int64), valid
    else:
        return b, j * BN, keys.astype(tc.int64), valid


@tc.func
def _kv_tile(kv, page, r0, rows, valid, col, KV: tc.constexpr, MASKED: tc.constexpr, BN: tc.constexpr,
             W: tc.constexpr):
    """Columns col .. col + W - 1 of a step's BN cached rows (`_rows_of`). MASKED: rows past the
    sequence read 0 (a page's unused rows may hold anything, NaN included); the key chunks need
    no mask (their scores are masked to -inf), the values of a sequence's last step do."""
    if KV == 2:
        t = tc.load(kv.ptr + rows[:, None] + (col + tc.arange(0, W))[None, :], mask=valid[:, None], other=0.0)
    elif MASKED:   # a masked pointer load: staged as the others (cp.async's zero fill), not masked in registers
        at = page.astype(tc.int64) * kv.stride(0) + (r0 + tc.arange(0, BN)).astype(tc.int64) * kv.stride(1)
        t = tc.load(kv.ptr + at[:, None] + (col + tc.arange(0, W))[None, :], mask=valid[:, None], other=0.0)
    else:
        t = tc.reshape(tc.load(kv, offset=(page, r0, col), shape=(1, BN, W), padding=0.0), (BN, W))
    return t


@tc.func
def _step(q, kv, tbl, b, j, n, m0, vblk, lim, page_size, qk_scale, m_i, l_i, acc,
          KV: tc.constexpr, MASKED: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, DV: tc.constexpr,
          DC: tc.constexpr):
    """One step of BN keys: S = Q Kᵀ in DC-wide chunks, the online softmax, O += P V."""
    page, r0, rows, valid = _rows_of(kv, tbl, b, j, n, page_size, KV, BN)
    vt = _kv_tile(kv, page, r0, rows, valid, vblk * DV, KV, MASKED, BN, DV)   # in flight while S is computed
    s = tc.zeros((BM, BN), tc.float32)
    for c in range(0, q.shape[2] // DC):   # a run-time loop: one set of chunk buffers, not nine
        qc = tc.reshape(tc.load(q, offset=(b, m0, c * DC), shape=(1, BM, DC), padding=0.0), (BM, DC))
        kc = _kv_tile(kv, page, r0, rows, valid, c * DC, KV, False, BN, DC)
        s = tc.dot(qc, kc.T, s)
    keys = j * BN + tc.arange(0, BN)
    s = tc.where(keys[None, :] <= lim[:, None], s * qk_scale, float("-inf"))
    return online_softmax(s, vt, m_i, l_i, acc)


@tc.func
def _key_range(q, lens, b, m0, heads, q_len, CAUSAL: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr):
    """(n, lim, j0, whole, j1) of this program's split: the sequence's length, each row's last
    key, and its steps [j0, j1) of BN keys, those before `whole` wholly inside the sequence."""
    n_rows = q.shape[1]
    n = tc.load(lens.ptr + b)
    rows = m0 + tc.arange(0, BM)
    if CAUSAL:   # row r is token r // heads; it sees keys up to n - q_len + token
        lim = tc.minimum(n - q_len + rows // heads, n - 1)
        hi = tc.minimum(n - q_len + (tc.minimum(m0 + BM, n_rows) - 1) // heads + 1, n)
    else:
        lim = tc.zeros((BM,), tc.int32) + (n - 1)
        hi = n
    n_blocks = tc.cdiv(tc.maximum(hi, 0), BN)
    per = tc.cdiv(n_blocks, tc.num_programs(1))
    j0 = tc.minimum(tc.program_id(1) * per, n_blocks)
    j1 = tc.minimum(j0 + per, n_blocks)
    whole = tc.maximum(tc.minimum(j1, n // BN), j0)   # steps wholly inside the sequence: no value mask
    return n, lim, j0, whole, j1


@tc.func
def _finish(o, lse, o_part, lse_part, b, mblk, vblk, heads, m_i, l_i, acc, SPLIT: tc.constexpr,
            LSE: tc.constexpr, BM: tc.constexpr, DV: tc.constexpr):
    """Normalize and store: o's column block vblk (or the split's partials, with the base-2
    lse). The lse is the same for every value block: block 0's program stores it."""
    seen = l_i > 0.0
    out = acc / tc.where(seen, l_i, 1.0)[:, None]
    lse2 = tc.where(seen, m_i + tc.log2(tc.where(seen, l_i, 1.0)), float("-inf"))
    if SPLIT:
        tc.store(o_part, index=(b, tc.program_id(1), mblk, vblk), tile=tc.reshape(out, (1, 1, BM, DV)))
        if vblk == 0:
            tc.store(lse_part, index=(b, tc.program_id(1), mblk), tile=tc.reshape(lse2, (1, 1, BM)))
    else:
        tc.store(o, index=(b, mblk, vblk), tile=tc.reshape(out.astype(o.dtype), (1, BM, DV)))
        if LSE:
            if vblk == 0:
                _store_lse(lse, b, mblk * BM + tc.arange(0, BM), heads, o.shape[1], lse2)


@tc.kernel
def mla_chunks_kernel(q, kv, tbl, lens, o, lse, o_part, lse_part, qk_scale, page_size, heads, q_len,
                      KV: tc.constexpr, CAUSAL: tc.constexpr, SPLIT: tc.constexpr, LSE: tc.constexpr,
                      VB: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, DV: tc.constexpr, DC: tc.constexpr):
    """Targets without wgmma: q (batch, M, D) with M = q_len * heads rows; kv (pages or batch,
    rows, D); o (batch, M, VB*DV). S in DC-wide chunks (`_step`). Program (mblk * VB + vblk,
    split, b)."""
    mblk = tc.program_id(0) // VB
    vblk = tc.program_id(0) % VB
    b = tc.program_id(2)
    m0 = mblk * BM
    n, lim, j0, whole, j1 = _key_range(q, lens, b, m0, heads, q_len, CAUSAL, BM, BN)
    m_i = tc.full((BM,), float("-inf"), tc.float32)
    l_i = tc.zeros((BM,), tc.float32)
    acc = tc.zeros((BM, DV), tc.float32)
    for j in range(j0, whole):
        m_i, l_i, acc = _step(q, kv, tbl, b, j, n, m0, vblk, lim, page_size, qk_scale, m_i, l_i, acc,
                              KV, False, BM, BN, DV, DC)
    for j in range(whole, j1):
        m_i, l_i, acc = _step(q, kv, tbl, b, j, n, m0, vblk, lim, page_size, qk_scale, m_i, l_i, acc,
                              KV, True, BM, BN, DV, DC)
    _finish(o, lse, o_part, lse_part, b, mblk, vblk, heads, m_i, l_i, acc, SPLIT, LSE, BM, DV)


@tc.func
def _wg_step(qa, qb, qr, kv, tbl, b, j, n, lim, page_size, qk_scale, m_i, l_i, acc_a, acc_b, KV: tc.constexpr,
             BN: tc.constexpr, DH: tc.constexpr, DR: tc.constexpr, VB: tc.constexpr):
    """One step of BN keys of the wgmma kernel: S = Q Kᵀ as three dots on the resident Q (the
    latent halves and the rope part; the two warpgroups take BN / 2 keys each), the online
    softmax, then O += P V for each value half (VB of them: acc_a += P ka, acc_b += P kb, the
    warpgroups splitting each half's columns) with V the same staged rows as the keys: the
    step's rows are read once for every dot."""
    page, r0, rows, valid = _rows_of(kv, tbl, b, j, n, page_size, KV, BN)
    ka = _kv_tile(kv, page, r0, rows, valid, 0, KV, True, BN, DH)
    kb = _kv_tile(kv, page, r0, rows, valid, DH, KV, True, BN, DH)
    kr = _kv_tile(kv, page, r0, rows, valid, 2 * DH, KV, False, BN, DR)   # keys only: scores masked
    s = tc.dot(qr, kr.T, tc.dot(qb, kb.T, tc.dot(qa, ka.T)))
    keys = j * BN + tc.arange(0, BN)
    s = tc.where(keys[None, :] <= lim[:, None], s * qk_scale, float("-inf"))
    m_new, l_new, p, alpha = softmax_step(s, m_i, l_i)
    pp = p.astype(ka.dtype)
    acc_a = tc.dot(pp, ka, acc_a * alpha[:, None])
    if VB == 2:
        acc_b = tc.dot(pp, kb, acc_b * alpha[:, None])
    return m_new, l_new, acc_a, acc_b


@tc.kernel
def mla_decode_kernel(q, kv, tbl, lens, o, lse, o_part, lse_part, qk_scale, page_size, heads, q_len,
                      KV: tc.constexpr, CAUSAL: tc.constexpr, SPLIT: tc.constexpr, LSE: tc.constexpr,
                      VB: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, DH: tc.constexpr, DR: tc.constexpr):
    """wgmma targets, 8 warps: q (batch, M, 2 DH + DR), kv (pages or batch, rows, 2 DH + DR), o
    (batch, M, VB x DH). Program (mblk, split, b): one per M block, both value halves (VB = 2;
    1: the first half only). Q stays in shared memory (72 KB at BM 64); each step's BN cached
    rows are staged once (cp.async, 2 slots) for S and both halves' P V."""
    mblk = tc.program_id(0)
    b = tc.program_id(2)
    m0 = mblk * BM
    n, lim, j0, _, j1 = _key_range(q, lens, b, m0, heads, q_len, CAUSAL, BM, BN)
    qa = tc.reshape(tc.load(q, offset=(b, m0, 0), shape=(1, BM, DH), padding=0.0), (BM, DH))
    qb = tc.reshape(tc.load(q, offset=(b, m0, DH), shape=(1, BM, DH), padding=0.0), (BM, DH))
    qr = tc.reshape(tc.load(q, offset=(b, m0, 2 * DH), shape=(1, BM, DR), padding=0.0), (BM, DR))
    m_i = tc.full((BM,), float("-inf"), tc.float32)
    l_i = tc.zeros((BM,), tc.float32)
    acc_a = tc.zeros((BM, DH), tc.float32)
    acc_b = tc.zeros((BM, DH), tc.float32)
    # One loop, every step's loads masked (staged with cp.async's zero fill): as fast as an
    # unmasked interior plus a masked last step (H200, the 4-warp kernel), and fewer registers.
    for j in tc.range(j0, j1, num_stages=2):
        m_i, l_i, acc_a, acc_b = _wg_step(qa, qb, qr, kv, tbl, b, j, n, lim, page_size, qk_scale, m_i, l_i,
                                          acc_a, acc_b, KV, BN, DH, DR, VB)
    seen = l_i > 0.0
    inv = 1.0 / tc.where(seen, l_i, 1.0)
    lse2 = tc.where(seen, m_i + tc.log2(tc.where(seen, l_i, 1.0)), float("-inf"))
    if SPLIT:
        tc.store(o_part, index=(b, tc.program_id(1), mblk, 0), tile=tc.reshape(acc_a * inv[:, None], (1, 1, BM, DH)))
        if VB == 2:
            tc.store(o_part, index=(b, tc.program_id(1), mblk, 1),
                     tile=tc.reshape(acc_b * inv[:, None], (1, 1, BM, DH)))
        tc.store(lse_part, index=(b, tc.program_id(1), mblk), tile=tc.reshape(lse2, (1, 1, BM)))
    else:
        tc.store(o, index=(b, mblk, 0), tile=tc.reshape((acc_a * inv[:, None]).astype(o.dtype), (1, BM, DH)))
        if VB == 2:
            tc.store(o, index=(b, mblk, 1), tile=tc.reshape((acc_b * inv[:, None]).astype(o.dtype), (1, BM, DH)))
        if LSE:
            _store_lse(lse, b, m0 + tc.arange(0, BM), heads, o.shape[1], lse2)


@tc.func
def _store_lse(lse, b, rows, heads, n_rows, lse2):
    """lse (batch, heads, q_len) at the rows' (token, head), natural log."""
    ptr = lse.ptr + b * lse.stride(0) + (rows % heads) * lse.stride(1) + (rows // heads) * lse.stride(2)
    tc.store(ptr, lse2 * LN2, mask=rows < n_rows)


@tc.kernel
def mla_combine_kernel(o_part, lse_part, o, lse, heads, LSE: tc.constexpr, SPLITS: tc.constexpr,
                       CHUNK: tc.constexpr, DV: tc.constexpr):
    """Merge the splits' partial outputs (batch, splits, M, DV) f32 by their base-2 lse
    (batch, splits, M) into o (batch, M, DV) (_split_merge). Program (row, b)."""
    row = tc.program_id(0)
    b = tc.program_id(1)
    out, lse2 = merged_row(o_part, lse_part, b, row, SPLITS, CHUNK, DV)
    tc.store(o, offset=(b, row, 0), tile=tc.reshape(out.astype(o.dtype), (1, 1, DV)))
    if LSE:
        _store_lse(lse, b, row + tc.arange(0, 1), heads, o_part.shape[2], lse2)


_Q = "[?,?,?]:stride_div=16x16x1"
_KV = "[?,?,?]:stride_div=16x16x1"
_PART = "o_part=f32[?,?,?,?]:stride_div=16x16x16x1, lse_part=f32[?,?,?]:stride_div=16x16x1"
_COMMON = (f"tbl=i32[?,?]:stride_div=16x1, lens=i32[?], lse=f32[?,?,?], {_PART}, qk_scale=f32, page_size=i32, "
           "heads=i32, q_len=i32")


def _sig(dt: str, kv_mode: int, split: bool) -> str:
    return (f"q={dt}{_Q}, kv={dt}{_KV}, {_COMMON}, o={dt}{_Q}, KV={kv_mode}, CAUSAL=True, SPLIT={split}, "
            f"LSE=True, VB=2, BM={BM}, BN={BN}, DV={DV_PART}, DC={DC}")


def _wg_sig(dt: str, kv_mode: int, split: bool, vb: int) -> str:
    return (f"q={dt}{_Q}, kv={dt}{_KV}, {_COMMON}, o={dt}{_Q}, KV={kv_mode}, CAUSAL=True, SPLIT={split}, "
            f"LSE=True, VB={vb}, BM={BM}, BN={WG_BN}, DH={WG_HALF}, DR={WG_ROPE}")


SIGNATURES = {
    "mla_chunks_kernel": _sig("bf16", KV_PAGE, False),
    "mla_combine_kernel": f"{_PART}, o=bf16{_Q}, lse=f32[?,?,?], heads=i32, LSE=True, SPLITS=32, CHUNK=8, DV=512",
}
EXTRA_SIGNATURES = [
    ("mla_chunks_kernel", _sig("bf16", KV_CONTIG, True)),
    ("mla_chunks_kernel", _sig("bf16", KV_GATHER, True)),
    ("mla_chunks_kernel", _sig("f16", KV_PAGE, True)),
]
# wgmma: sm_90a only (the PTX tests assemble SIGNATURES for sm_80 too). ptxas 13.0 fits them
# in 232-253 registers with no spill (both accumulators 128 registers a thread, S 16) and
# 229888 bytes of shared memory (Q 72 KB, the step's rows in 2 slots 144 KB, P 8 KB).
SM90_SIGNATURES = [
    ("mla_decode_kernel", _wg_sig("bf16", KV_PAGE, False, 2), WG_WARPS),
    ("mla_decode_kernel", _wg_sig("bf16", KV_PAGE, True, 2), WG_WARPS),
    ("mla_decode_kernel", _wg_sig("f16", KV_CONTIG, True, 2), WG_WARPS),
    ("mla_decode_kernel", _wg_sig("bf16", KV_GATHER, False, 1), WG_WARPS),
]
OPTIONS = {"mla_chunks_kernel": {"num_warps": WARPS, "fast_math": True},
           "mla_decode_kernel": {"num_warps": WG_WARPS, "fast_math": True},
           "mla_combine_kernel": {"num_warps": 4, "fast_math": True}}


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class MLAPlan:
    """How one mla_decode call is launched (a pure function of shapes and the Target)."""
    kv_mode: int          # KV_CONTIG, KV_PAGE or KV_GATHER
    m_blocks: int         # BM-row blocks of the (q_len x heads) query rows
    v_blocks: int         # DV_PART-wide parts of the value columns (the chunks kernel: one program each)
    num_splits: int       # programs per sequence along its keys (1: no combine launch)
    num_warps: int = WARPS
    wgmma: bool = False   # mla_decode_kernel (Q resident, wgmma) rather than mla_chunks_kernel

    @property
    def programs_per_batch(self) -> int:
        """Programs per sequence and split: the wgmma kernel takes every value part of an M
        block in one program, the chunks kernel one part each."""
        return self.m_blocks * (1 if self.wgmma else self.v_blocks)

    @property
    def grid(self):
        """The first launch's grid, less the batch."""
        return (self.programs_per_batch, self.num_splits)


def split_count(programs: int, max_keys: int, target: Target, per_sm: int = 2, keys_per_step: int = BN) -> int:
    """Splits of each sequence's keys so that the launch's programs fill `per_sm` per SM,
    rounded down (a program past them waits for a second round): `programs` is one launch's
    batch x M blocks (x value parts), `max_keys` the longest context the cache can hold (a
    bound known from shapes alone, no device read). Each split keeps at least
    `min_steps_per_split` steps of keys; at most `max_splits` (tuning.MlaDecodeTuning)."""
    t = tuning_for(target).mla_decode
    want = per_sm * target.sm_count
    if programs <= 0 or programs >= want:
        return 1
    by_keys = max(1, -(-max_keys // (keys_per_step * t.min_steps_per_split)))
    return max(1, min(want // programs, by_keys, t.max_splits))


def uses_wgmma(dim: int, target: Target) -> bool:
    """mla_decode_kernel's shape: MLA's 576 = two 256-wide latent halves + a 64-wide rope part."""
    return bool(target.has_wgmma) and dim == 2 * WG_HALF + WG_ROPE


def config(batch: int, q_len: int, heads: int, head_dim_v: int, max_keys: int, paged: bool, page_size: int,
           target: Target, num_splits: Optional[int] = None, dim: int = 2 * WG_HALF + WG_ROPE) -> MLAPlan:
    """The launches' shape for these sizes on `target` (see the module doc). The wgmma kernel
    holds 225 KB of shared memory, one program per SM, one program per M block; the chunks
    kernel two per SM, one per M block and value part."""
    wgmma = uses_wgmma(dim, target)
    bn = WG_BN if wgmma else BN
    mode = KV_CONTIG if not paged else KV_PAGE if page_size % bn == 0 else KV_GATHER
    m_blocks = -(-(q_len * heads) // BM)
    v_blocks = head_dim_v // DV_PART
    if num_splits is None:
        num_splits = split_count(batch * m_blocks * (1 if wgmma else v_blocks), max_keys, target, 1 if wgmma else 2,
                                 bn)
    return MLAPlan(mode, m_blocks, v_blocks, int(num_splits), WG_WARPS if wgmma else WARPS, wgmma)


# ----------------------------------------------------------------------------- the entry point
def _int_array(x, name: str, ndim: int):
    a = as_array(x, name)
    if a.dtype is not tc.int32:
        raise TypeError(f"{name}: expected int32, got {a.dtype.name}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {a.shape}")
    return a


def _host_values(a) -> Optional[np.ndarray]:
    """The values of an int array, to check them: host arrays as they are, torch tensors
    copied back (one synchronization); None for other device arrays, and for any array
    while a CUDA graph captures (decode steps are what graphs are for: not checked)."""
    if a.host:
        return np.asarray(a.obj)
    if a.kind == "torch" and not capturing(a.obj):
        return a.obj.cpu().numpy()
    return None


def _check_lengths(lens, table, max_keys: int, page_size: int, num_blocks: int) -> None:
    lv = _host_values(lens)
    if lv is None or lv.size == 0:
        return
    if lv.min() < 0 or lv.max() > max_keys:
        raise ValueError(f"cache_seqlens: lengths must lie in [0, {max_keys}] (what the cache "
                         f"{'table' if table is not None else ''} covers), got min {lv.min()}, max {lv.max()}")
    if table is None:
        return
    tv = _host_values(table)
    if tv is None:
        return
    used = -(-lv.astype(np.int64) // page_size)            # pages each sequence reads
    cols = np.arange(tv.shape[1])[None, :]
    pages = tv[cols < used[:, None]]
    if pages.size and (pages.min() < 0 or pages.max() >= num_blocks):
        raise ValueError(f"block_table: entries in use must lie in [0, {num_blocks}) (the pool's blocks), "
                         f"got min {pages.min()}, max {pages.max()}")


@named
def mla_decode(q, kv_cache, cache_seqlens, *, block_table=None, head_dim_v: int = 512, scale: Optional[float] = None,
               causal: bool = True, num_splits: Optional[int] = None, return_lse: bool = False, out=None,
               validate: bool = True):
    """Multi-head latent attention decode (module doc). q (batch, q_len, heads, 576); kv_cache
    (batch, max_seq, 1, 576) or, with block_table (batch, max_blocks) int32, (num_blocks,
    page_size, 1, 576); cache_seqlens (batch,) int32. Returns out (batch, q_len, heads,
    head_dim_v), or (out, lse) with lse (batch, heads, q_len) f32, natural log. `scale`
    defaults to 1/sqrt(q.shape[-1]) as FlashMLA's (DeepSeek models pass their own:
    1/sqrt(192) times the YaRN factor). `validate=False` skips the checks of cache_seqlens'
    and block_table's values, which on a GPU read them back (one synchronization per call).
    The launches are planned (`_plan.planned`): a second GPU call with the same layouts and
    arguments replays the first one's; the values are checked on every call that validates."""
    if validate:
        _check_values(kv_cache, cache_seqlens, block_table)
    return _mla_decode(q, kv_cache, cache_seqlens, block_table=block_table, head_dim_v=head_dim_v, scale=scale,
                       causal=causal, num_splits=num_splits, return_lse=return_lse, out=out)


def _check_values(kv_cache, cache_seqlens, block_table) -> None:
    """cache_seqlens' and block_table's values against the cache, where the shapes are
    well formed (else `_mla_decode` says what is wrong with them)."""
    ka, la = as_array(kv_cache, "kv_cache"), _int_array(cache_seqlens, "cache_seqlens", 1)
    ta = _int_array(block_table, "block_table", 2) if block_table is not None else None
    if ka.ndim != 4 or (ta is not None and ta.shape[0] != la.shape[0]) or (ta is None and ka.shape[0] != la.shape[0]):
        return
    max_keys = ta.shape[1] * ka.shape[1] if ta is not None else ka.shape[1]
    _check_lengths(la, ta, max_keys, ka.shape[1], ka.shape[0])


@planned(label="mla_decode")
def _mla_decode(q, kv_cache, cache_seqlens, *, block_table=None, head_dim_v: int = 512, scale: Optional[float] = None,
                causal: bool = True, num_splits: Optional[int] = None, return_lse: bool = False, out=None):
    """mla_decode's launches, its arguments' values unchecked (shapes, dtypes and layouts are)."""
    arrs = {"q": as_array(q, "q"), "kv_cache": as_array(kv_cache, "kv_cache"),
            "cache_seqlens": _int_array(cache_seqlens, "cache_seqlens", 1)}
    if block_table is not None:
        arrs["block_table"] = _int_array(block_table, "block_table", 2)
    check_same_place(arrs)
    qa, ka, la = arrs["q"], arrs["kv_cache"], arrs["cache_seqlens"]
    ta = arrs.get("block_table")
    check_float(qa, "q", (tc.float16, tc.bfloat16))
    if ka.dtype is not qa.dtype:
        raise TypeError(f"kv_cache: dtype {ka.dtype.name} differs from q's {qa.dtype.name}")
    if qa.ndim != 4:
        raise ValueError(f"q: expected (batch, q_len, heads, dim), got shape {qa.shape}")
    batch, q_len, heads, dim = qa.shape
    if ka.ndim != 4 or ka.shape[2] != 1 or ka.shape[3] != dim:
        raise ValueError(f"kv_cache: expected ({'num_blocks, page_size' if ta is not None else 'batch, max_seq'}, 1, {dim}) "
                         f"(one latent head, q's dim), got shape {ka.shape}")
    if dim % DC:
        raise ValueError(f"q: the head dim must be a multiple of {DC} (576 for MLA), got {dim}")
    if isinstance(head_dim_v, bool) or not isinstance(head_dim_v, (int, np.integer)) or head_dim_v <= 0 \
            or head_dim_v not in (DV_PART, 2 * DV_PART) or head_dim_v > dim:
        raise ValueError(f"head_dim_v: expected {DV_PART} or {2 * DV_PART}, no larger than q's dim {dim} "
                         f"(512 for MLA), got {head_dim_v!r}")
    if la.shape[0] != batch:
        raise ValueError(f"cache_seqlens: expected shape ({batch},), got {la.shape}")
    for name, a in (("q", qa), ("kv_cache", ka)):
        if a.strides[3] != 1 and a.numel:
            raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got strides {a.strides}")
    if q_len > 1 and heads > 1 and qa.strides[1] != heads * qa.strides[2]:
        raise ValueError(f"q: the (q_len, heads) dimensions must flatten into rows (stride(1) == heads * "
                         f"stride(2)), got strides {qa.strides}; pass a contiguous copy")
    if ta is not None:
        if ta.shape[0] != batch:
            raise ValueError(f"block_table: expected {batch} rows (the batch), got shape {ta.shape}")
        page_size, num_blocks = ka.shape[1], ka.shape[0]
        max_keys = ta.shape[1] * page_size
    else:
        if ka.shape[0] != batch:
            raise ValueError(f"kv_cache: a contiguous cache needs batch {batch} rows, got shape {ka.shape}; "
                             "pass block_table for a paged cache")
        page_size, num_blocks = ka.shape[1], ka.shape[0]
        max_keys = ka.shape[1]
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer))
                                   or num_splits < 1):
        raise ValueError(f"num_splits: expected a positive int or None, got {num_splits!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(dim)

    oa = output(out, qa, (batch, q_len, heads, head_dim_v), qa.dtype)
    if q_len > 1 and heads > 1 and oa.strides[1] != heads * oa.strides[2] or (oa.strides[3] != 1 and oa.numel):
        raise ValueError(f"out: the (q_len, heads) dimensions must flatten into rows with a contiguous last "
                         f"dimension, got strides {oa.strides}")
    lse = output(None, qa, (batch, heads, q_len), tc.float32, "lse") if return_lse else None
    rows = q_len * heads
    if batch * rows:
        cfg = config(batch, q_len, heads, head_dim_v, max_keys, ta is not None, page_size, target_of(qa), num_splits,
                     dim)
        _run(cfg, qa, ka, la, ta, oa, lse, float(scale) * LOG2E, page_size, causal)
    return (oa.obj, lse.obj) if return_lse else oa.obj


def plan(cfg: MLAPlan, batch: int, rows: int, head_dim_v: int, lse: bool, causal: bool) -> List[Launch]:
    """The launches of one call tiled by `cfg` (a pure function: no array, no device). Operands
    by name: "q", "kv", "table", "lens", "o", "lse", the scalars "qk_scale", "page_size",
    "heads", "q_len"; with splits, the f32 partials "o_part" (batch, splits, rows, dv) and
    "lse_part" as Temps that the combine launch reads, else "o_part"/"lse_part" are
    placeholders the kernel compiles away."""
    split = cfg.num_splits > 1
    temps = (Temp("o_part", (batch, cfg.num_splits, rows, head_dim_v), tc.float32, like="q"),
             Temp("lse_part", (batch, cfg.num_splits, rows), tc.float32, like="q")) if split else ()
    names = ("q", "kv", "table", "lens", "o", "lse", "o_part", "lse_part", "qk_scale", "page_size", "heads", "q_len")
    common = dict(temps=temps, KV=cfg.kv_mode, CAUSAL=bool(causal), SPLIT=split, LSE=bool(lse), BM=BM)
    if cfg.wgmma:
        out = [Launch.of(mla_decode_kernel, cfg.grid + (batch,), names, cfg.num_warps, VB=cfg.v_blocks, BN=WG_BN,
                         DH=WG_HALF, DR=WG_ROPE, **common)]
    else:
        out = [Launch.of(mla_chunks_kernel, cfg.grid + (batch,), names, cfg.num_warps, VB=cfg.v_blocks, BN=BN,
                         DV=DV_PART, DC=DC, **common)]
    if split:
        out.append(Launch.of(mla_combine_kernel, (rows, batch), ("o_part", "lse_part", "o", "lse", "heads"),
                             MERGE_WARPS, options=DEPENDENT, temps=temps, LSE=bool(lse),
                             SPLITS=next_pow2(cfg.num_splits), CHUNK=merge_chunk(cfg.num_splits, head_dim_v),
                             DV=head_dim_v))
    return out


def _run(cfg: MLAPlan, qa, ka, la, ta, oa, lse, qk_scale, page_size, causal) -> None:
    batch, q_len, heads, dim = qa.shape
    rows = q_len * heads
    row_stride = qa.strides[2] if heads > 1 else qa.strides[1]
    orow = oa.strides[2] if heads > 1 else oa.strides[1]
    # An unused table or lse still needs an array of its dtype (the kernel compiles its use away).
    lse_arr = lse if lse is not None else _dummy(qa, (1, 1, 1), tc.float32)
    values = {"q": view(qa, (batch, rows, dim), (qa.strides[0], row_stride, 1)),
              "kv": view(ka, (ka.shape[0], ka.shape[1], dim), (ka.strides[0], ka.strides[1], 1)),
              "table": view(ta, ta.shape, ta.strides) if ta is not None
              else view(_dummy(la, (1, 1), tc.int32), (1, 1), (1, 1)),
              "lens": view(la, la.shape, la.strides), "o": view(oa, (batch, rows, oa.shape[3]), (oa.strides[0], orow, 1)),
              "lse": view(lse_arr, lse_arr.shape, lse_arr.strides),
              "qk_scale": qk_scale, "page_size": page_size, "heads": heads, "q_len": q_len}
    if cfg.num_splits == 1:
        for name, shape in (("o_part", (1, 1, 1, 1)), ("lse_part", (1, 1, 1))):
            d = _dummy(qa, shape, tc.float32)
            values[name] = view(d, d.shape, d.strides)
    execute(plan(cfg, batch, rows, oa.shape[3], lse is not None, causal), Operands({"q": qa}, values))


def _dummy(like, shape, dtype):
    return empty_like(like, shape, dtype)
