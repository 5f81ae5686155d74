"""The flash-attention forward of issue 44 (tests/attention_kernels.py) on the CPU: the
interpreter gives numpy's result, before and after the canonicalization that folds the
rank-3 reshapes and the `.T` into the view loads; the PTX loads Q, K, V with 16-byte
accesses, feeds K to the first dot as a K-major operand without a layout conversion, and
assembles for sm_90a and sm_80: with no spills at BM = 128 (8 warps), BN = 64 or 128, D = 64
or 128 on sm_90a, and on sm_80 wherever the mma.sync tiles fit; where they do not, the
compiler says so (a SpillWarning naming the kernel, kept in `metadata["warnings"]`)."""
from __future__ import annotations

import copy
import re
import warnings

import numpy as np
import pytest

import tilec as tc
from tilec.errors import SpillWarning
from tilec.interpreter import run as interpret_module
from tilec.lowering.pipeline import run_passes
from tilec.options import CompileOptions
from tilec.target import Target

from attention_kernels import attn_fwd, attn_fwd_next_scores_first, grid, ref_attention, signature


def _inputs(bh, n_q, n_kv, d, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((bh, n_q, d)).astype(np.float16)
    k = rng.standard_normal((bh, n_kv, d)).astype(np.float16)
    v = rng.standard_normal((bh, n_kv, d)).astype(np.float16)
    return q, k, v


@pytest.mark.parametrize("n_q,n_kv", [(37, 53), (32, 16)])
def test_attention_runs_under_the_interpreter(n_q, n_kv):
    q, k, v = _inputs(2, n_q, n_kv, 16)
    o = np.zeros_like(q)
    scale = 0.25
    with tc.interpret():
        attn_fwd[grid(q, 16)](q, k, v, o, scale, BM=16, BN=16, D=16)
    np.testing.assert_allclose(o.astype(np.float64), ref_attention(q, k, v, scale), rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("n_q,n_kv", [(37, 53), (32, 16)])
def test_next_scores_first_runs_under_the_interpreter(n_q, n_kv):
    q, k, v = _inputs(2, n_q, n_kv, 16, seed=1)
    o = np.zeros_like(q)
    with tc.interpret():
        attn_fwd_next_scores_first[grid(q, 16)](q, k, v, o, 0.25, BM=16, BN=16, D=16)
    np.testing.assert_allclose(o.astype(np.float64), ref_attention(q, k, v, 0.25), rtol=2e-2, atol=2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 128])
def test_next_scores_first_keeps_its_wgmmas_unserialized(d):
    """The loop carries S(j+1) and O += P(j) V(j) over the back edge. The carried O was
    waited for with `pending = 1` (S(j+2) issued since), which ptxas cannot follow over the
    back edge: it serialized every wgmma of the kernel (C7514; 408 against the plain order's
    517 TFLOP/s on an H200). The wait is `pending = 0` now, and ptxas's verdict reaches
    `metadata["ptxas"]["wgmma_serialized"]` and a WgmmaSerializedWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", tc.WgmmaSerializedWarning)
        ck = attn_fwd_next_scores_first.compile(signature("f16", 128, 64, d), arch="sm_90a", num_warps=8,
                                               fast_math=True)
    if ck.metadata["ptxas"] is None:
        pytest.skip("ptxas not found")
    assert ck.metadata["carry_wgmma"] and ck.metadata["ptxas"]["wgmma_serialized"] == ""
    assert ck.metadata["ptxas"]["spill_stores"] == 0


def test_a_serialized_carried_build_is_built_again_without(monkeypatch):
    """When ptxas serializes the wgmmas of a build that carries one over the back edge, the
    compiler builds the kernel again with every wgmma retired in its iteration and keeps
    that build (here ptxas's verdict on the carried build is faked)."""
    from tilec import compiler
    from tilec.specialize import parse_signature
    real_assemble, marked = compiler._assemble, []

    def assemble(res, tgt, narrow=None):
        kept, result = real_assemble(res, tgt, narrow)
        if not marked:
            marked.append(result)
            result.wgmma_serialized = "non wgmma instructions reading accumulator registers (faked)"
        return kept, result
    monkeypatch.setattr(compiler, "_assemble", assemble)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tc.WgmmaSerializedWarning)
        ck = compiler.compile_kernel(attn_fwd, parse_signature(attn_fwd, signature("f16", 128, 64, 64)),
                                     CompileOptions(arch="sm_90a", num_warps=8, fast_math=True), use_cache=False)
    if ck.metadata["ptxas"] is None:
        pytest.skip("ptxas not found")
    assert marked and not ck.metadata["carry_wgmma"] and ck.metadata["ptxas"]["wgmma_serialized"] == ""


def test_a_serialized_kernel_warns_and_its_cached_copy_too(monkeypatch, tmp_path):
    """Where the rebuild is serialized as well, the kernel kept warns with a
    WgmmaSerializedWarning naming it and ptxas's reason, keeps the message in
    metadata["warnings"], and a cache hit says it again in the same category (ptxas's
    verdict faked on every build)."""
    from tilec import compiler
    from tilec.runtime import cache
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    real_assemble = compiler._assemble

    def assemble(res, tgt, narrow=None):
        kept, result = real_assemble(res, tgt, narrow)
        result.wgmma_serialized = "non wgmma instructions defining accumulator registers (faked)"
        return kept, result
    monkeypatch.setattr(compiler, "_assemble", assemble)
    sig = signature("f16", 128, 64, 64)
    with pytest.warns(tc.WgmmaSerializedWarning, match=r"kernel 'attn_fwd' \(sm_90a\): ptxas serialized its wgmmas"):
        ck = attn_fwd.compile(sig, arch="sm_90a", num_warps=8, fast_math=True)
    if ck.metadata["ptxas"] is None:
        pytest.skip("ptxas not found")
    assert ck.metadata["ptxas"]["wgmma_serialized"].endswith("(faked)")
    assert any("serialized" in w for w in ck.metadata["warnings"])
    monkeypatch.setattr(compiler, "_assemble", real_assemble)
    cache.clear_memory()   # from the disk cache: the kept warning, in its category
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        attn_fwd.compile(sig, arch="sm_90a", num_warps=8, fast_math=True)
    assert [type(w.message) for w in seen] == [tc.WgmmaSerializedWarning]


def test_canonicalized_view_loads_keep_the_result():
    """The squeezed and transposed view loads (squeeze, order) mean what the reshapes and the
    permute they replace meant: the interpreter runs the canonicalized module to numpy's result."""
    q, k, v = _inputs(3, 21, 45, 16, seed=1)
    o = np.zeros_like(q)
    spec = attn_fwd.specialization(q, k, v, o, 0.5, BM=16, BN=16, D=16)
    module = run_passes(copy.deepcopy(attn_fwd.ir(spec)), ["canonicalize"],
                        CompileOptions().validated(Target.default()), verify_each=True)
    text = str(module)
    assert "tile.reshape" not in text and "tile.permute" not in text
    assert text.count("squeeze = [0]") == 4 and "order = [1, 0]" in text
    interpret_module(module, [q, k, v, o, np.float32(0.5)], grid(q, 16) + (1,))
    np.testing.assert_allclose(o.astype(np.float64), ref_attention(q, k, v, 0.5), rtol=2e-2, atol=2e-3)


def _loop(ptx: str) -> str:
    """The text of the key loop: the longest span from a label to a branch back to it."""
    labels = {m.group(1): m.start() for m in re.finditer(r"^(\$L__BB\d+_\d+):", ptx, re.M)}
    spans = [(labels[m.group(1)], m.end()) for m in re.finditer(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", ptx)
             if labels.get(m.group(1), len(ptx)) < m.start()]
    start, end = max(spans, key=lambda se: se[1] - se[0])
    return ptx[start:end]


# (arch, BM, BN, D, warps, fits): sm_80's mma.sync tiles at D = 128 hold S, O, Q and P in
# registers per warp (16 rows each at 8 warps): BN = 128 there, or 4 warps (32 rows each), spill
CONFIGS = [("sm_90a", 128, 64, 64, 8, True), ("sm_90a", 128, 64, 128, 8, True), ("sm_90a", 128, 128, 64, 8, True),
           ("sm_90a", 128, 128, 128, 8, True), ("sm_80", 128, 64, 64, 8, True), ("sm_80", 128, 64, 128, 8, True),
           ("sm_80", 128, 128, 64, 8, True), ("sm_80", 128, 128, 128, 8, False), ("sm_80", 128, 64, 128, 4, False)]


@pytest.mark.slow
@pytest.mark.parametrize("arch,bm,bn,d,warps,fits", CONFIGS)
def test_attention_ptx_assembles(arch, bm, bn, d, warps, fits):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ck = attn_fwd.compile(signature("f16", bm, bn, d), arch=arch, num_warps=warps)
    report = ck.metadata.get("ptxas")
    if report is None:
        pytest.skip("ptxas not found")   # the PTX checks below still ran in other configs
    spilled = report["spill_stores"] + report["spill_loads"]
    said = [str(w.message) for w in seen if issubclass(w.category, SpillWarning)]
    if fits:
        assert report["registers"] > 0 and spilled == 0 and not said, report
    else:
        assert spilled > 0 and said and "'attn_fwd'" in said[0] and ck.metadata["warnings"] == said, report


@pytest.mark.parametrize("arch,tma", [("sm_90a", True), ("sm_90a", False), ("sm_80", False)])
def test_k_is_stored_once_in_its_natural_layout(arch, tma):
    ck = attn_fwd.compile(signature("f16", 128, 64, 128), arch=arch, num_warps=8, tma=tma)
    gpu_ir = ck.asm["gpu"]
    # no register shuffle for k.T: the load runs along K (its contiguous dimension)
    assert "gpu.convert_layout" not in gpu_ir.split("tile.for")[1].split("gpu.reduce")[0]
    ptx = ck.asm["ptx"]
    # q's rank-3 load: 16-byte accesses (128 x 128 f16 over 256 threads: 8 each), none narrower
    loads = re.findall(r"ld\.global(?:\.nc)?\.(v4\.b32|b16|u16|b32|v2\.b32)", ptx)
    assert loads == ["v4.b32"] * 8
    assert "st.global.b16" not in ptx
    if tma:   # the rank-3 store of o leaves by TMA (tma_stores): one bulk copy per 64 columns of d
        assert len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared::cta\.bulk_group", ptx)) == 2
        assert "st.global.b32" not in ptx
    else:     # ... else from the accumulator layout in 4-byte pairs, as a 2-D one would
        assert "st.global.b32" in ptx
    # k's ring is K-contiguous (order [1, 2, 0]: slots outermost, then K): 16-byte copies, or
    # TMA boxes of the (z, seq, d) view, 64 keys by 64 of d, landing turned over
    if tma:
        kbuf = re.search(r"gpu.tma_load (%\d+), .*\{box = \[1, 64, 64\], transposed = true\}", gpu_ir).group(1)
    else:
        kbuf = re.search(r"gpu.async_copy (%\d+), .*\{vec = 8", gpu_ir).group(1)
    assert re.search(rf"{kbuf} = gpu.alloc {{shape = \[3, 128, 64\], layout = #shared{{vec = 8, .*order = \[1, 2, 0\]",
                     gpu_ir)
    if arch == "sm_90a":
        # B of q @ k.T is K-major: imm-trans-b = 0 on the first wgmma; the second takes p from
        # registers (no imm-trans-a) and v N-major (imm-trans-b = 1)
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16 .*p, 1, 1, 0, 0;", ptx)
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 .*p, 1, 1, 1;", ptx)


@pytest.mark.parametrize("arch,tma", [("sm_90a", False), ("sm_80", False)])
def test_q_is_stored_once_and_k_v_are_staged(arch, tma):
    """q (loop-invariant) goes to shared memory before the loop; k's and v's loads become one
    cp.async ring of num_stages = 3 slots, and p stays in registers, so the body stores nothing
    to shared memory and has one bar.sync, the ring's. On sm_80 the copies run two iterations
    ahead; on sm_90a (without TMA) O += P V stays in flight into the next iteration (its wait
    retires it there, before O is rescaled), so its slot is still read and the copies run one
    ahead."""
    ck = attn_fwd.compile(signature("f16", 128, 64, 128), arch=arch, num_warps=8, tma=tma)
    gpu_ir = ck.asm["gpu"]
    head, loop = gpu_ir.split("tile.for", 1)
    ahead = 1 if arch == "sm_90a" else 2
    assert re.search(r"gpu.local_store %\d+, %qt", head) and "%qt" not in loop
    assert head.count("gpu.async_copy") == 2 * ahead and head.count("gpu.async_commit") == ahead
    assert loop.count("gpu.local_store") == 0
    ptx = ck.asm["ptx"]
    body = _loop(ptx)
    assert body.count("cp.async.cg.shared.global") == 8 and re.search(rf"cp\.async\.wait_group\s+{ahead - 1};", body)
    assert "cp.async.cg.shared.global" in ptx[:ptx.index(body)]   # the prologue
    if arch == "sm_90a":   # S = Q Kᵀ retired at once (with the O of the iteration before), the
        # carried O waited for with pending = 0 (ptxas cannot count groups over the back edge),
        # O += P V left in flight
        assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", body) == ["0", "0", "1"], body
    assert body.count("bar.sync") == 1


def test_k_and_v_fill_one_tma_ring():
    """On sm_90a k's and v's tiles of the rank-3 views come by TMA: one mbarrier per slot
    expects both (2 x 64 x 128 f16), the prologue fills 2 of the 3 slots, each iteration waits
    for its slot and, once every warpgroup's O += P V of the iteration before has retired
    (one bar.sync), refills that slot 2 iterations ahead. O += P V stays in flight across the
    back edge; nothing goes through cp.async or generic stores, so no proxy fence in the body."""
    ck = attn_fwd.compile(signature("f16", 128, 64, 128), arch="sm_90a", num_warps=8)
    gpu_ir = ck.asm["gpu"]
    head, loop = gpu_ir.split("tile.for", 1)
    assert head.count("gpu.tma_load") == 4 and head.count("gpu.mbarrier_expect") == 2
    assert "gpu.async_copy" not in gpu_ir and "gpu.local_store" not in loop
    assert re.search(r"gpu.mbarrier_expect .* \{bytes = 32768\}", gpu_ir)
    ptx = ck.asm["ptx"]
    body = _loop(ptx)
    # 4 boxes per refill: k and v, each two 64-wide column blocks of d = 128
    assert body.count("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 4
    assert "mbarrier.try_wait.parity" in body and "cp.async.cg" not in ptx
    # S retired at once (with the O of the iteration before), the carried O waited for with
    # pending = 0 (ptxas cannot count groups over the back edge), O += P V left in flight
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", body) == ["0", "0", "1"], body
    assert body.count("bar.sync") == 1 and "fence.proxy.async" not in body
    assert ck.metadata["ptxas"] is None or ck.metadata["ptxas"]["spill_stores"] == 0


def test_a_kernel_that_spills_with_a_carried_wgmma_is_built_again_without(monkeypatch):
    """The stdlib's dK/dV kernel at head dim 128 on the wgmma blocks keeps dV's product in
    flight into the next iteration and fits (since the descriptors stay in uniform
    registers). Where such a build spills, the compiler builds the kernel again with every
    wgmma retired in its iteration and keeps the build that spills less: here ptxas's
    count of the carried build is made to look 1000 bytes higher."""
    from tilec import compiler
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    from tilec.stdlib_kernels import attention_bwd as B
    t = "f16[?,?,?,?]:stride_div=16x16x16x1"
    r = "f32[?,?,?]:stride_div=16x16x1"
    sig = (f"q={t}, k={t}, v={t}, do={t}, lse={r}, delta={r}, dk={t}, dv={t}, qk_scale=f32, cap=f32, "
           "scale=f32, left=i32, right=i32, GROUP=1, SOFTCAP=False, BM=64, BN=128, DK=128, DV=128")
    k = B.attention_bwd_dkdv_kernel
    opts = CompileOptions(arch="sm_90a", num_warps=8, fast_math=True)
    carried = compile_kernel(k, parse_signature(k, sig), opts, use_cache=False)
    if carried.metadata.get("ptxas") is None:
        pytest.skip("ptxas not found")
    assert carried.metadata["carry_wgmma"] and carried.metadata["ptxas"]["spill_stores"] == 0
    real_assemble, real_spills, marked = compiler._assemble, compiler._spills, []

    def assemble(res, tgt, narrow=None):   # the first ptxas result kept: the carried build's
        kept, result = real_assemble(res, tgt, narrow)
        marked[:] = marked or [result]
        return kept, result
    monkeypatch.setattr(compiler, "_assemble", assemble)
    monkeypatch.setattr(compiler, "_spills", lambda r: real_spills(r) + (1000 if marked and r is marked[0] else 0))
    kept = compile_kernel(k, parse_signature(k, sig), opts, use_cache=False)
    assert not kept.metadata["carry_wgmma"] and kept.metadata["ptxas"]["spill_stores"] == 0
    assert kept.asm["ptx"] != carried.asm["ptx"]


def test_wgmma_descriptors_derive_from_a_warp_uniform_index():
    # Each wgmma's warpgroup offset comes from the warp index read back from lane 0
    # (shfl.sync.idx): ptxas then keeps the descriptors in uniform registers (the 2-warpgroup
    # dQ kernel at head dim 128 went from 221 to 198 registers, its loop lost 32 R2UR moves).
    ck = attn_fwd.compile(signature("f16", 128, 64, 128), arch="sm_90a", num_warps=8)
    ptx, gpu = ck.asm["ptx"], ck.asm["gpu"]
    warp = re.search(r"shr\.u32\s+(%r\d+), %r\d+, 5;", ptx).group(1)   # tid.x >> 5
    reads = re.findall(r"shfl\.sync\.idx\.b32\s+%r\d+, (%r\d+), 0, 31, -1;", ptx)
    assert reads and set(reads) == {warp}
    assert len(reads) == gpu.count("gpu.wgmma ")
    # sm_80's mma.sync has no descriptors: no read back
    assert "shfl.sync.idx" not in attn_fwd.compile(signature("f16", 128, 64, 128), arch="sm_80", num_warps=8).asm["ptx"]
