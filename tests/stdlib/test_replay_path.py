"""The stdlib's replay path (stdlib_kernels/_plan.py over runtime.LaunchPlan's prebuilt parameter
buffers) against the stand-in driver of tests/runtime/standin.py: kernels really compiled, every
cuLaunchKernel recorded with the bytes of its parameters. A replayed call must hand the driver
exactly what the entry point's own path (the launcher's packer) hands it, up to the addresses of
fresh outputs; a call of another layout, dtype, alignment or device never replays a plan made
for another; streams, tc.Graph captures and per-call scalars behave as on the general path."""
from __future__ import annotations

import os
import struct
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runtime"))

import tilec as tc  # noqa: E402
import tilec.stdlib_kernels as sk  # noqa: E402
from tilec import specialize  # noqa: E402
from tilec.errors import DriverError  # noqa: E402
from tilec.runtime import driver, launcher  # noqa: E402
from tilec.stdlib_kernels import _plan  # noqa: E402
from standin import standin, tensor  # noqa: E402


@pytest.fixture
def gpu(monkeypatch):
    from tilec.runtime import tensormap
    # the stand-in has no cuTensorMapEncodeTiled: TMA kernels (matmul, attention) get its descriptor
    monkeypatch.setattr(tensormap, "encode_tensor_map", _fake_tensor_map)
    with standin() as (fake, torch):
        yield fake, torch


def _normalized(fake, launches):
    """Launches with each address as (which allocation in order of appearance, offset in it):
    the stand-in's allocations (and tensors) are 2**32 apart."""
    out = []
    seen = {}
    for ln in launches:
        params = []
        for kind, b in zip(fake.param_kinds[ln.function], ln.params):
            if kind in ("ptr", "tmap"):   # a TMA descriptor: the stand-in's encoding starts with the address
                (a,) = struct.unpack("<Q", b[:8])
                b = (seen.setdefault(a >> 32, len(seen)), a & 0xFFFFFFFF, b[8:])
            params.append(b)
        out.append((ln.function, ln.grid, ln.block, ln.shared, ln.stream, tuple(params), ln.dependent))
    return out


def _make(torch, kind):
    if kind == "torch":
        return lambda shape, dt="float16", strides=None, dev=0: tensor(torch, shape, dt, strides, dev)

    def device_array(shape, dt="float16", strides=None, dev=0):
        d = getattr(tc, dt)
        a = tc.empty((shape[0] * (strides[0] if strides else shape[-1]),), d)
        if strides is None:
            return tc.empty(shape, d)
        return tc.DeviceArray(a.ptr, shape, tuple(s * d.itemsize for s in strides), d, 0, owner=a)
    return device_array


OPS = {
    "softmax": lambda m: sk.softmax(m((37, 100))),
    "log_softmax_strided": lambda m: sk.log_softmax(m((37, 100), strides=(128, 1))),
    "gelu": lambda m: sk.gelu(m((33, 70))),
    "mul": lambda m: sk.mul(m((33, 70)), m((33, 70))),
    "add_bias": lambda m: sk.add(m((33, 70)), m((70,))),
    "layer_norm_stats": lambda m: sk.layer_norm(m((37, 100)), 100, m((100,)), m((100,)), return_stats=True),
    "rms_norm": lambda m: sk.rms_norm(m((37, 100), "bfloat16"), m((100,), "bfloat16")),
    "cumsum": lambda m: sk.cumsum(m((37, 100), "float32")),
    "dropout": lambda m: sk.dropout(m((33, 70)), 0.25, 7),
    "silu_and_mul": lambda m: sk.silu_and_mul(m((33, 140))),
    # two launches, the second a dependent launch (cuLaunchKernelEx) on sm_90a
    "sum_first_split": lambda m: sk.sum(m((5000, 70), "float32"), 0),
    "cross_entropy": lambda m: sk.cross_entropy(m((64, 3000), "bfloat16"), m((64,), "int64")),
    # the dense attention forward (causal: the heaviest-first grid) and backward (GQA: the split
    # dK/dV partials, a temporary the replay allocates again, and their sum)
    "attention_causal": lambda m: sk.attention(m((2, 300, 4, 64), "bfloat16"), m((2, 300, 2, 64), "bfloat16"),
                                               m((2, 300, 2, 64), "bfloat16"), causal=True, return_lse=True),
    "attention_backward_gqa": lambda m: sk.attention_backward(
        m((2, 300, 4, 64), "bfloat16"), m((2, 300, 4, 64), "bfloat16"), m((2, 300, 2, 64), "bfloat16"),
        m((2, 300, 2, 64), "bfloat16"), m((2, 300, 4, 64), "bfloat16"), m((2, 4, 300), "float32"),
        causal=True, window=(200, 0), scale=0.1),
}


