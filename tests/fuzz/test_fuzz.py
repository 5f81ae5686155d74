"""The differential kernel fuzzer (docs/testing-fuzz.md) as tests.

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
