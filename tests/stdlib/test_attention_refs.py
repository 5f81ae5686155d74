"""The float64 attention references' gradients against central finite differences of their own
forward, on tiny shapes. Every interpreter and GPU test of the attention backward (dense,
masked, softcapped, grouped, with lse's gradient, with score/mask functions) compares with
`attention_grads_ref` or `attention_mods_ref(..., do=...)`: this is what anchors them to the
forward the forward tests check."""
from __future__ import annotations

import numpy as np
import pytest

from attention_ref import attention_grads_ref, attention_mods_ref, attention_ref

EPS = 1e-6


def _numeric(loss, arrays):
    """d loss / d each of `arrays` (float64, changed in place and restored) by central differences."""
    grads = []
    for x in arrays:
        g = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            old = x[i]
            x[i] = old + EPS
            up = loss()
            x[i] = old - EPS
            down = loss()
            x[i] = old
            g[i] = (up - down) / (2 * EPS)
        grads.append(g)
    return grads


def _weighted(o, lse, do, dlse):
    """sum(o · do) + sum(lse · dlse) over the rows that saw a key (the others' lse is -inf)."""
    total = float((o * do).sum())
    if dlse is not None:
        total += float(np.where(np.isfinite(lse), lse * dlse, 0.0).sum())
    return total


def _tensors(rng, layout, h, hk, n_q, n_k, d=4, dv=3):
    def shape(n, heads, dim):
        return (1, n, heads, dim) if layout == "bshd" else (1, heads, n, dim)
    return tuple(rng.standard_normal(shape(n, hh, dd))
                 for n, hh, dd in ((n_q, h, d), (n_k, hk, d), (n_k, hk, dv), (n_q, h, dv)))


def _assert_close(analytic, numeric):
    for name, a, n in zip(("dq", "dk", "dv"), analytic, numeric):
        assert a.shape == n.shape, name
        np.testing.assert_allclose(a, n, rtol=1e-5, atol=1e-6, err_msg=name)


CASES = [
    ("bshd", 2, 1, 5, 7, dict()),
    ("bshd", 4, 2, 6, 6, dict(causal=True)),
    ("bhsd", 2, 2, 5, 8, dict(window=(2, 1))),
    ("bshd", 2, 1, 7, 5, dict(causal=True, window=(3, -1))),   # seq_q > seq_k: rows that see no key
    ("bhsd", 3, 1, 4, 6, dict(softcap=1.5, scale=0.9)),
    ("bshd", 2, 2, 5, 5, dict(window=(-1, 0), softcap=3.0)),
]


@pytest.mark.parametrize("with_dlse", [False, True])
@pytest.mark.parametrize("layout,h,hk,n_q,n_k,kw", CASES)
def test_attention_grads_ref_is_the_gradient_of_attention_ref(layout, h, hk, n_q, n_k, kw, with_dlse):
    rng = np.random.default_rng(n_q * 31 + n_k * 7 + h)
    q, k, v, do = _tensors(rng, layout, h, hk, n_q, n_k)
    dlse = rng.standard_normal((1, h, n_q)) if with_dlse else None

    def loss():
        o, lse = attention_ref(q, k, v, layout=layout, **kw)
        return _weighted(o, lse, do, dlse)

    _assert_close(attention_grads_ref(q, k, v, do, layout=layout, dlse=dlse, **kw), _numeric(loss, (q, k, v)))


MODS = {
    "rel_bias": (lambda s, b, h, q, k: s + 0.3 * (q - k), lambda s, *a: np.ones_like(s), None),
    "tanh_cap": (lambda s, b, h, q, k: 1.5 * np.tanh(s / 1.5), lambda s, *a: 1 - np.tanh(s / 1.5) ** 2,
                 lambda b, h, q, k: q >= k),
    "per_head_scale": (lambda s, b, h, q, k: s * (1.0 + 0.5 * h), lambda s, b, h, q, k: np.broadcast_to(1.0 + 0.5 * h, s.shape),
                       lambda b, h, q, k: (k <= q + 1) & (k >= q - 2)),
}


@pytest.mark.parametrize("name", list(MODS))
def test_attention_mods_ref_gradients_are_the_gradient_of_its_forward(name):
    score_fn, grad_fn, mask_fn = MODS[name]
    rng = np.random.default_rng(len(name))
    q, k, v, do = _tensors(rng, "bhsd", 2, 1, 6, 6)

    def loss():
        o, lse = attention_mods_ref(q, k, v, score_fn, mask_fn, layout="bhsd")
        return _weighted(o, lse, do, None)

    _, _, dq, dk, dv = attention_mods_ref(q, k, v, score_fn, mask_fn, layout="bhsd", do=do, grad_fn=grad_fn)
    _assert_close((dq, dk, dv), _numeric(loss, (q, k, v)))
