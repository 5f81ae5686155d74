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
    cols = col0 + tc.arange(0, BC)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    if GROUPED:
        # Every run of 4 columns of the tile starts at a multiple of 4 of the flat index
        # (n_cols % 4 == 0 or a single row), so one counter per run: draw 4 words per
        # counter and lay them out along the run.
        starts = rows[:, None] * n_cols + (col0 + tc.arange(0, BC // 4) * 4)[None, :]
        r0, r1, r2, r3 = tc.rand4x(seed, starts >> 2)
        lane = tc.arange(0, 4)[None, None, :]
        u = select4(lane, r0[:, :, None], r1[:, :, None], r2[:, :, None], r3[:, :, None])
        u = tc.reshape(u, (BR, BC))
    else:
        flat = rows[:, None] * n_cols + cols[None, :]
        r0, r1, r2, r3 = tc.rand4x(seed, flat >> 2)
        u = select4(flat & 3, r0, r1, r2, r3)
    t = tc.load(x.ptr + rows[:, None] * sx + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    kept = tc.where(u >= p, t * scale, 0.0)
    tc.store(out.ptr + rows[:, None] * so + cols[None, :], kept.astype(out.dtype), mask=mask)


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


def dropout(x, p: float, seed: int, out=None):
    """Zero each element of x with probability p and scale the others by 1 / (1 - p).

    `seed` (any 64-bit int) picks the mask; the same (seed, shape) always gives the
    same mask (see the module doc for the exact mapping), whatever the launch
    configuration. f16, bf16, f32, any shape; computed in f32. Tile heuristic of
    the elementwise ops (`_rows.tile_config`).
    """
    a = as_array(x, "x")
    check_float(a, "x")
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)):
        raise TypeError(f"p must be a float, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    seed64 = _seed_i64(seed)
    o = output(out, a, a.shape, a.dtype)
    n_rows, n_cols, (rx, ro) = rows_form([a, o], ["x", "out"])
    cfg = tile_config(n_rows, n_cols)
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    grouped = cfg.cols >= 4 and (n_rows == 1 or n_cols % 4 == 0)
    wide = max(n_rows * rx.stride, n_rows * ro.stride, n_rows * n_cols) >= INDEX_LIMIT
    launch(dropout_kernel, cfg.grid(n_rows, n_cols),
           [rx.arg, ro.arg, n_rows, n_cols, rx.stride, ro.stride, np.float32(p), np.float32(scale), seed64],
           num_warps=cfg.num_warps, BR=cfg.rows, BC=cfg.cols, GROUPED=grouped, WIDE=wide)
    return o.obj
