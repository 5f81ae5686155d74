"""Finding and running ptxas: PTX -> cubin, with its resource report.

ptxas is looked up on PATH, then in the `nvidia-cuda-nvcc` pip wheel (which
installs `nvidia/cuda_nvcc/bin/ptxas` inside the `nvidia` namespace package),
then under CUDA_HOME / the usual toolkit directory. `TILEC_PTXAS` names it
explicitly.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import CompilationError

__all__ = ["find_ptxas", "find_tool", "assemble", "has_line_info", "strip_line_info", "PtxasResult", "parse_report", "PtxasError"]


class PtxasError(CompilationError):
    """ptxas rejected the PTX (the message holds its diagnostics)."""


def _wheel_candidates(tool: str = "ptxas") -> List[Path]:
    out = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cuda_nvcc/bin", "cu13/bin", "cuda_nvcc/cu13/bin", "cuda_nvdisasm/bin", "cuda_cuobjdump/bin"):
            out.append(Path(root) / sub / tool)
    return out


@functools.lru_cache(maxsize=1)
def find_ptxas() -> Optional[str]:
    """Path of a usable ptxas, or None."""
    env = os.environ.get("TILEC_PTXAS")
    if env:
        return env if os.access(env, os.X_OK) else None
    return find_tool("ptxas")


def find_tool(tool: str) -> Optional[str]:
    """Path of the CUDA command-line tool `tool` (ptxas, nvdisasm, cuobjdump), looked up as
    ptxas is (PATH, the NVIDIA pip wheels, CUDA_HOME, /usr/local/cuda), or None."""
    found = shutil.which(tool)
    if found:
        return found
    cands = _wheel_candidates(tool)
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        cands.append(Path(home) / "bin" / tool)
    cands.append(Path("/usr/local/cuda/bin") / tool)
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


@dataclass
class PtxasResult:
    cubin: bytes
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    shared: int = 0
    warnings: List[str] = field(default_factory=list)
    log: str = ""
    wgmma_serialized: str = ""   # why ptxas made every wgmma wait for the one before ("": it did not)

    def report(self) -> Dict[str, object]:
        return {"registers": self.registers, "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
                "stack": self.stack, "shared": self.shared, "warnings": list(self.warnings),
                "wgmma_serialized": self.wgmma_serialized}


_NUM = {
    "stack": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "shared": re.compile(r"(\d+) bytes smem"),
}


# ptxas's C7514-C7515 infos ("Potential Performance Loss: wgmma.mma_async instructions are
# serialized due to ... in the function 'k'"): every wgmma then waits for the one before, and
# ptxas says it only as an info line
_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized due to (.+?)\s+in the function")


def parse_report(log: str) -> Dict[str, object]:
    """Registers, spills, stack, shared memory and warnings from `ptxas -v` output
    (the largest value when several functions are listed), and why ptxas serialized the
    wgmmas ("" when it did not)."""
    out: Dict[str, object] = {}
    for k, rx in _NUM.items():
        vals = [int(m) for m in rx.findall(log)]
        out[k] = max(vals) if vals else 0
    out["warnings"] = [ln.strip() for ln in log.splitlines() if "warning" in ln.lower()]
    m = _SERIALIZED.search(log)
    out["wgmma_serialized"] = " ".join(m.group(1).split()) if m else ""
    return out


_LOC = re.compile(r"^\s*\.loc\s", re.M)


def has_line_info(ptx: str) -> bool:
    """Whether `ptx` carries `.loc` directives (the compile's lineinfo option)."""
    return _LOC.search(ptx) is not None


# what line information adds to PTX: .loc/.file directives, an empty debug section, and the
# labels that delimit the function and its scopes for the line table
_LINE_INFO_LINES = re.compile(r"^(\s*\.(loc|file)\s.*|\s*\.section\s+\.debug\w*.*|\$L__(tmp|func_begin|func_end)\d+:)\n",
                              re.M)


def strip_line_info(ptx: str) -> str:
    """`ptx` without its line information: the instructions alone (equal for a kernel
    compiled with and without `lineinfo`)."""
    return _LINE_INFO_LINES.sub("", ptx)


def assemble(ptx: str, arch: str, ptxas: Optional[str] = None, opt_level: int = 3,
             extra: Optional[List[str]] = None, timeout: float = 300.0,
             lineinfo: Optional[bool] = None) -> PtxasResult:
    """Assemble `ptx` for `arch` (e.g. "sm_90a") with `ptxas -v`. Raises PtxasError when ptxas
    fails, FileNotFoundError when there is none. `lineinfo` (default: when the PTX has `.loc`
    directives) keeps them in the cubin (`-lineinfo`; the code is the same)."""
    exe = ptxas or find_ptxas()
    if exe is None:
        raise FileNotFoundError("ptxas not found: install the CUDA toolkit or `pip install nvidia-cuda-nvcc`")
    with tempfile.TemporaryDirectory(prefix="tilec-ptxas-") as d:
        src, dst = Path(d) / "kernel.ptx", Path(d) / "kernel.cubin"
        src.write_text(ptx)
        if lineinfo is None:
            lineinfo = has_line_info(ptx)
        lines = ["-lineinfo"] if lineinfo else []
        cmd = [exe, f"-arch={arch}", "-v", f"-O{opt_level}", *lines, *(extra or []), str(src), "-o", str(dst)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise PtxasError(f"ptxas took more than {timeout:.0f} s", stage="ptxas") from e
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise PtxasError(f"ptxas rejected the PTX for {arch}:\n{log.strip()}", stage="ptxas")
        cubin = dst.read_bytes()
    r = parse_report(log)
    return PtxasResult(cubin, r["registers"], r["spill_stores"], r["spill_loads"], r["stack"], r["shared"],
                       r["warnings"], log, r["wgmma_serialized"])
