"""float64 reference of stdlib attention's semantics (module doc of stdlib_kernels/attention.py)."""
from __future__ import annotations

import math

import numpy as np


def attention_ref(q, k, v, causal=False, scale=None, window=None, softcap=None, layout="bshd"):
    """(out, lse) in float64; rows that see no key give zeros and lse = -inf."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    if layout == "bshd":
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
    h, hk = q.shape[1], k.shape[1]
    k, v = np.repeat(k, h // hk, axis=1), np.repeat(v, h // hk, axis=1)
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    n_q, n_k = s.shape[2], s.shape[3]
    i = np.arange(n_q)[:, None] + (n_k - n_q)   # bottom-right aligned
    j = np.arange(n_k)[None, :]
    keep = np.ones((n_q, n_k), bool)
    if causal:
        keep &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i - left
        if right >= 0:
            keep &= j <= i + right
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True) if n_k else np.full(s.shape[:-1] + (1,), -np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    den = p.sum(-1, keepdims=True)
    seen = den > 0
    o = np.where(seen, (p / np.where(seen, den, 1.0)) @ v, 0.0)
    lse = np.where(seen[..., 0], np.log(np.where(seen, den, 1.0))[..., 0] + m[..., 0], -np.inf)
    if layout == "bshd":
        o = o.transpose(0, 2, 1, 3)
    return o, lse


def attention_grads_ref(q, k, v, do, causal=False, scale=None, window=None, softcap=None, layout="bshd", dlse=None):
    """(dq, dk, dv) in float64 of attention_ref's out (and lse, with `dlse`) for the upstream
    gradient `do`; dk and dv summed over the query heads that share a key/value head."""
    q, k, v, do = (np.asarray(t, dtype=np.float64) for t in (q, k, v, do))
    if layout == "bshd":
        q, k, v, do = (t.transpose(0, 2, 1, 3) for t in (q, k, v, do))
    b, h, n_q, d = q.shape
    hk, n_k = k.shape[1], k.shape[2]
    g = h // hk
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    scale = 1 / math.sqrt(d) if scale is None else scale
    x = np.einsum("bhqd,bhkd->bhqk", q, kr) * scale
    s = softcap * np.tanh(x / softcap) if softcap else x
    i = np.arange(n_q)[:, None] + (n_k - n_q)
    j = np.arange(n_k)[None, :]
    keep = np.ones((n_q, n_k), bool)
    if causal:
        keep &= j <= i
    if window is not None:
        if window[0] >= 0:
            keep &= j >= i - window[0]
        if window[1] >= 0:
            keep &= j <= i + window[1]
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True) if n_k else np.zeros(s.shape[:-1] + (1,))
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    den = e.sum(-1, keepdims=True)
    p = e / np.where(den > 0, den, 1.0)
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    dp = np.einsum("bhqd,bhkd->bhqk", do, vr)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    if dlse is not None:
        ds = ds + p * np.asarray(dlse, dtype=np.float64)[..., None]
    if softcap:
        ds = ds * (1 - np.tanh(x / softcap) ** 2)
    dq = np.einsum("bhqk,bhkd->bhqd", ds, kr) * scale
    dk = np.einsum("bhqk,bhqd->bhkd", ds, q) * scale
    dk = dk.reshape(b, hk, g, n_k, d).sum(2)
    dv = dv.reshape(b, hk, g, n_k, v.shape[3]).sum(2)
    if layout == "bshd":
        dq, dk, dv = (t.transpose(0, 2, 1, 3) for t in (dq, dk, dv))
    return dq, dk, dv


def torch_attention_ref(torch, q, k, v, causal=False, scale=None, window=None, softcap=None, layout="bshd"):
    """(out, lse) of the forward's semantics in torch, in the inputs' dtype (pass float64
    leaves for gradients by autograd); every row must see some key for lse's gradient."""
    qh, kh, vh = ((t.transpose(1, 2) if layout == "bshd" else t) for t in (q, k, v))
    g = qh.shape[1] // kh.shape[1]
    kr, vr = kh.repeat_interleave(g, dim=1), vh.repeat_interleave(g, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = qh @ kr.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    n_q, n_k = s.shape[-2], s.shape[-1]
    i = torch.arange(n_q, device=s.device)[:, None] + (n_k - n_q)
    j = torch.arange(n_k, device=s.device)[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device=s.device)
    if causal:
        keep &= j <= i
    if window is not None:
        if window[0] >= 0:
            keep &= j >= i - window[0]
        if window[1] >= 0:
            keep &= j <= i + window[1]
    s = s.masked_fill(~keep, float("-inf"))
    o = torch.softmax(s, dim=-1).nan_to_num(0.0) @ vr
    return (o.transpose(1, 2) if layout == "bshd" else o), torch.logsumexp(s, dim=-1)


def attention_mods_ref(q, k, v, score_fn=None, mask_fn=None, scale=None, layout="bshd", do=None, grad_fn=None):
    """FlexAttention's semantics in float64: (out, lse), and with `do` also (dq, dk, dv).
    score_fn(score, b, h, q_idx, kv_idx) and mask_fn(b, h, q_idx, kv_idx) are numpy functions
    of arrays broadcast as (batch, heads, seq_q, seq_k); grad_fn: score_fn's derivative in score."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    if layout == "bshd":
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
    b_, h, n_q, d = q.shape
    hk, n_k = k.shape[1], k.shape[2]
    g = h // hk
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    scale = 1 / math.sqrt(d) if scale is None else scale
    bi, hi = np.arange(b_)[:, None, None, None], np.arange(h)[None, :, None, None]
    qi, ki = np.arange(n_q)[None, None, :, None], np.arange(n_k)[None, None, None, :]
    x = np.einsum("bhqd,bhkd->bhqk", q, kr) * scale
    s = score_fn(x, bi, hi, qi, ki) if score_fn else x
    keep = np.broadcast_to(mask_fn(bi, hi, qi, ki), s.shape) if mask_fn else np.ones(s.shape, bool)
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True) if n_k else np.full(s.shape[:-1] + (1,), -np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    den = e.sum(-1, keepdims=True)
    seen = den > 0
    p = e / np.where(seen, den, 1.0)
    o = p @ vr
    lse = np.where(seen[..., 0], np.log(np.where(seen, den, 1.0))[..., 0] + m[..., 0], -np.inf)
    back = (lambda t: t.transpose(0, 2, 1, 3)) if layout == "bshd" else (lambda t: t)
    if do is None:
        return back(o), lse
    do = np.asarray(do, dtype=np.float64)
    do = do.transpose(0, 2, 1, 3) if layout == "bshd" else do
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    dp = np.einsum("bhqd,bhkd->bhqk", do, vr)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    if score_fn:
        ds = ds * grad_fn(x, bi, hi, qi, ki)
    dq = np.einsum("bhqk,bhkd->bhqd", ds, kr) * scale
    dk = (np.einsum("bhqk,bhqd->bhkd", ds, q) * scale).reshape(b_, hk, g, n_k, d).sum(2)
    dv = dv.reshape(b_, hk, g, n_k, v.shape[3]).sum(2)
    return back(o), lse, back(dq), back(dk), back(dv)
