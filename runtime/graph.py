"""CUDA graphs of tilec launches, for users without torch (with torch, `torch.cuda.graph`
captures tilec ops like any other: docs/torch.md).

    s = tc.Stream()
    g = tc.Graph()
    with g.capture(s):          # launches on s are recorded, not run
        kernel[grid](x, y, out)  # stream= not needed: the capture's stream is the current one
        sk.softmax(out, out=y)
    g.replay()                   # one cuGraphLaunch for the lot; again with new data in x

Inside `capture`, every tilec launch without `stream=` goes to the capture's stream (the
current stream of this thread), and `tilec.runtime.zeros` clears memory with a stream-ordered memset,
so that the clearing is part of the graph. Memory allocated during the capture (the
stdlib's scratch buffers) is kept alive by the graph, since its launches hold their
addresses. As with any CUDA graph, replays use the arrays captured: write new inputs into
them, read results from them. What the capture cannot record raises its DriverError and
ends the capture: a host read of device memory (a synchronization), or a kernel compiled for
the first time when the driver refuses to load modules while capturing; launch each kernel
once before capturing, as with torch.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import List, Optional

from . import driver
from .driver import check, cu
from .stream import Stream, stream_handle

__all__ = ["Graph", "current_stream"]


def current_stream() -> int:
    """The raw handle launches without `stream=` go to on this thread (0: the legacy default
    stream, or torch's current stream when an argument is a torch tensor)."""
    return getattr(driver._tls, "stream", 0)  # noqa: SLF001


class Graph:
    """A CUDA graph captured from tilec launches on one stream, replayed with `replay()`."""

    def __init__(self):
        self._graph = None
        self._exec = None
        self._stream: Optional[Stream] = None
        self._handle = 0
        self._keep: List[object] = []   # allocations made during the capture
        self.device: Optional[int] = None

    @property
    def captured(self) -> bool:
        return self._exec is not None

    @contextmanager
    def capture(self, stream=None):
        """Record the launches of the `with` block on `stream` (a tc.Stream, a torch/CuPy
        stream or a raw handle; a new non-blocking tc.Stream when None). The legacy default
        stream (0) cannot be captured: ValueError."""
        if self._exec is not None:
            raise RuntimeError("this Graph is already captured; make a new tc.Graph for another capture")
        if getattr(driver._tls, "graph_keep", None) is not None:  # noqa: SLF001
            raise RuntimeError("a tc.Graph capture is already running on this thread")
        if stream is None:
            stream = Stream()
        h = stream_handle(stream)
        if h == 0:
            raise ValueError("stream must be a created stream (tc.Stream()); the legacy default stream "
                             "cannot be captured")
        self.device = getattr(stream, "device", None)
        if self.device is None:
            self.device = driver.current_device()
        driver.ensure_context(self.device)
        d = cu()
        s = d.CUstream(h)
        # relaxed: the stdlib may allocate its scratch memory (cuMemAlloc) while capturing
        check(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
              "cuStreamBeginCapture")
        tls = driver._tls  # noqa: SLF001
        before = getattr(tls, "stream", 0)
        tls.stream, tls.graph_keep = h, self._keep
        try:
            yield self
        except BaseException:
            res = d.cuStreamEndCapture(s)
            if res[0].value == 0 and res[1] is not None:
                d.cuGraphDestroy(res[1])
            self._keep.clear()
            raise
        finally:
            tls.stream, tls.graph_keep = before, None
        self._graph = check(d.cuStreamEndCapture(s), "cuStreamEndCapture")
        self._exec = check(d.cuGraphInstantiate(self._graph, 0), "cuGraphInstantiate")
        self._stream = stream if isinstance(stream, Stream) else None   # kept alive: replays launch on it
        self._handle = h

    def replay(self, stream=None) -> None:
        """Launch the captured graph on `stream` (default: the stream it was captured on).
        Asynchronous, like a kernel launch: synchronize the stream to wait for it."""
        if self._exec is None:
            raise RuntimeError("nothing to replay: capture launches first (with graph.capture(stream): ...)")
        h = self._handle if stream is None else stream_handle(stream)
        driver.ensure_context(self.device)
        d = cu()
        check(d.cuGraphLaunch(self._exec, d.CUstream(h)), "cuGraphLaunch")

    def synchronize(self) -> None:
        """Wait for the replays queued on the capture's stream."""
        driver.ensure_context(self.device)
        check(cu().cuStreamSynchronize(cu().CUstream(self._handle)), "cuStreamSynchronize")

    def __del__(self):
        if not driver._initialized:  # noqa: SLF001
            return
        try:
            d = cu()
            if getattr(self, "_exec", None) is not None:
                d.cuGraphExecDestroy(self._exec)
            if getattr(self, "_graph", None) is not None:
                d.cuGraphDestroy(self._graph)
        except Exception:  # noqa: BLE001 - a destructor must not raise
            pass
