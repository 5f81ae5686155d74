"""The CUDA driver, imported on first use, with every call's result checked.

Importing tilec never loads the driver: `cuda.bindings.driver` is imported by
`cu()` the first time something needs the GPU. With no driver library that
import (or the first call) raises cuda-pathfinder's DynamicLibNotFoundError;
it becomes `DriverError("no CUDA driver found ...")`. A driver with no device
becomes `DriverError("no CUDA device ...")`.

Contexts: tilec uses each device's primary context (the one the CUDA runtime,
PyTorch and CuPy use too), retained once and made current on the calling
thread whenever a launch or allocation needs it.
"""
from __future__ import annotations

import os
import threading
from typing import Dict, List, Optional

from ..errors import DriverError
from ..target import DeviceSource, register_device_source

__all__ = ["cu", "check", "init", "device_count", "current_device", "set_device", "Device",
           "get_device", "ensure_context", "DriverError", "is_available", "mark_context_broken",
           "describe_launch", "is_fault", "context_lost"]

_driver = None
_init_lock = threading.Lock()
_initialized = False
_devices: Dict[int, "Device"] = {}


class _ThreadState(threading.local):
    """The runtime's per-thread state. The class attributes are every thread's defaults, so a
    thread reads one it never set as a plain attribute: `getattr(tls, name, default)` on a
    missing attribute raises and catches an AttributeError inside, about 0.4 us, which a
    launch paid for the capture stream of every thread outside a tc.Graph capture."""
    device = 0          # set_device's ordinal
    ctx_device = None   # the device whose primary context is current on this thread
    stream = 0          # a tc.Graph capture's stream (graph.current_stream)
    graph_keep = None   # a tc.Graph capture's allocations, kept alive with the graph


_tls = _ThreadState()

# Errors after which the context cannot be used again (sticky errors).
_STICKY = {
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ASSERT", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_TENSOR_MEMORY_LEAK", "CUDA_ERROR_CONTEXT_IS_DESTROYED",
}
_broken_reason: Dict[int, str] = {}
# The last launch that the driver accepted, as (PreparedLaunch-like object with .name and
# .param_names, gx, gy, gz, array infos by parameter): set by the launcher after each launch
# (one tuple store, formatted only on a fault). Launches are asynchronous, so a kernel's fault
# shows at a later call (a synchronization, a copy, the next launch), whose error names it.
last_launch: Optional[tuple] = None

def _no_driver(err: BaseException) -> DriverError:
    detail = str(err).rstrip(".")
    return DriverError(f"no CUDA driver found ({detail}). tilec can still compile to PTX and run "
                       f"kernels under the interpreter (TILEC_INTERPRET=1), but launching on a GPU "
                       f"needs the NVIDIA driver (libcuda.so).")


def cu():
    """The `cuda.bindings.driver` module, with cuInit done once."""
    global _driver, _initialized
    if _initialized:
        return _driver
    with _init_lock:
        if _initialized:
            return _driver
        try:
            from cuda.bindings import driver  # noqa: PLC0415 - deliberately lazy
        except ImportError as e:
            raise DriverError(f"cuda-python is not installed ({e}); install 'cuda-python' to launch on a GPU") from None
        try:
            (res,) = driver.cuInit(0)
        except RuntimeError as e:  # DynamicLibNotFoundError derives from RuntimeError
            if isinstance(e, DriverError):
                raise
            raise _no_driver(e) from None
        name = _result_name(res)
        if name == "CUDA_ERROR_NO_DEVICE":
            raise DriverError("no CUDA device is visible (cuInit: CUDA_ERROR_NO_DEVICE); "
                              "check CUDA_VISIBLE_DEVICES and nvidia-smi")
        if name != "CUDA_SUCCESS":
            raise DriverError(f"cuInit failed: {name}: {_result_text(driver, res)}")
        _driver = driver
        _initialized = True
        return driver


def is_available() -> bool:
    """True when a CUDA driver and at least one device are present."""
    try:
        return device_count() > 0
    except DriverError:
        return False


def _result_name(res) -> str:
    return getattr(res, "name", str(res))


