"""dropout(x, p, seed): zero each element with probability p, scale the rest by 1 / (1 - p).

The random bits come from `tc.randint4x` (Philox4x32-10, tilec/random.py), 16 per
element: each 32-bit output word serves two elements, one Philox call eight. The
element of row-major index i keeps its value when

    h = 16-bit half (i % 2) (0: low, 1: high) of word ((i // 2) % 4) of
        Philox(key = seed, counter = (i // 8, 0, 0, 0)) satisfies h >= round(p * 2**16).

(round: to nearest, ties to even). So p is used at a resolution of 2**-16: the drop
probability is p' = round(p * 2**16) / 2**16 (within 7.7e-6 of p; a p below 2**-17
drops nothing), and the kept values are scaled by 1 / (1 - p'), so the expected
output is x. The mask depends only on (seed,
i): not on the dtype, the tile sizes, the grid, the strides of x or out, or whether it
ran on the GPU or the interpreter. Sixteen bits per element keep Philox (ten rounds
of two 32x32-bit multiplies) under the memory time of 2-byte types, which 24-bit
uniforms (four elements per call) did not.
"""
from __future__ import annotations

from typing import List

import numpy as np

import tilec as tc
from tilec.target import Target

from ._common import Arr, as_array, check_float, output, target_of
from ._plan import derived, planned
from ._rows import program, rows_form, rows_layout, tile_config, tile_origin, wide
from .launches import Launch, Operands, execute
from .tuning import tuning_for

__all__ = ["dropout", "dropout_kernel", "plan", "SIGNATURES", "THRESHOLD_BITS"]

THRESHOLD_BITS = 16   # random bits per element; p's resolution is 2**-THRESHOLD_BITS


@tc.func
def select4(lane, r0, r1, r2, r3):
    return tc.where(lane == 0, r0, tc.where(lane == 1, r1, tc.where(lane == 2, r2, r3)))


@tc.func
def half_word(word, odd):
    """The high 16 bits of a u32 word where `odd`, else the low 16, as i32."""
    return tc.where(odd, word >> 16, word & 0xFFFF).astype(tc.int32)


