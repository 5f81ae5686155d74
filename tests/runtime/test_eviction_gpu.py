"""Loads with an L2 eviction priority on the GPU (marker gpu): the same results as without,
masked and unmasked, for each width (the PTX is checked on the CPU, tests/codegen/test_eviction.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc

from eviction_kernels import hinted_gather, hinted_row_sums

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("policy", ["evict_first", "evict_last", None])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_hinted_row_sums(gpu, policy, dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 5000)).astype(dtype)   # 5 tiles of 1024, the last part-filled
    out = tc.from_numpy(np.zeros(37, np.float32))
    hinted_row_sums[(37,)](tc.from_numpy(x), out, POLICY=policy, BLOCK=1024, num_warps=4)
    np.testing.assert_allclose(out.to_numpy(), x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_hinted_gather_of_every_width(gpu, dtype):
    x = (np.arange(1000) % 100 + 3).astype(dtype)
    y = tc.from_numpy(np.zeros_like(x))
    hinted_gather[(4,)](tc.from_numpy(x), y, 1000, POLICY="evict_first", BLOCK=256, num_warps=2)
    np.testing.assert_array_equal(y.to_numpy(), x + x[0])
