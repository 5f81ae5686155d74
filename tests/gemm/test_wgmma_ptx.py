"""tc.dot on wgmma (sm_90a) through the whole compiler: the passes' output, the PTX, ptxas.

sm_80 keeps mma.sync for the same kernels; ptxas must assemble the sm_90a GEMMs with no
spills and no warnings (C7517/C7519 would mean missing wgmma fences).
"""
import importlib
import re

import pytest

from tilec.compiler import compile_kernel
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

from chain_kernels import attention, attention_sig
from gemm_kernels import matmul
from nt_kernels import dot_nt, dot_nt_once, nt_sig

mm = importlib.import_module("tilec.stdlib_kernels.matmul")


def _compile(kernel, sig, arch, **opts):
    return compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch=arch, **opts).validated(),
                          use_cache=False)


def _assert_clean(ck):
    if not find_ptxas():
        return
    rep = ck.metadata["ptxas"]
    assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0, rep
    assert not rep["warnings"], rep["warnings"]


def _body_ops(gpu_text: str):
    """The gpu/tile op names of the innermost loop body of the K loop, in order."""
    lines = gpu_text.splitlines()
    start = next(i for i, ln in enumerate(lines) if "tile.for" in ln)
    names = []
    for ln in lines[start + 1:]:
        word = ln.split("=", 1)[-1].strip().split(" ")[0] if "=" in ln.split("{")[0] else ln.strip().split(" ")[0]
        if word.startswith("gpu."):
            names.append(word)
        if word == "tile.yield":
            break
    return names


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_stdlib_gemm_on_wgmma(dtype):
    """The cp.async ring (tma=False; the TMA ring is tests/gemm/test_tma.py's)."""
    sig, cfg = mm.signature(4096, 4096, 4096, dtype, target="sm_90a")
    assert (cfg.bm, cfg.bn, cfg.bk, cfg.num_warps, cfg.num_stages) == (128, 256, 64, 8, 4)
    ck = _compile(mm.matmul_kernel, sig, "sm_90a", num_warps=cfg.num_warps, num_stages=cfg.num_stages, tma=False)
    ptx = ck.asm["ptx"]
    # two warpgroups of 64 x 256, K = 64 per stage: 4 instructions per thread and iteration
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n256k16.f32.{dtype}.{dtype}") == 4
    assert "wgmma.fence.sync.aligned" in ptx and "wgmma.commit_group.sync.aligned" in ptx
    assert "wgmma.wait_group.sync.aligned 1;" in ptx and "wgmma.wait_group.sync.aligned 0;" in ptx
    assert "fence.proxy.async.shared::cta" in ptx
    assert "cp.async.cg.shared.global" in ptx
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx
    # the ring: wait for this iteration's copies, fence them into the async proxy, barrier,
    # prefetch two iterations ahead, then the wgmma, one group left in flight
    assert _body_ops(ck.asm["gpu"]) == [
        "gpu.async_wait", "gpu.fence_proxy_async", "gpu.barrier", "gpu.async_copy", "gpu.async_copy",
        "gpu.async_commit", "gpu.wgmma", "gpu.wgmma_wait"]
    assert "gpu.async_wait {pending = 1}" in ck.asm["gpu"]
    assert "gpu.wgmma_wait %acc_1 {pending = 0}" in ck.asm["gpu"] or ck.asm["gpu"].count("pending = 0") == 2
    _assert_clean(ck)


