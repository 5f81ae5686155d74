"""Chained dots on the GPU (marker gpu): attention (dot -> online softmax with exp2 -> dot) and
dot -> exp -> dot, f16 and bf16, sizes that are not multiples of the blocks, against float64
numpy. Each runs for the device's own arch (wgmma with P as a register A operand on a
Hopper) and, through the PTX JIT, for sm_80 (mma.sync on P's C fragments)."""
import numpy as np
import pytest

import tilec as tc

from chain_kernels import attention, dot_exp_dot, dot_exp_dot_t
from needs import needs

pytestmark = pytest.mark.gpu

ml_dtypes = needs("ml_dtypes")

DTYPES = {"f16": (tc.float16, np.float16), "bf16": (tc.bfloat16, ml_dtypes.bfloat16)}
# relative to the output's largest magnitude: P (in [0, 1]) and the inputs are rounded to the
# operand type, the accumulation is f32
TOL = {"f16": 4e-3, "bf16": 3e-2}
ARCHS = [None, "sm_80"]   # None: the device's own


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))


def _rounded(rng, shape, dtype, scale=1.0):
    """Random values already representable in `dtype` (so the reference sees the same inputs)."""
    return (rng.standard_normal(shape) * scale).astype(DTYPES[dtype][1]).astype(np.float32)


def _launch(kernel, grid, arrays, arch, **kw):
    dev = [tc.from_numpy(a, dtype=d) for a, d in arrays]
    kernel[grid](*dev, **kw, **({} if arch is None else {"arch": arch}))
    tc.synchronize()
    return [d.to_numpy() for d in dev]


def _check(got, want, dtype):
    got = np.asarray(got).astype(np.float64)
    assert np.isfinite(got).all()
    err = np.abs(got - want).max()
    assert err <= TOL[dtype] * np.abs(want).max(), err


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a or "native")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("num_warps,bm,bn,d,n_q,n_kv,head", [
    (4, 64, 64, 64, 300, 517, 64), (4, 64, 64, 64, 129, 1000, 40),
    (8, 128, 64, 128, 300, 517, 64), (8, 128, 64, 128, 129, 1000, 100),
    (8, 128, 128, 64, 300, 517, 64), (8, 128, 128, 64, 129, 1000, 56)])
def test_attention(arch, dtype, num_warps, bm, bn, d, n_q, n_kv, head):
    """`head` (the data's head dim) at most the block's D: the rest of the block is padding."""
    rng = np.random.default_rng(n_q * 7 + n_kv)
    q, k, v = (_rounded(rng, (n, head), dtype) for n in (n_q, n_kv, n_kv))
    o = np.full((n_q, head), np.nan, np.float32)
    tdt = DTYPES[dtype][0]
    scale = head ** -0.5
    out = _launch(attention, (tc.cdiv(n_q, bm),), [(q, tdt), (k, tdt), (v, tdt), (o, tdt)], arch,
                  scale=scale, BM=bm, BN=bn, D=d, num_warps=num_warps)[3]
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    _check(out, (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64), dtype)


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a or "native")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("num_warps,bm", [(4, 64), (8, 128)])
def test_dot_exp_dot(arch, dtype, num_warps, bm):
    rng = np.random.default_rng(11)
    m, n, d = 3 * bm - 5, 50, 60        # n, d below the blocks: padded columns and rows
    x = _rounded(rng, (m, d), dtype, 0.25)
    w = _rounded(rng, (d, n), dtype, 0.25)
    v = _rounded(rng, (n, d), dtype)
    o = np.full((m, d), np.nan, np.float32)
    tdt = DTYPES[dtype][0]
    out = _launch(dot_exp_dot, (tc.cdiv(m, bm),), [(x, tdt), (w, tdt), (v, tdt), (o, tc.float32)], arch,
                  BM=bm, BN=64, D=64, num_warps=num_warps)[3]
    p = np.exp(x.astype(np.float64) @ w.astype(np.float64) - 1.0)
    _check(out, p @ v.astype(np.float64), dtype)


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a or "native")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_transposed_accumulator_as_a(arch, dtype):
    """dot(P.T, V): on sm_90a P goes into an M-major A buffer as the first dot left it."""
    rng = np.random.default_rng(12)
    m, n, d = 60, 3 * 64 - 7, 50       # below and across the blocks: padded rows and columns
    x = _rounded(rng, (m, d), dtype, 0.25)
    w = _rounded(rng, (d, n), dtype, 0.25)
    v = _rounded(rng, (m, d), dtype)
    o = np.full((n, d), np.nan, np.float32)
    tdt = DTYPES[dtype][0]
    out = _launch(dot_exp_dot_t, (tc.cdiv(n, 64),), [(x, tdt), (w, tdt), (v, tdt), (o, tc.float32)], arch,
                  BM=64, BN=64, D=64, num_warps=4)[3]
    p = np.exp(x.astype(np.float64) @ w.astype(np.float64) - 1.0)
    _check(out, p.T @ v.astype(np.float64), dtype)


