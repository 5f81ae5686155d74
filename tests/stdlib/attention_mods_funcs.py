"""The score_mods and mask_mods of the attention mods tests, as @tc.funcs (the interpreter
and GPU tests share them; their numpy / torch twins live beside each test)."""
from __future__ import annotations

import tilec as tc

H = 4                     # the tests' query heads (ALiBi's slopes depend on it)
REL_OFFSET = 2047         # the relative-position table's index of distance 0 (sequences up to 2048)
PREFIX = 37


@tc.func
def rel_bias(score, b, h, q_idx, kv_idx):
    return score + 0.03 * (q_idx - kv_idx).astype(tc.float32)


@tc.func
def alibi(score, b, h, q_idx, kv_idx):
    slope = tc.exp2(-8.0 * (h + 1).astype(tc.float32) / H)   # H: a module constant
    return score + slope * (kv_idx - q_idx).astype(tc.float32)


@tc.func
def table_bias(score, b, h, q_idx, kv_idx, table):
    # a learned bias per head and distance, read from a (heads, distances) tensor
    return score + tc.load(table.ptr + h * table.stride(0) + (q_idx - kv_idx + REL_OFFSET))


@tc.func
def bias_grad(score, b, h, q_idx, kv_idx):
    return 1.0


@tc.func
def bias_grad_1(score, b, h, q_idx, kv_idx, table):
    return 1.0


@tc.func
def tanh_cap(score, b, h, q_idx, kv_idx):
    return 4.0 * tc.tanh(score / 4.0)


@tc.func
def tanh_cap_grad(score, b, h, q_idx, kv_idx):
    t = tc.tanh(score / 4.0)
    return 1.0 - t * t


@tc.func
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@tc.func
def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX) | (q_idx >= kv_idx)


@tc.func
def document(b, h, q_idx, kv_idx, doc):
    # doc: (batch, seq) document id of each position
    row = doc.ptr + b * doc.stride(0)
    return tc.load(row + q_idx) == tc.load(row + kv_idx)


@tc.func
def document_causal(b, h, q_idx, kv_idx, doc):
    row = doc.ptr + b * doc.stride(0)
    return (tc.load(row + q_idx) == tc.load(row + kv_idx)) & (q_idx >= kv_idx)


@tc.func
def keep_nothing(b, h, q_idx, kv_idx):
    return q_idx < 0


@tc.func
def late_rows(b, h, q_idx, kv_idx):
    # rows < 10 see no key at all; the others a band
    return (q_idx >= 10) & (kv_idx <= q_idx) & (kv_idx > q_idx - 40)


@tc.func
def alibi_doc(score, b, h, q_idx, kv_idx, doc):
    # ALiBi beside a document mask that reads `doc`: the score_mod takes the mod array too
    slope = tc.exp2(-8.0 * (h + 1).astype(tc.float32) / H)
    return score + slope * (kv_idx - q_idx).astype(tc.float32)


@tc.func
def striped(b, h, q_idx, kv_idx):
    # keys in every other band of 64 (full blocks that are not consecutive), and the diagonal
    return ((kv_idx // 64) % 2 == 0) | (q_idx == kv_idx)
