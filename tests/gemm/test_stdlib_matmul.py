"""tilec.stdlib_kernels.matmul on the interpreter against numpy, its argument checks, and the
configuration heuristic; the PTX of the default configuration uses mma.sync fed by cp.async."""
import sys

import numpy as np
import pytest

import tilec.stdlib_kernels.matmul  # noqa: F401 - the module, not the function of the same name
from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.stdlib_kernels import BF16Array, F8Array, matmul
from tilec.lowering.target import find_ptxas
import tilec as tc

mm = sys.modules["tilec.stdlib_kernels.matmul"]
rng = np.random.default_rng()


def test_f16_odd_shape_column_major_bias_relu():
    a = rng.standard_normal((37, 45)).astype(np.float16)
    b = rng.standard_normal((45, 29)).astype(np.float16)
    bias = rng.standard_normal(29).astype(np.float32)
    got = matmul(np.asfortranarray(a), b, bias=bias, activation="relu", out_dtype="f32")
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert matmul(a, b).dtype == np.float16


@pytest.mark.parametrize("out_dtype", [None, "f32"])
def test_column_major_a_on_the_interpreter(out_dtype):
    """matmul(x.T, y) (the dW = dYᵀ X of a linear layer), 2-D and batched: A column-major."""
    x = rng.standard_normal((72, 100)).astype(np.float16)
    y = rng.standard_normal((72, 52)).astype(np.float16)
    got = matmul(x.T, y, out_dtype=out_dtype)
    assert got.dtype == (np.float32 if out_dtype else np.float16)
    tol = 1e-5 if out_dtype else 2e-3
    np.testing.assert_allclose(got, x.T.astype(np.float64) @ y, rtol=tol, atol=tol * 30)
    xb = rng.standard_normal((2, 40, 30)).astype(np.float16)
    got = matmul(xb.transpose(0, 2, 1), y[:40], out_dtype="f32")
    np.testing.assert_allclose(got, xb.transpose(0, 2, 1).astype(np.float64) @ y[:40], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_batched_f32_shared_operand(activation):
    a = rng.standard_normal((3, 20, 17)).astype(np.float32)
    b = rng.standard_normal((17, 9)).astype(np.float32)
    got = matmul(a, b, activation=activation)
    r = a.astype(np.float64) @ b
    from math import erf
    want = r / (1 + np.exp(-r)) if activation == "silu" else 0.5 * r * (1 + np.vectorize(erf)(r / np.sqrt(2)))
    assert got.shape == (3, 20, 9)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bf16():
    a, b = BF16Array(rng.standard_normal((18, 40))), BF16Array(rng.standard_normal((40, 7)))
    got = np.asarray(matmul(a, b))
    np.testing.assert_allclose(got, np.asarray(a, np.float64) @ np.asarray(b, np.float64), rtol=1.6e-2, atol=5e-2)


@pytest.mark.parametrize("args,kwargs,err", [
    (((3, 4), (5, 6)), {}, ValueError),
    (((3, 4), (4, 6)), {"activation": "tanh"}, ValueError),
    (((2, 3, 4), (3, 4, 6)), {}, ValueError),
    (((3, 4), (4, 6)), {"out_dtype": "i32"}, TypeError),
])
def test_argument_errors(args, kwargs, err):
    with pytest.raises(err):
        matmul(*(np.zeros(s, np.float16) for s in args), **kwargs)


def test_config_heuristic():
    big = mm.config_for(4096, 4096, 4096, mm.tc.bfloat16)
    assert (big.bm, big.bn, big.bk, big.num_warps) == (128, 256, 32, 8)
    small = mm.config_for(1, 4096, 4096, mm.tc.float16)   # skinny M: wide K steps
    assert (small.bm, small.bn, small.bk) == (16, 64, 128)
    assert mm.config_for(1, 4096, 64, mm.tc.float16).bk == 32
    assert mm.config_for(2048, 2048, 2048, mm.tc.float16).bn == 256   # 128 programs on 132 SMs
    assert mm.config_for(1024, 2048, 2048, mm.tc.float16).bn < 256    # 64 programs would be too few
    mid = mm.config_for(128, 4096, 4096, mm.tc.float16)   # 128x128 tiles would give 32 programs
    assert mid.tiles(128, 4096) * mid.split_k >= 64 and max(mid.bm, mid.bn) <= 128   # split-K (tests/gemm/test_splitk.py)


@pytest.mark.slow
def test_default_config_ptx_uses_mma_and_cp_async():
    sig, cfg = mm.signature(4096, 4096, 4096, "bf16")
    ck = compile_kernel(mm.matmul_kernel, parse_signature(mm.matmul_kernel, sig),
                        CompileOptions(num_warps=cfg.num_warps, num_stages=cfg.num_stages, arch="sm_80"))
    ptx = ck.asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "cp.async.cg.shared.global" in ptx and "ldmatrix" in ptx


def test_column_major_a_on_sm80_is_copied_and_read_transposed():
    """mma.sync: a column-major A is copied as it lies (16-byte cp.async along M) into a buffer
    with M contiguous, which ldmatrix.trans reads; ptxas clean."""
    sig, cfg = mm.signature(4096, 4096, 4096, "bf16", a_col_major=True)
    ck = compile_kernel(mm.matmul_kernel, parse_signature(mm.matmul_kernel, sig),
                        CompileOptions(num_warps=cfg.num_warps, num_stages=cfg.num_stages, arch="sm_80"),
                        use_cache=False)
    gpu, ptx = ck.asm["gpu"], ck.asm["ptx"]
    assert "gpu.local_store" not in gpu and "cp.async.cg.shared.global" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" not in ptx   # A and B both M-/N-contiguous
    if find_ptxas():
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == rep["spill_loads"] == 0 and not rep["warnings"], rep


def test_sm90_configs():
    short = mm.config_for(1024, 1024, 1024, mm.tc.bfloat16, target="sm_90a")
    assert (short.bm, short.bn, short.bk) == (64, 64, 64)     # wgmma
    big = mm.config_for(2048, 2048, 2048, mm.tc.bfloat16, target="sm_90a")
    assert (big.bm, big.bn, big.bk, big.num_stages) == (128, 256, 64, 4)
    skinny = mm.config_for(16, 4096, 14336, mm.tc.bfloat16, target="sm_90a")
    assert (skinny.bm, skinny.bn, skinny.bk, skinny.num_stages) == (16, 64, 128, 4)   # mma.sync


def test_persistent_config_grid_and_kernel():
    cfg = mm.MatmulConfig(64, 64, 32, 4, 3, persistent=True, sm_count=132)
    assert cfg.grid(1024, 1024) == (132,) and cfg.kernel is mm.matmul_persistent_kernel
    assert cfg.grid(100, 100) == (4,)       # never more programs than tiles
    assert mm.MatmulConfig(64, 64, 32, 4, 3).kernel is mm.matmul_kernel


@pytest.mark.parametrize("sm_count", [1, 3, 64])
def test_persistent_kernel_on_interpreter(sm_count):
    # every tile is computed once whatever the grid: fewer programs than tiles, or more
    a = rng.standard_normal((70, 40)).astype(np.float16)
    b = rng.standard_normal((40, 50)).astype(np.float16)
    cfg = mm.MatmulConfig(16, 16, 16, 4, 2, persistent=True, sm_count=sm_count)
    got = matmul(a, b, bias=np.ones(50, np.float32), out_dtype="f32", config=cfg)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b + 1, rtol=1e-5, atol=1e-3)


