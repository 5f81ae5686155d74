"""Split-K in the stdlib GEMM on the GPU (marker gpu): the shapes the heuristic splits (few
output tiles, long K), odd N, epilogues and batches, against a float64 reference on fresh
random data."""
import sys

import pytest

import tilec.stdlib_kernels.matmul  # noqa: F401 - the module, not the function of the same name
from tilec.stdlib_kernels import matmul
from tilec.target import Target
from needs import needs

pytestmark = pytest.mark.gpu

torch = needs("torch")
mm = sys.modules["tilec.stdlib_kernels.matmul"]

# relative error (to the largest reference magnitude) each operand type allows
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}


def _check(got, want, tol):
    err = (got.double() - want).abs().max().item()
    scale = max(want.abs().max().item(), 1e-30)
    assert err <= tol * scale, f"max error {err} for reference magnitude {scale}"


def _chosen(m, n, k, dtype):
    d = {torch.float16: mm.tc.float16, torch.bfloat16: mm.tc.bfloat16}[dtype]
    return mm.config_for(m, n, k, d, 1, Target.current(), tensor_cores=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 14336), (16, 4095, 14336), (128, 4093, 14336), (128, 1000, 4096)])
def test_heuristic_split_shapes(dtype, m, n, k):
    assert _chosen(m, n, k, dtype).split_k > 1   # the path under test
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    _check(matmul(a, b), a.double() @ b.double(), TOL[dtype])


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_bias_activation_f32_out(activation):
    m, n, k = 77, 333, 5000
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    cfg = mm.MatmulConfig(64, 64, 64, 4, 4, split_k=7)
    got = matmul(a, b, bias=bias, activation=activation, out_dtype=torch.float32, config=cfg)
    r = a.double() @ b.double() + bias.double()
    want = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[activation](r)
    _check(got, want, 1e-5)


@pytest.mark.parametrize("shared", ["none", "b"])
def test_batched(shared):
    bsz, m, n, k = 3, 16, 1000, 3000
    a = torch.randn(bsz, m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16) if shared == "b" else torch.randn(
        bsz, k, n, device="cuda", dtype=torch.float16)
    got = matmul(a, b, config=mm.MatmulConfig(16, 64, 128, 4, 4, split_k=5))
    _check(got, a.double() @ b.double(), TOL[torch.float16])


def test_tf32_split():
    a = torch.randn(20, 6000, device="cuda")
    b = torch.randn(6000, 300, device="cuda")
    got = matmul(a, b, allow_tf32=True, config=mm.MatmulConfig(64, 128, 32, 4, 4, split_k=6))
    _check(got, a.double() @ b.double(), 5e-3)


def test_repeatable():
    # deterministic: no atomics, the slices always summed in one order
    a = torch.randn(128, 14336, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16)
    first = matmul(a, b)
    assert torch.equal(first, matmul(a, b))
