"""Kernels whose tiles meet in one layout group in ways the fuzzer found broken, on both
backends against float64 numpy (tests/fuzz/regressions/compile-95daf0109a.json and
compile-5004bf4139.json are the fuzzer's programs):

- two dots whose accumulators are one value (the zeros of `tc.dot(a, b)`, one constant
  after CSE), one tile taking wgmma on sm_90a and the other not (BK = 16), chained as in
  attention; and two dots of which one takes no tensor core (K = 8 for f16);
- a cat whose halves sit in different layouts (one converted), and a cat of a reduction
  that is converted to its group's layout.

On the GPU each runs for the device's arch (sm_90a on a Hopper: the mixed wgmma case).
The compile tests here check what the compiler chose for sm_90a without a GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc


@tc.kernel
def chain_kernel(A, B, V, out, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr, D: tc.constexpr):
    pid0 = tc.program_id(0)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in tc.range(0, tc.cdiv(A.shape[1], BK), num_stages=3):
        acc += tc.dot(tc.load(A, index=(pid0, k), shape=(BM, BK)), tc.load(B, index=(k, 0), shape=(BK, BN)))
    p = tc.exp(acc - tc.max(acc, axis=1, keep_dims=True))
    pv = tc.dot(p.astype(tc.float16), tc.load(V, index=(0, 0), shape=(BN, D)))
    tc.store(out, index=(pid0, 0), tile=pv)


@tc.kernel
def two_dots_kernel(A, B, C, D_, out_s, out_t, BM: tc.constexpr, BN: tc.constexpr):
    pid0 = tc.program_id(0)
    s = tc.dot(tc.load(A, index=(pid0, 0), shape=(BM, 8)), tc.load(B, index=(0, 0), shape=(8, BN)))
    t = tc.dot(tc.load(C, index=(pid0, 0), shape=(BM, 16)), tc.load(D_, index=(0, 0), shape=(16, BN)))
    tc.store(out_s, index=(pid0, 0), tile=s)
    tc.store(out_t, index=(pid0, 0), tile=t)


@tc.kernel
def cat_splat_kernel(x, alpha, out, BM: tc.constexpr, BN: tc.constexpr):
    pid0 = tc.program_id(0)
    pid1 = tc.program_id(1)
    rows = pid0 * BM + tc.arange(0, BM)[:, None] - 3
    cols = pid1 * BN + tc.arange(0, BN)[None, :]
    t = tc.load(x.ptr + rows * x.stride(0) + cols * x.stride(1),
                mask=(rows >= 0) & (rows < x.shape[0]) & (cols < x.shape[1]), other=255, eviction_policy="evict_last")
    # a splat half (no anchor of its own) and a loaded half (converted for the cat)
    c = tc.cat(tc.where(t != t, t, alpha + 1.5), tc.fma(alpha, t, 0.5), axis=1)
    tc.store(out, index=(pid0, pid1), tile=tc.expand_dims(tc.min(c, axis=1), 0))


@tc.kernel
def cat_reduce_kernel(x, y, out_sum, out_cat, BM: tc.constexpr, BN: tc.constexpr):
    pid0 = tc.program_id(0)
    r = tc.min(tc.load(x, index=(pid0, 0), shape=(BM, BN)), axis=1)
    l = tc.load(y, index=(pid0,), shape=(BM,))
    tc.store(out_sum, index=(pid0,), tile=r + l)     # joins the reduction's group with the load's
    tc.store(out_cat, index=(pid0,), tile=tc.cat(r, l, axis=0))


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


@pytest.mark.parametrize("num_warps,bm", [(4, 64), (8, 128), (4, 128)])
def test_chained_dots_sharing_a_zero_accumulator(backend, num_warps, bm):
    rng = np.random.default_rng(bm + num_warps)
    m, k, n, d = 2 * bm - 19, 42, 64, 64          # M and K ragged against BM and BK = 16
    a, b, v = _f16(rng, (m, k), 0.25), _f16(rng, (k, n), 0.25), _f16(rng, (n, d))
    out = np.full((m, d), np.nan, np.float32)
    backend.launch(chain_kernel, (tc.cdiv(m, bm),), a, b, v, out, BM=bm, BN=n, BK=16, D=d, num_warps=num_warps)
    s = a.astype(np.float64) @ b.astype(np.float64)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = p @ v.astype(np.float64)
    assert np.isfinite(out).all()
    # P is rounded to f16 (half an ulp of values <= 1), the sums are f32
    np.testing.assert_allclose(out, want, rtol=0, atol=4e-3 * np.abs(want).max())


def test_a_tensor_core_dot_and_an_fma_dot_sharing_a_zero_accumulator(backend):
    rng = np.random.default_rng(5)
    m, n, bm = 150, 32, 64
    a, b, c, d = _f16(rng, (m, 8)), _f16(rng, (8, n)), _f16(rng, (m, 16)), _f16(rng, (16, n))
    out_s, out_t = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
    backend.launch(two_dots_kernel, (tc.cdiv(m, bm),), a, b, c, d, out_s, out_t, BM=bm, BN=n, num_warps=4)
    for got, x, y in ((out_s, a, b), (out_t, c, d)):
        want = x.astype(np.float64) @ y.astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * (np.abs(x).astype(np.float64) @ np.abs(y)).max())


@pytest.mark.parametrize("num_warps", [4, 8])
def test_cat_of_a_splat_and_a_converted_load(backend, num_warps):
    rng = np.random.default_rng(num_warps)
    m, n, bm, bn = 37, 30, 8, 16
    x = rng.integers(0, 256, (m, n), dtype=np.uint8)
    grid = (tc.cdiv(m + 3, bm), tc.cdiv(n, bn))
    out = np.full((grid[0], grid[1] * bm), np.nan, np.float32)   # program (p0, p1): out[p0, p1 * BM:][:BM]
    alpha = 3.0
    backend.launch(cat_splat_kernel, grid, x, alpha, out, BM=bm, BN=bn, num_warps=num_warps)
    padded = np.full((grid[0] * bm, grid[1] * bn), 255.0)         # rows shifted down by 3, `other` = 255
    padded[3:3 + m, :n] = x
    # alpha * u8 + 0.5 is exact in f32, min is exact: bit for bit
    tiles = (alpha * padded + 0.5).reshape(grid[0] * bm, grid[1], bn).min(axis=2)  # (row, p1)
    want = np.minimum(alpha + 1.5, tiles).reshape(grid[0], bm, grid[1]).transpose(0, 2, 1).reshape(out.shape)
    np.testing.assert_array_equal(out, want.astype(np.float32))


def test_cat_of_a_converted_reduction(backend):
    rng = np.random.default_rng(2)
    m, bm, bn = 45, 16, 32
    x = rng.standard_normal((m, bn)).astype(np.float32)
    y = rng.standard_normal(m).astype(np.float32)
    out_sum = np.full(m, np.nan, np.float32)
    out_cat = np.full(2 * m, np.nan, np.float32)
    grid = (tc.cdiv(m, bm),)
    backend.launch(cat_reduce_kernel, grid, x, y, out_sum, out_cat, BM=bm, BN=bn, num_warps=4)
    r = x.min(axis=1)
    np.testing.assert_array_equal(out_sum, r + y)          # one f32 rounding on both sides
    # program pid stores its 2 * BM elements at pid * 2 * BM: its BM minima, then its BM
    # elements of y (rows past m are padding: not checked)
    want = np.full(2 * m, np.nan, np.float32)
    for pid in range(grid[0]):
        for i in range(bm):
            row, at = pid * bm + i, pid * 2 * bm + i
            if row < m:
                for pos, val in ((at, r[row]), (at + bm, y[row])):
                    if pos < 2 * m:
                        want[pos] = val
    known = ~np.isnan(want)
    assert known.sum() > m
    np.testing.assert_array_equal(out_cat[known], want[known])


# ----------------------------------------------------------------------------- what compiles to what

def _dot_remarks(compiled):
    return [r.message for r in compiled.remarks if r.kind == "dot"]


@pytest.fixture
def verified(monkeypatch):
    # the IR verifier after every pass: it is what caught a wgmma given a K = 16 tile
    monkeypatch.setenv("TILEC_VERIFY", "1")


@pytest.mark.parametrize("num_warps,bm", [(4, 64), (8, 128), (4, 128)])
def test_sm90a_chain_with_a_bk16_dot_is_mma_sync_and_says_why(verified, num_warps, bm):
    sig = "f16[?,?]:strided, f16[?,?]:strided, f16[?,?], f32[?,?]"
    compiled = chain_kernel.compile(sig, BM=bm, BN=64, BK=16, D=64, num_warps=num_warps, arch="sm_90a")
    first, second = _dot_remarks(compiled)
    assert "64x16 f16 lowered to mma.sync" in first and "wgmma needs K a multiple of 64" in first
    assert "64x64 f16 lowered to mma.sync" in second
    assert "not wgmma: its accumulator shares one layout with another dot's" in second
    assert "wgmma.mma_async" not in compiled.asm["ptx"] and "mma.sync" in compiled.asm["ptx"]


def test_sm90a_chain_with_bk64_keeps_wgmma(verified):
    # the policy changes nothing where every dot of the group takes wgmma
    compiled = chain_kernel.compile("f16[?,?], f16[?,?], f16[?,?], f32[?,?]", BM=64, BN=64, BK=64, D=64,
                                    num_warps=4, arch="sm_90a")
    assert all("lowered to wgmma" in m for m in _dot_remarks(compiled)), _dot_remarks(compiled)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_k8_dot_keeps_its_sharing_neighbour_off_tensor_cores(verified, arch):
    compiled = two_dots_kernel.compile("f16[?,?], f16[?,?], f16[?,?], f16[?,?], f32[?,?], f32[?,?]", BM=64, BN=32,
                                       num_warps=4, arch=arch)
    remarks = _dot_remarks(compiled)
    assert len(remarks) == 2 and all("FMA on CUDA cores" in m for m in remarks), remarks


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cats_compile(verified, arch):
    for nw in (4, 8):
        cat_splat_kernel.compile(np.zeros((37, 30), np.uint8), 3.0, np.zeros((5, 16), np.float32), BM=8, BN=16,
                                 num_warps=nw, arch=arch)
    cat_reduce_kernel.compile("f32[?,?], f32[?], f32[?], f32[?]", BM=16, BN=32, num_warps=4, arch=arch)