def _result_text(driver, res) -> str:
    try:
        err, s = driver.cuGetErrorString(res)
        return s.decode() if isinstance(s, bytes) else str(s)
    except Exception:  # noqa: BLE001 - only decorating a message
        return ""


def check(result, call: str, kernel: Optional[str] = None, launch: Optional[tuple] = None):
    """Unpack a cuda-python return tuple; raise DriverError naming `call` unless CUDA_SUCCESS.
    `kernel`: the kernel the call is about; `launch`: the launch it made, in `last_launch`'s
    form (a launch call's own, for a fault reported by the launch itself)."""
    res = result[0]
    if res.value != 0:
        raise _error(res, call, kernel, launch)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def describe_launch(launch: tuple) -> str:
    """'kernel 'k' on grid (gx, gy, gz) with x: f16[4096, 1000], ...' for a `last_launch` tuple."""
    prepared, gx, gy, gz, infos = launch
    args = []
    for name, info in zip(prepared.param_names, infos):
        if info is not None:
            shape, strides, dtype = tuple(info[1]), tuple(info[2]), info[3]
            text = f"{name}: {getattr(dtype, 'name', dtype)}[{', '.join(map(str, shape))}]"
            if strides != _row_major(shape):
                text += f" strides ({', '.join(map(str, strides))})"
            args.append(text)
    with_args = f" with {', '.join(args)}" if args else ""
    return f"kernel '{prepared.name}' on grid ({gx}, {gy}, {gz}){with_args}"


def _row_major(shape) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _launch_blocking() -> bool:
    return os.environ.get("CUDA_LAUNCH_BLOCKING", "") == "1"


def _error(res, call: str, kernel: Optional[str], launch: Optional[tuple] = None) -> DriverError:
    name = _result_name(res)
    text = _result_text(_driver, res) if _driver is not None else ""
    where = f"{call}" + (f" (kernel '{kernel}')" if kernel else "")
    msg = f"{where} failed: {name}" + (f": {text}" if text else "")
    dev = current_device()
    earlier = _broken_reason.get(dev)
    if earlier is not None:  # the fault was reported before: any error now is its aftermath
        err = DriverError(f"{msg}. The CUDA context of device {dev} was lost to an earlier fault ({earlier}): "
                          f"nothing can run on this device in this process any more; restart the process")
        err.context_lost, err.launch = True, None
        return err
    if name not in _STICKY:
        return DriverError(msg)
    # A launch reports its own kernel's fault only when launches block; otherwise the fault is
    # an earlier kernel's, shown at the first call after it: the last launch is the best guess.
    culprit = launch if (launch is not None and _launch_blocking()) else last_launch
    described = describe_launch(culprit) if culprit is not None else None
    if described:
        msg += (f". The fault comes from {described}, the last launch before this call (launches run "
                f"asynchronously: another launched since the last synchronization may be the one; "
                f"CUDA_LAUNCH_BLOCKING=1 makes each launch report its own fault)")
    _broken_reason.setdefault(dev, f"{name}" + (f" after {described}" if described else f" in {where}"))
    if name == "CUDA_ERROR_ASSERT":
        msg += ". A device_assert failed (the device printed its message and source line above)"
    msg += (f". The GPU reported a fault; the CUDA context of device {dev} is now unusable: "
            f"every further launch, copy or allocation on it will fail, so restart the process. "
            f"Run with compute-sanitizer, or TILEC_INTERPRET=1, to find the faulting access.")
    err = DriverError(msg)
    err.context_lost, err.launch = True, described
    return err


def context_lost(dev: Optional[int] = None) -> bool:
    """Whether device `dev` (default: the current one) has had a fault in this process."""
    return (current_device() if dev is None else dev) in _broken_reason


def is_fault(res) -> bool:
    """Whether a driver result code is a sticky error (the context is lost)."""
    return _result_name(res) in _STICKY


def mark_context_broken(dev: int, reason: str) -> None:
    _broken_reason.setdefault(dev, reason)


def device_count() -> int:
    d = cu()
    n = check(d.cuDeviceGetCount(), "cuDeviceGetCount")
    if n == 0:
        raise DriverError("no CUDA device is visible (cuDeviceGetCount returned 0)")
    return n


