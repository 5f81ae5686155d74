"""DLPack exchange (unversioned "dltensor" capsules) written with ctypes.

Producer: `to_dlpack_capsule(arr)` wraps a DeviceArray in a DLManagedTensor whose
deleter drops the reference that keeps the array alive. Consumer:
`from_dlpack(obj)` takes any object with `__dlpack__` on a CUDA device and views
its memory as a DeviceArray; the producer's deleter runs when that view dies.
Layout per dlpack.h (v0.8 / v1.x legacy struct).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Dict

from ..dtypes import DType

__all__ = ["to_dlpack_capsule", "from_dlpack", "peek_dlpack", "DLPACK_CODES"]

kDLCUDA, kDLCUDAManaged = 2, 13


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _Deleter)]

# (DLDataTypeCode, bits) per tilec dtype; bf16 = kDLBfloat, fp8 codes from dlpack 1.1.
DLPACK_CODES = {
    "i1": (6, 8), "i8": (0, 8), "i16": (0, 16), "i32": (0, 32), "i64": (0, 64),
    "u8": (1, 8), "u16": (1, 16), "u32": (1, 32), "u64": (1, 64),
    "f16": (2, 16), "f32": (2, 32), "f64": (2, 64), "bf16": (4, 16),
    "f8e4m3": (10, 8), "f8e5m2": (12, 8),
}
_FROM_CODE = {v: k for k, v in DLPACK_CODES.items()}
_FROM_CODE[(1, 1)] = "i1"

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

# Producer-side records kept alive until the consumer (or the capsule) calls the deleter.
_live: Dict[int, tuple] = {}
_live_lock = threading.Lock()


@_Deleter
def _managed_deleter(mt_ptr):
    addr = ctypes.cast(mt_ptr, ctypes.c_void_p).value
    with _live_lock:
        _live.pop(addr, None)


@_CapsuleDestructor
def _capsule_destructor(capsule_ptr):
    # An unconsumed capsule still named "dltensor" owns the tensor: release it.
    if _api.PyCapsule_IsValid(capsule_ptr, b"dltensor"):
        mt = _get_pointer_raw(capsule_ptr, b"dltensor")
        if mt:
            _managed_deleter(ctypes.cast(mt, ctypes.POINTER(DLManagedTensor)))


def to_dlpack_capsule(arr) -> object:
    """A "dltensor" capsule viewing the DeviceArray `arr` (kept alive until deleted)."""
    code_bits = DLPACK_CODES[arr.dtype.name]
    nd = arr.ndim
    shape = (ctypes.c_int64 * max(nd, 1))(*arr.shape)
    strides = (ctypes.c_int64 * max(nd, 1))(*(s // arr.itemsize for s in arr.strides))
    mt = DLManagedTensor()
    mt.dl_tensor.data = arr.ptr or None
    mt.dl_tensor.device = DLDevice(kDLCUDA, arr.device)
    mt.dl_tensor.ndim = nd
    mt.dl_tensor.dtype = DLDataType(code_bits[0], code_bits[1], 1)
    mt.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    mt.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    mt.dl_tensor.byte_offset = 0
    mt.manager_ctx = None
    mt.deleter = _managed_deleter
    addr = ctypes.addressof(mt)
    with _live_lock:
        _live[addr] = (arr, mt, shape, strides)
    return _api.PyCapsule_New(addr, b"dltensor", ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class _DLPackOwner:
    """Keeps a consumed DLManagedTensor; calls its deleter when the last view dies."""

    __slots__ = ("mt",)

    def __init__(self, mt):
        self.mt = mt

    def __del__(self):
        mt, self.mt = self.mt, None
        if mt and mt.contents.deleter:
            mt.contents.deleter(mt)


def _read_tensor(t: DLTensor):
    dev_type, dev_id = t.device.device_type, t.device.device_id
    if dev_type not in (kDLCUDA, kDLCUDAManaged):
        raise TypeError(f"DLPack tensor is on device type {dev_type}, not CUDA (2); tilec kernels "
                        f"take GPU arrays: move host data with tc.from_numpy")
    key = (t.dtype.code, t.dtype.bits)
    if key not in _FROM_CODE or t.dtype.lanes != 1:
        raise TypeError(f"DLPack dtype (code={t.dtype.code}, bits={t.dtype.bits}, lanes={t.dtype.lanes}) "
                        f"is not supported by tilec")
    dt = DType.get(_FROM_CODE[key])
    nd = t.ndim
    shape = tuple(t.shape[i] for i in range(nd))
    if t.strides:
        strides = tuple(t.strides[i] * dt.itemsize for i in range(nd))
    else:
        strides, acc = [], dt.itemsize
        for s in reversed(shape):
            strides.append(acc)
            acc *= max(s, 1)
        strides = tuple(reversed(strides))
    ptr = (t.data or 0) + t.byte_offset
    return ptr, shape, strides, dt, dev_id


def _capsule(obj, stream):
    if hasattr(obj, "__dlpack_device__"):
        dev_type, _ = obj.__dlpack_device__()
        if int(dev_type) not in (kDLCUDA, kDLCUDAManaged):
            raise TypeError(f"{type(obj).__name__} lives on DLPack device type {int(dev_type)}, not a "
                            f"CUDA GPU; tilec kernels take GPU arrays (use tc.from_numpy for host data)")
    try:
        return obj.__dlpack__(stream=stream)
    except TypeError:
        return obj.__dlpack__()


def peek_dlpack(obj, stream=None):
    """(ptr, shape, byte strides, DType, device) of a DLPack producer, without taking ownership."""
    cap = _capsule(obj, stream)
    mt = _api.PyCapsule_GetPointer(cap, b"dltensor")
    t = ctypes.cast(mt, ctypes.POINTER(DLManagedTensor)).contents.dl_tensor
    return _read_tensor(t)  # the capsule's destructor releases the producer's record


def from_dlpack(obj, stream=None):
    """A DeviceArray viewing the memory of DLPack producer `obj` (no copy)."""
    from .memory import DeviceArray  # noqa: PLC0415
    cap = _capsule(obj, stream) if not _is_capsule(obj) else obj
    raw = _api.PyCapsule_GetPointer(cap, b"dltensor")
    mt = ctypes.cast(raw, ctypes.POINTER(DLManagedTensor))
    ptr, shape, strides, dt, dev = _read_tensor(mt.contents.dl_tensor)
    _api.PyCapsule_SetName(cap, b"used_dltensor")  # we own it now: the capsule must not delete it
    return DeviceArray(ptr, shape, strides, dt, dev, owner=_DLPackOwner(mt))


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"
