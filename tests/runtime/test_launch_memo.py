"""The launch hot path's memos (per-position torch tensor signatures, the last launch's key),
checked on the CPU with a stand-in tensor type and a recording cuLaunchKernel."""
from __future__ import annotations

import ctypes
import sys
import types

import pytest

from tilec.abi import param_slots
from tilec.compiled import CompiledKernel
from tilec.dtypes import float32, int32
from tilec.ir.types import ScalarType, ViewType
from tilec import specialize
from tilec.runtime import driver, launcher
from tilec.runtime.packing import build_packer


class FakeTensor:
    """What the launcher reads from a torch CUDA tensor."""

    def __init__(self, ptr, shape, dtype="float32", device=0):
        self.ptr, self.shape, self.dtype, self.device = ptr, tuple(shape), dtype, device

    def data_ptr(self):
        return self.ptr

    def stride(self):
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))

    def get_device(self):
        return self.device

    is_cuda = True


def k(x, n):
    """Stands for a kernel: the launcher reads its signature."""


class Harness:
    def __init__(self, monkeypatch):
        self.prepares, self.launches, self.streams, self.sig_calls = [], [], [], 0
        ok = object()
        monkeypatch.setattr(launcher, "_torch_tensor", FakeTensor)
        monkeypatch.setattr(launcher, "_torch_current_stream", lambda device: 0)
        monkeypatch.setattr(launcher, "_SUCCESS", ok)
        monkeypatch.setattr(launcher, "_streams", {0: "stream0"})
        monkeypatch.setattr(launcher, "_prepare", self.prepare)
        real_sig = launcher.array_signature

        def counting_sig(info):
            self.sig_calls += 1
            return real_sig(info)
        monkeypatch.setattr(launcher, "array_signature", counting_sig)  # the fast path's calls
        monkeypatch.setattr(specialize, "array_signature", counting_sig)  # signature_of's (general path)

        def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            arr = (ctypes.c_void_p * 3).from_address(params)  # x's pointer, x's extent, n
            ptr = ctypes.c_uint64.from_address(arr[0]).value
            n = ctypes.c_int32.from_address(arr[2]).value
            self.launches.append((fn, ptr, n))
            self.streams.append(stream)
            return (ok,)
        monkeypatch.setattr(launcher, "_cuLaunchKernel", launch)
        monkeypatch.setattr(driver._tls, "ctx_device", 0, raising=False)
        self.state = launcher.KernelState(k)  # no compile step: misses go to self.prepare

    def prepare(self, state, key, vals, opt_items, device):
        align = 16 if key[1][2] == 0 else 1
        view = ViewType(float32, 1, (1,), int32, align)
        ck = CompiledKernel("k", {"ptx": ""}, {"num_warps": 1, "shared": 0},
                            param_slots([view, ScalarType(int32)]), ["x", "n"])
        p = launcher.PreparedLaunch.__new__(launcher.PreparedLaunch)
        p.compiled, p.loaded, p.device, p.name = ck, None, device, "k"
        p.function, p.threads, p.shared = f"fn{len(self.prepares)}", 32, 0
        p.persistent, p.cluster = 0, 1  # launched on the grid as asked, no clusters
        p.dependent = None  # a plain cuLaunchKernel
        p.param_names = list(state.params)
        p.pool = [build_packer(ck, p.param_names)]
        state.table[key] = p
        self.prepares.append(key)
        return p

    def __call__(self, *args):
        launcher.launch(self.state, (1,), args, {})


@pytest.fixture
def run(monkeypatch):
    return Harness(monkeypatch)


def test_same_tensor_reuses_signature_and_launcher(run):
    t = FakeTensor(0x10000, (1024,))
    for n in (5, 6, 7):
        run(t, n)
    assert len(run.prepares) == 1 and run.sig_calls == 1
    assert run.launches == [("fn0", 0x10000, 5), ("fn0", 0x10000, 6), ("fn0", 0x10000, 7)]


