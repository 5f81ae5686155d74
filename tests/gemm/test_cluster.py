"""Clusters on the CPU: the multicast GEMM's PTX, the wgmma descriptor's shared offset, and the
stdlib GEMM's cluster configuration (its checks, grid, and the interpreter's promise check)."""
import re

import numpy as np
import pytest

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.frontend import lower_to_ir
from tilec.lowering.codegen import generate
from tilec.lowering.pipeline import run_pipeline
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.stdlib_kernels.matmul import MatmulConfig, matmul

from ws_kernels import cluster_matmul

SIG = "a=bf16[?,?]:div=16x16:stride_div=16x1, b=bf16[?,?]:div=16x16:stride_div=16x1, " \
      "c=bf16[?,?]:div=16x16:stride_div=16x1, BM=128, BN=256, BK=64"


def _compile(**opts):
    options = CompileOptions(**{**dict(num_warps=8, num_stages=4, arch="sm_90a"), **opts}).validated()
    return compile_kernel(cluster_matmul, parse_signature(cluster_matmul, SIG), options, use_cache=False)


@pytest.mark.slow
def test_multicast_ptx():
    ck = _compile(warp_specialize=True, cluster=2)
    ptx = ck.asm["ptx"]
    assert ".reqnctapercluster 2, 1, 1" in ptx
    multicast = re.findall(r"cp\.async\.bulk\.tensor\.2d\S*multicast::cluster \[[^]]*\], \[%rd\d+, \{[^}]*\}\], "
                           r"\[%r\d+\], %rs\d+;", ptx)
    plain = re.findall(r"cp\.async\.bulk\.tensor\.2d\S*complete_tx::bytes \[", ptx)
    # B (4 boxes of 64 columns, 2 per program) is multicast, A (one box) is not
    assert multicast and plain
    assert ptx.count("mapa.shared::cluster.u32") >= 2 and "mbarrier.arrive.shared::cluster.b64" in ptx
    assert "release.cluster.shared::cluster" not in ptx   # a cluster-scope release stalls every arrival
    assert ptx.count("barrier.cluster.arrive") == 2 and "%cluster_ctarank" in ptx
    report = ck.metadata.get("ptxas")
    if report is not None:
        assert report["spill_stores"] == report["spill_loads"] == 0 and not report["warnings"]
    assert ck.metadata["cluster"] == 2 and ck.metadata["warp_specialized"]


@pytest.mark.slow
def test_no_multicast_without_a_cluster_or_specialization():
    for opts in (dict(warp_specialize=True), dict(cluster=2)):
        ptx = _compile(**opts).asm["ptx"]
        assert "multicast::cluster" not in ptx and "barrier.cluster" not in ptx


def test_wgmma_descriptor_takes_the_shared_offset():
    # in a cluster, rank r's shared addresses carry r from bit 24: only the low 18 bits are the offset
    options = CompileOptions(num_warps=8, num_stages=4, arch="sm_90a", cluster=2).validated()
    gpu = run_pipeline(lower_to_ir(cluster_matmul, parse_signature(cluster_matmul, SIG)), options)
    llvm = str(generate(gpu))   # before LLVM folds the mask into the address arithmetic
    assert re.search(r"and i32 %[\w.\"]+, 262143", llvm)


def test_cluster_needs_sm90():
    with pytest.raises(ValueError, match="sm_90"):
        CompileOptions(cluster=2, arch="sm_80").validated()
    with pytest.raises(ValueError, match="1 to 8"):
        CompileOptions(cluster=9).validated()
    assert CompileOptions(cluster=3).validated().cluster == 3


def test_matmul_config_cluster_checks():
    with pytest.raises(ValueError, match="cluster"):
        MatmulConfig(128, 256, 64, 8, 4, cluster=2, split_k=2)
    with pytest.raises(ValueError, match="cluster"):
        MatmulConfig(128, 256, 64, 8, 4, cluster=2, group_m=3)
    cfg = MatmulConfig(128, 256, 64, 8, 4, cluster=2, persistent=True, sm_count=7)
    assert cfg.grid(4096, 4096) == (6,)           # whole clusters only
    with pytest.raises(ValueError, match="even number of 128-row tiles"):
        cfg.check_cluster(300)
    cfg.check_cluster(256)


@pytest.mark.parametrize("persistent", [False, True])
def test_interpreted_cluster_matmul(persistent):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 96)).astype(np.float16)
    b = rng.standard_normal((96, 200)).astype(np.float16)
    cfg = MatmulConfig(128, 64, 32, 4, 2, cluster=2, persistent=persistent, sm_count=4)
    with tc.interpret():
        out = matmul(a, b, config=cfg)
        with pytest.raises(ValueError, match="even number"):
            matmul(np.ones((300, 96), np.float16), b, config=cfg)   # 3 row tiles
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(out.astype(np.float64) - want).max() <= 2e-3 * np.abs(want).max()
