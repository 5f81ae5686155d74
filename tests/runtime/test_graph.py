"""tc.Graph on the CPU, against a stand-in driver: the capture's calls in order, the current
stream launches and memsets go to while it captures, allocations kept alive, and every misuse
a clear error. The capture on the GPU: test_graph_gpu.py."""
from __future__ import annotations

import pytest

import tilec as tc
from tilec.runtime import driver, graph as graph_mod, launcher, memory


class _Res:
    def __init__(self, v=0):
        self.value = v


class _FakeDriver:
    """Records the graph, stream and memory calls; answers with handles."""

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_RELAXED = "relaxed"

    def __init__(self):
        self.calls = []
        self.next_ptr = 4096

    def CUstream(self, h):
        return ("stream", h)

    def cuStreamBeginCapture(self, s, mode):
        self.calls.append(("begin", s, mode))
        return (_Res(),)

    def cuStreamEndCapture(self, s):
        self.calls.append(("end", s))
        return _Res(), "graph"

    def cuGraphInstantiate(self, g, flags):
        self.calls.append(("instantiate", g, flags))
        return _Res(), "exec"

    def cuGraphLaunch(self, e, s):
        self.calls.append(("launch", e, s))
        return (_Res(),)

    def cuGraphDestroy(self, g):
        self.calls.append(("destroy", g))
        return (_Res(),)

    def cuMemAlloc(self, n):
        self.next_ptr += 4096
        return _Res(), self.next_ptr

    def cuMemsetD8Async(self, ptr, v, n, s):
        self.calls.append(("memset_async", n, s))
        return (_Res(),)

    def cuMemsetD8(self, ptr, v, n):
        self.calls.append(("memset", n))
        return (_Res(),)


@pytest.fixture
def fake(monkeypatch):
    d = _FakeDriver()
    for mod in (graph_mod, memory):
        monkeypatch.setattr(mod, "cu", lambda: d)
    monkeypatch.setattr(driver, "ensure_context", lambda dev: None)
    monkeypatch.setattr(memory, "_resolve_device", lambda dev: 0)
    monkeypatch.setattr(driver, "_initialized", False)   # no destructor calls into the stand-in
    return d


def test_capture_records_on_its_stream_and_replays(fake):
    g = tc.Graph()
    assert not g.captured and graph_mod.current_stream() == 0
    with g.capture(stream=7):
        assert graph_mod.current_stream() == 7
        assert launcher._default_stream([], 0) == 7       # launches without stream= go there
        kept = memory.zeros((16,), tc.float32)             # stdlib scratch made inside
    assert graph_mod.current_stream() == 0
    assert fake.calls == [("begin", ("stream", 7), "relaxed"), ("memset_async", 64, ("stream", 7)),
                          ("end", ("stream", 7)), ("instantiate", "graph", 0)]
    assert g.captured and any(a is kept._owner for a in g._keep)   # the graph keeps it alive
    g.replay()
    g.replay(stream=9)
    assert fake.calls[-2:] == [("launch", "exec", ("stream", 7)), ("launch", "exec", ("stream", 9))]


def test_outside_a_capture_zeros_is_synchronous_and_nothing_is_kept(fake):
    memory.zeros((4,), tc.float32)
    assert fake.calls == [("memset", 16)]


def test_an_error_inside_ends_the_capture_and_restores_the_stream(fake):
    g = tc.Graph()
    with pytest.raises(KeyError):
        with g.capture(stream=3):
            memory.empty((8,), tc.float32)
            raise KeyError("user error")
    assert fake.calls[-2:] == [("end", ("stream", 3)), ("destroy", "graph")]
    assert graph_mod.current_stream() == 0 and not g.captured and g._keep == []
    with pytest.raises(RuntimeError, match="nothing to replay"):
        g.replay()


def test_misuse_is_named(fake):
    with pytest.raises(ValueError, match="legacy default stream"):
        with tc.Graph().capture(stream=0):
            pass
    g = tc.Graph()
    with g.capture(stream=5):
        with pytest.raises(RuntimeError, match="already running"):
            with tc.Graph().capture(stream=6):
                pass
    with pytest.raises(RuntimeError, match="already captured"):
        with g.capture(stream=5):
            pass
    with pytest.raises(TypeError, match="stream="):
        with tc.Graph().capture(stream="s"):
            pass


def test_a_capture_is_its_threads_alone(fake):
    """The thread state's defaults (driver._ThreadState) are per thread: a capture's stream and
    kept allocations are not another thread's, whose launches go where they would."""
    import threading
    seen = {}

    def other():
        seen["stream"], seen["keep"] = graph_mod.current_stream(), driver._tls.graph_keep
        seen["default"] = launcher._default_stream([], 0)
    with tc.Graph().capture(stream=7):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert graph_mod.current_stream() == 7 and driver._tls.graph_keep is not None
    assert seen == {"stream": 0, "keep": None, "default": 0}
    assert graph_mod.current_stream() == 0 and driver._tls.graph_keep is None
