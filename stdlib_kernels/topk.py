"""topk(x, k): the k largest (or smallest) values of each row of the last dimension, and where they are.

A row is cut into chunks of `chunk` columns; each program takes one chunk (a tile in
registers) and selects its k best by k rounds of "the largest live key, then the lowest
column holding it" (two tile reductions), taking that column out of the live set. The
chunks' candidates (rows, chunks * KP), key and column, are then merged by the same
selection over tiles of candidates, level after level, until one program per row is
left; it writes the values (read back from x at the chosen columns, so NaN and -0.0
come back as they were) and the columns as int64. No sort of the row, no atomics: each
level is a pure function of the one before, so the result is deterministic.

Order: values descending (ascending for largest=False); equal values by increasing
column, whatever the chunking (a merge takes the lowest column among equal keys, and
every chunk gives its equal keys lowest column first). NaN ranks as +inf for
largest=True and never ahead of any number for largest=False (torch ranks NaN above
+inf; the two differ only where a row holds both). sorted=False returns the same sorted
order (torch leaves that order unspecified).
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import numpy as np

import tilec as tc
from tilec.target import Target

from ._common import Arr, as_array, check_float, next_pow2, normalize_dim, out_pair, output, rows_of, target_of
from ._plan import planned
from .launches import Launch, Operands, Temp, execute
from .schedules import CANDIDATES, MERGE
from .tuning import TABLES, TopkTuning, tuning_for

__all__ = ["topk", "plan", "levels", "MAX_K", "SIGNATURES"]

NEG_INF = float("-inf")
POS_INF = float("inf")
NONE = 2 ** 31 - 1          # the column of "no candidate" (a chunk with fewer than k live entries)
MAX_K = TABLES["sm_90"].topk.max_k


@tc.func
def select(key, ids, alive, k, KP: tc.constexpr):
    """(keys, ids) of the k best live entries, best first, padded to KP lanes with (-inf,
    NONE): per round the largest live key and the lowest id holding it, which then leaves
    the live set. Keys are never NaN (`order_key`), so `key == m` always finds it."""
    lane = tc.arange(0, KP)
    best_key = tc.full((KP,), NEG_INF, tc.float32)
    best_id = tc.full((KP,), NONE, tc.int32)
    for j in range(k):
        m = tc.max(tc.where(alive, key, NEG_INF))
        i = tc.min(tc.where(alive & (key == m), ids, NONE))
        alive = alive & (ids != i)
        best_key = tc.where(lane == j, m, best_key)
        best_id = tc.where(lane == j, i, best_id)
    return best_key, best_id


@tc.func
def order_key(v, LARGEST: tc.constexpr):
    """The f32 key whose largest entries are the ones wanted: v (NaN as +inf), or -v (NaN as -inf)."""
    if LARGEST:
        return tc.where(v != v, POS_INF, v)
    return tc.where(v != v, NEG_INF, -v)


@tc.func
def write_result(x, row, best_id, k, values, indices, KP: tc.constexpr):
    # the values read back from x at the chosen columns: exactly x's, NaN included
    lane = tc.arange(0, KP)
    ok = lane < k
    row64 = row.astype(tc.int64)
    v = tc.load(x.ptr + row64 * x.stride(0) + best_id, mask=ok, other=0.0)
    tc.store(values.ptr + row64 * values.stride(0) + lane, v.astype(values.dtype), mask=ok)
    tc.store(indices.ptr + row64 * indices.stride(0) + lane, best_id.astype(tc.int64), mask=ok)


@tc.kernel
def topk_chunk_kernel(x, key_out, id_out, values, indices, k, LARGEST: tc.constexpr, FINAL: tc.constexpr,
                      KP: tc.constexpr, BLOCK: tc.constexpr):
    # Program (row, c): the k best of columns [c * BLOCK, (c + 1) * BLOCK) of x's row. FINAL
    # (one chunk per row): the result itself; else KP candidates at key_out/id_out[row, c * KP:].
    row = tc.program_id(0)
    c = tc.program_id(1)
    cols = c * BLOCK + tc.arange(0, BLOCK)
    inside = cols < x.shape[1]
    v = tc.load(x.ptr + row.astype(tc.int64) * x.stride(0) + cols, mask=inside, other=0.0).astype(tc.float32)
    best_key, best_id = select(order_key(v, LARGEST), cols, inside, k, KP)
    if FINAL:
        write_result(x, row, best_id, k, values, indices, KP)
    else:
        _store_candidates(key_out, id_out, row, c, best_key, best_id, KP)


@tc.kernel
def topk_merge_kernel(x, key_in, id_in, key_out, id_out, values, indices, k, FINAL: tc.constexpr,
                      KP: tc.constexpr, BLOCK: tc.constexpr):
    # Program (row, c): the k best of candidates [c * BLOCK, (c + 1) * BLOCK) of the level
    # before (padding and a chunk's missing candidates have id NONE: never live).
    row = tc.program_id(0)
    c = tc.program_id(1)
    pos = c * BLOCK + tc.arange(0, BLOCK)
    inside = pos < key_in.shape[1]
    row64 = row.astype(tc.int64)
    key = tc.load(key_in.ptr + row64 * key_in.stride(0) + pos, mask=inside, other=NEG_INF)
    ids = tc.load(id_in.ptr + row64 * id_in.stride(0) + pos, mask=inside, other=NONE)
    best_key, best_id = select(key, ids, ids < x.shape[1], k, KP)
    if FINAL:
        write_result(x, row, best_id, k, values, indices, KP)
    else:
        _store_candidates(key_out, id_out, row, c, best_key, best_id, KP)


@tc.func
def _store_candidates(key_out, id_out, row, c, best_key, best_id, KP: tc.constexpr):
    lane = c * KP + tc.arange(0, KP)
    row64 = row.astype(tc.int64)
    tc.store(key_out.ptr + row64 * key_out.stride(0) + lane, best_key)
    tc.store(id_out.ptr + row64 * id_out.stride(0) + lane, best_id)


SIGNATURES = {
    "topk_chunk_kernel": "x=bf16[?,?], key_out=f32[?,?], id_out=i32[?,?], values=bf16[?,?], indices=i64[?,?], "
                         "k=i32, LARGEST=True, FINAL=False, KP=64, BLOCK=4096",
    "topk_merge_kernel": "x=bf16[?,?], key_in=f32[?,?], id_in=i32[?,?], key_out=f32[?,?], id_out=i32[?,?], "
                         "values=bf16[?,?], indices=i64[?,?], k=i32, FINAL=True, KP=64, BLOCK=2048",
}
# The options the plans launch SIGNATURES with (`warps_for`; tests/test_ptxas.py).
OPTIONS = {"topk_chunk_kernel": {"num_warps": 8, "fast_math": True},
           "topk_merge_kernel": {"num_warps": 4, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("topk_chunk_kernel", "x=f32[?,?], key_out=f32[?,?], id_out=i32[?,?], values=f32[?,?], indices=i64[?,?], "
                          "k=i32, LARGEST=False, FINAL=True, KP=1, BLOCK=128"),
    ("topk_chunk_kernel", "x=f16[?,?], key_out=f32[?,?], id_out=i32[?,?], values=f16[?,?], indices=i64[?,?], "
                          "k=i32, LARGEST=True, FINAL=True, KP=1024, BLOCK=4096"),
    ("topk_merge_kernel", "x=f32[?,?], key_in=f32[?,?], id_in=i32[?,?], key_out=f32[?,?], id_out=i32[?,?], "
                          "values=f32[?,?], indices=i64[?,?], k=i32, FINAL=False, KP=8, BLOCK=4096"),
]


def warps_for(block: int, t: TopkTuning) -> int:
    """Warps of a selection over a tile of `block` entries: `per_thread` each, 1..max_warps."""
    return max(1, min(block // (32 * t.per_thread), t.max_warps))


def levels(n_cols: int, k: int, t: TopkTuning) -> List[Tuple[int, int]]:
    """(BLOCK, programs per row) of each selection level of rows of `n_cols`: chunks of
    `chunk` columns (at least 4 KP, so that a level shrinks the row at least 4 times),
    then merges of `merge_block` candidates (also at least 4 KP) until one program per
    row is left."""
    kp = next_pow2(k)
    block = min(next_pow2(n_cols), max(t.chunk, 4 * kp))
    out = [(block, tc.cdiv(n_cols, block))]
    while out[-1][1] > 1:
        m = out[-1][1] * kp
        block = min(next_pow2(m), max(t.merge_block, 4 * kp))
        out.append((block, tc.cdiv(m, block)))
    return out


def plan(x: Arr, k: int, largest: bool, target: Target, values: str = "values",
         indices: str = "indices") -> List[Launch]:
    """The launches of topk of `x`'s rows (operand "x", its rows as a 2-D view) into the
    operands named `values` (x's dtype) and `indices` (int64), both (n_rows, k) row views:
    CANDIDATES (one program per chunk of a row, the result itself when a row is one
    chunk), then MERGE levels (`levels`), the last writing the result. Candidate levels are
    Temps "topk_key<i>" (f32) and "topk_id<i>" (i32) of (n_rows, programs * KP)."""
    t = tuning_for(target).topk
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    if n_rows == 0 or k == 0:
        return []
    kp = next_pow2(k)
    lv = levels(n_cols, k, t)
    launches = []
    prev: Optional[Tuple[Temp, Temp]] = None
    for i, (block, programs) in enumerate(lv):
        final = i == len(lv) - 1
        if final:
            outs, temps = (values, indices), ()
        else:
            temps = (Temp(f"topk_key{i}", (n_rows, programs * kp), tc.float32),
                     Temp(f"topk_id{i}", (n_rows, programs * kp), tc.int32))
            outs = (temps[0].name, temps[1].name)
        common = dict(FINAL=final, KP=kp, BLOCK=block)
        if prev is None:
            launches.append(Launch.of(topk_chunk_kernel, (n_rows, programs), ("x",) + outs + (values, indices, k),
                                      warps_for(block, t), temps=temps, schedule=CANDIDATES, LARGEST=bool(largest),
                                      **common))
        else:
            launches.append(Launch.of(topk_merge_kernel, (n_rows, programs),
                                      ("x", prev[0].name, prev[1].name) + outs + (values, indices, k),
                                      warps_for(block, t), temps=temps, schedule=MERGE, **common))
        prev = temps or None
    return launches


def check_k(k, n_cols: int, name: str = "k") -> int:
    """`k` as an int in [0, min(n_cols, MAX_K)]; TypeError / ValueError naming it otherwise."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(k).__name__}")
    k = int(k)
    if n_cols >= NONE:
        raise ValueError(f"rows of {n_cols} elements are too long (indices are 32-bit: fewer than {NONE})")
    if k < 0 or k > n_cols:
        raise ValueError(f"{name}={k} is out of range for rows of {n_cols} elements (expected 0 <= {name} <= "
                         f"{n_cols})")
    if k > MAX_K:
        raise ValueError(f"{name}={k} is more than topk supports ({MAX_K})")
    return k


