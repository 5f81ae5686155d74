"""transpose(x): the transpose of a 2-D matrix, out[j, i] = x[i, j].

Each program reads a (BM, BN) tile of x along its rows and writes its transpose
along the rows of out, so both sides are coalesced. Between the two, the tile
changes hands between threads: the compiler's layout pass gives the load a
layout contiguous along x's rows and the store one contiguous along out's rows,
and inserts the conversion (through shared memory) for the `.T`.
"""
from __future__ import annotations

from typing import List

import tilec as tc
from tilec.target import Target

from ._common import Arr, as_array, check_float, next_pow2, output, target_of, view
from ._plan import planned
from ._rows import wide
from .launches import Launch, Operands, execute
from .schedules import TILES
from .tuning import TABLES, tuning_for

__all__ = ["transpose", "transpose_kernel", "plan", "SIGNATURES"]

FLOAT_AND_INT = (tc.float16, tc.bfloat16, tc.float32, tc.int32, tc.int16, tc.int8, tc.uint8, tc.float64,
                 tc.int64)


@tc.kernel
def transpose_kernel(x, out, n_rows, n_cols, sx, so, BM: tc.constexpr, BN: tc.constexpr, WIDE: tc.constexpr):
    # Row tiles vary fastest: consecutive programs take consecutive row tiles of one
    # column band, so their stores continue each other along out's rows (on an H200,
    # 8192x8192 at 64x64 tiles, f32 +2.0% and f16 +2.8% over column tiles fastest).
    pid = tc.program_id(0)
    if WIDE:
        pid = pid.astype(tc.int64)
    n_row_tiles = tc.cdiv(n_rows, BM)
    rows = (pid % n_row_tiles) * BM + tc.arange(0, BM)
    cols = (pid // n_row_tiles) * BN + tc.arange(0, BN)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    t = tc.load(x.ptr + rows[:, None] * sx + cols[None, :], mask=mask, other=0)
    # out[c, r] = x[r, c]: the (BN, BM) tile whose rows are out's rows. Its mask is built
    # afresh rather than as mask.T, so the compiler sees runs along out's rows (16-byte stores).
    out_mask = (cols < n_cols)[:, None] & (rows < n_rows)[None, :]
    tc.store(out.ptr + cols[:, None] * so + rows[None, :], t.T, mask=out_mask)


SIGNATURES = {
    "transpose_kernel": "x=f32[?,?], out=f32[?,?], n_rows=i32:16, n_cols=i32:16, sx=i32:16, so=i32:16, "
                        "BM=64, BN=128, WIDE=False",
    "transpose_kernel_f16": "x=f16[?,?], out=f16[?,?], n_rows=i32:16, n_cols=i32:16, sx=i32:16, so=i32:16, "
                            "BM=128, BN=128, WIDE=False",
}
# The options the entry point launches SIGNATURES with (tests/test_ptxas.py).
OPTIONS = {name: {"num_warps": 8, "fast_math": True} for name in SIGNATURES}
# The sm_90 table's tiles (rows, cols) by element size under their old name (tests, docs).
TILE = {size: TABLES["sm_90"].transpose.tile(size) for size in (1, 2, 4, 8)}
transpose_kernel_f16 = transpose_kernel


def _row_strides(x: Arr, out: Arr):
    """(sx, so): x's and out's row strides, a row's length where there is one row."""
    n_rows, n_cols = x.shape
    return (x.strides[0] if n_rows > 1 else max(n_cols, 1)), (out.strides[0] if n_cols > 1 else max(n_rows, 1))


def plan(x: Arr, out: Arr, target: Target) -> List[Launch]:
    """out = x.T for 2-D descriptions (TILES): operands "x" and "out", each viewed with its
    own shape and strides (row stride, 1) as `_row_strides` gives them."""
    t = tuning_for(target).transpose
    n_rows, n_cols = x.shape
    sx, so = _row_strides(x, out)
    tm, tn = t.tile(x.dtype.itemsize)
    bm = min(tm, max(t.min_tile, next_pow2(n_rows)))
    bn = min(tn, max(t.min_tile, next_pow2(n_cols)))
    grid = (tc.cdiv(n_rows, bm) * tc.cdiv(n_cols, bn),)
    warps = min(max(bm * bn // t.elems_per_warp, 1), t.max_warps)
    return [Launch.of(transpose_kernel, grid, ("x", "out", n_rows, n_cols, sx, so), warps, schedule=TILES, BM=bm,
                      BN=bn, WIDE=wide(n_rows * sx, n_cols * so))]


@planned
def transpose(x, out=None):
    """out = x.T for a 2-D x (rows may be strided; the last stride must be 1).

    Any dtype of 1 to 8 bytes (the stdlib floats, ints). Tiles of TILE (128 x 128
    for 1 and 2 bytes, 64 x 128 for 4, 64 x 64 for 8), smaller for small matrices
    (next_pow2 of the extents, at least 16), one warp per 1024 elements (1..8).
    """
    a = as_array(x, "x")
    check_float(a, "x", FLOAT_AND_INT)
    if a.ndim != 2:
        raise ValueError(f"x: transpose takes a 2-D matrix, got shape {a.shape}")
    n_rows, n_cols = a.shape
    o = output(out, a, (n_cols, n_rows), a.dtype)
    for name, arr in (("x", a), ("out", o)):
        if arr.shape[1] > 1 and arr.strides[1] != 1:
            raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got strides "
                             f"{arr.strides}; pass a contiguous copy")
    sx, so = _row_strides(a, o)
    operands = Operands({"x": a}, {"x": view(a, a.shape, (sx, 1)), "out": view(o, o.shape, (so, 1))})
    execute(plan(a, o, target_of(a)), operands)
    return o.obj
