"""The `tilec` command line: run as a subprocess (the way users run it) and in-process."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tilec.cli import main
from tilec.lowering.pipeline import pass_names

KERNEL_SOURCE = textwrap.dedent('''
    import tilec as tc


    @tc.kernel
    def scale(x, out, alpha, BLOCK: tc.constexpr):
        pid = tc.program_id(0)
        t = tc.load(x, index=(pid,), shape=(BLOCK,))
        tc.store(out, index=(pid,), tile=t * alpha)


    not_a_kernel = 3
''')
SIG = "x=f32[?], out=f32[?], alpha=f32, BLOCK=128"


def run_cli(*args, env_extra=None):
    env = dict(os.environ)
    env.pop("TILEC_DEBUG", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "tilec.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "scale_kernels.py"
    path.write_text(KERNEL_SOURCE)
    return path


@pytest.mark.slow
def test_version_subprocess():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("tilec ") and proc.stdout.strip() != "tilec"


def test_passes_lists_the_pipeline(capsys):
    assert main(["ir", "--passes"]) == 0
    assert capsys.readouterr().out.split() == list(dict.fromkeys(pass_names()))


@pytest.mark.slow
def test_no_command_prints_usage():
    proc = run_cli()
    assert proc.returncode == 2 and "usage: tilec" in proc.stderr


@pytest.mark.parametrize("target, message", [
    ("missing_file.py:k", "no such file: missing_file.py"),
    ("no_colon", "expected FILE:KERNEL"),
])
def test_bad_target_is_a_usage_error(capsys, target, message):
    assert main(["ir", target, "--sig", SIG]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_target_required_without_passes(capsys):
    assert main(["ir"]) == 2
    assert "needs FILE:KERNEL" in capsys.readouterr().err


def test_unknown_pass_is_rejected_before_loading(capsys, kernel_file):
    assert main(["ir", f"{kernel_file}:scale", "--sig", SIG, "--after", "no_such_pass"]) == 2
    err = capsys.readouterr().err
    assert "unknown pass 'no_such_pass'" in err and "canonicalize" in err


def test_bad_option_is_a_usage_error(capsys, kernel_file):
    assert main(["llvm", f"{kernel_file}:scale", "--sig", SIG, "--num-warps", "3"]) == 2
    assert "num_warps must be a power of two" in capsys.readouterr().err


def test_file_that_fails_to_import(capsys, tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("raise RuntimeError('boom at import')\n")
    assert main(["ir", f"{bad}:k", "--sig", ""]) == 2
    err = capsys.readouterr().err
    assert "importing" in err and "boom at import" in err and "Traceback" not in err


def test_unknown_kernel_names_the_kernels_found(capsys, kernel_file):
    assert main(["ir", f"{kernel_file}:nope", "--sig", SIG]) == 2
    err = capsys.readouterr().err
    assert "no kernel named 'nope'" in err and "scale" in err


def test_not_a_kernel(capsys, kernel_file):
    assert main(["ir", f"{kernel_file}:not_a_kernel", "--sig", SIG]) == 2
    assert "not a @tilec.kernel" in capsys.readouterr().err


@pytest.mark.slow
def test_ir_after_frontend_subprocess(kernel_file):
    proc = run_cli("ir", f"{kernel_file}:scale", "--sig", SIG)
    assert proc.returncode == 0, proc.stderr
    assert 'tile.func {sym_name = "scale"' in proc.stdout
    assert "tile.load_view" in proc.stdout and "tile.mul" in proc.stdout


def test_ir_after_a_pass_round_trips(capsys, kernel_file):
    from tilec.ir import parse, verify
    assert main(["ir", f"{kernel_file}:scale", "--sig", SIG, "--after", "dce"]) == 0
    verify(parse(capsys.readouterr().out))


def test_bad_signature_is_a_usage_error(capsys, kernel_file):
    assert main(["ir", f"{kernel_file}:scale", "--sig", "x=f32[?], out=nonsense"]) == 2
    err = capsys.readouterr().err
    assert "bad --sig" in err and "Traceback" not in err


@pytest.mark.slow
def test_ir_help_documents_the_signature_syntax():
    from tilec.specialize import parse_signature
    proc = run_cli("ir", "--help")
    assert proc.returncode == 0
    first_line = (parse_signature.__doc__ or "").strip().splitlines()[0]
    assert first_line and first_line in proc.stdout


@pytest.mark.slow
def test_compilation_error_exits_1_without_traceback(tmp_path):
    path = tmp_path / "bad_kernel.py"
    path.write_text(textwrap.dedent('''
        import tilec as tc

        @tc.kernel
        def bad(x, BLOCK: tc.constexpr):
            t = tc.load(x, index=(0,), shape=(BLOCK,))
            tc.store(x, index=(0,), tile=t + undefined_name)
    '''))
    proc = run_cli("ir", f"{path}:bad", "--sig", "x=f32[?], BLOCK=128")
    assert proc.returncode == 1
    assert "undefined_name" in proc.stderr and "Traceback" not in proc.stderr
    debug = run_cli("ir", f"{path}:bad", "--sig", "x=f32[?], BLOCK=128", env_extra={"TILEC_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr


@pytest.mark.slow
def test_ptx_end_to_end(kernel_file):
    proc = run_cli("ptx", f"{kernel_file}:scale", "--sig", SIG, "--arch", "sm_80")
    assert proc.returncode == 0, proc.stderr
    assert ".target sm_80" in proc.stdout and ".entry" in proc.stdout


@pytest.mark.slow
def test_ptx_of_the_stdlib_matmul_configuration():
    # what `tilec.stdlib_kernels.matmul` would launch: wgmma + TMA on sm_90a, mma.sync on sm_80
    hopper = run_cli("ptx", "matmul", "--dtype", "bf16", "--shape", "4096,4096,4096", "--arch", "sm_90a")
    assert hopper.returncode == 0, hopper.stderr
    assert "wgmma.mma_async" in hopper.stdout and "cp.async.bulk.tensor" in hopper.stdout
    ampere = run_cli("ptx", "matmul", "--dtype", "f16", "--shape", "1000,1000,1000", "--arch", "sm_80")
    assert ampere.returncode == 0, ampere.stderr
    assert "mma.sync.aligned.m16n8k16" in ampere.stdout
    tf32 = run_cli("ptx", "matmul", "--dtype", "tf32", "--shape", "512,512,512", "--arch", "sm_90a")
    assert tf32.returncode == 0 and "tf32" in tf32.stdout, tf32.stderr


@pytest.mark.slow
def test_stdlib_matmul_arguments_are_checked():
    bad_shape = run_cli("ptx", "matmul", "--dtype", "bf16", "--shape", "1,2")
    assert bad_shape.returncode == 2 and "--shape M,N,K" in bad_shape.stderr
    no_dtype = run_cli("ptx", "matmul", "--shape", "64,64,64")
    assert no_dtype.returncode == 2 and "needs --dtype" in no_dtype.stderr
    assert "Traceback" not in bad_shape.stderr + no_dtype.stderr


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("[a-z]*.py")))
def test_ptx_without_sig_takes_the_files_signatures_and_options(capsys, example):
    import importlib.util
    spec = importlib.util.spec_from_file_location("ex", EXAMPLES / example)
    sys.path.insert(0, str(EXAMPLES))
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(EXAMPLES))
    for name in mod.SIGNATURES:
        assert main(["ptx", f"{EXAMPLES / example}:{name}", "--arch", "sm_80"]) == 0
        ptx = capsys.readouterr().out
        warps = getattr(mod, "OPTIONS", {}).get(name, {}).get("num_warps", 4)
        assert f".entry {name}(" in ptx and re.search(rf"\.maxntid {32 * warps}\b", ptx)


def test_no_sig_and_no_signatures_entry_is_a_usage_error(capsys, kernel_file):
    assert main(["ir", f"{kernel_file}:scale"]) == 2
    assert "--sig is needed: kernel 'scale' has no entry in its file's SIGNATURES" in capsys.readouterr().err


@pytest.mark.slow
def test_a_stdlib_file_loads_as_its_module(capsys):
    """stdlib files import their siblings relatively: the CLI loads them as tilec.stdlib_kernels.*,
    so `tilec ptx stdlib_kernels/attention.py:attention_fwd_kernel` prints the shipped kernel."""
    import importlib
    path = Path(importlib.import_module("tilec.stdlib_kernels.attention").__file__)
    assert main(["ptx", f"{path}:attention_fwd_kernel", "--arch", "sm_80"]) == 0
    ptx = capsys.readouterr().out
    assert ".entry attention_fwd_kernel(" in ptx and re.search(r"\.maxntid 256\b", ptx)
    assert main(["ir", f"{path}:no_such_kernel"]) == 2
    assert "has no kernel named 'no_such_kernel'; kernels in it: attention_fwd_kernel" in capsys.readouterr().err


# ----------------------------------------------------------------------------- remarks, info, cache
LOOP_SOURCE = textwrap.dedent('''
    import tilec as tc


    @tc.kernel
    def total(x, out, n, BLOCK: tc.constexpr):
        acc = tc.zeros((BLOCK,), tc.float32)
        for i in range(n):
            acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)
        tc.store(out, index=(tc.program_id(0),), tile=acc)
''')
LOOP_SIG = "x=f32[?], out=f32[?], n=i32, BLOCK=256"
LOOP_LINE = 8   # the `for` of LOOP_SOURCE (its first line is empty)


@pytest.fixture
def loop_file(tmp_path):
    path = tmp_path / "loop_kernels.py"
    path.write_text(LOOP_SOURCE)
    return path


def test_ptx_remarks_go_to_stderr(capsys, loop_file, monkeypatch):
    monkeypatch.delenv("TILEC_REMARKS", raising=False)
    assert main(["ptx", f"{loop_file}:total", "--sig", LOOP_SIG, "--arch", "sm_80", "--remarks"]) == 0
    out, err = capsys.readouterr()
    assert ".entry total" in out and "remark[" not in out
    assert f"{loop_file}:{LOOP_LINE}:5: remark[loop]: loads at line {LOOP_LINE + 1} not pipelined" in err
    assert main(["ptx", f"{loop_file}:total", "--sig", LOOP_SIG, "--arch", "sm_80"]) == 0
    assert "remark[" not in capsys.readouterr().err   # only when asked for


def test_ir_remarks_are_those_of_the_passes_run(capsys, loop_file):
    # the loop's loads are judged by prefetch_loads: not yet after assign_layouts
    assert main(["ir", f"{loop_file}:total", "--sig", LOOP_SIG, "--arch", "sm_80", "--remarks",
                 "--after", "assign_layouts"]) == 0
    assert "(no remarks)" in capsys.readouterr().err
    assert main(["ir", f"{loop_file}:total", "--sig", LOOP_SIG, "--arch", "sm_80", "--remarks"]) == 0
    out, err = capsys.readouterr()
    assert "tile.func" in out and f":{LOOP_LINE}:5: remark[loop]" in err


def test_info_names_tools_gpu_and_cache(capsys, monkeypatch, tmp_path):
    from tilec.lowering.ptxas import find_ptxas
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "c"))
    assert main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tilec ")
    assert any(ln.startswith("llvmlite: ") and "LLVM " in ln for ln in lines)
    ptxas = next(ln for ln in lines if ln.startswith("ptxas: "))
    assert (find_ptxas() or "not found") in ptxas
    assert any(ln.startswith("nvdisasm: ") for ln in lines)
    assert any(ln.startswith("GPU: no GPU") or ln.startswith("GPU 0: ") for ln in lines)
    cache_line = next(ln for ln in lines if ln.startswith("cache: "))
    assert str(tmp_path / "c") in cache_line and "kernels: 0 file(s)" in cache_line


def test_info_subprocess():
    proc = run_cli("info")
    assert proc.returncode == 0, proc.stderr
    assert "cache: " in proc.stdout and "ptxas: " in proc.stdout


def test_cache_size_and_clear(capsys, monkeypatch, tmp_path, kernel_file):
    root = tmp_path / "cache"
    monkeypatch.setenv("TILEC_CACHE_DIR", str(root))
    monkeypatch.setenv("TILEC_SKIP_PTXAS", "1")
    from tilec.runtime import cache
    cache.clear_memory()   # an earlier test's compile of `scale` would be a hit, writing nothing
    assert main(["ptx", f"{kernel_file}:scale", "--sig", SIG, "--arch", "sm_80"]) == 0
    (root / "notes.txt").write_text("not tilec's")
    capsys.readouterr()
    entries = list((root / "kernels").rglob("*.json"))
    assert len(entries) == 1
    size = entries[0].stat().st_size
    assert main(["cache"]) == 0
    assert "kernels: 1 file(s)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert f"removed 1 file(s), {size / 1024:.1f} KiB, from {root / 'kernels'}" in out or \
        f"removed 1 file(s), {size} bytes, from {root / 'kernels'}" in out
    assert not list((root / "kernels").rglob("*.json"))
    assert (root / "notes.txt").exists()   # only what tilec writes is removed
    assert main(["cache", "clear"]) == 0
    assert "removed 0 file(s)" in capsys.readouterr().out