@pytest.mark.slow
def test_same_gemm_keeps_mma_sync_on_sm_80():
    sig, cfg = mm.signature(4096, 4096, 4096, "bf16", target="sm_80")
    assert cfg.bk == 32
    ck = _compile(mm.matmul_kernel, sig, "sm_80", num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    assert "mma.sync.aligned.m16n8k16" in ck.asm["ptx"] and "wgmma" not in ck.asm["ptx"]


@pytest.mark.slow
def test_two_stages_wait_for_every_wgmma():
    """With two slots there is no room for a wgmma in flight: the copies run one iteration
    ahead and each wgmma is waited for before the next iteration's prefetch."""
    sig, _ = mm.signature(4096, 4096, 4096, "bf16", target="sm_90a")
    ck = _compile(mm.matmul_kernel, sig, "sm_90a", num_warps=8, num_stages=2)
    gpu = ck.asm["gpu"]
    assert "gpu.wgmma_wait" in gpu and "{pending = 1}" not in gpu
    assert "wgmma.wait_group.sync.aligned 1;" not in ck.asm["ptx"]
    _assert_clean(ck)


@pytest.mark.slow
def test_register_path_fences_stores_before_wgmma():
    """Operands without 16-byte accesses (unknown strides) go through registers and
    st.shared: a proxy fence sits between the stores and the barrier before the wgmma."""
    ck = _compile(matmul, "a=bf16[?,?], b=bf16[?,?], c=bf16[?,?], BM=64, BN=64, BK=64, TF32=False",
                  "sm_90a", num_warps=4)
    assert _body_ops(ck.asm["gpu"]) == [
        "gpu.barrier", "gpu.local_store", "gpu.local_store", "gpu.fence_proxy_async", "gpu.barrier",
        "gpu.wgmma", "gpu.wgmma_wait"]
    assert ck.asm["ptx"].count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == 4
    _assert_clean(ck)


@pytest.mark.slow
@pytest.mark.parametrize("sig,num_warps", [
    ("a=f16[?,?], b=f16[?,?], c=f16[?,?], BM=64, BN=64, BK=32, TF32=False", 4),   # 64-byte rows of A
    ("a=f32[?,?], b=f32[?,?], c=f32[?,?], BM=64, BN=64, BK=16, TF32=True", 4),    # tf32, 64-byte rows
])
def test_other_dots_keep_mma_sync_on_sm_90a(sig, num_warps):
    ck = _compile(matmul, sig, "sm_90a", num_warps=num_warps)
    assert "mma.sync.aligned" in ck.asm["ptx"] and "wgmma" not in ck.asm["ptx"]


@pytest.mark.slow
@pytest.mark.parametrize("sig,instr", [
    ("a=f32[?,?], b=f32[?,?], c=f32[?,?], BM=64, BN=64, BK=32, TF32=True", "m64n64k8.f32.tf32.tf32"),
    ("a=f8e4m3[?,?], b=f8e4m3[?,?], c=f32[?,?], BM=64, BN=64, BK=128, TF32=False", "m64n64k32.f32.e4m3.e4m3"),
    ("a=f8e5m2[?,?], b=f8e5m2[?,?], c=bf16[?,?], BM=64, BN=64, BK=128, TF32=False", "m64n64k32.f32.e5m2.e5m2"),
])
def test_tf32_and_f8_dots_on_wgmma(sig, instr):
    """tf32 (k8) and f8 (k32) wgmma, both operands K-major: B's buffer has K contiguous and
    the instruction takes no transpose immediates."""
    ck = _compile(matmul, sig, "sm_90a", num_warps=4)
    ptx = ck.asm["ptx"]
    assert ptx.count(f"wgmma.mma_async.sync.aligned.{instr}") == 4   # 128 bytes of K, 32 per instruction
    assert "mma.sync" not in ptx
    gpu = ck.asm["gpu"]
    assert "order = [0, 1]" in gpu or "order = [1, 2, 0]" in gpu   # B K-major (slots outermost)
    assert ck.metadata["ptxas"]["warnings"] == [] if find_ptxas() else True


@pytest.mark.slow
def test_true_f32_dot_stays_off_tensor_cores_on_sm_90a():
    ck = _compile(matmul, "a=f32[?,?], b=f32[?,?], c=f32[?,?], BM=64, BN=64, BK=32, TF32=False", "sm_90a",
                  num_warps=4)
    assert "wgmma" not in ck.asm["ptx"] and "mma.sync" not in ck.asm["ptx"]


# The K-major B's descriptor constants (wgmma_fragments.descriptor_high_bits): leading byte
# offset 16 B (1, unused by a swizzled K-major layout), stride byte offset 1024 B (64: the next
# 8 rows of N), 128-byte swizzle (1 in bits 62-63).
_K_MAJOR_HI = (1 << 16) | (64 << 32) | (1 << 62)


def test_narrow_k_major_b_on_wgmma_m64n32():
    """C = A Bᵀ of a 64 x 64 block (K 64) at 8 warps: the two warpgroups split N, 32 columns
    each, and B (rows of b, K contiguous) is K-major, so wgmma takes m64n32k16 (an N-major B
    would need 64 columns a warpgroup). Four k16 steps of one accumulator of 16 registers,
    no transpose immediates (trans-a = trans-b = 0); each descriptor is the constant fields
    plus the start address moved 32 bytes (2 in 16-byte units) per step; warp column 1's B
    starts 32 rows of 128 bytes (4096) into the buffer (warp w's column is w >> 2: LLVM folds
    (w >> 2) * 4096 into (w << 10) & -4096)."""
    ck = _compile(dot_nt_once, nt_sig("f16", 64, 64, 64), "sm_90a", num_warps=8)
    ptx = ck.asm["ptx"]
    lines = [ln for ln in ptx.splitlines() if "wgmma.mma_async" in ln]
    assert len(lines) == 4, lines
    for ln in lines:
        assert "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {" in ln
        acc = ln.split("f16.f16 {", 1)[1].split("}", 1)[0]
        assert len(acc.split(",")) == 16                      # 64 x 32 f32 over 128 threads
        assert ln.rstrip().endswith("p, 1, 1, 0, 0; }"), ln   # A and B K-major
    for step in range(4):
        assert ptx.count(f", {_K_MAJOR_HI + 2 * step};") == 2, step   # A's and B's descriptors
    assert re.search(r"shl\.b32\s+(%r\d+), %r\d+, 10;\s+and\.b32\s+%r\d+, \1, -4096;", ptx)
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx
    gpu = ck.asm["gpu"]
    assert "#mma{version = 3, warps_per_cta = [4, 2], instr_shape = [16, 32]}" in gpu
    assert "order = [0, 1]" in gpu and "b_trans = true" not in gpu   # the loaded k.T, stored K-major
    rem = [r.message for r in ck.remarks if r.kind == "dot"]
    assert rem == ["tc.dot 64x64x64 f16 lowered to wgmma m64n32k16 (4 warps along M, 2 along N), "
                   "A from shared memory, B from shared memory"], rem
    _assert_clean(ck)


def test_narrow_n_major_b_keeps_mma_sync():
    """The same 64 x 64 block with B N-major (x @ w of a row-major w): mma.sync, and the
    remark says why not wgmma."""
    ck = _compile(matmul, "a=f16[?,?]:stride_div=16x1, b=f16[?,?]:stride_div=16x1, c=f16[?,?], BM=64, BN=64, "
                          "BK=64, TF32=False", "sm_90a", num_warps=8)
    assert "mma.sync.aligned" in ck.asm["ptx"] and "wgmma" not in ck.asm["ptx"]
    rem = " ".join(r.message for r in ck.remarks if r.kind == "dot")
    assert "instruction of 64 to 256 columns for an N-major B (BN=64)" in rem, rem


# (num_warps, BM, BN, instruction N): 16 to 64 columns per warp column, one or two warpgroups along N
NARROW = [(4, 64, 16, 16), (4, 64, 32, 32), (4, 64, 64, 64), (8, 64, 32, 16), (8, 64, 64, 32), (8, 64, 128, 64),
          (8, 128, 32, 32), (8, 128, 16, 16), (8, 128, 64, 64)]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("once", [True, False], ids=["once", "loop"])
@pytest.mark.parametrize("num_warps,bm,bn,instr", NARROW)
def test_narrow_k_major_b_shapes(num_warps, bm, bn, instr, once, dtype):
    """Every shape test_wgmma_narrow_gpu.py runs: the instruction it is meant to test, ptxas
    clean; the loop's B goes through the cp.async ring into a K-major buffer."""
    kernel, bk = (dot_nt_once, 128) if once else (dot_nt, 64)
    ck = _compile(kernel, nt_sig(dtype, bm, bn, bk), "sm_90a", num_warps=num_warps, num_stages=3)
    ptx = ck.asm["ptx"]
    assert f"wgmma.mma_async.sync.aligned.m64n{instr}k16.f32.{dtype}.{dtype}" in ptx
    assert "mma.sync" not in ptx
    if not once:
        assert "cp.async.cg.shared.global" in ptx
    _assert_clean(ck)


@pytest.mark.slow
def test_attention_at_8_warps_splits_s_over_warpgroups():
    """Attention with BM = BN = 64 at 8 warps (head dim 128): S = Q Kᵀ on m64n32k16, 32 keys a
    warpgroup, P through shared memory to P V on m64n64k16."""
    ck = _compile(attention, attention_sig("bf16", 64, 64, 128).replace("[?,?]", "[?,?]:stride_div=16x1"),
                  "sm_90a", num_warps=8)
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx
    assert "mma.sync" not in ptx
    _assert_clean(ck)
