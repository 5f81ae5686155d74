"""embedding(weight, ids): out[..., :] = weight[ids[...], :], a gather of rows, and its
backward, dweight[v, :] = the sum of grad_out's rows whose id is v.

ids (int32 or int64, any shape) are read as one flat vector; out has ids' shape plus
the embedding dimension and weight's dtype. Each program gathers a (BR, BC) tile: BR ids,
BC columns of each of their rows. The column stride of weight and out is 1 and their row
strides are specialized as multiples of 16 when they are, so a row's BC columns move in
16-byte vector accesses (8 f16/bf16, 4 f32 per access).

An id outside [0, num_embeddings) is a ValueError for host arrays (checked before the
launch); on the GPU checking would cost a device-to-host copy, so the kernel masks such
ids instead: their rows of out are zeros and nothing is read out of bounds.

The backward sums the gradient rows of duplicate ids without atomics, so deterministically
(bit-identical run to run): the ids are sorted stably (numpy's argsort on the host, torch.sort
on the GPU: `_segments`), which groups the positions of each id into one segment, in order;
`offsets` (num_embeddings + 1) bound each id's segment in the sorted order (searchsorted of
0..num_embeddings, so ids out of range fall outside every segment and add nothing). Then
program (v, j) adds column tile j of the rows of segment v, BR of them per step, in f32 in a
fixed order, and writes row v of dweight (zeros for an id that never occurs). One id repeated
n times is one program's n / BR steps: correct, but serial.
"""
from __future__ import annotations

import sys
from typing import List

import numpy as np

import tilec as tc
from tilec.target import Target

from ._common import (Arr, as_array, check_float, check_same_place, contiguous_strides, flat_view, next_pow2, output,
                      refuse_read_back, row_stride, target_of, view)
from ._plan import planned
from ._rows import wide
from .launches import Launch, Operands, execute
from .schedules import GATHER
from .tuning import tuning_for

__all__ = ["embedding", "embedding_backward", "embedding_kernel", "embedding_bwd_kernel", "plan", "backward_plan",
           "SIGNATURES", "ID_DTYPES"]

ID_DTYPES = (tc.int32, tc.int64)


@tc.kernel
def embedding_kernel(weight, ids, out, n_ids, n_emb, dim, sw, so,
                     BR: tc.constexpr, BC: tc.constexpr, WIDE: tc.constexpr):
    # ids: flat, any stride (a unit stride is specialized)
    rows = tc.program_id(0) * BR + tc.arange(0, BR)
    if WIDE:
        rows = rows.astype(tc.int64)
    cols = tc.program_id(1) * BC + tc.arange(0, BC)
    in_ids = rows < n_ids
    # i64 ids: an id times the row stride may pass 2**31 in a large table
    idx = tc.load(ids.ptr + rows * ids.stride(0), mask=in_ids, other=0).astype(tc.int64)
    valid = in_ids & (idx >= 0) & (idx < n_emb)   # an out-of-range id reads nothing and writes zeros
    col_ok = (cols < dim)[None, :]
    t = tc.load(weight.ptr + idx[:, None] * sw + cols[None, :], mask=valid[:, None] & col_ok, other=0)
    tc.store(out.ptr + rows[:, None] * so + cols[None, :], t, mask=in_ids[:, None] & col_ok)


