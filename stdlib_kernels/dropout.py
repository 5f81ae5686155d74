"""dropout(x, p, seed): zero each element with probability p, scale the rest by 1 / (1 - p).

The random numbers come from `tc.rand4x` (Philox4x32-10, tilec/random.py): the
element of row-major index i keeps its value when

    word (i % 4) of Philox(key = seed, counter = (i // 4, 0, 0, 0)), as a uniform
    u = (word >> 8) * 2**-24, satisfies u >= p.

So the mask depends only on (seed, i): not on the tile sizes, the grid, the
strides of x or out, or whether it ran on the GPU or the interpreter. One Philox
call serves four consecutive elements, which keeps the kernel memory-bound.
"""
from __future__ import annotations

import numpy as np

import tilec as tc

from ._common import as_array, check_float, launch, output
from ._plan import derived, planned
from ._rows import INDEX_LIMIT, rows_form, tile_config

__all__ = ["dropout", "dropout_kernel", "SIGNATURES"]


@tc.func
def select4(lane, r0, r1, r2, r3):
    return tc.where(lane == 0, r0, tc.where(lane == 1, r1, tc.where(lane == 2, r2, r3)))


@tc.kernel
def dropout_kernel(x, out, n_rows, n_cols, sx, so, p, scale, seed,
                   BR: tc.constexpr, BC: tc.constexpr, GROUPED: tc.constexpr, WIDE: tc.constexpr):
    pid = tc.program_id(0)
    if WIDE:
        pid = pid.astype(tc.int64)
    # A seed of 1 arrives as the constant 1 (the launch specializes ints equal to 1):
    # make it an i64 value either way, so the Philox key reads its 64 bits.
    seed = tc.full((1, 1), seed, tc.int64)
    n_col_tiles = tc.cdiv(n_cols, BC)
    rows = (pid // n_col_tiles) * BR + tc.arange(0, BR)
    col0 = (pid % n_col_tiles) * BC
    if GROUPED:
        # The tile as (BR, BC / 8, 8): every run of 8 columns starts at a multiple of 8 of
        # the flat index (n_cols % 8 == 0 or a single row), so two Philox counters serve a
        # run. A run's 8 elements sit in one thread's registers (one 16-byte access for
        # f16/bf16), so each counter is drawn by exactly one thread, the lane selects fold
        # to register choices, and no value crosses threads.
        run0 = col0 + tc.arange(0, BC // 8) * 8
        lane = tc.arange(0, 8)[None, None, :]
        cols = run0[None, :, None] + lane
        mask = (rows < n_rows)[:, None, None] & (cols < n_cols)
        counter = (rows[:, None] * n_cols + run0[None, :]) >> 2
        a0, a1, a2, a3 = tc.rand4x(seed, counter)
        b0, b1, b2, b3 = tc.rand4x(seed, counter + 1)
        u = tc.where(lane < 4, select4(lane, a0[:, :, None], a1[:, :, None], a2[:, :, None], a3[:, :, None]),
                     select4(lane - 4, b0[:, :, None], b1[:, :, None], b2[:, :, None], b3[:, :, None]))
        xp = x.ptr + rows[:, None, None] * sx + cols
        op = out.ptr + rows[:, None, None] * so + cols
    else:
        cols = col0 + tc.arange(0, BC)
        mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        flat = rows[:, None] * n_cols + cols[None, :]
        r0, r1, r2, r3 = tc.rand4x(seed, flat >> 2)
        u = select4(flat & 3, r0, r1, r2, r3)
        xp = x.ptr + rows[:, None] * sx + cols[None, :]
        op = out.ptr + rows[:, None] * so + cols[None, :]
    t = tc.load(xp, mask=mask, other=0.0).astype(tc.float32)
    tc.store(op, tc.where(u >= p, t * scale, 0.0).astype(out.dtype), mask=mask)


SIGNATURES = {
    "dropout_kernel": "x=f16[?,?], out=f16[?,?], n_rows=1, n_cols=i32:16, sx=i32:16, so=i32:16, p=f32, scale=f32, "
                      "seed=i64, BR=1, BC=4096, GROUPED=True, WIDE=False",
    "dropout_kernel_rows": "x=bf16[?,?], out=bf16[?,?], n_rows=i32, n_cols=i32, sx=i32, so=i32, p=f32, scale=f32, "
                           "seed=i64, BR=8, BC=128, GROUPED=False, WIDE=False",
}
# The options the entry points launch SIGNATURES with (`_rows.tile_config`; tests/test_ptxas.py).
OPTIONS = {"dropout_kernel": {"num_warps": 8, "fast_math": True}, "dropout_kernel_rows": {"num_warps": 2, "fast_math": True}}
# Both entries compile the one kernel (grouped and per-element draws).
dropout_kernel_rows = dropout_kernel


def _seed_i64(seed) -> np.int64:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    s = int(seed)
    if not -2 ** 63 <= s < 2 ** 64:
        raise ValueError(f"seed must fit in 64 bits, got {s}")
    # read as 64-bit two's complement: the Philox key is the seed's 64 bits
    return np.int64(s - 2 ** 64 if s >= 2 ** 63 else s)


def _dropout_scalars(p, seed):
    """The launch scalars (p, 1 / (1 - p), the seed's 64 bits) of a call: all that p and
    seed decide, so a launch plan fills them in per call (`_plan.planned(per_call=)`)."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)):
        raise TypeError(f"p must be a float, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    return np.float32(p), np.float32(scale), _seed_i64(seed)


@planned(per_call=_dropout_scalars)
def dropout(x, p: float, seed: int, out=None):
    """Zero each element of x with probability p and scale the others by 1 / (1 - p).

    `seed` (any 64-bit int) picks the mask; the same (seed, shape) always gives the
    same mask (see the module doc for the exact mapping), whatever the launch
    configuration. f16, bf16, f32, any shape; computed in f32. Tile heuristic of
    the elementwise ops (`_rows.tile_config`).
    """
    a = as_array(x, "x")
    check_float(a, "x")
    p32, scale32, seed64 = derived(_dropout_scalars, p, seed)
    o = output(out, a, a.shape, a.dtype)
    n_rows, n_cols, (rx, ro) = rows_form([a, o], ["x", "out"])
    cfg = tile_config(n_rows, n_cols)
    grouped = cfg.cols >= 8 and (n_rows == 1 or n_cols % 8 == 0)
    wide = max(n_rows * rx.stride, n_rows * ro.stride, n_rows * n_cols) >= INDEX_LIMIT
    launch(dropout_kernel, cfg.grid(n_rows, n_cols),
           [rx.arg, ro.arg, n_rows, n_cols, rx.stride, ro.stride, p32, scale32, seed64],
           num_warps=cfg.num_warps, BR=cfg.rows, BC=cfg.cols, GROUPED=grouped, WIDE=wide)
    return o.obj
