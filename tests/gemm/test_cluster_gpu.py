"""GEMMs whose B tiles a cluster shares through TMA multicast (marker gpu), against float64:
clusters of 2 and 4, odd N and K, persistent programs, and the launch-time grid check."""
import pytest

import tilec as tc

from ws_kernels import cluster_matmul
from needs import needs

pytestmark = pytest.mark.gpu

torch = needs("torch")

TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _needs_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("clusters and TMA multicast need sm_90a")


def _run(m, n, k, dtype, bn, warps, stages, cluster, **opts):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    grid = (tc.cdiv(m, 128), tc.cdiv(n, bn))
    kw = dict(BM=128, BN=bn, BK=64, num_warps=warps, num_stages=stages, warp_specialize=True, cluster=cluster,
              **opts)
    cluster_matmul[grid](a, b, c, **kw)
    want = 0.5 * (a.double() @ b.double())
    err = (c.double() - want).abs().max().item()
    assert err <= TOL[dtype] * max(1.0, want.abs().max().item()), err
    return cluster_matmul.compile(a, b, c, **kw)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (256, 384, 64), (250, 130, 40), (2048, 2048, 4160),
                                   (512, 520, 2000)])
@pytest.mark.parametrize("bn,warps,stages", [(256, 8, 4), (128, 8, 4), (128, 4, 3)])
def test_cluster_of_two(dtype, m, n, k, bn, warps, stages):
    _needs_sm90()
    ck = _run(m, n, k, dtype, bn, warps, stages, 2)
    # TMA (and so the producer and its multicast) needs row strides known to be multiples of 16
    # bytes (8 two-byte elements: 1000 and 520 are, 130 is not)
    tma = n % 8 == 0 and k % 8 == 0
    assert ck.metadata["cluster"] == 2 and ck.metadata["warp_specialized"] == tma
    assert ("multicast::cluster" in ck.asm["ptx"]) == tma


@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (512, 130, 4100)])
def test_cluster_of_four(m, n, k):
    _needs_sm90()
    _run(m, n, k, torch.bfloat16, 128, 8, 4, 4)


@pytest.mark.parametrize("m,n,k", [(2048, 2048, 1000), (4096, 1000, 520)])
def test_cluster_persistent(m, n, k):
    _needs_sm90()
    ck = _run(m, n, k, torch.bfloat16, 256, 8, 4, 2, persistent=True)
    assert ck.metadata["persistent"]


def test_cluster_without_warp_specialization_drops_multicast():
    _needs_sm90()
    m, n, k = 512, 384, 1000
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    kw = dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=4, cluster=2)
    cluster_matmul[(4, 3)](a, b, c, **kw)
    want = 0.5 * (a.double() @ b.double())
    assert (c.double() - want).abs().max().item() <= 2e-3 * want.abs().max().item()
    assert "multicast::cluster" not in cluster_matmul.compile(a, b, c, **kw).asm["ptx"]


def test_grid_must_hold_whole_clusters():
    _needs_sm90()
    a = torch.randn(384, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    c = torch.empty(384, 128, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="multiple of 2"):
        cluster_matmul[(3, 1)](a, b, c, BM=128, BN=128, BK=64, num_warps=8, num_stages=4, warp_specialize=True,
                               cluster=2)
