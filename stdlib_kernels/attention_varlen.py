"""Variable-length (packed) sequences for `attention` (flash-attn's varlen API, issue 45).

q is `(total_q, heads, dim)`, k and v `(total_k, kv_heads, dim)`: the sequences of a batch
packed one after another along the first axis (layout "bshd" without the batch dim);
`cu_seqlens_q/k` are int32 `(batch + 1,)` prefix sums, sequence i being rows
[cu[i], cu[i + 1]). Each sequence is attended on its own with every feature of the dense
path (causal bottom-right aligned per sequence, window, softcap, GQA); lse is
`(heads, total_q)` f32, as flash-attn's varlen.

This version launches the dense kernel once per sequence on views of the packed arrays
(numpy and torch inputs): correct, but one launch per sequence, and cu_seqlens on the
device are read back to the host (a synchronization). A single-launch kernel reading
cu_seqlens on the device is future work (issue 45).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

import tilec as tc

from ._common import as_array, output

__all__ = ["VarlenPlan", "varlen_plan", "attention_varlen", "attention_backward_varlen"]


@dataclass(frozen=True)
class VarlenPlan:
    """The sequences of one varlen call: (start, length) of each q and k sequence."""
    q_spans: Tuple[Tuple[int, int], ...]
    k_spans: Tuple[Tuple[int, int], ...]
    max_seqlen_q: int
    max_seqlen_k: int


def _host_cu(cu, name: str, total: int, max_seqlen) -> np.ndarray:
    """`cu` as a host int64 array, checked: int32, 1-D, starts at 0, non-decreasing, ends at total."""
    a = as_array(cu, name)
    if a.dtype is not tc.int32:
        raise TypeError(f"{name}: expected int32 prefix sums, got {a.dtype.name}")
    if a.ndim != 1 or a.shape[0] < 1:
        raise ValueError(f"{name}: expected shape (batch + 1,), got {a.shape}")
    if not a.host:
        if max_seqlen is None:
            raise ValueError(f"{name} is on the device: pass max_seqlen_{name[-1]} (a host int), "
                             "as flash-attn's varlen functions")
        if a.kind != "torch":
            raise TypeError(f"{name}: varlen attention takes numpy arrays or torch tensors, got {type(cu).__name__}")
        host = np.asarray(cu.detach().cpu().numpy(), dtype=np.int64)
    else:
        host = np.asarray(cu, dtype=np.int64)
    if host[0] != 0 or np.any(np.diff(host) < 0):
        raise ValueError(f"{name}: expected non-decreasing prefix sums starting at 0, got {host.tolist()}")
    if host[-1] != total:
        raise ValueError(f"{name}: ends at {int(host[-1])} but the packed array has {total} rows")
    return host


def varlen_plan(cu_q: np.ndarray, cu_k: np.ndarray, max_seqlen_q=None, max_seqlen_k=None) -> VarlenPlan:
    """The sequences of host prefix sums `cu_q`, `cu_k`; a pure function (no launch)."""
    if len(cu_q) != len(cu_k):
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must have one batch, got {len(cu_q) - 1} and "
                         f"{len(cu_k) - 1} sequences")
    lq, lk = np.diff(cu_q), np.diff(cu_k)
    mq, mk = int(lq.max(initial=0)), int(lk.max(initial=0))
    for name, given, actual in (("max_seqlen_q", max_seqlen_q, mq), ("max_seqlen_k", max_seqlen_k, mk)):
        if given is not None and (not isinstance(given, (int, np.integer)) or given < actual):
            raise ValueError(f"{name}: expected a host int >= the longest sequence ({actual}), got {given!r}")
    return VarlenPlan(tuple((int(s), int(n)) for s, n in zip(cu_q[:-1], lq)),
                      tuple((int(s), int(n)) for s, n in zip(cu_k[:-1], lk)),
                      mq if max_seqlen_q is None else int(max_seqlen_q),
                      mk if max_seqlen_k is None else int(max_seqlen_k))


def _packed(named, layout: str, cu_seqlens_q, cu_seqlens_k):
    """The packed `(total, heads, dim)` arrays by name, checked (the forward's and backward's
    common arguments)."""
    if layout != "bshd":
        raise ValueError(f"layout: varlen inputs are packed 'bshd' without the batch dim, got {layout!r}")
    if cu_seqlens_q is None or cu_seqlens_k is None:
        raise ValueError("cu_seqlens_q and cu_seqlens_k: pass both for variable-length sequences")
    arrs = {n: as_array(x, n) for n, x in named.items()}
    for n, a in arrs.items():
        if a.ndim != 3:
            raise ValueError(f"{n}: varlen expects 3 dimensions (total, heads, dim), got shape {a.shape}")
        if a.kind not in ("numpy", "torch"):
            raise TypeError(f"{n}: varlen attention takes numpy arrays or torch tensors, got {type(a.obj).__name__}")
    ka, va = arrs["k"], arrs["v"]
    if ka.shape[0] != va.shape[0]:
        raise ValueError(f"k and v must have one total length, got {ka.shape} and {va.shape}")
    return arrs


def _plan_of(qa, ka, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    return varlen_plan(_host_cu(cu_seqlens_q, "cu_seqlens_q", qa.shape[0], max_seqlen_q),
                       _host_cu(cu_seqlens_k, "cu_seqlens_k", ka.shape[0], max_seqlen_k),
                       max_seqlen_q, max_seqlen_k)


def attention_varlen(attention, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     causal: bool, scale, window, softcap, layout: str, return_lse: bool, out):
    """The varlen path of `attention` (passed in, the dense entry point)."""
    arrs = _packed({"q": q, "k": k, "v": v}, layout, cu_seqlens_q, cu_seqlens_k)
    qa, ka, va = arrs["q"], arrs["k"], arrs["v"]
    plan = _plan_of(qa, ka, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    h, dv = qa.shape[1], va.shape[2]
    oa = output(out, qa, (qa.shape[0], h, dv), qa.dtype).obj
    lse = output(None, qa, (h, qa.shape[0]), tc.float32, "lse").obj if return_lse else None
    for (sq, nq), (sk, nk) in zip(plan.q_spans, plan.k_spans):
        if nq == 0:
            continue   # nothing to write
        if nk == 0:    # no key: zeros and lse = -inf, as flash-attn (and no launch on an empty view)
            oa[sq:sq + nq] = 0
            if return_lse:
                lse[:, sq:sq + nq] = float("-inf")
            continue
        seq = lambda a, s, n: a[s:s + n][None]   # (1, n, heads, dim) view, no copy  # noqa: E731
        r = attention(seq(q, sq, nq), seq(k, sk, nk), seq(v, sk, nk), causal=causal, scale=scale,
                      window=window, softcap=softcap, layout="bshd", return_lse=return_lse,
                      out=seq(oa, sq, nq))
        if return_lse:
            lse[:, sq:sq + nq] = r[1][0]
    return (oa, lse) if return_lse else oa


def attention_backward_varlen(attention_backward, do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q, max_seqlen_k, *, causal: bool, scale, window, softcap, layout: str,
                              dq, dk, dv, dlse):
    """The varlen path of `attention_backward` (passed in, the dense entry point): lse and
    dlse are `(heads, total_q)` f32, the rest packed as the forward's."""
    arrs = _packed({"do": do, "q": q, "k": k, "v": v, "o": o}, layout, cu_seqlens_q, cu_seqlens_k)
    qa, ka, va = arrs["q"], arrs["k"], arrs["v"]
    h = qa.shape[1]
    for n, a in (("lse", lse), ("dlse", dlse)):
        if a is not None and as_array(a, n).shape != (h, qa.shape[0]):
            raise ValueError(f"{n}: expected (heads, total_q) = {(h, qa.shape[0])}, got {as_array(a, n).shape}")
    plan = _plan_of(qa, ka, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    grads = [output(g, a, a.shape, qa.dtype, n).obj for g, a, n in ((dq, qa, "dq"), (dk, ka, "dk"), (dv, va, "dv"))]
    dqa, dka, dva = grads
    seq = lambda a, s, n: a[s:s + n][None]   # (1, n, heads, dim) view, no copy  # noqa: E731

    def rows(a, s, n):   # (1, heads, n) of a (heads, total) array, contiguous for the kernel's view
        r = a[None, :, s:s + n]
        return r.contiguous() if hasattr(r, "contiguous") else np.ascontiguousarray(r)

    for (sq, nq), (sk, nk) in zip(plan.q_spans, plan.k_spans):
        if nq == 0:    # no query: these keys get no gradient
            dka[sk:sk + nk] = 0
            dva[sk:sk + nk] = 0
            continue
        if nk == 0:    # no key: the outputs were zeros, whatever q
            dqa[sq:sq + nq] = 0
            continue
        attention_backward(seq(do, sq, nq), seq(q, sq, nq), seq(k, sk, nk), seq(v, sk, nk), seq(o, sq, nq),
                           rows(lse, sq, nq), causal=causal, scale=scale, window=window, softcap=softcap,
                           layout="bshd", dq=seq(dqa, sq, nq), dk=seq(dka, sk, nk), dv=seq(dva, sk, nk),
                           dlse=None if dlse is None else rows(dlse, sq, nq))
    return dqa, dka, dva