def test_new_pointer_same_alignment_packs_the_new_pointer(run):
    run(FakeTensor(0x10000, (1024,)), 5)
    run(FakeTensor(0x20000, (1024,)), 5)
    assert len(run.prepares) == 1 and run.sig_calls == 1
    assert run.launches[-1] == ("fn0", 0x20000, 5)


@pytest.mark.parametrize("other", [FakeTensor(0x10004, (1024,)),     # 16-byte alignment lost
                                   FakeTensor(0x10000, (1000,)),     # extent no longer divisible by 16
                                   FakeTensor(0x10000, (1024,), dtype="float16"),
                                   FakeTensor(0x10000, (4, 256))])   # rank
def test_a_tensor_that_differs_gets_its_own_signature(run, other):
    run(FakeTensor(0x10000, (1024,)), 5)
    run(other, 5)
    assert len(run.prepares) == 2 and run.prepares[0] != run.prepares[1] and run.sig_calls == 2
    run(FakeTensor(0x30000, (1024,)), 9)  # back to the first signature: the table still has it
    assert len(run.prepares) == 2 and run.launches[-1] == ("fn0", 0x30000, 9)


def test_int_signature_changes_are_seen(run):
    t = FakeTensor(0x10000, (1024,))
    run(t, 5)
    run(t, 1)  # 1 is specialized: another launcher
    run(t, 2 ** 40)  # i64: another
    run(t, 5)
    assert len(run.prepares) == 3 and run.launches[-1][0] == "fn0"


def test_torch_imported_after_binding_still_takes_the_fast_path_and_its_stream(run, monkeypatch):
    """A torch tensor whose signature is already in the table (e.g. from a DeviceArray launch
    made before torch was imported) must still be recognised: fast reader, torch's stream."""
    from tilec.runtime import interop
    fake = types.ModuleType("torch")
    fake.Tensor = FakeTensor
    fake._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 77)
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(interop, "_readers", {})
    monkeypatch.setattr(launcher, "_torch_tensor", None)
    monkeypatch.setattr(launcher, "_torch_current_stream", None)
    monkeypatch.setattr(launcher, "_streams", {0: "stream0", 77: "torch stream"})
    t = FakeTensor(0x10000, (1024,))
    for _ in range(3):
        run(t, 5)
    assert run.streams == ["torch stream"] * 3
    assert launcher._torch_tensor is FakeTensor
    assert run.sig_calls == 2  # the general reader once, the fast path once, then its memo


def test_a_failed_launch_past_the_grid_limits_names_the_axis(run, monkeypatch):
    # CUDA grids hold 2**31 - 1 programs along axis 0, 65535 along axes 1 and 2: the driver
    # answers CUDA_ERROR_INVALID_VALUE (or cuda-python an OverflowError past 2**32 - 1)
    invalid = object()

    def launch(fn, gx, gy, gz, *rest):
        if gx >= 2**32:
            raise OverflowError("value too large to convert to unsigned int")
        return (invalid,)
    monkeypatch.setattr(launcher, "_cuLaunchKernel", launch)
    t = FakeTensor(0x10000, (1024,))
    for grid, axis in [((1, 70000), 1), ((1, 1, 70000), 2)]:
        with pytest.raises(ValueError, match=rf"kernel 'k': grid axis {axis} holds at most 65535 programs, got "
                                             r"70000; put the largest extent on axis 0 \(up to 2\*\*31 - 1\)"):
            launcher.launch(run.state, grid, (t, 5), {})
    for gx in (2**31, 2**32):
        with pytest.raises(ValueError, match=f"grid axis 0 holds at most 2147483647 programs, got {gx}"):
            launcher.launch(run.state, (gx,), (t, 5), {})
    prepared = next(iter(run.state.table.values()))
    with pytest.raises(ValueError, match="kernel 'k': grid axis 2 holds at most 65535 programs, got 70000"):
        launcher._cu_launch(prepared, 1, 1, 70000, 0, (t, 5), [(t.ptr, t.shape, t.stride(), float32, 0), None])
