"""Line information in the PTX: `.file`/`.loc` name the user's Python file and the lines of
its loads, stores and dots; the instructions are the same with it and without it; ptxas
takes it; `lineinfo=False` / TILEC_LINEINFO=0 leave it out."""
import ast
import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import pytest

from tilec.compiler import compile_kernel
from tilec.errors import CompilationError
from tilec.lowering.ptxas import assemble, find_ptxas, has_line_info, strip_line_info
from tilec.lowering.target import optimize_and_emit
from tilec.options import CompileOptions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)", re.M)


def _load(path: Path, name: str = None):
    sys.path.insert(0, str(path.parent))  # examples import their _harness
    try:
        spec = importlib.util.spec_from_file_location(name or f"lineinfo_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


def _compile(mod, kernel: str, arch: str, sig: str = None, **options):
    k = getattr(mod, kernel)
    opts = {**getattr(mod, "OPTIONS", {}).get(kernel, {}), **options}
    return compile_kernel(k, k.specialization(sig or mod.SIGNATURES[kernel]),
                          CompileOptions(arch=arch, **opts), use_cache=False)


def _loc_lines(ptx: str):
    """{file path: set of line numbers} of the PTX's .loc directives (line 0: no line)."""
    files = {n: p for n, p in _FILE.findall(ptx)}
    out = {}
    for n, line, _col in _LOC.findall(ptx):
        if int(line):
            out.setdefault(files[n], set()).add(int(line))
    return out


def _kernel_lines(path: Path, kernel: str, calls=("load", "store", "dot")):
    """(first, last line of the kernel's def, lines of its tc.<calls>(...)), from the source."""
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel)
    wanted = {n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr in calls and isinstance(n.func.value, ast.Name) and n.func.value.id == "tc"}
    return fn.lineno, fn.end_lineno, wanted


@pytest.mark.parametrize("example,kernel", [("vector_add.py", "add_kernel"), ("vector_add.py", "add_kernel_ptr"),
                                            ("fused_softmax.py", "softmax_kernel"), ("matmul.py", "matmul_kernel")])
def test_loc_lines_are_the_kernels_memory_and_dot_lines(example, kernel):
    path = EXAMPLES / example
    compiled = _compile(_load(path), kernel, "sm_90a")
    ptx = compiled.asm["ptx"]
    assert compiled.metadata["lineinfo"] is True and has_line_info(ptx)
    by_file = _loc_lines(ptx)
    assert list(by_file) == [str(path)]   # absolute path of the example, nothing else
    first, last, wanted = _kernel_lines(path, kernel)
    assert wanted, "the kernel has loads and stores"
    lines = by_file[str(path)]
    assert wanted <= lines, f"lines of tc.load/store/dot without a .loc: {sorted(wanted - lines)}"
    # every line is in the kernel (the decorator line is where the kernel's code is defined)
    assert all(first - 1 <= n <= last for n in lines), sorted(lines)


@pytest.mark.parametrize("example,kernel,arch", [("vector_add.py", "add_kernel", "sm_80"),
                                                 ("vector_add.py", "add_kernel_ptr", "sm_90a"),
                                                 ("fused_softmax.py", "softmax_kernel", "sm_80"),
                                                 ("layer_norm.py", None, "sm_90a"),
                                                 ("matmul.py", "matmul_kernel", "sm_90a")])
def test_line_information_leaves_the_instructions_unchanged(example, kernel, arch):
    mod = _load(EXAMPLES / example)
    kernel = kernel or next(iter(mod.SIGNATURES))
    on = _compile(mod, kernel, arch)
    off = _compile(mod, kernel, arch, lineinfo=False)
    assert has_line_info(on.asm["ptx"]) and not has_line_info(off.asm["ptx"])
    assert ".file" not in off.asm["ptx"] and not off.metadata["lineinfo"]
    assert strip_line_info(on.asm["ptx"]) == off.asm["ptx"]
    if find_ptxas():  # the same registers, spills and shared memory from ptxas
        assert on.metadata["ptxas"] == off.metadata["ptxas"]


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found (pip install nvidia-cuda-nvcc)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptxas_accepts_the_line_information(arch):
    ptx = _compile(_load(EXAMPLES / "fused_softmax.py"), "softmax_kernel", arch, lineinfo=True).asm["ptx"]
    result = assemble(ptx, arch)   # -lineinfo, since the PTX has .loc
    assert result.cubin and not result.warnings, result.log


def test_lineinfo_off_by_option_and_environment(monkeypatch):
    monkeypatch.delenv("TILEC_LINEINFO", raising=False)
    assert CompileOptions().lineinfo is True
    for off in ("0", "false", "off"):
        monkeypatch.setenv("TILEC_LINEINFO", off)
        assert CompileOptions().lineinfo is False
    monkeypatch.setenv("TILEC_LINEINFO", "1")
    assert CompileOptions().lineinfo is True
    mod = _load(EXAMPLES / "vector_add.py")
    compiled = mod.add_kernel.compile(mod.SIGNATURES["add_kernel"], arch="sm_80", lineinfo=False)
    assert not has_line_info(compiled.asm["ptx"]) and "lineinfo = false" in compiled.asm["gpu"]
    # debug=True keeps line information even with lineinfo off (as before the option existed)
    debug = mod.add_kernel.compile(mod.SIGNATURES["add_kernel"], arch="sm_80", lineinfo=False, debug=True)
    assert has_line_info(debug.asm["ptx"])


