"""runtime.LaunchPlan (runtime/replay.py): a launch prepared once and replayed with new
addresses and scalars, checked on the CPU with the launch-memo tests' stand-ins (a recording
cuLaunchKernel, a prepare step that builds a real packer)."""
from __future__ import annotations

import pytest

from tilec.runtime import launcher
from tilec.runtime.replay import launch_plan

from tilec.dtypes import float32
from tilec.runtime.memory import DeviceArray

from test_launch_memo import Harness


def X(ptr=0x10000, n=1024):
    return DeviceArray(ptr, (n,), (4,), float32, 0)


@pytest.fixture
def run(monkeypatch):
    return Harness(monkeypatch)


def test_a_plan_prepares_once_and_launches_nothing(run):
    plan = launch_plan(run.state, (3,), (X(), 5))
    assert len(run.prepares) == 1 and run.launches == []
    assert (plan.arrays, plan.scalars, plan.grid) == (("x",), ("n",), (3, 1, 1))
    assert plan.scalar_values() == (5,)
    assert plan.shapes()[0][:2] == ((1024,), (1,))


def test_replays_pack_the_new_pointers_and_scalars_without_signatures(run):
    plan = launch_plan(run.state, (3,), (X(), 5))
    sigs = run.sig_calls
    plan.launch([0x20000])
    plan.launch([0x30000], [9])
    plan.launch([0x40000])            # scalars not given: the plan's own
    assert run.launches == [("fn0", 0x20000, 5), ("fn0", 0x30000, 9), ("fn0", 0x40000, 5)]
    assert run.sig_calls == sigs and len(run.prepares) == 1


def test_a_plan_uses_the_launchers_prepared_entry(run):
    t = X()
    run(t, 5)                          # an ordinary launch prepares the signature
    plan = launch_plan(run.state, (1,), (t, 7))
    assert len(run.prepares) == 1 and launcher.prepared_launch_count(run.state) == 1
    assert plan.prepared is next(iter(run.state.table.values()))


def test_the_stream_is_given_per_launch(run):
    plan = launch_plan(run.state, (1,), (X(), 5))
    run.streams.clear()
    launcher._streams[77] = "s77"
    plan.launch([0x10000], stream=77)
    assert run.streams == ["s77"]
    with pytest.raises(TypeError, match="its stream at each launch"):
        launch_plan(run.state, (1,), (X(), 5), {"stream": 3})


def test_an_empty_grid_launches_nothing(run):
    plan = launch_plan(run.state, (0,), (X(), 5))
    plan.launch([0x10000])
    assert run.launches == []


@pytest.mark.gpu
def test_a_plan_replays_on_the_gpu_with_new_arrays_and_scalars(gpu):
    import numpy as np
    import tilec.runtime as rt
    from ptx_kernels import axpy

    def axpy_fn(x, y, out, alpha):
        """Stands for a kernel with axpy's parameters: the launcher reads its signature."""
    state = launcher.KernelState(axpy_fn)
    n = 1000
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    dx, dy, do = rt.from_numpy(xs[0]), rt.from_numpy(xs[1]), rt.empty(n)
    launcher.preload(state, axpy(), (dx, dy, do, 2.0))
    plan = launch_plan(state, ((n + 127) // 128,), (dx, dy, do, 2.0))
    plan.launch([dx.ptr, dy.ptr, do.ptr])
    rt.synchronize()
    np.testing.assert_allclose(do.to_numpy(), xs[0] + 2.0 * xs[1], rtol=1e-6)
    ex, ey, eo = rt.from_numpy(xs[2]), rt.from_numpy(xs[3]), rt.empty(n)
    s = rt.Stream()
    plan.launch([ex.ptr, ey.ptr, eo.ptr], [-0.5], stream=s)
    s.synchronize()
    np.testing.assert_allclose(eo.to_numpy(), xs[2] - 0.5 * xs[3], rtol=1e-6)


def test_a_launch_with_too_few_addresses_or_scalars_says_what_it_takes(run):
    plan = launch_plan(run.state, (3,), (X(), 5))
    with pytest.raises(TypeError, match=r"plan of kernel 'k': launch takes 1 address\(es\) \(x\), got 0"):
        plan.launch([])
    with pytest.raises(TypeError, match=r"launch takes 1 scalar\(s\) \(n\), got 0"):
        plan.launch([0x20000], [])
    plan.launch([0x20000])            # the buffer went back to the pool: the plan still launches
    assert run.launches == [("fn0", 0x20000, 5)]


def test_a_replay_rewrites_only_addresses_and_scalars_of_its_own_buffer(run):
    """Shapes and strides were written once; two plans of one prepared launch keep their own
    buffers (the launcher's packer is not theirs)."""
    a = launch_plan(run.state, (1,), (X(0x10000, 1024), 5))
    b = launch_plan(run.state, (1,), (X(0x50000, 1024), 6))
    assert a.prepared is b.prepared and a._buffers[0][0] is not b._buffers[0][0]
    a.launch([0x20000])
    b.launch([0x60000])
    a.launch([0x30000], [7])
    a.launch([0x40000])
    assert run.launches == [("fn0", 0x20000, 5), ("fn0", 0x60000, 6), ("fn0", 0x30000, 7), ("fn0", 0x40000, 5)]
    # of the kernel's three slots (x's address, x's extent, n) a replay writes two
    assert len(a.prepared.compiled.params) == 3 and a._write.source.count("buf.f") == 2
