"""transpose(x, dim0, dim1): x with two dimensions swapped, materialised (torch's
`x.transpose(dim0, dim1).contiguous()`); a 2-D matrix's out[j, i] = x[i, j].

Each program reads a (BM, BN) tile of x along its rows and writes its transpose
along the rows of out, so both sides are coalesced. Between the two, the tile
changes hands between threads: the compiler's layout pass gives the load a
layout contiguous along x's rows and the store one contiguous along out's rows,
and inserts the conversion (through shared memory) for the `.T`.

Of any rank, with d0 < d1 the dimensions swapped, x is seen as (A, P, B, Q, C): A the
dimensions before d0, P = d0, B those between, Q = d1, C those after, each group flattened
(`flat_group`). Where C = 1 (d1 is the last dimension) every (a, b) is a 2-D transpose of
(P, Q) tiles, batched (`transpose_batched_kernel`). Where C > 1 the rows of C elements stay
whole and only move: a strided copy whose tiles run along out's contiguous (P, C)
(`swap_copy_kernel`).
"""
from __future__ import annotations

from typing import List

import tilec as tc
from tilec.target import Target

from dataclasses import replace

from ._common import Arr, as_array, check_float, flat_group, next_pow2, normalize_dim, output, target_of, view
from ._plan import planned
from ._rows import wide
from .launches import Launch, Operands, execute
from .schedules import TILES
from .tuning import TABLES, tuning_for

__all__ = ["transpose", "transpose_kernel", "transpose_batched_kernel", "swap_copy_kernel", "plan", "plan_nd",
           "SIGNATURES"]

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


@tc.kernel
def transpose_batched_kernel(x, out, BM: tc.constexpr, BN: tc.constexpr):
    # x is (A, B, P, Q), out (A, B, Q, P) (views): program pid takes tile pid % n_tiles of
    # batch entry pid // n_tiles, row tiles fastest (as transpose_kernel), and moves it
    # through the tile's transpose so that both sides are read and written along their rows.
    n_row_tiles = tc.cdiv(x.shape[2], BM)
    n_tiles = n_row_tiles * tc.cdiv(x.shape[3], BN)
    pid = tc.program_id(0)
    tile = pid % n_tiles
    ab = pid // n_tiles
    a = ab // x.shape[1]
    b = ab % x.shape[1]
    i = tile % n_row_tiles
    j = tile // n_row_tiles
    t = tc.load(x, index=(a, b, i, j), shape=(1, 1, BM, BN), padding=0)
    t = tc.reshape(tc.reshape(t, (BM, BN)).T, (1, 1, BN, BM))
    tc.store(out, index=(a, b, j, i), tile=t)


@tc.kernel
def swap_copy_kernel(x, out, BP: tc.constexpr, BC: tc.constexpr):
    # x and out are (A, Q, B, P, C), x's view with its dimensions P and Q swapped (strides):
    # a copy in (BP, BC) tiles along out's contiguous (P, C); program ids flattened over
    # (A, Q, B, P tiles, C tiles), the last fastest.
    n_p = tc.cdiv(x.shape[3], BP)
    n_c = tc.cdiv(x.shape[4], BC)
    pid = tc.program_id(0)
    c = pid % n_c
    r = pid // n_c
    p = r % n_p
    r = r // n_p
    b = r % x.shape[2]
    r = r // x.shape[2]
    q = r % x.shape[1]
    a = r // x.shape[1]
    t = tc.load(x, index=(a, q, b, p, c), shape=(1, 1, 1, BP, BC), padding=0)
    tc.store(out, index=(a, q, b, p, c), tile=t)


