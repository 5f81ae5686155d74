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

import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional

try:
    import torch
except ImportError:   # the functions below say so when called
    torch = None

# (the package's names `attention`, `softmax`, ... are the functions, not their modules)
from . import elementwise as _ew
from . import norms as _norms
from .attention import _window, check_layout
from .attention import attention as _attention
from .attention_bwd import attention_backward as _attention_backward_fn
from .cross_entropy import cross_entropy as _cross_entropy
from .softmax import log_softmax as _log_softmax
from .softmax import softmax as _softmax

__all__ = ["OpSpec", "OPS", "register", "attention", "rms_norm", "layer_norm", "softmax", "log_softmax",
           "silu_and_mul", "gelu", "cross_entropy"]


@dataclass(frozen=True)
class OpSpec:
    """One custom op: `torch.ops.tilec.<name>` with `schema`, run by `impl`, traced by `fake`."""
    schema: str
    impl: Callable
    fake: Callable
    backward: Optional[Callable] = None        # (ctx, *grads) -> a gradient (or None) per input
    setup_context: Optional[Callable] = None   # (ctx, inputs, output): what the backward keeps


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
    dq, dk, dv = torch.ops.tilec.attention_backward(dout, q, k, v, out, lse, dlse, *ctx.rest)
    return (dq, dk, dv) + (None,) * len(ctx.rest)


def _attention_backward_impl(dout, q, k, v, out, lse, dlse, causal, scale, window_left, window_right, softcap,
                             layout):
    return _attention_backward_fn(dout, q, k, v, out, lse, causal=causal, scale=scale,
                                  window=_window_arg(window_left, window_right), softcap=softcap,
                                  layout=layout, dlse=dlse)


def _attention_backward_fake(dout, q, k, v, out, lse, dlse, *rest):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


_ATTN_ARGS = "bool causal, float? scale, int window_left, int window_right, float? softcap, str layout"


# ----------------------------------------------------------------------------- forward-only ops
def _like(x, *rest):
    return x.new_empty(x.shape)


def _silu_and_mul_fake(x):
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def _cross_entropy_fake(logits, target, ignore_index, reduction):
    return logits.new_empty(tuple(logits.shape[:-1]) if reduction == "none" else ())


OPS: Dict[str, OpSpec] = {
    "attention": OpSpec(f"(Tensor q, Tensor k, Tensor v, {_ATTN_ARGS}) -> (Tensor, Tensor)",
                        _attention_impl, _attention_fake, _attention_backward, _attention_setup),
    "attention_backward": OpSpec(f"(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? dlse, "
                                 f"{_ATTN_ARGS}) -> (Tensor, Tensor, Tensor)",
                                 _attention_backward_impl, _attention_backward_fake),
    "rms_norm": OpSpec("(Tensor x, Tensor? weight, float eps) -> Tensor",
                       lambda x, w, eps: _norms.rms_norm(x, w, eps), _like),
    "layer_norm": OpSpec("(Tensor x, Tensor? weight, Tensor? bias, float eps) -> Tensor",
                         lambda x, w, b, eps: _norms.layer_norm(x, w, b, eps), _like),
    "softmax": OpSpec("(Tensor x, int dim) -> Tensor", lambda x, dim: _softmax(x, dim), _like),
    "log_softmax": OpSpec("(Tensor x, int dim) -> Tensor", lambda x, dim: _log_softmax(x, dim), _like),
    "silu_and_mul": OpSpec("(Tensor x) -> Tensor", lambda x: _ew.silu_and_mul(x), _silu_and_mul_fake),
    "gelu": OpSpec("(Tensor x, str approximate) -> Tensor", lambda x, approximate: _ew.gelu(x, approximate), _like),
    "cross_entropy": OpSpec("(Tensor logits, Tensor target, int ignore_index, str reduction) -> Tensor",
                            lambda x, t, ignore_index, reduction: _cross_entropy(x, t, ignore_index, reduction),
                            _cross_entropy_fake),
}


# ----------------------------------------------------------------------------- registration
_lock = threading.Lock()
_registered = False


def _arg_names(schema: str):
    # "(Tensor x, Tensor? weight, float eps) -> Tensor" -> ["x", "weight", "eps"]
    args = schema[schema.index("(") + 1:schema.index(")")]
    return [a.split()[-1] for a in args.split(",") if a.strip()]


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
            op = torch.library.custom_op(f"tilec::{name}", spec.impl, mutates_args=(), schema=spec.schema)
            op.register_fake(spec.fake)
            op.register_autograd(spec.backward or _no_backward(name, spec.schema), setup_context=spec.setup_context)
        _registered = True


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
    out, lse = torch.ops.tilec.attention(q, k, v, bool(causal), scale, wl, wr, softcap, layout)
    return (out, lse) if return_lse else out


def rms_norm(x, weight=None, eps: float = 1e-6):
    register()
    check_cuda(x=x, weight=weight)
    return torch.ops.tilec.rms_norm(x, weight, float(eps))


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5):
    register()
    check_cuda(x=x, weight=weight, bias=bias)
    return torch.ops.tilec.layer_norm(x, weight, bias, float(eps))


def softmax(x, dim: int = -1):
    register()
    check_cuda(x=x)
    return torch.ops.tilec.softmax(x, int(dim))


def log_softmax(x, dim: int = -1):
    register()
    check_cuda(x=x)
    return torch.ops.tilec.log_softmax(x, int(dim))


def silu_and_mul(x):
    register()
    check_cuda(x=x)
    return torch.ops.tilec.silu_and_mul(x)


def gelu(x, approximate: str = "none"):
    register()
    check_cuda(x=x)
    return torch.ops.tilec.gelu(x, approximate)


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean"):
    register()
    check_cuda(logits=logits, target=target)
    return torch.ops.tilec.cross_entropy(logits, target, int(ignore_index), reduction)
