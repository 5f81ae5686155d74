"""Program ids over 3-D grids, scalar arguments of every kind, and the counter-based random
numbers on both backends against numpy (Philox4x32-10 from tests/philox_ref.py)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tilec as tc

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # tests/philox_ref.py
from philox_ref import randint4x, uniform  # noqa: E402


@tc.kernel
def grid_kernel(out):
    i, j, k = tc.program_id(0), tc.program_id(1), tc.program_id(2)
    ni, nj, nk = tc.num_programs(0), tc.num_programs(1), tc.num_programs(2)
    flat = (k * nj + j) * ni + i
    v = tc.full((4,), i, tc.int32) * 1000000 + j * 10000 + k * 100 + tc.arange(0, 4) * 10 + ni + nj + nk
    tc.store(out.ptr + flat * 4 + tc.arange(0, 4), v)


def test_program_ids_of_a_3d_grid(backend):
    grid = (5, 3, 2)
    out = np.zeros(5 * 3 * 2 * 4, np.int32)
    backend.launch(grid_kernel, grid, out)
    k, j, i, e = np.meshgrid(range(2), range(3), range(5), range(4), indexing="ij")
    np.testing.assert_array_equal(out, (i * 1000000 + j * 10000 + k * 100 + e * 10 + 10).ravel())


@tc.kernel
def scalars_kernel(f, h, d, i8, u8, i64, flag, one, out):
    v = tc.zeros((8,), tc.float64)
    v = tc.where(tc.arange(0, 8) == 0, f.astype(tc.float64), v)
    v = tc.where(tc.arange(0, 8) == 1, h.astype(tc.float64), v)
    v = tc.where(tc.arange(0, 8) == 2, d, v)
    v = tc.where(tc.arange(0, 8) == 3, (i8 + i8).astype(tc.float64), v)   # wraps in i8
    v = tc.where(tc.arange(0, 8) == 4, (u8 * 2).astype(tc.float64), v)    # wraps in u8
    v = tc.where(tc.arange(0, 8) == 5, (i64 // 3).astype(tc.float64), v)
    v = tc.where(tc.arange(0, 8) == 6, tc.where(flag, 1.0, -1.0), v)
    v = tc.where(tc.arange(0, 8) == 7, one * 5.0, v)  # `one` is specialized to the constant 1
    tc.store(out, index=(0,), tile=v)


def test_scalar_arguments_of_every_kind(backend):
    out = np.zeros(8, np.float64)
    backend.launch(scalars_kernel, (1,), 1.25, np.float16(-2.5), np.float64(1e300), np.int8(100),
                   np.uint8(200), np.int64(-(2**40) - 1), True, 1, out)
    want = [1.25, -2.5, 1e300, -56, 144, (-(2**40) - 1) // 3, 1.0, 5.0]
    np.testing.assert_array_equal(out, want)


@tc.kernel
def random_kernel(words, floats, seed, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    r0, r1, r2, r3 = tc.randint4x(seed, offs)
    tc.store(words.ptr + offs, r0, mask=m)
    tc.store(words.ptr + n + offs, r1, mask=m)
    tc.store(words.ptr + 2 * n + offs, r2, mask=m)
    tc.store(words.ptr + 3 * n + offs, r3, mask=m)
    tc.store(floats.ptr + offs, tc.rand(seed, offs), mask=m)


@pytest.mark.parametrize("seed", [0, 12345, 2**40 + 7])
def test_philox_streams(backend, seed):
    n = 777
    words = np.zeros((4, n), np.uint32)
    floats = np.zeros(n, np.float32)
    backend.launch(random_kernel, (tc.cdiv(n, 256),), words, floats, seed, n, BLOCK=256)
    want = randint4x(seed, np.arange(n))
    for i in range(4):
        np.testing.assert_array_equal(words[i], want[i], err_msg=f"word {i}")
    np.testing.assert_array_equal(floats, uniform(want[0]))
