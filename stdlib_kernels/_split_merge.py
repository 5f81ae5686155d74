"""The second pass of split-KV attention (flash-decoding): one query row's output as the
lse-weighted mean of its splits' partial outputs. Shared by `attention_decode` and
`mla_decode`, whose scratch has the same shape: partial outputs (Z, splits, rows, D) f32,
each normalized by its own softmax sum, and their base-2 log-sum-exps (Z, splits, rows).

One program merges one row, and reads its splits CHUNK at a time as one (CHUNK, D) tile, so
that a chunk's loads are in flight together: merging a block of rows one split after
another, in only batch x kv heads programs, made a forced split count cost ~0.7 us per
split on an H200; a 33-way split of one 32k sequence went from 61 to 53 us with this one.
"""
from __future__ import annotations

import tilec as tc

from ._common import next_pow2

__all__ = ["merged_row", "merge_chunk", "MERGE_WARPS"]

NEG_INF = float("-inf")
MAX_CHUNK = 32   # splits per (CHUNK, D) tile: 32 x 128 f32 is 32 values a thread at 4 warps
MERGE_WARPS = 4


@tc.func
def merged_row(part_o, part_lse, z, row, SPLITS: tc.constexpr, CHUNK: tc.constexpr, D: tc.constexpr):
    """(out (1, D) f32, base-2 lse (1,)) of row `row` of group z, from every split's partial
    (SPLITS: a power of two at least the splits, part_o.shape[1]). Splits that saw no key
    (lse -inf) weigh 0; a row no split saw gets zeros and lse -inf, never NaN."""
    n_splits = part_o.shape[1]
    all_lse = tc.reshape(tc.load(part_lse, offset=(z, 0, row), shape=(1, SPLITS, 1), padding=NEG_INF), (SPLITS, 1))
    top = tc.max(all_lse, axis=0)                    # (1,): -inf only where no split saw a key
    top_use = tc.maximum(top, -1e30)                 # so that -inf - top stays -inf, not NaN
    den = tc.sum(tc.exp2(all_lse - top_use[None, :]), axis=0)   # 0, or >= 1 (the top split's own 1)
    acc = tc.zeros((D,), tc.float32)
    for c in range(tc.cdiv(n_splits, CHUNK)):
        lse_c = tc.reshape(tc.load(part_lse, offset=(z, c * CHUNK, row), shape=(1, CHUNK, 1), padding=NEG_INF),
                           (CHUNK, 1))
        part = tc.reshape(tc.load(part_o, offset=(z, c * CHUNK, row, 0), shape=(1, CHUNK, 1, D), padding=0.0),
                          (CHUNK, D))
        acc += tc.sum(tc.exp2(lse_c - top_use[None, :]) * part, axis=0)
    out = acc[None, :] / tc.maximum(den, 1.0)[:, None]
    return out, top + tc.log2(den)


def merge_chunk(splits: int, d: int) -> int:
    """Splits a (CHUNK, D) tile of merged_row holds: all of them up to MAX_CHUNK x 128 values."""
    return max(1, min(next_pow2(splits), MAX_CHUNK * 128 // max(d, 1)))
