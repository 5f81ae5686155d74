"""The pass driver: the phases and the passes they run per target, order, stop_after, dumps,
verification and error wrapping."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tilec import dtypes as dt
from tilec.errors import CompilationError
from tilec.ir import Location, ScalarType, parse, tile_ops as T
from tilec.lowering import pipeline
from tilec.lowering.pipeline import (PASSES, PHASES, TILE_PASSES, dump_to_directory, get_pass, pass_names,
                                     passes_for, phases_for, run_passes, run_pipeline)
from tilec.options import CompileOptions
from tilec.target import Target

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


def _options(arch, **kw):
    return CompileOptions(arch=arch, **kw).validated()


def test_pipeline_starts_with_the_generic_passes():
    assert pass_names()[:len(TILE_PASSES)] == [n for n, _ in TILE_PASSES] == ["canonicalize", "fold", "cse", "dce"]
    assert all(callable(fn) for fn in PASSES.values())
    assert all(fn.__doc__ and sys.modules[fn.__module__].__doc__ for _, fn in TILE_PASSES)
    assert [name for name, _ in PHASES] == ["legalize", "optimize_for_target", "lower_to_gpu", "schedule", "allocate"]


# The passes each target runs with default options: sm_90a has wgmma and TMA, sm_90 and
# sm_100a have TMA but no wgmma (tilec's TMA copies feed wgmma only), sm_80 neither.
_CORE = ["canonicalize", "fold", "cse", "dce", "index_width"]
_GPU = ["lower_views", "axis_info", "assign_layouts", "accelerate_dot", "share_staged_operands", "pipeline_loads",
        "prefetch_loads"]
_END = ["lower_reductions", "lower_scans", "allocate_shared"]


@pytest.mark.parametrize("arch, passes", [
    ("sm_80", _CORE + _GPU + _END),
    ("sm_86", _CORE + _GPU + _END),
    ("sm_90", _CORE + _GPU + _END),
    ("sm_100a", _CORE + _GPU + _END),
    ("sm_90a", _CORE + ["tma_loads", "tma_stores"] + _GPU[:-1]
     + ["defer_wgmma_waits", "prefetch_loads", "drop_multicast"] + _END),
])
def test_passes_per_target(arch, passes):
    assert passes_for(Target.from_arch(arch), _options(arch)) == passes


def test_options_add_and_remove_passes():
    t90a, t80 = Target.from_arch("sm_90a"), Target.from_arch("sm_80")
    ws = passes_for(t90a, _options("sm_90a", warp_specialize=True, persistent=True, dependent_launch=True))
    assert ws[4:7] == ["make_persistent", "wait_for_prior_grid", "index_width"]
    assert "warp_specialize" in ws and "drop_multicast" not in ws
    # no warp specialization off wgmma targets, no dependent launch before sm_90
    off = passes_for(t80, _options("sm_80", warp_specialize=True, dependent_launch=True))
    assert "warp_specialize" not in off and "wait_for_prior_grid" not in off
    # TMA off: no TMA passes, nothing to drop multicast from; 2 stages: stores only
    assert not {"tma_loads", "tma_stores", "drop_multicast"} & set(passes_for(t90a, _options("sm_90a", tma=False)))
    two = passes_for(t90a, _options("sm_90a", num_stages=2))
    assert "tma_loads" not in two and "tma_stores" in two
    # sanitizer mode: TMA loads stay, the epilogue keeps plain stores (initcheck sees those)
    san = passes_for(t90a, _options("sm_90a", initcheck=True))
    assert "tma_loads" in san and "tma_stores" not in san


def test_phases_partition_the_passes_in_pipeline_order():
    opts = _options("sm_90a", warp_specialize=True, persistent=True, dependent_launch=True)
    phases = phases_for(opts.target, opts)
    flat = [n for _, names in phases for n in names]
    assert flat == passes_for(opts.target, opts)
    order = pass_names()
    assert flat == sorted(flat, key=order.index) and set(flat) <= set(PASSES)
    assert dict(phases)["allocate"][-1] == "allocate_shared"


def test_run_passes_skips_what_the_target_does_not_run():
    # tma_loads is not a pass of sm_80: asked for by name, it is skipped as in a compile
    seen = []
    run_passes(parse(SOURCE), ["cse", "tma_loads", "dce"], _options("sm_80"), dump=lambda n, m: seen.append(n))
    assert seen == ["cse", "dce"]


def test_run_pipeline_stamps_what_codegen_reads():
    m = run_pipeline(parse(SOURCE), _options("sm_80", num_warps=2, fast_math=True))
    assert {k: m.attrs[k] for k in ("target", "num_warps", "num_threads", "cluster", "fast_math", "debug")} == \
        {"target": "sm_80", "num_warps": 2, "num_threads": 64, "cluster": 1, "fast_math": True, "debug": False}


def test_get_pass_unknown():
    with pytest.raises(ValueError, match="unknown pass 'nope'; passes are: canonicalize"):
        get_pass("nope")


def test_dump_sees_every_pass_in_order_and_stop_after():
    seen = []
    run_pipeline(parse(SOURCE), CompileOptions(), stop_after="cse", dump=lambda name, m: seen.append(name))
    assert seen == ["canonicalize", "fold", "cse"]
    with pytest.raises(ValueError, match="unknown pass"):
        run_pipeline(parse(SOURCE), stop_after="no_such_pass")


def _only(monkeypatch, name, fn):
    """The pipeline runs only `fn`, as the pass `name`."""
    monkeypatch.setitem(PASSES, name, lambda m, t, o: fn(m))
    monkeypatch.setattr(pipeline, "passes_for", lambda t, o: [name])


def test_the_pipeline_hands_passes_the_target_and_options(monkeypatch):
    got = {}

    def spy(module, target, options):
        got.update(target=target, options=options)
        return module

    monkeypatch.setitem(PASSES, "spy", spy)
    monkeypatch.setattr(pipeline, "passes_for", lambda t, o: ["spy"])
    run_pipeline(parse(SOURCE), CompileOptions(num_warps=8, arch="sm_80"))
    assert got["target"] is Target.from_arch("sm_80") and got["options"].num_warps == 8


def _breaking_pass(module):
    """Leaves an op whose result type contradicts its type rule."""
    add = next(o for o in module.walk() if isinstance(o, T.AddOp))
    add.results[0].type = ScalarType(dt.int64)
    return module


def _failing_pass(module):
    """Fails on an op, the way a pass reports a user-visible problem."""
    op = next(o for o in module.walk() if isinstance(o, T.AddOp))
    raise op.error("cannot lower this")


@pytest.mark.parametrize("debug, env, caught", [(True, "0", True), (False, "1", True), (False, "0", False)])
def test_verifier_after_each_pass(monkeypatch, debug, env, caught):
    monkeypatch.setenv("TILEC_VERIFY", env)
    _only(monkeypatch, "breaker", _breaking_pass)
    if caught:
        with pytest.raises(CompilationError, match="during pass 'breaker'.*do not match the type rule") as info:
            run_pipeline(parse(SOURCE), CompileOptions(debug=debug))
        assert info.value.loc == Location("kern.py", 3, 5)
    else:
        run_pipeline(parse(SOURCE), CompileOptions(debug=debug))


def test_pass_errors_become_compilation_errors(monkeypatch):
    _only(monkeypatch, "failing", _failing_pass)
    with pytest.raises(CompilationError) as info:
        run_pipeline(parse(SOURCE))
    err = info.value
    assert err.stage == "pass 'failing'" and err.kernel == "kern" and err.loc.line == 3
    assert str(err).startswith("kern.py:3:5: in kernel 'kern', during pass 'failing'")
    assert "cannot lower this" in str(err)


def test_internal_errors_name_their_type(monkeypatch):
    def crashing(module):
        return {}["missing"]

    _only(monkeypatch, "crashing", crashing)
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
    assert pass_names() == list(PASSES)


_ARCH_TEST = re.compile(r"""["']sm_\d+a?["']|\barch_number\b|\barch\s*(==|!=|<|>|\bin\b)|\.capability\b""")


def test_no_pass_tests_the_arch():
    # The pipeline decides from the Target's features which passes run; a pass gets plain
    # arguments (num_warps, wgmma, shared_limit, ...), never an arch to compare.
    root = Path(pipeline.__file__).parent / "passes"
    found = [f"{path.name}:{i}: {line.strip()}" for path in sorted(root.glob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if _ARCH_TEST.search(line.split("#")[0])]
    assert not found, found


def test_the_arch_test_finds_comparisons():
    assert all(_ARCH_TEST.search(s) for s in ['if arch == "sm_90a":', "arch_number(a) >= 90",
                                                "if t.capability >= (9, 0)", "x = 'sm_80'"])
    assert not _ARCH_TEST.search("limit: int, arch: str")