def _twice(fake, call):
    """The driver's launches of a first (recorded) and a second (replayed) call of `call`."""
    call()
    n = len(fake.launches)
    call()
    return fake.launches[:n], fake.launches[n:]


class _Inputs:
    """Makes an op's input arrays on its first call and hands the same ones out after `again()`."""

    def __init__(self, make):
        self.make, self.made, self.n = make, [], 0

    def __call__(self, *args, **kwargs):
        if self.n == len(self.made):
            self.made.append(self.make(*args, **kwargs))
        self.n += 1
        return self.made[self.n - 1]

    def again(self):
        self.n = 0


@pytest.mark.parametrize("kind", ["torch", "DeviceArray"])
@pytest.mark.parametrize("name", list(OPS))
def test_a_replay_hands_the_driver_what_the_entry_points_own_path_does(gpu, name, kind):
    fake, torch = gpu
    inputs = _Inputs(_make(torch, kind))
    OPS[name](inputs)               # recorded: the launcher's path
    n = len(fake.launches)
    inputs.again()
    OPS[name](inputs)               # replayed from the plan's parameter buffers
    first, second = fake.launches[:n], fake.launches[n:]
    assert first and _normalized(fake, first) == _normalized(fake, second)
    tables = [t for t in _plan._plans.values() if t]
    assert len(tables) == 1 and all(p is not _plan._UNPLANNABLE for p in tables[0].values())


def test_a_replay_writes_the_new_arguments_addresses(gpu):
    fake, torch = gpu
    x, y = tensor(torch, (33, 70)), tensor(torch, (33, 70))
    sk.mul(x, y)
    x2, y2 = tensor(torch, (33, 70)), tensor(torch, (33, 70))
    out = sk.mul(x2, y2)
    ptrs = [struct.unpack("<Q", b)[0] for k, b in zip(fake.param_kinds[fake.launches[-1].function],
                                                     fake.launches[-1].params) if k == "ptr"]
    assert ptrs == [x2.data_ptr(), y2.data_ptr(), out.data_ptr()]
    assert out.shape == (33, 70) and out.dtype is torch.float16 and _plan.plan_count(sk.mul) == 1


@pytest.mark.parametrize("change", ["strides", "dtype", "alignment", "device", "rank"])
def test_a_plan_is_never_replayed_for_another_layout_dtype_alignment_or_device(gpu, change):
    fake, torch = gpu
    sk.gelu(tensor(torch, (33, 70)))
    sk.gelu(tensor(torch, (33, 70)))
    assert _plan.plan_count(sk.gelu) == 1
    other = {"strides": lambda: tensor(torch, (33, 70), strides=(80, 1)),
             "dtype": lambda: tensor(torch, (33, 70), "float32"),
             "alignment": lambda: tensor(torch, (33, 70)).as_strided((33, 70), (70, 1), 1),
             "device": lambda: tensor(torch, (33, 70), dev=1),
             "rank": lambda: tensor(torch, (3, 11, 70))}[change]()
    n = len(fake.launches)
    sk.gelu(other)
    assert _plan.plan_count(sk.gelu) == 2   # recorded anew: the entry point's own path
    # what the general path launches for it is what a fresh process would launch
    first = _normalized(fake, fake.launches[n:])
    _plan.clear_plans()
    m = len(fake.launches)
    sk.gelu(other)
    assert _normalized(fake, fake.launches[m:]) == first
    if change == "device":
        assert driver._tls.ctx_device == 1


