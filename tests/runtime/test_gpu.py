"""Runtime on a real GPU with hand-written PTX kernels (marker gpu: skipped without a GPU)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tilec.runtime as rt
from tilec.dtypes import bfloat16, float32, int32
from tilec.runtime import launcher, module
from ptx_kernels import BIGSMEM_PTX, EMPTY_PTX, OOB_PTX, axpy, one_view_kernel
from needs import needs

pytestmark = pytest.mark.gpu


def axpy_fn(x, y, out, alpha):
    """Stands for a tc.kernel with the same parameters: the launcher only reads its signature."""


class PtxKernel:
    """A kernel object backed by preloaded PTX: `k[grid](...)` goes through launcher.launch."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.launch_state = launcher.KernelState(fn)  # no compile step: only preloaded signatures

    def __getitem__(self, grid):
        return lambda *args, **kw: launcher.launch(self.launch_state, grid, args, kw)


def _rand(n, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_device_array_round_trip(gpu):
    a = np.arange(1000, dtype=np.int32).reshape(10, 100)
    d = rt.from_numpy(a)
    assert d.shape == (10, 100) and d.strides == (400, 4) and d.dtype is int32 and d.device == 0
    np.testing.assert_array_equal(d.to_numpy(), a)
    z = rt.zeros((3, 7), float32)
    assert not z.to_numpy().any()
    b = rt.from_numpy(np.array([1.0, -2.5, 3.0], np.float32), dtype=bfloat16)
    got = b.to_numpy()
    if got.dtype == np.uint16:  # no ml_dtypes: raw bf16 bits
        got = (got.astype(np.uint32) << 16).view(np.float32)
    assert b.nbytes == 6 and got.astype(np.float32).tolist() == [1.0, -2.5, 3.0]


def test_out_of_memory_names_size(gpu):
    with pytest.raises(rt.OutOfMemoryError, match=r"out of GPU memory: tilec asked for 1024\.0 TiB"):
        rt.empty((1 << 50,), np.uint8)


def test_launch_compiled_axpy_not_multiple_of_block(gpu):
    n = 1000
    x, y = _rand(n, 1), _rand(n, 2)
    dx, dy, do = rt.from_numpy(x), rt.from_numpy(y), rt.empty(n)
    launcher.launch_compiled(axpy(), ((n + 127) // 128,), dx, dy, do, 0.5)
    np.testing.assert_allclose(do.to_numpy(), x + 0.5 * y, rtol=1e-6)
    res = module.resources(axpy())
    assert res.registers > 0 and res.max_blocks_per_sm > 0


def test_launch_hot_path_with_grid_callable(gpu):
    k = PtxKernel(axpy_fn)
    n = 777
    x, y = _rand(n, 3), _rand(n, 4)
    dx, dy, do = rt.from_numpy(x), rt.from_numpy(y), rt.zeros(n)
    launcher.preload(k.launch_state, axpy(), (dx, dy, do, 2.0))
    seen = {}

    def grid(meta):
        seen.update(meta)
        return ((meta["out"].shape[0] + 127) // 128,)

    k[grid](dx, dy, do, 2.0)
    rt.synchronize()
    np.testing.assert_allclose(do.to_numpy(), x + 2.0 * y, rtol=1e-6)
    assert set(seen) == {"x", "y", "out", "alpha"}
    assert launcher.prepared_launch_count(k.launch_state) == 1
    k[(7,)](dx, dy, do, alpha=-1.0)  # same signature: no new entry
    assert launcher.prepared_launch_count(k.launch_state) == 1
    np.testing.assert_allclose(do.to_numpy(), x - y, rtol=1e-6)


def test_a_grid_past_the_axis_limits_names_the_axis(gpu):
    # the driver answers CUDA_ERROR_INVALID_VALUE; the launcher names the axis, the extent and the limit
    k = PtxKernel(axpy_fn)
    d = rt.zeros(4)
    launcher.preload(k.launch_state, axpy(), (d, d, d, 1.0))
    for grid, axis in [((1, 70000), 1), ((1, 1, 70000), 2)]:
        msg = rf"kernel 'axpy': grid axis {axis} holds at most 65535 programs, got 70000; put the largest extent"
        with pytest.raises(ValueError, match=msg):
            k[grid](d, d, d, 1.0)
        with pytest.raises(ValueError, match=msg):
            launcher.launch_compiled(axpy(), grid, d, d, d, 1.0)
    k[(1, 65535)](d, d, d, 1.0)   # the most axis 1 holds
    rt.synchronize()


def test_host_array_rejected(gpu):
    k = PtxKernel(axpy_fn)
    with pytest.raises(TypeError, match=r"tc\.from_numpy"):
        k[(1,)](np.zeros(4, np.float32), rt.zeros(4), rt.zeros(4), 1.0)


def test_streams_and_events(gpu):
    n = 1 << 20
    x, y = _rand(n, 5), _rand(n, 6)
    dx, dy, do = rt.from_numpy(x), rt.from_numpy(y), rt.empty(n)
    s = rt.Stream()
    start, end = rt.Event(), rt.Event()
    start.record(s)
    for _ in range(3):
        launcher.launch_compiled(axpy(), (n // 128,), dx, dy, do, 3.0, stream=s)
    end.record(s)
    end.synchronize()
    assert s.query() and end.query()
    assert start.elapsed_time(end) > 0
    # the kernel fuses x + 3y into one fma: one rounding fewer than numpy
    np.testing.assert_allclose(do.to_numpy(), x + 3.0 * y, rtol=1e-5, atol=1e-6)


def test_torch_interop_and_current_stream(gpu):
    torch = needs("torch")
    k = PtxKernel(axpy_fn)
    n = 5000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    launcher.preload(k.launch_state, axpy(), (x, y, out, 1.5))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        k[((n + 127) // 128,)](x, y, out, 1.5)  # goes on torch's current stream, s
    s.synchronize()
    torch.testing.assert_close(out, x + 1.5 * y)
    # DLPack both ways, and a bf16 tensor's dtype read without a copy
    d = rt.from_dlpack(out)
    assert d.ptr == out.data_ptr() and d.shape == (n,)
    back = torch.utils.dlpack.from_dlpack(rt.from_numpy(np.arange(6, dtype=np.float32)))
    assert back.device.type == "cuda" and back.cpu().tolist() == [0, 1, 2, 3, 4, 5]
    from tilec.runtime.interop import array_info
    assert array_info(torch.zeros(4, 4, dtype=torch.bfloat16, device="cuda").t())[2:4] == ((1, 4), bfloat16)


def test_cupy_interop(gpu):
    cp = pytest.importorskip("cupy")
    n = 3000
    x, y = cp.random.randn(n, dtype=cp.float32), cp.random.randn(n, dtype=cp.float32)
    out = cp.zeros(n, dtype=cp.float32)
    launcher.launch_compiled(axpy(), ((n + 127) // 128,), x, y, out, 0.25)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_allclose(cp.asnumpy(out), cp.asnumpy(x + 0.25 * y), rtol=1e-6)
    via_cai = cp.asarray(rt.from_numpy(np.arange(4, dtype=np.int32)))
    assert via_cai.tolist() == [0, 1, 2, 3]


def test_big_dynamic_shared_memory(gpu):
    k = one_view_kernel("bigsmem", BIGSMEM_PTX, shared=65536, dtype=int32)
    out = rt.zeros(1, int32)
    launcher.launch_compiled(k, (1,), out)
    rt.synchronize()
    assert 0 <= int(out.to_numpy()[0]) < 32
    assert module.resources(k).shared >= 65536


def test_bad_ptx_reports_jit_log(gpu):
    bad = one_view_kernel("empty", EMPTY_PTX.replace("ret;", "bogus.instr;"))
    with pytest.raises(rt.DriverError, match="cuModuleLoadDataEx"):
        launcher.launch_compiled(bad, (1,), rt.zeros(1))


def test_fault_names_kernel_and_unusable_context(gpu):
    script = __import__("pathlib").Path(__file__).with_name("fault_demo.py")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "CAUGHT" in out.stdout and "oob_write" in out.stdout and "unusable" in out.stdout, out.stdout
    assert "AFTER" in out.stdout and "AFTER no error" not in out.stdout


def axpy_blocked(x, y, out, alpha, BLOCK: "constexpr"):  # noqa: F821
    """Parameters of an autotuned axpy: BLOCK elements per program."""


def test_autotune_picks_persists_and_reuses(gpu, cache_dir, monkeypatch):
    import tilec as at  # tc.Config, tc.autotune
    k = PtxKernel(axpy_blocked)
    n = 1 << 22
    x, y = _rand(n, 7), _rand(n, 8)
    dx, dy, do = rt.from_numpy(x), rt.from_numpy(y), rt.empty(n)
    configs = [at.Config({"BLOCK": 128}, num_warps=4), at.Config({"BLOCK": 256}, num_warps=8)]
    for cfg in configs:
        ck = axpy()
        ck.metadata["num_warps"] = cfg.num_warps
        launcher.preload(k.launch_state, ck, (dx, dy, do, 1.0), cfg.launch_kwargs())
    grid = lambda meta: ((n + meta["BLOCK"] - 1) // meta["BLOCK"],)  # noqa: E731
    tuned = at.autotune(configs, key=["out"])(k)
    tuned[grid](dx, dy, do, 1.0)
    rt.synchronize()
    np.testing.assert_allclose(do.to_numpy(), x + y, rtol=1e-6)
    (times,) = tuned.timings.values()
    assert set(times) == set(configs) and all(0 < t < 1e3 for t in times.values())
    records = list((cache_dir / "autotune").glob("*.json"))
    assert len(records) == 1
    again = at.autotune(configs, key=["out"])(k)
    again[grid](dx, dy, do, 1.0)
    assert not again.timings and list(again.best.values())[0] == min(times, key=times.get)
    monkeypatch.setenv("TILEC_AUTOTUNE", "off")
    off = at.autotune(configs, key=["out"])(k)
    off[grid](dx, dy, do, 1.0)
    assert not off.best  # the first config, no search and no record
