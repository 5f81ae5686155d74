"""Tensor-core GEMMs on the GPU (marker gpu) over the tile configurations the stdlib uses
(warp arrangements 1x4, 2x2, 4x1, 4x2, ...), in three forms: tensor views, views in grouped
program order, pointer tiles with run-time strides; aligned (cp.async) and odd shapes."""
import sys

import pytest

import tilec.stdlib_kernels.matmul  # noqa: F401 - the module, not the function of the same name
from gemm_kernels import matmul, matmul_grouped, matmul_ptr
from needs import needs

pytestmark = pytest.mark.gpu

torch = needs("torch")
stdlib = sys.modules["tilec.stdlib_kernels.matmul"]

CONFIGS = [(16, 64, 32, 4), (32, 64, 32, 4), (64, 64, 32, 4), (128, 64, 32, 4), (64, 128, 32, 4),
           (128, 128, 32, 8), (128, 256, 32, 8), (16, 64, 16, 4), (64, 64, 16, 4)]
SHAPES = [(77, 131, 45), (256, 384, 512)]


def _run(form, a, b, c, bm, bn, bk, warps, tf32):
    m, k = a.shape
    n = b.shape[1]
    gm, gn = -(-m // bm), -(-n // bn)
    opts = dict(BM=bm, BN=bn, BK=bk, TF32=tf32, num_warps=warps, num_stages=3)
    if form == "views":
        matmul[(gm, gn)](a, b, c, **opts)
    elif form == "grouped":
        matmul_grouped[(gm * gn,)](a, b, c, **opts)
    elif form == "ptr":
        matmul_ptr[(gm, gn)](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), **opts)
    else:
        stdlib.matmul_kernel[(gm * gn,)](a, b, c, c, 1.0, GROUP_M=8, HAS_BIAS=False, ACT="none", SCALED=False, **opts)


@pytest.mark.parametrize("form", ["views", "grouped", "ptr", "stdlib"])
@pytest.mark.parametrize("bm,bn,bk,warps", CONFIGS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_config(form, bm, bn, bk, warps, m, n, k):
    dtype = torch.float32 if bk == 16 else torch.float16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    _run(form, a, b, c, bm, bn, bk, warps, bk == 16)
    want = a.double() @ b.double()
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err <= (5e-3 if bk == 16 else 2e-3), err
