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
