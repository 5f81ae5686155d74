"""attention_decode(q, k_cache, v_cache, cache_seqlens, ...): attention of a few new query
tokens per sequence against a KV cache, as flash-attn's `flash_attn_with_kvcache`.

Decode is memory-bound: every cached key and value is read once and used by a handful of
query rows. So one program takes all the query heads that share a KV head, times the
q_len new tokens, as the M rows of its tiles (row r is token r // GROUP of query head
hk * GROUP + r % GROUP; padded to a tile of at least 16 rows), and streams that KV head's
keys and values BN at a time with the online softmax of `attention.py`: each KV byte is
read once whatever the grouping (GQA / MQA).

Caches:

- contiguous `(batch, max_seq, kv_heads, dim)`: sequence b's key j is row j of batch b;
- paged `(num_blocks, page_size, kv_heads, dim)` with `block_table (batch, max_blocks)`
  int32: key j of sequence b is row j % page_size of page block_table[b, j // page_size].
  Pages that are a multiple of BN keys hold whole tiles (one page look-up per tile);
  smaller or odd pages are gathered key by key (each key's page looked up). Either way
  (`_paged_tile`) each key's row is read as whole 16-byte groups of the head dim, K already
  transposed as the dot reads it, and the interior loop stages the loads with cp.async.
  A contiguous cache goes through the same pointer loads, batch row b as sequence b's one
  page: as 4-D view loads its split kernel took 171 registers, one program per SM, where
  these take 108, two (H200: 3.5-5.5 points of copy on many-sequence caches).

Lengths (flash-attn's rule): sequence b has n = cache_seqlens[b] keys, plus the q_len_new
appended from `k_new`/`v_new` (written into the cache at positions cache_seqlens[b] ...
by a small first launch). The query tokens are the last q_len positions of the sequence
(bottom-right alignment): token t sees key j when off + t - left <= j <= off + t + right,
off = n - q_len, with `causal` (right = 0), `window=(left, right)` and `softcap` as in
`attention`. A row that sees no key (a sequence of length 0) gets zeros and lse = -inf.

Split-KV (flash-decoding): when batch x kv_heads programs would leave the GPU mostly idle,
the keys of each sequence are split among `num_splits` programs (chosen by `split_count`
from the SM count, or given), each writing its normalized partial output and base-2
log-sum-exp to f32 scratch; a second launch (dependent, sm_90+) merges a row's splits by
their log-sum-exp. One split writes the output directly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

import tilec as tc
from tilec.target import Target

from ._common import (DEPENDENT, HOST_TARGET, Arr, as_array, check_float, check_same_place, next_pow2, output,
                      target_of, view)
from ._plan import planned
from .attention import HEAD_DIMS, LN2, LOG2E, _window, online_softmax
from ._split_merge import MERGE_WARPS, merge_chunk, merged_row
from .launches import Launch, Operands, Temp, execute
from .tuning import DecodeTuning, tuning_for

__all__ = ["attention_decode", "plan", "DecodeConfig", "config_for", "split_count", "SIGNATURES"]

NEG_INF = float("-inf")
MAX_Q_LEN = 16
MAX_PAGE = 256
NO_SPLIT = 1 << 30        # tiles per split of an unsplit launch (more than any sequence has)
SPLIT = "split_kv"        # the schedules: keys split among programs, then a merge
ONE_PASS = "one_pass"     # one program per (sequence, kv head, row block) writes the output
APPEND = "append"


# ----------------------------------------------------------------------------- kernels
@tc.func
def _scalar(view, i):
    """Element i of a 1-D view as a scalar."""
    return tc.max(tc.load(view, index=(i,), shape=(1,)))


@tc.func
def _rows(m0, GROUP: tc.constexpr, QLEN: tc.constexpr, BM: tc.constexpr):
    """(token, head within the group, row exists) of the tile's rows m0 ... m0 + BM - 1."""
    r = m0 + tc.arange(0, BM)
    return r // GROUP, r % GROUP, r < GROUP * QLEN


