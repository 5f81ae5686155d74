"""CompileOptions.initcheck on the CPU: masked vector loads whose groups hold bytes no mask
wants stop at the end of the view they read from (codegen/bounded.py). The PTX keeps the
16-byte loads of the groups inside the view and adds, in a branch that only a thread reaching
the view's end takes, the pieces before the end (whole words, a 2-byte tail); realigned
loads the same; without the option the PTX has none of it; ptxas assembles both for sm_80
and sm_90a; TILEC_INITCHECK=1 sets the default."""
from __future__ import annotations

import re
import warnings

import pytest

import tilec as tc
from tilec.ir import tile_ops as T
from tilec.lowering.codegen.bounded import source_view
from tilec.lowering.passes.lower_views import lower_views
from tilec.options import CompileOptions

from realign_kernels import shifted_copy


@tc.kernel
def tail_view_copy(x, y, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    tc.store(y, index=(pid,), tile=tc.load(x, index=(pid,), shape=(BLOCK,)))


@tc.kernel
def tail_copy(x, y, BLOCK: tc.constexpr):
    # a 1-D view of unknown length: its last group is ragged (the mask changes inside it)
    pid = tc.program_id(0)
    tc.store(y, index=(pid,), tile=tc.load(x, index=(pid,), shape=(BLOCK,), padding=0.0))


@tc.kernel
def loop_copy(x, y, n, BLOCK: tc.constexpr):
    # a pointer carried through a loop: no view known, so no bound
    p = x.ptr + tc.arange(0, BLOCK)
    for k in range(n):
        t = tc.load(p, mask=tc.arange(0, BLOCK) < n - k * BLOCK, other=0.0)
        tc.store(y.ptr + k * BLOCK + tc.arange(0, BLOCK), t, mask=tc.arange(0, BLOCK) < n - k * BLOCK)
        p = p + BLOCK


def _ptx(kernel, sig, arch="sm_90a", **opts):
    c = kernel.compile(kernel.specialization(sig), arch=arch, num_warps=4, **opts)
    ptxas = c.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    return c.asm["ptx"], ptxas


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, piece", [("f16", "u16"), ("bf16", "u16"), ("f32", None)])
def test_ragged_view_loads_read_only_inside_the_view(arch, dtype, piece):
    sig = f"x={dtype}[?], y={dtype}[?], BLOCK=1024"
    ptx, ptxas = _ptx(tail_copy, sig, arch, initcheck=True)
    # the groups inside the view: one 16-byte load each, as without the option
    assert re.search(r"^\s*ld\.global\.v4\.b32 ", ptx, re.M), ptx
    # the pieces: whole words predicated on the bytes left before the end, the 2-byte tail
    assert re.search(r"@%bq ld\.global\.b32 %r\d+, \[%rd\d+\+12\];", ptx), ptx
    assert bool(re.search(r"@%bq ld\.global\.u16 ", ptx)) == (piece is not None), ptx
    assert not re.search(r"@%bq ld\.global\.v", ptx), "no piece is a whole vector"
    assert ptxas["spill_stores"] == 0
    plain, _ = _ptx(tail_copy, sig, arch, initcheck=False)
    assert "%bn" not in plain and "%bq" not in plain and re.search(r"ld\.global\.v4\.b32 ", plain)


def test_one_tail_branch_per_load_and_the_inside_path_unchanged():
    ptx, _ = _ptx(tail_copy, "x=f16[?], y=f16[?], BLOCK=4096", initcheck=True)
    plain, _ = _ptx(tail_copy, "x=f16[?], y=f16[?], BLOCK=4096")
    groups = len(re.findall(r"ld\.global\.v4\.b32 ", plain))
    assert groups == 4, plain  # 4096 f16 over 128 threads: four 16-byte groups each
    assert len(re.findall(r"^\s*ld\.global\.v4\.b32 ", ptx, re.M)) == groups
    assert ptx.count("// begin inline asm") == groups  # one piece reader per group, in the tail branch
    assert ptx.count("bra") - plain.count("bra") <= 2 + 2 * groups  # one tail branch, and the groups' guards


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_realigned_loads_read_their_blocks_only_inside_the_view(arch):
    sig = "x=f16[?], y=f16[?], shift=i32, n=i32, REALIGN=True, BLOCK=1024"
    ptx, ptxas = _ptx(shifted_copy, sig, arch, initcheck=True)
    assert re.search(r"^\s*ld\.global\.v4\.b32 ", ptx, re.M)      # the blocks inside x
    assert re.search(r"@%bq ld\.global\.u16 ", ptx)                 # pieces of a block x's end cuts
    assert ptxas["spill_stores"] == 0
    plain, _ = _ptx(shifted_copy, sig, arch)
    assert "%bq" not in plain


def test_loop_carried_pointers_have_no_view_and_read_as_before():
    sig = "x=f16[?], y=f16[?], n=i32, BLOCK=1024"
    on, _ = _ptx(loop_copy, sig, initcheck=True)
    off, _ = _ptx(loop_copy, sig)
    assert on == off


@pytest.mark.parametrize("kernel, sig", [
    (shifted_copy, "x=f16[?], y=f16[?], shift=i32, n=i32, REALIGN=True, BLOCK=1024"),   # x.ptr + offsets
    (tail_view_copy, "x=f16[?], y=f16[?], BLOCK=1024"),                                 # a view load
])
def test_source_view_follows_offsets_and_shapes_to_the_view(kernel, sig):
    func = lower_views(kernel.ir(kernel.specialization(sig))).ops[0]
    x = func.regions[0].block.args[0]
    loads = [op for op in func.walk() if isinstance(op, T.LoadMaskedOp)]
    assert loads and all(source_view(op.operands[0]) is x for op in loads)


def test_source_view_stops_at_a_loop_carried_pointer():
    func = loop_copy.ir(loop_copy.specialization("x=f16[?], y=f16[?], n=i32, BLOCK=1024")).ops[0]
    loads = [op for op in func.walk() if isinstance(op, T.LoadMaskedOp)]
    assert loads and all(source_view(op.operands[0]) is None for op in loads)


def test_the_environment_sets_the_default(monkeypatch):
    monkeypatch.delenv("TILEC_INITCHECK", raising=False)
    assert CompileOptions().initcheck is False
    monkeypatch.setenv("TILEC_INITCHECK", "1")
    assert CompileOptions().initcheck is True
    monkeypatch.setenv("TILEC_INITCHECK", "0")
    assert CompileOptions().initcheck is False


def test_under_compute_sanitizer_an_unset_mode_warns_once(monkeypatch):
    from tilec import options as O
    monkeypatch.setattr(O, "_warned", [])
    monkeypatch.delenv("TILEC_INITCHECK", raising=False)
    monkeypatch.setenv(O.SANITIZER_ENV, "49152")
    with pytest.warns(RuntimeWarning, match="TILEC_INITCHECK=1"):
        assert CompileOptions().initcheck is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CompileOptions()                                   # once per process
        monkeypatch.setattr(O, "_warned", [])
        monkeypatch.setenv("TILEC_INITCHECK", "1")         # the mode chosen: no warning
        assert CompileOptions().initcheck is True
