"""wgmma with fewer than 64 columns per warp column (marker gpu): `a @ b.T` of row-major a and b
(B K-major: m64n16k16 and m64n32k16, one or two warpgroups along N) and attention at 8 warps with
64 x 64 blocks (S = Q Kᵀ split over the two warpgroups, 32 keys each), f16 and bf16, on
fresh random inputs, sizes that are not multiples of the blocks, against float64 numpy.
A wrong descriptor field, warp-column stride or accumulator register shows here, not on the
CPU (tests/gemm/test_wgmma.py simulates the same descriptors against the PTX ISA's layouts;
test_wgmma_ptx.py checks that each shape below compiles to the instruction it names)."""
import numpy as np
import pytest

import tilec as tc

from chain_kernels import attention
from needs import needs
from nt_kernels import dot_nt, dot_nt_once

pytestmark = pytest.mark.gpu

ml_dtypes = needs("ml_dtypes")

DTYPES = {"f16": (tc.float16, np.float16), "bf16": (tc.bfloat16, ml_dtypes.bfloat16)}
# the products are exact in f32, the sums round: relative to the largest magnitude
TOL = {"f16": 1e-4, "bf16": 1e-4}
ATT_TOL = {"f16": 4e-3, "bf16": 3e-2}   # P (in [0, 1]) rounded to the operand type
# (num_warps, BM, BN, instruction N): as test_wgmma_ptx.NARROW
NARROW = [(4, 64, 16, 16), (4, 64, 32, 32), (4, 64, 64, 64), (8, 64, 32, 16), (8, 64, 64, 32), (8, 64, 128, 64),
          (8, 128, 32, 32), (8, 128, 16, 16), (8, 128, 64, 64)]


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))


def _rounded(rng, shape, dtype, scale=1.0):
    """Random values already representable in `dtype` (so the reference sees the same inputs)."""
    return (rng.standard_normal(shape) * scale).astype(DTYPES[dtype][1]).astype(np.float32)


def _launch(kernel, grid, arrays, **kw):
    dev = [tc.from_numpy(a, dtype=d) for a, d in arrays]
    kernel[grid](*dev, **kw)
    tc.synchronize()
    return [d.to_numpy() for d in dev]


def _check(got, want, tol):
    got = np.asarray(got).astype(np.float64)
    assert np.isfinite(got).all()
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err.max() <= tol * np.abs(want).max(), (err.max(), worst, got[worst], want[worst])


def _ints(rng, shape, dtype):
    """Small integers: every product and sum is exact in f32, so any misplaced element shows."""
    return rng.integers(-4, 5, shape).astype(DTYPES[dtype][1]).astype(np.float32)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("num_warps,bm,bn,instr", NARROW)
def test_dot_nt_once(dtype, num_warps, bm, bn, instr):
    """All of K (100 of a 128-wide tile: two 64-element column blocks of K, the second part
    padding) in one tile; M and N not multiples of the blocks."""
    rng = np.random.default_rng(bm * 1000 + bn * 10 + num_warps)
    m, n, k = 3 * bm - 7, 5 * bn - 3, 100
    a, b = _ints(rng, (m, k), dtype), _ints(rng, (n, k), dtype)
    c = np.full((m, n), np.nan, np.float32)
    tdt = DTYPES[dtype][0]
    out = _launch(dot_nt_once, (tc.cdiv(m, bm), tc.cdiv(n, bn)), [(a, tdt), (b, tdt), (c, tc.float32)],
                  BM=bm, BN=bn, BK=128, num_warps=num_warps)[2]
    np.testing.assert_array_equal(out, (a.astype(np.float64) @ b.astype(np.float64).T) * 0.5 + 1.0)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("num_stages", [2, 3])
@pytest.mark.parametrize("num_warps,bm,bn,instr", NARROW)
def test_dot_nt_loop(dtype, num_stages, num_warps, bm, bn, instr):
    """K in 64-wide steps through the cp.async ring (B's K-major buffer in slots), K not a
    multiple of the step; random normal inputs."""
    rng = np.random.default_rng(bm * 1000 + bn * 10 + num_warps + num_stages)
    m, n, k = 2 * bm + 5, 3 * bn + 1, 64 * 5 + 24
    a, b = _rounded(rng, (m, k), dtype), _rounded(rng, (n, k), dtype)
    c = np.full((m, n), np.nan, np.float32)
    tdt = DTYPES[dtype][0]
    out = _launch(dot_nt, (tc.cdiv(m, bm), tc.cdiv(n, bn)), [(a, tdt), (b, tdt), (c, tc.float32)],
                  BM=bm, BN=bn, BK=64, num_warps=num_warps, num_stages=num_stages)[2]
    _check(out, a.astype(np.float64) @ b.astype(np.float64).T, TOL[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("d,head", [(128, 128), (128, 96), (64, 64)])
@pytest.mark.parametrize("n_q,n_kv", [(300, 517), (64, 64), (129, 1000)])
def test_attention_8_warps_64_blocks(dtype, d, head, n_q, n_kv):
    """softmax(Q Kᵀ) V with BM = BN = 64 at 8 warps: at head dim 128, S on m64n32k16 (32 keys
    a warpgroup) and P V on m64n64k16, P through shared memory; at 64 both dots share one
    zero accumulator and stay on mma.sync (the reference point)."""
    rng = np.random.default_rng(n_q * 7 + n_kv + d)
    q, k, v = (_rounded(rng, (n, head), dtype) for n in (n_q, n_kv, n_kv))
    o = np.full((n_q, head), np.nan, np.float32)
    tdt = DTYPES[dtype][0]
    scale = head ** -0.5
    out = _launch(attention, (tc.cdiv(n_q, 64),), [(q, tdt), (k, tdt), (v, tdt), (o, tdt)],
                  scale=scale, BM=64, BN=64, D=d, num_warps=8)[3]
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    _check(out, (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64), ATT_TOL[dtype])
