"""linear_cross_entropy: the loss of `cross_entropy(hidden @ weight.T + bias, target)` and its
gradients with respect to hidden, weight and bias, without the (tokens, vocab) logits.

The tokens are taken in chunks (`chunk_plan`, a pure function of the sizes and a memory
budget). Per chunk of n tokens:

    logits = h_c @ W.T (+ bias)                  the stdlib GEMM into one (n, vocab) buffer
    loss_c, logits <- dlogits                    cross_entropy's gradient kernels, in place
    dh_c = dlogits @ W                           into the chunk's rows of dh
    dW  += dlogits.T @ h_c,  db += sum(dlogits)  accumulated in f32 across chunks

so the logits of one chunk are all that is ever held (Liger-Kernel's fused linear
cross-entropy). The "mean" divides by the count of every token that is not ignored,
not a chunk's: one program first computes that factor over all the targets
(`cross_entropy.ce_scale_kernel`), and every chunk's gradient kernels read it, so the
gradients come out scaled on the device (no host synchronization: the call can be
captured in a CUDA graph). The loss is then one reduction over all the per-token losses.

The GEMMs take transposed operands as views (the GEMM takes any strides): W.T is a
column-major B, dlogits.T a column-major A.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

import tilec as tc

from . import _plan
from ._common import (BF16Array, Arr, as_array, check_float, check_same_place, empty_like, flat_view, launch, output,
                      target_of, view)
from ._common import row_stride as _row_stride
from ._plan import planned
from .cross_entropy import _REDUCTIONS, ce_reduce_kernel, ce_scale_kernel, check_label_smoothing, reduce_config
from .cross_entropy import plan as cross_entropy_plan
from .launches import Launch, Operands, execute
from .matmul import matmul
from .reductions import sum as _sum
from .tuning import row_tuning

__all__ = ["linear_cross_entropy", "chunk_plan", "ChunkPlan"]

# The logits buffer of one chunk: 256 MiB is 1024 tokens of a 128k bf16 vocabulary, an M of
# 1024 for the GEMMs (large enough to fill an H100's SMs with 128 x 256 tiles).
DEFAULT_BUDGET = 256 << 20
# Chunks are whole GEMM row tiles (the last one excepted).
ROW_MULTIPLE = 128
ACCUMULATE_BLOCK, ACCUMULATE_WARPS = 2048, 4   # 16 elements per thread


@dataclass(frozen=True)
class ChunkPlan:
    """How linear_cross_entropy walks the tokens: `chunks` chunks of `chunk` tokens (the last
    one shorter), a logits buffer of `logits_bytes`, and with more than one chunk f32
    accumulators for dW (and db) across them: `workspace_bytes` in all."""
    chunk: int
    chunks: int
    logits_bytes: int
    accumulate: bool
    workspace_bytes: int


def chunk_plan(tokens: int, vocab: int, hidden: int, itemsize: int, budget: Optional[int] = None,
               chunk: Optional[int] = None, bias: bool = False) -> ChunkPlan:
    """The chunking of `tokens` rows against a (vocab, hidden) weight of `itemsize`-byte
    elements: the most tokens whose (chunk, vocab) logits fit in `budget` bytes (default
    DEFAULT_BUDGET), rounded down to a multiple of ROW_MULTIPLE, at least ROW_MULTIPLE (or
    every token, when fewer); with neither `budget` nor `chunk` given, every token in one
    chunk when all their logits take no more memory than those chunks' logits and the f32
    accumulators that several chunks need; `chunk` given: that many tokens (at most every
    token)."""
    for name, v in (("tokens", tokens), ("vocab", vocab), ("hidden", hidden), ("itemsize", itemsize)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    default = chunk is None and budget is None
    if chunk is not None:
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
            raise ValueError(f"chunk must be a positive int (tokens per chunk), got {chunk!r}")
        size = min(int(chunk), tokens)
    else:
        budget = DEFAULT_BUDGET if budget is None else budget
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
            raise ValueError(f"budget must be a positive int (bytes), got {budget!r}")
        fit = budget // (vocab * itemsize)
        size = min(tokens, max(ROW_MULTIPLE, fit // ROW_MULTIPLE * ROW_MULTIPLE))
    acc_bytes = (vocab * hidden + (vocab if bias else 0)) * 4
    if default and size < tokens and tokens * vocab * itemsize <= size * vocab * itemsize + acc_bytes:
        # Chunks need f32 accumulators of dweight (and dbias) besides their logits; where all
        # the logits take no more, one chunk holds less and skips the accumulation passes
        # (4096 tokens of a 128256 x 2048 bf16 head: 1.05 GB of logits against 0.26 + 1.05 GB).
        size = tokens
    chunks = math.ceil(tokens / size)
    logits_bytes = size * vocab * itemsize
    accumulate = chunks > 1
    return ChunkPlan(size, chunks, logits_bytes, accumulate, logits_bytes + (acc_bytes if accumulate else 0))


@tc.kernel
def lce_accumulate_kernel(acc, part, out, FIRST: tc.constexpr, BLOCK: tc.constexpr):
    # out = acc + part in f32 (part alone with FIRST), stored in out's dtype; 1-D views. out
    # may be acc or part: each element is read before the same thread writes it.
    pid = tc.program_id(0)
    t = tc.load(part, index=(pid,), shape=(BLOCK,)).astype(tc.float32)
    if FIRST:
        total = t
    else:
        total = t + tc.load(acc, index=(pid,), shape=(BLOCK,))
    tc.store(out, index=(pid,), tile=total.astype(out.dtype))


SIGNATURES = {
    "lce_accumulate_kernel": "acc=f32[?], part=bf16[?], out=bf16[?], FIRST=False, BLOCK=2048",
}
OPTIONS = {"lce_accumulate_kernel": {"num_warps": ACCUMULATE_WARPS, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("lce_accumulate_kernel", "acc=f32[?], part=f16[?], out=f32[?], FIRST=False, BLOCK=2048"),
    ("lce_accumulate_kernel", "acc=f32[?], part=f32[?], out=f32[?], FIRST=True, BLOCK=2048"),
]


# ----------------------------------------------------------------------------- views without copies
def _registered(parent, part, offset: int):
    """`part` is `parent` shifted by `offset` elements (what a launch plan records)."""
    if _plan.recording() is not None:
        _plan.register_slice(parent, part, offset)
    return part


def _first_rows(obj, c0: int, c1: int, row_stride: int):
    """Rows [c0, c1) of `obj` (1-D: elements), an array `view` returned, without a copy."""
    if isinstance(obj, BF16Array):
        part = obj._like(obj.values[c0:c1])
    elif isinstance(obj, tc.DeviceArray):
        shape = (c1 - c0,) + obj.shape[1:]
        part = tc.DeviceArray(obj.ptr + c0 * obj.strides[0], shape, obj.strides, obj.dtype, obj.device, owner=obj)
    else:
        part = obj[c0:c1]
    return _registered(obj, part, c0 * row_stride)


def _rows(a: Arr, shape, strides):
    """`a` viewed as `shape`/`strides` (from its first element), as an object later slices start from."""
    return _registered(a.obj, view(a, shape, strides), 0)


def _transposed(obj):
    """obj.T (2-D) without a copy."""
    if isinstance(obj, BF16Array):
        t = obj._like(obj.values.T)
    elif isinstance(obj, tc.DeviceArray):
        t = tc.DeviceArray(obj.ptr, obj.shape[::-1], obj.strides[::-1], obj.dtype, obj.device, owner=obj)
    else:
        t = obj.T
    return _registered(obj, t, 0)


def _accumulate(acc: Optional[Arr], part, out: Arr, first: bool) -> None:
    """out = acc + part (f32 sum; part alone when `first`), flat, every array contiguous."""
    pa = as_array(part, "part")
    n = out.numel
    args = [flat_view(acc if acc is not None else out, "acc"), flat_view(pa, "part"), flat_view(out, "out")]
    launch(lce_accumulate_kernel, (tc.cdiv(n, ACCUMULATE_BLOCK),), args, ACCUMULATE_WARPS, FIRST=first,
           BLOCK=ACCUMULATE_BLOCK)


# ----------------------------------------------------------------------------- entry point
def _check(hidden, weight, target, bias, ignore_index, reduction, return_grad):
    if not isinstance(return_grad, bool):
        raise TypeError(f"linear_cross_entropy: return_grad must be a bool, got {return_grad!r}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"linear_cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not -2**31 <= ignore_index < 2**31:
        raise TypeError(f"linear_cross_entropy: ignore_index must be an int32 value, got {ignore_index!r}")
    ha, wa, ta = as_array(hidden, "hidden"), as_array(weight, "weight"), as_array(target, "target")
    check_float(ha, "hidden")
    check_float(wa, "weight")
    check_float(ta, "target", (tc.int32, tc.int64))
    named = {"hidden": ha, "weight": wa, "target": ta}
    ba = None
    if bias is not None:
        ba = named["bias"] = as_array(bias, "bias")
        check_float(ba, "bias")
    check_same_place(named)
    if wa.dtype is not ha.dtype:
        raise TypeError(f"weight has dtype {wa.dtype.name}, expected hidden's {ha.dtype.name}")
    if ha.ndim == 0 or wa.ndim != 2 or wa.shape[1] != ha.shape[-1]:
        raise ValueError(f"weight has shape {wa.shape}, expected (vocab, {ha.shape[-1] if ha.ndim else '?'}) "
                         f"for hidden of shape {ha.shape}")
    if ta.shape != ha.shape[:-1]:
        raise ValueError(f"target has shape {ta.shape}, expected {ha.shape[:-1]} (hidden.shape[:-1])")
    if ba is not None and ba.shape != (wa.shape[0],):
        raise ValueError(f"bias has shape {ba.shape}, expected ({wa.shape[0]},) (the vocabulary)")
    if ha.numel == 0 or wa.numel == 0:
        raise ValueError(f"linear_cross_entropy needs at least one token, class and hidden unit, got hidden "
                         f"{ha.shape} and weight {wa.shape}")
    return ha, wa, ta, ba


@planned
def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index: int = -100, reduction: str = "mean",
                         chunk: Optional[int] = None, budget: Optional[int] = None, return_grad: bool = True,
                         label_smoothing: float = 0.0):
    """linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100,
    reduction="mean", chunk=None, budget=None, return_grad=True, label_smoothing=0.0)
    -> (loss, dhidden, dweight, dbias), or loss alone with return_grad=False.

    The loss of `cross_entropy(hidden @ weight.T + bias, target, ignore_index, reduction)`
    without ever holding the (tokens, vocab) logits: tokens go in chunks whose logits take at
    most `budget` bytes (default 256 MiB) or `chunk` tokens (`chunk_plan`). hidden: (..., H)
    of f16, bf16 or f32 (last stride 1, leading dimensions flattenable); weight: (V, H) of
    hidden's dtype, any strides; target: int32/int64 of hidden.shape[:-1]; bias: (V,) of any
    float dtype or None. The logits are computed in hidden's dtype (f32 accumulation), the
    loss and gradients as cross_entropy's (module doc). The gradients are those of the
    returned loss for an upstream gradient of 1 ("none": of the sum of the per-token
    losses), in hidden's, weight's and bias's dtypes (dbias None without a bias); dweight
    and dbias are summed over chunks in f32. label_smoothing: torch's (cross_entropy's doc).
    """
    label_smoothing = check_label_smoothing(label_smoothing, "linear_cross_entropy")
    ha, wa, ta, ba = _check(hidden, weight, target, bias, ignore_index, reduction, return_grad)
    n_vocab, n_hidden = wa.shape
    n_tok = math.prod(ha.shape[:-1])
    row_stride = _row_stride(ha, "hidden") if n_tok > 1 else n_hidden
    cp = chunk_plan(n_tok, n_vocab, n_hidden, ha.dtype.itemsize, budget, chunk, bias=ba is not None)
    target_t = target_of(ha)
    t = row_tuning(target_t).cross_entropy

    h_rows = _rows(ha, (n_tok, n_hidden), (row_stride, 1))
    t_flat = _registered(ta.obj, flat_view(ta, "target"), 0)
    t_stride = as_array(t_flat, "target").strides[0]
    per_row = output(None, ha, (n_tok,), ha.dtype if reduction == "none" else tc.float32)
    logits = empty_like(ha, (cp.chunk, n_vocab), ha.dtype)
    w_t = _transposed(weight)
    values = {"target": flat_view(ta, "target"), "loss": flat_view(per_row, "loss"), "ignore_index": ignore_index}
    block, warps = reduce_config(n_tok, t)
    if return_grad:
        scale = empty_like(ha, (1,), tc.float32)
        values["scale"] = view(scale, (1,), (1,))
        execute([Launch.of(ce_scale_kernel, (1,), ("target", "scale", "ignore_index"), warps, schedule="scale",
                           MEAN=reduction == "mean", BLOCK=block)], Operands({"target": ta}, values))
        dh = output(None, ha, ha.shape, ha.dtype)
        dh_rows = _rows(dh, (n_tok, n_hidden), (n_hidden, 1))
        dw = output(None, wa, wa.shape, wa.dtype)
        db = output(None, ba, ba.shape, ba.dtype) if ba is not None else None
        acc_w = empty_like(ha, wa.shape, tc.float32) if cp.accumulate else None
        acc_b = empty_like(ha, ba.shape, tc.float32) if cp.accumulate and ba is not None else None

    for c in range(cp.chunks):
        c0, c1 = c * cp.chunk, min((c + 1) * cp.chunk, n_tok)
        last = c == cp.chunks - 1
        h_c = _first_rows(h_rows, c0, c1, row_stride)
        lg = _first_rows(logits.obj, 0, c1 - c0, n_vocab)
        matmul(h_c, w_t, bias=bias, out=lg)
        la = as_array(lg, "logits")
        chunk_values = dict(values, logits=view(la, la.shape, la.strides),
                            target=flat_view(as_array(_first_rows(t_flat, c0, c1, t_stride), "target"), "target"),
                            loss=flat_view(as_array(_first_rows(per_row.obj, c0, c1, 1), "loss"), "loss"))
        ce = cross_entropy_plan(la, as_array(_first_rows(t_flat, c0, c1, t_stride), "target"), "none", target_t,
                                grad=return_grad, smoothing=label_smoothing)
        if return_grad:
            chunk_values["grad"] = chunk_values["logits"]   # the logits become their gradient
            ce = [ln for ln in ce if ln.kernel is not ce_scale_kernel]   # the factor of every token, above
        execute(ce, Operands({"logits": la}, chunk_values))
        if not return_grad:
            continue
        matmul(lg, weight, out=_first_rows(dh_rows, c0, c1, n_hidden))
        lg_t = _transposed(lg)
        if not cp.accumulate:
            matmul(lg_t, h_c, out=dw.obj)
        elif c == 0:
            matmul(lg_t, h_c, out=acc_w.obj, out_dtype=tc.float32)
        else:
            matmul(lg_t, h_c, out=dw.obj)   # this chunk's part, then added to the f32 sum
            _accumulate(acc_w, dw.obj, dw if last else acc_w, first=False)
        if ba is not None:
            part = _sum(lg, 0)
            dst = db if last else acc_b
            _accumulate(acc_b, part, dst, first=c == 0)

    if reduction == "none":
        loss = per_row.obj
    else:
        result = output(None, ha, (), ha.dtype)
        red = dict(values, loss=flat_view(per_row, "loss"), result=view(result, (1,), (1,)))
        execute([Launch.of(ce_reduce_kernel, (1,), ("loss", "target", "result", "ignore_index"), warps,
                           schedule="reduce", MEAN=reduction == "mean", BLOCK=block)], Operands({"target": ta}, red))
        loss = result.obj
    if not return_grad:
        return loss
    return loss, dh.obj, dw.obj, (db.obj if db is not None else None)
