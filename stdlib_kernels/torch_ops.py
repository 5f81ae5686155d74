"""The standard library as PyTorch custom ops: `torch.ops.tilec.<name>`, differentiable
where the op has a backward, visible to `torch.compile` and capturable in CUDA graphs.

    from tilec.stdlib_kernels import torch_ops
    o = torch_ops.attention(q, k, v, causal=True)      # differentiable
    o.sum().backward()

Each op is one `OpSpec` in `OPS`: its schema, the eager implementation (the stdlib
entry point on CUDA tensors), a fake implementation that computes the output shapes
only (what `torch.compile` and FakeTensorMode trace), and optionally its autograd
(`setup_context` saves what the backward needs; `backward` returns one gradient per
input, None for the non-tensor ones). `register()` defines them all with
`torch.library.custom_op`, once. An op without a backward yet still gets an autograd
entry, which raises a clear error when a gradient reaches it.

Why these ops capture and compile:
- outputs are allocated by the entry points with `torch.empty` on the inputs' device
  (`_common.output`), so inside `torch.cuda.graph` they come from the graph's pool;
  launches go to torch's current stream; nothing synchronizes with the host. A
  kernel compiles on its first call: warm up (call once) before capturing.
- the fake implementations read shapes and dtypes only, so `torch.compile(fullgraph=True)`
  traces through them, with dynamic shapes too.

torch is optional for tilec: this module imports it if present, and `import
tilec.stdlib_kernels` never imports this module.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

try:
    import torch
except ImportError:   # the functions below say so when called
    torch = None

# (the package's names `attention`, `softmax`, ... are the functions, not their modules)
from . import backward as _bwd
from . import elementwise as _ew
from . import elementwise_backward as _ewb
from . import norms as _norms
from .add_norm import add_rms_norm as _add_rms_norm
from .add_norm import add_rms_norm_backward as _add_rms_norm_backward
from . import reductions as _red
from . import reductions_dim as _rdim
from . import transpose as _tr
from .attention import _window, check_layout
from .attention import attention as _attention
from .attention_bwd import attention_backward as _attention_backward_fn
from .cross_entropy import check_label_smoothing as _check_ls
from .cross_entropy import cross_entropy as _cross_entropy
from .dropout import dropout as _dropout
from .embedding import embedding as _embedding
from .embedding import embedding_backward as _sk_embedding_backward
from .linear_cross_entropy import linear_cross_entropy as _lce
from .matmul import matmul as _sk_matmul
from .sampling import sample as _sample
from .softmax import log_softmax as _log_softmax
from .softmax import softmax as _softmax
from .topk import topk as _topk

__all__ = ["OpSpec", "OPS", "register", "attention", "attention_mods", "rms_norm", "layer_norm", "softmax", "log_softmax",
           "silu_and_mul", "swiglu", "gelu", "rope", "dropout", "cross_entropy", "matmul",
           "linear_cross_entropy", "embedding", "add_rms_norm", "topk", "sample", "sum", "amax", "amin", "max",
           "min", "argmax", "argmin", "cumsum", "transpose"]


@dataclass(frozen=True)
class OpSpec:
    """One custom op: `torch.ops.tilec.<name>` with `schema`, run by `impl`, traced by `fake`."""
    schema: str
    impl: Callable
    fake: Callable
    backward: Optional[Callable] = None        # (ctx, *grads) -> a gradient (or None) per input
    setup_context: Optional[Callable] = None   # (ctx, inputs, output): what the backward keeps
    mutates: Tuple[str, ...] = ()              # arguments written in place (the `*_out` ops: "out")


# ----------------------------------------------------------------------------- attention
def _bhsd_shape(t, layout):
    b, x1, x2, d = t.shape
    return (b, x2, x1, d) if layout == "bshd" else (b, x1, x2, d)


def _window_arg(wl: int, wr: int):
    return None if (wl, wr) == (-1, -1) else (wl, wr)


def _attention_impl(q, k, v, causal, scale, window_left, window_right, softcap, layout):
    return _attention(q, k, v, causal=causal, scale=scale, window=_window_arg(window_left, window_right),
                      softcap=softcap, layout=layout, return_lse=True)


def _attention_fake(q, k, v, causal, scale, window_left, window_right, softcap, layout):
    check_layout(layout)
    b, h, n_q, _ = _bhsd_shape(q, layout)
    dv = v.shape[-1]
    out = q.new_empty((b, n_q, h, dv) if layout == "bshd" else (b, h, n_q, dv))
    return out, q.new_empty((b, h, n_q), dtype=torch.float32)


def _attention_setup(ctx, inputs, output):
    q, k, v, *rest = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.rest = tuple(rest)   # causal, scale, window_left, window_right, softcap, layout


def _attention_backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    if dout.stride(-1) != 1:   # a broadcast gradient (o.sum()'s): the kernels need a unit head-dim stride
        dout = dout.contiguous()
    dq, dk, dv = _call("attention_backward", dout, q, k, v, out, lse, dlse, *ctx.rest)
    return (dq, dk, dv) + (None,) * len(ctx.rest)


def _attention_backward_impl(dout, q, k, v, out, lse, dlse, causal, scale, window_left, window_right, softcap,
                             layout):
    return _attention_backward_fn(dout, q, k, v, out, lse, causal=causal, scale=scale,
                                  window=_window_arg(window_left, window_right), softcap=softcap,
                                  layout=layout, dlse=dlse)


def _attention_backward_fake(dout, q, k, v, out, lse, dlse, *rest):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


_ATTN_ARGS = "bool causal, float? scale, int window_left, int window_right, float? softcap, str layout"


# ----------------------------------------------------------------------------- row and elementwise ops
# Each forward op returns what its backward needs besides its inputs (the norms' statistics,
# cross_entropy's gradient); the user-facing functions return the value alone. A backward calls
# the `*_backward` op, so torch.compile traces both as opaque calls.
def _like(x, *rest):
    return x.new_empty(x.shape)


def _rows_ok(t):
    """dy as the backward kernels take it: last stride 1 and rows that flatten (o.sum()'s
    gradient is a stride-0 broadcast)."""
    return t if t.is_contiguous() else t.contiguous()


def _empty0(x):
    # the gradient of an absent weight/bias: ops return tensors, so a 0-element placeholder
    return x.new_empty((0,))


def _grad_or_none(g, present):
    return g if present else None


# rms_norm / layer_norm: the forward keeps rstd (and mean), f32 of x.shape[:-1]
def _rms_norm_impl(x, weight, eps):
    return _norms.rms_norm(x, weight, eps, return_stats=True)


def _stats_fake(x, *rest):
    return x.new_empty(tuple(x.shape[:-1]), dtype=torch.float32)


def _rms_norm_fake(x, weight, eps):
    return x.new_empty(x.shape), _stats_fake(x)


def _rms_norm_setup(ctx, inputs, output):
    x, weight, _eps = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.has_w = weight is not None


def _rms_norm_backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = _call("rms_norm_backward", _rows_ok(dy), x, weight if ctx.has_w else None, rstd)
    return dx, _grad_or_none(dw, ctx.has_w), None


def _rms_norm_backward_impl(dy, x, weight, rstd):
    dx, dw = _bwd.rms_norm_backward(dy, x, weight, rstd)
    return dx, (dw if dw is not None else _empty0(dy))


def _rms_norm_backward_fake(dy, x, weight, rstd):
    return dy.new_empty(x.shape), (weight.new_empty(weight.shape) if weight is not None else _empty0(dy))


def _layer_norm_impl(x, weight, bias, eps):
    return _norms.layer_norm(x, weight, bias, eps, return_stats=True)


def _layer_norm_fake(x, weight, bias, eps):
    return x.new_empty(x.shape), _stats_fake(x), _stats_fake(x)


def _layer_norm_setup(ctx, inputs, output):
    x, weight, bias, _eps = inputs
    ctx.save_for_backward(x, weight, bias, output[1], output[2])
    ctx.has_w, ctx.has_b = weight is not None, bias is not None


def _layer_norm_backward(ctx, dy, _dmean, _drstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dw, db = _call("layer_norm_backward", _rows_ok(dy), x, weight if ctx.has_w else None,
                       bias if ctx.has_b else None, mean, rstd)
    return dx, _grad_or_none(dw, ctx.has_w), _grad_or_none(db, ctx.has_b), None


def _layer_norm_backward_impl(dy, x, weight, bias, mean, rstd):
    dx, dw, db = _bwd.layer_norm_backward(dy, x, weight, mean, rstd, bias=bias)
    return dx, (dw if dw is not None else _empty0(dy)), (db if db is not None else _empty0(dy))


def _layer_norm_backward_fake(dy, x, weight, bias, mean, rstd):
    return (dy.new_empty(x.shape), weight.new_empty(weight.shape) if weight is not None else _empty0(dy),
            bias.new_empty(bias.shape) if bias is not None else _empty0(dy))


# softmax / log_softmax: the backward kernels take the last dimension; another dim is moved last
def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _softmax_like_backward(op_name):
    def backward(ctx, dy):
        y, = ctx.saved_tensors
        dim = ctx.dim % y.dim()
        op = functools.partial(_call, op_name)
        if dim == y.dim() - 1:
            return op(_rows_ok(dy), y), None
        dx = op(dy.movedim(dim, -1).contiguous(), y.movedim(dim, -1).contiguous())
        return dx.movedim(-1, dim), None
    return backward


def _softmax_backward_fake(dy, y):
    return dy.new_empty(y.shape)


# gelu, silu_and_mul, swiglu, rope, dropout
def _gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1]


def _gelu_backward(ctx, dy):
    x, = ctx.saved_tensors
    return _call("gelu_backward", _rows_ok(dy), x, ctx.approximate), None


def _silu_and_mul_fake(x):
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _silu_and_mul_backward(ctx, dy):
    x, = ctx.saved_tensors
    return _call("silu_and_mul_backward", _rows_ok(dy), x)


def _swiglu_backward(ctx, dy):
    gate, up = ctx.saved_tensors
    dg, du = _call("swiglu_backward", _rows_ok(dy), gate, up)
    return dg, du


def _rope_setup(ctx, inputs, output):
    _x, cos, sin, interleaved, seq_dim = inputs
    ctx.save_for_backward(cos, sin)
    ctx.rest = (interleaved, seq_dim)


def _rope_backward(ctx, dy):
    cos, sin = ctx.saved_tensors
    return _call("rope_backward", _rows_ok(dy), cos, sin, *ctx.rest), None, None, None, None


def _dropout_setup(ctx, inputs, output):
    ctx.p, ctx.seed = inputs[1], inputs[2]


def _dropout_backward(ctx, dy):
    # the forward's mask, regenerated from (seed, element index): dropout of dy itself
    return _call("dropout", _rows_ok(dy), ctx.p, ctx.seed), None, None


# cross_entropy: the differentiable form writes dlogits in the forward (no logits-sized tensor kept)
def _cross_entropy_fake(logits, target, ignore_index, reduction, label_smoothing=0.0):
    return logits.new_empty(tuple(logits.shape[:-1]) if reduction == "none" else ())


def _ce_grad_impl(logits, target, ignore_index, reduction, label_smoothing=0.0):
    return _cross_entropy(logits, target, ignore_index, reduction, return_grad=True, label_smoothing=label_smoothing)


def _ce_grad_fake(logits, target, ignore_index, reduction, label_smoothing=0.0):
    return _cross_entropy_fake(logits, target, ignore_index, reduction), logits.new_empty(logits.shape)


def _ce_grad_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1])
    ctx.reduction = inputs[3]


def _ce_grad_backward(ctx, dloss, _ddlogits):
    dlogits, = ctx.saved_tensors
    # dlogits is the gradient for an upstream 1 ("none": of the sum of the row losses)
    scale = dloss.unsqueeze(-1) if ctx.reduction == "none" else dloss
    return (dlogits * scale.to(dlogits.dtype)), None, None, None, None


# matmul: dA = dC Bᵀ, dB = Aᵀ dC through the GEMM with transposed views (it takes any strides)
def _matmul_fake(a, b):
    m, n = a.shape[-2], b.shape[-1]
    lead = a.shape[:-2] if a.dim() == 3 else b.shape[:-2]
    return a.new_empty((*lead, m, n))


def _matmul_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _matmul_backward(ctx, dc):
    a, b = ctx.saved_tensors
    dc = _rows_ok(dc)
    mm = functools.partial(_call, "matmul")
    da = db = None
    if ctx.needs_input_grad[0]:
        da = mm(dc, b.transpose(-1, -2))
        if a.dim() == 2 and da.dim() == 3:   # a shared by every batch entry
            da = da.sum(0)
    if ctx.needs_input_grad[1]:
        if b.dim() == 2 and a.dim() == 3:    # b shared: sum over the batch as one product of its rows
            db = mm(a.reshape(-1, a.shape[-1]).transpose(0, 1), dc.reshape(-1, dc.shape[-1]))
        elif b.dim() == 3 and a.dim() == 2:
            db = mm(a.transpose(0, 1).expand(b.shape[0], -1, -1), dc)
        else:
            db = mm(a.transpose(-1, -2), dc)
    return da, db


def _matmul_impl(a, b):
    return _sk_matmul(a, b)


# linear_cross_entropy: the forward computes the loss and the three gradients chunk by chunk
# (stdlib_kernels/linear_cross_entropy.py); the backward scales them by the upstream gradient
_LCE_ARGS = ("Tensor hidden, Tensor weight, Tensor target, Tensor? bias, int ignore_index, str reduction, int? chunk, "
             "float label_smoothing")


def _lce_impl(hidden, weight, target, bias, ignore_index, reduction, chunk, label_smoothing=0.0):
    loss, dh, dw, db = _lce(hidden, weight, target, bias=bias, ignore_index=ignore_index, reduction=reduction,
                            chunk=chunk, label_smoothing=label_smoothing)
    return loss, dh, dw, (db if db is not None else _empty0(dh))


def _lce_fake(hidden, weight, target, bias, ignore_index, reduction, chunk, label_smoothing=0.0):
    loss = hidden.new_empty(tuple(hidden.shape[:-1]) if reduction == "none" else ())
    return (loss, hidden.new_empty(hidden.shape), weight.new_empty(weight.shape),
            bias.new_empty(bias.shape) if bias is not None else _empty0(hidden))


def _lce_setup(ctx, inputs, output):
    ctx.save_for_backward(*output[1:])
    ctx.has_b = inputs[3] is not None


def _lce_backward(ctx, dloss, *_unused):
    dh, dw, db = ctx.saved_tensors
    # mean/sum only (the function refuses "none" with gradients): dloss is a 0-d tensor
    grads = [dh, dw] + ([db] if ctx.has_b else [])
    if _tracing():
        grads = [g * dloss.to(g.dtype) for g in grads]
    else:
        # eager: scaled where they lie, in one vectorized pass (no second weight-sized tensor,
        # nor torch's broadcast kernel for a 0-d operand at half the bandwidth); a second
        # backward (retain_graph=True) is refused by autograd: the saved tensors were modified
        for dt in {g.dtype for g in grads}:
            torch._foreach_mul_([g for g in grads if g.dtype == dt], dloss.to(dt))
    return grads[0], grads[1], None, (grads[2] if ctx.has_b else None), None, None, None, None


def _lce_loss_impl(hidden, weight, target, bias, ignore_index, reduction, chunk, label_smoothing=0.0):
    return _lce(hidden, weight, target, bias=bias, ignore_index=ignore_index, reduction=reduction, chunk=chunk,
                return_grad=False, label_smoothing=label_smoothing)


def _lce_loss_fake(hidden, weight, target, bias, ignore_index, reduction, chunk, label_smoothing=0.0):
    return hidden.new_empty(tuple(hidden.shape[:-1]) if reduction == "none" else ())


# embedding: the backward sums the gradient rows of duplicate ids (sorted with torch.sort on the
# device, then segment sums: deterministic, no host synchronization)
def _embedding_fake(weight, indices, padding_idx):
    return weight.new_empty((*indices.shape, weight.shape[1]))


def _embedding_setup(ctx, inputs, output):
    weight, indices, padding_idx = inputs
    ctx.save_for_backward(indices)
    ctx.num_weights, ctx.padding_idx = weight.shape[0], padding_idx


def _embedding_grad(ctx, dout):
    indices, = ctx.saved_tensors
    dw = _call("embedding_backward", _rows_ok(dout), indices, ctx.num_weights, ctx.padding_idx)
    return dw, None, None


def _embedding_backward_fake(grad, indices, num_weights, padding_idx):
    return grad.new_empty((num_weights, grad.shape[-1]))


# add_rms_norm: the forward keeps new_residual and rstd; x and residual get one gradient
def _add_rms_norm_fake(x, residual, weight, eps):
    return x.new_empty(x.shape), residual.new_empty(x.shape), _stats_fake(x)


def _add_rms_norm_setup(ctx, inputs, output):
    x, residual, weight, _eps = inputs
    ctx.save_for_backward(output[1], weight, output[2])
    ctx.has_w = weight is not None
    ctx.dtypes = (x.dtype, residual.dtype)


def _add_rms_norm_backward_op(ctx, dy, dresidual, _drstd):
    h, weight, rstd = ctx.saved_tensors
    dx, dw = _call("add_rms_norm_backward", _rows_ok(dy), None if dresidual is None else _rows_ok(dresidual),
                   h, weight if ctx.has_w else None, rstd)
    # one gradient for both, in each input's dtype (an f32 residual stream next to a bf16 x)
    dx_x, dx_r = (dx if dx.dtype == dt else dx.to(dt) for dt in ctx.dtypes)
    return dx_x, dx_r, _grad_or_none(dw, ctx.has_w), None


def _add_rms_norm_backward_impl(dy, dresidual, residual_out, weight, rstd):
    dx, dw = _add_rms_norm_backward(dy, dresidual, residual_out, weight, rstd)
    return dx, (dw if dw is not None else _empty0(dy))


def _add_rms_norm_backward_fake(dy, dresidual, residual_out, weight, rstd):
    return dy.new_empty(residual_out.shape), (weight.new_empty(weight.shape) if weight is not None else _empty0(dy))
# sum / amax / amin / max / min / argmax / argmin (torch's forms: dim an int or None, keepdim),
# cumsum over any dim, transpose of any rank
def _reduced_shape(x, dim, keepdim):
    if dim is None:
        return (1,) * x.dim() if keepdim else ()
    if x.dim() == 0:
        return ()
    d = dim % x.dim()
    return tuple(x.shape[:d]) + ((1,) if keepdim else ()) + tuple(x.shape[d + 1:])


def _reduced_fake(x, dim, keepdim):
    return x.new_empty(_reduced_shape(x, dim, keepdim))


def _indices_fake(x, dim, keepdim):
    return x.new_empty(_reduced_shape(x, dim, keepdim), dtype=torch.int64)


def _values_indices_fake(x, dim, keepdim):
    return _reduced_fake(x, dim, keepdim), _indices_fake(x, dim, keepdim)


def _shape_setup(ctx, inputs, output):
    x, *rest = inputs
    ctx.shape, ctx.rest = tuple(x.shape), tuple(rest)


def _sum_backward(ctx, dy):
    # every element of the reduced dimension (all of them for dim=None) gets dy
    dim, keepdim = ctx.rest
    if dim is None:
        dy = dy.reshape((1,) * len(ctx.shape))
    elif not keepdim and ctx.shape:
        dy = dy.unsqueeze(dim % len(ctx.shape))
    return dy.expand(ctx.shape), None, None


def _extreme_setup(ctx, inputs, output):
    x, dim, keepdim = inputs
    ctx.save_for_backward(output[1])
    ctx.shape, ctx.dim, ctx.keepdim = tuple(x.shape), dim, keepdim


def _extreme_backward(ctx, dy, _dindices):
    # dy to the element whose index the forward returned, zeros elsewhere (torch's max(dim))
    indices, = ctx.saved_tensors
    if not ctx.shape:
        return dy.clone(), None, None
    d = ctx.dim % len(ctx.shape)
    if not ctx.keepdim:
        dy, indices = dy.unsqueeze(d), indices.unsqueeze(d)
    return dy.new_zeros(ctx.shape).scatter(d, indices, dy), None, None


def _cumsum_backward(ctx, dy):
    # d/dx_i of sum_j dy_j c_j = the sum of dy_j over j >= i: a reversed running sum
    dim, = ctx.rest
    if not ctx.shape:
        return dy.clone(), None
    d = dim % len(ctx.shape)
    return _call("cumsum", dy.flip(d), d).flip(d), None


def _transpose_fake(x, dim0, dim1):
    shape = list(x.shape)
    if shape:
        d0, d1 = dim0 % len(shape), dim1 % len(shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
    return x.new_empty(shape)


def _transpose_backward(ctx, dy):
    dim0, dim1 = ctx.rest
    return _call("transpose", dy, dim0, dim1), None, None


_RED_ARGS = "Tensor x, int? dim, bool keepdim"
_CE_ARGS = "Tensor logits, Tensor target, int ignore_index, str reduction, float label_smoothing"


OPS: Dict[str, OpSpec] = {
    "attention": OpSpec(f"(Tensor q, Tensor k, Tensor v, {_ATTN_ARGS}) -> (Tensor, Tensor)",
                        _attention_impl, _attention_fake, _attention_backward, _attention_setup),
    "attention_backward": OpSpec(f"(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? dlse, "
                                 f"{_ATTN_ARGS}) -> (Tensor, Tensor, Tensor)",
                                 _attention_backward_impl, _attention_backward_fake),
    "rms_norm": OpSpec("(Tensor x, Tensor? weight, float eps) -> (Tensor, Tensor)",
                       _rms_norm_impl, _rms_norm_fake, _rms_norm_backward, _rms_norm_setup),
    "rms_norm_backward": OpSpec("(Tensor dy, Tensor x, Tensor? weight, Tensor rstd) -> (Tensor, Tensor)",
                                _rms_norm_backward_impl, _rms_norm_backward_fake),
    "layer_norm": OpSpec("(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
                         _layer_norm_impl, _layer_norm_fake, _layer_norm_backward, _layer_norm_setup),
    "layer_norm_backward": OpSpec("(Tensor dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, Tensor rstd) "
                                  "-> (Tensor, Tensor, Tensor)",
                                  _layer_norm_backward_impl, _layer_norm_backward_fake),
    "sum": OpSpec(f"({_RED_ARGS}) -> Tensor", lambda x, dim, keepdim: _red.sum(x, dim, keepdim), _reduced_fake,
                  _sum_backward, _shape_setup),
    "amax": OpSpec(f"({_RED_ARGS}) -> Tensor", lambda x, dim, keepdim: _red.amax(x, dim, keepdim), _reduced_fake),
    "amin": OpSpec(f"({_RED_ARGS}) -> Tensor", lambda x, dim, keepdim: _rdim.amin(x, dim, keepdim), _reduced_fake),
    "max_dim": OpSpec("(Tensor x, int dim, bool keepdim) -> (Tensor, Tensor)",
                      lambda x, dim, keepdim: tuple(_rdim.max(x, dim, keepdim)), _values_indices_fake,
                      _extreme_backward, _extreme_setup),
    "min_dim": OpSpec("(Tensor x, int dim, bool keepdim) -> (Tensor, Tensor)",
                      lambda x, dim, keepdim: tuple(_rdim.min(x, dim, keepdim)), _values_indices_fake,
                      _extreme_backward, _extreme_setup),
    "argmax": OpSpec(f"({_RED_ARGS}) -> Tensor", lambda x, dim, keepdim: _rdim.argmax(x, dim, keepdim),
                     _indices_fake),
    "argmin": OpSpec(f"({_RED_ARGS}) -> Tensor", lambda x, dim, keepdim: _rdim.argmin(x, dim, keepdim),
                     _indices_fake),
    "cumsum": OpSpec("(Tensor x, int dim) -> Tensor", lambda x, dim: _rdim.cumsum(x, dim), _like,
                     _cumsum_backward, _shape_setup),
    "transpose": OpSpec("(Tensor x, int dim0, int dim1) -> Tensor",
                        lambda x, dim0, dim1: _tr.transpose(x, dim0, dim1), _transpose_fake,
                        _transpose_backward, _shape_setup),
    "softmax": OpSpec("(Tensor x, int dim) -> Tensor", lambda x, dim: _softmax(x, dim), _like,
                      _softmax_like_backward("softmax_backward"), _softmax_setup),
    "softmax_backward": OpSpec("(Tensor dy, Tensor y) -> Tensor", lambda dy, y: _bwd.softmax_backward(dy, y),
                               _softmax_backward_fake),
    "log_softmax": OpSpec("(Tensor x, int dim) -> Tensor", lambda x, dim: _log_softmax(x, dim), _like,
                          _softmax_like_backward("log_softmax_backward"), _softmax_setup),
    "log_softmax_backward": OpSpec("(Tensor dy, Tensor y) -> Tensor",
                                   lambda dy, y: _bwd.log_softmax_backward(dy, y), _softmax_backward_fake),
    "silu_and_mul": OpSpec("(Tensor x) -> Tensor", lambda x: _ew.silu_and_mul(x), _silu_and_mul_fake,
                           _silu_and_mul_backward, _save_inputs),
    "silu_and_mul_backward": OpSpec("(Tensor dy, Tensor x) -> Tensor",
                                    lambda dy, x: _ewb.silu_and_mul_backward(dy, x),
                                    lambda dy, x: dy.new_empty(x.shape)),
    "swiglu": OpSpec("(Tensor gate, Tensor up) -> Tensor", lambda g, u: _ew.swiglu(g, u), _like,
                     _swiglu_backward, _save_inputs),
    "swiglu_backward": OpSpec("(Tensor dy, Tensor gate, Tensor up) -> (Tensor, Tensor)",
                              lambda dy, g, u: _ewb.swiglu_backward(dy, g, u),
                              lambda dy, g, u: (dy.new_empty(g.shape), dy.new_empty(u.shape))),
    "gelu": OpSpec("(Tensor x, str approximate) -> Tensor", lambda x, approximate: _ew.gelu(x, approximate), _like,
                   _gelu_backward, _gelu_setup),
    "gelu_backward": OpSpec("(Tensor dy, Tensor x, str approximate) -> Tensor",
                            lambda dy, x, approximate: _ewb.gelu_backward(dy, x, approximate),
                            lambda dy, x, approximate: dy.new_empty(x.shape)),
    "rope": OpSpec("(Tensor x, Tensor cos, Tensor sin, bool interleaved, int? seq_dim) -> Tensor",
                   lambda x, c, s, interleaved, seq_dim: _ew.rope(x, c, s, interleaved=interleaved, seq_dim=seq_dim),
                   _like, _rope_backward, _rope_setup),
    "rope_backward": OpSpec("(Tensor dy, Tensor cos, Tensor sin, bool interleaved, int? seq_dim) -> Tensor",
                            lambda dy, c, s, interleaved, seq_dim: _ewb.rope_backward(
                                dy, c, s, interleaved=interleaved, seq_dim=seq_dim), _like),
    "dropout": OpSpec("(Tensor x, float p, int seed) -> Tensor", lambda x, p, seed: _dropout(x, p, seed), _like,
                      _dropout_backward, _dropout_setup),
    "cross_entropy": OpSpec(f"({_CE_ARGS}) -> Tensor",
                            lambda x, t, ignore_index, reduction, label_smoothing=0.0: _cross_entropy(
                                x, t, ignore_index, reduction, label_smoothing=label_smoothing),
                            _cross_entropy_fake),
    "cross_entropy_with_grad": OpSpec(f"({_CE_ARGS}) -> (Tensor, Tensor)",
                                      _ce_grad_impl, _ce_grad_fake, _ce_grad_backward, _ce_grad_setup),
    "matmul": OpSpec("(Tensor a, Tensor b) -> Tensor", _matmul_impl, _matmul_fake, _matmul_backward,
                     _matmul_setup),
    "linear_cross_entropy": OpSpec(f"({_LCE_ARGS}) -> (Tensor, Tensor, Tensor, Tensor)", _lce_impl, _lce_fake,
                                   _lce_backward, _lce_setup),
    "linear_cross_entropy_loss": OpSpec(f"({_LCE_ARGS}) -> Tensor", _lce_loss_impl, _lce_loss_fake),
    "embedding": OpSpec("(Tensor weight, Tensor indices, int? padding_idx) -> Tensor",
                        lambda w, i, padding_idx: _embedding(w, i), _embedding_fake, _embedding_grad,
                        _embedding_setup),
    "embedding_backward": OpSpec("(Tensor grad, Tensor indices, int num_weights, int? padding_idx) -> Tensor",
                                 lambda g, i, n, padding_idx: _sk_embedding_backward(g, i, n, padding_idx),
                                 _embedding_backward_fake),
    "add_rms_norm": OpSpec("(Tensor x, Tensor residual, Tensor? weight, float eps) -> (Tensor, Tensor, Tensor)",
                           lambda x, r, w, eps: _add_rms_norm(x, r, w, eps, return_stats=True), _add_rms_norm_fake,
                           _add_rms_norm_backward_op, _add_rms_norm_setup),
    "add_rms_norm_backward": OpSpec("(Tensor dy, Tensor? dresidual, Tensor residual_out, Tensor? weight, Tensor rstd) "
                                    "-> (Tensor, Tensor)", _add_rms_norm_backward_impl, _add_rms_norm_backward_fake),
}


# ----------------------------------------------------------------------------- topk, sample
def _topk_fake(x, k, largest):
    shape = tuple(x.shape[:-1]) + (k,)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


def _topk_setup(ctx, inputs, output):
    x = inputs[0]
    ctx.save_for_backward(output[1])
    ctx.x_shape, ctx.x_dtype = tuple(x.shape), x.dtype


def _topk_backward(ctx, dvalues, dindices):
    # each selected value's gradient goes back where it came from (indices are distinct per row)
    (indices,) = ctx.saved_tensors
    dx = dvalues.new_zeros(ctx.x_shape).scatter(-1, indices, dvalues.to(ctx.x_dtype))
    return dx, None, None


def _sample_impl(logits, temperature, top_k, top_p, seed, offset):
    return _sample(logits, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, offset=offset)


def _sample_fake(logits, temperature, top_k, top_p, seed, offset):
    return logits.new_empty(tuple(logits.shape[:-1]), dtype=torch.int64)


OPS.update({
    "topk": OpSpec("(Tensor x, int k, bool largest) -> (Tensor, Tensor)",
                   lambda x, k, largest: _topk(x, k, -1, largest), _topk_fake, _topk_backward, _topk_setup),
    # not differentiable (an int64 result): the autograd entry is never reached
    "sample": OpSpec("(Tensor logits, float temperature, int? top_k, float? top_p, int seed, int offset) -> Tensor",
                     _sample_impl, _sample_fake),
})


# `out=` variants: the op written into a given tensor, declared as mutating it (torch.compile
# functionalizes them); no autograd (as torch's out= ops). `out` may be the input itself where
# the stdlib op allows it (the elementwise-shaped ops).
def _out_op(args: str, run: Callable, outs: Tuple[str, ...] = ("out",)) -> OpSpec:
    def impl(*a):
        run(*a)
    marks = ", ".join(f"Tensor({chr(ord('a') + i)}!) {name}" for i, name in enumerate(outs))
    return OpSpec(f"({args}, {marks}) -> ()", impl, lambda *a: None, mutates=tuple(outs))


OPS.update({
    "rms_norm_out": _out_op("Tensor x, Tensor? weight, float eps",
                            lambda x, w, eps, out: _norms.rms_norm(x, w, eps, out=out)),
    "layer_norm_out": _out_op("Tensor x, Tensor? weight, Tensor? bias, float eps",
                              lambda x, w, b, eps, out: _norms.layer_norm(x, w, b, eps, out=out)),
    "softmax_out": _out_op("Tensor x, int dim", lambda x, dim, out: _softmax(x, dim, out=out)),
    "log_softmax_out": _out_op("Tensor x, int dim", lambda x, dim, out: _log_softmax(x, dim, out=out)),
    "gelu_out": _out_op("Tensor x, str approximate", lambda x, approximate, out: _ew.gelu(x, approximate, out=out)),
    "silu_and_mul_out": _out_op("Tensor x", lambda x, out: _ew.silu_and_mul(x, out=out)),
    "swiglu_out": _out_op("Tensor gate, Tensor up", lambda g, u, out: _ew.swiglu(g, u, out=out)),
    "rope_out": _out_op("Tensor x, Tensor cos, Tensor sin, bool interleaved, int? seq_dim",
                        lambda x, c, s, interleaved, seq_dim, out: _ew.rope(x, c, s, interleaved=interleaved,
                                                                             seq_dim=seq_dim, out=out)),
    "dropout_out": _out_op("Tensor x, float p, int seed", lambda x, p, seed, out: _dropout(x, p, seed, out=out)),
    "matmul_out": _out_op("Tensor a, Tensor b", lambda a, b, out: _sk_matmul(a, b, out=out)),
    # the ops whose torch counterparts take out= (torch.topk, max(dim), multinomial, ...)
    "topk_out": _out_op("Tensor x, int k, bool largest",
                        lambda x, k, largest, values, indices: _topk(x, k, -1, largest, out=(values, indices)),
                        ("values", "indices")),
    "sample_out": _out_op("Tensor logits, float temperature, int? top_k, float? top_p, int seed, int offset",
                          lambda x, temperature, top_k, top_p, seed, offset, out: _sample(
                              x, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, offset=offset,
                              out=out)),
    "sum_out": _out_op(_RED_ARGS, lambda x, dim, keepdim, out: _red.sum(x, dim, keepdim, out=out)),
    "amax_out": _out_op(_RED_ARGS, lambda x, dim, keepdim, out: _red.amax(x, dim, keepdim, out=out)),
    "amin_out": _out_op(_RED_ARGS, lambda x, dim, keepdim, out: _rdim.amin(x, dim, keepdim, out=out)),
    "argmax_out": _out_op(_RED_ARGS, lambda x, dim, keepdim, out: _rdim.argmax(x, dim, keepdim, out=out)),
    "argmin_out": _out_op(_RED_ARGS, lambda x, dim, keepdim, out: _rdim.argmin(x, dim, keepdim, out=out)),
    "max_dim_out": _out_op("Tensor x, int dim, bool keepdim",
                           lambda x, dim, keepdim, values, indices: _rdim.max(x, dim, keepdim,
                                                                               out=(values, indices)),
                           ("values", "indices")),
    "min_dim_out": _out_op("Tensor x, int dim, bool keepdim",
                           lambda x, dim, keepdim, values, indices: _rdim.min(x, dim, keepdim,
                                                                               out=(values, indices)),
                           ("values", "indices")),
    "cumsum_out": _out_op("Tensor x, int dim", lambda x, dim, out: _rdim.cumsum(x, dim, out=out)),
    "add_rms_norm_out": _out_op("Tensor x, Tensor residual, Tensor? weight, float eps",
                                lambda x, r, w, eps, out, residual_out: _add_rms_norm(
                                    x, r, w, eps, out=out, residual_out=residual_out), ("out", "residual_out")),
    "embedding_backward_out": _out_op("Tensor grad, Tensor indices, int num_weights, int? padding_idx",
                                      lambda g, i, n, padding_idx, out: _sk_embedding_backward(
                                          g, i, n, padding_idx, out=out)),
})

# ----------------------------------------------------------------------------- registration
_lock = threading.Lock()
_registered = False


def _arg_names(schema: str):
    # "(Tensor x, Tensor? weight, float eps) -> Tensor" -> ["x", "weight", "eps"]
    args = schema[schema.index("(") + 1:schema.rindex(") ->")]   # (not the ")" of "Tensor(a!)")
    return [a.split("=")[0].split()[-1] for a in args.split(",") if a.strip()]


def _no_backward(name: str, schema: str):
    names = _arg_names(schema)

    def backward(ctx, *grads):
        wanted = [n for n, need in zip(names, ctx.needs_input_grad) if need]
        raise RuntimeError(f"tilec::{name} has no backward yet, and {', '.join(wanted) or 'an input'} requires "
                           "grad: detach it, or call the op on tensors that do not require grad")
    return backward


def register() -> None:
    """Define every op of `OPS` as `torch.ops.tilec.<name>` (once; later calls return at once).
    The user-facing functions below call it; call it yourself to use `torch.ops.tilec` directly."""
    global _registered
    if _registered:
        return
    if torch is None:
        raise ImportError("tilec.stdlib_kernels.torch_ops needs PyTorch (>= 2.4): pip install torch")
    with _lock:
        if _registered:
            return
        for name, spec in OPS.items():
            if hasattr(torch.ops.tilec, name):   # defined by an earlier import of this module
                continue
            op = torch.library.custom_op(f"tilec::{name}", spec.impl, mutates_args=spec.mutates, schema=spec.schema)
            op.register_fake(spec.fake)
            if not spec.mutates:   # the `*_out` ops are not differentiable (the functions refuse grads)
                backward, setup = _autograd_of(name, spec)
                op.register_autograd(backward, setup_context=setup)
        _registered = True


def _autograd_of(name: str, spec: OpSpec) -> Tuple[Callable, Optional[Callable]]:
    """(backward, setup_context) of op `name`, as both ways of calling it (the registered op,
    the eager Function) use them. For an op of several outputs, the gradient of an output
    nobody used arrives in the backward as None, not as the zeros autograd would fill
    (linear_cross_entropy's outputs include a weight-sized gradient: a 500 MB fill per step);
    only the first output's, which every backward reads, is made zeros, in the rare call
    where only another output's gradient flowed."""
    backward = spec.backward or _no_backward(name, spec.schema)
    setup = spec.setup_context
    if spec.backward is None or not spec.schema.rsplit("->", 1)[1].strip().startswith("("):
        return backward, setup

    def setup_lazy(ctx, inputs, output):
        ctx.set_materialize_grads(False)
        first = output[0]
        ctx.first_output = (tuple(first.shape), first.dtype, first.device)
        if setup is not None:
            setup(ctx, inputs, output)

    def backward_lazy(ctx, grad, *others):
        if grad is None:
            shape, dtype, device = ctx.first_output
            grad = torch.zeros(shape, dtype=dtype, device=device)
        return backward(ctx, grad, *others)
    return backward_lazy, setup_lazy


# ----------------------------------------------------------------------------- calling an op
# torch.ops.tilec.<name> goes through torch's custom-op machinery in Python (autograd wrapper,
# redispatch, alias checks): about 30 us per call on an H200 host, twice per op trained through,
# as much as the stdlib entry itself. In plain eager mode on real tensors an op runs its
# implementation directly, under a torch.autograd.Function made from the same OpSpec when a
# gradient is wanted; where anything traces (torch.compile, a dispatch or function mode,
# functorch transforms, fake tensors) it is called as the registered op.
_EAGER: Dict[str, Callable] = {}
_PLAIN = (torch.Tensor, torch.nn.Parameter) if torch is not None else ()   # not FakeTensor & co.


def _tracing() -> bool:
    """Whether a call must go through the registered op (something other than eager mode sees it)."""
    return torch.compiler.is_compiling() or bool(
        torch._C._len_torch_dispatch_stack() or torch._C._len_torch_function_stack()  # noqa: SLF001
        or torch._C._are_functorch_transforms_active())  # noqa: SLF001


def _call(name: str, *args):
    """torch.ops.tilec.<name>(*args), or its implementation straight in plain eager mode."""
    if EAGER_DIRECT and not _tracing():
        for a in args:
            if isinstance(a, torch.Tensor) and type(a) not in _PLAIN:
                break
        else:
            fn = _EAGER.get(name)
            if fn is None:
                fn = _EAGER[name] = _eager_op(name)
            return fn(*args)
    return getattr(torch.ops.tilec, name)(*args)


# False: every call goes through torch.ops.tilec (the tests compare the two paths)
EAGER_DIRECT = True


def _eager_op(name: str) -> Callable:
    """The direct form of op `name`: its implementation, inside an autograd.Function built
    from the OpSpec's setup_context and backward when an input requires grad."""
    spec = OPS[name]
    if spec.mutates:
        return spec.impl
    backward, setup = _autograd_of(name, spec)

    def forward(ctx, *args):
        out = spec.impl(*args)
        out = tuple(out) if isinstance(out, list) else out
        if setup is not None:
            setup(ctx, args, out)
        return out

    fn = type(f"tilec_{name}", (torch.autograd.Function,),
              {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    def run(*args):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return fn.apply(*args)
        return spec.impl(*args)
    return run


def check_cuda(**tensors) -> None:
    """TypeError naming the first argument that is not a CUDA tensor on the first one's device
    (None arguments are skipped)."""
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if not t.is_cuda:
            other = f" but {first[0]} is on {first[1].device}" if first is not None else ""
            raise TypeError(f"{name}: tilec ops take CUDA tensors, got a tensor on {t.device}{other}")
        if first is None:
            first = (name, t)
        elif t.device != first[1].device:
            raise TypeError(f"{name} is on {t.device} but {first[0]} is on {first[1].device}")


# ----------------------------------------------------------------------------- user-facing functions
def attention(q, k, v, *, causal: bool = False, scale: Optional[float] = None, window=None,
              softcap: Optional[float] = None, layout: str = "bshd", return_lse: bool = False):
    """`tilec.stdlib_kernels.attention` as a differentiable op (`torch.ops.tilec.attention`):
    gradients flow to q, k and v (and through lse, with return_lse=True). Same arguments."""
    register()
    check_cuda(q=q, k=k, v=v)
    check_layout(layout)
    _window(causal, window)   # validates window: TypeError / ValueError naming it
    wl, wr = (-1, -1) if window is None else (int(window[0]), int(window[1]))
    out, lse = _call("attention", q, k, v, bool(causal), scale, wl, wr, softcap, layout)
    return (out, lse) if return_lse else out


def attention_mods(q, k, v, *, score_mod=None, mask_mod=None, block_mask=None, mod_args=(), score_mod_grad=None,
                   scale: Optional[float] = None, layout: str = "bshd", return_lse: bool = False):
    """`tilec.stdlib_kernels.attention` with score_mod / mask_mod / block_mask (FlexAttention's
    semantics, docs/stdlib.md), differentiable in eager mode: gradients flow to q, k and v
    (and through lse, with return_lse=True), never into mod_args; a score_mod's backward
    needs `score_mod_grad`. A plain torch.autograd.Function, not a custom op (the mods are
    @tc.funcs, which an op schema cannot carry), so torch.compile graph-breaks around it."""
    if torch is None:
        raise ImportError("tilec.stdlib_kernels.torch_ops needs PyTorch (>= 2.4): pip install torch")
    check_cuda(q=q, k=k, v=v)
    if score_mod is not None and score_mod_grad is None and torch.is_grad_enabled() and any(
            t.requires_grad for t in (q, k, v)):
        raise ValueError("score_mod_grad: q, k or v requires grad, and the backward of a score_mod needs its "
                         "derivative d score_mod / d score as a @tc.func (1.0 for an additive bias)")
    kw = dict(score_mod=score_mod, mask_mod=mask_mod, block_mask=block_mask, mod_args=tuple(mod_args),
              scale=scale, layout=layout)
    out, lse = _mods_function().apply(q, k, v, kw, score_mod_grad)
    return (out, lse) if return_lse else out


_MODS_FN = []


def _mods_function():
    """The torch.autograd.Function of `attention_mods` (made once: torch is optional)."""
    if not _MODS_FN:
        class AttentionMods(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, kw, score_mod_grad):
                out, lse = _attention(q, k, v, return_lse=True, **kw)
                ctx.save_for_backward(q, k, v, out, lse)
                ctx.kw, ctx.score_mod_grad = kw, score_mod_grad
                return out, lse

            @staticmethod
            def backward(ctx, dout, dlse):
                q, k, v, out, lse = ctx.saved_tensors
                if dout.stride(-1) != 1:   # a broadcast gradient (o.sum()'s)
                    dout = dout.contiguous()
                dq, dk, dv = _attention_backward_fn(dout, q, k, v, out, lse, dlse=dlse.contiguous(),
                                                    score_mod_grad=ctx.score_mod_grad, **ctx.kw)
                return dq, dk, dv, None, None
        _MODS_FN.append(AttentionMods)
    return _MODS_FN[0]


def _no_grad_needed(**tensors) -> None:
    """ValueError naming an argument that requires grad where the op gives it none."""
    for name, t in tensors.items():
        if t is not None and t.requires_grad and torch.is_grad_enabled():
            raise ValueError(f"{name} requires grad, but tilec gives no gradient for it: pass {name}.detach()")


def _into(out, write, inputs):
    """`write(out)` (an `*_out` op) and out: not differentiable, so an input that requires grad
    (with grad mode on) is a ValueError naming it; out must be a CUDA tensor on the inputs' device."""
    check_cuda(**inputs, out=out)
    if torch.is_grad_enabled():
        wants = [n for n, t in inputs.items() if t is not None and t.requires_grad]
        if wants:
            raise ValueError(f"out= is not differentiable, and {', '.join(wants)} requires grad: call without out=, "
                             "or under torch.no_grad()")
    write(out)
    return out


def _outs_into(outs: Dict[str, tuple], write, inputs: dict, differentiable: bool = True):
    """`write()` (an `*_out` op) after checking each out = (tensor, expected shape, expected
    dtype): a CUDA tensor on the inputs' device of that shape and dtype, else a
    TypeError/ValueError naming it (nothing is written). `differentiable`: the op's torch
    counterpart has a gradient, so an input that requires grad (grad mode on) is refused as
    by `_into`; index results (argmax, sampled tokens) have none, and need no such check."""
    check_cuda(**inputs, **{name: t for name, (t, _, _) in outs.items()})
    for name, (t, shape, dtype) in outs.items():
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
        if t.dtype != dtype:
            raise TypeError(f"{name} has dtype {t.dtype}, expected {dtype}")
    if differentiable and torch.is_grad_enabled():
        wants = [n for n, t in inputs.items() if t is not None and t.requires_grad]
        if wants:
            raise ValueError(f"out= is not differentiable, and {', '.join(wants)} requires grad: call without out=, "
                             "or under torch.no_grad()")
    if differentiable:
        write()
    else:
        with torch.no_grad():   # an index result: nothing to record, whatever requires grad
            write()


def _pair_of(out, op: str):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{op}: out must be a (values, indices) pair of tensors, got {type(out).__name__}")
    return out[0], out[1]


def rms_norm(x, weight=None, eps: float = 1e-6, out=None):
    """`tilec.stdlib_kernels.rms_norm` as a differentiable op (gradients to x and weight)."""
    register()
    check_cuda(x=x, weight=weight)
    if out is not None:
        return _into(out, lambda o: _call("rms_norm_out", x, weight, float(eps), o), dict(x=x, weight=weight))
    return _call("rms_norm", x, weight, float(eps))[0]


def layer_norm(x, normalized_shape=None, weight=None, bias=None, eps: float = 1e-5, out=None):
    """`tilec.stdlib_kernels.layer_norm` as a differentiable op (gradients to x, weight, bias):
    torch.nn.functional.layer_norm's signature, the earlier (x, weight, bias, eps) form too.
    Over k > 1 trailing dimensions the op runs on x, weight and bias viewed with those
    dimensions flattened (torch views: no copy, and autograd sees through them)."""
    register()
    if _norms._is_shape(normalized_shape):   # noqa: SLF001 - the stdlib's own test of the form
        check_cuda(x=x, weight=weight, bias=bias)
        k = _norms.norm_dims(x.shape, normalized_shape)   # shapes only: traceable by torch.compile
        if k > 1:
            def flat(t):
                return None if t is None else t.reshape(-1)
            rows = x.reshape(*x.shape[:x.dim() - k], -1)
            y = layer_norm(rows, rows.shape[-1], flat(weight), flat(bias), eps,
                           out=None if out is None else out.view(rows.shape))
            return out if out is not None else y.view(x.shape)
    else:   # the earlier form (x, weight, bias, eps): a fourth positional argument is eps
        if bias is not None and (isinstance(bias, (bool, torch.Tensor)) or not isinstance(bias, (int, float))):
            raise TypeError(f"layer_norm: normalized_shape must be an int or a tuple of ints, got "
                            f"{type(normalized_shape).__name__}; with a weight second (the earlier form), the "
                            "fourth argument is eps, a number")
        if bias is not None:
            eps = bias
        weight, bias = normalized_shape, weight
    check_cuda(x=x, weight=weight, bias=bias)
    if out is not None:
        return _into(out, lambda o: _call("layer_norm_out", x, weight, bias, float(eps), o), dict(x=x, weight=weight, bias=bias))
    return _call("layer_norm", x, weight, bias, float(eps))[0]


def softmax(x, dim: int = -1, out=None):
    register()
    check_cuda(x=x)
    if out is not None:
        return _into(out, lambda o: _call("softmax_out", x, int(dim), o), dict(x=x))
    return _call("softmax", x, int(dim))


def log_softmax(x, dim: int = -1, out=None):
    register()
    check_cuda(x=x)
    if out is not None:
        return _into(out, lambda o: _call("log_softmax_out", x, int(dim), o), dict(x=x))
    return _call("log_softmax", x, int(dim))


def silu_and_mul(x, out=None):
    register()
    check_cuda(x=x)
    if out is not None:
        return _into(out, lambda o: _call("silu_and_mul_out", x, o), dict(x=x))
    return _call("silu_and_mul", x)


def swiglu(gate, up, out=None):
    register()
    check_cuda(gate=gate, up=up)
    if out is not None:
        return _into(out, lambda o: _call("swiglu_out", gate, up, o), dict(gate=gate, up=up))
    return _call("swiglu", gate, up)


def gelu(x, approximate: str = "none", out=None):
    register()
    check_cuda(x=x)
    if out is not None:
        return _into(out, lambda o: _call("gelu_out", x, approximate, o), dict(x=x))
    return _call("gelu", x, approximate)


def rope(x, cos, sin, *, interleaved: bool = False, seq_dim: Optional[int] = None, out=None):
    """`tilec.stdlib_kernels.rope` as a differentiable op: the gradient flows to x (cos and
    sin are tables: one that requires grad is a ValueError)."""
    register()
    check_cuda(x=x, cos=cos, sin=sin)
    _no_grad_needed(cos=cos, sin=sin)
    if out is not None:
        return _into(out, lambda o: _call("rope_out", x, cos, sin, bool(interleaved), None if seq_dim is None else int(seq_dim), o), dict(x=x))
    return _call("rope", x, cos, sin, bool(interleaved), None if seq_dim is None else int(seq_dim))


def dropout(x, p: float, seed: int, out=None):
    """`tilec.stdlib_kernels.dropout` as a differentiable op; the backward regenerates the mask."""
    register()
    check_cuda(x=x)
    if out is not None:
        return _into(out, lambda o: _call("dropout_out", x, float(p), int(seed), o), dict(x=x))
    return _call("dropout", x, float(p), int(seed))


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0):
    """Differentiable in logits: where logits requires grad the forward also writes the
    gradient (`tilec::cross_entropy_with_grad`), which the backward scales by the upstream
    gradient; otherwise the loss alone (`tilec::cross_entropy`). label_smoothing: torch's."""
    register()
    check_cuda(logits=logits, target=target)
    ls = _check_ls(label_smoothing, "cross_entropy")
    if logits.requires_grad and torch.is_grad_enabled():
        return _call("cross_entropy_with_grad", logits, target, int(ignore_index), reduction, ls)[0]
    return _call("cross_entropy", logits, target, int(ignore_index), reduction, ls)


def matmul(a, b, out=None):
    """`tilec.stdlib_kernels.matmul(a, b)` as a differentiable op (2-D or batched 3-D operands,
    one dtype; the result in it). The backward runs the same GEMM on transposed views."""
    register()
    check_cuda(a=a, b=b)
    if out is not None:
        return _into(out, lambda o: _call("matmul_out", a, b, o), dict(a=a, b=b))
    return _call("matmul", a, b)


def linear_cross_entropy(hidden, weight, target, bias=None, ignore_index: int = -100, reduction: str = "mean",
                         chunk: Optional[int] = None, label_smoothing: float = 0.0):
    """`cross_entropy(hidden @ weight.T + bias, target)` without the logits
    (`tilec.stdlib_kernels.linear_cross_entropy`), differentiable in hidden, weight and bias:
    where one of them requires grad the forward computes the gradients too
    (`tilec::linear_cross_entropy`) and the backward scales them by the upstream gradient;
    otherwise the loss alone (`tilec::linear_cross_entropy_loss`). reduction="none" has no
    gradient (the weight's would need each token's upstream gradient in the forward).
    label_smoothing: torch's (cross_entropy's)."""
    register()
    check_cuda(hidden=hidden, weight=weight, target=target, bias=bias)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    ls = _check_ls(label_smoothing, "linear_cross_entropy")
    chunk = None if chunk is None else int(chunk)
    args = (hidden, weight, target, bias, int(ignore_index), reduction, chunk, ls)
    wants = [n for n, t in (("hidden", hidden), ("weight", weight), ("bias", bias)) if t is not None and t.requires_grad]
    if wants and torch.is_grad_enabled():
        if reduction == "none":
            raise ValueError(f"linear_cross_entropy: reduction='none' gives no gradient, and {', '.join(wants)} "
                             "requires grad: use 'mean' or 'sum', or detach")
        return _call("linear_cross_entropy", *args)[0]
    return _call("linear_cross_entropy_loss", *args)


def embedding(input, weight, padding_idx: Optional[int] = None):
    """torch.nn.functional.embedding(input, weight, padding_idx) as a differentiable op
    (`torch.ops.tilec.embedding`; `tilec.stdlib_kernels.embedding(weight, input)`): the gradient
    flows to weight, duplicate ids summed deterministically, none to row `padding_idx`. input:
    int32/int64 ids of any shape; an id out of range reads zeros (and adds no gradient)."""
    register()
    check_cuda(input=input, weight=weight)
    if input.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"input: embedding takes int32 or int64 ids, got {input.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D (num_embeddings, embedding_dim), got shape {tuple(weight.shape)}")
    if padding_idx is not None:
        n = weight.shape[0]
        if not isinstance(padding_idx, int) or isinstance(padding_idx, bool) or not -n <= padding_idx < n:
            raise ValueError(f"padding_idx must be an int in [-{n}, {n}), got {padding_idx!r}")
        padding_idx = padding_idx % n
    return _call("embedding", weight, input, padding_idx)


def add_rms_norm(x, residual, weight=None, eps: float = 1e-6, *, out=None, residual_out=None):
    """`tilec.stdlib_kernels.add_rms_norm` as a differentiable op: (rms_norm(x + residual) * weight,
    x + residual), gradients to x, residual and weight through both outputs. out / residual_out
    (either or both; not differentiable): where y (x's shape and dtype) and x + residual
    (residual's dtype) are written (`tilec::add_rms_norm_out`)."""
    register()
    check_cuda(x=x, residual=residual, weight=weight)
    if out is not None or residual_out is not None:
        y = out if out is not None else torch.empty_like(x)
        h = residual_out if residual_out is not None else x.new_empty(x.shape, dtype=residual.dtype)
        _outs_into({"out": (y, x.shape, x.dtype), "residual_out": (h, x.shape, residual.dtype)},
                   lambda: _call("add_rms_norm_out", x, residual, weight, float(eps), y, h),
                   dict(x=x, residual=residual, weight=weight))
        return y, h
    y, new_residual, _rstd = _call("add_rms_norm", x, residual, weight, float(eps))
    return y, new_residual


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *, out=None):  # noqa: A002
    """`tilec.stdlib_kernels.topk` as a torch op: (values, int64 indices) over the last
    dimension, best first (`sorted` is accepted; the order is always sorted).
    Differentiable in x: the values' gradient is scattered back to their indices.
    out: a (values, indices) pair written in place (`tilec::topk_out`; not differentiable)."""
    register()
    check_cuda(x=x)
    if dim not in (-1, x.dim() - 1):
        raise ValueError(f"topk: only the last dimension is supported (dim=-1), got dim={dim} for shape "
                         f"{tuple(x.shape)}")
    if not isinstance(sorted, bool):
        raise TypeError(f"sorted must be a bool, got {type(sorted).__name__}")
    if out is not None:
        values, indices = _pair_of(out, "topk")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= x.shape[-1]:
            raise ValueError(f"k must be an int in [0, {x.shape[-1]}], got {k!r}")
        shape = tuple(x.shape[:-1]) + (k,)
        _outs_into({"out[0] (values)": (values, shape, x.dtype), "out[1] (indices)": (indices, shape, torch.int64)},
                   lambda: _call("topk_out", x, k, bool(largest), values, indices), dict(x=x))
        return values, indices
    return _call("topk", x, k, largest)