SIGNATURES = {
    "transpose_kernel": "x=f32[?,?], out=f32[?,?], n_rows=i32:16, n_cols=i32:16, sx=i32:16, so=i32:16, "
                        "BM=64, BN=128, WIDE=False",
    "transpose_kernel_f16": "x=f16[?,?], out=f16[?,?], n_rows=i32:16, n_cols=i32:16, sx=i32:16, so=i32:16, "
                            "BM=128, BN=128, WIDE=False",
    "transpose_batched_kernel": "x=f32[?,?,?,?], out=f32[?,?,?,?], BM=64, BN=128",
    "swap_copy_kernel": "x=f16[?,?,?,?,?], out=f16[?,?,?,?,?], BP=16, BC=256",
}
# The options the entry point launches SIGNATURES with (tests/test_ptxas.py).
OPTIONS = {name: {"num_warps": 8, "fast_math": True} for name in SIGNATURES}
EXTRA_SIGNATURES = [("transpose_batched_kernel", "x=bf16[?,?,?,?], out=bf16[?,?,?,?], BM=128, BN=128"),
                    ("swap_copy_kernel", "x=i64[?,?,?,?,?], out=i64[?,?,?,?,?], BP=64, BC=64"),
                    # as a launch specializes contiguous f16 arrays with rows 16-byte aligned (strides
                    # divisible by 16 elements): 16-byte vectors on both sides (the signatures above,
                    # with no stride divisibility, give scalar accesses)
                    ("transpose_batched_kernel", "x=f16[?,?,?,?]:stride_div=16x16x16x1, "
                                                 "out=f16[?,?,?,?]:stride_div=16x16x16x1, BM=64, BN=128"),
                    ("swap_copy_kernel", "x=f16[?,?,?,?,?]:stride_div=16x16x16x16x1, "
                                         "out=f16[?,?,?,?,?]:stride_div=16x16x16x16x1, BP=32, BC=128")]
COPY_TILE = 4096    # swap_copy_kernel's tile elements
COPY_COLUMNS = 256  # its widest row of C elements
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


def _groups(a: Arr, d0: int, d1: int, name: str):
    """(size, stride) of a's groups (A, d0, B, d1, C) for d0 < d1 (`flat_group`)."""
    sh, st = a.shape, a.strides
    return (flat_group(sh[:d0], st[:d0], name), (sh[d0], st[d0]), flat_group(sh[d0 + 1:d1], st[d0 + 1:d1], name),
            (sh[d1], st[d1]), flat_group(sh[d1 + 1:], st[d1 + 1:], name))


def nd_views(x: Arr, out: Arr, d0: int, d1: int):
    """((x's view shape, strides), (out's)) of the ND transpose (d0 < d1), as `plan_nd` names
    its operands: (A, B, P, Q) and (A, B, Q, P) where C = 1; else both (A, Q, B, P, C), x's
    strides of P and Q swapped."""
    (na, xa), (np_, xp), (nb, xb), (nq, xq), (nc, xc) = _groups(x, d0, d1, "x")
    (_, oa), (_, oq), (_, ob), (_, op), (_, oc) = _groups(out, d0, d1, "out")
    if nc == 1:
        return ((na, nb, np_, nq), (xa, xb, xp, xq)), ((na, nb, nq, np_), (oa, ob, oq, op))
    return ((na, nq, nb, np_, nc), (xa, xq, xb, xp, xc)), ((na, nq, nb, np_, nc), (oa, oq, ob, op, oc))


