"""The examples run and check themselves; the docs name every op and builtin.

Each example is run as a user would run it (`python examples/x.py`), with
TILEC_INTERPRET=1 so that it takes the interpreter path even on a GPU machine;
its own numpy check decides the exit status.
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from example_modules import load_example

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
EXAMPLE_NAMES = ["vector_add", "fused_softmax", "layer_norm", "matmul", "histogram", "flash_attention", "flash_attention_bwd"]
# PyTorch examples (GPU only) live in examples/pytorch/, out of the folder the kernel tools scan
PYTORCH = EXAMPLES / "pytorch"


def test_every_example_is_tested():
    on_disk = sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_"))
    assert on_disk == sorted(EXAMPLE_NAMES)


def test_llama_train_traced_on_the_cpu(monkeypatch):
    # the eager model runs on the CPU; the tilec one is traced with fake tensors (no CUDA here),
    # forward and backward through tilec's ops
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from tilec.stdlib_kernels import torch_ops as T
    spec = importlib.util.spec_from_file_location("example_llama_train", PYTORCH / "llama_train.py")
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    c = ex.Config(layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=101, seq=17, batch=2)
    ids = torch.randint(0, c.vocab, (c.batch, c.seq))
    loss = ex.Llama(c)(ids, ids)
    assert loss.shape == () and abs(loss.item() - np.log(c.vocab)) < 1.0   # near uniform at init
    monkeypatch.setattr(T, "check_cuda", lambda **kw: None)
    model = ex.Llama(c, tilec=True).to(torch.bfloat16)
    with FakeTensorMode(allow_non_fake_inputs=True):
        params = {n: torch.empty_like(p).requires_grad_(True) for n, p in model.named_parameters()}
        out = torch.func.functional_call(model, params, (ids, ids))
        grads = torch.autograd.grad(out, list(params.values()))
    assert out.shape == () and [g.shape for g in grads] == [p.shape for p in params.values()]


@pytest.mark.gpu
def test_llama_train_matches_eager_on_the_gpu():
    proc = subprocess.run([sys.executable, str(PYTORCH / "llama_train.py"), "--layers", "2", "--hidden", "256",
                           "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--vocab", "1000", "--seq", "300",
                           "--batch", "2", "--steps", "3"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "matches eager" in proc.stdout, out


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_runs_on_the_interpreter(name):
    env = dict(os.environ, TILEC_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "ran on the CPU interpreter" in proc.stdout, out
    assert "MISMATCH" not in proc.stdout, out


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_signatures_name_every_kernel(name):
    import tilec as tc
    mod = load_example(name)
    kernels = {k for k, v in vars(mod).items() if isinstance(v, tc.Kernel)}
    assert kernels and set(mod.SIGNATURES) == kernels


def _signature_cases():
    return [(name, kernel) for name in EXAMPLE_NAMES for kernel in load_example(name).SIGNATURES]


@pytest.mark.slow
@pytest.mark.parametrize("name,kernel", _signature_cases())
def test_example_ir_round_trips(name, kernel):
    from tilec.ir import parse, print_module, verify
    mod = load_example(name)
    k = getattr(mod, kernel)
    module = k.ir(k.specialization(mod.SIGNATURES[kernel]))
    assert verify(parse(print_module(module))) == module


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name,kernel", _signature_cases())
def test_example_compiles_to_ptx(name, kernel, arch):
    mod = load_example(name)
    compiled = getattr(mod, kernel).compile(mod.SIGNATURES[kernel], arch=arch)
    assert f".entry {compiled.name}" in compiled.asm["ptx"]
    assert compiled.metadata["arch"] == arch


def test_check_reports_a_mismatch_and_the_example_exits_non_zero(capsys):
    harness = load_example("_harness")
    want = np.linspace(0.0, 1.0, 7)
    assert harness.check("same", want.astype(np.float32), want, rtol=1e-6, atol=1e-6)
    got = want.copy()
    got[3] += 0.5
    assert not harness.check("off", got, want, rtol=1e-6, atol=1e-6)
    assert "MISMATCH in 1 of 7 elements" in capsys.readouterr().out
    assert not harness.check("shape", want[:3], want, rtol=0.0, atol=0.0)
    with pytest.raises(SystemExit) as exc:
        harness.finish(harness.Target(), False)
    assert exc.value.code == 1


# ----------------------------------------------------------------------------- docs
def test_ir_reference_covers_every_tile_op():
    from tilec.ir import tile_ops
    text = (ROOT / "docs" / "ir.md").read_text()
    missing = [c.name for c in tile_ops.op_classes() if f"`{c.name}`" not in text]
    assert not missing, f"docs/ir.md does not describe {missing}"


def test_language_guide_covers_every_builtin():
    import tilec
    from tilec import language
    text = (ROOT / "docs" / "language.md").read_text()
    used = set(re.findall(r"\btc\.([A-Za-z_][A-Za-z0-9_]*)", text))
    from tilec import random
    public = [n for n in language.__all__ + random.__all__ if hasattr(tilec, n)]
    missing = [n for n in public if n not in used]
    assert not missing, f"docs/language.md shows no example of tc.{', tc.'.join(missing)}"


def test_docs_name_every_launch_option():
    from tilec.options import RESERVED_KWARGS
    for doc in ("language.md", "runtime.md"):
        text = (ROOT / "docs" / doc).read_text()
        missing = [k for k in RESERVED_KWARGS if f"`{k}`" not in text]
        assert not missing, f"docs/{doc} does not name the launch option(s) {missing}"