def test_a_modules_parameter_replays_as_a_tensor_does(gpu, monkeypatch):
    """A module's weight is a torch.nn.Parameter (a Tensor subclass): its calls replay, from the
    plan a plain tensor of the same layout made, with the Parameter's address."""
    fake, torch = gpu
    replays = []
    replay = _plan._replay
    monkeypatch.setattr(_plan, "_replay", lambda *a: replays.append(1) or replay(*a))
    dy, x, rstd = tensor(torch, (2, 33, 64), "bfloat16"), tensor(torch, (2, 33, 64), "bfloat16"), \
        tensor(torch, (2, 33), "float32")
    sk.rms_norm_backward(dy, x, tensor(torch, (64,), "bfloat16"), rstd)
    n = len(fake.launches)
    w = torch.nn.Parameter(tensor(torch, (64,), "bfloat16"))
    sk.rms_norm_backward(dy, x, w, rstd)
    sk.rms_norm_backward(dy, x, w, rstd)
    assert _plan.plan_count(sk.rms_norm_backward) == 1 and len(replays) == 2
    assert all(p is not _plan._UNPLANNABLE for p in _plan._plans[_key(sk.rms_norm_backward)].values())
    ptrs = {struct.unpack("<Q", b)[0] for ln in fake.launches[n:]
            for k, b in zip(fake.param_kinds[ln.function], ln.params) if k == "ptr"}
    assert w.data_ptr() in ptrs


def _key(entry):
    fn = entry.__wrapped_entry__
    return f"{fn.__module__}.{fn.__qualname__}"


def test_a_cpu_tensor_is_refused_every_time(gpu):
    fake, torch = gpu
    sk.softmax(tensor(torch, (4, 64)))
    for _ in range(2):
        with pytest.raises(TypeError, match="x: a torch tensor on .*cpu"):
            sk.softmax(tensor(torch, (4, 64), dev=-1))


# (p, seed) whose launch scalars have one signature (threshold divisible by 16, seed of 32 bits, not 1)
CASES = [(0.5, 9), (0.25, 7), (0.75, 123)]


def test_per_call_scalars_are_written_into_the_replay_buffer(gpu):
    fake, torch = gpu
    x = tensor(torch, (33, 70))
    sk.dropout(x, 0.25, 7)
    replays = []
    for p, seed in CASES:
        n = len(fake.launches)
        sk.dropout(x, p, seed)
        replays.append(_normalized(fake, fake.launches[n:]))
    assert _plan.plan_count(sk.dropout) == 1
    for (p, seed), replayed in zip(CASES, replays):
        _plan.clear_plans()
        n = len(fake.launches)
        sk.dropout(x, p, seed)   # recorded: the launcher's packer
        assert _normalized(fake, fake.launches[n:]) == replayed
    with pytest.raises(ValueError, match="p must be in"):
        sk.dropout(x, 1.5, 0)


def test_eps_is_per_call_in_a_norms_replay(gpu):
    fake, torch = gpu
    x, w = tensor(torch, (37, 100)), tensor(torch, (100,))
    sk.rms_norm(x, w, eps=1e-6)
    n = len(fake.launches)
    sk.rms_norm(x, w, eps=0.5)
    replayed = _normalized(fake, fake.launches[n:])
    _plan.clear_plans()
    n = len(fake.launches)
    sk.rms_norm(x, w, eps=0.5)
    assert _normalized(fake, fake.launches[n:]) == replayed
    assert struct.pack("<f", 0.5) in replayed[0][5]


def test_replays_follow_torchs_current_stream(gpu):
    fake, torch = gpu
    x = tensor(torch, (37, 100))
    sk.softmax(x)
    torch.state.stream = 0x5000
    sk.softmax(x)
    torch.state.stream = 0x6000
    sk.softmax(x)
    assert [ln.stream for ln in fake.launches] == [0, 0x5000, 0x6000]