def plan_nd(x: Arr, out: Arr, d0: int, d1: int, target: Target) -> List[Launch]:
    """out = x with dimensions d0 < d1 swapped, of any rank (TILES): operands "x" and "out"
    viewed as `nd_views` gives them. A grid past 2**31 - 1 programs is a ValueError."""
    (shape, _), _ = nd_views(x, out, d0, d1)
    if x.numel == 0:
        return []
    if len(shape) == 4:
        t = tuning_for(target).transpose
        na, nb, n_rows, n_cols = shape
        tm, tn = t.tile(x.dtype.itemsize)
        bm = min(tm, max(t.min_tile, next_pow2(n_rows)))
        bn = min(tn, max(t.min_tile, next_pow2(n_cols)))
        programs = na * nb * tc.cdiv(n_rows, bm) * tc.cdiv(n_cols, bn)
        warps = min(max(bm * bn // t.elems_per_warp, 1), t.max_warps)
        launch = Launch.of(transpose_batched_kernel, (programs,), ("x", "out"), warps, schedule=TILES, BM=bm, BN=bn)
    else:
        na, nq, nb, n_p, nc = shape
        bc = min(next_pow2(nc), COPY_COLUMNS)
        bp = min(next_pow2(n_p), max(COPY_TILE // bc, 1))
        programs = na * nq * nb * tc.cdiv(n_p, bp) * tc.cdiv(nc, bc)
        warps = min(max(bp * bc // 512, 1), 8)
        launch = Launch.of(swap_copy_kernel, (programs,), ("x", "out"), warps, schedule=TILES, BP=bp, BC=bc)
    if programs > 2**31 - 1:
        raise ValueError(f"transpose: {programs} tiles do not fit a grid (at most 2**31 - 1 programs); "
                         "transpose parts of the array")
    return [launch]


def _transpose_2d(a: Arr, out):
    n_rows, n_cols = a.shape
    o = output(out, a, (n_cols, n_rows), a.dtype)
    sx, so = _row_strides(a, o)
    operands = Operands({"x": a}, {"x": view(a, a.shape, (sx, 1)), "out": view(o, o.shape, (so, 1))})
    execute(plan(a, o, target_of(a)), operands)
    return o.obj


def _unit_last(a: Arr) -> bool:
    return a.shape[-1] <= 1 or a.strides[-1] == 1


@planned
def transpose(x, dim0=None, dim1=None, out=None):
    """transpose(x, dim0, dim1, out=None) -> x with dimensions dim0 and dim1 swapped,
    materialised: torch's x.transpose(dim0, dim1).contiguous() (or written to `out`, of that
    shape, any strides).

    x of any rank and strides (0-d: dims 0 or -1), dims may be negative and equal (a
    copy). Without dim0 and dim1, x must be 2-D (the earlier form: out = x.T). Any dtype
    of 1 to 8 bytes (the stdlib floats, ints). The groups of dimensions before, between and
    after the two must each flatten without a copy (else ValueError).

    Block size: 2-D with stride-1 rows (`transpose_kernel`) and any rank with dim1 the last
    dimension (`transpose_batched_kernel`): tiles of TILE (128 x 128 for 1 and 2 bytes,
    64 x 128 for 4, 64 x 64 for 8), smaller for small matrices (next_pow2 of the
    extents, at least 16), one warp per 1024 elements (1..8). Another dim1 (rows of the
    dimensions after it move whole, `swap_copy_kernel`): tiles of up to 256 of those
    elements by rows filling 4096, one warp per 512 (1..8).
    """
    a = as_array(x, "x")
    check_float(a, "x", FLOAT_AND_INT)
    if dim0 is None and dim1 is None:
        if a.ndim != 2:
            raise ValueError(f"x: transpose takes a 2-D matrix when dim0 and dim1 are not given, got shape "
                             f"{a.shape}; pass dim0 and dim1")
        dim0, dim1 = 0, 1
    elif dim0 is None or dim1 is None:
        raise TypeError(f"transpose: pass both dim0 and dim1 (got dim0={dim0!r}, dim1={dim1!r})")
    w = a if a.ndim else replace(a, shape=(1,), strides=(1,))
    d0, d1 = sorted((normalize_dim(dim0, w.ndim, "dim0"), normalize_dim(dim1, w.ndim, "dim1")))
    if a.ndim == 2 and d0 != d1:
        o = output(out, a, (a.shape[1], a.shape[0]), a.dtype) if out is not None else None
        if _unit_last(a) and (o is None or _unit_last(o)):
            return _transpose_2d(a, out)
    shape = list(a.shape)
    if a.ndim:
        shape[d0], shape[d1] = shape[d1], shape[d0]
    o = output(out, a, shape, a.dtype)
    wo = o if a.ndim else replace(o, shape=(1,), strides=(1,))
    if d0 == d1:   # a copy: the swap of a unit dimension inserted before d0 in x, after it in out
        w, wo = _with_unit(w, d0), _with_unit(wo, d0 + 1)
        d1 = d0 + 1
    (xs, xst), (os_, ost) = nd_views(w, wo, d0, d1)
    operands = Operands({"x": a}, {"x": view(w, xs, xst), "out": view(wo, os_, ost)})
    execute(plan_nd(w, wo, d0, d1, target_of(a)), operands)
    return o.obj


def _with_unit(a: Arr, d: int) -> Arr:
    """`a` with a dimension of size 1 inserted at d."""
    return replace(a, shape=a.shape[:d] + (1,) + a.shape[d:], strides=a.strides[:d] + (0,) + a.strides[d:])
