"""The custom ops' Python wiring without torch (torch_ops imports without it): every OpSpec's
implementation, fake and backward take the arguments its schema names, and the new ops'
implementations (the stdlib entry points on host arrays here) compute what they should."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from tilec.stdlib_kernels import torch_ops as T


def _n_outputs(schema: str) -> int:
    out = schema.split("->")[1].strip()
    if out == "()":
        return 0
    return out.count("Tensor")


@pytest.mark.parametrize("name", sorted(T.OPS))
def test_every_op_takes_its_schema_arguments(name):
    spec = T.OPS[name]
    n_args = len(T._arg_names(spec.schema))
    inspect.signature(spec.impl).bind(*range(n_args))
    inspect.signature(spec.fake).bind(*range(n_args))
    if spec.backward is not None:
        inspect.signature(spec.backward).bind(None, *range(_n_outputs(spec.schema)))   # (ctx, one grad per output)
        inspect.signature(spec.setup_context).bind(None, (), None)


def test_embedding_impls():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 5)).astype(np.float32)
    ids = rng.integers(0, 12, size=(3, 4))
    ids[0, 0] = 7
    np.testing.assert_array_equal(T.OPS["embedding"].impl(w, ids, None), w[ids])
    g = rng.standard_normal((3, 4, 5)).astype(np.float32)
    want = np.zeros((12, 5))
    np.add.at(want, ids.reshape(-1), g.reshape(-1, 5).astype(np.float64))
    want[7] = 0.0
    np.testing.assert_allclose(T.OPS["embedding_backward"].impl(g, ids, 12, 7), want, rtol=1e-5, atol=1e-6)


def test_add_rms_norm_impls():
    rng = np.random.default_rng(1)
    x, r = rng.standard_normal((6, 10)).astype(np.float32), rng.standard_normal((6, 10)).astype(np.float32)
    w = rng.standard_normal(10).astype(np.float32)
    y, h, rstd = T.OPS["add_rms_norm"].impl(x, r, w, 1e-6)
    h64 = x.astype(np.float64) + r
    rs = 1 / np.sqrt((h64 ** 2).mean(-1) + 1e-6)
    np.testing.assert_allclose(y, h64 * rs[:, None] * w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd, rs, rtol=1e-5)
    dy, dres = rng.standard_normal((6, 10)).astype(np.float32), rng.standard_normal((6, 10)).astype(np.float32)
    dx, dw = T.OPS["add_rms_norm_backward"].impl(dy, dres, h, w, rstd)
    hhat = h64 * rs[:, None]
    g = dy * w.astype(np.float64)
    want_dx = rs[:, None] * (g - hhat * (g * hhat).mean(-1, keepdims=True)) + dres
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, (dy * hhat).sum(0), rtol=1e-4, atol=1e-5)
