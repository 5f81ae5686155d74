"""tc.profile without a GPU: the launcher's hook, labels, and the table built from events
(a stand-in driver gives the event times). The GPU run is tests/runtime/test_profile_gpu.py."""
from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tilec as tc
from tilec.runtime import launcher
from tilec.runtime import profile as prof_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from vector_add import add_kernel  # noqa: E402


def test_profile_installs_itself_on_the_launcher_and_nests():
    assert launcher._profile is None
    with tc.profile() as outer:
        assert launcher._profile is outer
        with tc.profile("datasheet") as inner:
            assert launcher._profile is inner
        assert launcher._profile is outer
    assert launcher._profile is None


@pytest.mark.parametrize("bad", ["fast", 0, -1.0, True])
def test_profile_bandwidth_must_be_known(bad):
    with pytest.raises(ValueError, match="bandwidth must be"):
        tc.profile(bad)


def test_launch_paths_test_the_profile_once():
    # the hot path pays one global test; everything else lives in _profiled
    for fn in (launcher.launch, launcher._cu_launch):
        assert inspect.getsource(fn).count("_profile is") == 1, fn.__name__


def test_labels_only_inside_a_profile():
    assert prof_mod.labelled("softmax") is prof_mod.labelled("matmul")   # the shared null context
    with tc.profile() as p:
        with prof_mod.labelled("softmax"):
            assert p._labels == ["softmax"]
        assert p._labels == []


def test_plot_without_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # an import of it fails
    with pytest.raises(ImportError, match=r"tilec\[plot\]"):
        tc.profile().plot("roofline.png")


class _Ok:
    value = 0


class _FakeDriver:
    """cuEvent* answering from a list of kernel times (ms), one per launch."""

    def __init__(self, times_ms):
        self.times = list(times_ms)
        self.elapsed = {}
        self.n = 0

    def cuEventCreate(self, flags):
        self.n += 1
        return _Ok(), self.n

    def cuEventRecord(self, event, stream):
        return (_Ok(),)

    def cuEventSynchronize(self, event):
        return (_Ok(),)

    def cuEventElapsedTime(self, start, end):
        if (start, end) not in self.elapsed:
            self.elapsed[(start, end)] = self.times.pop(0)
        return _Ok(), self.elapsed[(start, end)]

    def cuEventDestroy(self, event):
        return (_Ok(),)


def test_table_from_events_counts_and_bound(monkeypatch):
    fake = _FakeDriver([0.010, 0.030, 0.020])        # ms: median 20 us
    monkeypatch.setattr(prof_mod, "cu", lambda: fake)
    monkeypatch.setattr(prof_mod.driver, "get_device", lambda d=None: SimpleNamespace(name="NVIDIA H200"))
    c = add_kernel.compile("x=f32[?], y=f32[?], out=f32[?], BLOCK=1024")
    n = 1 << 20
    prepared = SimpleNamespace(name=c.name, compiled=c, device=0)
    info = (0, (n,), (1,), None, 0)
    p = tc.profile(bandwidth=4.0e12)
    launched = []
    for _ in range(3):
        p.launch(prepared, ["x", "y", "out", "BLOCK"], [None, None, None, 1024], [info, info, info, None],
                 (n // 1024, 1, 1), 0, lambda: launched.append(1) or "ok")
    assert len(launched) == 3
    (row,) = p.rows()
    assert row.calls == 3 and row.seconds == pytest.approx(20e-6)
    assert row.report.bytes == row.report.dram_bytes == 12 * n
    assert row.gbps == pytest.approx(12 * n / 20e-6 / 1e9)
    assert row.report.bound.bandwidth == 4.0e12 and row.report.bound.bandwidth_source == "measured"
    assert row.percent_of_bound == pytest.approx(100 * (12 * n / 4.0e12) / 20e-6)
    text = p.table()
    assert "add_kernel" in text and "% of bound" in text and f"{row.percent_of_bound:.1f}" in text


def test_rows_split_by_label_and_shape(monkeypatch):
    fake = _FakeDriver([0.01] * 3)
    monkeypatch.setattr(prof_mod, "cu", lambda: fake)
    monkeypatch.setattr(prof_mod.driver, "get_device", lambda d=None: SimpleNamespace(name="NVIDIA H100 80GB HBM3"))
    c = add_kernel.compile("x=f32[?], y=f32[?], out=f32[?], BLOCK=1024")
    prepared = SimpleNamespace(name=c.name, compiled=c, device=0)
    p = tc.profile("datasheet")

    def go(n, label=None):
        info = (0, (n,), (1,), None, 0)
        with _label(p, label):
            p.launch(prepared, ["x", "y", "out"], [None] * 3, [info] * 3, (np.int64(1), 1, 1), 0, lambda: 0)

    go(1024)
    go(2048)
    go(1024, "vadd")
    names = [r.name for r in p.rows()]
    assert names == ["add_kernel", "add_kernel", "vadd:add_kernel"]
    assert p.rows()[0].report.bound.bandwidth_source == "datasheet"


def _label(p, name):
    import contextlib
    return prof_mod._Label(p, name) if name else contextlib.nullcontext()


def test_named_entry_points_label_their_launches_once():
    from tilec.stdlib_kernels._plan import named
    seen = []

    @named
    def attention(depth=0):
        seen.append(list(launcher._profile._labels) if launcher._profile is not None else None)
        if depth == 0:
            attention(depth=1)          # an entry point calling itself is not labelled twice
        return "out"

    assert attention() == "out" and seen == [None, None]     # outside a profile: no label
    seen.clear()
    with tc.profile() as p:
        attention()
        assert p._labels == []
    assert seen == [["attention"], ["attention"]]
    import tilec.stdlib_kernels as sk
    assert sk.attention.__wrapped__.__name__ == "attention"   # the stdlib's unplanned ops are named
    assert sk.attention_backward.__wrapped__ and sk.mla_decode.__wrapped__
