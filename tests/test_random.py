"""tc.rand / tc.randint4x / tc.philox: Philox4x32-10 in the language, on the interpreter."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilec as tc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from philox_ref import philox4x32_10, randint4x  # noqa: E402

# Random123's known-answer vectors for Philox4x32-10 (its kat_vectors file): counter, key, output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@tc.kernel
def philox_kernel(ctr, out, k0, k1):
    c = tc.load(ctr, index=(0, 0), shape=(4, 1))
    w = tc.arange(0, 4)[:, None]
    c0, c1 = tc.sum(tc.where(w == 0, c, 0)), tc.sum(tc.where(w == 1, c, 0))
    c2, c3 = tc.sum(tc.where(w == 2, c, 0)), tc.sum(tc.where(w == 3, c, 0))
    r0, r1, r2, r3 = tc.philox(k0, k1, tc.full((1,), c0, tc.uint32), tc.full((1,), c1, tc.uint32),
                               tc.full((1,), c2, tc.uint32), tc.full((1,), c3, tc.uint32))
    tc.store(out, index=(0,), tile=r0)
    tc.store(out, index=(1,), tile=r1)
    tc.store(out, index=(2,), tile=r2)
    tc.store(out, index=(3,), tile=r3)


@tc.kernel
def rand_kernel(out, seed, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    tc.store(out.ptr + offs, tc.rand(seed, offs), mask=offs < out.shape[0])


@tc.kernel
def randint4x_kernel(out, seed, base, BLOCK: tc.constexpr):
    i = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    r0, r1, r2, r3 = tc.randint4x(seed, base + i)
    m = i < out.shape[1]
    tc.store(out.ptr + i, r0, mask=m)
    tc.store(out.ptr + out.shape[1] + i, r1, mask=m)
    tc.store(out.ptr + 2 * out.shape[1] + i, r2, mask=m)
    tc.store(out.ptr + 3 * out.shape[1] + i, r3, mask=m)


@pytest.mark.parametrize("ctr, key, want", KAT)
def test_philox_known_answers(ctr, key, want):
    out = np.zeros(4, np.uint32)
    with tc.interpret():
        philox_kernel[(1,)](np.array(ctr, np.uint32).reshape(4, 1), out, np.uint32(key[0]), np.uint32(key[1]))
    assert [hex(v) for v in out] == [hex(v) for v in want]
    assert [hex(int(v[0])) for v in philox4x32_10(*[[c] for c in ctr], *key)] == [hex(v) for v in want]


@pytest.mark.parametrize("seed, base", [(0, 0), (12345, 7), (-3, 2 ** 33 + 5), (2 ** 40 + 17, -100)])
def test_randint4x_matches_reference(seed, base):
    n = 37
    out = np.zeros((4, n), np.uint32)
    with tc.interpret():
        randint4x_kernel[(tc.cdiv(n, 16),)](out, np.int64(seed), np.int64(base), BLOCK=16)
    want = randint4x(seed, base + np.arange(n))
    for k in range(4):
        np.testing.assert_array_equal(out[k], want[k])


def test_rand_is_independent_of_the_block_size_and_uniform():
    n = 4099
    results = []
    for block in (64, 1024):
        out = np.zeros(n, np.float32)
        with tc.interpret():
            rand_kernel[(tc.cdiv(n, block),)](out, np.int64(42), BLOCK=block)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    u = results[0].astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    # mean 1/2 and variance 1/12 within ~5 standard errors for n = 4099
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.01
    # different seeds give different streams
    other = np.zeros(n, np.float32)
    with tc.interpret():
        rand_kernel[(tc.cdiv(n, 1024),)](other, np.int64(43), BLOCK=1024)
    assert np.mean(other == results[0]) < 0.01


def test_rand_compiles_without_spills():
    for arch in ("sm_80", "sm_90a"):
        c = rand_kernel.compile("out=f32[?], seed=i64, BLOCK=1024", arch=arch)
        assert c.metadata["ptxas"]["spill_stores"] == 0
        assert "mul.wide.u32" in c.asm["ptx"] or "mul.hi.u32" in c.asm["ptx"]