@tc.kernel
def embedding_bwd_kernel(grad, order, offsets, dw, dim, sg, sd, padding_idx,
                         BR: tc.constexpr, BC: tc.constexpr):
    # Program (v, j): column tile j of dweight's row v, the sum of the gradient rows at the
    # positions order[offsets[v]:offsets[v + 1]] (the sorted positions of id v), BR per step.
    v = tc.program_id(0)
    cols = tc.program_id(1) * BC + tc.arange(0, BC)
    col_ok = (cols < dim)[None, :]
    bounds = tc.load(offsets, offset=(v,), shape=(2,)).astype(tc.int64)
    first = tc.arange(0, 2) == 0
    start = tc.sum(tc.where(first, bounds, 0))
    end = tc.sum(tc.where(first, 0, bounds))
    if v == padding_idx:   # torch's padding_idx: its row gets no gradient
        end = start
    acc = tc.zeros((BR, BC), tc.float32)
    for k in range(start, end, BR):
        pos = k + tc.arange(0, BR).astype(tc.int64)
        inside = pos < end
        src = tc.load(order.ptr + pos * order.stride(0), mask=inside, other=0).astype(tc.int64)
        g = tc.load(grad.ptr + src[:, None] * sg + cols[None, :], mask=inside[:, None] & col_ok, other=0.0)
        acc += g.astype(tc.float32)
    row = tc.sum(acc, axis=0, keep_dims=True)
    tc.store(dw.ptr + v.astype(tc.int64) * sd + cols[None, :], row.astype(dw.dtype), mask=col_ok)


SIGNATURES = {
    "embedding_kernel": "weight=bf16[?,?], ids=i64[?], out=bf16[?,?], n_ids=i32, n_emb=i32, dim=i32:16, "
                        "sw=i32:16, so=i32:16, BR=4, BC=1024, WIDE=False",
    "embedding_bwd_kernel": "grad=bf16[?,?], order=i64[?], offsets=i64[?], dw=bf16[?,?], dim=i32:16, sg=i32:16, "
                            "sd=i32:16, padding_idx=i32, BR=8, BC=512",
}
EXTRA_SIGNATURES = [
    ("embedding_kernel", "weight=f32[?,?], ids=i32[?], out=f32[?,?], n_ids=i32, n_emb=i32, dim=i32:16, "
                         "sw=i32:16, so=i32:16, BR=16, BC=256, WIDE=True"),
    ("embedding_kernel", "weight=f16[?,?], ids=i32[?], out=f16[?,?], n_ids=i32, n_emb=i32, dim=i32, "
                         "sw=i32, so=i32, BR=128, BC=32, WIDE=False"),
    ("embedding_bwd_kernel", "grad=f32[?,?], order=i32[?], offsets=i32[?], dw=f32[?,?], dim=i32, sg=i32, "
                             "sd=i32, padding_idx=i32, BR=128, BC=32"),
    ("embedding_bwd_kernel", "grad=f16[?,?], order=i64[?], offsets=i64[?], dw=f32[?,?], dim=i32:16, sg=i32:16, "
                             "sd=i32:16, padding_idx=i32, BR=16, BC=256"),
]
# The options the entry point launches SIGNATURES with (tests/test_ptxas.py).
OPTIONS = {"embedding_kernel": {"num_warps": 4, "fast_math": True},
           "embedding_bwd_kernel": {"num_warps": 4, "fast_math": True}}


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


def _check_ids(i: Arr, n_emb: int, name: str = "indices") -> None:
    if i.dtype not in ID_DTYPES:
        raise TypeError(f"{name} must be int32 or int64, got {i.dtype.name}")
    if i.host and i.numel:
        v = np.asarray(i.obj)
        lo, hi = int(v.min()), int(v.max())
        if lo < 0 or hi >= n_emb:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name}: id {bad} is out of range for an embedding of {n_emb} rows "
                             f"(expected 0 <= id < {n_emb})")


