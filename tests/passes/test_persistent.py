"""make_persistent: the looped kernel computes what the plain one does (on the interpreter, for
any number of launched programs), its PTX takes the grid's extents and loops, and what it
cannot make persistent is a clear error."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import tilec as tc
from tilec import interpreter
from tilec.compiler import compile_kernel
from tilec.errors import CompilationError
from tilec.ir import parse, print_module
from tilec.lowering.passes.persistent import GRID_ARG_NAMES, make_persistent
from tilec.lowering.pipeline import pass_names, run_passes
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

import tilec.stdlib_kernels.matmul  # noqa: F401 - the module, not the function of the same name

mm = sys.modules["tilec.stdlib_kernels.matmul"]


@tc.kernel
def grid_ids(out, BLOCK: tc.constexpr):
    """out[z, y, x*BLOCK:(x+1)*BLOCK] = the program's coordinates and the grid's extents."""
    x = tc.program_id(0)
    y = tc.program_id(1)
    z = tc.program_id(2)
    code = x + 10 * y + 100 * z + 1000 * tc.num_programs(0) + 10000 * tc.num_programs(1) \
        + 100000 * tc.num_programs(2)
    lanes = tc.arange(0, BLOCK) + code * 0
    tc.store(out, index=(z, y, x), tile=(lanes + code * 8)[None, None, :])


@tc.kernel
def row_sums(x, out, BLOCK: tc.constexpr):
    """out[row] = sum(x[row, :]) for row = program_id(0), one row per program."""
    row = tc.program_id(0)
    t = tc.load(x, index=(row, 0), shape=(1, BLOCK))
    tc.store(out, index=(row,), tile=tc.sum(t, axis=1))


def _persistent_copy(module):
    """make_persistent applied to a copy (kernel.ir's module is shared with the interpreter)."""
    return make_persistent(parse(print_module(module)))


def _ids_reference(grid):
    gx, gy, gz = grid
    out = np.zeros((gz, gy, gx * 4), np.int32)
    grid_ids[grid](out, BLOCK=4)
    return out


@pytest.fixture
def interpret():
    # tc.interpret(), not TILEC_INTERPRET: the environment is read once per process
    with tc.interpret():
        yield


@pytest.mark.parametrize("grid", [(3, 2, 1), (5, 1, 3), (1, 4, 2)])
@pytest.mark.parametrize("launched", [1, 2, 7, 64])
def test_looped_kernel_matches_the_plain_one(interpret, grid, launched):
    plain = _ids_reference(grid)
    spec = grid_ids.specialization(plain, BLOCK=4)
    looped = _persistent_copy(grid_ids.ir(spec))
    got = np.zeros_like(plain)
    # the runtime's launch: a 1-D grid of `launched` programs, the requested grid as arguments
    interpreter.run(looped, [got, *grid], (launched,))
    np.testing.assert_array_equal(got, plain)


def test_reduction_in_the_body_on_the_interpreter(interpret):
    x = np.random.default_rng(1).standard_normal((37, 64)).astype(np.float32)
    want = np.zeros(37, np.float32)
    row_sums[(37,)](x, want, BLOCK=64)
    looped = _persistent_copy(row_sums.ir(row_sums.specialization(x, want, BLOCK=64)))
    got = np.zeros(37, np.float32)
    interpreter.run(looped, [x, got, 37, 1, 1], (5,))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_interpreter_launch_accepts_the_option(interpret):
    grid = (3, 2, 2)
    out = np.zeros((2, 2, 12), np.int32)
    grid_ids[grid](out, BLOCK=4, persistent=True)
    np.testing.assert_array_equal(out, _ids_reference(grid))


def test_pass_runs_after_the_generic_cleanups_and_before_the_loop_passes():
    names = pass_names()
    assert names.index("make_persistent") == names.index("dce") + 1
    assert names.index("make_persistent") < names.index("pipeline_loads")


def test_pass_is_idempotent_and_names_the_hidden_arguments():
    spec = grid_ids.specialization("out=i32[?,?,?], BLOCK=4")
    once = _persistent_copy(grid_ids.ir(spec))
    text = print_module(once)
    assert print_module(make_persistent(once)) == text
    func = once.func()
    assert func.attrs["arg_names"][-3:] == list(GRID_ARG_NAMES)
    assert len(func.attrs["arg_divisibility"]) == len(func.body.args)
    assert text.count("tile.program_id") == 1 and text.count("tile.num_programs") == 1


def _compile(kernel, sig, **options):
    return compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(**options), use_cache=False)


