"""Tensor-core GEMMs on the GPU (marker gpu): torch tensors, odd shapes, fresh random data,
against a float64 reference."""
import pytest

from gemm_kernels import dot_tile, matmul, matmul_aligned, matmul_bias_relu
from needs import needs

pytestmark = pytest.mark.gpu

torch = needs("torch")

# relative error (to the largest reference magnitude) each operand type allows
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 5e-3}


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))


def _operands(m, n, k, dtype):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    return a, b, a.double() @ b.double()


def _check(got, want, dtype):
    err = (got.double() - want).abs().max().item()
    scale = want.abs().max().item()
    assert err <= TOL[dtype] * scale, f"max error {err} for reference magnitude {scale}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (77, 131, 45), (256, 192, 512), (130, 64, 1000)])
@pytest.mark.parametrize("num_stages", [1, 3])
def test_matmul_views(dtype, m, n, k, num_stages):
    a, b, want = _operands(m, n, k, dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    grid = ((m + 63) // 64, (n + 63) // 64)
    matmul[grid](a, b, c, BM=64, BN=64, BK=32, TF32=False, num_stages=num_stages)
    _check(c, want, dtype)


def test_matmul_tf32():
    a, b, want = _operands(100, 72, 200, torch.float32)
    c = torch.empty(100, 72, device="cuda")
    matmul[((100 + 31) // 32, (72 + 31) // 32)](a, b, c, BM=32, BN=32, BK=16, TF32=True)
    _check(c, want, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("num_stages", [2, 3, 4])
@pytest.mark.parametrize("m,n", [(64, 64), (200, 112), (33, 400)])
def test_matmul_cp_async_pipeline(dtype, num_stages, m, n):
    k = 512  # a constexpr of the kernel: unmasked, aligned rows along K
    a, b, want = _operands(m, n, k, dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    grid = ((m + 63) // 64, (n + 63) // 64)
    matmul_aligned[grid](a, b, c, m, n, K=k, BM=64, BN=64, BK=32, num_stages=num_stages)
    _check(c, want, dtype)


def test_single_tile_dot_and_epilogue():
    a, b, want = _operands(16, 16, 16, torch.float16)
    c = torch.empty(16, 16, device="cuda")
    dot_tile[(1,)](a, b, c, M=16, N=16, K=16, num_warps=1)
    _check(c, want, torch.float16)
    m, n, k = 150, 90, 70
    a, b, want = _operands(m, n, k, torch.bfloat16)
    bias = torch.randn(n, device="cuda")
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    matmul_bias_relu[((m + 63) // 64, (n + 63) // 64)](a, b, bias, c, BM=64, BN=64, BK=32)
    _check(c, torch.relu(want + bias.double()), torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("arch,opts", [(None, {}), (None, {"tma": False}), ("sm_80", {})],
                         ids=["native", "native-cp-async", "sm_80"])
def test_matmul_column_major_a(dtype, arch, opts):
    """A = x.T of a row-major x (M contiguous, rows 16-byte aligned at M = 1000): on a Hopper
    an M-major wgmma A filled by TMA, or by 16-byte cp.async with tma=False; through the PTX
    JIT for sm_80, cp.async and ldmatrix.trans."""
    m, n, k = 1000, 520, 264
    x = torch.randn(k, m, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    grid = ((m + 127) // 128, (n + 127) // 128)
    matmul[grid](x.T, b, c, BM=128, BN=128, BK=64, TF32=False, num_warps=8, num_stages=4, **opts,
                 **({} if arch is None else {"arch": arch}))
    _check(c, x.T.double() @ b.double(), dtype)
