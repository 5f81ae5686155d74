"""Whole kernels written with @tc.kernel, run by the interpreter on shapes that are not
multiples of the tile, against numpy."""
import inspect

import numpy as np
import pytest

import tilec as tc
from tilec.errors import InterpreterError


def cdiv(a, b):
    return -(-a // b)


@tc.kernel
def add_views(x, y, out, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    tc.store(out, index=(pid,), tile=tc.load(x, index=(pid,), shape=(BLOCK,)) + tc.load(y, index=(pid,), shape=(BLOCK,)))


@tc.kernel
def add_pointers(x, y, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    a = tc.load(x.ptr + offs, mask=mask, other=0.0)
    b = tc.load(y.ptr + offs, mask=mask, other=0.0)
    tc.store(out.ptr + offs, a + b, mask=mask)


@pytest.mark.parametrize("n", [1, 127, 1000])
def test_vector_add(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    with tc.interpret():
        out = np.zeros_like(x)
        add_views[(cdiv(n, 64),)](x, y, out, BLOCK=64)
        np.testing.assert_array_equal(out, x + y)
        out = np.zeros_like(x)
        add_pointers[(cdiv(n, 128),)](x, y, out, n, BLOCK=128)
        np.testing.assert_array_equal(out, x + y)


@tc.kernel
def softmax_rows(x, out, BLOCK: tc.constexpr):
    row = tc.program_id(0)
    n_tiles = tc.cdiv(x.shape[1], BLOCK)
    m = tc.max(tc.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf")))
    for k in range(1, n_tiles):
        m = tc.maximum(m, tc.max(tc.load(x, index=(row, k), shape=(1, BLOCK), padding=float("-inf"))))
    s = 0.0
    for k in range(n_tiles):
        s += tc.sum(tc.exp(tc.load(x, index=(row, k), shape=(1, BLOCK), padding=float("-inf")) - m))
    for k in range(n_tiles):
        t = tc.load(x, index=(row, k), shape=(1, BLOCK), padding=float("-inf"))
        tc.store(out, index=(row, k), tile=tc.exp(t - m) / s)


def test_softmax_with_a_row_loop():
    rng = np.random.default_rng(1)
    x = (3 * rng.standard_normal((13, 300))).astype(np.float32)
    out = np.zeros_like(x)
    with tc.interpret():
        softmax_rows[(13,)](x, out, BLOCK=128)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@tc.kernel
def layer_norm(x, w, b, y, eps, BLOCK: tc.constexpr):
    row = tc.program_id(0)
    n = x.shape[1]
    cols = tc.arange(0, BLOCK)
    acc = tc.zeros((1, BLOCK), tc.float32)
    for k in range(tc.cdiv(n, BLOCK)):
        acc += tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
    mean = tc.sum(acc) / n
    acc = tc.zeros((1, BLOCK), tc.float32)
    for k in range(tc.cdiv(n, BLOCK)):
        xt = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
        d = tc.where(k * BLOCK + cols < n, xt - mean, 0.0)
        acc += d * d
    rstd = tc.rsqrt(tc.sum(acc) / n + eps)
    for k in range(tc.cdiv(n, BLOCK)):
        xt = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
        wt = tc.load(w, index=(k,), shape=(BLOCK,)).astype(tc.float32)
        bt = tc.load(b, index=(k,), shape=(BLOCK,)).astype(tc.float32)
        tc.store(y, index=(row, k), tile=((xt - mean) * rstd * wt + bt).astype(y.dtype))


def test_layer_norm_f16():
    rng = np.random.default_rng(2)
    rows, n = 7, 333
    x = rng.standard_normal((rows, n)).astype(np.float16)
    w, b = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(np.float16)
    y = np.zeros_like(x)
    with tc.interpret():
        layer_norm[(rows,)](x, w, b, y, 1e-5, BLOCK=128)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=4e-3)


@tc.kernel
def matmul(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    pid_m, pid_n = tc.program_id(0), tc.program_id(1)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(a.shape[1], BK)):
        acc = tc.dot(tc.load(a, index=(pid_m, k), shape=(BM, BK)), tc.load(b, index=(k, pid_n), shape=(BK, BN)), acc)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@pytest.mark.parametrize("m,n,k", [(33, 70, 45), (1, 16, 200)])
def test_tiled_matmul_f16_inputs_f32_accumulation(m, n, k):
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    with tc.interpret():
        matmul[(cdiv(m, 32), cdiv(n, 32))](a, b, c, BM=32, BN=32, BK=16)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


@tc.kernel
def histogram(data, hist, n, NUM_BINS: tc.constexpr, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    v = tc.load(data.ptr + offs, mask=mask, other=0)
    tc.atomic_add(hist.ptr + v, tc.full((BLOCK,), 1, tc.int32), mask=mask & (v >= 0) & (v < NUM_BINS))


def test_histogram_with_atomics():
    rng = np.random.default_rng(3)
    n = 5000
    data = rng.integers(-3, 40, n).astype(np.int32)
    hist = np.zeros(32, np.int32)
    with tc.interpret():
        histogram[(cdiv(n, 256),)](data, hist, n, NUM_BINS=32, BLOCK=256)
    inside = data[(data >= 0) & (data < 32)]
    np.testing.assert_array_equal(hist, np.bincount(inside, minlength=32))


@tc.kernel
def checked(x, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    tc.device_assert(offs < n, "index past the end")


def test_device_assert_names_the_kernel_source_line():
    line = inspect.getsourcelines(checked)[1] + 3
    with tc.interpret():
        checked[(2,)](np.zeros(4, np.float32), 32, BLOCK=16)
        with pytest.raises(InterpreterError) as e:
            checked[(3,)](np.zeros(4, np.float32), 40, BLOCK=16)
    assert f"device_assert failed in program (2, 0, 0) at {__file__}:{line}: index past the end" in str(e.value)


@tc.kernel
def program_ids(out):
    tc.store(out.ptr + tc.program_id(0), tc.program_id(0))


@pytest.mark.slow
def test_grids_past_the_cuda_axis_limits_are_rejected_as_on_a_gpu():
    # CUDA grids hold 2**31 - 1 programs along axis 0, 65535 along axes 1 and 2
    out = np.zeros(70000, np.int32)
    with tc.interpret():
        for grid, axis in [((1, 70000), 1), ((1, 1, 70000), 2)]:
            with pytest.raises(ValueError, match=rf"kernel 'program_ids': grid axis {axis} holds at most 65535 "
                                                 r"programs, got 70000; put the largest extent on axis 0"):
                program_ids[grid](out)
        with pytest.raises(ValueError, match="grid axis 0 holds at most 2147483647 programs, got 2147483648"):
            program_ids[(2**31,)](out)
        assert not out.any()
        program_ids[(70000,)](out)
    np.testing.assert_array_equal(out, np.arange(70000))
