"""The stdlib's replay path on the GPU: calls after the first write new addresses (and per-call
scalars) into their launch plans' prebuilt parameter buffers; the results must be those of the
entry points' own path, against float64 references on fresh random inputs, and the replays must
be captured by torch's CUDA graphs and by tc.Graph like any launch.

    python3 -m pytest -m gpu tests/stdlib/test_replay_path_gpu.py
"""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import _plan

pytestmark = pytest.mark.gpu

ROWS, COLS = 300, 1000   # not multiples of the tiles


@pytest.fixture(autouse=True)
def fresh_plans():
    """Each test records its own plans (the `torch` fixture: tests/conftest.py)."""
    _plan.clear_plans()
    yield
    _plan.clear_plans()


def test_replays_compute_on_new_inputs_with_each_calls_eps(torch):
    F = torch.nn.functional
    for i, eps in enumerate([1e-5, 0.1, 0.5]):   # the first call records, the others replay
        g = torch.Generator(device="cuda").manual_seed(100 + i)
        x = torch.randn(ROWS, COLS, device="cuda", dtype=torch.float16, generator=g)
        y = torch.randn(ROWS, COLS, device="cuda", dtype=torch.float16, generator=g)
        w = torch.randn(COLS, device="cuda", dtype=torch.float16, generator=g)
        b = torch.randn(COLS, device="cuda", dtype=torch.float16, generator=g)
        x32 = torch.randn(ROWS, COLS, device="cuda", dtype=torch.float32, generator=g)
        xd, wd, bd = x.double(), w.double(), b.double()
        torch.testing.assert_close(sk.softmax(x).double(), xd.softmax(-1), rtol=2e-3, atol=2e-3)
        torch.testing.assert_close(sk.gelu(x).double(), F.gelu(xd), rtol=2e-3, atol=2e-3)
        torch.testing.assert_close(sk.mul(x, y).double(), xd * y.double(), rtol=2e-3, atol=2e-3)
        torch.testing.assert_close(sk.layer_norm(x, COLS, w, b, eps=eps).double(),
                                   F.layer_norm(xd, (COLS,), wd, bd, eps), rtol=1e-2, atol=1e-2)
        rms = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * wd
        torch.testing.assert_close(sk.rms_norm(x, w, eps=eps).double(), rms, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(sk.cumsum(x32).double(), x32.double().cumsum(-1), rtol=1e-4, atol=2e-3)
    for entry in (sk.softmax, sk.gelu, sk.mul, sk.rms_norm, sk.cumsum):
        assert _plan.plan_count(entry) == 1


def test_dropout_replays_take_each_calls_p_and_seed(torch):
    x = torch.randn(ROWS, COLS + 1, device="cuda", dtype=torch.float32)
    outs = {}
    # thresholds p * 2**16 exact and divisible by 16, seeds of one signature (not 1): one plan
    for p, seed in [(0.25, 5), (0.5, 6), (0.75, 7), (0.25, 5)]:
        y = sk.dropout(x, p, seed)
        kept = y != 0
        assert abs(1.0 - kept.double().mean().item() - p) < 0.01
        torch.testing.assert_close(y[kept], x[kept] / (1.0 - p), rtol=1e-6, atol=0.0)
        outs.setdefault((p, seed), []).append(y)
    assert _plan.plan_count(sk.dropout) == 1
    first, replayed = outs[(0.25, 5)]   # the recorded call and a replay of the same p and seed
    assert torch.equal(first, replayed)


def test_replays_are_captured_by_torchs_cuda_graphs(torch):
    x = torch.randn(ROWS, COLS, device="cuda", dtype=torch.float16)
    w = torch.randn(COLS, device="cuda", dtype=torch.float16)
    sk.softmax(x)                    # recorded (compiled, loaded) outside the capture
    sk.rms_norm(x, w)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):       # warm-up on a side stream, as torch asks before a capture
        sk.softmax(x)
        sk.rms_norm(x, w)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = sk.softmax(x)
        z = sk.rms_norm(x, w)
    for seed in (1, 2):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x.copy_(torch.randn(ROWS, COLS, device="cuda", dtype=torch.float16, generator=g))
        graph.replay()
        torch.cuda.synchronize()
        xd = x.double()
        torch.testing.assert_close(y.double(), xd.softmax(-1), rtol=2e-3, atol=2e-3)
        rms = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        torch.testing.assert_close(z.double(), rms, rtol=1e-2, atol=1e-2)
    assert _plan.plan_count(sk.softmax) == 1 and _plan.plan_count(sk.rms_norm) == 1


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_device_array_replays_compute_and_are_captured_by_tc_graph():
    rng = np.random.default_rng(0)
    for _ in range(3):   # recorded, then replayed with new inputs and fresh outputs
        xs = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        ys = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        x, y = tc.from_numpy(xs), tc.from_numpy(ys)
        out = sk.softmax(x)
        prod = sk.mul(x, y)
        np.testing.assert_allclose(out.to_numpy(), _softmax(xs.astype(np.float64)), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(prod.to_numpy(), xs.astype(np.float64) * ys, rtol=1e-6, atol=1e-6)
    assert _plan.plan_count(sk.softmax) == 1 and _plan.plan_count(sk.mul) == 1
    graph = tc.Graph()
    with graph.capture(tc.Stream()):
        out = sk.softmax(x)          # a replay: its output allocated inside the capture, kept by the graph
    for seed in (1, 2):
        xs = np.random.default_rng(seed).standard_normal((ROWS, COLS)).astype(np.float32)
        x.copy_from_numpy(xs)
        tc.synchronize()
        graph.replay()
        graph.synchronize()
        np.testing.assert_allclose(out.to_numpy(), _softmax(xs.astype(np.float64)), rtol=1e-4, atol=1e-6)