def test_config_must_be_a_matmul_config():
    with pytest.raises(TypeError, match="MatmulConfig"):
        matmul(np.zeros((4, 4), np.float16), np.zeros((4, 4), np.float16), config=(64, 64))


@pytest.mark.slow
def test_persistent_kernel_ptx_keeps_the_tma_ring_in_the_tile_loop():
    cfg = mm.MatmulConfig(128, 256, 64, 8, 4, persistent=True)
    sig, cfg = mm.signature(4096, 4096, 4096, "bf16", target="sm_90a", config=cfg)
    ck = compile_kernel(cfg.kernel, parse_signature(cfg.kernel, sig),
                        CompileOptions(num_warps=cfg.num_warps, num_stages=cfg.num_stages, arch="sm_90a"))
    ptx, r = ck.asm["ptx"], ck.metadata["ptxas"]
    assert "cp.async.bulk.tensor.2d" in ptx and "wgmma.mma_async" in ptx and "%nctaid.x" in ptx
    assert r["spill_stores"] == r["spill_loads"] == 0 and not r["warnings"]


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_f8_matmul_with_scales_on_the_interpreter(dtype):
    """f8 operands (F8Array: f32 holders of f8 values) times per-tensor scales, against numpy."""
    rng = np.random.default_rng(3)
    d = tc.dtypes.DType.get(dtype)
    a, b = F8Array(rng.standard_normal((37, 70)) * 4, d), F8Array(rng.standard_normal((70, 45)), d)
    want = 0.25 * 3.0 * (np.asarray(a, np.float64) @ np.asarray(b, np.float64))
    got = matmul(a, b, scale_a=0.25, scale_b=np.array([3.0], np.float32), out_dtype="f32")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    bf = matmul(a, b, scale_a=0.25, scale_b=3.0)   # bf16 by default
    assert isinstance(bf, BF16Array) and not isinstance(bf, F8Array)
    np.testing.assert_allclose(np.asarray(bf), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def test_scale_errors():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(TypeError, match="scale_a must be a number or a one-element array"):
        matmul(a, a, scale_a=np.ones(2, np.float32))
    with pytest.raises(TypeError, match="F8Array holds"):
        F8Array(a, tc.float16)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,bk,instr", [("f32", 32, "m64n256k8.f32.tf32.tf32"),
                                            ("f8e4m3", 128, "m64n256k32.f32.e4m3.e4m3")])
def test_stdlib_tf32_and_f8_gemm_on_wgmma(dtype, bk, instr):
    """4096^3 with B column-major (K-major, what wgmma takes for tf32/f8): 128 x 256 tiles,
    one 128-byte row of K per stage, ptxas clean."""
    sig, cfg = mm.signature(4096, 4096, 4096, dtype, allow_tf32=True, target="sm_90a", scaled=dtype != "f32",
                            b_col_major=True)
    assert (cfg.bm, cfg.bn, cfg.bk, cfg.num_warps) == (128, 256, bk, 8)
    ck = compile_kernel(mm.matmul_kernel, parse_signature(mm.matmul_kernel, sig),
                        CompileOptions(arch="sm_90a", num_warps=cfg.num_warps, num_stages=cfg.num_stages).validated(),
                        use_cache=False)
    ptx = ck.asm["ptx"]
    assert f"wgmma.mma_async.sync.aligned.{instr}" in ptx and "mma.sync" not in ptx
    if find_ptxas():
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == 0 and not rep["warnings"], rep
