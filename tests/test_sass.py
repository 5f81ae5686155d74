"""`tilec sass FILE:KERNEL`: the kernel's SASS with its Python lines (ptxas -lineinfo, then
nvdisasm -g), and a clear error when no disassembler is found."""
import re
import stat
from pathlib import Path

import pytest

from tilec.cli import main
from tilec.lowering import sass
from tilec.lowering.ptxas import find_ptxas

ROOT = Path(__file__).resolve().parent.parent
VECTOR_ADD = ROOT / "examples" / "vector_add.py"
_ANNOTATION = re.compile(r"^\s*# (?P<file>\S+):(?P<line>\d+)(?:  (?P<text>.*))?$")


def test_annotate_replaces_each_line_mark_with_the_source_line(tmp_path):
    src = tmp_path / "k.py"
    src.write_text("import tilec as tc\n\n    a = tc.load(x, index=(0,), shape=(4,))\n")
    listing = ("        /*0000*/ LDC R1, c[0x0][0x28] ;\n"
               f'\t//## File "{src}", line 3\n'
               "        /*0010*/ LDG.E R2, desc[UR4][R2.64] ;\n"
               f'\t//## File "{src}", line 0\n'
               "        /*0020*/ EXIT ;\n")
    out = sass.annotate(listing).splitlines()
    assert out[0] == "        /*0000*/ LDC R1, c[0x0][0x28] ;"
    m = _ANNOTATION.match(out[1])
    assert m and Path(m["file"]).resolve() == src and m["line"] == "3"
    assert m["text"] == "a = tc.load(x, index=(0,), shape=(4,))"
    assert out[2].endswith("LDG.E R2, desc[UR4][R2.64] ;")
    assert _ANNOTATION.match(out[3])["text"] is None   # line 0: no source line to show
    assert "//##" not in "\n".join(out)


@pytest.mark.skipif(find_ptxas() is None or sass.find_tool("nvdisasm") is None,
                    reason="needs ptxas and nvdisasm (pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_sass_of_an_example_names_its_python_lines(capsys, arch):
    assert main(["sass", f"{VECTOR_ADD}:add_kernel", "--arch", arch]) == 0
    out = capsys.readouterr().out
    source = VECTOR_ADD.read_text().splitlines()
    notes = [m for m in map(_ANNOTATION.match, out.splitlines()) if m]
    assert notes, out[:2000]
    for m in notes:   # each annotation quotes the line it names
        assert Path(m["file"]).resolve() == VECTOR_ADD
        assert m["text"] == source[int(m["line"]) - 1].strip()
    shown = {int(m["line"]) for m in notes}
    loads = {i for i, ln in enumerate(source, 1) if "tc.load(" in ln and i < 20}
    store = next(i for i, ln in enumerate(source, 1) if "tc.store(" in ln)
    assert loads | {store} <= shown
    # the global loads and stores stand under the lines that make them
    under = {}   # line -> the instructions listed under its annotations
    line = None
    for text in out.splitlines():
        m = _ANNOTATION.match(text)
        if m:
            line = int(m["line"])
        elif line is not None and "/*" in text:
            under.setdefault(line, []).append(text)
    assert any("STG.E" in ins for ins in under[store])
    assert all(any("LDG.E" in ins for ins in under[n]) for n in loads)
    assert not any("STG.E" in ins for n in loads for ins in under[n])


def test_no_disassembler_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setattr(sass, "find_tool", lambda tool: None)
    assert main(["sass", f"{VECTOR_ADD}:add_kernel", "--arch", "sm_80"]) == 1
    err = capsys.readouterr().err
    assert "no SASS disassembler found" in err and "nvdisasm" in err and "cuobjdump" in err
    with pytest.raises(FileNotFoundError, match="nvidia-cuda-nvdisasm"):
        sass.disassemble(b"\x7fELF")


def test_cuobjdump_is_the_fallback(tmp_path, monkeypatch):
    fake = tmp_path / "cuobjdump"
    fake.write_text('#!/bin/sh\necho "cuobjdump $1"\necho "        /*0000*/ EXIT ;"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sass, "find_tool", lambda tool: str(fake) if tool == "cuobjdump" else None)
    assert sass.find_disassembler() == ("cuobjdump", str(fake))
    assert sass.disassemble(b"\x7fELF") == "cuobjdump -sass\n        /*0000*/ EXIT ;\n"


def test_a_failing_disassembler_is_a_compilation_error(tmp_path, monkeypatch):
    from tilec.errors import CompilationError
    fake = tmp_path / "nvdisasm"
    fake.write_text('#!/bin/sh\necho "nvdisasm fatal: not a cubin" >&2\nexit 3\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sass, "find_tool", lambda tool: str(fake) if tool == "nvdisasm" else None)
    with pytest.raises(CompilationError, match="nvdisasm failed on the cubin:\nnvdisasm fatal: not a cubin"):
        sass.disassemble(b"not a cubin")


@pytest.mark.skipif(find_ptxas() is None or sass.find_tool("nvdisasm") is None,
                    reason="needs ptxas and nvdisasm (pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm)")
def test_line_information_leaves_the_sass_unchanged(tmp_path):
    import subprocess
    from tilec.cli import load_kernel
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    kernel = load_kernel(f"{ROOT / 'examples' / 'fused_softmax.py'}:softmax_kernel")
    spec = kernel.specialization(kernel.fn.__globals__["SIGNATURES"]["softmax_kernel"])
    listings = []
    for lineinfo in (True, False):
        compiled = compile_kernel(kernel, spec, CompileOptions(arch="sm_90a", lineinfo=lineinfo), use_cache=False)
        cubin = tmp_path / f"k{int(lineinfo)}.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        listings.append(subprocess.run([sass.find_tool("nvdisasm"), "-c", str(cubin)], capture_output=True,
                                       text=True, check=True).stdout)
    assert "LDG" in listings[0] and listings[0] == listings[1]
