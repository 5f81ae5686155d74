"""Streams and events.

The default launch stream is the legacy default stream (handle 0), which
synchronizes with every other blocking stream of the context, as CUDA C++ code
compiled without --default-stream per-thread does. When an argument is a torch
tensor, the launch goes on torch's current stream instead, so tilec kernels
order correctly with the torch ops around them. `stream=` at launch overrides
both (a tc.Stream, a torch/CuPy stream, or a raw CUstream handle as int).
"""
from __future__ import annotations

from typing import Optional

from . import driver
from .driver import check, cu

__all__ = ["Stream", "Event", "synchronize", "stream_handle"]


class Stream:
    """A CUDA stream on a device (non-blocking with respect to the legacy default stream
    unless `blocking=True`)."""

    def __init__(self, device: Optional[int] = None, blocking: bool = False, priority: int = 0):
        self.device = driver.current_device() if device is None else device
        driver.ensure_context(self.device)
        d = cu()
        flags = 0 if blocking else d.CUstream_flags.CU_STREAM_NON_BLOCKING.value
        self._handle = check(d.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
        self.handle = int(self._handle)

    def synchronize(self) -> None:
        driver.ensure_context(self.device)
        check(cu().cuStreamSynchronize(self._handle), "cuStreamSynchronize")

    def query(self) -> bool:
        """True when all work queued on the stream has finished."""
        res = cu().cuStreamQuery(self._handle)[0]
        if getattr(res, "name", "") == "CUDA_ERROR_NOT_READY":
            return False
        check((res,), "cuStreamQuery")
        return True

    def wait_event(self, event: "Event") -> None:
        check(cu().cuStreamWaitEvent(self._handle, event._handle, 0), "cuStreamWaitEvent")

    @property
    def cuda_stream(self) -> int:  # the attribute name CuPy/numba use for raw handles
        return self.handle

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h is not None and driver._initialized:  # noqa: SLF001
            try:
                cu().cuStreamDestroy(h)
            except Exception:  # noqa: BLE001 - a destructor must not raise
                pass

    def __repr__(self) -> str:
        return f"<tilec.Stream 0x{self.handle:x} on device {self.device}>"


class Event:
    """A CUDA event: record on a stream, wait for it, time between two of them."""

    def __init__(self, enable_timing: bool = True, device: Optional[int] = None):
        self.device = driver.current_device() if device is None else device
        driver.ensure_context(self.device)
        d = cu()
        flags = 0 if enable_timing else d.CUevent_flags.CU_EVENT_DISABLE_TIMING.value
        self._handle = check(d.cuEventCreate(flags), "cuEventCreate")

    def record(self, stream=None) -> "Event":
        check(cu().cuEventRecord(self._handle, stream_handle(stream)), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        check(cu().cuEventSynchronize(self._handle), "cuEventSynchronize")

    def query(self) -> bool:
        res = cu().cuEventQuery(self._handle)[0]
        if getattr(res, "name", "") == "CUDA_ERROR_NOT_READY":
            return False
        check((res,), "cuEventQuery")
        return True

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to `end` (both recorded and complete)."""
        return float(check(cu().cuEventElapsedTime(self._handle, end._handle), "cuEventElapsedTime"))

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h is not None and driver._initialized:  # noqa: SLF001
            try:
                cu().cuEventDestroy(h)
            except Exception:  # noqa: BLE001
                pass


def stream_handle(stream) -> int:
    """The raw CUstream handle (int) of a tilec/torch/CuPy stream, an int, or None (legacy default)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if isinstance(stream, Stream):
        return stream.handle
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy Stream, cuda.core
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    try:
        return int(stream)  # cuda.bindings CUstream
    except (TypeError, ValueError):
        raise TypeError(f"stream= must be a tc.Stream, a torch/CuPy stream or a raw handle, "
                        f"got {type(stream).__name__}") from None


def synchronize(device: Optional[int] = None) -> None:
    """Wait for all work on `device` (default: the current one); raises on an earlier GPU fault."""
    dev = driver.current_device() if device is None else device
    driver.ensure_context(dev)
    check(cu().cuCtxSynchronize(), "cuCtxSynchronize")
