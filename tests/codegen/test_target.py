"""Target selection and the safety of the LLVM stage: bad requests are errors, never a
dead process."""
import subprocess
import sys
import textwrap

import pytest

from tilec.errors import CompilationError
from tilec.lowering import target
from tilec.options import CompileOptions

ABORTS_LLVM = """
target triple = "nvptx64-nvidia-cuda"
declare void @llvm.nvvm.setmaxnreg.inc.sync.aligned.u32(i32)
define ptx_kernel void @k() {
  call void @llvm.nvvm.setmaxnreg.inc.sync.aligned.u32(i32 240)
  ret void
}
"""

EMPTY_KERNEL = """
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k() {
  ret void
}
"""


def test_ptx_version_is_the_arch_minimum_without_a_driver_cap():
    assert target.ptx_version_for("sm_80", cap=None) >= 70
    assert target.ptx_version_for("sm_90a", cap=90) == 80
    assert target.ptx_version_for("sm_90a", needed=83, cap=90) == 83


def test_ptx_version_beyond_driver_or_llvm_is_a_clear_error():
    with pytest.raises(ValueError, match="driver loads at most 7.8"):
        target.ptx_version_for("sm_90a", cap=78)
    with pytest.raises(ValueError, match="newer than this LLVM"):
        target.ptx_version_for("sm_80", needed=99, cap=None)


def test_invalid_arch_ptx_pairs_never_reach_llvm():
    with pytest.raises(ValueError, match="not valid for sm_90a"):
        target.target_machine("sm_90a", 70)  # LLVM would exit the process on this pair
    with pytest.raises(ValueError, match="unsupported arch"):
        target.target_machine("sm_70", 70)


def test_unsupported_arch_is_a_compilation_error():
    with pytest.raises(CompilationError, match="unsupported arch 'sm_75'"):
        target.optimize_and_emit(EMPTY_KERNEL, "sm_75")


def test_intrinsic_the_arch_lacks_is_caught_before_llvm():
    with pytest.raises(CompilationError, match="setmaxnreg.*needs sm_100a or sm_90a; the target is sm_80"):
        target.optimize_and_emit(ABORTS_LLVM, "sm_80")
    assert ".entry k" in target.optimize_and_emit(ABORTS_LLVM, "sm_90a").ptx


def test_malformed_module_is_a_compilation_error():
    with pytest.raises(CompilationError, match="LLVM rejected"):
        target.optimize_and_emit("define void @k( {", "sm_80")


def test_isolated_llvm_abort_leaves_the_process_alive():
    # Bypass the intrinsic check to make LLVM really abort, inside the forked child.
    with pytest.raises(RuntimeError, match="LLVM aborted .*Cannot select: intrinsic %llvm.nvvm.setmaxnreg"):
        target._run_in_child(ABORTS_LLVM, "sm_80", 70, 3)
    ok = target._run_in_child(EMPTY_KERNEL, "sm_80", 70, 3)
    assert ".entry k" in ok[1]


@pytest.mark.slow
def test_bad_options_are_errors_not_crashes_in_a_fresh_process():
    # A user's process, start to end: bad arch, bad num_warps, impossible PTX request.
    script = textwrap.dedent("""
        import tilec
        from tilec.compiler import compile_kernel
        from tilec.lowering import target
        from tilec.options import CompileOptions
        from tilec.errors import CompilationError

        @tilec.kernel
        def k(x, BLOCK: tilec.constexpr):
            tilec.store(x, index=(0,), tile=tilec.load(x, index=(0,), shape=(BLOCK,)) + 1.0)

        spec = k.specialization("x=f32[?], BLOCK=128")
        for opts in (dict(arch="sm_70"), dict(arch="sm_1000"), dict(num_warps=3), dict(arch="bogus")):
            try:
                compile_kernel(k, spec, CompileOptions(**opts), use_cache=False)
            except CompilationError as e:
                print("error:", str(e).splitlines()[0])
        try:
            target.ptx_version_for("sm_100a", cap=80)
        except ValueError as e:
            print("error:", e)
        print("alive")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "alive"
    assert sum(1 for ln in lines if ln.startswith("error:")) == 5, proc.stdout
    assert "unsupported arch 'sm_70'" in proc.stdout and "num_warps" in proc.stdout


def test_options_are_validated_before_compiling():
    from tilec.compiler import compile_module
    from tilec.ir import parse
    m = parse(textwrap.dedent("""
        module {
          tile.func {sym_name = "k", arg_names = []} (
            {
              ^bb0():
                tile.return
            }
          )
        }
    """))
    ck = compile_module(m, CompileOptions(arch="sm_80").validated(), run_ptxas=False)
    assert ck.name == "k" and ck.metadata["arch"] == "sm_80" and ck.metadata["ptx_version"] == "7.0"
    assert ".target sm_80" in ck.asm["ptx"]
