"""A cluster kernel compiles for sm_90a: ptxas assembles it, the PTX declares the cluster
shape and uses the cluster rank and barrier; sm_80 refuses the option."""
import re

import pytest

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.lowering.passes.shared_alloc import gather_bytes
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


_ASYNC_STORE = "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32"


def _gather_ptx(kernel, sig, cluster):
    compiled = compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch="sm_90a", cluster=cluster),
                              use_cache=False)
    rep = compiled.metadata.get("ptxas")
    assert rep is None or (rep["spill_stores"] == 0 and not rep["warnings"]), rep
    return compiled, compiled.asm["ptx"]


@pytest.mark.parametrize("cluster", [2, 8])
def test_cluster_gather_goes_through_distributed_shared_memory(cluster):
    from cluster_kernels import gather_rows_kernel as k
    compiled, ptx = _gather_ptx(k, f"x=f32[?,?], total=f32[?,?], neighbour=f32[?,?], C={cluster}, BLOCK=1024",
                                cluster)
    # thread 0 stores its value into every program's buffer, counted on that program's mbarrier
    assert ptx.count(_ASYNC_STORE) == cluster and ptx.count("mapa.shared::cluster.u32") == 2 * cluster
    assert ptx.count("mbarrier.arrive.expect_tx.shared::cta.b64") == 1
    assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in ptx
    # no release at cluster scope (a GPU-wide fence): only the prologue's relaxed barrier
    assert "barrier.cluster.arrive;" not in ptx and "fence.acq_rel" not in ptx
    assert ptx.count("barrier.cluster.arrive.relaxed;") == 1 and ptx.count("barrier.cluster.wait;") == 1
    assert ptx.count("mbarrier.init.shared::cta.b64") == 4   # full and empty, two rounds
    assert ".version 8.1" in ptx   # st.async
    assert "st.global" in ptx and "ld.global" in ptx
    assert compiled.metadata["shared"] >= gather_bytes(1, cluster)


def test_cluster_gather_of_5_programs_reads_its_padding_past_the_cluster():
    from cluster_kernels import gather_pair_kernel as k
    compiled, ptx = _gather_ptx(k, "x=f32[?,?], stats=f32[?,?], C=5, BLOCK=512", 5)
    assert ".reqnctapercluster 5, 1, 1" in ptx
    assert ptx.count(_ASYNC_STORE) == 10    # two values into each of 5 programs
    # each value's row holds 8 entries (its tile): the second value goes 32 bytes on; the
    # round expects 5 programs x 2 values x 4 bytes
    assert _ASYNC_STORE + " [%r" in ptx and re.search(r"st\.async[^\n]*\+32\], ", ptx)
    assert re.search(r"mov\.b32\s+%r\d+, 40;", ptx)
    assert "0fFF800000" in ptx                # -inf: the max's padding, selected past rank 4
    assert compiled.metadata["shared"] >= gather_bytes(2, 8)


def test_cluster_gather_of_two_values_is_one_exchange():
    from cluster_kernels import gather_pair_kernel as k
    _, ptx = _gather_ptx(k, "x=f32[?,?], stats=f32[?,?], C=4, BLOCK=512", 4)
    assert ptx.count(_ASYNC_STORE) == 8 and ptx.count("mapa.shared::cluster.u32") == 8
    assert ptx.count("mbarrier.arrive.expect_tx.shared::cta.b64") == 1


def test_two_gathers_share_the_prologue_cluster_barrier():
    # every round barrier is initialized before the one cluster barrier that publishes them
    from cluster_kernels import gather_rounds_kernel as k
    _, ptx = _gather_ptx(k, "sums=i32[?,?], picks=f32[?,?], C=4", 4)
    assert ptx.count("mbarrier.init.shared::cta.b64") == 8
    assert ptx.count("barrier.cluster.arrive.relaxed;") == 1 and ptx.count("barrier.cluster.wait;") == 1
    last_init = ptx.rindex("mbarrier.init.shared::cta.b64")
    assert last_init < ptx.rindex("fence.mbarrier_init.release.cluster") < ptx.index("barrier.cluster.arrive.relaxed")
    assert ptx.index("barrier.cluster.wait;") < ptx.index(_ASYNC_STORE)


def test_gather_of_one_program_is_its_own_values():
    from cluster_kernels import gather_rounds_kernel as k
    _, ptx = _gather_ptx(k, "sums=i32[?,?], picks=f32[?,?], C=1", 1)
    assert "barrier.cluster" not in ptx and "st.async" not in ptx and "mbarrier" not in ptx
    assert ".version 8.0" in ptx


def test_gather_free_cluster_kernels_keep_the_arch_ptx_version():
    ptx = _compile("sm_90a", 2).asm["ptx"]
    assert ".version 8.0" in ptx and "st.async" not in ptx


def test_cluster_gather_size_must_match_the_option():
    from cluster_kernels import gather_rows_kernel as k
    sig = "x=f32[?,?], total=f32[?,?], neighbour=f32[?,?], C=4, BLOCK=1024"
    with pytest.raises(tc.CompilationError, match="the size must be the `cluster` option"):
        compile_kernel(k, parse_signature(k, sig), CompileOptions(arch="sm_90a", cluster=2), use_cache=False)
