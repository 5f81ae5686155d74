"""Training steps of a Llama-architecture decoder with tilec's ops, checked against eager PyTorch.

    python examples/pytorch/llama_train.py                        # 16 layers, hidden 2048, vocab 128256, seq 4096
    python examples/pytorch/llama_train.py --layers 2 --hidden 256 --heads 4 --kv-heads 2 --ffn 512 \\
        --vocab 1000 --seq 256 --steps 3                  # small: a minute

The model is plain PyTorch (random weights, no downloads): token embedding, decoder layers
(RMSNorm, grouped-query causal attention with rotary embeddings, SwiGLU MLP), a final
RMSNorm and an untied lm_head. `Llama(cfg, tilec=True)` runs the same parameters through
tilec's differentiable ops (tilec.stdlib_kernels.torch_ops): rms_norm, add_rms_norm (each
residual add with the norm after it, one pass over the stream in both directions), rope,
attention, swiglu, and linear_cross_entropy for the loss (no logits); the projections stay
torch's GEMMs. The script builds both models with the same weights, takes --steps SGD steps on each
with the same batches, and prints per step the two losses and the largest relative
difference of any parameter's gradient (max |g_tilec - g_eager| / max |g_eager|, per
parameter); it exits non-zero when they differ beyond bf16 tolerance (--loss-tol,
--grad-tol). Needs torch and an NVIDIA GPU; bench/train_step.py times the same model.
"""

import argparse
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tilec.stdlib_kernels import torch_ops as T


@dataclass
class Config:
    layers: int = 16
    hidden: int = 2048
    heads: int = 16
    kv_heads: int = 4
    ffn: int = 8192
    vocab: int = 128256
    seq: int = 4096
    batch: int = 1
    eps: float = 1e-5
    rope_theta: float = 500000.0