@pytest.mark.parametrize("kind", ["torch", "DeviceArray"])
def test_a_replay_inside_a_tc_graph_capture_goes_to_its_stream_and_the_graph_keeps_its_outputs(gpu, kind):
    fake, torch = gpu
    make = _make(torch, kind)
    x = make((37, 100))
    sk.softmax(x)
    torch.state.stream = 0x5000
    g = tc.Graph()
    with g.capture(stream=0x7000):
        y = sk.softmax(x)
    assert fake.launches[-1].stream == 0x7000 and _plan.plan_count(sk.softmax) == 1
    if kind == "DeviceArray":
        assert any(a is y._owner for a in g._keep)
    sk.softmax(x)
    assert fake.launches[-1].stream == (0x5000 if kind == "torch" else 0)


def test_an_empty_pool_gets_another_buffer(gpu):
    fake, torch = gpu
    x = tensor(torch, (37, 100))
    first, second = _twice(fake, lambda: sk.softmax(x))
    (plan,) = _plan._plans["tilec.stdlib_kernels.softmax.softmax"].values()
    lp = plan[1][0][0]
    held = lp._buffers.pop()   # another thread holds the only buffer
    sk.softmax(x)
    assert _normalized(fake, fake.launches[-1:]) == _normalized(fake, second)
    assert len(lp._buffers) == 1 and lp._buffers[0] is not held


def test_a_failed_replay_raises_the_drivers_error_naming_the_kernel(gpu, monkeypatch):
    fake, torch = gpu
    x = tensor(torch, (37, 100))
    sk.softmax(x)
    sk.softmax(x)
    bad = type(fake.CUresult.CUDA_SUCCESS)(1, "CUDA_ERROR_INVALID_VALUE")
    monkeypatch.setattr(launcher, "_cuLaunchKernel", lambda *a: (bad,))
    monkeypatch.setattr(fake, "cuGetErrorString", lambda res: (bad, b"invalid argument"), raising=False)
    with pytest.raises(DriverError, match="cuLaunchKernel \\(kernel 'softmax_tile_kernel'\\) failed: "
                                          "CUDA_ERROR_INVALID_VALUE: invalid argument"):
        sk.softmax(x)


def test_a_replay_names_itself_for_a_later_fault_report(gpu):
    fake, torch = gpu
    x = tensor(torch, (37, 100), "float32")
    sk.softmax(x)    # the launcher's path
    described = driver.describe_launch(driver.last_launch)
    driver.last_launch = None
    sk.softmax(x)    # the replay
    assert driver.describe_launch(driver.last_launch) == described
    assert described.startswith("kernel 'softmax_tile_kernel' on grid (") and described.endswith(
        " with x: f32[37, 100], out: f32[37, 100]")


VALUES = [0.5, 1e-5, np.float32(1e-6), np.float64(2.0), np.float16(1.0), 1, 16, 2 ** 40, -3, True,
          np.int32(7), np.int64(2 ** 40), np.uint8(1), np.int16(16), np.bool_(True)]


def test_the_per_call_scalar_key_is_signature_of():
    assert _plan._derived_key(tuple(VALUES)) == tuple((type(v), specialize.signature_of(v)[0]) for v in VALUES)


def test_empty_maker_makes_what_empty_makes(gpu):
    from tilec.runtime import memory
    make = memory.empty_maker((3, 5), tc.float16)
    a, b, c = make(), make(), tc.empty((3, 5), tc.float16)
    assert a.ptr != b.ptr and a._owner is not b._owner
    for x in (a, b):
        assert (x.shape, x.strides, x.dtype, x.device, x._info[1:]) == (c.shape, c.strides, c.dtype, c.device,
                                                                         c._info[1:])
        assert x._info[0] == x.ptr and x.is_contiguous
    with pytest.raises(ValueError, match="negative dimension"):
        memory.empty_maker((3, -1), tc.float16)


