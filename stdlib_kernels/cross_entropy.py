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

import tilec as tc

from ._common import (as_array, check_float, check_same_place, flat_view, launch, output, row_config, rows_of,
                      view)
from ._plan import planned

__all__ = ["cross_entropy"]

NEG_INF = float("-inf")
NAN = float("nan")
LOG2E = 1.4426950408889634
REDUCE_BLOCK = 1024
# Rows longer than one tile: 4 tiles of 2048 per step at 8 warps, 8 elements per thread
# each (a 16-byte bf16 or two f32 loads), so 4-8 loads per thread are in flight at ~60
# registers; the lane-wise state stays small.
LOOP_BLOCK = 2048
LOOP_WARPS = 8
# Issue step k + 1's loads before step k's math (74 registers instead of 48 for bf16).
LOOP_PREFETCH = True


@tc.func
def _row_loss(lse, picked, tgt, n_cls, ignore_index):
    valid = (tgt >= 0) & (tgt < n_cls)
    loss = tc.where(valid, lse - picked, NAN)
    return tc.where(tgt == ignore_index, 0.0, loss)


@tc.kernel
def ce_tile_kernel(logits, target, loss, ignore_index, ROWS: tc.constexpr, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    n_cls = logits.shape[1]
    t = tc.load(logits, index=(pid, 0), shape=(ROWS, BLOCK), padding=NEG_INF).astype(tc.float32)
    tgt = tc.load(target, index=(pid,), shape=(ROWS,))[:, None]
    m = tc.max(t, axis=1, keep_dims=True)
    lse = m + tc.log(tc.sum(tc.exp(t - m), axis=1, keep_dims=True))
    picked = tc.sum(tc.where(tc.arange(0, BLOCK)[None, :] == tgt, t, 0.0), axis=1, keep_dims=True)
    row_loss = _row_loss(lse, picked, tgt, n_cls, ignore_index)
    tc.store(loss, index=(pid,), tile=tc.reshape(row_loss, (ROWS,)).astype(loss.dtype))


@tc.func
def _online(m_lane, s_lane, t0, t1, t2, t3):
    # One update of the lane-wise running max (of the logits) and sum of 2**((t - max)
    # log2 e) by four tiles: one rescale per four elements instead of one per element.
    # Base 2 with log2 e folded in: each element costs one fma and one ex2.approx.
    m_new = tc.maximum(tc.maximum(m_lane, tc.maximum(t0, t1)), tc.maximum(t2, t3))
    # While a lane has seen only -inf, shift by 0 so the rescale is exp(-inf) = 0, not NaN.
    m2 = tc.where(m_new == NEG_INF, 0.0, m_new) * LOG2E
    e = (tc.exp2(t0 * LOG2E - m2) + tc.exp2(t1 * LOG2E - m2)) + (tc.exp2(t2 * LOG2E - m2) + tc.exp2(t3 * LOG2E - m2))
    return m_new, s_lane * tc.exp2(m_lane * LOG2E - m2) + e


@tc.func
def _step_tiles(logits, row, k, BLOCK: tc.constexpr):
    # Step k's four tiles as they are stored (2-byte logits stay 2-byte while in flight).
    t0 = tc.load(logits, index=(row, 4 * k), shape=(1, BLOCK), padding=NEG_INF)
    t1 = tc.load(logits, index=(row, 4 * k + 1), shape=(1, BLOCK), padding=NEG_INF)
    t2 = tc.load(logits, index=(row, 4 * k + 2), shape=(1, BLOCK), padding=NEG_INF)
    t3 = tc.load(logits, index=(row, 4 * k + 3), shape=(1, BLOCK), padding=NEG_INF)
    return t0, t1, t2, t3


@tc.kernel
def ce_loop_kernel(logits, target, loss, ignore_index, BLOCK: tc.constexpr, PREFETCH: tc.constexpr = True):
    row = tc.program_id(0)
    n_cls = logits.shape[1]
    tgt = tc.load(target, index=(row,), shape=(1,))
    # The target's logit by one masked scalar load: never out of bounds, NaN loss if invalid.
    ok = (tgt >= 0) & (tgt < n_cls)
    picked = tc.load(logits.ptr + row * logits.stride(0) + tc.where(ok, tgt, 0), mask=ok, other=0.0)
    m_lane = tc.full((1, BLOCK), NEG_INF, tc.float32)
    s_lane = tc.zeros((1, BLOCK), tc.float32)
    n_steps = tc.cdiv(n_cls, 4 * BLOCK)
    if PREFETCH:
        # The next step's loads issued before this step's math, so a thread's loads stay
        # in flight while it computes (a step past the row is all padding: no traffic).
        # Twice the registers for tiles: fewer programs per SM.
        a0, a1, a2, a3 = _step_tiles(logits, row, 0, BLOCK)
        for k in range(n_steps):
            b0, b1, b2, b3 = _step_tiles(logits, row, k + 1, BLOCK)
            m_lane, s_lane = _online(m_lane, s_lane, a0.astype(tc.float32), a1.astype(tc.float32),
                                     a2.astype(tc.float32), a3.astype(tc.float32))
            a0, a1, a2, a3 = b0, b1, b2, b3
    else:
        # Four tiles per step, all loads issued before the math: 4x the bytes in flight.
        for k in range(n_steps):
            t0, t1, t2, t3 = _step_tiles(logits, row, k, BLOCK)
            m_lane, s_lane = _online(m_lane, s_lane, t0.astype(tc.float32), t1.astype(tc.float32),
                                     t2.astype(tc.float32), t3.astype(tc.float32))
    m = tc.max(m_lane)
    lse = m + tc.log(tc.sum(s_lane * tc.exp(m_lane - m)))
    row_loss = _row_loss(lse, picked.astype(tc.float32), tgt, n_cls, ignore_index)
    tc.store(loss, index=(row,), tile=row_loss.astype(loss.dtype))


@tc.kernel
def ce_reduce_kernel(loss, target, out, ignore_index, MEAN: tc.constexpr, BLOCK: tc.constexpr):
    # One program walks all the rows in order: deterministic, and the per-row losses
    # are a C-th of the logits' size.
    n = loss.shape[0]
    total = tc.zeros((BLOCK,), tc.float32)
    count = tc.zeros((BLOCK,), tc.float32)
    for k in range(tc.cdiv(n, BLOCK)):
        total += tc.load(loss, index=(k,), shape=(BLOCK,))
        tgt = tc.load(target, index=(k,), shape=(BLOCK,))
        counted = (k * BLOCK + tc.arange(0, BLOCK) < n) & (tgt != ignore_index)
        count += tc.where(counted, 1.0, 0.0)
    result = tc.sum(total)
    if MEAN:
        result = result / tc.sum(count)  # every row ignored: 0 / 0 = NaN, as torch
    tc.store(out, index=(0,), tile=tc.full((1,), result, tc.float32).astype(out.dtype))


SIGNATURES = {
    "ce_tile_kernel": "logits=bf16[?,?], target=i64[?], loss=f32[?], ignore_index=i32, ROWS=1, BLOCK=16384",
    "ce_loop_kernel": "logits=f16[?,?], target=i64[?], loss=f32[?], ignore_index=i32, BLOCK=2048",
    "ce_reduce_kernel": "loss=f32[?], target=i64[?], out=f16[?], ignore_index=i32, MEAN=True, BLOCK=1024",
}
# The options the entry points launch SIGNATURES with (tile elements / 512 warps; tests/test_ptxas.py).
OPTIONS = {"ce_tile_kernel": {"num_warps": 16, "fast_math": True},
           "ce_loop_kernel": {"num_warps": LOOP_WARPS, "fast_math": True},
           "ce_reduce_kernel": {"num_warps": 4, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("ce_tile_kernel", "logits=f32[?,?], target=i32[?], loss=f32[?], ignore_index=i32, ROWS=64, BLOCK=32"),
    ("ce_loop_kernel", "logits=bf16[?,?], target=i32[?], loss=bf16[?], ignore_index=i32, BLOCK=2048"),
    ("ce_loop_kernel", "logits=f32[?,?], target=i64[?], loss=f32[?], ignore_index=i32, BLOCK=2048"),
    ("ce_loop_kernel", "logits=bf16[?,?], target=i64[?], loss=f32[?], ignore_index=i32, BLOCK=2048, PREFETCH=False"),
    ("ce_reduce_kernel", "loss=f32[?], target=i32[?], out=f32[?], ignore_index=i32, MEAN=False, BLOCK=1024"),
]

_REDUCTIONS = ("mean", "sum", "none")


@planned
def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean"):
    """cross_entropy(logits, target, ignore_index=-100, reduction="mean") -> loss.

    logits: (..., C) of f16, bf16 or f32 (last stride 1, leading dimensions
    flattenable into rows, else ValueError); target: integer class indices
    (int32 or int64) of shape logits.shape[:-1]. Per row the loss is
    logsumexp(logits) - logits[target], computed in f32. Rows whose target is
    `ignore_index` contribute 0 and are left out of the mean's count; a target
    outside [0, C) gives NaN (nothing out of bounds is read). reduction="none"
    returns the per-row losses (shape logits.shape[:-1]); "sum" and "mean" a
    0-d array. The result has logits' dtype. Forward only.

    Block size: the rows use `_common.row_config` (one tile up to 16384
    classes, else a 4096-column online-logsumexp loop); the mean/sum is one
    program walking the per-row losses in 1024-element tiles.
    """
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
    lv = view(per_row, (n_rows,), (1,))
    cfg = row_config(n_cls, n_rows)
    if cfg.single:
        launch(ce_tile_kernel, cfg.grid(n_rows), (xv, tv, lv, ignore_index), cfg.num_warps, ROWS=cfg.rows,
               BLOCK=cfg.block)
    else:
        launch(ce_loop_kernel, cfg.grid(n_rows), (xv, tv, lv, ignore_index), LOOP_WARPS, BLOCK=LOOP_BLOCK,
               PREFETCH=LOOP_PREFETCH)
    if reduction == "none":
        return per_row.obj
    result = output(None, a, (), a.dtype)
    launch(ce_reduce_kernel, (1,), (lv, tv, view(result, (1,), (1,)), ignore_index), 4,
           MEAN=reduction == "mean", BLOCK=REDUCE_BLOCK)
    return result.obj
