"""The stdlib GEMM's largest configuration (128 x 256 x 64, 8 warps, 4 stages: wgmma with one
group in flight on sm_90a) on the GPU (marker gpu), against a float64 reference."""
import importlib

import pytest
from needs import needs

pytestmark = pytest.mark.gpu

torch = needs("torch")
mm = importlib.import_module("tilec.stdlib_kernels.matmul")

TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(2048, 4096, 512), (2048, 4096, 520), (2100, 4000, 200)])
def test_large_tiles(dtype, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    got = mm.matmul(a, b, bias=bias, activation="relu").double()
    want = torch.relu(a.double() @ b.double() + bias.double())
    err = (got - want).abs().max().item()
    assert err <= TOL[dtype] * want.abs().max().item(), err
