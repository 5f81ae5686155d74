"""The pass driver: order, stop_after, dumps, verification and error wrapping."""
from __future__ import annotations

import sys

import pytest

from tilec import dtypes as dt
from tilec.errors import CompilationError
from tilec.ir import Location, ScalarType, parse, tile_ops as T
from tilec.lowering import pipeline
from tilec.lowering.pipeline import (PIPELINE, TILE_PASSES, dump_to_directory, get_pass, pass_names, run_passes,
                                     run_pipeline)
from tilec.options import CompileOptions

SOURCE = """
module {
  tile.func {sym_name = "kern", arg_names = ["n"]} (
    {
      ^bb0(%n: i32):
        %zero = tile.constant {value = 0} : i32
        %a = tile.add %n, %zero : i32 loc("kern.py":3:5)
        %b = tile.add %n, %zero : i32 loc("kern.py":4:5)
        tile.return %a, %b
    }
  )
}
"""


def test_pipeline_starts_with_the_generic_passes():
    assert PIPELINE[:len(TILE_PASSES)] == TILE_PASSES
    assert [n for n, _ in TILE_PASSES] == ["canonicalize", "fold", "cse", "dce"]
    assert all(callable(fn) for _, fn in PIPELINE)
    assert all(fn.__doc__ and sys.modules[fn.__module__].__doc__ for _, fn in TILE_PASSES)
    assert get_pass("cse") is dict(TILE_PASSES)["cse"]


def test_get_pass_unknown():
    with pytest.raises(ValueError, match="unknown pass 'nope'; passes are: canonicalize"):
        get_pass("nope")


def test_dump_sees_every_pass_in_order_and_stop_after():
    seen = []
    run_pipeline(parse(SOURCE), CompileOptions(), stop_after="cse", dump=lambda name, m: seen.append(name))
    assert seen == ["canonicalize", "fold", "cse"]
    with pytest.raises(ValueError, match="unknown pass"):
        run_pipeline(parse(SOURCE), stop_after="no_such_pass")


def test_options_reach_the_passes_as_keywords(monkeypatch):
    got = {}

    def spy(module, **options):
        got.update(options)
        return module

    monkeypatch.setattr(pipeline, "PIPELINE", [("spy", spy)])
    run_pipeline(parse(SOURCE), CompileOptions(num_warps=8, arch="sm_80"))
    assert got["num_warps"] == 8 and got["arch"] == "sm_80" and "fast_math" in got


def _breaking_pass(module, **options):
    """Leaves an op whose result type contradicts its type rule."""
    add = next(o for o in module.walk() if isinstance(o, T.AddOp))
    add.results[0].type = ScalarType(dt.int64)
    return module


def _failing_pass(module, **options):
    """Fails on an op, the way a pass reports a user-visible problem."""
    op = next(o for o in module.walk() if isinstance(o, T.AddOp))
    raise op.error("cannot lower this")


@pytest.mark.parametrize("debug, env, caught", [(True, "0", True), (False, "1", True), (False, "0", False)])
def test_verifier_after_each_pass(monkeypatch, debug, env, caught):
    monkeypatch.setenv("TILEC_VERIFY", env)
    monkeypatch.setattr(pipeline, "PIPELINE", [("breaker", _breaking_pass)])
    if caught:
        with pytest.raises(CompilationError, match="during pass 'breaker'.*do not match the type rule") as info:
            run_pipeline(parse(SOURCE), CompileOptions(debug=debug))
        assert info.value.loc == Location("kern.py", 3, 5)
    else:
        run_pipeline(parse(SOURCE), CompileOptions(debug=debug))


def test_pass_errors_become_compilation_errors(monkeypatch):
    monkeypatch.setattr(pipeline, "PIPELINE", [("failing", _failing_pass)])
    with pytest.raises(CompilationError) as info:
        run_pipeline(parse(SOURCE))
    err = info.value
    assert err.stage == "pass 'failing'" and err.kernel == "kern" and err.loc.line == 3
    assert str(err).startswith("kern.py:3:5: in kernel 'kern', during pass 'failing'")
    assert "cannot lower this" in str(err)


def test_internal_errors_name_their_type(monkeypatch):
    def crashing(module, **options):
        return {}["missing"]

    monkeypatch.setattr(pipeline, "PIPELINE", [("crashing", crashing)])
    with pytest.raises(CompilationError, match="during pass 'crashing': KeyError: 'missing'"):
        run_pipeline(parse(SOURCE))


def test_run_passes_validates_names_before_running():
    calls = []
    with pytest.raises(ValueError, match="unknown pass 'later_typo'"):
        run_passes(parse(SOURCE), ["cse", "later_typo"], dump=lambda n, m: calls.append(n))
    assert calls == []


def test_dump_to_directory(tmp_path):
    dump = dump_to_directory(tmp_path / "dumps", "kern/f32[?]")
    run_passes(parse(SOURCE), ["canonicalize", "cse"], dump=dump)
    files = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    assert files == ["kern_f32___.01.canonicalize.ir", "kern_f32___.02.cse.ir"]
    after_cse = parse((tmp_path / "dumps" / files[1]).read_text())
    assert sum(1 for o in after_cse.walk() if isinstance(o, T.AddOp)) == 0


def test_pass_names_lists_pipeline_order():
    assert pass_names() == [n for n, _ in PIPELINE]
