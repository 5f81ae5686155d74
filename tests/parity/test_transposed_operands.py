"""A loaded tile that is B of one dot and, transposed, B of another (attention's backward:
dV += Pᵀ dO beside dPᵀ = V dOᵀ; dK += dSᵀ Q beside Sᵀ = K Qᵀ). On sm_90a both wgmmas read
one shared buffer, the second through gpu.wgmma's b_trans (tests/golden/accelerate_dot/
b_and_its_transpose_share_a_buffer.ir), filled by the loop's TMA ring (cp.async without TMA); both backends
against float64 numpy, with ragged rows and key blocks."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilec as tc


@tc.kernel
def b_and_transpose_kernel(A, Bq, X, out_c, out_d, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    pid = tc.program_id(0)
    c = tc.zeros((BM, D), tc.float32)
    d = tc.zeros((BM, BN), tc.float32)
    b = tc.load(Bq, index=(pid, 0), shape=(BM, D), padding=0.0)
    for k in range(tc.cdiv(X.shape[0], BN)):
        x = tc.load(X, index=(k, 0), shape=(BN, D), padding=0.0)
        a = tc.load(A, index=(pid, k), shape=(BM, BN), padding=0.0)
        c = tc.dot(a, x, c)          # B = x: (BN, D), N-major
        d = tc.dot(b, x.T, d)        # B = xᵀ: (D, BN), read from x's buffer
    tc.store(out_c, index=(pid, 0), tile=c)
    tc.store(out_d, index=(pid, 0), tile=d)


@pytest.mark.parametrize("num_warps,bm,d", [(4, 64, 64), (8, 128, 64), (8, 128, 128)])
def test_a_tile_and_its_transpose_as_b(backend, num_warps, bm, d):
    rng = np.random.default_rng(bm + d + num_warps)
    bn = 64
    m, n = 2 * bm - 19, 3 * bn - 5
    a = (rng.standard_normal((m, n)) * 0.25).astype(np.float16)
    b = (rng.standard_normal((m, d)) * 0.25).astype(np.float16)
    x = rng.standard_normal((n, d)).astype(np.float16)
    out_c = np.full((m, d), np.nan, np.float32)
    out_d = np.full((m, bn), np.nan, np.float32)
    backend.launch(b_and_transpose_kernel, (tc.cdiv(m, bm),), a, b, x, out_c, out_d, BM=bm, BN=bn, D=d,
                   num_warps=num_warps)
    x64 = np.zeros((3 * bn, d))
    x64[:n] = x
    want_c = a.astype(np.float64) @ x64[:n]
    want_d = b.astype(np.float64) @ x64.reshape(3, bn, d).sum(axis=0).T     # Σ_k B x_kᵀ
    for got, want in ((out_c, want_c), (out_d, want_d)):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())


@pytest.mark.parametrize("tma", [True, False])
@pytest.mark.parametrize("num_warps,bm,d", [(4, 64, 64), (8, 128, 128)])
def test_the_transpose_reads_the_tiles_own_ring(num_warps, bm, d, tma):
    # what the GPU runs on sm_90a (checked without one): x is copied, as it lies, into one
    # ring (TMA boxes, or cp.async with tma=False) that both wgmmas read, the second with
    # b_trans; no register transpose, no st.shared
    sig = (f"A=f16[?,?]:stride_div=16x1, Bq=f16[?,?]:stride_div=16x1, X=f16[?,?]:stride_div=16x1, "
           f"out_c=f32[?,?]:stride_div=16x1, out_d=f32[?,?]:stride_div=16x1, BM={bm}, BN=64, D={d}")
    c = b_and_transpose_kernel.compile(b_and_transpose_kernel.specialization(sig), arch="sm_90a",
                                       num_warps=num_warps, tma=tma)
    gpu = str(c.asm["gpu"])
    wgmmas = [ln for ln in gpu.splitlines() if "gpu.wgmma %" in ln]
    assert len(wgmmas) == 2 and sum("b_trans = true" in ln for ln in wgmmas) == 1, wgmmas
    assert wgmmas[0].split(",")[1] == wgmmas[1].split(",")[1], wgmmas       # one B buffer (the ring)
    assert "gpu.convert_layout %x" not in gpu and "tile.permute" not in gpu
    if tma:
        assert re.search(r"gpu.tma_load %\d+, %\d+, %\d+, %X, .*\{box = \[64, 64\]\}", gpu) and "gpu.async_copy" not in gpu
    else:
        assert "gpu.async_copy" in gpu and "gpu.tma_load" not in gpu
