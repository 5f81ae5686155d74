"""tc.dot on both backends against float64 numpy: f32 (the FMA path), f16 and bf16 (tensor
cores; bf16 cast in the kernel from f32 storage), tf32, accumulation over a ragged K loop
and M, N that are not tile multiples."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
from parity_helpers import rounded


@tc.kernel
def matmul_kernel(a, b, c, K, IN: tc.constexpr, TF32: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr,
                  BK: tc.constexpr):
    pm, pn = tc.program_id(0), tc.program_id(1)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        x = tc.load(a, index=(pm, k), shape=(BM, BK)).astype(IN)
        y = tc.load(b, index=(k, pn), shape=(BK, BN)).astype(IN)
        acc = tc.dot(x, y, acc, allow_tf32=TF32)
    tc.store(c, index=(pm, pn), tile=acc)


# (input dtype, tf32, tile, error bound relative to |a| @ |b|)
CASES = [
    (tc.float32, False, (16, 16, 8), 1e-6),
    (tc.float16, False, (64, 32, 32), 1e-6),
    (tc.bfloat16, False, (32, 64, 16), 1e-6),
    (tc.float32, True, (64, 64, 16), 2.0**-9),
]


@pytest.mark.parametrize("d,tf32,tiles,bound", CASES, ids=lambda v: str(v) if not isinstance(v, tuple) else "x".join(map(str, v)))
def test_dot(backend, d, tf32, tiles, bound):
    m, n, k = 70, 45, 53
    bm, bn, bk = tiles
    rng = np.random.default_rng(m + bm)
    a = rounded(rng.standard_normal((m, k)), d).astype(np.float32)
    b = rounded(rng.standard_normal((k, n)), d).astype(np.float32)
    storage = np.float16 if d is tc.float16 else np.float32
    a, b = a.astype(storage), b.astype(storage)
    c = np.full((m, n), np.nan, np.float32)
    backend.launch(matmul_kernel, (tc.cdiv(m, bm), tc.cdiv(n, bn)), a, b, c, k, IN=d, TF32=tf32,
                   BM=bm, BN=bn, BK=bk)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    err = np.abs(c - want)
    assert np.isfinite(c).all()
    assert (err <= bound * scale + 1e-6).all(), f"max error {(err / scale).max():.3g} of |a|@|b|"
