"""The flash-attention forward of issue 44 (tests/attention_kernels.py) on the GPU (marker gpu):
odd sequence lengths (not multiples of the blocks), f16 and bf16, against a float64
reference of the rounded inputs. Exercises the squeezed rank-3 view loads and store, k.T as
a K-major operand, q stored once before the loop, and the cp.async ring of k and v."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tilec as tc

from attention_kernels import attn_fwd, grid, ref_attention

pytestmark = pytest.mark.gpu


def _host(a: np.ndarray) -> np.ndarray:
    """A device array's values as float64 (raw bf16 bits when ml_dtypes is missing)."""
    if a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def _device(x: np.ndarray, dtype):
    d = tc.from_numpy(x, dtype=dtype)
    return d, _host(d.to_numpy())   # the values the kernel sees, for the reference


@pytest.mark.parametrize("dtype", [tc.float16, tc.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("bm,bn,d,warps,stages", [
    (128, 64, 64, 8, 3), (128, 64, 128, 8, 3), (128, 128, 64, 8, 3), (128, 128, 128, 8, 3),
    (128, 64, 128, 8, 2), (128, 64, 64, 8, 4), (64, 64, 64, 4, 3), (128, 64, 128, 4, 3),
])
@pytest.mark.parametrize("bh,n_q,n_kv", [(3, 1000, 777), (2, 129, 65), (1, 200, 4099)])
def test_attention_matches_float64(gpu, dtype, bm, bn, d, warps, stages, bh, n_q, n_kv):
    rng = np.random.default_rng(n_q + d)
    q, qh = _device(rng.standard_normal((bh, n_q, d)).astype(np.float32), dtype)
    k, kh = _device(rng.standard_normal((bh, n_kv, d)).astype(np.float32), dtype)
    v, vh = _device(rng.standard_normal((bh, n_kv, d)).astype(np.float32), dtype)
    o = tc.from_numpy(np.full((bh, n_q, d), np.nan, np.float32), dtype=dtype)
    scale = 1.0 / math.sqrt(d)
    attn_fwd[grid(qh, bm)](q, k, v, o, scale, BM=bm, BN=bn, D=d, num_warps=warps, num_stages=stages)
    want = ref_attention(qh, kh, vh, scale)
    atol = 4e-3 if dtype is tc.float16 else 3e-2
    np.testing.assert_allclose(_host(o.to_numpy()), want, rtol=0, atol=atol)