def _signed64(v, name: str) -> int:
    # torch's `int` is a signed 64-bit value: seeds and offsets of 2**63 and up wrap to negatives
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if not -2 ** 63 <= v < 2 ** 64:
        raise ValueError(f"{name} must fit in 64 bits, got {v}")
    return v - 2 ** 64 if v >= 2 ** 63 else v


def sample(logits, *, temperature: float = 1.0, top_k: Optional[int] = None, top_p: Optional[float] = None,
           seed: int, offset: int = 0, out=None):
    """`tilec.stdlib_kernels.sample` as a torch op: one int64 token per row of logits (not
    differentiable). The same arguments give the same tokens (the Philox stream of
    sampling.py's module doc). out: an int64 tensor of logits.shape[:-1] (`tilec::sample_out`)."""
    register()
    check_cuda(logits=logits)
    args = (logits, float(temperature), top_k, None if top_p is None else float(top_p), _signed64(seed, "seed"),
            _signed64(offset, "offset"))
    if out is not None:
        _outs_into({"out": (out, tuple(logits.shape[:-1]), torch.int64)},
                   lambda: _call("sample_out", *args, out), dict(logits=logits), differentiable=False)
        return out
    return _call("sample", *args)


def _dim_arg(dim):
    return None if dim is None else int(dim)


