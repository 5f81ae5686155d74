"""Warp-specialized GEMMs on the GPU (marker gpu), against a float64 reference: odd shapes,
K shorter and longer than the ring, several configurations, and a reduction in the epilogue."""
import importlib

import pytest

import tilec as tc

from ws_kernels import ws_matmul, ws_matmul_rowmax
from needs import needs

pytestmark = pytest.mark.gpu

torch = needs("torch")

TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _needs_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("warp specialization needs sm_90a")


def _check(got, want, dtype):
    err = (got.double() - want).abs().max().item()
    assert err <= TOL[dtype] * max(1.0, want.abs().max().item()), err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (257, 384, 64), (129, 130, 40), (300, 512, 1008),
                                   (2048, 2048, 4160)])
@pytest.mark.parametrize("bn,warps,stages", [(256, 8, 4), (128, 8, 4), (128, 4, 3)])
def test_ws_matmul(dtype, m, n, k, bn, warps, stages):
    _needs_sm90()
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    grid = (tc.cdiv(m, 128), tc.cdiv(n, bn))
    ws_matmul[grid](a, b, c, BM=128, BN=bn, BK=64, num_warps=warps, num_stages=stages, warp_specialize=True)
    _check(c, 0.5 * (a.double() @ b.double()), dtype)
    ck = ws_matmul.compile(a, b, c, BM=128, BN=bn, BK=64, num_warps=warps, num_stages=stages, warp_specialize=True)
    # TMA (and so the producer) needs rows whose strides the specialization knows to be multiples of
    # 16 bytes (8 two-byte elements: 1000 and 1008 are, 130 is not)
    assert ck.metadata["warp_specialized"] == (k % 8 == 0 and n % 8 == 0)


def test_ws_epilogue_reduction():
    _needs_sm90()
    m, n, k = 300, 256, 500
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    rowmax = torch.empty(2, m, device="cuda", dtype=torch.float32)
    ws_matmul_rowmax[(tc.cdiv(m, 128), 2)](a, b, c, rowmax, BM=128, BN=128, BK=64, num_warps=8, num_stages=4,
                                           warp_specialize=True)
    want = a.double() @ b.double()
    _check(c, want, torch.float16)
    ref = torch.stack([want[:, :128].amax(dim=1), want[:, 128:].amax(dim=1)])
    assert (rowmax.double() - ref).abs().max().item() <= 1e-3 * ref.abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_stdlib_kernel_warp_specialized(dtype):
    _needs_sm90()
    mm = importlib.import_module("tilec.stdlib_kernels.matmul")
    m, n, k = 1500, 2100, 700
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    got = mm.matmul(a, b, bias=bias, activation="gelu", config=mm.MatmulConfig(128, 256, 64, 8, 4, warp_specialize=True))
    want = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
    _check(got, want, dtype)


@pytest.mark.parametrize("m,n,k", [(4000, 4096, 1024), (200, 256, 4096), (1000, 1024, 48)])
def test_ws_persistent(m, n, k):
    # more tiles than programs: the ring's slots and phases run on across each program's tiles
    _needs_sm90()
    dtype = torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    grid = (tc.cdiv(m, 128), tc.cdiv(n, 256))
    opts = dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=4, warp_specialize=True, persistent=True)
    ws_matmul[grid](a, b, c, **opts)
    _check(c, 0.5 * (a.double() @ b.double()), dtype)
    ck = ws_matmul.compile(a, b, c, **opts)
    assert ck.metadata["warp_specialized"] and ck.metadata["persistent"]


def test_stdlib_tf32_and_f8_warp_specialized():
    # K-major B (column-major through TMA) under a producer warpgroup
    _needs_sm90()
    mm = importlib.import_module("tilec.stdlib_kernels.matmul")
    a = torch.randn(1000, 1024, device="cuda")
    b = torch.randn(768, 1024, device="cuda").t()
    got = mm.matmul(a, b, allow_tf32=True, config=mm.MatmulConfig(128, 256, 32, 8, 4, warp_specialize=True))
    _check_rel(got, a.double() @ b.double(), 2e-3)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        x, y = torch.randn(600, 1024, device="cuda"), torch.randn(520, 1024, device="cuda")
        sa = x.abs().max().item() / 224.0
        sb = y.abs().max().item() / 224.0
        a8, bt8 = (x / sa).to(dtype), (y / sb).to(dtype)
        got = mm.matmul(a8, bt8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32,
                        config=mm.MatmulConfig(128, 256, 128, 8, 4, warp_specialize=True))
        _check_rel(got, (a8.double() * sa) @ (bt8.t().double() * sb), 5e-3)


def _check_rel(got, want, tol):
    err = (got.double() - want).abs().max().item()
    assert err <= tol * want.abs().max().item(), err
