"""pipeline_loads through the whole compiler: cp.async copies, commit groups and waits in
the PTX, as many shared-memory slots as stages, and ptxas happy with the result."""
import re

import pytest

from tilec.compiler import compile_kernel
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions

from gemm_kernels import matmul, matmul_aligned

SIG = "a={t}[?,?], b={t}[?,?], c={t}[?,?], M=i32, N=i32:16, K=256, BM=64, BN=64, BK=32"


def _waits(ptx):
    return sorted(set(int(n) for n in re.findall(r"cp\.async\.wait_group\s+(\d+);", ptx)))


def _compile(kernel, sig, arch, **opts):
    return compile_kernel(kernel, kernel.specialization(sig), CompileOptions(arch=arch, **opts).validated(),
                          use_cache=False)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_three_stage_cp_async_pipeline(arch, dtype):
    ck = _compile(matmul_aligned, SIG.format(t=dtype), arch, num_stages=3)
    ptx = ck.asm["ptx"]
    # 64x32 and 32x64 tiles, 128 threads, 16 bytes each: 4 copies a stage; 2 in the prologue, 1 in the loop
    assert ptx.count("cp.async.cg.shared.global") == 12
    assert _waits(ptx) == [0, 1]
    assert ptx.count("cp.async.commit_group") == 3
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx
    # two operand buffers of 3 slots (4 KiB each), plus the epilogue's small conversions
    assert 3 * 2 * 4096 <= ck.metadata["shared"] < 3 * 2 * 4096 + 1024
    if find_ptxas():
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0 and not rep["warnings"], rep


@pytest.mark.slow
def test_stages_set_slots_and_wait_depth():
    two = _compile(matmul_aligned, SIG.format(t="f16"), "sm_80", num_stages=2)
    assert _waits(two.asm["ptx"]) == [0]
    assert "shape = [2, 64, 32]" in two.asm["gpu"]
    four = _compile(matmul_aligned, SIG.format(t="f16"), "sm_80", num_stages=4)
    assert _waits(four.asm["ptx"]) == [0, 2] and "shape = [4, 64, 32]" in four.asm["gpu"]
    one = _compile(matmul_aligned, SIG.format(t="f16"), "sm_80", num_stages=1)
    assert "cp.async" not in one.asm["ptx"] and "mma.sync" in one.asm["ptx"]


@pytest.mark.slow
def test_loads_without_known_alignment_are_not_pipelined():
    """A view whose row stride is unknown gives 2-byte accesses: no cp.async, still mma.sync."""
    ck = _compile(matmul, "a=f16[?,?], b=f16[?,?], c=f16[?,?], BM=64, BN=64, BK=32, TF32=False", "sm_80")
    assert "cp.async" not in ck.asm["ptx"] and "mma.sync" in ck.asm["ptx"]