@pytest.mark.parametrize("causal,seq", [(False, 777), (True, 1500), (False, 1100)])
def test_the_attention_example_at_its_tilings(causal, seq):
    """examples/flash_attention.py at head dim 128 with blocks_for's tiles for the device: the
    short sequences' 64-row tiles over one warpgroup (777; causal 1500) and the 128-row ones
    (1100, past the non-causal limit), rows and keys not multiples of either block."""
    from example_modules import load_example
    ex = load_example("flash_attention")
    rng = np.random.default_rng(seq)
    zh, d = 3, 128
    q, k, v = (_rounded(rng, (zh, seq, d), "f16") for _ in range(3))
    bm, bn, warps = ex.blocks_for(d, tc.Target.current(), seq=seq, causal=causal)
    o = np.full(q.shape, np.nan, np.float32)
    lse = np.zeros((zh, seq), np.float32)
    out = _launch(ex.attention_fwd, (tc.cdiv(seq, bm), zh),
                  [(q, tc.float16), (k, tc.float16), (v, tc.float16), (o, tc.float16), (lse, tc.float32)], None,
                  scale=d ** -0.5, CAUSAL=causal, BM=bm, BN=bn, D=d, num_warps=warps, fast_math=True)[3]
    _check(out, ex.reference(q, k, v, d ** -0.5, causal), "f16")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d,seq,bm,bn,warps,pingpong", [
    (128, 1500, 128, 128, 8, False), (64, 777, 128, 128, 8, False), (128, 1500, 128, 64, 8, True),
    (64, 777, 128, 64, 8, True), (128, 64, 128, 64, 8, True), (64, 200, 128, 128, 8, False),
    (128, 999, 64, 64, 4, False)])
def test_the_attention_example_warp_specialized(dtype, causal, d, seq, bm, bn, warps, pingpong):
    """examples/flash_attention.py with warp_specialize=True on sm_90a: a producer warpgroup
    fills one K/V ring for both key loops (unmasked and masked), two consumer warpgroups (8
    warps), with and without turns at the tensor cores (pingpong); rows and keys not multiples
    of the blocks, one block only, and one consumer warpgroup (4 warps)."""
    if tc.Target.current().arch != "sm_90a":
        pytest.skip("warp specialization needs sm_90a")
    from example_modules import load_example
    ex = load_example("flash_attention")
    rng = np.random.default_rng(seq + d)
    zh = 3
    tdt = DTYPES[dtype][0]
    q, k, v = (_rounded(rng, (zh, seq, d), dtype) for _ in range(3))
    o = np.full(q.shape, np.nan, np.float32)
    lse = np.zeros((zh, seq), np.float32)
    opts = dict(scale=d ** -0.5, CAUSAL=causal, BM=bm, BN=bn, D=d, num_warps=warps, fast_math=True,
                warp_specialize=True, pingpong=pingpong)
    out, got_lse = _launch(ex.attention_fwd, (tc.cdiv(seq, bm), zh),
                           [(q, tdt), (k, tdt), (v, tdt), (o, tdt), (lse, tc.float32)], None, **opts)[3:]
    _check(out, ex.reference(q, k, v, d ** -0.5, causal), dtype)
    s = np.einsum("zqd,zkd->zqk", q.astype(np.float64), k.astype(np.float64)) * (d ** -0.5 * ex.LOG2E)
    if causal:
        s = np.where(np.arange(seq)[None, :] <= np.arange(seq)[:, None], s, -np.inf)
    want_lse = np.log2(np.exp2(s - s.max(axis=2, keepdims=True)).sum(axis=2)) + s.max(axis=2)
    assert np.abs(got_lse - want_lse).max() <= 1e-2 * max(1.0, np.abs(want_lse).max())
    dev = [tc.from_numpy(a, dtype=t) for a, t in ((q, tdt), (k, tdt), (v, tdt), (o, tdt), (lse, tc.float32))]
    assert ex.attention_fwd.compile(*dev, **opts).metadata["warp_specialized"]