def _entry_params(ptx: str) -> int:
    head = ptx[ptx.index(".entry"):ptx.index(")")]
    return head.count(".param")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptx_takes_the_grid_and_loops(arch, monkeypatch):
    monkeypatch.setenv("TILEC_SKIP_PTXAS", "1")
    sig = "out=i32[?,?,?], BLOCK=4"
    plain = _compile(grid_ids, sig, arch=arch)
    looped = _compile(grid_ids, sig, arch=arch, persistent=True)
    assert not plain.metadata["persistent"] and looped.metadata["persistent"]
    assert [(s.kind, s.dim) for s in looped.params[-3:]] == [("grid", 0), ("grid", 1), ("grid", 2)]
    assert looped.params[:-3] == plain.params
    ptx = looped.asm["ptx"]
    assert _entry_params(ptx) == _entry_params(plain.asm["ptx"]) + 3
    # the hardware ids only start and stride the loop; y and z come from the virtual id
    assert "%ctaid.y" in plain.asm["ptx"] and "%ctaid.y" not in ptx and "%nctaid.z" not in ptx
    assert "%ctaid.x" in ptx and "%nctaid.x" in ptx
    # a backward branch: some label is branched to from below it
    labels = {m.group(1): m.start() for m in re.finditer(r"^(\$L__\w+):", ptx, re.M)}
    assert any(labels.get(m.group(1), 1 << 60) < m.start() for m in re.finditer(r"bra(?:\.uni)?\s+(\$L__\w+);", ptx))


@pytest.mark.slow
@pytest.mark.skipif(not find_ptxas(), reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_stdlib_matmul_kernel_compiles_persistent(arch):
    cfg = mm.config_for(2048, 2048, 1024, tc.bfloat16, target=arch)
    cfg = mm.MatmulConfig(cfg.bm, cfg.bn, cfg.bk, cfg.num_warps, cfg.num_stages)
    sig, cfg = mm.signature(2048, 2048, 1024, "bf16", target=arch, config=cfg)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages, arch=arch,
                  persistent=True)
    ptx, r = ck.asm["ptx"], ck.metadata["ptxas"]
    assert ck.metadata["persistent"] and ck.params[-1].kind == "grid"
    assert ("wgmma.mma_async" if arch == "sm_90a" else "mma.sync") in ptx
    if arch == "sm_90a":
        assert "cp.async.bulk.tensor.2d" in ptx  # the TMA ring still forms inside the tile loop
    assert r["spill_stores"] == r["spill_loads"] == 0 and not r["warnings"]


_EARLY_RETURN = """
module {
  tile.func {sym_name = "k", arg_names = ["out", "n"]} (
    {
      ^bb0(%out: ptr<i32>, %n: i32):
        %x = tile.program_id {axis = 0} : i32
        %c = tile.cmp %x, %n {pred = "ge"} : i1
        tile.if %c (
          {
            ^bb0():
              tile.return loc("early.py":7:9)
          },
          {
            ^bb0():
              tile.yield
          }
        )
        tile.return
    }
  )
}
"""


def test_early_return_is_an_error_naming_the_line():
    with pytest.raises(CompilationError, match="persistent=True needs") as info:
        run_passes(parse(_EARLY_RETURN), ["make_persistent"], CompileOptions(persistent=True))
    assert "early.py:7:9" in str(info.value) and "make_persistent" in str(info.value)
    # without the option the same IR is left alone
    assert "tile.for" not in print_module(run_passes(parse(_EARLY_RETURN), ["make_persistent"]))
