"""dropout: the mask is Philox of (seed, flat index) exactly, whatever the layout, tiling and dtype."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import importlib

from tilec.stdlib_kernels import BF16Array

D = importlib.import_module("tilec.stdlib_kernels.dropout")  # the package attribute is the function

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from philox_ref import randint4x  # noqa: E402
from needs import needs


def dropout_keep(seed: int, n: int, p: float):
    """The keep mask of dropout.py's module doc, from the numpy Philox: element i reads the
    16-bit half i % 2 of word (i // 2) % 4 of the counter i // 8, against round(p * 2**16)."""
    i = np.arange(n, dtype=np.int64)
    words = np.choose((i // 2) % 4, randint4x(seed, i // 8)).astype(np.uint64)
    half = (words >> (16 * (i % 2)).astype(np.uint64)) & np.uint64(0xFFFF)
    return half >= np.uint64(round(p * 2 ** 16))


def _scale(p):
    kept = 2 ** 16 - round(p * 2 ** 16)
    return 2 ** 16 / kept


@pytest.mark.parametrize("shape", [(1,), (5,), (4099,), (3, 7), (2, 3, 64)])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_dropout_matches_reference_mask(shape, dtype):
    rng = np.random.default_rng(0)
    v = rng.standard_normal(shape) + 3.0  # never zero, so zeros mark dropped elements
    x = BF16Array(v) if dtype == "bf16" else v.astype({"f32": np.float32, "f16": np.float16}[dtype])
    p, seed = 0.3, 987654321
    y = np.asarray(np.asarray(D.dropout(x, p, seed)), dtype=np.float64)
    keep = dropout_keep(seed, int(np.prod(shape)), p).reshape(shape)
    np.testing.assert_array_equal(y != 0, keep)
    xv = np.asarray(np.asarray(x), dtype=np.float64)
    tol = {"f32": 1e-6, "f16": 1e-3, "bf16": 8e-3}[dtype]
    np.testing.assert_allclose(y[keep], xv[keep] * _scale(p), rtol=tol)


@pytest.mark.parametrize("seed", [0, 1, 2 ** 64 - 1])
def test_dropout_seeds_specialized_by_the_launch(seed):
    # 0 and 1 are ints the launch may specialize; 2**64 - 1 is all 64 key bits set.
    x = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32) + 3.0
    keep = dropout_keep(seed, x.size, 0.5).reshape(x.shape)
    np.testing.assert_array_equal(np.asarray(D.dropout(x, 0.5, seed)) != 0, keep)


def test_dropout_is_independent_of_layout_and_tiling():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((9, 40)).astype(np.float32) + 3.0
    strided = base[:, :37]                           # rows of 37: per-element draws
    flat = np.ascontiguousarray(strided).reshape(-1)  # one row: grouped draws
    a = D.dropout(strided, 0.5, 7)
    b = D.dropout(flat, 0.5, 7).reshape(9, 37)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, D.dropout(strided, 0.5, 8))


@pytest.mark.parametrize("cols", [8, 24, 12])
def test_dropout_strided_rows_match_the_flat_mask(cols):
    # Rows of a multiple of 8 take the grouped draws row by row; 12 takes per-element draws.
    base = np.random.default_rng(2).standard_normal((5, 40)).astype(np.float32) + 3.0
    y = D.dropout(base[:, :cols], 0.4, 99)
    keep = dropout_keep(99, 5 * cols, 0.4).reshape(5, cols)
    np.testing.assert_array_equal(y != 0, keep)


@pytest.mark.slow
def test_dropout_grouped_kernel_keeps_values_in_their_threads():
    # Each thread draws the Philox words of its own 8-element runs: no layout conversion
    # through shared memory, no barrier, 16-byte accesses.
    c = D.dropout_kernel.compile(D.SIGNATURES["dropout_kernel"], arch="sm_90a",
                                 num_warps=D.OPTIONS["dropout_kernel"]["num_warps"])
    ptx = c.asm["ptx"]
    assert c.metadata["shared"] == 0
    assert "bar.sync" not in ptx and "ld.shared" not in ptx
    assert ptx.count("ld.global.v4.b32") + ptx.count("ld.global.nc.v4.b32") == 2
    # 16 elements per thread, 16 random bits each: 2 Philox calls of 10 rounds (2 wide
    # multiplies each, the first round's multiply of a zero word folded away).
    assert ptx.count("mul.wide.u32") <= 2 * 2 * 10


def test_dropout_mask_is_the_same_for_every_dtype():
    v = np.random.default_rng(3).standard_normal((6, 48)) + 3.0
    masks = [np.asarray(np.asarray(D.dropout(x, 0.37, 5))) != 0
             for x in (v.astype(np.float32), v.astype(np.float16), BF16Array(v))]
    assert np.array_equal(masks[0], masks[1]) and np.array_equal(masks[0], masks[2])


@pytest.mark.parametrize("p, threshold", [(0.1, 6554), (0.5, 32768), (2.0 ** -17, 0), (3 * 2.0 ** -17, 2),
                                          (1.0, 65536)])
def test_dropout_threshold_resolution(p, threshold):
    # p is used at 2**-16: the threshold is round(p * 2**16); the scale 1 / (1 - p') keeps
    # the expected output equal to x.
    t, scale, _seed = D._dropout_scalars(p, 1)
    assert int(t) == threshold
    assert float(scale) == (0.0 if threshold == 2 ** 16 else np.float32(2 ** 16 / (2 ** 16 - threshold)))


@pytest.mark.slow
def test_dropout_statistics_and_edges():
    x = np.ones(20000, np.float32)
    for p in (0.1, 0.5, 0.9):
        kept = np.mean(D.dropout(x, p, 3) != 0)
        assert abs(kept - (1 - p)) < 5 * np.sqrt(p * (1 - p) / x.size)
    np.testing.assert_array_equal(D.dropout(x[:100], 0.0, 3), x[:100])
    assert not np.any(D.dropout(x[:100], 1.0, 3))
    out = np.empty(100, np.float32)
    assert D.dropout(x[:100], 0.2, 2 ** 64 - 1, out=out) is out
    with pytest.raises(ValueError, match="p must be"):
        D.dropout(x, 1.5, 0)
    with pytest.raises(TypeError, match="seed"):
        D.dropout(x, 0.5, 1.5)


@pytest.mark.slow
def test_dropout_kernel_assembles():
    for name, sig in D.SIGNATURES.items():
        for arch in ("sm_80", "sm_90a"):
            c = getattr(D, name).compile(sig, arch=arch)
            assert c.metadata["ptxas"]["spill_stores"] == 0
    ptx = D.dropout_kernel.compile(D.SIGNATURES["dropout_kernel"], arch="sm_90a").asm["ptx"]
    assert "ld.global.nc.v4" in ptx or "ld.global.v4" in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_dropout_gpu_mask_is_the_reference_mask(dtype):
    # The GPU kernels (grouped draws for a long row, per-element draws for rows of 37)
    # give exactly the numpy Philox mask of the module doc.
    torch = needs("torch")
    x = torch.rand(3000, 40, device="cuda").to(getattr(torch, dtype)) + 1.0
    for v in (x.reshape(-1), x[:, :37], x[:, :32]):
        y = D.dropout(v, 0.3, 2 ** 63 + 5)
        keep = dropout_keep(2 ** 63 + 5, v.numel(), 0.3).reshape(tuple(v.shape))
        assert np.array_equal((y != 0).cpu().numpy(), keep)
        tol = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
        torch.testing.assert_close(y[y != 0].double(), v[y != 0].double() * _scale(0.3), rtol=tol, atol=0)
