"""Kernels whose loops stage their loads through shared memory (tc.range num_stages), shared by
the interpreter, PTX and GPU tests of prefetch_loads, with their numpy references."""
from __future__ import annotations

import numpy as np

import tilec as tc

NEG_INF = float("-inf")


@tc.kernel
def staged_softmax_rows(x, out, STAGES: tc.constexpr, BLOCK: tc.constexpr):
    # Program p softmaxes rows p, p + G, ...: every row comes from its own slot of the ring.
    for r in tc.range(tc.program_id(0), x.shape[0], tc.num_programs(0), num_stages=STAGES):
        t = tc.load(x, index=(r, 0), shape=(1, BLOCK), padding=NEG_INF).astype(tc.float32)
        e = tc.exp(t - tc.max(t))
        tc.store(out, index=(r, 0), tile=(e / tc.sum(e)).astype(out.dtype))


@tc.kernel
def staged_axpy_rows(x, y, out, DOWN: tc.constexpr, STAGES: tc.constexpr, BLOCK: tc.constexpr):
    # Two loads per iteration; DOWN walks the rows from the last (a negative run-time step).
    g = tc.num_programs(0)
    if DOWN:
        start, stop, step = x.shape[0] - 1 - tc.program_id(0), -1, -g
    else:
        start, stop, step = tc.program_id(0), x.shape[0], g
    for r in tc.range(start, stop, step, num_stages=STAGES):
        a = tc.load(x, index=(r, 0), shape=(1, BLOCK)).astype(tc.float32)
        b = tc.load(y, index=(r, 0), shape=(1, BLOCK)).astype(tc.float32)
        tc.store(out, index=(r, 0), tile=(2.0 * a + b).astype(out.dtype))


@tc.kernel
def staged_column_sums(x, out, STAGES: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr):
    # Program p sums its BLOCK columns over row tiles: a loop-carried accumulator fed by the ring.
    acc = tc.zeros((ROWS, BLOCK), tc.float32)
    for k in tc.range(0, tc.cdiv(x.shape[0], ROWS), num_stages=STAGES):
        acc += tc.load(x, index=(k, tc.program_id(0)), shape=(ROWS, BLOCK)).astype(tc.float32)
    tc.store(out, index=(tc.program_id(0),), tile=tc.sum(acc, axis=0))


def ref_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@tc.kernel
def staged_sum_near_i32_max(x, out, lb, ub, STAGES: tc.constexpr, BLOCK: tc.constexpr):
    # The loop variable runs just below 2**31 - 1, so `k + (STAGES - 1) * BLOCK` wraps past
    # the i32 range for the last iterations (the tests keep ub + BLOCK in it, so that only
    # the copies' look-ahead wraps): those must issue no copy. Element k is x[k - lb], addressed in i64, so a copy issued for
    # a wrapped iteration would read ~2**32 elements before x.
    acc = tc.zeros((BLOCK,), tc.float32)
    for k in tc.range(lb, ub, BLOCK, num_stages=STAGES):
        offs = tc.arange(0, BLOCK).astype(tc.int64) + k
        acc += tc.load(x.ptr + (offs - lb), mask=offs < ub, other=0.0)
    tc.store(out, index=(0,), tile=tc.full((1,), tc.sum(acc), tc.float32))
