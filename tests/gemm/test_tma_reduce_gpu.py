"""TMA reductions on the GPU (marker gpu): several programs add into the same f32 tiles, the
rows past the tensor's end clipped, against float64 numpy; relaxed (a TMA reduction on
sm_90a: rows of 64 f32 keep the 16-byte strides a tensor map needs) and acq_rel (atomics)."""
import numpy as np
import pytest

import tilec as tc

from reduce_kernels import add_products
from test_tma_reduce import _want

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("relaxed", [True, False])
def test_programs_add_into_the_same_tiles(relaxed):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1000, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    o = rng.standard_normal((150, 64)).astype(np.float32)      # 150 rows: the last block clips
    start = o.astype(np.float64)
    dev = [tc.from_numpy(x) for x in (a, b, o)]
    add_products[(7,)](*dev, RELAXED=relaxed, BM=64, BN=64, K=64)
    tc.synchronize()
    got = dev[2].to_numpy().astype(np.float64)
    want = start + 7 * _want(a, b, 150)
    if relaxed and tc.Target.current().has_wgmma:   # the launch took the TMA reduction
        assert "cp.reduce.async.bulk.tensor" in add_products.compile(*dev, RELAXED=relaxed, BM=64, BN=64,
                                                                      K=64).asm["ptx"]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2 * np.abs(want).max() ** 0.5)