@planned
def embedding(weight, indices, out=None):
    """out = weight[indices]: rows of `weight` (num_embeddings, embedding_dim; f16, bf16 or
    f32, unit column stride) picked by `indices` (int32 or int64, any shape and strides).
    `out` (optional) has shape indices.shape + (embedding_dim,), weight's dtype and is
    contiguous.

    Out-of-range ids: ValueError for host arrays; on the GPU (where checking would need a
    device-to-host copy) their rows of out are zeros and nothing out of bounds is read.
    """
    w = as_array(weight, "weight")
    check_float(w, "weight")
    i = as_array(indices, "indices")
    check_same_place({"weight": w, "indices": i})
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D (num_embeddings, embedding_dim), got shape {w.shape}")
    n_emb, dim = w.shape
    if n_emb >= 2 ** 31 - 1:
        raise ValueError(f"weight: at most 2**31 - 2 rows, got {n_emb}")
    if dim > 1 and w.strides[1] != 1:
        raise ValueError(f"weight's last dimension must be contiguous (stride 1), got strides {w.strides}")
    _check_ids(i, n_emb, "indices")
    o = output(out, w, i.shape + (dim,), w.dtype)
    if o.numel and o.strides != contiguous_strides(o.shape):
        raise ValueError(f"out must be contiguous, got strides {o.strides} for shape {o.shape}")
    if o.numel == 0:
        return o.obj
    n = i.numel
    values = {"weight": view(w, (n_emb, dim), (w.strides[0] if n_emb > 1 else max(dim, 1), 1)),
              "ids": flat_view(i, "indices"), "out": view(o, (n, dim), (max(dim, 1), 1))}
    execute(plan(w, i, o, target_of(w)), Operands({"weight": w}, values))
    return o.obj


