"""SASS (the GPU's machine code) of a cubin, annotated with the Python lines it came from.

nvdisasm (`nvidia-cuda-nvdisasm` wheel, or the toolkit) reads the line table ptxas keeps
from the PTX's `.loc` directives (`-g`, `--print-line-info`) and marks each group of
instructions with `//## File "PATH", line N`; `annotate` replaces each mark with the
line itself, `# file:N  source text`. cuobjdump (`-sass`) is the fallback: it prints no
line information.
"""
from __future__ import annotations

import linecache
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Optional, Tuple

from ..errors import CompilationError
from .ptxas import find_tool

__all__ = ["annotate", "disassemble", "find_disassembler", "MISSING_TOOL"]

MISSING_TOOL = ("no SASS disassembler found: install nvdisasm (`pip install nvidia-cuda-nvdisasm`) "
                "or cuobjdump (`pip install nvidia-cuda-cuobjdump`), or the CUDA toolkit")

# nvdisasm -g: '//## File "/path/k.py", line 17' (and ', inlined at ...' for inlined code)
_MARK = re.compile(r'^(\s*)//## File "(?P<file>[^"]*)", line (?P<line>\d+)(?P<rest>.*)$')


def find_disassembler() -> Optional[Tuple[str, str]]:
    """(tool name, path) of nvdisasm, else cuobjdump, else None."""
    for tool in ("nvdisasm", "cuobjdump"):
        path = find_tool(tool)
        if path:
            return tool, path
    return None


def _shown(path: str) -> str:
    # relative to the working directory when the file is under it: short, and still unique
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if rel.startswith("..") else rel


def annotate(listing: str, source_line: Callable[[str, int], str] = linecache.getline) -> str:
    """`listing` (nvdisasm -g output) with each line mark replaced by `# file:N  text`,
    the text of line N of the file (`source_line(path, N)`, empty when unreadable)."""
    out = []
    for text in listing.splitlines():
        m = _MARK.match(text)
        if m is None:
            out.append(text)
            continue
        line = int(m.group("line"))
        src = source_line(m.group("file"), line).strip() if line > 0 else ""
        out.append(f"{m.group(1)}# {_shown(m.group('file'))}:{line}" + (f"  {src}" if src else ""))
    return "\n".join(out) + "\n"


def disassemble(cubin: bytes, timeout: float = 120.0) -> str:
    """The SASS of `cubin`, annotated with source lines where nvdisasm is found (cuobjdump
    otherwise, without them). FileNotFoundError naming the tools when neither is found;
    CompilationError when the tool fails."""
    found = find_disassembler()
    if found is None:
        raise FileNotFoundError(MISSING_TOOL)
    tool, exe = found
    with tempfile.TemporaryDirectory(prefix="tilec-sass-") as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        cmd = [exe, "-g", "-c", str(path)] if tool == "nvdisasm" else [exe, "-sass", str(path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise CompilationError(f"{tool} took more than {timeout:.0f} s", stage=tool) from e
    if proc.returncode != 0:
        raise CompilationError(f"{tool} failed on the cubin:\n{(proc.stdout + proc.stderr).strip()}", stage=tool)
    if tool == "nvdisasm":
        linecache.checkcache()  # the file may have changed since an earlier listing
        return annotate(proc.stdout)
    return proc.stdout