@tc.func
def _paged_tile(k, table, b, hk, j, n_kv, r, d, MASKED: tc.constexpr, PAGE: tc.constexpr, BN: tc.constexpr,
                D: tc.constexpr, DIM: tc.constexpr):
    """Keys (or values) j * BN ... of sequence b, head hk, from a paged cache (`k` seen as
    (pages, kv_heads, page, dim); PAGE 0: a contiguous one, batch row b its one page):
    (BN, D) with `r` arange(BN) as (BN, 1) and `d` arange(D) as (1, D) (V), (D, BN) with
    them as (1, BN) and (D, 1) (K transposed as the dot reads it, so that the load feeds the
    dot's shared buffer directly and the loop stages it with cp.async). A tile inside one
    page (PAGE a multiple of BN) looks its page up once; smaller or odd pages look up each
    key's. Either way each key's row is read as whole 16-byte
    groups, by pointers whose only run-time parts are the page, the key and `d`: no bounds
    checks, and only masked (edge) tiles check the keys against the sequence (zeros past
    it), the interior's keys all exist. `r` and `d` (d as i64) come from the kernel, made once
    before its loops: made here they would be converted to the load's layout in each loop,
    and made as q's and o's column offsets are (the same expression, one value after CSE)
    they would make the accumulator's layout the load's (2-byte accesses; _step gives the
    edges' V such offsets, the interior's its own)."""
    live = r < n_kv - j * BN   # not `j * BN + r < n_kv`: _step's score mask, one value with it (CSE)
    if PAGE == 0:   # a contiguous cache: sequence b's keys are the rows of batch b
        page = b
        row = j * BN + r
    elif PAGE % BN == 0:   # the tile lies in one page (its first key exists, even on an edge)
        page = tc.load(table.ptr + b * table.stride(0) + (j * BN) // PAGE * table.stride(1))
        row = (j * BN) % PAGE + r
    else:
        if BN % PAGE == 0:   # the tile starts a page: key j * BN + r is row r % PAGE of its page
            slot = j * (BN // PAGE) + r // PAGE
            row = r % PAGE
        else:
            slot = (j * BN + r) // PAGE
            row = (j * BN + r) % PAGE
        at = table.ptr + b * table.stride(0) + slot * table.stride(1)
        if MASKED:
            page = tc.load(at, mask=live, other=0)
        else:
            page = tc.load(at)
    ptrs = k.ptr + (page.astype(tc.int64) * k.stride(0) + (hk * k.stride(1) + row * k.stride(2))) + d
    if MASKED and DIM < D:
        return tc.load(ptrs, mask=live & (d < DIM), other=0.0)
    if MASKED:
        return tc.load(ptrs, mask=live, other=0.0)
    if DIM < D:
        return tc.load(ptrs, mask=d < DIM, other=0.0)
    return tc.load(ptrs)


@tc.func
def _step(qt, k, v, table, b, hk, j, m_i, l_i, acc, qk_scale, cap, pos, left, right, n_kv, rk, dk, rv, dv,
          MASKED: tc.constexpr, SOFTCAP: tc.constexpr, PAGE: tc.constexpr, BN: tc.constexpr,
          D: tc.constexpr, DIM: tc.constexpr):
    # One block of keys through the online softmax (base 2, attention.online_softmax); `pos`
    # is each row's query position. Masked blocks also zero the values past the sequence:
    # a cache's unwritten rows may hold NaN, and 0 * NaN would reach the accumulator.
    k_t = _paged_tile(k, table, b, hk, j, n_kv, rk, dk, MASKED, PAGE, BN, D, DIM)
    if MASKED:
        # keys and columns other than the interior's (an i64 key index, q's columns): an
        # edge's zeros are q's (one constant when BM == BN), and through a shared rv or dv
        # the interior's V would get q's layout (2-byte accesses)
        rv = tc.arange(0, BN).astype(tc.int64)[:, None]
        dv = tc.arange(0, D)[None, :]
    vt = _paged_tile(v, table, b, hk, j, n_kv, rv, dv, MASKED, PAGE, BN, D, DIM)
    s = tc.dot(qt, k_t)
    if SOFTCAP:   # cap · tanh(score / cap), in base 2: cap and log2(e) fold into qk_scale
        s = tc.tanh(s * cap)
    s = s * qk_scale
    if MASKED:
        cols = j * BN + tc.arange(0, BN)
        keep = ((cols[None, :] < n_kv) & (cols[None, :] >= pos[:, None] - left)
                & (cols[None, :] <= pos[:, None] + right))
        s = tc.where(keep, s, NEG_INF)   # (the tiles are zero past the sequence already)
    return online_softmax(s, vt, m_i, l_i, acc)


@tc.func
def _store_rows(o, lse, b, hk, m0, out, row_lse, GROUP: tc.constexpr, QLEN: tc.constexpr, LSE: tc.constexpr,
                BM: tc.constexpr, D: tc.constexpr, DIM: tc.constexpr):
    # Row r is o[b, token, hk * GROUP + head]: scattered rows of whole 16-byte groups.
    t, g, ok = _rows(m0, GROUP, QLEN, BM)
    h = hk * GROUP + g
    d = tc.arange(0, D)
    base = b.astype(tc.int64) * o.stride(0) + t * o.stride(1) + h * o.stride(2)
    tc.store(o.ptr + base[:, None] + d[None, :], out.astype(o.dtype), mask=ok[:, None] & (d < DIM)[None, :])
    if LSE:
        tc.store(lse.ptr + b.astype(tc.int64) * lse.stride(0) + h * lse.stride(1) + t * lse.stride(2),
                 row_lse, mask=ok)


@tc.kernel
def decode_kernel(q, k, v, seqlens, table, o, lse, part_o, part_lse, qk_scale, cap, left, right, n_new,
                  tiles_per_split, GROUP: tc.constexpr, QLEN: tc.constexpr, PAGE: tc.constexpr,
                  SPLIT: tc.constexpr, SOFTCAP: tc.constexpr, LSE: tc.constexpr, BM: tc.constexpr,
                  BN: tc.constexpr, D: tc.constexpr, DIM: tc.constexpr):
    # Program (sequence b x kv head hk, split, row block): tiles [split, split + 1) x
    # tiles_per_split of the keys the rows see, in three loops (masked edge, interior, masked
    # edge) as attention.py. SPLIT: the partial output (normalized) and base-2 lse go to
    # part_o / part_lse[(b x hk) x row blocks + row block, split] for the merge.
    tc.launch_dependents()   # the merge (a dependent launch) may be placed once all have started
    bh = tc.program_id(0)
    split = tc.program_id(1)
    mblk = tc.program_id(2)
    kv_heads = k.shape[1]
    b = bh // kv_heads
    hk = bh % kv_heads
    n_kv = _scalar(seqlens, b) + n_new
    off = n_kv - QLEN          # bottom-right alignment: token t is position off + t
    m0 = mblk * BM
    t, g, ok = _rows(m0, GROUP, QLEN, BM)
    pos = off + t
    d = tc.arange(0, D)
    # K (transposed) and V tiles' keys and columns (_paged_tile)
    dims = d.astype(tc.int64)
    rk, dk, rv, dv = tc.arange(0, BN)[None, :], dims[:, None], tc.arange(0, BN)[:, None], dims[None, :]
    q_rows = b.astype(tc.int64) * q.stride(0) + t * q.stride(1) + (hk * GROUP + g) * q.stride(2)
    qt = tc.load(q.ptr + q_rows[:, None] + d[None, :], mask=ok[:, None] & (d < DIM)[None, :], other=0.0)

    m_i = tc.full((BM,), NEG_INF, tc.float32)
    l_i = tc.zeros((BM,), tc.float32)
    acc = tc.zeros((BM, D), tc.float32)

    # Keys some row sees: [lo, hi); keys every row sees: [whole_lo, whole_hi) (rows' tokens
    # t0 ... t1); then clipped to this split's tiles.
    t0 = m0 // GROUP
    t1 = tc.minimum((m0 + BM - 1) // GROUP, QLEN - 1)
    lo = tc.maximum(off + t0 - left, 0)
    hi = tc.minimum(off + t1 + right + 1, n_kv)
    whole_lo = tc.maximum(off + t1 - left, 0)
    whole_hi = tc.minimum(off + t0 + right + 1, n_kv)
    first = tc.maximum(lo // BN, split * tiles_per_split)
    last = tc.minimum(tc.maximum(tc.cdiv(hi, BN), lo // BN), (split + 1) * tiles_per_split)
    inner_lo = tc.minimum(tc.maximum(tc.cdiv(whole_lo, BN), first), last)
    inner_hi = tc.minimum(tc.maximum(whole_hi // BN, inner_lo), last)
    for j in range(first, inner_lo):
        m_i, l_i, acc = _step(qt, k, v, table, b, hk, j, m_i, l_i, acc, qk_scale, cap, pos, left, right,
                              n_kv, rk, dk, rv, dv, True, SOFTCAP, PAGE, BN, D, DIM)
    # The interior, the bulk of the keys: staged 2 tiles ahead into shared memory (cp.async;
    # on a paged cache the copies repeat the page look-ups of the tile they fetch).
    for j in tc.range(inner_lo, inner_hi, num_stages=3):
        m_i, l_i, acc = _step(qt, k, v, table, b, hk, j, m_i, l_i, acc, qk_scale, cap, pos, left, right,
                              n_kv, rk, dk, rv, dv, False, SOFTCAP, PAGE, BN, D, DIM)
    for j in range(inner_hi, last):
        m_i, l_i, acc = _step(qt, k, v, table, b, hk, j, m_i, l_i, acc, qk_scale, cap, pos, left, right,
                              n_kv, rk, dk, rv, dv, True, SOFTCAP, PAGE, BN, D, DIM)

    seen = l_i > 0.0
    out = acc / tc.where(seen, l_i, 1.0)[:, None]
    lse2 = tc.where(seen, m_i + tc.log2(l_i), NEG_INF)
    if SPLIT:
        z = bh * tc.num_programs(2) + mblk
        tc.store(part_o, index=(z, split, 0, 0), tile=tc.reshape(out, (1, 1, BM, D)))
        tc.store(part_lse, index=(z, split, 0), tile=tc.reshape(lse2, (1, 1, BM)))
    else:
        _store_rows(o, lse, b, hk, m0, out, lse2 * LN2, GROUP, QLEN, LSE, BM, D, DIM)


@tc.kernel
def decode_combine_kernel(o, lse, part_o, part_lse, GROUP: tc.constexpr, QLEN: tc.constexpr, LSE: tc.constexpr,
                          SPLITS: tc.constexpr, CHUNK: tc.constexpr, BM: tc.constexpr, D: tc.constexpr):
    # Program (b x hk, row r of the kv head's GROUP x QLEN rows): the row's splits merged by
    # their lse (_split_merge), stored as o[b, r // GROUP, hk * GROUP + r % GROUP].
    bh = tc.program_id(0)
    r = tc.program_id(1)
    kv_heads = o.shape[2] // GROUP
    z = bh * (part_o.shape[0] // tc.num_programs(0)) + r // BM
    out, lse2 = merged_row(part_o, part_lse, z, r % BM, SPLITS, CHUNK, D)
    b = bh // kv_heads
    h = (bh % kv_heads) * GROUP + r % GROUP
    t = r // GROUP
    tc.store(o, offset=(b, t, h, 0), tile=tc.reshape(out.astype(o.dtype), (1, 1, 1, D)))
    if LSE:
        ptr = lse.ptr + b.astype(tc.int64) * lse.stride(0) + h * lse.stride(1) + t * lse.stride(2)
        tc.store(ptr + tc.zeros((1,), tc.int32), lse2 * LN2)


@tc.kernel
def decode_append_kernel(k_new, v_new, k, v, seqlens, table, PAGE: tc.constexpr, H: tc.constexpr,
                         D: tc.constexpr, DIM: tc.constexpr):
    # Program (b, t): token t of k_new / v_new (all kv heads) into the cache at position
    # cache_seqlens[b] + t (its page's row on a paged cache).
    b = tc.program_id(0)
    t = tc.program_id(1)
    pos = _scalar(seqlens, b) + t
    if PAGE == 0:
        page = b
        row = pos
    else:
        page = tc.max(tc.load(table, offset=(b, pos // PAGE), shape=(1, 1)))
        row = pos % PAGE
    hh = tc.arange(0, H)
    d = tc.arange(0, D)
    keep = (hh < k.shape[1])[:, None] & (d < DIM)[None, :]
    src = b.astype(tc.int64) * k_new.stride(0) + t * k_new.stride(1) + hh * k_new.stride(2)
    dst = page.astype(tc.int64) * k.stride(0) + row.astype(tc.int64) * k.stride(2) + hh * k.stride(1)
    tc.store(k.ptr + dst[:, None] + d[None, :], tc.load(k_new.ptr + src[:, None] + d[None, :], mask=keep, other=0.0),
             mask=keep)
    src_v = b.astype(tc.int64) * v_new.stride(0) + t * v_new.stride(1) + hh * v_new.stride(2)
    dst_v = page.astype(tc.int64) * v.stride(0) + row.astype(tc.int64) * v.stride(2) + hh * v.stride(1)
    tc.store(v.ptr + dst_v[:, None] + d[None, :],
             tc.load(v_new.ptr + src_v[:, None] + d[None, :], mask=keep, other=0.0), mask=keep)


_V4 = "[?,?,?,?]:stride_div=16x16x16x1"   # what a launch on contiguous (.., dim) arrays specializes to
_ROWS = "qk_scale=f32, cap=f32, left=i32, right=i32, n_new=i32, tiles_per_split=i32"


def _decode_sig(dtype, page, split, group, qlen, bm, bn, d=128, softcap=False, lse=False):
    return (f"q={dtype}{_V4}, k={dtype}{_V4}, v={dtype}{_V4}, seqlens=i32[?], table=i32[?,?]:stride_div=16x1, "
            f"o={dtype}{_V4}, lse=f32[?,?,?], part_o=f32{_V4}, part_lse=f32[?,?,?]:stride_div=16x16x1, {_ROWS}, "
            f"GROUP={group}, QLEN={qlen}, PAGE={page}, SPLIT={split}, SOFTCAP={softcap}, LSE={lse}, BM={bm}, "
            f"BN={bn}, D={d}, DIM={d}")


# The configurations the plan ships (config_for, all at 8 warps): contiguous, whole-tile pages
# and gathered pages, split or not, GQA 4 x q_len 1 (16 rows), 8 x 16 (64-row blocks), MHA,
# head dim 256 (32-row blocks).
SIGNATURES = {
    "decode_kernel": _decode_sig("bf16", 0, True, 4, 1, 16, 64),
    "decode_combine_kernel": f"o=bf16{_V4}, lse=f32[?,?,?], part_o=f32{_V4}, part_lse=f32[?,?,?]:stride_div=16x16x1, "
                             "GROUP=4, QLEN=1, LSE=True, SPLITS=32, CHUNK=32, BM=16, D=128",
    "decode_append_kernel": f"k_new=bf16{_V4}, v_new=bf16{_V4}, k=bf16{_V4}, v=bf16{_V4}, seqlens=i32[?], "
                            "table=i32[?,?]:stride_div=16x1, PAGE=16, H=8, D=128, DIM=128",
}
EXTRA_SIGNATURES = [
    ("decode_kernel", _decode_sig("f16", 0, False, 1, 1, 16, 64, lse=True)),
    ("decode_kernel", _decode_sig("f16", 0, False, 1, 1, 16, 32, lse=True)),   # bench --bn 32
    ("decode_kernel", _decode_sig("bf16", 16, False, 4, 1, 16, 64)),
    ("decode_kernel", _decode_sig("bf16", 16, True, 4, 4, 16, 64, softcap=True)),
    ("decode_kernel", _decode_sig("bf16", 64, False, 4, 1, 16, 64)),
    ("decode_kernel", _decode_sig("f16", 64, True, 8, 4, 32, 64, lse=True)),
    ("decode_kernel", _decode_sig("bf16", 3, False, 4, 4, 16, 64)),
    ("decode_kernel", _decode_sig("bf16", 0, False, 8, 16, 64, 64)),
    ("decode_kernel", _decode_sig("bf16", 16, True, 8, 16, 64, 64, lse=True)),
    ("decode_kernel", _decode_sig("bf16", 0, True, 4, 4, 16, 64, d=256)),
    ("decode_kernel", _decode_sig("f16", 16, False, 8, 4, 32, 64, d=256)),
    ("decode_combine_kernel", f"o=f16{_V4}, lse=f32[?,?,?], part_o=f32{_V4}, part_lse=f32[?,?,?]:stride_div=16x16x1, "
                              "GROUP=8, QLEN=16, LSE=False, SPLITS=128, CHUNK=32, BM=64, D=128"),
    ("decode_combine_kernel", f"o=bf16{_V4}, lse=f32[?,?,?], part_o=f32{_V4}, part_lse=f32[?,?,?]:stride_div=16x16x1, "
                              "GROUP=4, QLEN=4, LSE=True, SPLITS=64, CHUNK=16, BM=16, D=256"),
    ("decode_append_kernel", f"k_new=f16{_V4}, v_new=f16{_V4}, k=f16{_V4}, v=f16{_V4}, seqlens=i32[?], "
                             "table=i32[?], PAGE=0, H=32, D=128, DIM=128"),
]
OPTIONS = {"decode_kernel": {"num_warps": 8, "fast_math": True, "min_programs_per_sm": 2, "num_stages": 2},
           "decode_combine_kernel": {"num_warps": 4, "fast_math": True, **DEPENDENT},
           "decode_append_kernel": {"num_warps": 4, "fast_math": True}}


# ----------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class DecodeConfig:
    """How one decode call is tiled: query rows (GROUP x q_len, padded) and keys per step,
    the tile's head dim, warps, and the row blocks (programs per kv head) holding the rows."""
    bm: int
    bn: int
    d: int
    num_warps: int
    row_blocks: int


def config_for(group: int, q_len: int, head_dim: int, target: Optional[Target] = None) -> DecodeConfig:
    """The tiling of `group` query heads per kv head x `q_len` tokens; a pure function.
    Rows are padded to a tile of at least 16 (the tensor cores' M); up to 64 rows share a
    program (32 at head dims past 128, whose accumulator is twice as wide), in steps of
    `keys_per_step` (64) keys at 8 warps: M = 16 leaves every warp its own slice of keys but
    the whole of q. Through the paged path's pointer loads 64-key steps fit two programs per
    SM (126 registers; the sweep against 16 and 32: docs/benchmarks.md, "Decode attention");
    128 rows spilled at any step. `bench/decode.py --bn 16,32,64` times the alternatives.
    `target`: whose table (tuning.DecodeTuning; default the host path's, sm_90a)."""
    t = tuning_for(target or HOST_TARGET).decode
    rows = group * q_len
    d = max(next_pow2(head_dim), 16)
    bm = min(max(16, next_pow2(rows)), 64 if d <= 128 else 32)
    return DecodeConfig(bm, t.keys_per_step, d, 8, -(-rows // bm))


def decode_options(bm: int) -> dict:
    """Compile options of the decode kernel: up to 32 rows, a floor of 2 programs per SM (128
    registers at 8 warps, no spills on sm_80 / sm_90a: two programs' loads in flight per SM
    where one took 170), with 2-deep rings for the masked steps' K and V (3 spilled 8 bytes
    on sm_90a once the row statistics stayed in the accumulator's layout); 64 rows do not fit
    it (251 registers) and take ptxas's choice."""
    return {"min_programs_per_sm": 2, "num_stages": 2} if bm <= 32 else {}


def split_count(programs: int, tiles: int, target: Target, t: Optional[DecodeTuning] = None) -> int:
    """Splits of each sequence's `tiles` key tiles among programs, for `programs` (sequence,
    kv head, row block) programs on `target`: none while the programs fill every SM
    (`split_min_programs` per SM); else as many as `split_waves` programs per SM hold (rounded
    down: one program past them is a second round of the whole split's time;
    benchmarks-archive.md, "Decode on an H200 with 32-key steps"), each split at least
    `min_split_tiles` tiles, at most `max_splits` (tuning.DecodeTuning: `t`, default
    `target`'s table)."""
    t = t or tuning_for(target).decode
    if programs >= t.split_min_programs * target.sm_count:
        return 1
    want = t.split_waves * target.sm_count // max(programs, 1)
    return max(1, min(want, tiles // t.min_split_tiles, t.max_splits))


def plan(q: Arr, k: Arr, page_size: int, context: int, n_new: int, num_splits: Optional[int], lse: bool,
         softcap: bool, target: Target) -> List[Launch]:
    """The launches of attention_decode (descriptions, no arrays): q `(batch, q_len, heads,
    dim)`, k the cache (contiguous when `page_size` is 0), `context` the keys a sequence may
    hold (max_seq, or max_blocks x page_size), `n_new` tokens appended first (0: none),
    `num_splits` forced or None (`split_count`). Operands: "q", "k", "v" (the caches seen as
    (batch | pages, kv_heads, seq | page, dim)), "seqlens", "table", "o", "lse", "k_new",
    "v_new" and the scalars "qk_scale", "cap", "left", "right", "n_new"."""
    batch, q_len, heads, dim = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    cfg = config_for(group, q_len, dim, target)
    tiles = max(-(-context // cfg.bn), 1)
    programs = batch * kv_heads * cfg.row_blocks
    splits = split_count(programs, tiles, target) if num_splits is None else max(1, min(int(num_splits), tiles))
    per = -(-tiles // splits)
    splits = -(-tiles // per)   # no split without tiles
    page = page_size   # the kernel reads whole pages when page % BN == 0, else gathers rows
    out: List[Launch] = []
    if n_new:
        out.append(Launch.of(decode_append_kernel, (batch, n_new), ("k_new", "v_new", "k", "v", "seqlens", "table"),
                             4, schedule=APPEND, PAGE=page, H=next_pow2(kv_heads), D=cfg.d, DIM=dim))
    consts = dict(GROUP=group, QLEN=q_len, PAGE=page, SOFTCAP=softcap, LSE=lse, BM=cfg.bm, BN=cfg.bn, D=cfg.d,
                  DIM=dim)
    grid = (batch * kv_heads, splits, cfg.row_blocks)
    scalars = ("qk_scale", "cap", "left", "right", "n_new")
    if splits == 1:
        out.append(Launch.of(decode_kernel, grid, ("q", "k", "v", "seqlens", "table", "o", "lse", "o", "lse",
                                                   *scalars, NO_SPLIT), cfg.num_warps,
                             options=decode_options(cfg.bm), schedule=ONE_PASS,
                             SPLIT=False, **consts))
        return out
    z = batch * kv_heads * cfg.row_blocks
    temps = (Temp("part_o", (z, splits, cfg.bm, cfg.d), tc.float32, like="q"),
             Temp("part_lse", (z, splits, cfg.bm), tc.float32, like="q"))
    out.append(Launch.of(decode_kernel, grid, ("q", "k", "v", "seqlens", "table", "o", "lse", "part_o", "part_lse",
                                               *scalars, per), cfg.num_warps, options=decode_options(cfg.bm),
                         temps=temps, schedule=SPLIT,
                         SPLIT=True, **consts))
    out.append(Launch.of(decode_combine_kernel, (batch * kv_heads, group * q_len), ("o", "lse", "part_o", "part_lse"),
                         MERGE_WARPS, options=DEPENDENT, temps=temps, schedule=SPLIT, GROUP=group, QLEN=q_len,
                         LSE=lse, SPLITS=next_pow2(splits), CHUNK=merge_chunk(splits, cfg.d), BM=cfg.bm, D=cfg.d))
    return out


# ----------------------------------------------------------------------------- entry point
def _check_int32(a: Arr, name: str, ndim: int, what: str) -> None:
    if a.dtype is not tc.int32:
        raise TypeError(f"{name}: expected int32 ({what}), got {a.dtype.name}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s) ({what}), got shape {a.shape}")


def _check_contents(lens: Arr, table: Optional[Arr], n_new: int, capacity: int, page: int, n_pages: int) -> None:
    """Host-visible cache_seqlens / block_table only (device arrays are not read back)."""
    if lens.host:
        n = np.asarray(lens.obj).astype(np.int64) + n_new
        if n.size and (n.min() < n_new or n.max() > capacity):
            bad = int(np.argmax((n < n_new) | (n > capacity)))
            raise ValueError(f"cache_seqlens[{bad}] = {int(n[bad]) - n_new}: with {n_new} appended keys a sequence "
                             f"must hold 0 to {capacity} keys (what the cache{' table' if page else ''} covers)")
        if table is not None and table.host:
            tb = np.asarray(table.obj)
            for b, nb in enumerate(n):
                used = tb[b, :-(-int(nb) // page)]
                if used.size and (used.min() < 0 or used.max() >= n_pages):
                    j = int(np.argmax((used < 0) | (used >= n_pages)))
                    raise ValueError(f"block_table[{b}, {j}] = {int(used[j])} is outside the pool of {n_pages} "
                                     f"pages (k_cache.shape[0])")


def _cache_view(a: Arr):
    """(batch | pages, seq | page, kv_heads, dim) seen as (batch | pages, kv_heads, seq | page, dim)."""
    s0, s1, s2, s3 = a.strides
    return view(a, (a.shape[0], a.shape[2], a.shape[1], a.shape[3]), (s0, s2, s1, s3))


@planned
def attention_decode(q, k_cache, v_cache, cache_seqlens, *, block_table=None, scale: Optional[float] = None,
                     causal: bool = True, window=None, softcap: Optional[float] = None, k_new=None, v_new=None,
                     num_splits: Optional[int] = None, return_lse: bool = False, out=None):
    """Attention of q's new tokens against each sequence's cached keys and values; see the module doc.

    q `(batch, q_len, heads, dim)`, q_len 1 to 16; caches `(batch, max_seq, kv_heads, dim)` or,
    with `block_table (batch, max_blocks)` int32, pages `(num_blocks, page_size, kv_heads,
    dim)` (page_size 1 to 256); `cache_seqlens (batch,)` int32 (the lengths before `k_new` /
    `v_new` `(batch, q_len_new, kv_heads, dim)` are appended). f16 or bf16, one dtype.
    Returns `out` `(batch, q_len, heads, dim)`, or `(out, lse)` with `return_lse=True` (lse
    natural, f32, `(batch, heads, q_len)`). cache_seqlens and block_table are checked against
    the cache only when they are host (numpy) arrays. A second GPU call with the same layouts
    and arguments replays the first one's launches (`_plan.planned`: nothing is re-validated).
    """
    names = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens)]
    names += [(n, x) for n, x in (("block_table", block_table), ("k_new", k_new), ("v_new", v_new)) if x is not None]
    arrs = {name: as_array(x, name) for name, x in names}
    check_same_place(arrs)
    qa, ka, va, la = arrs["q"], arrs["k_cache"], arrs["v_cache"], arrs["cache_seqlens"]
    ta = arrs.get("block_table")
    floats = ["q", "k_cache", "v_cache"] + [n for n in ("k_new", "v_new") if n in arrs]
    for name in floats:
        a = arrs[name]
        check_float(a, name, (tc.float16, tc.bfloat16))
        if a.ndim != 4:
            raise ValueError(f"{name}: expected 4 dimensions, got shape {a.shape}")
        if a.strides[3] != 1 and a.shape[3] > 1 and a.numel:
            raise ValueError(f"{name}: the head dim must be contiguous (stride 1), got strides {a.strides}")
        if a.dtype is not qa.dtype:
            raise TypeError(f"{name}: dtype {a.dtype.name} differs from q's {qa.dtype.name}")
    batch, q_len, heads, dim = qa.shape
    if not 1 <= q_len <= MAX_Q_LEN:
        raise ValueError(f"q: q_len (dimension 1) must be 1 to {MAX_Q_LEN}, got shape {qa.shape}")
    if va.shape != ka.shape:
        raise ValueError(f"v_cache: shape {va.shape} differs from k_cache's {ka.shape}")
    n_blocks, seq, kv_heads, kdim = ka.shape
    if kdim != dim:
        raise ValueError(f"k_cache: head dim {kdim} differs from q's {dim}")
    if dim > HEAD_DIMS:
        raise ValueError(f"q: head dims up to {HEAD_DIMS} are supported, got {dim}")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"k_cache: {kv_heads} kv heads must divide q's {heads} heads")
    _check_int32(la, "cache_seqlens", 1, "one length per sequence")
    if la.shape[0] != batch:
        raise ValueError(f"cache_seqlens: expected shape ({batch},) (q's batch), got {la.shape}")
    if ta is not None:
        _check_int32(ta, "block_table", 2, "(batch, max_blocks) page indices")
        if ta.shape[0] != batch:
            raise ValueError(f"block_table: expected {batch} rows (q's batch), got shape {ta.shape}")
        if not 1 <= seq <= MAX_PAGE:
            raise ValueError(f"k_cache: page size (dimension 1) must be 1 to {MAX_PAGE}, got shape {ka.shape}")
        page, capacity = seq, ta.shape[1] * seq
    else:
        if n_blocks != batch:
            raise ValueError(f"k_cache: expected {batch} sequences (q's batch) in dimension 0 of a contiguous "
                             f"cache, got shape {ka.shape}; pass block_table for a paged cache")
        page, capacity = 0, seq
    if (k_new is None) != (v_new is None):
        raise ValueError("k_new and v_new: pass both or neither")
    n_new = 0
    if k_new is not None:
        kn, vn = arrs["k_new"], arrs["v_new"]
        if kn.shape != vn.shape or kn.shape[0] != batch or kn.shape[2:] != (kv_heads, dim):
            raise ValueError(f"k_new/v_new: expected (batch={batch}, q_len_new, kv_heads={kv_heads}, dim={dim}), "
                             f"got {kn.shape} and {vn.shape}")
        n_new = kn.shape[1]
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)
                                   or num_splits < 1):
        raise ValueError(f"num_splits: expected a positive int or None, got {num_splits!r}")
    _check_contents(la, ta, n_new, capacity, page, n_blocks)
    left, right = _window(causal, window)
    if scale is None:
        scale = 1.0 / math.sqrt(dim)
    cap, qk_scale = 0.0, float(scale) * LOG2E
    if softcap is not None:
        if not softcap > 0:
            raise ValueError(f"softcap must be positive, got {softcap}")
        cap, qk_scale = float(scale) / float(softcap), float(softcap) * LOG2E

    oa = output(out, qa, (batch, q_len, heads, dim), qa.dtype)
    lse = output(None, qa, (batch, heads, q_len), tc.float32, "lse") if return_lse else None
    if batch * heads:
        lse_arr = lse if lse is not None else output(None, qa, (1, 1, 1), tc.float32, "lse")
        lens = view(la, (batch,), la.strides)
        values = {"q": view(qa, qa.shape, qa.strides), "k": _cache_view(ka), "v": _cache_view(va), "seqlens": lens,
                  "table": view(ta, ta.shape, ta.strides) if ta is not None else lens,
                  "o": view(oa, oa.shape, oa.strides), "lse": view(lse_arr, lse_arr.shape, lse_arr.strides),
                  "qk_scale": qk_scale, "cap": cap, "left": left, "right": right, "n_new": n_new}
        if n_new:
            values.update({n: view(arrs[n], arrs[n].shape, arrs[n].strides) for n in ("k_new", "v_new")})
        launches = plan(qa, ka, page, capacity, n_new, num_splits, lse is not None, softcap is not None,
                        target_of(qa))
        execute(launches, Operands({"q": qa}, values))
    result = oa.obj
    return (result, lse.obj) if return_lse else result
