"""Reductions and scans of torch's forms over any one dimension: max/min with the index of
the extreme (argmax, argmin) and cumsum over a dimension that is not the last.

Both see the array as (outer, R, inner), the dimension of size R in the middle and the
dimensions before and after it each flattened (`_common.slab_view`), and give each program
a strip of up to `ARG_STRIP` contiguous inner columns of one slab, which walks R in tiles:
the arg-reduction keeps a running best value and its first row per lane, the scan a running
total per column. A last dimension is inner = 1 (one row per program, read along R).
Values are compared and summed in f32 (exact for f16/bf16).
"""
from __future__ import annotations

import builtins
from collections import namedtuple
from dataclasses import replace
from typing import List

import tilec as tc
from tilec.target import Target

from ._common import (Arr, as_array, check_float, flat_group, next_pow2, normalize_dim, output, rows_of,
                      slab_view, target_of)
from ._plan import planned
from .launches import Launch, Operands, execute
from . import reductions as _red   # (its plan_cumsum through the module: test spies wrap it there)
from .reductions import (reduced_layout, reduced_views, rows_path, slab_grid, slab_strip, squeezed)
from .reductions import amax as _amax
from .schedules import STRIPS

__all__ = ["max", "min", "argmax", "argmin", "amin", "cumsum", "ValuesIndices", "arg_reduce_kernel",
           "cumsum_strips_kernel", "plan_arg", "plan_cumsum_dim", "strip_shape", "SIGNATURES"]

# What max/min over a dimension return, as torch.return_types.max: a tuple with names.
ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])

NEG_INF = float("-inf")
POS_INF = float("inf")
ARG_STRIP = 64      # inner columns per program at most (a strip of 256 bytes of f32)
ARG_TILE = 2048     # tile elements: (BLOCK_R, BLOCK_I) at one warp per 256 of them


@tc.kernel
def arg_reduce_kernel(x, values, indices, MIN: tc.constexpr, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr,
                      STRIPS_FIRST: tc.constexpr = False):
    # x is (outer, R, inner); values and indices are (outer, 1, inner). Each lane keeps the best
    # value it has seen and the first row it saw it at: a later row wins only when strictly
    # better, or when it is the lane's first NaN (NaN beats everything, as torch's max). The
    # lanes of a column then agree on the best and the smallest row holding it. Padding (the
    # worst value) never wins, so a column all of the worst value reports row 0 (each lane
    # starts at row 0), as torch does.
    o, j = slab_strip(STRIPS_FIRST)
    pad = POS_INF if MIN else NEG_INF
    lane_row = tc.arange(0, BLOCK_R)[None, :, None]
    best = tc.full((1, BLOCK_R, BLOCK_I), pad, tc.float32)
    at = tc.zeros((1, BLOCK_R, BLOCK_I), tc.int32)
    for k in range(tc.cdiv(x.shape[1], BLOCK_R)):
        t = tc.load(x, index=(o, k, j), shape=(1, BLOCK_R, BLOCK_I), padding=pad).astype(tc.float32)
        if MIN:
            better = t < best
        else:
            better = t > best
        better = better | ((t != t) & (best == best))
        best = tc.where(better, t, best)
        at = tc.where(better, lane_row + k * BLOCK_R, at)
    if MIN:
        m = tc.min(best, axis=1, keep_dims=True)
    else:
        m = tc.max(best, axis=1, keep_dims=True)
    hit = (best == m) | ((best != best) & (m != m))
    first = tc.min(tc.where(hit, at, x.shape[1]), axis=1, keep_dims=True)
    tc.store(values, index=(o, 0, j), tile=m.astype(values.dtype))
    tc.store(indices, index=(o, 0, j), tile=first.astype(tc.int64))


@tc.kernel
def cumsum_strips_kernel(x, out, BLOCK_R: tc.constexpr, BLOCK_I: tc.constexpr, STRIPS_FIRST: tc.constexpr = False):
    # x and out are (outer, R, inner): the running sum down R of each column of strip j,
    # carried from tile to tile (zero padding adds nothing).
    o, j = slab_strip(STRIPS_FIRST)
    carry = tc.zeros((1, 1, BLOCK_I), tc.float32)
    for k in range(tc.cdiv(x.shape[1], BLOCK_R)):
        t = tc.load(x, index=(o, k, j), shape=(1, BLOCK_R, BLOCK_I), padding=0.0).astype(tc.float32)
        tc.store(out, index=(o, k, j), tile=(tc.cumsum(t, axis=1) + carry).astype(out.dtype))
        carry += tc.sum(t, axis=1, keep_dims=True)


SIGNATURES = {
    "arg_reduce_kernel": "x=f32[?,?,?], values=f32[?,?,?], indices=i64[?,?,?], MIN=False, BLOCK_R=32, BLOCK_I=64",
    "cumsum_strips_kernel": "x=f32[?,?,?], out=f32[?,?,?], BLOCK_R=32, BLOCK_I=64",
}
# The options the entry points launch SIGNATURES with (tests/test_ptxas.py).
OPTIONS = {"arg_reduce_kernel": {"num_warps": 8, "fast_math": True},
           "cumsum_strips_kernel": {"num_warps": 8, "fast_math": True}}
