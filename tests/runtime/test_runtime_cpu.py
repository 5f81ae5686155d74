"""Runtime pieces that need no GPU: lazy driver import, DLPack structs, packers, binding."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

import tilec.runtime as rt
from tilec.dtypes import bfloat16, float16, float32, int32, int64
from tilec.grid import normalize_grid
from tilec.runtime import dlpack, interop, launcher, packing
from tilec.runtime.memory import DeviceArray, typestr
from ptx_kernels import axpy


@pytest.mark.slow
def test_import_does_not_load_driver():
    code = "import sys, tilec.runtime, tilec.runtime.launcher; print('cuda.bindings.driver' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_driver_is_a_driver_error():
    if rt.gpu_available():
        pytest.skip("a driver is present here")
    with pytest.raises(rt.DriverError, match="no CUDA driver found"):
        rt.empty(4)
    assert isinstance(rt.DriverError("x"), RuntimeError)


def _fake(shape, dtype=float32, strides=None, ptr=0x7F0000001000):
    isz = dtype.itemsize
    if strides is None:
        strides, acc = [], isz
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    return DeviceArray(ptr, shape, strides, dtype, 0)


@pytest.mark.parametrize("dtype", [float32, bfloat16, int64])
def test_dlpack_round_trip(dtype):
    a = _fake((3, 5), dtype, strides=(5 * 2 * dtype.itemsize, dtype.itemsize))
    assert a.__dlpack_device__() == (2, 0)
    b = dlpack.from_dlpack(a)
    assert (b.ptr, b.shape, b.strides, b.dtype, b.device) == (a.ptr, a.shape, a.strides, a.dtype, 0)
    assert not dlpack._live or any(rec[0] is a for rec in dlpack._live.values())
    del b  # the consumer's view dies: the producer's record goes away
    assert not any(rec[0] is a for rec in dlpack._live.values())


def test_unconsumed_capsule_releases_producer():
    a = _fake((4,))
    cap = a.__dlpack__()
    assert any(rec[0] is a for rec in dlpack._live.values())
    del cap
    assert not any(rec[0] is a for rec in dlpack._live.values())


def test_host_dlpack_and_numpy_rejected():
    with pytest.raises(TypeError, match="tc.from_numpy"):
        dlpack.from_dlpack(np.zeros(3))
    with pytest.raises(TypeError, match="tc.from_numpy"):
        interop.array_info(np.zeros((2, 2), np.float32))


def test_cuda_array_interface_of_device_array():
    a = _fake((2, 3), float16)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<f2" and cai["strides"] is None
    assert cai["data"] == (a.ptr, False)
    assert typestr(bfloat16) == "<V2"
    t = _fake((2, 3), float32, strides=(4, 8))
    assert t.__cuda_array_interface__["strides"] == (4, 8)
    assert interop.array_info(t) == (t.ptr, (2, 3), (1, 2), float32, 0)


class _CAI:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"shape": (4, 6), "typestr": "<i4", "data": (ptr, False),
                                         "version": 3, "strides": (48, 4)}
        self.device = type("D", (), {"id": 0})()


def test_generic_cuda_array_interface():
    ptr, shape, strides, dt, dev = interop.array_info(_CAI(0x1000))
    assert (ptr, shape, strides, dt, dev) == (0x1000, (4, 6), (12, 1), int32, 0)
    assert interop.array_info(3.0) is None


def test_packer_writes_every_slot():
    ck = axpy()
    pack, addr = packing.build_packer(ck, ["x", "y", "out", "alpha"])
    infos = [(0x1000, (10,), (1,), float32, 0), (0x2000, (11,), (1,), float32, 0),
             (0x3000, (12,), (1,), float32, 0), None]
    pack([None, None, None, 2.5], infos)
    arr = (ctypes.c_void_p * 7).from_address(addr)
    read = [ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint64,
            ctypes.c_int32, ctypes.c_float]
    got = [t.from_address(arr[i]).value for i, t in enumerate(read)]
    assert got == [0x1000, 10, 0x2000, 11, 0x3000, 12, 2.5]
    assert "infos[2][1][0]" in pack.source


def test_half_scalar_bits():
    assert packing._f16_bits(1.0) == 0x3C00
    assert packing._bf16_bits(1.0) == 0x3F80
    assert packing._bf16_bits(-2.0) == 0xC000


def test_bind_and_signature():
    def k(x, n, BLOCK: "tc.constexpr" = 64):  # noqa: F821 - string annotation as users may write it
        pass

    st = launcher.KernelState(k)
    assert st.constexpr == {2}
    assert st.bind((1,), {"n": 5}) == [1, 5, 64]
    with pytest.raises(TypeError, match="missing argument 'n'"):
        st.bind((1,), {})
    with pytest.raises(TypeError, match="no parameter or launch option 'm'"):
        st.bind((1, 2), {"m": 3})
    a = _fake((100,), ptr=0x1000)
    b = _fake((100,), ptr=0x1004)
    p1, _, _ = launcher._signature(st, [a, 32, 64])
    p2, _, _ = launcher._signature(st, [b, 33, 128])
    assert p1[0] != p2[0] and p1[1] != p2[1] and p1[2] != p2[2]
    assert launcher._signature(st, [a, 48, 64])[0] == p1
    with pytest.raises(TypeError, match="argument 'n'"):
        launcher._signature(st, [a, "five", 64])
    other = DeviceArray(0x1000, (4,), (4,), float32, 1)
    st2 = launcher.KernelState(lambda x, y: None)
    with pytest.raises(ValueError, match="different devices"):
        launcher._signature(st2, [a, other])


def test_grid_normalization():
    # the one grid normalizer (tilec.grid) that the launcher, launch_compiled and the interpreter use
    assert normalize_grid(5, None, "k") == (5, 1, 1)
    assert normalize_grid((2, 3), None, "k") == (2, 3, 1)
    with pytest.raises(TypeError, match="kernel 'k': the grid must be"):
        normalize_grid((1, 2, 3, 4), None, "k")
    with pytest.raises(ValueError, match="kernel 'k': grid extents must be >= 0, got -1"):
        normalize_grid((-1,), None, "k")
