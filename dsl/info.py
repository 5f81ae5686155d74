"""`tilec info`: what this installation of tilec finds (devices, driver, CUDA tools, LLVM, cache)."""
from __future__ import annotations

import subprocess
import sys
from typing import List, Optional

__all__ = ["info_lines", "tool_version"]


def tool_version(path: str) -> Optional[str]:
    """The last line of `path --version` (CUDA tools end it with their release), None if it fails."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _gpu_lines() -> List[str]:
    """The driver's version and each device, or why there is none ("no GPU")."""
    try:
        from .runtime import driver
        d = driver.cu()
        version = driver.check(d.cuDriverGetVersion(), "cuDriverGetVersion")
        devices = driver.devices()
    except Exception as e:  # no cuda-python, no libcuda, no device: all mean the same here
        return [f"GPU: no GPU ({str(e).splitlines()[0] if str(e) else type(e).__name__})"]
    out = [f"driver: CUDA {version // 1000}.{version % 1000 // 10}"]
    for dev in devices:
        out.append(f"GPU {dev.ordinal}: {dev.name} (compute capability {dev.capability[0]}.{dev.capability[1]}, "
                   f"tilec target {dev.arch}, {dev.multiprocessors} SMs)")
    return out


def info_lines() -> List[str]:
    from .lowering.ptxas import find_ptxas, find_tool
    from .runtime import cache
    from .version import __version__
    lines = [f"tilec {__version__} (Python {sys.version.split()[0]})"]
    try:
        import llvmlite
        from llvmlite import binding
        llvm = ".".join(str(x) for x in binding.llvm_version_info)
        lines.append(f"llvmlite: {llvmlite.__version__} (LLVM {llvm})")
    except Exception as e:
        lines.append(f"llvmlite: not usable ({type(e).__name__}: {e})")
    for tool in ("ptxas", "nvdisasm", "cuobjdump"):
        path = find_ptxas() if tool == "ptxas" else find_tool(tool)
        if path is None:
            lines.append(f"{tool}: not found")
        else:
            version = tool_version(path)
            lines.append(f"{tool}: {path}" + (f" ({version})" if version else ""))
    lines += _gpu_lines()
    use = cache.usage()
    parts = ", ".join(f"{sub}: {n} file(s), {size} bytes" for sub, (n, size) in use.items())
    lines.append(f"cache: {cache.cache_dir()} ({parts})")
    return lines
