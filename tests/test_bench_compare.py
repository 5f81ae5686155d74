"""bench/results.py (one JSON schema for benchmark results) and its regression gate,
`python -m bench.compare OLD.json NEW.json --tolerance 3%`, on synthetic files (CPU)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import compare, results

ROOT = Path(__file__).resolve().parent.parent


def write(path, values, device="NVIDIA H200", commit="abc1234"):
    """A results file of rows {(name, metric): (value, unit)}."""
    rows = [results.row(n, m, v, u, "torch", 100.0) for (n, m), (v, u) in values.items()]
    results.write(path, rows, device=device, commit=commit, date="2026-11-28T00:00:00+00:00", command="test")
    return path


def test_written_file_has_the_schema(tmp_path):
    doc = write(tmp_path / "r.json", {("softmax 4096x4096 bf16", "tilec"): (2400.0, "GB/s")})
    data = json.loads(doc.read_text())
    assert data["schema"] == results.SCHEMA and data["device"] == "NVIDIA H200" and data["commit"] == "abc1234"
    assert data["rows"] == [{"name": "softmax 4096x4096 bf16", "metric": "tilec", "value": 2400.0, "unit": "GB/s",
                             "baseline": {"name": "torch", "value": 100.0}}]
    assert results.read(doc)["rows"] == data["rows"]


def test_commit_defaults_to_the_checkout(tmp_path):
    doc = results.write(tmp_path / "r.json", [results.row("a", "t", 1.0, "ms")], device="cpu")
    assert doc["commit"] != "" and doc["date"].endswith("+00:00")


@pytest.mark.parametrize("args, message", [
    (("a", "t", 1.0, "furlongs"), "unit must be one of"),
    (("a", "t", float("nan"), "ms"), "finite number"),
    (("", "t", 1.0, "ms"), "name must be"),
    (("a", "t", 1.0, "ms", "torch"), "needs both a name and a value"),
])
def test_bad_rows_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        results.row(*args)


def test_duplicate_rows_are_refused(tmp_path):
    r = results.row("a", "t", 1.0, "ms")
    with pytest.raises(ValueError, match="unique"):
        results.write(tmp_path / "r.json", [r, r], device="cpu")


def test_direction_follows_the_unit():
    assert results.higher_is_better("GB/s") and results.higher_is_better("TFLOP/s")
    assert not results.higher_is_better("ms") and not results.higher_is_better("us")


def test_parse_tolerance():
    assert compare.parse_tolerance("3%") == pytest.approx(0.03)
    assert compare.parse_tolerance("0.05") == pytest.approx(0.05)
    for bad in ("three", "150%", "-1%"):
        with pytest.raises(ValueError):
            compare.parse_tolerance(bad)


def test_within_tolerance_passes_and_prints_ratios(tmp_path, capsys):
    old = write(tmp_path / "old.json", {("softmax", "tilec"): (2000.0, "GB/s"), ("gemm", "time"): (1.00, "ms")})
    new = write(tmp_path / "new.json", {("softmax", "tilec"): (1960.0, "GB/s"), ("gemm", "time"): (1.02, "ms")})
    assert compare.main([str(old), str(new), "--tolerance", "3%"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("softmax"))
    assert "0.980" in line and "-2.0%" in line and "ok" in line
    line = next(ln for ln in out.splitlines() if ln.startswith("gemm"))
    assert "1.020" in line and "-2.0%" in line        # 2% slower is 2% worse
    assert "no regression beyond 3%" in out


def test_throughput_drop_beyond_tolerance_fails(tmp_path, capsys):
    old = write(tmp_path / "old.json", {("softmax", "tilec"): (2000.0, "GB/s")})
    new = write(tmp_path / "new.json", {("softmax", "tilec"): (1900.0, "GB/s")})
    assert compare.main([str(old), str(new), "--tolerance", "3%"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "-5.0%" in out and "1 regression(s) beyond 3%" in out
    # the same drop passes a looser gate
    assert compare.main([str(old), str(new), "--tolerance", "6%"]) == 0


def test_time_rise_is_a_regression_and_time_drop_an_improvement(tmp_path, capsys):
    old = write(tmp_path / "old.json", {("a", "time"): (10.0, "us"), ("b", "time"): (10.0, "us")})
    new = write(tmp_path / "new.json", {("a", "time"): (11.0, "us"), ("b", "time"): (8.0, "us")})
    assert compare.main([str(old), str(new)]) == 1    # default tolerance 3%
    out = capsys.readouterr().out.splitlines()
    assert "REGRESSION" in next(ln for ln in out if ln.startswith("a "))
    b = next(ln for ln in out if ln.startswith("b "))
    assert "better" in b and "+20.0%" in b


def test_rows_in_one_file_only_are_listed_not_failed(tmp_path, capsys):
    old = write(tmp_path / "old.json", {("a", "t"): (1.0, "ms"), ("gone", "t"): (1.0, "ms")})
    new = write(tmp_path / "new.json", {("a", "t"): (1.0, "ms"), ("added", "t"): (1.0, "ms")}, device="NVIDIA H100")
    assert compare.main([str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "only in old" in out and "only in new" in out and "different devices" in out


def test_unit_change_and_bad_files_are_usage_errors(tmp_path, capsys):
    old = write(tmp_path / "old.json", {("a", "t"): (1.0, "ms")})
    new = write(tmp_path / "new.json", {("a", "t"): (1.0, "us")})
    assert compare.main([str(old), str(new)]) == 2
    assert "unit changed from ms to us" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))
    assert compare.main([str(old), str(tmp_path / "other.json")]) == 2
    assert "not a tilec-bench/1 results file" in capsys.readouterr().err


def test_compile_time_writes_the_schema(tmp_path):
    from bench import compile_time
    rows = [{"kernel": "fused_softmax.py:softmax_kernel", "arch": "sm_90a", "goal_ms": 150.0,
             "ms": {"to_ptx": 120.5, "total": 300.0}}]
    compile_time.write_results(tmp_path / "ct.json", rows)
    doc = results.read(tmp_path / "ct.json")
    assert doc["device"].startswith("CPU")
    assert doc["rows"][0] == {"name": "fused_softmax.py:softmax_kernel sm_90a", "metric": "to_ptx", "value": 120.5,
                              "unit": "ms", "baseline": {"name": "goal", "value": 150.0}}


def test_compare_subprocess(tmp_path):
    old = write(tmp_path / "old.json", {("softmax", "tilec"): (2000.0, "GB/s")})
    new = write(tmp_path / "new.json", {("softmax", "tilec"): (1000.0, "GB/s")})
    proc = subprocess.run([sys.executable, "-m", "bench.compare", str(old), str(new), "--tolerance", "3%"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "0.500" in proc.stdout and "REGRESSION" in proc.stdout


def test_slower_compile_time_is_a_regression(tmp_path, capsys):
    """compile_time.py --results files enter the same gate: ms rows, lower is better."""
    from bench import compile_time

    def rows(to_ptx):
        return [{"kernel": "fused_softmax.py:softmax_kernel", "arch": "sm_90a", "goal_ms": 150.0,
                 "ms": {"to_ptx": to_ptx, "total": to_ptx + 100.0}}]
    old, faster, slower = tmp_path / "old.json", tmp_path / "faster.json", tmp_path / "slower.json"
    for path, ms in ((old, 120.0), (faster, 100.0), (slower, 130.0)):
        compile_time.write_results(path, rows(ms))
    assert compare.main([str(old), str(faster), "--tolerance", "3%"]) == 0
    assert "better" in capsys.readouterr().out
    assert compare.main([str(old), str(slower), "--tolerance", "3%"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "fused_softmax.py:softmax_kernel sm_90a" in out


REPORT = """===-------------------------------------------------------------------------===
                          Pass execution timing report
