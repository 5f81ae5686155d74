"""Kernels compiled by tilec, launched on the GPU through kernel[grid](...) (marker gpu)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tilec as tc
import tilec.runtime as rt
from tilec.runtime import cache, launcher
from needs import needs

pytestmark = pytest.mark.gpu


@tc.kernel
def add_view(x, y, out, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    a = tc.load(x, index=(pid,), shape=(BLOCK,))
    b = tc.load(y, index=(pid,), shape=(BLOCK,))
    tc.store(out, index=(pid,), tile=a + b)


@tc.kernel
def scale_ptr(x, out, n, alpha, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    tc.store(out.ptr + offs, tc.load(x.ptr + offs, mask=mask, other=0.0) * alpha, mask=mask)


def _grid(meta):
    return ((meta["out"].shape[0] + meta["BLOCK"] - 1) // meta["BLOCK"],)


@pytest.mark.parametrize("n", [1, 1000, 4099])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_add_device_arrays(gpu, cache_dir, n, dtype):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 100).astype(dtype)
    y = (rng.standard_normal(n) * 100).astype(dtype)
    dx, dy, do = rt.from_numpy(x), rt.from_numpy(y), rt.empty(n, dtype)
    add_view[_grid](dx, dy, do, BLOCK=256)
    np.testing.assert_array_equal(do.to_numpy(), x + y)


def test_scalar_args_and_signature_reuse(gpu, cache_dir):
    n = 3001
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    dx, do = rt.from_numpy(x), rt.empty(n)
    for alpha in (0.5, -3.0):
        scale_ptr[((n + 127) // 128,)](dx, do, n, alpha, BLOCK=128)
        np.testing.assert_allclose(do.to_numpy(), x * np.float32(alpha), rtol=1e-6)
    assert launcher.prepared_launch_count(scale_ptr.launch_state) == 1
    scale_ptr[((n + 127) // 128,)](dx, do, n, 2.0, BLOCK=128, num_warps=2)
    assert launcher.prepared_launch_count(scale_ptr.launch_state) == 2


def test_torch_bf16_and_cupy(gpu, cache_dir):
    torch = needs("torch")
    n = 2500
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    add_view[_grid](x, y, out, BLOCK=512)
    torch.testing.assert_close(out, x + y)
    cp = pytest.importorskip("cupy")
    a, b = cp.arange(n, dtype=cp.float32), cp.ones(n, dtype=cp.float32)
    c = cp.empty_like(a)
    add_view[_grid](a, b, c, BLOCK=512)
    assert cp.asnumpy(c).tolist() == (np.arange(n, dtype=np.float32) + 1).tolist()


def test_host_numpy_rejected(gpu):
    with pytest.raises(TypeError, match=r"tc\.from_numpy"):
        add_view[(1,)](np.zeros(4, np.float32), rt.zeros(4), rt.zeros(4), BLOCK=16)


def test_disk_cache_serves_a_new_process(gpu, cache_dir):
    here = __import__("pathlib").Path(__file__).parent
    code = ("import sys; sys.path[:0] = %r; import numpy as np, tilec.runtime as rt; "
            "from test_gpu_compiled import add_view, _grid; from tilec.runtime import cache; "
            "x = rt.from_numpy(np.arange(300, dtype=np.float32)); o = rt.empty(300); "
            "add_view[_grid](x, x, o, BLOCK=128); print(o.to_numpy()[299], len(list(cache.cache_dir().rglob('*.json'))))"
            ) % [str(here), str(here.parent)]   # the test module, and tests/ for its `needs` import
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["598.0", "1"]
    entry = next(cache.cache_dir().rglob("*.json"))
    stamp = entry.stat().st_mtime_ns
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert second.stdout.split() == ["598.0", "1"] and entry.stat().st_mtime_ns == stamp  # read, not rewritten
    entry.write_bytes(entry.read_bytes()[:100])  # corrupt: recompiled and rewritten
    third = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert third.stdout.split() == ["598.0", "1"] and entry.stat().st_size > 100
