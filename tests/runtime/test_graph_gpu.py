"""tc.Graph on the GPU: a user kernel and stdlib ops on DeviceArrays captured on a tc.Stream,
replayed on new inputs written into the captured arrays; a buffer cleared inside the capture
is cleared again by each replay.

    python3 -m pytest -m gpu tests/runtime/test_graph_gpu.py
"""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.runtime import zeros

pytestmark = pytest.mark.gpu


@tc.kernel
def axpy_kernel(x, y, out, a, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    xv = tc.load(x.ptr + offs, mask=mask, other=0.0)
    yv = tc.load(y.ptr + offs, mask=mask, other=0.0)
    tc.store(out.ptr + offs, a * xv + yv, mask=mask)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_capture_and_replay_kernels_and_stdlib_ops(gpu):
    rng = np.random.default_rng(0)
    rows, cols, n = 37, 1001, 37 * 1001
    x, y = tc.from_numpy(rng.standard_normal((rows, cols), dtype=np.float32)), tc.empty((rows, cols))
    y.copy_from_numpy(rng.standard_normal((rows, cols), dtype=np.float32))
    mid, out = tc.empty((rows, cols)), tc.empty((rows, cols))
    grid = (tc.cdiv(n, 1024),)

    def step():
        axpy_kernel[grid](x, y, mid, 0.5, n, BLOCK=1024)
        sk.softmax(mid, out=out)

    step()                 # compile and load before capturing
    tc.synchronize()
    s = tc.Stream()
    g = tc.Graph()
    with g.capture(s):
        step()
    for seed in (1, 2):
        xs = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)
        ys = np.random.default_rng(seed + 10).standard_normal((rows, cols), dtype=np.float32)
        x.copy_from_numpy(xs)
        y.copy_from_numpy(ys)
        tc.synchronize()
        g.replay()
        g.synchronize()
        want = _softmax(0.5 * xs.astype(np.float64) + ys)
        np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-6)


def test_a_buffer_cleared_in_the_capture_is_cleared_on_every_replay(gpu):
    n = 5000
    x = tc.from_numpy(np.arange(n, dtype=np.float32))
    out = tc.empty((n,))
    axpy_kernel[(tc.cdiv(n, 1024),)](x, x, out, 1.0, n, BLOCK=1024)   # compile first
    tc.synchronize()
    g = tc.Graph()
    with g.capture(tc.Stream()):
        z = zeros((n,))
        axpy_kernel[(tc.cdiv(n, 1024),)](x, z, out, 2.0, n, BLOCK=1024)
    z.copy_from_numpy(np.full(n, 7.0, np.float32))    # dirty it between replays
    tc.synchronize()
    g.replay()
    g.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), 2.0 * np.arange(n, dtype=np.float32))
