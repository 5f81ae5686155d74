"""Split-K in the stdlib GEMM: the partial-product and reduction kernels on the interpreter
against numpy, the heuristic that picks split_k, and the PTX of both kernels."""
import sys

import numpy as np
import pytest

import tilec.stdlib_kernels.matmul  # noqa: F401 - the module, not the function of the same name
import tilec as tc
from tilec.compiler import compile_kernel
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.stdlib_kernels import BF16Array, matmul
from tilec.stdlib_kernels.tuning import tuning_for
from tilec.target import Target

mm = sys.modules["tilec.stdlib_kernels.matmul"]
rng = np.random.default_rng()


def _split(bm=16, bn=16, bk=16, split=3):
    return mm.MatmulConfig(bm, bn, bk, 4, 2, split_k=split)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_odd_shape_against_numpy(dtype):
    # K = 200 is 13 steps of 16: slices of 5, 5, 3 steps, none a multiple of S * BK
    m, n, k = 37, 29, 200
    a64, b64 = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if dtype == "bf16":
        a, b = BF16Array(a64), BF16Array(b64)
    else:
        a, b = a64.astype(dtype.replace("f", "float")), b64.astype(dtype.replace("f", "float"))
    got = matmul(a, b, out_dtype="f32", config=_split())
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_bias_activation_and_cast_in_the_reduction(activation):
    m, n, k = 20, 45, 130
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    got = matmul(a, b, bias=bias, activation=activation, config=_split(split=4))
    assert got.dtype == np.float16
    plain = matmul(a, b, bias=bias, activation=activation, config=mm.MatmulConfig(16, 16, 16, 4, 2))
    # the same f32 sum in another order, one f16 rounding: at most one ulp apart
    np.testing.assert_allclose(got.astype(np.float64), plain.astype(np.float64), rtol=2e-3, atol=2e-3)
    r = a.astype(np.float64) @ b + bias
    from math import erf
    want = {"relu": np.maximum(r, 0), "silu": r / (1 + np.exp(-r)),
            "gelu": 0.5 * r * (1 + np.vectorize(erf)(r / np.sqrt(2)))}[activation]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=5e-3)


