"""cross_entropy forward: per row logsumexp(logits) - logits[target], then an
optional mean or sum over the rows that are not ignored.

The per-row kernel reads each row once. A row that fits in one tile picks the
logit of the target class out of the tile (a compare and a sum); a longer row
streams by with an online logsumexp and reads that logit with one masked load.
Either way a target outside [0, C) never reads out of bounds: such a row gets
NaN. A second, single-program kernel reduces the per-row losses in a
fixed order, so "mean" and "sum" are deterministic.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import List, Optional

import tilec as tc
from tilec.target import Target

from ._common import (DEPENDENT, Arr, as_array, check_float, check_same_place, flat_view, next_pow2, output,
                      row_config, rows_of, target_of, view)
from ._plan import planned
from .launches import Launch, Operands, Temp, execute
from .schedules import LOOPED, ONE_TILE, SPLIT, cross_entropy_split
from .tuning import TABLES, CrossEntropyTuning, row_tuning
from ._window import row_window, single_row_window, window_start, window_steps, window_tile
from .softmax import _lane_stats

__all__ = ["cross_entropy", "plan", "check_label_smoothing"]

NEG_INF = float("-inf")
NAN = float("nan")
LOG2E = 1.4426950408889634
# The sm_90 table's numbers under their old names (tests, docs): plans read `row_tuning(target)`.
_T = TABLES["sm_90"].cross_entropy
MAX_REDUCE_BLOCK, REDUCE_PER_THREAD, SPLIT_ROWS = _T.max_reduce_block, _T.reduce_per_thread, _T.split_rows
LOOP_BLOCK, LOOP_WARPS, WIDE_LOOP_BLOCK, WIDE_LOOP_WARPS = _T.loop_block, _T.loop_warps, _T.wide_loop_block, \
    _T.wide_loop_warps
SHORT_LOOP_BLOCK, SHORT_LOOP_WARPS, WINDOW_LOOP_MAX_COLS = _T.short_loop_block, _T.short_loop_warps, \
    _T.window_loop_max_cols
GRAD_CHUNK_WARPS = _T.short_loop_warps


@tc.func
def _row_loss(lse, picked, tgt, n_cls, ignore_index):
    valid = (tgt >= 0) & (tgt < n_cls)
    loss = tc.where(valid, lse - picked, NAN)
    return tc.where(tgt == ignore_index, 0.0, loss)


@tc.kernel
def ce_tile_kernel(logits, target, loss, ignore_index, ROWS: tc.constexpr, BLOCK: tc.constexpr,
                   WINDOW: tc.constexpr = 0):
    # WINDOW (ROWS = 1): a row off 32-byte sectors, read in its aligned window (_window.py);
    # the target's logit then comes from one scalar load.
    tc.launch_dependents()  # the mean/sum (a dependent launch) may take its place now
    pid = tc.program_id(0)
    if WINDOW:
        base, lead = window_start(logits, pid, WINDOW)
        w = window_tile(logits, base, lead, logits.shape[1], 0, NEG_INF, BLOCK)[0].astype(tc.float32)
        m = tc.max(w)
        _store_loss(logits, target, loss, pid, m + tc.log(tc.sum(tc.exp(w - m))), ignore_index)
    else:
        n_cls = logits.shape[1]
        t = tc.load(logits, index=(pid, 0), shape=(ROWS, BLOCK), padding=NEG_INF).astype(tc.float32)
        tgt = tc.load(target, index=(pid,), shape=(ROWS,))[:, None]
        m = tc.max(t, axis=1, keep_dims=True)
        lse = m + tc.log(tc.sum(tc.exp(t - m), axis=1, keep_dims=True))
        picked = tc.sum(tc.where(tc.arange(0, BLOCK)[None, :] == tgt, t, 0.0), axis=1, keep_dims=True)
        row_loss = _row_loss(lse, picked, tgt, n_cls, ignore_index)
        tc.store(loss, index=(pid,), tile=tc.reshape(row_loss, (ROWS,)).astype(loss.dtype))


@tc.func
def _logits_groups(logits, base, lead, j, BLOCK: tc.constexpr, WINDOW: tc.constexpr):
    # Tile j of the row (from `base`) as its (BLOCK / G, G) 16-byte groups in the logits'
    # dtype, -inf outside the row: each group sits in one thread, so a step's max and sum
    # are taken in-thread first. Read once, but not eviction_policy="evict_first": on an
    # H200 that gained 1.2 points of copy at 4096x32000 bf16 and lost 2.6-5 at 16384x32000,
    # 4096x128256 and f32 8192x32000.
    n_cls = logits.shape[1]
    if WINDOW:  # rows off 32-byte sectors: tiles of the aligned window (_window.py)
        t, _ = window_tile(logits, base, lead, n_cls, j, NEG_INF, BLOCK, GROUPED=True)
        return t
    G = 16 // logits.dtype.itemsize
    cols = j * BLOCK + tc.arange(0, BLOCK // G)[:, None] * G + tc.arange(0, G)[None, :]
    return tc.load(base + cols, mask=cols < n_cls, other=NEG_INF)


@tc.func
def _exp2_from(t, m2):
    return tc.exp2(t.astype(tc.float32) * LOG2E - m2)


@tc.func
def _online(m_g, s_g, t0, t1, t2, t3):
    # One update of the per-group running max (of the logits) and sum of 2**((t - max)
    # log2 e) by four grouped tiles: the max is taken in the logits' dtype (exact) and
    # in-thread, so only the loaded tiles stay live (bf16 2048 x 4 at 8 warps: 32
    # registers, 48 with a state per element) and one rescale serves 4 G elements.
    # Base 2 with log2 e folded in: each element costs one fma and one ex2.approx.
    top = tc.max(tc.maximum(tc.maximum(t0, t1), tc.maximum(t2, t3)), axis=1).astype(tc.float32)
    m_new = tc.maximum(m_g, top)
    # While a group has seen only -inf, shift by 0 so the rescale is exp(-inf) = 0, not NaN.
    m1 = tc.where(m_new == NEG_INF, 0.0, m_new) * LOG2E
    m2 = m1[:, None]
    e = (_exp2_from(t0, m2) + _exp2_from(t1, m2)) + (_exp2_from(t2, m2) + _exp2_from(t3, m2))
    return m_new, s_g * tc.exp2(m_g * LOG2E - m1) + tc.sum(e, axis=1)


@tc.kernel
def ce_loop_kernel(logits, target, loss, part_m, part_s, ignore_index, steps_per_chunk, BLOCK: tc.constexpr,
                   SPLIT: tc.constexpr, WINDOW: tc.constexpr = 0):
    # Program (row, chunk) walks steps [chunk * steps_per_chunk, ...) of four BLOCK-wide
    # tiles of its row; a step past the row is all padding (no memory traffic). Whole rows
    # (SPLIT False) end with the loss; chunks leave (max, sum of exp(t - max)) partials.
    # Once every program has started, the merge or the mean (dependent launches) may be
    # placed and count targets while the last ones run (H100 4096x32000 bf16: 0.4 us).
    tc.launch_dependents()
    row = tc.program_id(0)
    chunk = tc.program_id(1)
    if WINDOW:
        base, lead = window_start(logits, row, WINDOW)
    else:
        base, lead = logits.ptr + row.astype(tc.int64) * logits.stride(0), 0
    G = 16 // logits.dtype.itemsize
    m_g = tc.full((BLOCK // G,), NEG_INF, tc.float32)
    s_g = tc.zeros((BLOCK // G,), tc.float32)
    k0 = chunk * steps_per_chunk
    for k in range(k0, k0 + steps_per_chunk):
        # Four tiles per step, all loads issued before the math: 4x the bytes in flight.
        t0 = _logits_groups(logits, base, lead, 4 * k, BLOCK, WINDOW)
        t1 = _logits_groups(logits, base, lead, 4 * k + 1, BLOCK, WINDOW)
        t2 = _logits_groups(logits, base, lead, 4 * k + 2, BLOCK, WINDOW)
        t3 = _logits_groups(logits, base, lead, 4 * k + 3, BLOCK, WINDOW)
        m_g, s_g = _online(m_g, s_g, t0, t1, t2, t3)
    m = tc.max(m_g)
    if SPLIT:
        m_safe = tc.where(m == NEG_INF, 0.0, m)  # a chunk of only -inf: sum 0, not NaN
        tc.store(part_m, index=(row, chunk), tile=tc.full((1, 1), m, tc.float32))
        tc.store(part_s, index=(row, chunk), tile=tc.full((1, 1), tc.sum(s_g * tc.exp(m_g - m_safe)),
                                                            tc.float32))
    else:
        lse = m + tc.log(tc.sum(s_g * tc.exp(m_g - m)))
        _store_loss(logits, target, loss, row, lse, ignore_index)


@tc.func
def _store_loss(logits, target, loss, row, lse, ignore_index):
    n_cls = logits.shape[1]
    tgt = tc.load(target, index=(row,), shape=(1,))
    # The target's logit by one masked scalar load: never out of bounds, NaN loss if invalid.
    ok = (tgt >= 0) & (tgt < n_cls)
    picked = tc.load(logits.ptr + row * logits.stride(0) + tc.where(ok, tgt, 0), mask=ok, other=0.0)
    row_loss = _row_loss(lse, picked.astype(tc.float32), tgt, n_cls, ignore_index)
    tc.store(loss, index=(row,), tile=row_loss.astype(loss.dtype))


@tc.kernel
def ce_combine_kernel(logits, target, loss, part_m, part_s, ignore_index, CHUNKS: tc.constexpr):
    # One row per program: the row's chunk partials (max, sum) merged into its logsumexp.
    row = tc.program_id(0)
    m = tc.load(part_m, index=(row, 0), shape=(1, CHUNKS), padding=NEG_INF)
    s = tc.load(part_s, index=(row, 0), shape=(1, CHUNKS), padding=0.0)
    top = tc.max(m)
    lse = top + tc.log(tc.sum(s * tc.exp(m - top)))
    _store_loss(logits, target, loss, row, lse, ignore_index)


@tc.kernel
def ce_reduce_kernel(loss, target, out, ignore_index, MEAN: tc.constexpr, BLOCK: tc.constexpr):
    # One program walks all the rows in order: deterministic, and the per-row losses
    # are a C-th of the logits' size. Launched as a dependent of the row kernel: the
    # targets (which that kernel only reads) are counted while it ends, the losses it
    # writes are read after the wait.
    n = loss.shape[0]
    count = tc.zeros((BLOCK,), tc.float32)
    for k in range(tc.cdiv(n, BLOCK)):
        tgt = tc.load(target, index=(k,), shape=(BLOCK,))
        counted = (k * BLOCK + tc.arange(0, BLOCK) < n) & (tgt != ignore_index)
        count += tc.where(counted, 1.0, 0.0)
    tc.grid_dependency_wait()
    total = tc.zeros((BLOCK,), tc.float32)
    for k in range(tc.cdiv(n, BLOCK)):
        total += tc.load(loss, index=(k,), shape=(BLOCK,))
    result = tc.sum(total)
    if MEAN:
        result = result / tc.sum(count)  # every row ignored: 0 / 0 = NaN, as torch
    tc.store(out, index=(0,), tile=tc.full((1,), result, tc.float32).astype(out.dtype))


# ----------------------------------------------------------------------------- the gradient (return_grad)
# d loss / d logits = (softmax(row) - onehot(target)) * f, f = 1 / (rows not ignored) for
# "mean", 1 for "sum" and "none" (each row's own loss), 0 on ignored rows, NaN on rows whose
# target is out of range (their loss is NaN). Written by the forward's launches, while the
# row is at hand: no logits-sized tensor needs to be kept for a backward.
@tc.kernel
def ce_scale_kernel(target, scale, ignore_index, MEAN: tc.constexpr, BLOCK: tc.constexpr):
    # One program: the factor f of the rows that count (1 / their number for the mean).
    n = target.shape[0]
    count = tc.zeros((BLOCK,), tc.float32)
    for k in range(tc.cdiv(n, BLOCK)):
        tgt = tc.load(target, index=(k,), shape=(BLOCK,))
        count += tc.where((k * BLOCK + tc.arange(0, BLOCK) < n) & (tgt != ignore_index), 1.0, 0.0)
    f = 1.0
    if MEAN:
        f = 1.0 / tc.sum(count)   # every row ignored: inf, never used (every row's gradient is 0)
    tc.store(scale, index=(0,), tile=tc.full((1,), f, tc.float32))


@tc.func
def _grad_of(t, cols, lse, tgt, scale, n_cls, ignore_index, EPS: tc.constexpr):
    # the gradient of logits t (f32, -inf padding) at columns `cols` of rows (lse, tgt); with
    # label smoothing EPS the target distribution is (1 - EPS) onehot + EPS / C
    f = tc.where((tgt >= 0) & (tgt < n_cls), tc.sum(tc.load(scale, index=(0,), shape=(1,))), NAN)
    if EPS:
        d = (tc.exp(t - lse) - tc.where(cols == tgt, 1.0 - EPS, 0.0) - EPS / n_cls) * f
    else:
        d = (tc.exp(t - lse) - tc.where(cols == tgt, 1.0, 0.0)) * f
    return tc.where(tgt == ignore_index, 0.0, d)


@tc.kernel
def ce_grad_tile_kernel(logits, target, loss, grad, scale, ignore_index, ROWS: tc.constexpr, BLOCK: tc.constexpr,
                        EPS: tc.constexpr = 0.0):
    # ce_tile_kernel (no windows) that also writes the rows' gradient from the held tile; grad
    # may be logits itself (the tile is read before it is written).
    tc.launch_dependents()
    pid = tc.program_id(0)
    n_cls = logits.shape[1]
    t = tc.load(logits, index=(pid, 0), shape=(ROWS, BLOCK), padding=NEG_INF).astype(tc.float32)
    tgt = tc.load(target, index=(pid,), shape=(ROWS,))[:, None]
    m = tc.max(t, axis=1, keep_dims=True)
    lse = m + tc.log(tc.sum(tc.exp(t - m), axis=1, keep_dims=True))
    cols = tc.arange(0, BLOCK)[None, :]
    picked = tc.sum(tc.where(cols == tgt, t, 0.0), axis=1, keep_dims=True)
    tc.store(loss, index=(pid,), tile=tc.reshape(_row_loss(lse, picked, tgt, n_cls, ignore_index),
                                                 (ROWS,)).astype(loss.dtype))
    tc.store(grad, index=(pid, 0), tile=_grad_of(t, cols, lse, tgt, scale, n_cls, ignore_index, EPS).astype(grad.dtype))


@tc.func
def _write_grad(logits, target, grad, scale, row, k0, n_k, lse, ignore_index, BLOCK: tc.constexpr,
                EPS: tc.constexpr):
    # the gradient of row `row`'s tiles [k0, k0 + n_k), each read before it is written
    n_cls = logits.shape[1]
    tgt = tc.reshape(tc.load(target, index=(row,), shape=(1,)), (1, 1))
    for k in range(k0, k0 + n_k):
        t = tc.load(logits, index=(row, k), shape=(1, BLOCK), padding=NEG_INF).astype(tc.float32)
        cols = k * BLOCK + tc.arange(0, BLOCK)[None, :]
        tc.store(grad, index=(row, k), tile=_grad_of(t, cols, lse, tgt, scale, n_cls, ignore_index,
                                                     EPS).astype(grad.dtype))


@tc.kernel
def ce_grad_loop_kernel(logits, target, loss, grad, scale, ignore_index, BLOCK: tc.constexpr,
                        EPS: tc.constexpr = 0.0):
    # One program per long row: the online logsumexp, the loss, then the gradient (the row
    # read twice). grad may be logits: the target's logit is loaded first, and the
    # logsumexp's cross-thread reductions (barriers) order that load before every store of
    # the gradient, whichever thread makes them.
    tc.launch_dependents()
    row = tc.program_id(0)
    n_cls = logits.shape[1]
    tgt = tc.load(target, index=(row,), shape=(1,))
    ok = (tgt >= 0) & (tgt < n_cls)
    picked = tc.load(logits.ptr + row * logits.stride(0) + tc.where(ok, tgt, 0), mask=ok, other=0.0)
    n_k = tc.cdiv(n_cls, BLOCK)
    m, s = _lane_stats(logits, row, 0, n_k, 0, BLOCK)
    lse = m + tc.log(s)
    row_loss = _row_loss(lse, picked.astype(tc.float32), tgt, n_cls, ignore_index)
    tc.store(loss, index=(row,), tile=row_loss.astype(loss.dtype))
    _write_grad(logits, target, grad, scale, row, 0, n_k, lse, ignore_index, BLOCK, EPS)


@tc.kernel
def ce_grad_chunk_kernel(logits, target, grad, part_m, part_s, scale, ignore_index, tiles_per_chunk,
                         CHUNKS: tc.constexpr, BLOCK: tc.constexpr, EPS: tc.constexpr = 0.0):
    # Split rows, after ce_combine_kernel wrote the losses: program (row, c) merges its row's
    # partials into the logsumexp (as the merge did) and writes its chunk's gradient.
    tc.launch_dependents()
    row = tc.program_id(0)
    c = tc.program_id(1)
    m = tc.load(part_m, index=(row, 0), shape=(1, CHUNKS), padding=NEG_INF)
    s = tc.load(part_s, index=(row, 0), shape=(1, CHUNKS), padding=0.0)
    top = tc.max(m)
    lse = top + tc.log(tc.sum(s * tc.exp(m - top)))
    _write_grad(logits, target, grad, scale, row, c * tiles_per_chunk, tiles_per_chunk, lse, ignore_index, BLOCK,
                EPS)


# ----------------------------------------------------------------------------- label smoothing
# torch's loss with label smoothing e over C classes: (1 - e) nll + (e / C) sum_c -log_softmax(x)_c
# = (lse - x[t]) + e (x[t] - mean(x)) per row, 0 on ignored rows (the mean divides by the same
# count). The second term needs no logsumexp: one pass over the row before the loss kernels
# (which may overwrite the logits with their gradient) writes it, and a last elementwise
# launch adds it to their f32 losses.
@tc.kernel
def ce_smooth_kernel(logits, target, smooth, ignore_index, EPS: tc.constexpr, BLOCK: tc.constexpr):
    # One program per row, tiles of BLOCK columns: EPS * (x[t] - mean(x)) in f32; 0 on ignored
    # rows and on rows whose target is out of range (their loss is NaN already).
    row = tc.program_id(0)
    n_cls = logits.shape[1]
    total = tc.zeros((1, BLOCK), tc.float32)
    for k in range(tc.cdiv(n_cls, BLOCK)):
        total += tc.load(logits, index=(row, k), shape=(1, BLOCK), padding=0.0).astype(tc.float32)
    tgt = tc.load(target, index=(row,), shape=(1,))
    ok = (tgt >= 0) & (tgt < n_cls) & (tgt != ignore_index)
    picked = tc.load(logits.ptr + row.astype(tc.int64) * logits.stride(0) + tc.where(ok, tgt, 0), mask=ok,
                     other=0.0)
    term = EPS * (picked.astype(tc.float32) - tc.sum(total) / n_cls)
    tc.store(smooth, index=(row,), tile=tc.where(ok, term, 0.0))


@tc.kernel
def ce_smooth_add_kernel(raw, smooth, loss, BLOCK: tc.constexpr):
    # loss = raw + smooth (f32 sums, stored in loss's dtype); 1-D, loss may be raw. The mean/sum
    # (a dependent launch) may count the targets meanwhile: it waits before reading the losses.
    tc.launch_dependents()
    pid = tc.program_id(0)
    t = tc.load(raw, index=(pid,), shape=(BLOCK,)).astype(tc.float32) + tc.load(smooth, index=(pid,), shape=(BLOCK,))
    tc.store(loss, index=(pid,), tile=t.astype(loss.dtype))


SIGNATURES = {
    "ce_tile_kernel": "logits=bf16[?,?], target=i64[?], loss=f32[?], ignore_index=i32, ROWS=1, BLOCK=16384",
    "ce_loop_kernel": "logits=f16[?,?], target=i64[?], loss=f32[?], part_m=f32[?], part_s=f32[?], ignore_index=i32, "
                      "steps_per_chunk=i32, BLOCK=8192, SPLIT=False",
    "ce_combine_kernel": "logits=bf16[?,?], target=i64[?], loss=f32[?], part_m=f32[?,?], part_s=f32[?,?], "
                         "ignore_index=i32, CHUNKS=4",
    "ce_reduce_kernel": "loss=f32[?], target=i64[?], out=f16[?], ignore_index=i32, MEAN=True, BLOCK=4096",
    "ce_scale_kernel": "target=i64[?], scale=f32[?], ignore_index=i32, MEAN=True, BLOCK=4096",
    "ce_grad_tile_kernel": "logits=bf16[?,?], target=i64[?], loss=f32[?], grad=bf16[?,?], scale=f32[?], "
                           "ignore_index=i32, ROWS=1, BLOCK=16384",
    "ce_grad_loop_kernel": "logits=bf16[?,?], target=i64[?], loss=f32[?], grad=bf16[?,?], scale=f32[?], "
                           "ignore_index=i32, BLOCK=4096",
    "ce_grad_chunk_kernel": "logits=f32[?,?], target=i32[?], grad=f32[?,?], part_m=f32[?,?], part_s=f32[?,?], "
                            "scale=f32[?], ignore_index=i32, tiles_per_chunk=i32, CHUNKS=64, BLOCK=2048",
    "ce_smooth_kernel": "logits=bf16[?,?], target=i64[?], smooth=f32[?], ignore_index=i32, EPS=0.1, BLOCK=4096",
    "ce_smooth_add_kernel": "raw=f32[?], smooth=f32[?], loss=bf16[?], BLOCK=1024",
}
# The options the entry points launch SIGNATURES with (tile elements / 512 warps; tests/test_ptxas.py).
OPTIONS = {"ce_tile_kernel": {"num_warps": 16, "fast_math": True},
           "ce_loop_kernel": {"num_warps": WIDE_LOOP_WARPS, "fast_math": True},
           "ce_combine_kernel": {"num_warps": 1, "fast_math": True, **DEPENDENT},
           "ce_reduce_kernel": {"num_warps": 8, "fast_math": True, **DEPENDENT},
           "ce_scale_kernel": {"num_warps": 8, "fast_math": True},
           "ce_grad_tile_kernel": {"num_warps": 16, "fast_math": True},
           "ce_grad_loop_kernel": {"num_warps": 8, "fast_math": True},
           "ce_grad_chunk_kernel": {"num_warps": GRAD_CHUNK_WARPS, "fast_math": True},
           "ce_smooth_kernel": {"num_warps": 8, "fast_math": True},
           "ce_smooth_add_kernel": {"num_warps": 2, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("ce_tile_kernel", "logits=f32[?,?], target=i32[?], loss=f32[?], ignore_index=i32, ROWS=64, BLOCK=32"),
    ("ce_loop_kernel", "logits=bf16[?,?], target=i32[?], loss=bf16[?], part_m=bf16[?], part_s=bf16[?], "
                       "ignore_index=i32, steps_per_chunk=i32, BLOCK=4096, SPLIT=False"),
    ("ce_loop_kernel", "logits=bf16[?,?], target=i64[?], loss=f32[?], part_m=f32[?,?], part_s=f32[?,?], "
                       "ignore_index=i32, steps_per_chunk=i32, BLOCK=2048, SPLIT=True"),
    # whole rows off 32-byte sectors (`loop_config`: 8 warps)
    ("ce_loop_kernel", "logits=bf16[?,?], target=i64[?], loss=f32[?], part_m=f32[?], part_s=f32[?], ignore_index=i32, "
                       "steps_per_chunk=i32, BLOCK=2048, SPLIT=False, WINDOW=16"),
    ("ce_loop_kernel", "logits=f32[?,?], target=i64[?], loss=f32[?], part_m=f32[?], part_s=f32[?], ignore_index=i32, "
                       "steps_per_chunk=i32, BLOCK=2048, SPLIT=False, WINDOW=8"),
    # 2-byte rows off sectors past 65536 classes (`loop_config`: 16 warps)
    ("ce_loop_kernel", "logits=bf16[?,?], target=i64[?], loss=f32[?], part_m=f32[?], part_s=f32[?], ignore_index=i32, "
                       "steps_per_chunk=i32, BLOCK=4096, SPLIT=False, WINDOW=16"),
    ("ce_combine_kernel", "logits=f32[?,?], target=i32[?], loss=bf16[?], part_m=f32[?,?], part_s=f32[?,?], "
                          "ignore_index=i32, CHUNKS=128"),
    ("ce_reduce_kernel", "loss=f32[?], target=i32[?], out=f32[?], ignore_index=i32, MEAN=False, BLOCK=1024"),
    ("ce_reduce_kernel", "loss=f32[?], target=i64[?], out=bf16[?], ignore_index=i32, MEAN=True, BLOCK=8192"),
    ("ce_reduce_kernel", "loss=f32[?]:div=16, target=i64[?]:div=16, out=f32[?], ignore_index=i32, MEAN=True, "
                         "BLOCK=4096"),
    # label smoothing's gradients (EPS a constexpr: one compile per smoothing value)
    ("ce_grad_tile_kernel", "logits=bf16[?,?], target=i64[?], loss=f32[?], grad=bf16[?,?], scale=f32[?], "
                            "ignore_index=i32, ROWS=1, BLOCK=16384, EPS=0.1"),
    ("ce_grad_loop_kernel", "logits=bf16[?,?], target=i64[?], loss=f32[?], grad=bf16[?,?], scale=f32[?], "
                            "ignore_index=i32, BLOCK=4096, EPS=0.1"),
    ("ce_grad_chunk_kernel", "logits=f32[?,?], target=i32[?], grad=f32[?,?], part_m=f32[?,?], part_s=f32[?,?], "
                             "scale=f32[?], ignore_index=i32, tiles_per_chunk=i32, CHUNKS=64, BLOCK=2048, EPS=0.1"),
]

_REDUCTIONS = ("mean", "sum", "none")
GRAD_LOOP_BLOCK, GRAD_LOOP_WARPS = 4096, 8     # the gradient's long rows (as softmax's looped rows)


def loop_config(n_rows: int, n_cls: int, window: int = 0, itemsize: int = 2, t: Optional[CrossEntropyTuning] = None):
    """(BLOCK, num_warps) of the looped kernel: `short_loop_block` at `short_loop_warps` for
    rows split into chunks (fewer than `split_rows` rows) and for whole rows read through
    windows (`window` > 0), except 2-byte ones of more than `window_loop_max_cols` classes
    (`loop_block` at `loop_warps`); rows on sectors take `wide_loop_block` at
    `wide_loop_warps` for 2-byte logits, `loop_block` at `loop_warps` for f32."""
    t = t or TABLES["sm_90"].cross_entropy
    if n_rows < t.split_rows or (window and (itemsize != 2 or n_cls <= t.window_loop_max_cols)):
        return t.short_loop_block, t.short_loop_warps
    if not window and itemsize == 2:
        return t.wide_loop_block, t.wide_loop_warps
    return t.loop_block, t.loop_warps


def chunk_count(n_rows: int, n_cls: int, window: int = 0, block: Optional[int] = None,
                t: Optional[CrossEntropyTuning] = None):
    """(chunks per row, steps per chunk) of the looped kernel: enough chunks for about
    `split_rows` programs in all, each at least one step of 4 * `block` classes (rows read
    in aligned windows, `window` > 0: steps from the window's start; `schedules.cross_entropy_split`)."""
    t = t or TABLES["sm_90"].cross_entropy
    return cross_entropy_split(n_rows, window_steps(n_cls, window, 4 * (block or t.short_loop_block)), t)


def reduce_config(n_rows: int, t: Optional[CrossEntropyTuning] = None):
    """(BLOCK, num_warps) of the single-program mean/sum: one tile of next_pow2(rows)
    up to `max_reduce_block`, `reduce_per_thread` elements per thread, 1..16 warps."""
    t = t or TABLES["sm_90"].cross_entropy
    block = min(next_pow2(n_rows), t.max_reduce_block)
    return block, max(1, block // (32 * t.reduce_per_thread))


def plan(logits: Arr, labels: Arr, reduction: str, target: Target, grad: bool = False,
         smoothing: float = 0.0) -> List[Launch]:
    """The launches of cross_entropy over `logits`' rows (descriptions) with class indices
    `labels`, on `target`. Operands: "logits" (rows as a 2-D view), "target" (the indices, 1-D),
    "loss" (the per-row losses, 1-D), "result" (the 1-element mean or sum; not for "none"),
    "ignore_index" (the int); with `grad`, "grad" (rows as a 2-D view). The schedules: ONE_TILE,
    else LOOPED or SPLIT (schedules.py), then for "mean"/"sum" one program reducing the losses.
    With `grad` the row kernels also write the gradient (`_grad_rows`). With label `smoothing`
    > 0 the rows are read once more first (`_smoothed`)."""
    t = row_tuning(target).cross_entropy
    n_cls, n_rows = logits.shape[-1], math.prod(logits.shape[:-1])
    cfg = row_config(n_cls, n_rows)
    launches = []
    if grad:
        launches += _grad_rows(logits, reduction, n_rows, n_cls, cfg, t, smoothing)
    else:
        window = row_window(logits, "logits")
        # A single row off 32-byte sectors through its aligned window; packed rows keep column tiles.
        cfg, window = single_row_window(cfg, n_cls, n_rows, window)
        if cfg.single:
            launches.append(Launch.of(ce_tile_kernel, cfg.grid(n_rows), ("logits", "target", "loss", "ignore_index"),
                                      cfg.num_warps, schedule=ONE_TILE, ROWS=cfg.rows, BLOCK=cfg.block,
                                      WINDOW=window))
        elif n_rows:   # (no rows: the mean of nothing is NaN, the sum 0, as torch)
            launches += _looped_rows(logits, n_rows, n_cls, t)
    if smoothing and n_rows:
        launches = _smoothed(launches, n_rows, n_cls, smoothing)
    if reduction != "none":
        block, warps = reduce_config(n_rows, t)
        launches.append(Launch.of(ce_reduce_kernel, (1,), ("loss", "target", "result", "ignore_index"), warps,
                                  options=DEPENDENT, schedule="reduce", MEAN=reduction == "mean", BLOCK=block))
    return launches


SMOOTH_BLOCK, SMOOTH_ADD_BLOCK = 4096, 1024   # (warps by the row rule: tile elements / 512, 1..16)


def check_label_smoothing(value, op: str) -> float:
    """`value` as a float in [0, 1] (torch's range), else TypeError/ValueError naming label_smoothing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{op}: label_smoothing must be a float in [0, 1], got {value!r}")
    if not 0.0 <= float(value) <= 1.0:   # (NaN fails too)
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {value!r}")
    return float(value)


def _smoothed(rows: List[Launch], n_rows: int, n_cls: int, eps: float) -> List[Launch]:
    """The row launches `rows` with label smoothing `eps`: `ce_smooth_kernel` first (the term
    eps (x[t] - mean(x)) of each row, into Temp "smooth", read before any gradient overwrites
    the logits), the rows' losses into Temp "raw" (f32), then `ce_smooth_add_kernel` writes
    "loss" = raw + smooth (one rounding to loss's dtype)."""
    smooth = Temp("smooth", (n_rows,), tc.float32, like="logits")
    raw = Temp("raw", (n_rows,), tc.float32, like="logits")
    block = min(next_pow2(n_cls), SMOOTH_BLOCK)
    first = Launch.of(ce_smooth_kernel, (n_rows,), ("logits", "target", "smooth", "ignore_index"),
                      max(block // 512, 1), temps=(smooth,), schedule="smooth", EPS=eps, BLOCK=block)
    renamed = []
    for ln in rows:
        if "loss" in ln.args:   # the row kernels' losses (the first one to name it allocates "raw")
            named = any("raw" in r.args for r in renamed)
            ln = replace(ln, args=tuple("raw" if x == "loss" else x for x in ln.args),
                         temps=ln.temps + (() if named else (raw,)))
        renamed.append(ln)
    return [first] + renamed + [
        Launch.of(ce_smooth_add_kernel, (tc.cdiv(n_rows, SMOOTH_ADD_BLOCK),), ("raw", "smooth", "loss"),
                  SMOOTH_ADD_BLOCK // 512,
                  schedule="smooth", BLOCK=SMOOTH_ADD_BLOCK)]


def _grad_rows(a: Arr, reduction: str, n_rows: int, n_cls: int, cfg, t: CrossEntropyTuning,
               smoothing: float = 0.0) -> List[Launch]:
    """The row launches of cross_entropy with its gradient: the factor f first (one program,
    `ce_scale_kernel`), then ONE_TILE (`ce_grad_tile_kernel`), LOOPED (`ce_grad_loop_kernel`,
    from `split_rows` rows) or SPLIT (the forward's chunk partials and merge, then
    `ce_grad_chunk_kernel` over the same chunks). No windows: rows off 32-byte sectors are read
    and written in column tiles."""
    if not n_rows:
        return []
    block, warps = reduce_config(n_rows, t)
    scale = Temp("scale", (1,), tc.float32, like="logits")
    launches = [Launch.of(ce_scale_kernel, (1,), ("target", "scale", "ignore_index"), warps, temps=(scale,),
                          schedule="scale", MEAN=reduction == "mean", BLOCK=block)]
    args = ("logits", "target", "loss", "grad", "scale", "ignore_index")
    eps = {"EPS": smoothing} if smoothing else {}   # (without: the kernels' default, the same PTX as before)
    if cfg.single:
        return launches + [Launch.of(ce_grad_tile_kernel, cfg.grid(n_rows), args, cfg.num_warps, schedule=ONE_TILE,
                                     ROWS=cfg.rows, BLOCK=cfg.block, **eps)]
    block, warps = loop_config(n_rows, n_cls, 0, a.dtype.itemsize, t)
    chunks, per = chunk_count(n_rows, n_cls, 0, block, t)
    if chunks == 1:
        return launches + [Launch.of(ce_grad_loop_kernel, (n_rows,), args, GRAD_LOOP_WARPS, schedule=LOOPED,
                                     BLOCK=GRAD_LOOP_BLOCK, **eps)]
    parts = tuple(Temp(name, (n_rows, chunks), tc.float32, like="logits") for name in ("part_m", "part_s"))
    return launches + [
        Launch.of(ce_loop_kernel, (n_rows, chunks), ("logits", "target", "loss", "part_m", "part_s", "ignore_index",
                                                     per), warps, temps=parts, schedule=SPLIT, BLOCK=block,
                  SPLIT=True, WINDOW=0),
        Launch.of(ce_combine_kernel, (n_rows,), ("logits", "target", "loss", "part_m", "part_s", "ignore_index"),
                  1, options=DEPENDENT, schedule=SPLIT, CHUNKS=next_pow2(chunks)),
        # after the merge (not a dependent launch): the merge reads each row's target logit first
        Launch.of(ce_grad_chunk_kernel, (n_rows, chunks), ("logits", "target", "grad", "part_m", "part_s", "scale",
                                                           "ignore_index", 4 * per), warps, schedule=SPLIT,
                  CHUNKS=next_pow2(chunks), BLOCK=block, **eps)]


def _looped_rows(a: Arr, n_rows: int, n_cls: int, t: CrossEntropyTuning) -> List[Launch]:
    window = row_window(a, "logits")
    block, warps = loop_config(n_rows, n_cls, window, a.dtype.itemsize, t)
    chunks, per = chunk_count(n_rows, n_cls, window, block, t)
    if chunks == 1:
        # the partials are not touched: the loss view stands in for them
        return [Launch.of(ce_loop_kernel, (n_rows, 1), ("logits", "target", "loss", "loss", "loss", "ignore_index",
                                                        per), warps, schedule=LOOPED, BLOCK=block, SPLIT=False,
                          WINDOW=window)]
    parts = tuple(Temp(name, (n_rows, chunks), tc.float32, like="logits") for name in ("part_m", "part_s"))
    return [Launch.of(ce_loop_kernel, (n_rows, chunks), ("logits", "target", "loss", "part_m", "part_s",
                                                         "ignore_index", per), warps, temps=parts, schedule=SPLIT,
                      BLOCK=block, SPLIT=True, WINDOW=window),
            Launch.of(ce_combine_kernel, (n_rows,), ("logits", "target", "loss", "part_m", "part_s", "ignore_index"),
                      1, options=DEPENDENT, schedule=SPLIT, CHUNKS=next_pow2(chunks))]


@planned
def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean", return_grad: bool = False,
                  grad=None, label_smoothing: float = 0.0):
    """cross_entropy(logits, target, ignore_index=-100, reduction="mean", return_grad=False, grad=None,
    label_smoothing=0.0) -> loss, or (loss, dlogits) with return_grad.

    logits: (..., C) of f16, bf16 or f32 (last stride 1, leading dimensions
    flattenable into rows, else ValueError); target: integer class indices
    (int32 or int64) of shape logits.shape[:-1]. Per row the loss is
    logsumexp(logits) - logits[target], computed in f32. Rows whose target is
    `ignore_index` contribute 0 and are left out of the mean's count; a target
    outside [0, C) gives NaN (nothing out of bounds is read). reduction="none"
    returns the per-row losses (shape logits.shape[:-1]); "sum" and "mean" a
    0-d array. The result has logits' dtype; with return_grad also dlogits (below).

    Block size: the rows use `_common.row_config` (one tile up to 16384
    classes, else an online logsumexp over steps of four tiles: of 8192
    columns at 32 warps for 2-byte rows on 32-byte sectors, of 4096 at 16
    for f32 rows on sectors and 2-byte rows off sectors past 65536 classes,
    else (rows split into chunks, rows off sectors) of 2048 at 8: `loop_config`). With fewer than SPLIT_ROWS (1024) such rows,
    each row is split into chunks of steps, about SPLIT_ROWS programs in
    all, whose (max, sum) partials a second launch merges (one program per
    row). The mean/sum is one program walking the per-row losses in tiles
    of next_pow2(rows), at most 8192, with tile / 512 warps (1..16).
    The merge and the mean/sum are dependent launches on sm_90+ (placed while
    the row kernel ends; the mean counts the targets before it waits for the
    losses: docs/stdlib.md, "Second launches as dependents").

    return_grad=True: the forward also writes dlogits, the gradient of the
    returned loss with respect to logits for an upstream gradient of 1
    (for "none": of the sum of the per-row losses, so row r's gradient is to be
    scaled by the upstream gradient of loss[r]): (softmax(row) - onehot(target))
    times 1 / (rows not ignored) for "mean", 1 for "sum" and "none"; 0 on
    ignored rows, NaN on rows whose target is out of range. It is written while
    the row is read for the loss (no logits-sized tensor needs to be kept for a
    backward), into `grad` (logits' shape and dtype; may be logits itself,
    which is then overwritten, as Liger-Kernel does) or a new array. A backward
    multiplies it by the (scalar) upstream gradient where that is not 1. The
    rows are then read in column tiles (never through windows), long rows
    twice (an online logsumexp, then the gradient).

    label_smoothing=e in [0, 1] (torch's): the target distribution is
    (1 - e) onehot(target) + e / C, so a row's loss is
    (1 - e) (lse - x[target]) + e (lse - mean(x)), 0 on ignored rows, and the
    mean divides by the same count; the gradient is
    (softmax - (1 - e) onehot - e / C) times the factor above. Each distinct
    e compiles its own kernels (a constexpr); e > 0 reads the rows once
    more before the loss kernels (a row sum) and adds one elementwise launch.
    """
    label_smoothing = check_label_smoothing(label_smoothing, "cross_entropy")
    if not isinstance(return_grad, bool):
        raise TypeError(f"cross_entropy: return_grad must be a bool, got {return_grad!r}")
    if grad is not None and not return_grad:
        raise ValueError("cross_entropy: grad= is the buffer of return_grad=True; pass return_grad=True with it")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not -2**31 <= ignore_index < 2**31:
        raise TypeError(f"cross_entropy: ignore_index must be an int32 value, got {ignore_index!r}")
    a = as_array(logits, "logits")
    check_float(a, "logits")
    t = as_array(target, "target")
    check_float(t, "target", (tc.int32, tc.int64))
    check_same_place({"logits": a, "target": t})
    if a.ndim == 0:
        raise ValueError("cross_entropy: logits must have at least 1 dimension (the classes)")
    if t.shape != a.shape[:-1]:
        raise ValueError(f"cross_entropy: target has shape {t.shape}, expected {a.shape[:-1]} "
                         f"(logits.shape[:-1] for logits of shape {a.shape})")
    if a.shape[-1] == 0:
        raise ValueError("cross_entropy: logits has 0 classes")

    xv, n_rows, n_cls = rows_of(a, "logits")
    tv = flat_view(t, "target")
    per_row_dtype = a.dtype if reduction == "none" else tc.float32
    per_row = output(None, a, a.shape[:-1], per_row_dtype)
    values = {"logits": xv, "target": tv, "loss": view(per_row, (n_rows,), (1,)), "ignore_index": ignore_index}
    result = None
    if reduction != "none":
        result = output(None, a, (), a.dtype)
        values["result"] = view(result, (1,), (1,))
    g = None
    if return_grad:
        g = output(grad, a, a.shape, a.dtype, "grad")
        values["grad"] = rows_of(g, "grad")[0]
    execute(plan(a, t, reduction, target_of(a), grad=return_grad, smoothing=label_smoothing),
            Operands({"logits": a}, values))
    loss = per_row.obj if result is None else result.obj
    return (loss, g.obj) if return_grad else loss
