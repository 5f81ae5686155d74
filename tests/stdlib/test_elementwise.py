"""gelu, silu_and_mul / swiglu, add / mul and rope on the interpreter against float64 numpy,
and their kernels compiled to PTX."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import importlib

from tilec.stdlib_kernels import BF16Array
from tilec.stdlib_kernels._common import launch

E = importlib.import_module("tilec.stdlib_kernels.elementwise")

DTYPES = ["f32", "f16", "bf16"]
RTOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}
_erf = np.vectorize(math.erf)


def host(values, dtype):
    if dtype == "bf16":
        return BF16Array(values)
    return np.asarray(values, dtype={"f32": np.float32, "f16": np.float16}[dtype])


def f64(a):
    return np.asarray(np.asarray(a), dtype=np.float64)


def close(got, want, dtype, atol=None):
    np.testing.assert_allclose(f64(got), want, rtol=RTOL[dtype], atol=RTOL[dtype] if atol is None else atol)


# extents: 1, primes, one past a tile
SHAPES = st.sampled_from([(1,), (7,), (4097,), (3, 1), (5, 13), (2, 3, 31), (1, 257)])


@settings(max_examples=12, deadline=None)
@given(shape=SHAPES, dtype=st.sampled_from(DTYPES), approx=st.sampled_from(["none", "tanh"]),
       scale=st.sampled_from([1.0, 8.0]), seed=st.integers(0, 2 ** 16))
def test_gelu(shape, dtype, approx, scale, seed):
    x = host(scale * np.random.default_rng(seed).standard_normal(shape), dtype)
    v = f64(x)
    if approx == "tanh":
        want = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    else:
        want = 0.5 * v * (1 + _erf(v / math.sqrt(2)))
    close(E.gelu(x, approximate=approx), want, dtype)


_erfc = np.vectorize(math.erfc)


def _gelu64(v):
    # erfc keeps relative accuracy in the negative tail, where 1 + erf cancels
    return 0.5 * v * _erfc(-v / math.sqrt(2))


def test_gelu_narrow_fit_error_bound():
    # The 2-byte path's Phi (tc.exp2 of a degree-7 tail fit) run with an f32 result, so the
    # fit's own error shows: relative 3.5e-5 of gelu for abs(x) <= 8 (4% of an f16 ulp),
    # and abs error below 5e-15 past it, where Phi(-abs(x)) is all that is left.
    v = np.concatenate([np.linspace(-8, 8, 16001), [-8.5, -9.0, -12.0, -40.0, -1e4, 9.0, 1e4]])
    x = v.astype(np.float32).reshape(1, -1)
    out = np.empty_like(x)
    launch(E.gelu_kernel, (1,), [x, out, 1, x.shape[1], x.shape[1], x.shape[1]], APPROX="none", BR=1,
             BC=32768, WIDE=False, NARROW=True)
    want = _gelu64(x.astype(np.float64))
    got = out.astype(np.float64)
    inner = np.abs(x) <= 8
    # gelu(x) = x * Phi(x): relative error of Phi, with the exp2 argument's f32 rounding
    np.testing.assert_allclose(got[inner], want[inner], rtol=4e-5, atol=1e-30)
    assert np.all(np.abs(got[~inner] - want[~inner]) <= np.maximum(5e-15, 4e-5 * np.abs(want[~inner])))
    assert np.array_equal(got[0, -2:], [9.0, 1e4])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gelu_two_byte_outputs_round_like_float64(dtype):
    # Every f16 / bf16 result of the narrow path is the float64 gelu rounded to the output
    # dtype, or a neighbour of it when that value sits within the fit's error of a tie.
    v = np.linspace(-10, 10, 4099)
    x = host(v, dtype)
    got = f64(E.gelu(x))
    want = _gelu64(f64(x))
    ulp = np.spacing(np.abs(f64(host(want, dtype))).astype(np.float16 if dtype == "f16" else np.float32))
    if dtype == "bf16":
        ulp = ulp * 2.0 ** 16
    close(got, want, dtype)
    assert np.all(np.abs(got - want) <= 0.5 * ulp.astype(np.float64) + 4e-5 * np.abs(want) + 6e-8)


@settings(max_examples=10, deadline=None)
@given(shape=st.sampled_from([(1, 2), (3, 14), (2, 5, 258)]), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2 ** 16))
def test_silu_and_mul_and_swiglu(shape, dtype, seed):
    x = host(3 * np.random.default_rng(seed).standard_normal(shape), dtype)
    v = f64(x)
    d = shape[-1] // 2
    g, u = v[..., :d], v[..., d:]
    want = g / (1 + np.exp(-g)) * u
    close(E.silu_and_mul(x), want, dtype, atol=4 * RTOL[dtype])
    gate, up = host(g, dtype), host(u, dtype)
    close(E.swiglu(gate, up), want, dtype, atol=4 * RTOL[dtype])


def test_elementwise_strided_rows_and_out():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((6, 40)).astype(np.float32)
    x = base[:, 3:33]  # strided rows, last stride 1
    out = np.zeros((6, 64), np.float32)[:, :30]
    r = E.gelu(x, out=out)
    assert r is out
    close(out, 0.5 * f64(x) * (1 + _erf(f64(x) / math.sqrt(2))), "f32")
    with pytest.raises(ValueError, match="contiguous"):
        E.gelu(base[:, ::2])
    with pytest.raises(ValueError, match="approximate"):
        E.gelu(base, approximate="fast")
    with pytest.raises(ValueError, match="even"):
        E.silu_and_mul(base[:, :7])
    with pytest.raises(TypeError, match="dtype"):
        E.gelu(np.zeros(4, np.int32))


@pytest.mark.parametrize("sa, sb", [((4, 3, 5), (4, 1, 5)), ((7, 33), (33,)), ((7, 1), (1, 9)), ((1,), (1,)),
                                    ((2, 3, 4, 5), (5,)), ((3, 1, 17), (1, 4, 1))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_mul_broadcast(sa, sb, dtype):
    rng = np.random.default_rng(2)
    a, b = host(rng.standard_normal(sa), dtype), host(rng.standard_normal(sb), dtype)
    close(E.add(a, b), f64(a) + f64(b), dtype)
    close(E.mul(a, b), f64(a) * f64(b), dtype)


def test_add_promotes_and_rejects():
    a = np.ones((3, 4), np.float16)
    b = np.full((4,), 0.5, np.float32)
    r = E.add(a, b)
    assert r.dtype == np.float32 and np.all(r == 1.5)
    with pytest.raises(ValueError):
        E.add(np.ones((3, 4), np.float32), np.ones((5,), np.float32))
    # four dimensions left after merging: a clear error, not a wrong answer
    with pytest.raises(ValueError, match="at most 3"):
        E.add(np.ones((2, 1, 2, 1), np.float32), np.ones((1, 3, 1, 3), np.float32))


def _rope_ref(x, c, s, interleaved, seq_dim):
    shape = [1] * x.ndim
    shape[seq_dim], shape[-1] = c.shape[0], c.shape[1]
    c, s = c.reshape(shape), s.reshape(shape)
    if interleaved:
        e, o = x[..., 0::2], x[..., 1::2]
        return np.stack([e * c - o * s, o * c + e * s], -1).reshape(x.shape)
    h = x.shape[-1] // 2
    return np.concatenate([x[..., :h] * c - x[..., h:] * s, x[..., h:] * c + x[..., :h] * s], -1)


@pytest.mark.parametrize("shape, seq_dim", [((2, 5, 3, 12), None), ((7, 8), None), ((2, 3, 5, 34), -2),
                                            ((1, 3, 1, 2), None)])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope(shape, seq_dim, interleaved, dtype):
    rng = np.random.default_rng(3)
    sd = (-3 if len(shape) >= 3 else -2) if seq_dim is None else seq_dim
    seq, half = shape[sd], shape[-1] // 2
    ang = rng.uniform(-4, 4, (seq, half))
    x = host(rng.standard_normal(shape), dtype)
    c, s = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    got = E.rope(x, c, s, interleaved=interleaved, seq_dim=seq_dim)
    close(got, _rope_ref(f64(x), f64(c), f64(s), interleaved, sd), dtype, atol=2 * RTOL[dtype])


def test_rope_errors():
    x = np.zeros((4, 6), np.float32)
    with pytest.raises(ValueError, match="expected shape"):
        E.rope(x, np.zeros((4, 2), np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="even"):
        E.rope(np.zeros((4, 5), np.float32), np.zeros((4, 2), np.float32), np.zeros((4, 2), np.float32))


def _compile_all(module):
    for name, sig in module.SIGNATURES.items():
        for arch in ("sm_80", "sm_90a"):
            c = getattr(module, name).compile(sig, arch=arch)
            assert c.metadata["ptxas"]["spill_stores"] == 0, (name, arch)
            yield name, arch, c.asm["ptx"]


@pytest.mark.slow
def test_elementwise_kernels_assemble_with_16_byte_accesses():
    for name, _arch, ptx in _compile_all(E):
        if name in ("gelu_kernel", "silu_mul_kernel", "binary_kernel"):
            assert re.search(r"ld\.global(\.nc)?\.v4", ptx) and "st.global.v4" in ptx, name


def test_single_rows_take_flat_tiles():
    from tilec.stdlib_kernels._rows import FLAT_PER_THREAD, FLAT_TILE_ELEMS, tile_config
    cfg = tile_config(1, 10 ** 6)
    assert cfg.flat and (cfg.rows, cfg.cols, cfg.num_warps) == (1, FLAT_TILE_ELEMS, FLAT_TILE_ELEMS // 256)
    assert FLAT_PER_THREAD == 8                                 # 8 elements per thread
    assert not tile_config(64, 1024).flat
    assert tile_config(1, 100).cols == 128   # short rows: next_pow2 of the row


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_launches_cover_ragged_lengths(dtype):
    # Contiguous same-shape operands are one row: tiles of 2048 and a ragged last one.
    rng = np.random.default_rng(5)
    a, b = (host(rng.standard_normal((3, 2741)), dtype) for _ in range(2))
    close(E.mul(a, b), f64(a) * f64(b), dtype)
    close(E.add(a, b), f64(a) + f64(b), dtype)
    close(E.swiglu(a, b), f64(a) / (1 + np.exp(-f64(a))) * f64(b), dtype, atol=1e-2)


def test_flat_kernels_index_without_division():
    # The flat form's tile is the program id: no i32 division (about 60 instructions of
    # sm_90a SASS before the first load otherwise), which the broadcast form keeps.
    def ptx(name):
        return getattr(E, name).compile(E.SIGNATURES[name], arch="sm_90a").asm["ptx"]
    for name in ("gelu_kernel", "binary_kernel_flat"):
        assert not re.search(r"\b(div|rem)\.s32", ptx(name)), name
    assert re.search(r"\b(div|rem)\.s32", ptx("binary_kernel"))