@tc.kernel
def dropout_kernel(x, out, n_rows, n_cols, sx, so, threshold, scale, seed,
                   BR: tc.constexpr, BC: tc.constexpr, GROUPED: tc.constexpr, WIDE: tc.constexpr,
                   FLAT: tc.constexpr = False):
    # A seed of 1 arrives as the constant 1 (the launch specializes ints equal to 1):
    # make it an i64 value either way, so the Philox key reads its 64 bits.
    seed = tc.full((1, 1), seed, tc.int64)
    rows, col0 = tile_origin(program(WIDE), n_cols, BR, BC, FLAT)
    if GROUPED:
        # The tile as (BR, BC / 8, 8): every run of 8 columns starts at a multiple of 8 of
        # the flat index (n_cols % 8 == 0 or a single row), so one Philox counter serves a
        # run. A run's 8 elements sit in one thread's registers (one 16-byte access for
        # f16/bf16), so each counter is drawn by exactly one thread, the lane selects fold
        # to register choices, and no value crosses threads.
        run0 = col0 + tc.arange(0, BC // 8) * 8
        lane = tc.arange(0, 8)[None, None, :]
        cols = run0[None, :, None] + lane
        mask = (rows < n_rows)[:, None, None] & (cols < n_cols)
        r0, r1, r2, r3 = tc.randint4x(seed, (rows[:, None] * n_cols + run0[None, :]) >> 3)
        word = select4(lane >> 1, r0[:, :, None], r1[:, :, None], r2[:, :, None], r3[:, :, None])
        bits = half_word(word, (lane & 1) == 1)
        xp = x.ptr + rows[:, None, None] * sx + cols
        op = out.ptr + rows[:, None, None] * so + cols
    else:
        cols = col0 + tc.arange(0, BC)
        mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        flat = rows[:, None] * n_cols + cols[None, :]
        r0, r1, r2, r3 = tc.randint4x(seed, flat >> 3)
        bits = half_word(select4((flat >> 1) & 3, r0, r1, r2, r3), (flat & 1) == 1)
        xp = x.ptr + rows[:, None] * sx + cols[None, :]
        op = out.ptr + rows[:, None] * so + cols[None, :]
    t = tc.load(xp, mask=mask, other=0.0).astype(tc.float32)
    tc.store(op, tc.where(bits >= threshold, t * scale, 0.0).astype(out.dtype), mask=mask)


SIGNATURES = {
    "dropout_kernel": "x=f16[?,?], out=f16[?,?], n_rows=1, n_cols=i32:16, sx=i32:16, so=i32:16, threshold=i32, "
                      "scale=f32, seed=i64, BR=1, BC=2048, GROUPED=True, WIDE=False, FLAT=True",
    "dropout_kernel_rows": "x=bf16[?,?], out=bf16[?,?], n_rows=i32, n_cols=i32, sx=i32, so=i32, threshold=i32, "
                           "scale=f32, seed=i64, BR=8, BC=128, GROUPED=False, WIDE=False",
}
# The options the entry points launch SIGNATURES with (`_rows.tile_config`; tests/test_ptxas.py).
OPTIONS = {"dropout_kernel": {"num_warps": 4, "fast_math": True}, "dropout_kernel_rows": {"num_warps": 2, "fast_math": True}}
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
    """The launch scalars (the 16-bit threshold round(p * 2**16), 1 / (1 - p') for the
    p' it stands for, the seed's 64 bits) of a call: all that p and seed decide, so a
    launch plan fills them in per call (`_plan.planned(per_call=)`)."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)):
        raise TypeError(f"p must be a float, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    levels = 1 << THRESHOLD_BITS
    threshold = int(round(p * levels))
    scale = 0.0 if threshold == levels else levels / (levels - threshold)
    return np.int32(threshold), np.float32(scale), _seed_i64(seed)


@planned(per_call=_dropout_scalars)
def dropout(x, p: float, seed: int, out=None):
    """Zero each element of x with probability p and scale the others by 1 / (1 - p).

    `seed` (any 64-bit int) picks the mask; the same (seed, shape) always gives the
    same mask (see the module doc for the exact mapping), whatever the launch
    configuration and dtype. p is used at a resolution of 2**-16 (module doc).
    f16, bf16, f32, any shape; computed in f32. Tile heuristic of the elementwise
    ops (`_rows.tile_config`).
    """
    return apply_mask(x, p, seed, out)


def plan(x: Arr, out: Arr, target: Target) -> List[Launch]:
    """The launch of dropout of `x` into `out` (FLAT_TILES or ROW_TILES): operands "x", "out"
    (their rows, `_rows.rows_form`) and the launch scalars "threshold", "scale", "seed"
    (`_dropout_scalars`). Runs of 8 columns share one Philox draw (GROUPED) where every run
    starts at a multiple of 8 of the flat index."""
    n_rows, n_cols, (sx, so) = rows_layout([x, out], ["x", "out"])
    cfg = tile_config(n_rows, n_cols, t=tuning_for(target).elementwise)
    grouped = cfg.cols >= 8 and (n_rows == 1 or n_cols % 8 == 0)
    return [Launch.of(dropout_kernel, cfg.grid(n_rows, n_cols),
                      ("x", "out", n_rows, n_cols, sx, so, "threshold", "scale", "seed"), cfg.num_warps,
                      schedule=cfg.schedule, BR=cfg.rows, BC=cfg.cols, GROUPED=grouped,
                      WIDE=wide(n_rows * sx, n_rows * so, n_rows * n_cols), FLAT=cfg.flat)]


def apply_mask(x, p, seed, out):
    """`dropout`'s body (dropout_backward's too: the same mask on the gradient)."""
    a = as_array(x, "x")
    check_float(a, "x")
    threshold, scale32, seed64 = derived(_dropout_scalars, p, seed)
    o = output(out, a, a.shape, a.dtype)
    _, _, (rx, ro) = rows_form([a, o], ["x", "out"])
    values = {"x": rx.arg, "out": ro.arg, "threshold": threshold, "scale": scale32, "seed": seed64}
    execute(plan(a, o, target_of(a)), Operands({"x": a}, values))
    return o.obj