EXTRA_SIGNATURES = [
    # a last dimension: one row per program, read along R
    ("arg_reduce_kernel", "x=bf16[?,?,?], values=bf16[?,?,?], indices=i64[?,?,?], MIN=True, BLOCK_R=2048, BLOCK_I=1"),
    ("arg_reduce_kernel", "x=f16[?,?,?], values=f16[?,?,?], indices=i64[?,?,?], MIN=False, BLOCK_R=32, BLOCK_I=64, "
                          "STRIPS_FIRST=True"),
    ("cumsum_strips_kernel", "x=bf16[?,?,?], out=bf16[?,?,?], BLOCK_R=32, BLOCK_I=64"),
]


def strip_shape(r: int, inner: int):
    """(BLOCK_R, BLOCK_I, num_warps) of a strip walking R: up to ARG_STRIP inner columns and
    rows filling ARG_TILE elements (no more than R's power of two), one warp per 256."""
    block_i = builtins.min(next_pow2(inner), ARG_STRIP)
    block_r = builtins.min(next_pow2(r), builtins.max(ARG_TILE // block_i, 1))
    return block_r, block_i, builtins.max(1, builtins.min(block_r * block_i // 256, 8))


def _slab(x: Arr, dim: int):
    outer, _ = flat_group(x.shape[:dim], x.strides[:dim], "x")
    inner, _ = flat_group(x.shape[dim + 1:], x.strides[dim + 1:], "x")
    return outer, x.shape[dim], inner


def plan_arg(x: Arr, dim: int, *, is_min: bool, target: Target) -> List[Launch]:
    """The launch of max (min if `is_min`) with its first index over `dim` (normalized) of `x`:
    operands "x" as (outer, R, inner) (`slab_view`), "values" and "indices" as (outer, 1,
    inner); STRIPS. No launch for an empty result; R must be at least 1 (the entry point's check)."""
    outer, r, inner = _slab(x, dim)
    if outer * inner == 0:
        return []
    block_r, block_i, warps = strip_shape(r, inner)
    grid, first = slab_grid(outer, tc.cdiv(inner, block_i))
    return [Launch.of(arg_reduce_kernel, grid, ("x", "values", "indices"), warps, schedule=STRIPS, MIN=is_min,
                      BLOCK_R=block_r, BLOCK_I=block_i, STRIPS_FIRST=first)]


def plan_cumsum_dim(x: Arr, dim: int, target: Target) -> List[Launch]:
    """The launch of cumsum over `dim` (normalized), not the last dimension, of `x`: operands "x"
    and "out" as (outer, R, inner) (`slab_view`), read and written in place through their
    strides (no copy); STRIPS."""
    outer, r, inner = _slab(x, dim)
    if outer * r * inner == 0:
        return []
    block_r, block_i, warps = strip_shape(r, inner)
    grid, first = slab_grid(outer, tc.cdiv(inner, block_i))
    return [Launch.of(cumsum_strips_kernel, grid, ("x", "out"), warps, schedule=STRIPS, BLOCK_R=block_r,
                      BLOCK_I=block_i, STRIPS_FIRST=first)]


# ----------------------------------------------------------------------------- entry points
@planned
def arg_reduce(x, dim, keepdim, is_min, values_out, indices_out):
    """(values, indices) of max (min if `is_min`) over `dim` (None: the row-major flattened
    array) with keepdim; the results written to the given arrays or new ones (None)."""
    op = "min" if is_min else "max"
    a = as_array(x, "x")
    check_float(a, "x")
    w, d, out_shape = reduced_layout(a, dim, keepdim, row_major=True)
    if w.shape[d] == 0:
        raise ValueError(f"{op}: cannot reduce over dimension {d}, which has size 0 (x has shape {a.shape})")
    if w.shape[d] >= 2**31:
        raise ValueError(f"{op}: the reduced dimension has {w.shape[d]} elements; at most 2**31 - 1 are supported")
    vo = output(values_out, a, out_shape, a.dtype, "out")
    io = output(indices_out, a, out_shape, tc.int64, "indices")
    if vo.numel:
        xv, _, _ = slab_view(w, d, "x")
        vv = reduced_views(w, squeezed(vo, w, d), d, "out")
        iv = reduced_views(w, squeezed(io, w, d), d, "indices")
        execute(plan_arg(w, d, is_min=bool(is_min), target=target_of(a)),
                Operands({"x": a}, {"x": xv, "values": vv, "indices": iv}))
    return vo.obj, io.obj


def _pair(out, op):
    """(values, indices) of max/min's `out`: None or a pair of arrays, as torch's out=."""
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{op}: out must be a (values, indices) pair of arrays when dim is given, "
                        f"got {type(out).__name__}")
    return out[0], out[1]


def _extreme(x, dim, keepdim, out, *, is_min: bool):
    op = "min" if is_min else "max"
    if dim is None:   # torch.max(x): the value alone
        if is_min:
            return arg_reduce(x, None, keepdim, True, out, None)[0]
        return _amax(x, None, keepdim, out)
    values, indices = _pair(out, op)
    return ValuesIndices(*arg_reduce(x, dim, keepdim, is_min, values, indices))


def max(x, dim=None, keepdim: bool = False, *, out=None):  # noqa: A001 - the op's name
    """max(x, dim=None, keepdim=False, *, out=None), as torch.max.

    dim=None: the maximum of every element (a 0-d result; `amax`'s kernels).
    dim an int (may be negative): a `ValuesIndices` (values, indices) named
    tuple, indices int64 along `dim`; keepdim keeps `dim` with size 1; `out`, a
    (values, indices) pair, receives them. On ties the index is the first
    maximal element's (torch documents the same). NaN propagates: a NaN in the
    reduced elements gives NaN and the index of the first NaN.

    x: f16, bf16 or f32, any shape (0-d too), the dimensions before and after
    `dim` each flattenable (else ValueError); an empty `dim` is a ValueError.
    Block size (`strip_shape`): each program owns up to 64 contiguous inner
    columns (1 for the last dimension) and walks `dim` in tiles of 2048
    elements (1..8 warps), keeping a best value and its row per lane.

    The values-only form earlier tilec versions returned for `max(x, dim)` is
    `amax(x, dim)`.
    """
    return _extreme(x, dim, keepdim, out, is_min=False)


def min(x, dim=None, keepdim: bool = False, *, out=None):  # noqa: A001 - the op's name
    """min(x, dim=None, keepdim=False, *, out=None), as torch.min: `max` with the minimum
    (the first minimal element's index on ties; NaN propagates). dim=None runs the same
    kernel over the flattened array (one program)."""
    return _extreme(x, dim, keepdim, out, is_min=True)


def amin(x, dim=None, keepdim: bool = False, out=None):
    """amin(x, dim=None, keepdim=False, out=None) -> the minimum over `dim`, values only
    (as torch.amin; `min`'s kernel)."""
    return arg_reduce(x, dim, keepdim, True, out, None)[0]


def argmax(x, dim=None, keepdim: bool = False, *, out=None):
    """argmax(x, dim=None, keepdim=False, *, out=None) -> int64 indices of the maxima, as
    torch.argmax: the first on ties, the first NaN where there is one. dim=None: the index
    into the row-major flattened x (0-d; with keepdim, all dimensions of size 1). `out`:
    the indices array."""
    return arg_reduce(x, dim, keepdim, False, None, out)[1]


def argmin(x, dim=None, keepdim: bool = False, *, out=None):
    """argmin(x, dim=None, keepdim=False, *, out=None): `argmax` of the minima."""
    return arg_reduce(x, dim, keepdim, True, None, out)[1]


@planned
def cumsum(x, dim: int = -1, out=None):
    """cumsum(x, dim=-1, out=None) -> the inclusive running sum along `dim`, as torch.cumsum.

    x: f16, bf16 or f32, any shape (0-d: dim 0 or -1); `dim` may be negative.
    Accumulates in f32 along the whole dimension and returns x's dtype (or
    writes `out`, of x's shape; it may be x itself).

    The last dimension, contiguous (rows flattenable): `plan_cumsum` -- rows up to
    4096 elements are one tile of next_pow2(n) columns, short rows packed until a
    tile holds 2048 elements; longer rows are scanned in 4096-column tiles
    carrying the running total. num_warps = tile elements / 512, 1..16. Rows off
    32-byte sectors are read and written in aligned windows (`_window`).
    Another dimension (or a strided last one): in place through the strides, no
    copy (`plan_cumsum_dim`): each program scans up to 64 contiguous inner
    columns down `dim` in tiles of 2048 elements; the dimensions before and
    after `dim` must each flatten without a copy (else ValueError).
    """
    a = as_array(x, "x")
    check_float(a, "x")
    o = output(out, a, a.shape, a.dtype)
    w, wo = a, o
    if a.ndim == 0:
        normalize_dim(dim, 1)
        w, wo = replace(a, shape=(1,), strides=(1,)), replace(o, shape=(1,), strides=(1,))
    d = normalize_dim(dim, w.ndim)
    if w.numel == 0:
        return o.obj
    target = target_of(a)
    if rows_path(w, d) and rows_path(wo, d):
        xv, _, _ = rows_of(w, "x")
        ov, _, _ = rows_of(wo, "out")
        execute(_red.plan_cumsum(w, wo, target), Operands({"x": a}, {"x": xv, "out": ov}))
    else:
        xv, _, _ = slab_view(w, d, "x")
        ov, _, _ = slab_view(wo, d, "out")
        execute(plan_cumsum_dim(w, d, target), Operands({"x": a}, {"x": xv, "out": ov}))
    return o.obj
