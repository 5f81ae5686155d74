"""embedding(weight, ids): out[..., :] = weight[ids[...], :], a gather of rows.

ids (int32 or int64, any shape) are read as one flat vector; out has ids' shape plus
the embedding dimension and weight's dtype. Each program gathers a (BR, BC) tile: BR ids,
BC columns of each of their rows. The column stride of weight and out is 1 and their row
strides are specialized as multiples of 16 when they are, so a row's BC columns move in
16-byte vector accesses (8 f16/bf16, 4 f32 per access).

An id outside [0, num_embeddings) is a ValueError for host arrays (checked before the
launch); on the GPU checking would cost a device-to-host copy, so the kernel masks such
ids instead: their rows of out are zeros and nothing is read out of bounds.
"""
from __future__ import annotations

from typing import List

import numpy as np

import tilec as tc
from tilec.target import Target

from ._common import Arr, as_array, check_float, check_same_place, contiguous_strides, flat_view, next_pow2, output, target_of, view
from ._plan import planned
from ._rows import wide
from .launches import Launch, Operands, execute
from .schedules import GATHER
from .tuning import tuning_for

__all__ = ["embedding", "embedding_kernel", "plan", "SIGNATURES", "ID_DTYPES"]

ID_DTYPES = (tc.int32, tc.int64)


@tc.kernel
def embedding_kernel(weight, ids, out, n_ids, n_emb, dim, sw, so,
                     BR: tc.constexpr, BC: tc.constexpr, WIDE: tc.constexpr):
    rows = tc.program_id(0) * BR + tc.arange(0, BR)
    if WIDE:
        rows = rows.astype(tc.int64)
    cols = tc.program_id(1) * BC + tc.arange(0, BC)
    in_ids = rows < n_ids
    # i64 ids: an id times the row stride may pass 2**31 in a large table
    idx = tc.load(ids.ptr + rows, mask=in_ids, other=0).astype(tc.int64)
    valid = in_ids & (idx >= 0) & (idx < n_emb)   # an out-of-range id reads nothing and writes zeros
    col_ok = (cols < dim)[None, :]
    t = tc.load(weight.ptr + idx[:, None] * sw + cols[None, :], mask=valid[:, None] & col_ok, other=0)
    tc.store(out.ptr + rows[:, None] * so + cols[None, :], t, mask=in_ids[:, None] & col_ok)


SIGNATURES = {
    "embedding_kernel": "weight=bf16[?,?], ids=i64[?], out=bf16[?,?], n_ids=i32, n_emb=i32, dim=i32:16, "
                        "sw=i32:16, so=i32:16, BR=4, BC=1024, WIDE=False",
}
EXTRA_SIGNATURES = [
    ("embedding_kernel", "weight=f32[?,?], ids=i32[?], out=f32[?,?], n_ids=i32, n_emb=i32, dim=i32:16, "
                         "sw=i32:16, so=i32:16, BR=16, BC=256, WIDE=True"),
    ("embedding_kernel", "weight=f16[?,?], ids=i32[?], out=f16[?,?], n_ids=i32, n_emb=i32, dim=i32, "
                         "sw=i32, so=i32, BR=128, BC=32, WIDE=False"),
]
# The options the entry point launches SIGNATURES with (tests/test_ptxas.py).
OPTIONS = {"embedding_kernel": {"num_warps": 4, "fast_math": True}}


def _tile(n_ids: int, dim: int, target: Target):
    """(BR, BC): columns up to `max_cols` (a longer row takes several column tiles), then
    ids until the tile holds `tile_elems` elements (never more rows than there are ids)."""
    t = tuning_for(target).embedding
    bc = min(next_pow2(max(dim, 1)), t.max_cols)
    br = max(1, min(t.tile_elems // bc, next_pow2(max(n_ids, 1))))
    return br, bc


def plan(weight: Arr, ids: Arr, out: Arr, target: Target) -> List[Launch]:
    """The launch of out[i, :] = weight[ids[i], :] (GATHER) for `weight` (V, D) with unit
    column stride, `ids` seen flat (n,) and `out` (n, D) with unit column stride: operands
    "weight", "ids" (flat) and "out" (as (n, D))."""
    n_emb, dim = weight.shape
    n_ids = ids.numel
    sw = weight.strides[0] if n_emb > 1 else max(dim, 1)
    so = max(dim, 1)
    br, bc = _tile(n_ids, dim, target)
    grid = (tc.cdiv(n_ids, br), tc.cdiv(dim, bc))
    return [Launch.of(embedding_kernel, grid, ("weight", "ids", "out", n_ids, n_emb, dim, sw, so),
                      tuning_for(target).embedding.num_warps, schedule=GATHER, BR=br, BC=bc,
                      WIDE=wide(n_ids * so, n_ids))]


def _check_ids(i: Arr, n_emb: int) -> None:
    if i.dtype not in ID_DTYPES:
        raise TypeError(f"ids must be int32 or int64, got {i.dtype.name}")
    if i.host and i.numel:
        v = np.asarray(i.obj)
        lo, hi = int(v.min()), int(v.max())
        if lo < 0 or hi >= n_emb:
            bad = lo if lo < 0 else hi
            raise ValueError(f"ids: id {bad} is out of range for an embedding of {n_emb} rows "
                             f"(expected 0 <= id < {n_emb})")


@planned
def embedding(weight, ids, out=None):
    """out = weight[ids]: rows of `weight` (num_embeddings, embedding_dim; f16, bf16 or f32,
    unit column stride) picked by `ids` (int32 or int64, any shape). `out` (optional) has
    shape ids.shape + (embedding_dim,), weight's dtype and is contiguous.

    Out-of-range ids: ValueError for host arrays; zero rows on the GPU (module doc).
    """
    w = as_array(weight, "weight")
    check_float(w, "weight")
    i = as_array(ids, "ids")
    check_same_place({"weight": w, "ids": i})
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D (num_embeddings, embedding_dim), got shape {w.shape}")
    n_emb, dim = w.shape
    if dim > 1 and w.strides[1] != 1:
        raise ValueError(f"weight's last dimension must be contiguous (stride 1), got strides {w.strides}")
    _check_ids(i, n_emb)
    o = output(out, w, i.shape + (dim,), w.dtype)
    if o.numel and o.strides != contiguous_strides(o.shape):
        raise ValueError(f"out must be contiguous, got strides {o.strides} for shape {o.shape}")
    if o.numel == 0:
        return o.obj
    n = i.numel
    values = {"weight": view(w, (n_emb, dim), (w.strides[0] if n_emb > 1 else max(dim, 1), 1)),
              "ids": flat_view(i, "ids"), "out": view(o, (n, dim), (max(dim, 1), 1))}
    execute(plan(w, i, o, target_of(w)), Operands({"weight": w}, values))
    return o.obj

