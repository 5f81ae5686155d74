"""Loops whose loads are staged through shared memory (tc.range num_stages) on the GPU (marker
gpu, sm_80+): every row of every slot lands where it should, walking up or down, with masks,
-inf padding, several loads per iteration and more programs than rows."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc

from prefetch_kernels import ref_softmax, staged_axpy_rows, staged_column_sums, staged_softmax_rows

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows,cols,grid,stages,warps", [
    (1000, 4093, 132, 3, 8),     # ~8 rows per program, a part-filled tile
    (37, 300, 64, 4, 4),         # more programs than rows: some never load
    (4096, 2048, 264, 2, 4),
    (300, 30001, 132, 2, 32),    # 128 KB tiles: one slot, read first
    (500, 16000, 132, 4, 16),    # 64 KB tiles: 3 slots of the 4 asked for, read first
])
def test_staged_softmax_rows(gpu, rows, cols, grid, stages, warps):
    rng = np.random.default_rng(rows)
    x = (8 * rng.standard_normal((rows, cols))).astype(np.float32)
    x[::7, : cols // 3] = -np.inf
    out = tc.from_numpy(np.zeros_like(x))
    staged_softmax_rows[(grid,)](tc.from_numpy(x), out, STAGES=stages, BLOCK=1 << (cols - 1).bit_length(),
                                 num_warps=warps)
    np.testing.assert_allclose(out.to_numpy(), ref_softmax(x), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("down", [False, True])
@pytest.mark.parametrize("stages", [2, 3])
def test_two_staged_loads_up_and_down(gpu, down, stages):
    rng = np.random.default_rng(stages)
    x = rng.standard_normal((777, 1000)).astype(np.float32)
    y = rng.standard_normal((777, 1000)).astype(np.float32)
    out = tc.from_numpy(np.zeros_like(x))
    staged_axpy_rows[(100,)](tc.from_numpy(x), tc.from_numpy(y), out, DOWN=down, STAGES=stages, BLOCK=1024,
                             num_warps=4)
    np.testing.assert_allclose(out.to_numpy(), 2 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows,block,warps", [(4099, 128, 4), (1000, 16, 4)])   # 16 columns: elements in two threads
def test_staged_column_sums(gpu, rows, block, warps):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 8 * block - 3)).astype(np.float32)
    out = tc.from_numpy(np.zeros(8 * block, np.float32))
    staged_column_sums[(8,)](tc.from_numpy(x), out, STAGES=3, ROWS=8, BLOCK=block, num_warps=warps)
    want = np.zeros(8 * block)
    want[: x.shape[1]] = x.astype(np.float64).sum(0)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-3)