class Device:
    """One GPU: its ordinal, primary context, name, compute capability and limits."""

    def __init__(self, ordinal: int):
        d = cu()
        self.ordinal = ordinal
        self.handle = check(d.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = check(d.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        raw = check(d.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        self.name = raw.split(b"\0", 1)[0].decode()
        attr = d.CUdevice_attribute
        self.capability = (self._attr(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                           self._attr(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.multiprocessors = self._attr(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_shared_per_block_optin = self._attr(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    def _attr(self, a) -> int:
        return check(cu().cuDeviceGetAttribute(a, self.handle), "cuDeviceGetAttribute")

    def attribute(self, name: str) -> int:
        """The device attribute CU_DEVICE_ATTRIBUTE_<name>, e.g. "L2_CACHE_SIZE" (Target.for_device)."""
        return self._attr(getattr(cu().CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"))

    @property
    def arch(self) -> str:
        """The tilec target for this device (sm_90a on Hopper, where wgmma/TMA need the 'a')."""
        major, minor = self.capability
        suffix = "a" if (major, minor) in ((9, 0), (10, 0), (12, 0)) else ""
        return f"sm_{major}{minor}{suffix}"

    def __repr__(self) -> str:
        return f"<tilec.Device {self.ordinal}: {self.name} (sm_{self.capability[0]}{self.capability[1]})>"


def get_device(ordinal: Optional[int] = None) -> Device:
    """The Device for `ordinal` (default: the current one), its primary context retained."""
    if ordinal is None:
        ordinal = current_device()
    dev = _devices.get(ordinal)
    if dev is None:
        n = device_count()
        if not isinstance(ordinal, int) or not 0 <= ordinal < n:
            raise ValueError(f"device {ordinal!r} does not exist: {n} CUDA device(s) visible")
        with _init_lock:
            dev = _devices.get(ordinal)
            if dev is None:
                dev = _devices[ordinal] = Device(ordinal)
    return dev


def current_device() -> int:
    """The calling thread's current device ordinal (0 unless set_device was called)."""
    return getattr(_tls, "device", 0)


def set_device(ordinal: int) -> None:
    """Make `ordinal` the current device of the calling thread (used when no argument says otherwise)."""
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        raise TypeError(f"set_device expects a device ordinal (int), got {type(ordinal).__name__}")
    get_device(ordinal)  # validates and retains the context
    _tls.device = ordinal
    ensure_context(ordinal)


def ensure_context(ordinal: int) -> Device:
    """Make the primary context of `ordinal` current on this thread (cheap when it already is)."""
    if getattr(_tls, "ctx_device", None) == ordinal:
        return _devices[ordinal]
    if ordinal in _broken_reason:
        err = DriverError(f"the CUDA context of device {ordinal} was lost to an earlier fault "
                          f"({_broken_reason[ordinal]}): nothing can run on this device in this process "
                          f"any more; restart the process")
        err.context_lost = True
        raise err
    dev = get_device(ordinal)
    check(cu().cuCtxSetCurrent(dev.context), "cuCtxSetCurrent")
    _tls.ctx_device = ordinal
    return dev


def forget_thread_context() -> None:
    """Drop this thread's note of which context is current (another library may have changed it)."""
    _tls.ctx_device = None


def devices() -> List[Device]:
    return [get_device(i) for i in range(device_count())]


def _current_or_none() -> Optional[int]:
    return current_device() if is_available() else None


def _describe(ordinal: int):
    """(arch, name, Target facts) of device `ordinal`, from the driver's attributes."""
    dev = get_device(ordinal)
    a = dev.attribute
    return dev.arch, dev.name, dict(
        sm_count=a("MULTIPROCESSOR_COUNT"), shared_per_block=a("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        shared_per_sm=a("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"), registers_per_sm=a("MAX_REGISTERS_PER_MULTIPROCESSOR"),
        max_threads_per_sm=a("MAX_THREADS_PER_MULTIPROCESSOR"), max_programs_per_sm=a("MAX_BLOCKS_PER_MULTIPROCESSOR"),
        l2_bytes=a("L2_CACHE_SIZE"))


register_device_source(DeviceSource(_current_or_none, _describe))
