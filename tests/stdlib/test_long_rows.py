"""Norms of rows too long for one tile: the looped kernel's programs walk rows
pid, pid + programs, ... so that the rows in flight fit in L2 (`_common.long_row_launch`)."""
from __future__ import annotations

import numpy as np
import pytest

import tilec.stdlib_kernels as sk
from dataclasses import replace

from tilec.stdlib_kernels import _common, norms
from tilec.target import Target

H100 = Target.from_arch("sm_90a")   # 132 SMs, 50 MB of L2


def test_long_row_launch_holds_one_row_per_sm_when_they_fit_in_l2():
    # 1024 x 65536 bf16: 128 KB rows, 132 of them in flight = 17 MB
    assert _common.long_row_launch(1024, 65536, 2, H100) == (132, 16384, 16)
    assert _common.long_row_launch(1024, 32768, 4, H100) == (132, 8192, 16)
    assert _common.long_row_launch(40, 65536, 2, H100) == (40, 16384, 16)  # fewer rows than SMs
    # 256 KB f32 rows (33 MB in flight) and longer: one program per row, row_config's tiles
    assert _common.long_row_launch(1024, 65536, 4, H100) == (1024, None, None)
    assert _common.long_row_launch(8, 262144, 2, H100) == (8, None, None)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_programs_walking_several_rows_match_numpy(rowwise, monkeypatch, rms, dtype):
    # 2 SMs: 2 programs for 5 rows, 3 and 2 rows each; sm_80: no clusters, the looped kernel
    monkeypatch.setattr(_common, "HOST_TARGET", replace(Target.from_arch("sm_80"), sm_count=2))
    assert _common.long_row_launch(5, 16400, 2, _common.HOST_TARGET) == (2, 16384, 16)
    # (rms_norm launches one program per row, which walks its row once)
    rng = np.random.default_rng(7)
    n = 16400                                          # two tiles, the second masked
    x = rowwise.host(50 + 3 * rng.standard_normal((5, n)), dtype)
    w = rng.standard_normal(n).astype(np.float32)
    x64 = rowwise.f64(x)
    if rms:
        y, rstd = sk.rms_norm(x, w, eps=1e-6, return_stats=True)
        want_rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + 1e-6)
        want = x64 * want_rstd[:, None] * w
    else:
        b = rng.standard_normal(n).astype(np.float32)
        y, mean, rstd = sk.layer_norm(x, w, b, eps=1e-5, return_stats=True)
        want_rstd = 1.0 / np.sqrt(x64.var(-1) + 1e-5)
        want = (x64 - x64.mean(-1, keepdims=True)) * want_rstd[:, None] * w + b
        np.testing.assert_allclose(mean, x64.mean(-1), rtol=1e-5)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-4)
    rowwise.close(y, want, dtype, scale=4.0)


_V2, _V1 = "[?,?]:div=1x16:stride_div=16x1", "[?]:div=16"


@pytest.mark.slow
@pytest.mark.parametrize("dtype,block", [("bf16", 16384), ("f32", 8192)])
@pytest.mark.parametrize("rms", [False, True])
def test_one_program_per_sm_tiles_assemble_with_16_byte_accesses_and_no_spills(dtype, block, rms):
    flags = "RMS=True, HAS_W=True, HAS_B=False" if rms else "RMS=False, HAS_W=True, HAS_B=True"
    sig = (f"x={dtype}{_V2}, w={dtype}{_V1}, b={dtype}{_V1}, y={dtype}{_V2}, mean_out=f32[?], rstd_out=f32[?], "
           f"eps=f32, {flags}, STATS=True, BLOCK={block}")
    k = norms.norm_loop_kernel
    compiled = k.compile(k.specialization(sig), arch="sm_90a", num_warps=16, fast_math=True)
    ptx = compiled.asm["ptx"]
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and ptxas["spill_loads"] == 0, ptxas


def test_looped_layer_norm_keeps_a_large_mean_s_digits():
    # f32 rows of mean ~100 (and ~-1000) whose spread is near sqrt(eps), three tiles of 8: x - mean
    # must not go through a mean rounded to f32 first (0.1-0.4% off in y)
    import tilec as tc
    rng = np.random.default_rng(3)
    x = np.stack([100 + 0.005 * rng.standard_normal(20), -1000 + 0.01 * rng.standard_normal(20),
                  3 * rng.standard_normal(20)]).astype(np.float32)
    w, b = rng.standard_normal(20).astype(np.float32), rng.standard_normal(20).astype(np.float32)
    y, mean, rstd = np.zeros_like(x), np.zeros(3, np.float32), np.zeros(3, np.float32)
    with tc.interpret():
        norms.norm_loop_kernel[(2,)](x, w, b, y, mean, rstd, 1e-5, RMS=False, HAS_W=True, HAS_B=True, STATS=True,
                                     BLOCK=8)
    x64 = x.astype(np.float64)
    want_rstd = 1.0 / np.sqrt(x64.var(-1) + 1e-5)
    want = (x64 - x64.mean(-1, keepdims=True)) * want_rstd[:, None] * w + b
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-4)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-3)
