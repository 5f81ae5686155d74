"""tilec's own device array, so that kernels run with no other GPU framework installed.

A `DeviceArray` is a strided view of device memory: `ptr` (int), `shape`,
`strides` in bytes (numpy convention), `dtype` (a tilec DType) and `device`.
The allocation is freed when the last array viewing it is garbage collected.
Copies between host and device are synchronous (they wait for work queued on
the legacy default stream, and the host waits for them).
"""
from __future__ import annotations

import weakref
from typing import Optional, Sequence, Tuple

import numpy as np

from .. import dtypes as _dt
from ..dtypes import DType
from ..specialize import ArrayInfo
from . import driver
from .driver import DriverError, check, cu
from .graph import current_stream

__all__ = ["DeviceArray", "OutOfMemoryError", "empty", "empty_maker", "zeros", "from_numpy", "typestr"]


class OutOfMemoryError(DriverError, MemoryError):
    """A device allocation failed for lack of memory."""


# Host storage used to move bits of each dtype (bf16 and fp8 have no numpy type).
_BITS_NP = {"bf16": np.uint16, "f8e4m3": np.uint8, "f8e5m2": np.uint8}
_TYPESTR = {"i1": "|b1", "f16": "<f2", "bf16": "<V2", "f8e4m3": "|V1", "f8e5m2": "|V1"}


def typestr(dt: DType) -> str:
    """The __array_interface__ type string of a tilec dtype (void for bf16/fp8, which numpy lacks)."""
    if dt.name in _TYPESTR:
        return _TYPESTR[dt.name]
    return np.dtype(dt.np).str


def _host_dtype(dt: DType) -> np.dtype:
    """The numpy dtype holding the exact bits of `dt` (ml_dtypes' types when installed)."""
    if dt.name in _BITS_NP:
        try:
            import ml_dtypes  # noqa: PLC0415
            return np.dtype({"bf16": ml_dtypes.bfloat16, "f8e4m3": ml_dtypes.float8_e4m3fn,
                             "f8e5m2": ml_dtypes.float8_e5m2}[dt.name])
        except ImportError:
            return np.dtype(_BITS_NP[dt.name])
    return np.dtype(dt.np)


class _Allocation:
    """Owns one cuMemAlloc block; frees it when collected."""

    __slots__ = ("ptr", "nbytes", "device", "__weakref__")

    def __init__(self, nbytes: int, device: int):
        self.nbytes, self.device = nbytes, device
        driver.ensure_context(device)
        d = cu()
        if nbytes == 0:
            self.ptr = 0
            return
        res, ptr = d.cuMemAlloc(nbytes)
        if res.value != 0:
            if getattr(res, "name", "") == "CUDA_ERROR_OUT_OF_MEMORY":
                free, total = check(d.cuMemGetInfo(), "cuMemGetInfo")
                raise OutOfMemoryError(
                    f"out of GPU memory: tilec asked for {_fmt_bytes(nbytes)} on device {device} "
                    f"({_fmt_bytes(free)} free of {_fmt_bytes(total)})")
            check((res, ptr), "cuMemAlloc")
        self.ptr = int(ptr)
        weakref.finalize(self, _free, self.ptr, device)
        keep = getattr(driver._tls, "graph_keep", None)  # noqa: SLF001
        if keep is not None:   # made while a tc.Graph captures: its launches hold the address
            keep.append(self)


def _free(ptr: int, device: int) -> None:
    try:
        driver.ensure_context(device)
        cu().cuMemFree(ptr)
    except Exception:  # noqa: BLE001 - a finalizer must not raise (e.g. after a GPU fault)
        pass


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def _as_dtype(dtype) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        try:
            return DType.get(dtype)
        except ValueError:
            pass
    return _dt.from_numpy(np.dtype(dtype) if not hasattr(dtype, "name") else dtype)


def _contiguous_strides(shape: Sequence[int], itemsize: int) -> Tuple[int, ...]:
    strides, acc = [], itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


