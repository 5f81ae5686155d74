"""f8 dots and f8 conversions on the GPU (marker gpu), against the interpreter's numerics and
float64 numpy. Each runs for the device's own arch and, through the PTX JIT, for sm_80 and
sm_89: so a Hopper runs wgmma (the tiles sm_90a takes), the f16 mma.sync route with e4m3
widened by cvt (sm_90a) or by integer operations (sm_80, sm_89), and the FMA route."""
import numpy as np
import pytest

import tilec as tc
from tilec.interpreter import numerics

from gemm_kernels import dot_by_constant, matmul, matmul_cast
from needs import needs

pytestmark = pytest.mark.gpu

ml_dtypes = needs("ml_dtypes")

F8 = [tc.float8e4m3, tc.float8e5m2]
SHAPES = [(16, 16, 16), (16, 16, 32), (32, 32, 32), (64, 64, 64), (64, 64, 128), (16, 16, 8), (8, 8, 16)]
ARCHS = [None, "sm_80", "sm_89"]   # None: the device's own


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))


def _ids(v):
    return "x".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _launch(kernel, grid, arrays, arch, **constexprs):
    """Run `kernel` on device copies of `arrays` ((numpy array, tilec dtype or None) pairs);
    returns the device arrays' contents."""
    dev = [tc.from_numpy(a, dtype=d) if d is not None else tc.from_numpy(a) for a, d in arrays]
    opts = {} if arch is None else {"arch": arch}
    kernel[grid](*dev, **constexprs, **opts)
    tc.synchronize()
    return [d.to_numpy() for d in dev]


def _dot(kernel, fmt, shape, a, b, arch):
    m, n = a.shape[0], b.shape[1]
    bm, bn, bk = shape
    operand = fmt if kernel is matmul else None   # matmul_cast reads f32 and converts itself
    extra = {"TF32": False} if kernel is matmul else {"DT": fmt}
    c = np.full((m, n), np.nan, np.float32)
    out = _launch(kernel, (tc.cdiv(m, bm), tc.cdiv(n, bn)), [(a, operand), (b, operand), (c, None)], arch,
                  BM=bm, BN=bn, BK=bk, **extra)
    return out[2].astype(np.float64)


def _on_wgmma(arch, shape) -> bool:
    return arch is None and shape == (64, 64, 128)   # a Hopper's own arch; elsewhere mma.sync or FMA


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a or "device")
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
@pytest.mark.parametrize("fmt", F8, ids=str)
def test_exact_f8_dots(fmt, shape, arch):
    """Small integers (exact in f8, products and sums exact in any accumulator), one tile and
    ragged M, N and K (masked, zero-padded loads): equal to float64."""
    bm, bn, bk = shape
    for m, n, k in ((bm, bn, bk), (2 * bm - 3, bn + 5, 2 * bk + bk // 2 + 3)):
        rng = np.random.default_rng(m + n + k)
        a = rng.integers(-2, 3, (m, k)).astype(np.float32)
        b = rng.integers(-2, 3, (k, n)).astype(np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_array_equal(_dot(matmul, fmt, shape, a, b, arch), want)
        np.testing.assert_array_equal(_dot(matmul_cast, fmt, shape, a, b, arch), want)


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a or "device")
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
@pytest.mark.parametrize("fmt", F8, ids=str)
def test_random_f8_dots(fmt, shape, arch):
    """Random f8 operands, and f32 operands the kernel converts to f8 (which must round as
    the interpreter does), against float64 on the interpreter-rounded inputs."""
    bm, bn, bk = shape
    m, n, k = 2 * bm - 3, bn + 5, 2 * bk + bk // 2 + 3
    rng = np.random.default_rng(k * 7 + len(fmt.name))
    x, y = (rng.standard_normal((m, k)) * 3).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    a, b = numerics.cast(x, fmt).astype(np.float32), numerics.cast(y, fmt).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    # f32 accumulation; f8 wgmma adds with fewer mantissa bits (stdlib GEMM: 1.7e-3 of the
    # largest result measured on an H200 at K = 1000)
    bound = (2.0 ** -9 if _on_wgmma(arch, shape) else k * 2.0 ** -23) * (np.abs(a64) @ np.abs(b64)) + 1e-30
    for kernel, args in ((matmul, (a, b)), (matmul_cast, (x, y))):
        err = np.abs(_dot(kernel, fmt, shape, *args, arch) - want)
        assert np.all(err <= bound), f"{kernel.fn.__name__}: max error {(err / bound).max():.3g} of the bound"


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a or "device")
@pytest.mark.parametrize("fmt", F8, ids=str)
def test_f8_dot_by_a_constant_operand(fmt, arch):
    """B made in its register layout (not staged through shared memory), widened in place."""
    a = np.random.default_rng(4).integers(-2, 3, (32, 32)).astype(np.float32)
    c = np.full((32, 32), np.nan, np.float32)
    _, out = _launch(dot_by_constant, (1,), [(a, None), (c, None)], arch, DT=fmt)
    np.testing.assert_array_equal(out, a.astype(np.float64) @ np.full((32, 32), 1.5))


@tc.kernel
def f8_round_trip(x, q, back, BLOCK: tc.constexpr):
    """q = x.astype(f8), back = q.astype(x's dtype)."""
    pid = tc.program_id(0)
    f = tc.load(x, index=(pid,), shape=(BLOCK,)).astype(q.dtype)
    tc.store(q, index=(pid,), tile=f)
    tc.store(back, index=(pid,), tile=f.astype(back.dtype))


def _same(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))


def _f32_inputs():
    rng = np.random.default_rng(11)
    tiny = np.exp(rng.uniform(-25, 12, 8192 - 64)) * rng.choice([-1, 1], 8192 - 64)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 464.5, 463.9, 480.0, 57344.0, 61440.0,
               61439.0, 2.0 ** -6, 2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -10, 2.0 ** -14, 2.0 ** -16,
               2.0 ** -17, 3 * 2.0 ** -18, 1.0625, 1.1875, 1.125, 1.375, 0.3, 1e30, 5e-3, 7e-3]
    x = np.concatenate([tiny, special, -np.array(special)])
    return np.resize(x, 8192).astype(np.float32)


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a or "device")
@pytest.mark.parametrize("src", ["f32", "f16"])
@pytest.mark.parametrize("fmt", F8, ids=str)
def test_f8_astype_round_trip(fmt, src, arch):
    """astype to f8 (round to nearest even, overflow to inf or NaN, subnormals, ties at the
    overflow threshold) and back, from f32 and from every f16 value, as the interpreter does."""
    x = _f32_inputs() if src == "f32" else np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    q = np.zeros(x.shape, ml_dtypes.float8_e4m3fn if fmt is tc.float8e4m3 else ml_dtypes.float8_e5m2)
    back = np.full(x.shape, np.nan, x.dtype)
    _, q_out, back_out = _launch(f8_round_trip, (x.size // 1024,), [(x, None), (q, None), (back, None)], arch,
                                 BLOCK=1024)
    want = numerics.cast(x, fmt)
    got = numerics.from_bits(np.asarray(q_out).view(np.uint8), fmt)
    bad = ~_same(got, want)
    assert not bad.any(), list(zip(x[bad][:5], got[bad][:5], want[bad][:5]))
    assert _same(back_out, want).all()
