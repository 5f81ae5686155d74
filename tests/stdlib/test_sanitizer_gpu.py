"""compute-sanitizer on the reproducers of findings it made (GPU): cross_entropy's looped row
kernel wrote one shared-memory word from 32 lanes with values that differed in the last bit
(racecheck); masked tails of every width stay inside their tensors (memcheck); compiled with
TILEC_INITCHECK=1 (CompileOptions.initcheck), no load reads a byte past a tensor's end
(initcheck). Each runs in a child process under the tool, which must report nothing.
(By default initcheck still reports the rest of a 16-byte group read past a tensor's end by
a masked vector load: docs/runtime.md.)"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from needs import needs

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]

RACE = """
import torch, tilec.stdlib_kernels as sk
for dtype in (torch.float16, torch.bfloat16):
    x = torch.randn(2, 16385, device="cuda", dtype=dtype)
    t = torch.tensor([5, 16000], device="cuda")
    ref = torch.nn.functional.cross_entropy(x.double(), t)
    assert abs(sk.cross_entropy(x, t).item() - ref.item()) < 1e-2 * abs(ref.item())  # the loss in x.dtype
torch.cuda.synchronize()
"""

TAILS = """
import torch, tilec.stdlib_kernels as sk
for shape in ((1, 7), (5, 4097), (7, 33)):
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(shape, device="cuda", dtype=dtype)
        assert torch.allclose(sk.gelu(x).double(), torch.nn.functional.gelu(x.double()), rtol=2e-2, atol=2e-2)
        assert torch.allclose(sk.softmax(x).double(), torch.softmax(x.double(), -1), rtol=2e-2, atol=1e-3)
        y = sk.dropout(x, 0.5, seed=3)
        kept = y != 0
        assert torch.allclose(y[kept].double(), 2 * x[kept].double(), rtol=1e-2)
torch.cuda.synchronize()
"""


# The boundary shapes of issue 50, contiguous and as rows of a wider buffer (windowed and
# realigned rows), through the ops whose kernels initcheck flagged; each result against torch.
INITCHECK = """
import torch, tilec.stdlib_kernels as sk
F = torch.nn.functional
def close(a, b, tol):
    assert torch.allclose(a.double(), b, rtol=tol, atol=tol), (a.shape, a.dtype)
for shape in ((1, 7), (5, 4097), (7, 33), (2, 16385), (3, 1000)):
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for wide in (False, True):
            x = torch.randn(shape[0], shape[1] + (5 if wide else 0), device="cuda", dtype=dtype)[:, :shape[1]]
            xd = x.double()
            close(sk.gelu(x), F.gelu(xd), 2e-2)
            close(sk.softmax(x), torch.softmax(xd, -1), 2e-2)
            close(sk.log_softmax(x), torch.log_softmax(xd, -1), 5e-2)
            w = torch.randn(shape[1], device="cuda", dtype=dtype)
            close(sk.layer_norm(x, w, w), F.layer_norm(xd, (shape[1],), w.double(), w.double()), 5e-2)
            close(sk.rms_norm(x, w), xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(), 5e-2)
            t = torch.randint(0, shape[1], (shape[0],), device="cuda")
            close(sk.cross_entropy(x, t), F.cross_entropy(xd, t), 2e-2)
            close(sk.cumsum(x, -1), xd.cumsum(-1), 5e-2 * shape[1] ** 0.5)
            close(sk.sum(x, -1), xd.sum(-1), 5e-2 * shape[1] ** 0.5)
            y = sk.dropout(x, 0.5, seed=3)
            kept = y != 0
            close(y[kept], 2 * xd[kept], 2e-2)
torch.cuda.synchronize()
"""

# GEMMs whose epilogue stores through TMA by default (sm_90a), and linear_cross_entropy's weight
# gradient (a GEMM with a column-major A), each result read by a torch kernel: initcheck does
# not record TMA's bulk writes, so the sanitizer mode stores them with plain stores.
GEMM = """
import torch, tilec.stdlib_kernels as sk
torch.manual_seed(0)
for m, k in ((4097, 15), (1024, 512)):
    a = torch.randn(k, m, device="cuda", dtype=torch.float16)
    b = torch.randn(k, 64, device="cuda", dtype=torch.float16)
    for A in (a.T, a.T.contiguous()):
        got = sk.matmul(A, b).double()
        assert (got - A.double() @ b.double()).abs().max().item() < 0.05 * k ** 0.5
h = torch.randn(300, 64, device="cuda", dtype=torch.bfloat16)
w = torch.randn(1000, 64, device="cuda", dtype=torch.bfloat16)
t = torch.randint(0, 1000, (300,), device="cuda")
loss, dh, dw, db = sk.linear_cross_entropy(h, w, t)
ref_w = w.double().requires_grad_()
torch.nn.functional.cross_entropy(h.double() @ ref_w.T, t).backward()
assert (dw.double() - ref_w.grad).abs().max().item() < 2e-2
torch.cuda.synchronize()
"""


def _sanitizer():
    found = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
    if found is None:
        pytest.fail("compute-sanitizer not found: it ships with the CUDA toolkit (put its bin/ on PATH)")
    return found


def _run(tool: str, program: str, tmp_path, **env_extra) -> str:
    needs("torch")
    env = dict(os.environ, TILEC_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1", **env_extra)
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(program))
    # compiled once outside the tool, so that it times launches rather than LLVM
    subprocess.run([sys.executable, str(script)], env=env, check=True, cwd=ROOT, timeout=600)
    extra = ["--racecheck-report", "all"] if tool == "racecheck" else []
    done = subprocess.run([_sanitizer(), "--tool", tool, *extra, "--report-api-errors", "no", sys.executable,
                           str(script)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return done.stdout + done.stderr


def test_cross_entropy_looped_rows_have_no_shared_memory_hazard(tmp_path):
    log = _run("racecheck", RACE, tmp_path)
    assert "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" in log, log[-4000:]


def test_masked_tails_stay_in_bounds(tmp_path):
    log = _run("memcheck", TAILS, tmp_path)
    assert "ERROR SUMMARY: 0 errors" in log, log[-4000:]


def test_initcheck_mode_reads_nothing_past_a_tensor(tmp_path):
    log = _run("initcheck", INITCHECK, tmp_path, TILEC_INITCHECK="1")
    assert "ERROR SUMMARY: 0 errors" in log, log[-4000:]


def test_initcheck_mode_gemm_results_count_as_written(tmp_path):
    log = _run("initcheck", GEMM, tmp_path, TILEC_INITCHECK="1")
    assert "ERROR SUMMARY: 0 errors" in log, log[-4000:]