def _reduce_out(name, x, dim, keepdim, out, dtype=None, differentiable=True):
    """The `<name>_out` op of a reduction writing `out` (torch's shape of the result)."""
    shape = _reduced_shape(x, dim, keepdim)
    _outs_into({"out": (out, shape, dtype or x.dtype)},
               lambda: _call(name + "_out", x, dim, keepdim, out), dict(x=x), differentiable)
    return out


def _reduction(name: str, doc: str, index: bool = False):
    """A torch-signature reduction `name(x, dim=None, keepdim=False, *, out=None)`: the op
    tilec::<name>, or with out= (not differentiable) tilec::<name>_out into a tensor of the
    result's shape (int64 for the `index` ones)."""
    def op(x, dim=None, keepdim: bool = False, *, out=None):
        register()
        check_cuda(x=x)
        d, keep = _dim_arg(dim), bool(keepdim)
        if out is not None:
            return _reduce_out(name, x, d, keep, out, torch.int64 if index else None, differentiable=not index)
        return _call(name, x, d, keep)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


sum = _reduction("sum", """`tilec.stdlib_kernels.sum` (torch.sum's dim/keepdim forms) as a differentiable op;
    out= (not differentiable) writes the result into a tensor of its shape and dtype.""")  # noqa: A001
amax = _reduction("amax", "torch.amax's dim (an int or None), keepdim and out; no gradient.")
amin = _reduction("amin", "torch.amin's dim (an int or None), keepdim and out; no gradient.")


