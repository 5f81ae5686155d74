"""compute-sanitizer names the Python line of a faulting kernel (GPU): the PTX's line
information reaches the code that runs, through the cubin ptxas made (-lineinfo) and through
the driver's JIT (CU_JIT_GENERATE_LINE_INFO, when ptxas is skipped)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

# A store through a pointer tile, without a mask, a GiB past the end of a 16-element array.
FAULTING = textwrap.dedent("""\
    import tilec as tc
    import tilec.runtime as rt


    @tc.kernel
    def oob_store(out, BLOCK: tc.constexpr):
        offs = tc.arange(0, BLOCK) + (1 << 28)
        tc.store(out.ptr + offs, tc.full((BLOCK,), 1.0, tc.float32))


    out = rt.zeros(16, tc.float32)
    try:
        oob_store[(1,)](out, BLOCK=128)
        tc.synchronize()
        print("NO FAULT")
    except Exception as e:  # the launch fails under memcheck; only its report matters here
        print("FAULT", type(e).__name__)
    """)


def _sanitizer():
    found = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
    if found is None:
        pytest.skip("compute-sanitizer not found: it ships with the CUDA toolkit (put its bin/ on PATH)")
    return found


@pytest.mark.parametrize("path", ["cubin", "jit"])
def test_memcheck_names_the_python_line_of_an_out_of_bounds_store(tmp_path, path):
    sanitizer = _sanitizer()
    script = tmp_path / "faulting.py"
    script.write_text(FAULTING)
    line = next(i for i, text in enumerate(FAULTING.splitlines(), 1) if "tc.store(" in text)
    env = dict(os.environ, TILEC_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    env.pop("TILEC_LINEINFO", None)   # the default: line information on
    if path == "jit":
        env["TILEC_SKIP_PTXAS"] = "1"  # no cubin: the driver compiles the PTX
    done = subprocess.run([sanitizer, "--tool", "memcheck", sys.executable, str(script)], env=env,
                          capture_output=True, text=True, timeout=120)
    log = done.stdout + done.stderr
    assert "Invalid __global__ write" in log, log[-4000:]
    assert f"faulting.py:{line}" in log, log[-4000:]
