"""tc.profile and `tilec bench` on the GPU: the roofline percentage of a profiled stdlib op
agrees with a direct CUDA-event timing of the same call, and the CLI times an example.

    python3 -m pytest -m gpu tests/runtime/test_profile_gpu.py
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.limits import limits_for
from tilec.runtime.profile import copy_bandwidth

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
RUNS = 30
SLEEP = 2_000_000   # cycles of torch.cuda._sleep queued first: the host's launch time is not timed


def _direct_seconds(torch, fn) -> float:
    """Median GPU time of fn() between two torch CUDA events, the GPU kept busy before."""
    times = []
    for _ in range(RUNS):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def _profiled_rows(torch, fn, op):
    for _ in range(3):   # compile, plan, warm
        fn()
    torch.cuda.synchronize()
    with tc.profile() as prof:
        for _ in range(RUNS):
            torch.cuda._sleep(SLEEP)
            fn()
    rows = [r for r in prof.rows() if r.name.startswith(op + ":")]
    assert rows, f"no launch of {op} was recorded: {[r.name for r in prof.rows()]}"
    assert all(r.calls == RUNS for r in rows)
    return prof, rows


def _check_consistent(torch, fn, op):
    prof, rows = _profiled_rows(torch, fn, op)
    bound = sum(r.report.bound.seconds for r in rows)
    profiled = sum(r.seconds for r in rows)
    direct = _direct_seconds(torch, fn)
    pct_profiled, pct_direct = 100 * bound / profiled, 100 * bound / direct
    print(prof.table())
    print(f"{op}: profiled {profiled * 1e6:.1f} us ({pct_profiled:.1f}% of bound), "
          f"direct {direct * 1e6:.1f} us ({pct_direct:.1f}%)")
    assert 0 < pct_profiled <= 110     # the bound is a lower bound on the time (measured copy bandwidth)
    assert abs(pct_profiled - pct_direct) <= 5.0
    return rows


def test_profile_softmax_matches_a_direct_timing(torch):
    rows_, cols = 4099, 4093                     # not multiples of any tile
    x = torch.randn(rows_, cols, device="cuda", dtype=torch.float32)
    got = sk.softmax(x)
    torch.testing.assert_close(got.double(), torch.softmax(x.double(), -1), rtol=2e-5, atol=2e-5)
    rows = _check_consistent(torch, lambda: sk.softmax(x), "softmax")
    nbytes = sum(r.report.dram_bytes for r in rows)
    assert 2 * x.numel() * 4 <= nbytes <= 3 * x.numel() * 4   # read at least once, written once
    assert all(r.report.bound.limit == "memory" for r in rows)


def test_profile_matmul_matches_a_direct_timing(torch):
    m, n, k = 4000, 3968, 4040
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    got = sk.matmul(a, b)
    torch.testing.assert_close(got.double(), a.double() @ b.double(), rtol=2e-2, atol=2e-1)
    rows = _check_consistent(torch, lambda: sk.matmul(a, b), "matmul")
    flops = sum(r.report.tc_flops.get("bf16", 0) for r in rows)
    assert 2 * m * n * k <= flops <= 1.2 * 2 * m * n * k      # whole tiles: a little more
    assert any(r.report.bound.limit == "compute" for r in rows)


def test_profile_attention_matches_a_direct_timing(torch):
    b, h, n, d = 2, 16, 2000, 128                # n: not a multiple of the tiles
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
    got = sk.attention(q, k, v)
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    want = (torch.softmax(qd @ kd.transpose(-1, -2) / d ** 0.5, -1) @ vd).transpose(1, 2)
    assert (got.double() - want).abs().max().item() < 2e-2
    rows = _check_consistent(torch, lambda: sk.attention(q, k, v), "attention")
    flops = sum(r.report.tc_flops.get("f16", 0) for r in rows)
    assert 4 * b * h * n * n * d <= flops <= 1.1 * 4 * b * h * n * n * d   # whole tiles: a little more
    assert any(r.report.bound.limit == "compute" for r in rows)


def test_copy_bandwidth_is_near_the_datasheet(torch):
    dev = torch.cuda.current_device()
    bw = copy_bandwidth(dev)
    assert copy_bandwidth(dev) == bw                              # measured once
    lim = limits_for(torch.cuda.get_device_name(dev))
    if lim is not None:
        assert 0.4 * lim.bandwidth < bw < 1.05 * lim.bandwidth


def test_tilec_bench_times_an_example(torch):
    n = 1_000_003
    env = dict(os.environ)
    env.pop("TILEC_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "tilec.cli", "bench", str(ROOT / "examples" / "vector_add.py") +
                           ":add_kernel", "--shape", f"x={n}", "--shape", f"y={n}", "--shape", f"out={n}",
                           "--baseline", "x + y", "--iters", "20"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    print(out)
    assert "add_kernel: grid 977x1x1, 20 runs" in out
    assert "% of the bound" in out and "memory-bound" in out
    assert "baseline x + y: median" in out


def test_plot_writes_a_roofline_chart(torch, tmp_path):
    pytest.importorskip("matplotlib")
    x = torch.randn(1000, 1000, device="cuda")
    with tc.profile() as prof:
        sk.softmax(x)
    prof.plot(tmp_path / "roofline.png")
    assert (tmp_path / "roofline.png").stat().st_size > 1000