# ----------------------------------------------------------------------------- backward
def _bwd_tile(n_ids: int, dim: int, target: Target):
    """(BR, BC) of the segment sums: columns up to `bwd_max_cols`, then gradient rows per step
    until the tile holds `bwd_tile_elems` (never more than there are ids)."""
    t = tuning_for(target).embedding
    bc = min(next_pow2(max(dim, 1)), t.bwd_max_cols)
    br = max(1, min(t.bwd_tile_elems // bc, next_pow2(max(n_ids, 1))))
    return br, bc


def backward_plan(n_ids: int, dim: int, n_emb: int, target: Target) -> List[Launch]:
    """The launch of dweight (n_emb, dim) from the gradient's n_ids rows (in ids' order): one
    program per (embedding row, column tile) adding its segment of the sorted positions (module
    doc). Operands: "grad" (as (n_ids, dim)), "order" (n_ids,), "offsets" (n_emb + 1,), "dw"
    (n_emb, dim), "sg", "sd" (their row strides) and "padding_idx" (-1 for none)."""
    if n_emb == 0 or dim == 0:
        return []
    br, bc = _bwd_tile(n_ids, dim, target)
    return [Launch.of(embedding_bwd_kernel, (n_emb, tc.cdiv(dim, bc)),
                      ("grad", "order", "offsets", "dw", dim, "sg", "sd", "padding_idx"),
                      tuning_for(target).embedding.bwd_num_warps, schedule=GATHER, BR=br, BC=bc)]


def _segments(i: Arr, n_emb: int):
    """(order, offsets) of the flat ids `i`, arrays of its kind: `order` the positions sorted
    stably by id, `offsets[v]` the first place in that order of an id >= v (v = 0..n_emb)."""
    if i.host:
        flat = np.asarray(i.obj).reshape(-1)
        order = np.argsort(flat, kind="stable")
        offsets = np.searchsorted(flat[order], np.arange(n_emb + 1, dtype=flat.dtype), side="left")
        return order, offsets
    if i.kind == "torch":
        torch = sys.modules["torch"]
        flat = i.obj.reshape(-1)
        # on the device, no host synchronization (CUDA graphs capture it)
        ids_sorted, order = torch.sort(flat, stable=True)
        offsets = torch.searchsorted(ids_sorted, torch.arange(n_emb + 1, device=flat.device, dtype=flat.dtype))
        return order, offsets
    if isinstance(i.obj, tc.DeviceArray):
        # no device sort for DeviceArrays: a copy through the host (synchronizes)
        order, offsets = _segments(as_array(np.ascontiguousarray(i.obj.to_numpy()), "indices"), n_emb)
        return tc.from_numpy(order, device=i.device), tc.from_numpy(offsets, device=i.device)
    raise TypeError(f"indices: embedding_backward takes numpy arrays, torch tensors or tc.DeviceArrays, "
                    f"got {type(i.obj).__name__} (its ids must be sorted, which tilec does not do on the GPU)")


def _padding_idx(padding_idx, n_emb: int) -> int:
    """torch's padding_idx (None, or -n_emb <= p < n_emb) as a row number, -1 for none."""
    if padding_idx is None:
        return -1
    if not isinstance(padding_idx, (int, np.integer)) or isinstance(padding_idx, bool):
        raise TypeError(f"padding_idx must be an int or None, got {type(padding_idx).__name__}")
    if not -n_emb <= padding_idx < n_emb:
        raise ValueError(f"padding_idx must be in [-{n_emb}, {n_emb}), got {padding_idx}")
    return int(padding_idx) % n_emb


def embedding_backward(grad_out, indices, num_embeddings, padding_idx=None, out=None):
    """dweight of `out = embedding(weight, indices)` given grad_out (indices.shape +
    (embedding_dim,), f16, bf16 or f32, last dimension contiguous): a (num_embeddings,
    embedding_dim) array, row v the sum of grad_out's rows at the positions where indices
    holds v (zeros where v never occurs, and for `padding_idx` as torch's). Duplicate ids
    are summed in f32 in a fixed order: deterministic, no atomics (module doc). The result
    has grad_out's dtype, or is written to `out` (contiguous, any float dtype: an f32 `out`
    keeps the f32 sums). indices: int32 or int64, any shape; out of range is a ValueError
    for host arrays and adds nothing on the GPU. The ids are sorted first: numpy's argsort
    on the host, torch.sort for torch tensors; tc.DeviceArray ids go through the host.
    """
    g = as_array(grad_out, "grad_out")
    check_float(g, "grad_out")
    i = as_array(indices, "indices")
    check_same_place({"grad_out": g, "indices": i})
    if not isinstance(num_embeddings, (int, np.integer)) or isinstance(num_embeddings, bool):
        raise TypeError(f"num_embeddings must be an int, got {type(num_embeddings).__name__}")
    n_emb = int(num_embeddings)
    if not 0 <= n_emb < 2 ** 31 - 1:
        raise ValueError(f"num_embeddings must be in [0, 2**31 - 1), got {n_emb}")
    if g.ndim != i.ndim + 1 or g.shape[:-1] != i.shape:
        raise ValueError(f"grad_out has shape {g.shape}, expected indices.shape + (embedding_dim,) = "
                         f"{i.shape + ('D',)}")
    pad = _padding_idx(padding_idx, n_emb)
    _check_ids(i, n_emb, "indices")
    if i.kind != "torch":   # DeviceArray ids are sorted through the host (`_segments`)
        refuse_read_back(i.obj, "indices", "embedding_backward",
                         "pass torch tensors (sorted on the device) or call it outside the capture")
    if out is not None:
        o = as_array(out, "out")
        check_float(o, "out")
        dt = o.dtype
    else:
        dt = g.dtype
    o = output(out, g, (n_emb, g.shape[-1]), dt)
    if o.numel and o.strides != contiguous_strides(o.shape):
        raise ValueError(f"out must be contiguous, got strides {o.strides} for shape {o.shape}")
    if o.numel == 0:
        return o.obj
    order, offsets = _segments(i, n_emb)
    return _segment_sums(grad_out, order, offsets, pad, o.obj)


@planned
def _segment_sums(grad_out, order, offsets, padding_idx, out):
    """The launch of `embedding_backward` once the ids are sorted (a launch plan replays it)."""
    g, o = as_array(grad_out, "grad_out"), as_array(out, "out")
    oa, fa = as_array(order, "order"), as_array(offsets, "offsets")
    n, dim, n_emb = oa.numel, g.shape[-1], o.shape[0]
    sg = row_stride(g, "grad_out") if n > 1 else max(dim, 1)
    values = {"grad": view(g, (n, dim), (sg, 1)), "order": flat_view(oa, "order"),
              "offsets": flat_view(fa, "offsets"), "dw": view(o, (n_emb, dim), (max(dim, 1), 1)),
              "sg": sg, "sd": max(dim, 1), "padding_idx": padding_idx}
    execute(backward_plan(n, dim, n_emb, target_of(g)), Operands({"grad": g}, values))
    return o.obj