===-------------------------------------------------------------------------===
  Total Execution Time: 0.1072 seconds (0.3137 wall clock)

   ---User Time---   --System Time--   --User+System--   ---Wall Time---  --- Name ---
   0.0201 ( 18.8%)   0.0000 (  0.0%)   0.0201 ( 18.7%)   0.0521 ( 16.6%)  InstCombinePass
   0.0201 ( 18.8%)   0.0000 (  0.0%)   0.0201 ( 18.7%)   0.0521 ( 16.6%)  InstCombinePass
   0.0030 (  3.2%)   0.0004 (  0.0%)   0.0034 (  3.2%)   0.0140 (  4.4%)  GVNPass
   0.1072 (100.0%)   0.0000 (  0.0%)   0.1072 (100.0%)   0.3137 (100.0%)  Total
"""


def test_parse_pass_report():
    from bench.compile_time import parse_pass_report
    # user+system, not wall; a row LLVM repeats counted once; the Total row left out
    assert parse_pass_report(REPORT) == [("InstCombinePass", 0.0201), ("GVNPass", 0.0034)]
    # a report with one time column (LLVM leaves out the columns that are all zero)
    assert parse_pass_report("   0.5000 (100.0%)  Straight line strength reduction\n") == \
        [("Straight line strength reduction", 0.5)]
    assert parse_pass_report("") == []


def test_llvm_pass_times_of_an_example():
    """LLVM's timers on a real kernel: the O3 pipeline's and the NVPTX backend's passes."""
    from bench import compile_time
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    mod = compile_time._load_example("fused_softmax.py")
    kernel = mod.softmax_kernel
    opt, emit = compile_time.llvm_pass_times(kernel, parse_signature(kernel, mod.SIGNATURES["softmax_kernel"]),
                                            CompileOptions(arch="sm_80", num_warps=4))
    assert "InstCombinePass" in dict(opt)
    assert any(name.startswith("NVPTX DAG->DAG Pattern Instruction Selection") for name, _ in emit)
    for rows in (opt, emit):
        assert all(s >= 0 for _, s in rows) and [s for _, s in rows] == sorted((s for _, s in rows), reverse=True)
