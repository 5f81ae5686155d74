"""sum/max over a leading or middle dimension whose rows start off 32-byte sectors: rows in
WINDOW classes read through aligned windows (`reductions.reduce_inner_window_kernel`), then
the classes' partial results reduced. Against numpy under the interpreter, plus the launch
choice and the kernel's sm_90a PTX."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels._common import as_array

from launch_spy import spy_launches

RD = importlib.import_module("tilec.stdlib_kernels.reductions")


@pytest.fixture
def launched(monkeypatch):
    """(kernel name, WINDOW) of each kernel that sum and max launch."""
    return spy_launches(monkeypatch, (RD,), lambda kernel, cluster, c: (kernel.name, c.get("WINDOW", 0)))


@pytest.mark.parametrize("shape, dim, window", [
    ((37, 301), 0, 8),          # f32 rows 1204 bytes apart
    ((50, 1004), 0, 8),         # 4016 bytes: 16-byte aligned, not on 32-byte sectors
    ((37, 256), 0, 0),          # on sectors: column tiles
    ((37, 127), 0, 0),          # too narrow for windows
    ((1, 301), 0, 0),           # one row at the start of the array
    ((3, 41, 129), 1, 8),
    ((41, 3, 129), 0, 8),       # rows 3 x 129 elements apart
])
def test_inner_window_choice(shape, dim, window):
    a = as_array(np.zeros(shape, np.float32), "x")
    outer = int(np.prod(shape[:dim]))
    s_outer = a.strides[dim - 1] if dim else 0
    inner_strides = a.strides[dim + 1:]
    assert RD.inner_window(a, shape[dim], s_outer, a.strides[dim], int(np.prod(shape[dim + 1:])),
                           inner_strides[-1] if inner_strides else 1) == window


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape, dim", [((37, 301), 0), ((300, 1001), 0), ((3, 41, 129), 1), ((19, 2, 515), 0)])
def test_sum_and_max_over_rows_off_sectors_match_numpy(launched, rowwise, dtype, shape, dim):
    rng = np.random.default_rng(sum(shape))
    v = 3 * rng.standard_normal(shape)
    v.reshape(-1)[-1] = 90.0      # the array's last element: read after the loop, element by element
    v.reshape(-1)[0] = 80.0
    x = rowwise.host(v, dtype)
    got_max, got_sum = sk.amax(x, dim), sk.sum(x, dim)
    window = 8 if dtype == "f32" else 16
    assert launched == [("reduce_inner_window_kernel", window), ("reduce_inner_kernel", 0)] * 2
    rowwise.close(got_max, rowwise.f64(x).max(dim), dtype)
    rowwise.close(got_sum, rowwise.f64(x).sum(dim), dtype, scale=shape[dim] ** 0.5 * 3)


def test_max_of_negative_rows_off_sectors_ignores_the_neighbouring_rows(launched):
    # each row's edge groups also read its neighbours' values; here those are larger
    x = np.full((40, 300), -5.0, np.float32)
    x[:, 0] = 7.0
    x[:, -1] = 9.0
    x[3, 150] = -1.0
    got = sk.amax(x, 0)
    assert launched[0] == ("reduce_inner_window_kernel", 8)
    np.testing.assert_array_equal(got, x.max(0))


@pytest.mark.slow
def test_split_classes_of_many_rows_match_numpy(launched):
    # 4100 rows of 200 f16 columns: one strip per class, the classes' rows split among programs
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4100, 200)).astype(np.float16)
    got = sk.sum(x, 0)
    assert launched[0] == ("reduce_inner_window_kernel", 16)
    np.testing.assert_allclose(got.astype(np.float64), x.astype(np.float64).sum(0), rtol=2e-3, atol=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("dtype, window", [("bf16", 16), ("f16", 16), ("f32", 8)])
@pytest.mark.parametrize("is_max", [False, True])
def test_window_kernel_moves_16_bytes_in_few_registers(dtype, window, is_max):
    k = RD.reduce_inner_window_kernel
    block_i = 512 if window == 16 else 256
    sig = (f"x={dtype}[?,?,?], part=f32[?,?,?]:stride_div=16x16x1, tiles_per_split=i32, MAX={is_max}, "
           f"BLOCK_R=16, BLOCK_I={block_i}, WINDOW={window}")
    compiled = k.compile(k.specialization(sig), arch="sm_90a", num_warps=8, fast_math=True)
    assert compiled.asm["ptx"].count("ld.global.v4.b32") == 4
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    # a mask per element instead of per 16-byte group took 112 (bf16)
    assert ptxas["spill_stores"] == 0 and ptxas["registers"] <= 64, ptxas
