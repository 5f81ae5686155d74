"""A cluster kernel compiles for sm_90a: ptxas assembles it, the PTX declares the cluster
shape and uses the cluster rank and barrier; sm_80 refuses the option."""
import re

import pytest

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

from cluster_kernels import exchange_kernel


def _compile(arch, cluster):
    k = exchange_kernel
    sig = f"buf=i32[?], out=i32[?], N={cluster}"
    return compile_kernel(k, parse_signature(k, sig), CompileOptions(arch=arch, cluster=cluster), use_cache=False)


@pytest.mark.parametrize("cluster", [2, 4, 8])
def test_cluster_kernel_assembles_for_sm90a(cluster):
    compiled = _compile("sm_90a", cluster)
    ptx = compiled.asm["ptx"]
    assert re.search(rf"\.reqnctapercluster\s+{cluster}\s*,\s*1\s*,\s*1", ptx), ptx[:2000]
    assert "%cluster_ctarank" in ptx
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx
    assert compiled.asm.get("cubin"), "ptxas did not run"
    assert compiled.metadata["cluster"] == cluster


def test_without_cluster_option_no_cluster_shape():
    ptx = _compile("sm_90a", 1).asm["ptx"]
    assert ".reqnctapercluster" not in ptx


def test_cluster_needs_sm90():
    with pytest.raises(tc.CompilationError, match="cluster=2 needs sm_90"):
        _compile("sm_80", 2)


@pytest.mark.parametrize("cluster", [2, 8])
def test_cluster_gather_goes_through_distributed_shared_memory(cluster):
    from cluster_kernels import gather_rows_kernel as k
    sig = f"x=f32[?,?], total=f32[?,?], neighbour=f32[?,?], C={cluster}, BLOCK=1024"
    compiled = compile_kernel(k, parse_signature(k, sig), CompileOptions(arch="sm_90a", cluster=cluster),
                              use_cache=False)
    ptx = compiled.asm["ptx"]
    # thread 0 writes its value into every program's buffer, then the cluster barrier
    assert ptx.count("st.shared::cluster.b32") == cluster and ptx.count("mapa.shared::cluster.u32") == cluster
    assert "barrier.cluster.arrive" in ptx and "st.global" in ptx and "ld.global" in ptx
    assert compiled.metadata["shared"] >= 2 * cluster * 4   # two rounds of the values, by rank
    rep = compiled.metadata.get("ptxas")
    assert rep is None or (rep["spill_stores"] == 0 and not rep["warnings"]), rep


def test_cluster_gather_of_two_values_is_one_exchange():
    from cluster_kernels import gather_pair_kernel as k
    compiled = compile_kernel(k, parse_signature(k, "x=f32[?,?], stats=f32[?,?], C=4, BLOCK=512"),
                              CompileOptions(arch="sm_90a", cluster=4), use_cache=False)
    ptx = compiled.asm["ptx"]
    assert ptx.count("st.shared::cluster.b32") == 8 and ptx.count("mapa.shared::cluster.u32") == 4
    assert ptx.count("barrier.cluster.arrive") == 1


def test_cluster_gather_size_must_match_the_option():
    from cluster_kernels import gather_rows_kernel as k
    sig = "x=f32[?,?], total=f32[?,?], neighbour=f32[?,?], C=4, BLOCK=1024"
    with pytest.raises(tc.CompilationError, match="the size must be the `cluster` option"):
        compile_kernel(k, parse_signature(k, sig), CompileOptions(arch="sm_90a", cluster=2), use_cache=False)
