"""The differential kernel fuzzer (docs/testing.md, "Fuzzing") as tests.

- `test_cpu_slice`: a fixed-seed slice of random kernels, each interpreted and compiled
  for sm_80 and sm_90a with ptxas accepting it (LLVM runs in a forked child, so an LLVM
  abort fails one program, not the test process).
- `test_regression`: every saved failure under regressions/ replays (on the interpreter
  and the compiler here; on the GPU too under -m gpu). A regression whose bug is not fixed
  yet carries an "xfail" reason and must still fail (strict).
- `test_gpu_fuzz`: >= 2000 programs on the GPU against the interpreter, split over
  processes, within a time cap; prints the counts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.fuzz` is imported as a package from the repository root
    sys.path.insert(0, str(ROOT))

from tests.fuzz.driver import REGRESSIONS, hunt
from tests.fuzz.program import Program
from tests.fuzz.run import check  # noqa: E402

CPU_PROGRAMS = 200
CPU_SEED = 20261128
GPU_PROGRAMS = 2000
GPU_SECONDS = 300


@pytest.mark.slow
def test_cpu_slice():
    report = hunt(CPU_PROGRAMS, CPU_SEED, shrink=False)
    print(report.summary())
    assert report.programs == CPU_PROGRAMS
    assert not report.findings, report.summary()
    # the slice reaches every template
    for kind in ("elementwise", "reduce", "dot", "loop", "atomic", "rand"):
        assert report.features[kind] > 0, kind


def _regressions():
    out = []
    for path in sorted(REGRESSIONS.glob("*.json")):
        d = json.loads(path.read_text())
        marks = [pytest.mark.xfail(strict=True, reason=d["xfail"])] if d.get("xfail") else []
        out.append(pytest.param(path, marks=marks, id=path.stem))
    return out


@pytest.mark.parametrize("path", _regressions())
def test_regression(path):
    p = Program.from_json(json.loads(path.read_text()))
    finding = check(p)
    assert finding is None, str(finding)


@pytest.mark.gpu
@pytest.mark.parametrize("path", _regressions())
def test_regression_on_gpu(path):
    p = Program.from_json(json.loads(path.read_text()))
    finding = check(p, archs=(), gpu=True)
    assert finding is None, str(finding)


@pytest.mark.gpu
def test_gpu_fuzz(tmp_path):
    """2000 programs on the GPU (16 processes, each its own CUDA context); failures are
    shrunk and saved under tmp_path (copy them into regressions/)."""
    jobs = max(1, min(16, os.cpu_count() or 1))
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "tests.fuzz", "--gpu", "--n", str(GPU_PROGRAMS), "--seed", "1", "--jobs", str(jobs),
           "--time-limit", str(GPU_SECONDS), "--save", str(tmp_path / "found"), "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=GPU_SECONDS + 600)
    print(proc.stdout[-20000:])
    print(proc.stderr[-5000:], file=sys.stderr)
    report = json.loads(out.read_text())
    assert not report["findings"], proc.stdout[-20000:]
    assert report["programs"] >= GPU_PROGRAMS, f"only {report['programs']} programs ran within {GPU_SECONDS} s"


# ----------------------------------------------------------------------------- the machinery


def test_comparison_rule():
    import numpy as np

    from tests.fuzz.run import SLACK, mismatches
    ints = np.array([1, -2, 3], np.int32)
    assert not mismatches(ints, ints.copy(), 0.0).any()
    assert mismatches(ints, ints + np.array([0, 0, 1], np.int32), 5.0).tolist() == [False, False, True]  # ints: exact
    f = np.array([1.0, np.nan, np.inf, -0.0], np.float32)
    assert not mismatches(f, np.array([1.0, np.nan, np.inf, 0.0], np.float32), 0.0).any()   # NaN, inf, ±0 agree
    assert mismatches(f, np.array([np.nextafter(np.float32(1), np.float32(2)), np.nan, np.inf, 0.0], np.float32),
                      0.0).tolist() == [True, False, False, False]                            # one ulp is not exact
    assert mismatches(f, np.array([1.0, 0.0, np.inf, 0.0], np.float32), 1.0).tolist() == [False, True, False, False]
    bound = 1e-3
    near = np.array([1.0 + SLACK * bound * 0.9], np.float32)
    far = np.array([1.0 + SLACK * bound * 1.1], np.float32)
    assert not mismatches(f[:1], near, bound).any() and mismatches(f[:1], far, bound).all()
    assert mismatches(f[2:3], np.array([-np.inf], np.float32), 1e9).all()                    # infinities equal


def test_programs_round_trip_through_json():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hyp_seed

    from tests.fuzz.programs import programs

    @settings(max_examples=30, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @hyp_seed(7)
    @given(programs())
    def body(p):
        q = Program.from_json(json.loads(p.dumps()))
        assert (q.source, q.grid, q.outputs, q.options) == (p.source, p.grid, p.outputs, p.options)
        for (n1, a), (n2, b) in zip(p.args, q.args):
            assert n1 == n2 and type(a) is type(b)
            if hasattr(a, "dtype"):
                assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all()
            else:
                assert a == b
        compile(p.source, "<fuzz>", "exec")   # the source is Python

    body()


@pytest.mark.slow
def test_cli_runs_and_reports(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz", "--n", "3", "--kinds", "rand,atomic", "--seed", "3",
                           "--save", "", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["programs"] == 3 and not report["findings"]
    assert "3 programs" in proc.stdout


class _FakeGpu:
    """`run_gpu` stand-in: raises `error(call number)` when it returns one, else runs the
    program on the interpreter (so that the comparison passes)."""

    def __init__(self, error):
        self.error, self.calls = error, 0

    def __call__(self, p):
        from tests.fuzz.run import interpret
        self.calls += 1
        e = self.error(self.calls)
        if e is not None:
            raise e
        return interpret(p)


def _lost(msg):
    import tilec as tc
    e = tc.DriverError(msg)
    e.context_lost = True
    return e


@pytest.mark.parametrize("error, programs, stage", [
    # a compile error at the first launch: no launch happened, the hunt goes on
    (lambda i: __import__("tilec").CompilationError("in kernel 'fuzz_kernel': boom"), 5, "compile"),
    # a launch the driver refused without a fault (its context is fine): the hunt goes on
    (lambda i: __import__("tilec").DriverError("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
     5, "gpu"),
    # a fault on the second program: the context is lost, the hunt stops there
    (lambda i: _lost("cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS") if i == 2 else None, 2, "gpu"),
], ids=["compile_error", "refused_launch", "fault"])
def test_gpu_hunt_stops_only_when_the_context_is_lost(monkeypatch, tmp_path, error, programs, stage):
    import tests.fuzz.run as run
    monkeypatch.setattr(run, "run_gpu", _FakeGpu(error))
    report = hunt(5, 3, archs=(), gpu=True, kinds=["elementwise"], shrink=False, save_dir=tmp_path)
    assert report.programs == programs
    (found,) = report.findings.values()
    assert found["finding"].startswith(f"[{stage}"), found["finding"]
    assert Path(found["path"]).exists()


def test_loses_context_asks_the_error_then_the_driver(monkeypatch):
    import tilec as tc
    import tilec.runtime.driver as driver
    from tests.fuzz.run import loses_context
    assert loses_context(_lost("fault")) and not loses_context(tc.DriverError("out of resources"))
    monkeypatch.setattr(driver, "context_lost", lambda dev=None: False)
    assert not loses_context(ValueError("argument 'x': expected an array"))
    monkeypatch.setattr(driver, "context_lost", lambda dev=None: True)
    assert loses_context(RuntimeError("after a fault"))


def test_a_fault_while_shrinking_keeps_the_failure_being_shrunk(monkeypatch, tmp_path):
    import tilec as tc
    import tests.fuzz.run as run
    # the first program fails to compile; the first replay while shrinking it faults
    monkeypatch.setattr(run, "run_gpu", _FakeGpu(lambda i: tc.CompilationError("in kernel 'fuzz_kernel': boom")
                                                 if i == 1 else _lost("CUDA_ERROR_ILLEGAL_ADDRESS")))
    report = hunt(5, 3, archs=(), gpu=True, kinds=["elementwise"], shrink=True, save_dir=tmp_path)
    assert report.programs == 1
    assert sorted(f["finding"].split("]")[0] for f in report.findings.values()) == ["[compile device", "[gpu"]
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_a_reduced_tile_joins_a_full_one_through_its_max():
    # found on the GPU (seed 2649757): cat of a (1, 16) row sum with a (2, 16) leaf wrote
    # tc.broadcast_to(leaf, (1, 16)), a program the frontend rightly refuses
    from hypothesis import given, settings, strategies as st
    from tests.fuzz.programs import F32, Gen, V, as_tile, broadcastable

    @settings(max_examples=10, derandomize=True, database=None)
    @given(st.data())
    def check_as_tile(data):
        out = as_tile(Gen(data.draw), V("x2", F32, (2, 16), 1.0), V("t4", F32, (1, 16), 1.0))
        assert out.shape == (1, 16) and "tc.max(x2)" in out.text and "broadcast_to(x2" not in out.text
        assert as_tile(Gen(data.draw), V("r", F32, (1, 16), 1.0), V("x", F32, (2, 16), 1.0)).shape == (2, 16)

    check_as_tile()
    assert broadcastable((1, 16), (2, 16)) and broadcastable((), (2, 16)) and not broadcastable((2, 16), (1, 16))
