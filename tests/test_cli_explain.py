"""`tilec explain` (CPU) and `tilec bench`'s argument errors (CPU: checked before any GPU)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tilec.cli import main
from tilec.explain import parse_shapes

ROOT = Path(__file__).resolve().parents[1]
VADD = str(ROOT / "examples" / "vector_add.py") + ":add_kernel"
MATMUL = str(ROOT / "examples" / "matmul.py") + ":matmul_kernel"
SOFTMAX = str(ROOT / "examples" / "fused_softmax.py") + ":softmax_kernel"


def test_explain_without_shapes_prints_the_per_program_work(capsys):
    assert main(["explain", VADD]) == 0
    out = capsys.readouterr().out
    assert "vector_add.py:17  load x: 4.1 kB f32" in out
    assert "store out: 4.1 kB f32" in out
    assert "give --shape" in out
    assert "registers/thread" in out or "ptxas did not run" in out


def test_explain_with_shapes_prints_totals_and_the_bound(capsys):
    assert main(["explain", VADD, "--shape", "x=5000", "--shape", "y=5000", "--shape", "out=5000"]) == 0
    out = capsys.readouterr().out
    assert "grid 5x1x1 (inferred" in out
    assert "60 kB in tiles: read 40 kB, written 20 kB" in out            # 12 bytes per element
    assert "DRAM:       60 kB at least" in out
    assert "memory-bound on H100 SXM5 80GB" in out


def test_explain_loops_name_their_line_and_an_arch_picks_the_part(capsys):
    assert main(["explain", MATMUL, "--shape", "a=256x512", "--shape", "b=512x128", "--shape", "c=256x128",
                 "--grid", "8", "--arch", "sm_80"]) == 0
    out = capsys.readouterr().out
    assert "per iteration of the loop at matmul.py:35" in out
    assert f"tensor cores {2 * 256 * 128 * 512 / 1e6:.3g} MFLOP f16" in out
    assert "A100 SXM4 80GB" in out


def test_explain_softmax_reads_each_row_twice(capsys):
    assert main(["explain", SOFTMAX, "--shape", "x=8x3000", "--shape", "out=8x3000"]) == 0
    out = capsys.readouterr().out
    assert f"read {8 * 3000 * 8 / 1e3:.3g} kB" in out and f"written {8 * 3000 * 4 / 1e3:.3g} kB" in out


@pytest.mark.parametrize("extra, message", [
    (["--shape", "x=12q"], "--shape expects name=AxB"),
    (["--shape", "=12"], "--shape expects name=AxB"),
    (["--shape", "x=4", "--shape", "x=5"], "gives 'x' twice"),
    (["--shape", "z=4"], "'z', which is not a run-time argument"),
    (["--shape", "x=4x4"], "rank 1, got 2 extent(s)"),
    (["--shape", "x=4"], "--shape is missing for y, out"),
    (["--shape", "x=4", "--shape", "y=4", "--shape", "out=4", "--grid", "a"], "--grid expects"),
])
def test_explain_argument_errors(capsys, extra, message):
    assert main(["explain", VADD] + extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_explain_asks_for_a_grid_it_cannot_infer(capsys):
    # the swizzled GEMM computes its tile from the program id
    assert main(["explain", MATMUL, "--shape", "a=64x64", "--shape", "b=64x64", "--shape", "c=64x64"]) == 2
    assert "give --grid" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--shape", "x=4"], "--shape is missing for y, out"),
    (["--shape", "x=4x"], "--shape expects name=AxB"),
    (["--iters", "0"], "--iters must be at least 1"),
])
def test_bench_argument_errors_before_any_gpu(capsys, extra, message):
    assert main(["bench", VADD] + extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bench_without_a_gpu_says_it_skipped(capsys):
    from tilec.explain import no_gpu_reason
    if no_gpu_reason() is None:
        pytest.skip("a GPU and torch are here: tests/runtime/test_profile_gpu.py runs tilec bench")
    assert main(["bench", VADD, "--shape", "x=4", "--shape", "y=4", "--shape", "out=4"]) == 0
    assert "tilec bench: skipped:" in capsys.readouterr().err


def test_parse_shapes():
    assert parse_shapes(["x=4096x1024", "n=7", "y=3,4"]) == {"x": (4096, 1024), "n": (7,), "y": (3, 4)}
    assert parse_shapes(None) == {}