def _check_flag(v, name: str) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    return bool(v)


@planned
def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *, out=None):  # noqa: A002
    """topk(x, k, dim=-1, largest=True, sorted=True, *, out=None) -> (values, indices) over the last
    dimension (torch's names).

    x: f16, bf16 or f32, any leading shape (last stride 1, leading dimensions
    flattenable); only the last dimension (dim=-1) is supported. 0 <= k <= the row
    length and k <= MAX_K (1024). values have x's dtype and shape (..., k), indices are
    int64. Order: the module doc (best first, equal values by increasing index; NaN as
    +inf); sorted=False gives the same order. Rows of any length: chunks of 4096 (at
    least 4 * next_pow2(k)) columns, then merges of their candidates (`levels`).
    out: None or a (values, indices) pair of arrays of those shapes and dtypes (as
    torch.topk's out=), written and returned; a wrong one is a ValueError/TypeError
    naming out, before anything is written.
    """
    values_out, indices_out = out_pair(out, "topk")
    a = as_array(x, "x")
    check_float(a, "x")
    if a.ndim == 0:
        raise ValueError("topk: x must have at least 1 dimension")
    if normalize_dim(dim, a.ndim) != a.ndim - 1:
        raise ValueError(f"topk: only the last dimension is supported (dim=-1), got dim={dim} for shape {a.shape}")
    largest = _check_flag(largest, "largest")
    _check_flag(sorted, "sorted")
    k = check_k(k, a.shape[-1])
    vals = output(values_out, a, a.shape[:-1] + (k,), a.dtype, "out[0] (values)")
    idx = output(indices_out, a, a.shape[:-1] + (k,), tc.int64, "out[1] (indices)")
    if vals.numel == 0:
        return vals.obj, idx.obj
    xv, _, _ = rows_of(a, "x")
    vv, _, _ = rows_of(vals, "values")
    iv, _, _ = rows_of(idx, "indices")
    execute(plan(a, k, largest, target_of(a)), Operands({"x": a}, {"x": xv, "values": vv, "indices": iv}))
    return vals.obj, idx.obj