class DeviceArray:
    """A strided array in GPU memory (see module doc). Build with tc.empty/zeros/from_numpy."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "_owner", "_info", "_sig", "__weakref__")

    def __init__(self, ptr: int, shape, strides, dtype: DType, device: int, owner=None):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = dtype
        self.device = int(device)
        self._owner = owner  # keeps the allocation (or a DLPack producer) alive
        # What the launcher reads on every call, computed once: the array never changes.
        isz = dtype.itemsize
        self._info = ArrayInfo(self.ptr, self.shape, tuple(s // isz for s in self.strides), dtype, self.device)
        self._sig = None

    # properties --------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        return self.size == 0 or self.strides == _contiguous_strides(self.shape, self.itemsize)

    def data_ptr(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype!r}, device={self.device})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    # copies ------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        """A host copy (bf16/fp8 as ml_dtypes types when installed, else their raw bits)."""
        if not self.is_contiguous:
            raise ValueError("to_numpy() needs a contiguous DeviceArray; this one has strides "
                             f"{self.strides} for shape {self.shape}")
        out = np.empty(self.shape, dtype=_host_dtype(self.dtype))
        if self.nbytes:
            driver.ensure_context(self.device)
            check(cu().cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return out

    def copy_from_numpy(self, a) -> "DeviceArray":
        """Overwrite this array with the host array `a` (same shape; converted to this dtype)."""
        a = np.asarray(a)
        if a.shape != self.shape:
            raise ValueError(f"copy_from_numpy: shape {a.shape} does not match the DeviceArray's {self.shape}")
        if not self.is_contiguous:
            raise ValueError("copy_from_numpy needs a contiguous DeviceArray")
        host = np.ascontiguousarray(_to_host_bits(a, self.dtype))
        if self.nbytes:
            driver.ensure_context(self.device)
            check(cu().cuMemcpyHtoD(self.ptr, host.ctypes.data, self.nbytes), "cuMemcpyHtoD")
        return self

    # interop -----------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": typestr(self.dtype),
            "data": (self.ptr, False),
            "version": 3,
            "strides": None if self.is_contiguous else self.strides,
        }

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        from .dlpack import to_dlpack_capsule  # noqa: PLC0415
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy (copy=True was asked)")
        return to_dlpack_capsule(self)

    def __dlpack_device__(self):
        return (2, self.device)  # kDLCUDA


def _to_host_bits(a: np.ndarray, dt: DType) -> np.ndarray:
    target = _host_dtype(dt)
    if a.dtype == target:
        return a
    if dt.name in _BITS_NP and target == np.dtype(_BITS_NP[dt.name]):
        if dt.name == "bf16" and a.dtype.kind == "f":
            # round to nearest even on the upper 16 bits of the f32 pattern
            bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
            rounded = bits + 0x7FFF + ((bits >> 16) & 1)
            return (rounded >> 16).astype(np.uint16)
        raise TypeError(f"cannot convert {a.dtype} to {dt!r} without ml_dtypes; install ml_dtypes "
                        f"or pass the raw bits as {np.dtype(_BITS_NP[dt.name])}")
    return a.astype(target)


def _resolve_device(device: Optional[int]) -> int:
    if device is None:
        return driver.current_device()
    if hasattr(device, "index"):  # torch.device / cupy.cuda.Device
        device = device.index if device.index is not None else driver.current_device()
    if hasattr(device, "id"):
        device = device.id
    if isinstance(device, str) and device.startswith("cuda"):
        device = int(device.partition(":")[2] or driver.current_device())
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"device must be a CUDA device ordinal, got {device!r}")
    return device


def empty(shape, dtype=_dt.float32, device: Optional[int] = None) -> DeviceArray:
    """An uninitialized contiguous DeviceArray."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    dt = _as_dtype(dtype)
    dev = _resolve_device(device)
    n = 1
    for s in shape:
        n *= s
    alloc = _Allocation(n * dt.itemsize, dev)
    return DeviceArray(alloc.ptr, shape, _contiguous_strides(shape, dt.itemsize), dt, dev, alloc)


def empty_maker(shape, dtype=_dt.float32, device: Optional[int] = None):
    """A function of no arguments making uninitialized contiguous DeviceArrays of one shape, dtype
    and device: `empty(shape, dtype, device)` with its checks and strides done once (the stdlib's
    launch plans allocate their outputs so, per call)."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    dt, dev = _as_dtype(dtype), _resolve_device(device)
    isz = dt.itemsize
    strides = _contiguous_strides(shape, isz)
    el_strides = tuple(st // isz for st in strides)
    nbytes = isz
    for s in shape:
        nbytes *= s
    new = DeviceArray.__new__

    def make() -> DeviceArray:
        alloc = _Allocation(nbytes, dev)
        a = new(DeviceArray)
        a.ptr, a.shape, a.strides, a.dtype, a.device, a._owner, a._sig = alloc.ptr, shape, strides, dt, dev, alloc, None
        a._info = ArrayInfo(alloc.ptr, shape, el_strides, dt, dev)
        return a
    return make


def zeros(shape, dtype=_dt.float32, device: Optional[int] = None) -> DeviceArray:
    """A contiguous DeviceArray of zeros."""
    arr = empty(shape, dtype, device)
    if arr.nbytes:
        h = current_stream()
        if h:   # a tc.Graph capture's stream: the clearing is recorded with the launches
            d = cu()
            check(d.cuMemsetD8Async(arr.ptr, 0, arr.nbytes, d.CUstream(h)), "cuMemsetD8Async")
        else:
            check(cu().cuMemsetD8(arr.ptr, 0, arr.nbytes), "cuMemsetD8")
    return arr


def from_numpy(a, device: Optional[int] = None, dtype=None) -> DeviceArray:
    """Copy the host array `a` to the GPU (as `dtype` when given, e.g. tc.bfloat16)."""
    a = np.asarray(a)
    dt = _as_dtype(dtype) if dtype is not None else _as_dtype(a.dtype)
    arr = empty(a.shape, dt, device)
    return arr.copy_from_numpy(a)
