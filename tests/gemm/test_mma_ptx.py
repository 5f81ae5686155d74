"""tc.dot on tensor cores, through the whole compiler: the PTX holds mma.sync and ldmatrix,
ptxas assembles it with no spills, and dots tensor cores cannot do keep the FMA path."""
import pytest

from tilec.compiler import compile_kernel
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions

from gemm_kernels import dot_tile, matmul, matmul_bias_relu

ARCHS = ["sm_80", "sm_90a"]


def _compile(kernel, sig, arch, **opts):
    spec = kernel.specialization(sig)
    return compile_kernel(kernel, spec, CompileOptions(arch=arch, **opts).validated(), use_cache=False)


def _assert_no_spills(ck):
    if not find_ptxas():
        return
    rep = ck.metadata["ptxas"]
    assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0, rep
    assert not rep["warnings"], rep["warnings"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype,instr", [("f16", "m16n8k16.row.col.f32.f16.f16.f32"),
                                         ("bf16", "m16n8k16.row.col.f32.bf16.bf16.f32")])
def test_matmul_uses_mma_sync_and_ldmatrix(arch, dtype, instr):
    ck = _compile(matmul, f"a={dtype}[?,?], b={dtype}[?,?], c={dtype}[?,?], BM=64, BN=64, BK=32, TF32=False",
                  arch)
    ptx = ck.asm["ptx"]
    # per warp (32 x 32 of C, 2 x 2 warps) and K step of 32: 2 x 4 x 2 instructions
    assert ptx.count(f"mma.sync.aligned.{instr}") == 16
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx      # A: K contiguous
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx  # B: N contiguous
    assert "gpu.mma" in ck.asm["gpu"] and "tile.dot" not in ck.asm["gpu"]
    _assert_no_spills(ck)


@pytest.mark.parametrize("arch", ARCHS)
def test_single_dot_tile_kernel(arch):
    ck = _compile(dot_tile, "a=f16[?,?], b=f16[?,?], c=f32[?,?], M=16, N=16, K=16", arch, num_warps=1)
    assert ck.asm["ptx"].count("mma.sync.aligned.m16n8k16") == 2
    _assert_no_spills(ck)


@pytest.mark.slow
def test_tf32_when_allowed_fma_otherwise():
    sig = "a=f32[?,?], b=f32[?,?], c=f32[?,?], BM=32, BN=32, BK=16, TF32={}"
    tf32 = _compile(matmul, sig.format(True), "sm_80")
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in tf32.asm["ptx"]
    _assert_no_spills(tf32)
    exact = _compile(matmul, sig.format(False), "sm_80")
    assert "mma.sync" not in exact.asm["ptx"]
    assert "fma.rn.f32" in exact.asm["ptx"]


def test_tiny_tiles_keep_the_fma_path():
    ck = _compile(dot_tile, "a=f16[?,?], b=f16[?,?], c=f32[?,?], M=8, N=8, K=16", "sm_80")
    assert "mma.sync" not in ck.asm["ptx"]
    assert "tile.dot" in ck.asm["gpu"]


@pytest.mark.slow
def test_epilogue_runs_on_the_accumulator_layout():
    ck = _compile(matmul_bias_relu, "a=bf16[?,?], b=bf16[?,?], bias=f32[?], c=bf16[?,?], BM=64, BN=64, BK=32",
                  "sm_90a")
    gpu = ck.asm["gpu"]
    assert "tile.maximum" in gpu
    assert ") : tile<64x64xf32, #mma{version = 2" in gpu  # the loop carries the accumulator as #mma
    for line in gpu.splitlines():
        if "tile.maximum" in line:
            assert "#mma{version = 2" in line
        # the accumulator never leaves #mma (the bias row may be brought into its slice layout)
        result_type = line.split(" loc(")[0].rsplit(" : ", 1)[-1]
        assert not ("gpu.convert_layout" in line and result_type.startswith("tile<64x64xf32")), line
    _assert_no_spills(ck)