def test_reduction_tile_of_many_rows_and_an_odd_split():
    # 7 partials: the reduction takes 64 x 16 tiles (1170 elements would not be a power of two)
    a = rng.standard_normal((70, 120)).astype(np.float32)
    b = rng.standard_normal((120, 10)).astype(np.float32)
    cfg = mm.MatmulConfig(128, 16, 16, 4, 2, split_k=7)
    assert cfg.reduce_tile(70, 10, 7)[:2] == (64, 16)
    np.testing.assert_allclose(matmul(a, b, config=cfg), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_scales_apply_once_after_the_sum():
    a = rng.standard_normal((9, 70)).astype(np.float32)
    b = rng.standard_normal((70, 33)).astype(np.float32)
    got = matmul(a, b, scale_a=0.5, scale_b=3.0, config=_split(split=5))
    np.testing.assert_allclose(got, 1.5 * (a.astype(np.float64) @ b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shared", ["none", "a", "b"])
def test_batched(shared):
    bsz, m, n, k = 3, 18, 21, 100
    a = rng.standard_normal((m, k) if shared == "a" else (bsz, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n) if shared == "b" else (bsz, k, n)).astype(np.float32)
    got = matmul(a, b, config=_split(split=2))
    assert got.shape == (bsz, m, n)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_more_slices_than_steps_and_empty_k():
    a = rng.standard_normal((5, 40)).astype(np.float32)    # 3 steps of 16 for 8 requested slices
    b = rng.standard_normal((40, 7)).astype(np.float32)
    cfg = _split(split=8)
    assert cfg.splits(40) == 3 and cfg.grid(5, 7, 40) == (1, 3)
    np.testing.assert_allclose(matmul(a, b, config=cfg), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    zero = matmul(np.zeros((4, 0), np.float32), np.zeros((0, 6), np.float32), bias=np.ones(6, np.float32),
                  config=cfg)
    np.testing.assert_array_equal(zero, np.ones((4, 6), np.float32))


def test_slices_cover_k_exactly_once():
    # the kernel's slices [s * per, min((s + 1) * per, steps)) over the launched splits
    for steps in range(1, 80):
        for want in range(2, 17):
            cfg = mm.MatmulConfig(16, 16, 16, 4, 2, split_k=want)
            split = cfg.splits(steps * 16)
            per = -(-steps // split)
            covered = [k for s in range(split) for k in range(s * per, min(s * per + per, steps))]
            assert covered == list(range(steps)) and split <= want
            assert (split - 1) * per < steps   # no empty slice is launched


def test_config_errors():
    with pytest.raises(ValueError, match="split_k"):
        mm.MatmulConfig(64, 64, 32, 4, 2, split_k=0)
    with pytest.raises(ValueError, match="persistent"):
        mm.MatmulConfig(64, 64, 32, 4, 2, split_k=2, persistent=True)


@pytest.mark.parametrize("m,n,k,tile,split", [
    (1, 4096, 14336, (16, 64, 128), 4),      # decode: 64 tiles, memory-bound (two programs per SM)
    (16, 4096, 14336, (16, 64, 128), 4),
    (128, 4096, 4096, (128, 128, 64), 4),    # 32 tiles of 128 x 128 instead of 128 of 64 x 64
    (128, 4096, 14336, (128, 128, 64), 4),
    (64, 64, 4096, (64, 64, 64), 4),         # one tile: K // MIN_SLICE_K slices
    (128, 1000, 14336, (128, 128, 64), 14),
    (1024, 2048, 128256, (128, 256, 64), 2),  # a vocabulary-long K (linear_cross_entropy's dhidden):
    (512, 4096, 20000, (128, 256, 64), 2),    # 128 x 256 in slices, not 128 x 64 tiles
])
def test_heuristic_splits_few_tiles_with_long_k(m, n, k, tile, split):
    cfg = mm.config_for(m, n, k, tc.bfloat16, target="sm_90a")
    assert ((cfg.bm, cfg.bn, cfg.bk), cfg.split_k) == (tile, split)
    assert cfg.kernel is mm.matmul_splitk_kernel
    assert cfg.tiles(m, n) * cfg.split_k <= 2 * cfg.sm_count


@pytest.mark.parametrize("m,n,k,batch", [
    (4096, 4096, 4096, 1), (2048, 2048, 2048, 1), (1, 14336, 4096, 1), (128, 14336, 4096, 1),
    (128, 4096, 2048, 1),    # K below MIN_SPLIT_K
    (1, 4096, 4096, 1), (16, 4096, 4096, 1),   # skinny M needs K >= 2 * MIN_SPLIT_K
    (1024, 1024, 1024, 1),
    (128, 4096, 4096, 8),    # the batch fills the SMs
    (1, 20000, 4096, 1),
])
def test_heuristic_keeps_one_slice(m, n, k, batch):
    assert mm.config_for(m, n, k, tc.bfloat16, batch, target="sm_90a").split_k == 1
    assert mm.config_for(m, n, k, tc.float16, batch, target="sm_80").split_k == 1


def test_long_k_split_starts_at_its_tuning_threshold():
    # just below long_k_split the tile halves as before (128 tiles of 128 x 128 leave SMs idle)
    k = tuning_for(Target.of("sm_90a")).matmul.long_k_split
    below = mm.config_for(1024, 2048, k - 64, tc.bfloat16, target="sm_90a")
    assert (below.bm, below.bn, below.split_k) == (128, 64, 1)
    at = mm.config_for(1024, 2048, k, tc.bfloat16, target="sm_90a")
    assert (at.bm, at.bn, at.split_k) == (128, 256, 2)


def test_without_split_k_the_choice_before_it():
    cfg = mm.config_for(128, 4096, 4096, tc.bfloat16, target="sm_90a", allow_split_k=False)
    assert (cfg.bm, cfg.bn, cfg.bk, cfg.split_k) == (64, 64, 64, 1)   # halved until 128 programs
    cfg = mm.config_for(1, 4096, 14336, tc.bfloat16, target="sm_90a", allow_split_k=False)
    assert (cfg.bm, cfg.bn, cfg.bk, cfg.split_k) == (16, 64, 128, 1)


def test_reduce_tile_shrinks_with_the_number_of_partials():
    cfg = mm.MatmulConfig(128, 128, 64, 8, 4, split_k=16)
    assert cfg.reduce_tile(128, 4096, 4) == (16, 128, 4)
    assert cfg.reduce_tile(128, 4096, 16) == (4, 128, 2)
    assert cfg.reduce_tile(1, 4096, 4) == (1, 128, 1)          # no rows beyond M
    assert mm.MatmulConfig(16, 64, 128, 4, 4).reduce_tile(100, 10, 2) == (16, 16, 1)   # nor beyond BM
    for splits in range(1, 17):   # tile shapes are powers of two whatever the number of partials
        for m, n in [(128, 4096), (77, 333), (1, 5)]:
            rows, cols, _ = cfg.reduce_tile(m, n, splits)
            assert rows & (rows - 1) == 0 and cols & (cols - 1) == 0 and rows * cols * splits <= 8192 * 2


def test_true_f32_never_splits():
    assert mm.config_for(1, 4096, 14336, tc.float32, tensor_cores=False).split_k == 1


def test_signature_is_the_partial_kernel():
    sig, cfg = mm.signature(128, 4096, 14336, "bf16", target="sm_90a")
    assert cfg.split_k == 4 and cfg.kernel is mm.matmul_splitk_kernel
    assert "ws=f32[?,?]" in sig and "c=" not in sig
    parse_signature(cfg.kernel, sig)  # names exactly the kernel's parameters
    # a config whose K is one slice long launches (and prints) the plain kernel
    short, cfg1 = mm.signature(64, 64, 32, "bf16", config=mm.MatmulConfig(64, 64, 32, 4, 2, split_k=4))
    assert cfg1.split_k == 1 and "c=bf16" in short and cfg1.kernel is mm.matmul_kernel


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 14336), (128, 4096, 14336), (128, 1000, 14336), (1024, 2048, 128256)])
def test_partial_and_reduce_ptx_assemble_without_spills(arch, m, n, k):
    # (128, 1000, 14336): 8 tiles in 16 slices, the reduction's 16 loads in flight at once
    # sm_80's features on 132 SMs (an A100's 108 would not split M = 1 against 4096 columns)
    sig, cfg = mm.signature(m, n, k, "bf16", target=mm.HOST_GEMM_TARGET if arch == "sm_80" else arch)
    assert cfg.split_k > 1
    ck = compile_kernel(cfg.kernel, parse_signature(cfg.kernel, sig),
                        CompileOptions(arch=arch, num_warps=cfg.num_warps, num_stages=cfg.num_stages), use_cache=False)
    ptx = ck.asm["ptx"]
    wgmma = arch == "sm_90a" and cfg.bm >= 64
    assert ("wgmma.mma_async" in ptx) if wgmma else "mma.sync" in ptx
    assert ("cp.async.bulk.tensor" in ptx) == (wgmma and n * 2 % 16 == 0)   # TMA needs 16-byte rows
    assert "%ctaid.y" in ptx   # the slice index
    rsig, warps, _grid = mm.reduce_signature(m, n, k, cfg, "bf16", activation="gelu", bias_dtype="bf16")
    rk = compile_kernel(mm.splitk_reduce_kernel, parse_signature(mm.splitk_reduce_kernel, rsig),
                        CompileOptions(arch=arch, num_warps=warps), use_cache=False)
    assert "atom" not in rk.asm["ptx"] and "atom" not in ptx   # deterministic: no atomics
    if find_ptxas():
        for rep in (ck.metadata["ptxas"], rk.metadata["ptxas"]):
            assert rep["spill_stores"] == rep["spill_loads"] == 0 and not rep["warnings"], rep
