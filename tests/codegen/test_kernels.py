"""Every codegen rule through the whole compiler: DSL kernel -> PTX -> ptxas, for sm_80
and sm_90a, plus checks of the PTX text where the rule promises an instruction."""
import pytest

from kernels import KERNELS
from tilec.compiler import compile_kernel
from tilec.lowering.ptxas import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from ptxas_checks import assert_assembles_clean

ARCHS = ["sm_80", "sm_90a"]


def compile_sig(name, arch, **opts):
    kernel, sig = KERNELS[name]
    return compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch=arch, **opts), use_cache=False)


def test_ptxas_is_available():
    assert find_ptxas(), "ptxas not found: install the test extra (pip install -e .[test])"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compiles_and_assembles(name, arch):
    ck = compile_sig(name, arch)
    assert ck.asm["ptx"].count(".entry") == 1
    assert ck.asm["cubin"], "ptxas produced no cubin"
    report = ck.metadata["ptxas"]
    assert_assembles_clean(report)
    assert f".maxntid {32 * ck.metadata['num_warps']}" in ck.asm["ptx"]


@pytest.mark.slow
def test_fast_math_uses_approximations():
    accurate = compile_sig("math_f32", "sm_90a").asm["ptx"]
    fast = compile_sig("math_f32", "sm_90a", fast_math=True).asm["ptx"]
    for instr in ("ex2.approx", "lg2.approx", "sin.approx", "cos.approx", "tanh.approx", "rsqrt.approx"):
        assert instr in fast and instr not in accurate, instr


def test_f8_conversion_instruction_by_arch():
    assert "cvt.rn.satfinite.e4m3x2.f32" in compile_sig("casts", "sm_90a").asm["ptx"]
    sm80 = compile_sig("casts", "sm_80").asm["ptx"]
    assert "e4m3" not in sm80  # emulated with integer operations
    assert "cvt.rn.bf16.f32" in sm80


def test_debug_ops_call_system_functions():
    ptx = compile_sig("debug_ops", "sm_90a").asm["ptx"]
    assert "vprintf" in ptx and "__assertfail" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_atomics_keep_order_and_scope(arch):
    ptx = compile_sig("atomics", arch).asm["ptx"]
    assert "atom.acq_rel.gpu.global.add.f32" in ptx  # the default sem/scope of tc.atomic_add
    assert "atom.relaxed.gpu.global.cas.b32" in ptx  # f32 max: a CAS loop, relaxed as asked
    assert ".sys." not in ptx
    ints = compile_sig("int_atomics", arch).asm["ptx"]
    assert "atom.acq_rel.gpu.global.cas.b32" in ints
    assert "atom.acq_rel.gpu.global.max.s32" in ints
    assert "atom.release.cta.global.exch.b32" in ints


def test_debug_adds_line_info_that_ptxas_accepts():
    import inspect
    from kernels import control_flow
    plain = compile_sig("control_flow", "sm_90a", lineinfo=False).asm["ptx"]
    ck = compile_sig("control_flow", "sm_90a", debug=True, lineinfo=False)  # debug=True implies it
    assert ".loc" not in plain
    first = inspect.getsourcelines(control_flow.fn)[1] if hasattr(control_flow, "fn") else None
    lines = {int(ln.split()[2]) for ln in ck.asm["ptx"].splitlines() if ln.strip().startswith(".loc")}
    assert lines and (first is None or max(lines) > first)
    assert 'kernels.py"' in ck.asm["ptx"]  # the .file directive names the user's file
    assert ck.asm["cubin"]


def test_bools_are_bytes_in_memory():
    # numpy/torch bool arrays hold one byte per element; a vector of i1 would be bit-packed
    ck = compile_sig("bools", "sm_80")
    accesses = [ln for ln in ck.asm["llvm"].splitlines() if " load " in ln or " store " in ln]
    assert accesses and not any("i1>" in ln or "load i1" in ln or "store i1" in ln for ln in accesses)
    assert "ld.global.v4.b32" in ck.asm["ptx"]  # 16 bools per access
