"""transpose(x): the transpose of a 2-D matrix, out[j, i] = x[i, j].

Each program reads a (BM, BN) tile of x along its rows and writes its transpose
along the rows of out, so both sides are coalesced. Between the two, the tile
changes hands between threads: the compiler's layout pass gives the load a
layout contiguous along x's rows and the store one contiguous along out's rows,
and inserts the conversion (through shared memory) for the `.T`.
"""
from __future__ import annotations

import tilec as tc

from ._common import as_array, check_float, launch, next_pow2, output, view
from ._plan import planned
from ._rows import INDEX_LIMIT

__all__ = ["transpose", "transpose_kernel", "SIGNATURES"]

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
# Tile (rows, cols) by element size: 16-32 KB. On an H200 at 8192x8192 (x torch.compile):
# f32 64x128 1.046, 128x64 1.045, 128x128 1.032, 64x64 1.037; f16 128x128 1.150, 64x128
# 1.130, 64x64 1.099, each at 8 warps (64x64: also 4).
TILE = {1: (128, 128), 2: (128, 128), 4: (64, 128), 8: (64, 64)}
transpose_kernel_f16 = transpose_kernel


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
    sx = a.strides[0] if n_rows > 1 else max(n_cols, 1)
    so = o.strides[0] if n_cols > 1 else max(n_rows, 1)
    tm, tn = TILE[a.dtype.itemsize]
    bm = min(tm, max(16, next_pow2(n_rows)))
    bn = min(tn, max(16, next_pow2(n_cols)))
    grid = (tc.cdiv(n_rows, bm) * tc.cdiv(n_cols, bn),)
    wide = max(n_rows * sx, n_cols * so) >= INDEX_LIMIT
    launch(transpose_kernel, grid, [view(a, a.shape, (sx, 1)), view(o, o.shape, (so, 1)), n_rows, n_cols, sx, so],
           num_warps=min(max(bm * bn // 1024, 1), 8), BM=bm, BN=bn, WIDE=wide)
    return o.obj