def test_a_func_from_another_file_is_located_in_that_file(tmp_path):
    (tmp_path / "lineinfo_helpers.py").write_text(textwrap.dedent("""\
        import tilec as tc


        @tc.func
        def scaled(t, s):
            # a comment, so that the helper's line is not the kernel's
            return t * s
        """))
    kern = tmp_path / "lineinfo_kern.py"
    kern.write_text(textwrap.dedent("""\
        import tilec as tc
        from lineinfo_helpers import scaled


        @tc.kernel
        def k(x, out, BLOCK: tc.constexpr):
            t = tc.load(x, index=(tc.program_id(0),), shape=(BLOCK,))
            tc.store(out, index=(tc.program_id(0),), tile=scaled(t, 3.0))
        """))
    mod = _load(kern, "lineinfo_kern")
    ptx = _compile(mod, "k", "sm_80", sig="x=f32[?], out=f32[?], BLOCK=256").asm["ptx"]
    by_file = _loc_lines(ptx)
    helper_line = next(i for i, ln in enumerate((tmp_path / "lineinfo_helpers.py").read_text().splitlines(), 1)
                       if "return t * s" in ln)
    assert by_file[str(tmp_path / "lineinfo_helpers.py")] == {helper_line}
    assert {7, 8} <= by_file[str(kern)]


def test_a_kernel_that_moved_is_compiled_again_with_its_new_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cache"))
    src = textwrap.dedent("""\
        import tilec as tc


        @tc.kernel
        def moved(x, out, BLOCK: tc.constexpr):
            tc.store(out, index=(0,), tile=tc.load(x, index=(0,), shape=(BLOCK,)))
        """)
    path = tmp_path / "lineinfo_moved.py"
    lines = []
    for pad in ("", "\n\n\n"):   # the same source, three lines further down
        path.write_text(pad + src)
        k = _load(path, "lineinfo_moved").moved
        ptx = compile_kernel(k, k.specialization("x=f32[?], out=f32[?], BLOCK=128"),
                             CompileOptions(arch="sm_80")).asm["ptx"]
        lines.append(max(_loc_lines(ptx)[str(path)]))
    assert lines[1] == lines[0] + 3


_BAD_DEBUG_INFO = """\
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @k(ptr addrspace(1) %p) !dbg !5 {
  store i32 1, ptr addrspace(1) %p, align 4, !dbg !9
  ret void, !dbg !9
}

define ptx_kernel void @other(ptr addrspace(1) %p) !dbg !8 {
  ret void
}

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!2}
!0 = distinct !DICompileUnit(language: DW_LANG_Python, file: !1, producer: "tilec", isOptimized: true, runtimeVersion: 0, emissionKind: DebugDirectivesOnly)
!1 = !DIFile(filename: "k.py", directory: "/src")
!2 = !{i32 2, !"Debug Info Version", i32 3}
!4 = !DISubroutineType(types: !{})
!5 = distinct !DISubprogram(name: "k", file: !1, line: 1, type: !4, scopeLine: 1, spFlags: DISPFlagDefinition, unit: !0)
!8 = distinct !DISubprogram(name: "other", file: !1, line: 1, type: !4, scopeLine: 1, spFlags: DISPFlagDefinition, unit: !0)
!9 = !DILocation(line: 3, column: 5, scope: !8)
"""


def test_line_information_llvm_drops_as_invalid_is_an_error_not_a_silent_loss():
    # a location whose scope is another function's subprogram: LLVM's parser strips all of
    # the module's debug information (a warning on stderr) instead of failing
    with pytest.raises(CompilationError, match="dropped the line information"):
        optimize_and_emit(_BAD_DEBUG_INFO, "sm_80", kernel="k")
    fixed = _BAD_DEBUG_INFO.replace("scope: !8)", "scope: !5)")
    assert has_line_info(optimize_and_emit(fixed, "sm_80", kernel="k").ptx)


def test_cli_ptx_with_and_without_line_information(capsys, monkeypatch):
    from tilec.cli import main
    monkeypatch.setenv("TILEC_SKIP_PTXAS", "1")
    target = f"{EXAMPLES / 'vector_add.py'}:add_kernel"
    assert main(["ptx", target, "--arch", "sm_80"]) == 0
    on = capsys.readouterr().out
    assert main(["ptx", target, "--arch", "sm_80", "--no-lineinfo"]) == 0
    off = capsys.readouterr().out
    assert has_line_info(on) and not has_line_info(off) and strip_line_info(on) == off
    monkeypatch.setenv("TILEC_LINEINFO", "0")   # the environment's default, which --lineinfo overrides
    assert main(["ptx", target, "--arch", "sm_80"]) == 0
    assert capsys.readouterr().out == off
    assert main(["ptx", target, "--arch", "sm_80", "--lineinfo"]) == 0
    assert capsys.readouterr().out == on
