"""TMA reductions (tma_stores: a relaxed tc.atomic_add of a wgmma result into an f32 view whose
old values are unused) without a GPU: the interpreter's sums, and the PTX each target gets."""
import numpy as np
import pytest

import tilec as tc

from ptxas_checks import assert_assembles_clean
from reduce_kernels import add_products, signature

_REDUCE = "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"


def _want(a, b, o_rows, bm=64):
    want = np.zeros((o_rows, b.shape[1]))
    blocks = -(-o_rows // bm)
    prod = 2.0 * a.astype(np.float64) @ b.astype(np.float64)
    for j in range(-(-a.shape[0] // bm)):
        r = (j % blocks) * bm
        rows = min(bm, o_rows - r, a.shape[0] - j * bm)
        want[r:r + rows] += prod[j * bm:j * bm + rows]
    return want


@pytest.mark.parametrize("relaxed", [True, False])
def test_the_interpreter_adds_every_step(relaxed):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((200, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    o = np.zeros((100, 64), np.float32)
    with tc.interpret():
        add_products[(3,)](a, b, o, RELAXED=relaxed, BM=64, BN=64, K=64)
    np.testing.assert_allclose(o, 3 * _want(a, b, 100), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("arch,relaxed,reduces", [("sm_90a", True, True), ("sm_90a", False, False),
                                                  ("sm_80", True, False)])
def test_relaxed_adds_of_a_wgmma_result_reduce_by_tma(arch, relaxed, reduces):
    ck = add_products.compile(signature(relaxed), arch=arch, num_warps=4)
    ptx = ck.asm["ptx"]
    assert (ptx.count(_REDUCE) == 2) == reduces   # one per 32-column box of the 64-column tile
    assert ("atom." in ptx) != reduces
    if arch == "sm_90a":
        assert_assembles_clean(ck.metadata["ptxas"])
