"""Reading GPU arrays of other libraries: torch, CuPy, __cuda_array_interface__, DLPack.

`array_info(obj)` returns the `specialize.ArrayInfo` (ptr, shape, strides in
elements, DType, device ordinal) of any GPU array tilec accepts, or None for a
non-array; importing this module registers it with the specializer, so that
`kernel.compile(gpu_array, ...)` and launches specialize on the same description. The launcher calls it on every
argument of every launch, so the common types (DeviceArray, torch.Tensor) have
direct readers chosen by exact type; others go through the generic protocols.
Host arrays raise a TypeError that says how to move them to the GPU.
"""
from __future__ import annotations

import sys
from typing import Callable, Dict, Optional

from .. import dtypes as _dt
from .. import specialize
from ..dtypes import DType
from ..specialize import ArrayInfo
from .memory import DeviceArray

__all__ = ["array_info", "torch_dtype_map", "device_of_pointer"]

_readers: Dict[type, Callable] = {}
_torch_dtypes: Dict[object, DType] = {}


def torch_dtype_map(tdtype) -> DType:
    dt = _torch_dtypes.get(tdtype)
    if dt is None:
        dt = _torch_dtypes[tdtype] = _dt.from_numpy(str(tdtype))
    return dt


def _read_device_array(a: DeviceArray):
    return a._info  # noqa: SLF001 - computed once at construction


def _read_torch(t):
    if not t.is_cuda:
        raise TypeError(f"a torch tensor on {t.device} was passed to a GPU kernel; move it with "
                        f".cuda() (or use tc.interpret() to run on the CPU)")
    return ArrayInfo(t.data_ptr(), tuple(t.shape), t.stride(), torch_dtype_map(t.dtype), t.get_device())


def _typestr_dtype(typestr: str) -> DType:
    import numpy as np  # noqa: PLC0415
    if typestr[1:] == "b1":
        return _dt.bool_
    try:
        return _dt.from_numpy(np.dtype(typestr))
    except TypeError:
        raise TypeError(f"__cuda_array_interface__ typestr {typestr!r} is not a tilec dtype "
                        f"(bf16/fp8 arrays: pass them through DLPack or torch)") from None


def _read_cai(obj):
    cai = obj.__cuda_array_interface__
    dt = _typestr_dtype(cai["typestr"])
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    isz = dt.itemsize
    if strides is None:
        acc, out = 1, []
        for s in reversed(shape):
            out.append(acc)
            acc *= max(s, 1)
        strides_el = tuple(reversed(out))
    else:
        if any(s % isz for s in strides):
            raise ValueError(f"array strides {tuple(strides)} are not multiples of the item size {isz}")
        strides_el = tuple(int(s) // isz for s in strides)
    ptr = int(cai["data"][0] or 0)
    dev = getattr(getattr(obj, "device", None), "id", None)  # CuPy
    if not isinstance(dev, int):
        dev = device_of_pointer(ptr)
    return ArrayInfo(ptr, shape, strides_el, dt, dev)


def _read_dlpack(obj):
    from .dlpack import peek_dlpack  # noqa: PLC0415
    ptr, shape, strides, dt, dev = peek_dlpack(obj)
    isz = dt.itemsize
    return ArrayInfo(ptr, shape, tuple(s // isz for s in strides), dt, dev)


def device_of_pointer(ptr: int) -> int:
    """The device ordinal a device pointer belongs to (the current device for null)."""
    from . import driver  # noqa: PLC0415
    if not ptr:
        return driver.current_device()
    d = driver.cu()
    attr = d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    res, val = d.cuPointerGetAttribute(attr, ptr)
    if res.value != 0:
        raise TypeError(f"address 0x{ptr:x} is not CUDA device memory ({getattr(res, 'name', res)})")
    return int(val)


def _reject_host(obj):
    raise TypeError(f"a host numpy array (shape {obj.shape}, {obj.dtype}) was passed to a GPU kernel; "
                    f"copy it to the GPU first with tc.from_numpy(a) (and back with .to_numpy()), "
                    f"or run under the interpreter with tc.interpret()")


def _reader_for(cls: type) -> Optional[Callable]:
    if cls is DeviceArray or issubclass(cls, DeviceArray):
        return _read_device_array
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(cls, torch.Tensor):
        return _read_torch
    np = sys.modules.get("numpy")
    if np is not None and issubclass(cls, (np.ndarray, np.generic)) and cls is not np.generic:
        return _reject_host if issubclass(cls, np.ndarray) else None
    if hasattr(cls, "__cuda_array_interface__"):
        return _read_cai
    if hasattr(cls, "__dlpack__"):
        return _read_dlpack
    return None


def array_info(obj):
    """The ArrayInfo of a GPU array, or None for a non-array (TypeError for a host array)."""
    cls = type(obj)
    try:
        reader = _readers[cls]
    except KeyError:
        reader = _readers[cls] = _reader_for(cls)
    if reader is not None:
        return reader(obj)
    if hasattr(obj, "__cuda_array_interface__"):  # set per instance rather than on the class
        return _read_cai(obj)
    return None



# The specializer reads GPU arrays as the launcher does (host arrays stay numpy's).
specialize.register_array_adapter(lambda obj: _reader_for(type(obj)) not in (None, _reject_host), array_info)