def _extreme_out(name, x, dim, keepdim, out):
    values, indices = _pair_of(out, name)
    shape = _reduced_shape(x, dim, keepdim)
    _outs_into({"out[0] (values)": (values, shape, x.dtype), "out[1] (indices)": (indices, shape, torch.int64)},
               lambda: _call(name + "_dim_out", x, dim, keepdim, values, indices), dict(x=x))
    return _rdim.ValuesIndices(values, indices)


def max(x, dim=None, keepdim: bool = False, *, out=None):  # noqa: A001 - torch's name
    """As torch.max: dim=None the maximum (amax, no gradient); else (values, indices) as
    `ValuesIndices`, differentiable in x (the gradient goes to the indexed elements).
    out: as torch's, the result tensor (dim=None) or a (values, indices) pair."""
    if dim is None:
        return amax(x, None, keepdim, out=out)
    register()
    check_cuda(x=x)
    if out is not None:
        return _extreme_out("max", x, int(dim), bool(keepdim), out)
    return _rdim.ValuesIndices(*_call("max_dim", x, int(dim), bool(keepdim)))


def min(x, dim=None, keepdim: bool = False, *, out=None):  # noqa: A001 - torch's name
    """As torch.min (see `max`)."""
    if dim is None:
        return amin(x, None, keepdim, out=out)
    register()
    check_cuda(x=x)
    if out is not None:
        return _extreme_out("min", x, int(dim), bool(keepdim), out)
    return _rdim.ValuesIndices(*_call("min_dim", x, int(dim), bool(keepdim)))


argmax = _reduction("argmax", "As torch.argmax (int64 indices; out: an int64 tensor of the result's shape).",
                    index=True)
argmin = _reduction("argmin", "As torch.argmin (see `argmax`).", index=True)


def cumsum(x, dim: int, *, out=None):
    """As torch.cumsum(x, dim), differentiable (the backward is a reversed cumsum); out= (not
    differentiable) a tensor of x's shape and dtype."""
    register()
    check_cuda(x=x)
    if out is not None:
        _outs_into({"out": (out, tuple(x.shape), x.dtype)}, lambda: _call("cumsum_out", x, int(dim), out),
                   dict(x=x))
        return out
    return _call("cumsum", x, int(dim))


def transpose(x, dim0: int, dim1: int):
    """As x.transpose(dim0, dim1).contiguous(), differentiable (the backward swaps back)."""
    register()
    check_cuda(x=x)
    return _call("transpose", x, int(dim0), int(dim1))