def _fake_tensor_map(ptr, shape, strides, dtype, box):
    """The stand-in's 128-byte TMA descriptor: the address, then what else it encodes."""
    rest = repr((tuple(shape), tuple(strides), dtype.name, tuple(box))).encode()
    return (struct.pack("<Q", ptr) + rest).ljust(128, b"\0")[:128]


@pytest.mark.parametrize("bias", [False, True])
def test_a_tma_matmul_replays_its_descriptors_from_the_new_addresses(gpu, bias):
    fake, torch = gpu
    a, b = tensor(torch, (64, 128), "bfloat16"), tensor(torch, (128, 96), "bfloat16")
    c = tensor(torch, (96,), "float32") if bias else None
    first, second = _twice(fake, lambda: sk.matmul(a, b, bias=c))
    assert "tmap" in fake.param_kinds[first[0].function]
    assert _normalized(fake, first) == _normalized(fake, second)
    (plan,) = [p for t in _plan._plans.values() for p in t.values()]
    assert all(lp._buffers is not None for lp, *_ in plan[1])   # replayed from its buffers
    a2 = tensor(torch, (64, 128), "bfloat16")
    sk.matmul(a2, b, bias=c)
    kinds = fake.param_kinds[fake.launches[-1].function]
    maps = [p for k, p in zip(kinds, fake.launches[-1].params) if k == "tmap"]
    assert struct.pack("<Q", a2.data_ptr()) in [m[:8] for m in maps]


@pytest.mark.parametrize("kind", ["torch", "DeviceArray"])
@pytest.mark.parametrize("name", ["rms_norm", "cross_entropy", "attention_backward_gqa"])
def test_a_plan_keeps_no_array_of_the_call_it_was_recorded_from(gpu, kind, name):
    # a plan lives as long as the process: holding its first call's inputs, outputs or
    # temporaries would keep them allocated (the logits of a linear_cross_entropy: a GB)
    import gc  # noqa: PLC0415
    import weakref  # noqa: PLC0415
    _fake, torch = gpu
    _plan.clear_plans()
    make = _make(torch, kind)
    made = []

    def tracked(*a, **k):
        arr = make(*a, **k)
        made.append(weakref.ref(arr))
        return arr
    result = OPS[name](tracked)
    outs = [weakref.ref(r) for r in (result if isinstance(result, tuple) else (result,)) if r is not None]
    assert any(_plan._plans.values())   # recorded (attention's plans are its inner paths')
    del result
    gc.collect()
    assert [r() for r in made + outs] == [None] * len(made + outs)


def test_a_replay_allocates_its_outputs_from_an_argument_tensor(gpu, monkeypatch):
    # torch.empty(..., device=) parses its device on every call; a replay makes its outputs
    # from the argument they were made like, on its device: empty_like where shape and dtype
    # are the argument's (a contiguous one), else new_empty
    fake, torch = gpu
    made = []
    plain_like, plain_new = torch.empty_like, type(tensor(torch, (1,))).new_empty

    def like(t):
        made.append(("empty_like", t.device, t.shape))
        return plain_like(t)

    def new(self, shape, dtype=None):
        made.append(("new_empty", self.device, tuple(shape)))
        return plain_new(self, shape, dtype)
    monkeypatch.setattr(torch, "empty_like", like)
    monkeypatch.setattr(type(tensor(torch, (1,))), "new_empty", new)
    dev1 = torch.device("cuda", 1)
    for op, want in ((lambda x, y: sk.mul(x, y), ("empty_like", dev1, (33, 70))),
                     (lambda x, y: sk.sum(x, dim=-1), ("new_empty", dev1, (33,)))):
        first = op(tensor(torch, (33, 70), dev=1), tensor(torch, (33, 70), dev=1))
        assert first.device == dev1
        made.clear()
        out = op(tensor(torch, (33, 70), dev=1), tensor(torch, (33, 70), dev=1))
        assert made == [want]
        assert out.device == dev1 and out.shape == want[2] and out.dtype is torch.float16
        assert out.data_ptr() != first.data_ptr()
