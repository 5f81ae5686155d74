"""tilec.nn: drop-in `torch.nn.Module`s whose row, elementwise and attention work runs in
tilec's differentiable torch ops (`torch_ops`), with their parameters named as torch's and
Hugging Face Llama's are, so state dicts load unchanged.

    RMSNorm(hidden_size, eps)                       weight                  (LlamaRMSNorm; forward(x,
                                                                            residual) adds it first)
    Embedding(num_embeddings, embedding_dim, ...)   weight                  (torch.nn.Embedding)
    LayerNorm(normalized_shape, eps, ...)           weight, bias            (torch.nn.LayerNorm)
    RotaryEmbedding(dim, base)                      inv_freq (a buffer)     (LlamaRotaryEmbedding)
    SwiGLUMLP(hidden_size, intermediate_size)       gate_proj, up_proj, down_proj   (LlamaMLP)
    Attention(hidden_size, num_heads, ...)          q_proj, k_proj, v_proj, o_proj  (LlamaAttention)
    CrossEntropyLoss(ignore_index, ...)             (none)                  (torch.nn.CrossEntropyLoss)
    LinearCrossEntropyLoss(ignore_index, ...)       (none: it takes the head's weight)

The projections are torch.nn.Linear (cuBLAS). Importing this module imports torch; `import
tilec` never does (`tilec.nn` is imported on first use). It lives here, not among the stdlib
modules, because tools import every stdlib module (the PTX checks) where torch may be absent.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from tilec.stdlib_kernels import torch_ops as T

__all__ = ["RMSNorm", "Embedding", "LayerNorm", "RotaryEmbedding", "SwiGLUMLP", "Attention", "CrossEntropyLoss",
           "LinearCrossEntropyLoss"]


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dimension (tilec::rms_norm)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.variance_epsilon = eps   # Hugging Face's name

    def forward(self, x, residual=None):
        """rms_norm(x); with `residual`, (rms_norm(x + residual), x + residual) in one pass
        (tilec::add_rms_norm: the pre-norm block's residual add fused into its norm)."""
        if residual is not None:
            return T.add_rms_norm(x, residual, self.weight, self.variance_epsilon)
        return T.rms_norm(x, self.weight, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class Embedding(nn.Module):
    """torch.nn.Embedding's lookup (tilec::embedding): weight (num_embeddings, embedding_dim),
    initialized N(0, 1) as torch's, the row `padding_idx` zero and given no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None, device=None,
                 dtype=None):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"padding_idx must be in [-{num_embeddings}, {num_embeddings}), got {padding_idx}")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        nn.init.normal_(self.weight)
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].fill_(0)

    def forward(self, input):
        return T.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class LayerNorm(nn.Module):
    """torch.nn.LayerNorm over the last dimension (tilec::layer_norm)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if len(shape) != 1:
            raise ValueError(f"normalized_shape: tilec normalizes over the last dimension only, got {shape}")
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        make = (lambda v: nn.Parameter(torch.full(shape, v, device=device, dtype=dtype)))
        self.weight = make(1.0) if elementwise_affine else None
        self.bias = make(0.0) if elementwise_affine and bias else None

    def forward(self, x):
        if x.shape[-1] != self.normalized_shape[0]:
            raise ValueError(f"x: the last dimension is {x.shape[-1]}, expected {self.normalized_shape[0]}")
        return T.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RotaryEmbedding(nn.Module):
    """Rotary position embedding of half-split (NeoX/Llama) pairs, applied by tilec::rope to
    (batch, seq, heads, head_dim) tensors at positions offset, offset + 1, ...

    `inv_freq[i] = 1 / base ** (2i / dim)`; the angles of position p are p * inv_freq,
    computed in f32 at each call (a (seq, dim / 2) table, traced by torch.compile)."""

    def __init__(self, dim: int, max_position_embeddings: int = 2048, base: float = 10000.0, device=None):
        super().__init__()
        if dim % 2:
            raise ValueError(f"dim must be even (pairs of features), got {dim}")
        self.dim, self.max_position_embeddings, self.base = dim, max_position_embeddings, base
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def cos_sin(self, seq_len: int, device, offset: int = 0):
        """(cos, sin) of positions [offset, offset + seq_len): f32 of (seq_len, dim / 2)."""
        t = torch.arange(offset, offset + seq_len, device=device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.to(device=device, dtype=torch.float32))
        return freqs.cos(), freqs.sin()

    def forward(self, q, k=None, offset: int = 0):
        """q (and k) rotated: (batch, seq, heads, head_dim) each; returns q, or (q, k)."""
        cos, sin = self.cos_sin(q.shape[1], q.device, offset)
        q = T.rope(q, cos, sin)
        return q if k is None else (q, T.rope(k, cos, sin))


class SwiGLUMLP(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), the product by tilec::swiglu (LlamaMLP)."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x):
        return self.down_proj(T.swiglu(self.gate_proj(x), self.up_proj(x)))


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads (num_key_value_heads dividing
    num_heads), rotary embeddings on q and k, and tilec::attention (no K/V copies for the
    groups). x: (batch, seq, hidden_size)."""

    def __init__(self, hidden_size: int, num_heads: int, num_key_value_heads: Optional[int] = None,
                 head_dim: Optional[int] = None, bias: bool = False, o_bias: bool = False,
                 rope_theta: Optional[float] = 10000.0, causal: bool = True, device=None, dtype=None):
        super().__init__()
        kv = num_heads if num_key_value_heads is None else num_key_value_heads
        if num_heads % kv:
            raise ValueError(f"num_key_value_heads ({kv}) must divide num_heads ({num_heads})")
        hd = hidden_size // num_heads if head_dim is None else head_dim
        self.num_heads, self.num_key_value_heads, self.head_dim, self.causal = num_heads, kv, hd, causal
        kw = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(hidden_size, num_heads * hd, bias=bias, **kw)
        self.k_proj = nn.Linear(hidden_size, kv * hd, bias=bias, **kw)
        self.v_proj = nn.Linear(hidden_size, kv * hd, bias=bias, **kw)
        self.o_proj = nn.Linear(num_heads * hd, hidden_size, bias=o_bias, **kw)
        self.rotary_emb = RotaryEmbedding(hd, base=rope_theta, device=device) if rope_theta is not None else None

    def forward(self, x, offset: int = 0):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(b, s, self.num_key_value_heads, self.head_dim)
        v = self.v_proj(x).view(b, s, self.num_key_value_heads, self.head_dim)
        if self.rotary_emb is not None:
            q, k = self.rotary_emb(q, k, offset)
        o = T.attention(q, k, v, causal=self.causal)
        return self.o_proj(o.reshape(b, s, self.num_heads * self.head_dim))


class CrossEntropyLoss(nn.Module):
    """torch.nn.CrossEntropyLoss over class indices (tilec::cross_entropy, the gradient written
    in the forward): forward(logits, target), logits (..., C) with the classes last (torch's
    (N, C, d1, ...) layout is not taken), target of logits.shape[:-1]. No class weights."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.label_smoothing = T._check_ls(label_smoothing, "CrossEntropyLoss")  # noqa: SLF001
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, logits, target):
        return T.cross_entropy(logits, target, self.ignore_index, self.reduction, self.label_smoothing)


class LinearCrossEntropyLoss(nn.Module):
    """cross_entropy(hidden @ weight.T + bias, target) without the logits
    (tilec::linear_cross_entropy): forward(hidden, weight, target, bias=None), hidden
    (..., H), weight (V, H) (an lm_head's), target of hidden.shape[:-1]; label_smoothing as
    torch.nn.CrossEntropyLoss's."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", chunk: Optional[int] = None,
                 label_smoothing: float = 0.0):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.label_smoothing = T._check_ls(label_smoothing, "LinearCrossEntropyLoss")  # noqa: SLF001
        self.ignore_index, self.reduction, self.chunk = ignore_index, reduction, chunk

    def forward(self, hidden, weight, target, bias=None):
        return T.linear_cross_entropy(hidden, weight, target, bias, self.ignore_index, self.reduction, self.chunk,
                                      self.label_smoothing)