class Layer(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c, self.hd = c, c.hidden // c.heads
        self.input_layernorm = nn.Parameter(torch.ones(c.hidden))
        self.q_proj = nn.Linear(c.hidden, c.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(c.heads * self.hd, c.hidden, bias=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(c.hidden))
        self.gate_proj = nn.Linear(c.hidden, c.ffn, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.ffn, bias=False)
        self.down_proj = nn.Linear(c.ffn, c.hidden, bias=False)

    def attention(self, h, cos, sin, tilec: bool):
        """The attention block's output for the normed stream h (before the residual add)."""
        b, s, _ = h.shape
        q = self.q_proj(h).view(b, s, self.c.heads, self.hd)
        k = self.k_proj(h).view(b, s, self.c.kv_heads, self.hd)
        v = self.v_proj(h).view(b, s, self.c.kv_heads, self.hd)
        if tilec:
            o = T.attention(T.rope(q, cos, sin), T.rope(k, cos, sin), v, causal=True)
        else:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True, enable_gqa=True).transpose(1, 2)
        return self.o_proj(o.reshape(b, s, -1))

    def mlp(self, h, tilec: bool):
        g, u = self.gate_proj(h), self.up_proj(h)
        return self.down_proj(T.swiglu(g, u) if tilec else F.silu(g) * u)


def rms_norm(x, w, eps):
    xf = x.float()   # as Hugging Face's LlamaRMSNorm: f32 statistics, the weight in x's dtype
    return w * (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope(x, cos, sin):
    """Half-split rotary embedding of (b, s, h, d) by (s, d / 2) tables, in x's dtype."""
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


class Llama(nn.Module):
    def __init__(self, c: Config, tilec: bool = False):
        super().__init__()
        self.c, self.tilec = c, tilec
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = nn.Parameter(torch.ones(c.hidden))
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, ids, labels):
        s, hd = ids.shape[1], self.c.hidden // self.c.heads
        # the rotary angles in f32 (a buffer would follow the model's .to(bf16))
        inv_freq = 1.0 / self.c.rope_theta ** (torch.arange(0, hd, 2, device=ids.device, dtype=torch.float32) / hd)
        ang = torch.outer(torch.arange(s, device=ids.device, dtype=torch.float32), inv_freq)
        cos, sin = ang.cos(), ang.sin()
        x = self.embed_tokens(ids)
        if self.tilec:
            x = self._tilec_layers(x, cos, sin)
        else:
            for layer in self.layers:
                x = x + layer.attention(rms_norm(x, layer.input_layernorm, self.c.eps), cos, sin, False)
                x = x + layer.mlp(rms_norm(x, layer.post_attention_layernorm, self.c.eps), False)
            x = rms_norm(x, self.norm, self.c.eps)
        # token t predicts labels[t + 1]; the last token predicts nothing
        target = F.pad(labels[:, 1:], (0, 1), value=-100)
        if self.tilec:
            return T.linear_cross_entropy(x, self.lm_head.weight, target)
        logits = self.lm_head(x).float()
        return F.cross_entropy(logits.view(-1, self.c.vocab), target.reshape(-1))

    def _tilec_layers(self, x, cos, sin):
        """The same layers with each block's residual add fused into the norm that follows it:
        (normed, stream) = add_rms_norm(block output, stream, weight)."""
        eps, layers = self.c.eps, self.layers
        h, stream = T.rms_norm(x, layers[0].input_layernorm, eps), x
        for i, layer in enumerate(layers):
            h, stream = T.add_rms_norm(layer.attention(h, cos, sin, True), stream, layer.post_attention_layernorm, eps)
            after = layers[i + 1].input_layernorm if i + 1 < len(layers) else self.norm
            h, stream = T.add_rms_norm(layer.mlp(h, True), stream, after, eps)
        return h


def make(c: Config, tilec: bool, dtype=torch.bfloat16, seed: int = 0) -> Llama:
    """One model on the GPU with random weights (std 0.02, as Llama's init; norms 1) drawn
    from `seed`: the same for both kinds."""
    torch.manual_seed(seed)
    m = Llama(c, tilec=tilec).cuda().to(dtype)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "layernorm" not in name and name != "norm":
                p.normal_(0.0, 0.02)
    return m


def build(c: Config, dtype=torch.bfloat16, seed: int = 0):
    """(eager model, tilec model) with the same random weights."""
    return make(c, False, dtype, seed), make(c, True, dtype, seed)


def batch(c: Config, step: int):
    g = torch.Generator(device="cuda").manual_seed(1000 + step)
    ids = torch.randint(0, c.vocab, (c.batch, c.seq), device="cuda", generator=g)
    return ids, ids.clone()


def grad_difference(eager: nn.Module, tilec: nn.Module):
    """(largest relative difference, the parameter's name) over every parameter's gradient."""
    worst, where = 0.0, ""
    for (name, pe), pt in zip(eager.named_parameters(), tilec.parameters()):
        d = (pt.grad.float() - pe.grad.float()).abs().max().item() / max(pe.grad.float().abs().max().item(), 1e-12)
        if d > worst or math.isnan(d):
            worst, where = d, name
    return worst, where


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "batch"):
        p.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(Config, f))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--loss-tol", type=float, default=1e-2, help="relative, per step")
    p.add_argument("--grad-tol", type=float, default=1e-1, help="relative to the parameter's largest gradient")
    a = p.parse_args(argv)
    c = Config(**{f: getattr(a, f) for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq",
                                             "batch")})
    if not torch.cuda.is_available():
        print("llama_train needs an NVIDIA GPU (torch.cuda.is_available() is False)")
        return 2
    eager, tilec = build(c)
    opts = [torch.optim.SGD(m.parameters(), lr=a.lr) for m in (eager, tilec)]
    ok = True
    for step in range(a.steps):
        ids, labels = batch(c, step)
        losses = []
        for m, opt in zip((eager, tilec), opts):
            opt.zero_grad(set_to_none=True)
            loss = m(ids, labels)
            loss.backward()
            losses.append(loss.item())
        worst, where = grad_difference(eager, tilec)
        rel = abs(losses[1] - losses[0]) / abs(losses[0])
        good = rel < a.loss_tol and worst < a.grad_tol
        ok &= good
        print(f"step {step}: loss eager {losses[0]:.5f} tilec {losses[1]:.5f} (rel {rel:.2e}); "
              f"largest gradient difference {worst:.2e} ({where}){'' if good else '  MISMATCH'}")
        for opt in opts:
            opt.step()
    print("matches eager within bf16 tolerance" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
