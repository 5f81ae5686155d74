"""A stand-in GPU for the CPU: the driver calls a launch makes, and a minimal `torch`.

`standin()` (a context manager) lets the stdlib entry points and the launcher run their
real Python path on a machine with no GPU, down to the driver call: kernels are really
compiled (llvmlite, ptxas), but "loading" a module, allocating and launching are answered
here, and every cuLaunchKernel is recorded with the bytes its parameter buffer holds. It
is what `bench/host_path.py` times and what the CPU tests of the replay path use.

The `torch` module it puts in sys.modules for the duration (a real torch stays imported
elsewhere: tilec reads `sys.modules["torch"]` at each call) has what
tilec reads from a CUDA tensor: `data_ptr()`, `shape`, `stride()`, `dtype`, `is_cuda`,
`get_device()`, `device`, `dim()`, `as_strided`, `torch.empty/zeros`, the current raw
stream and `cuda.is_current_stream_capturing`.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import sys
import types


_SIZES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "int8": 1,
          "uint8": 1, "int16": 2, "bool": 1}


class _Result:
    """A CUresult: `.value`, `.name`."""

    def __init__(self, value, name):
        self.value, self.name = value, name

    def __repr__(self):
        return f"<CUresult.{self.name}: {self.value}>"


SUCCESS = _Result(0, "CUDA_SUCCESS")


class Launch:
    """One recorded launch: function, grid, block, shared bytes, stream handle, the parameter
    buffer's bytes (`params`: one bytes object per kernel parameter), and whether it was a
    dependent launch (cuLaunchKernelEx)."""

    __slots__ = ("function", "grid", "block", "shared", "stream", "params", "dependent")

    def __init__(self, function, grid, block, shared, stream, params, dependent=False):
        self.function, self.grid, self.block, self.shared, self.stream = function, grid, block, shared, stream
        self.params, self.dependent = params, dependent

    def as_tuple(self):
        return (self.function, self.grid, self.block, self.shared, self.stream, self.params, self.dependent)


class FakeDriver:
    """The `cuda.bindings.driver` calls the launch path makes. `record=False`: launches are
    counted, not decoded (for timing)."""

    class CUresult:
        CUDA_SUCCESS = SUCCESS

    def __init__(self, record: bool = True):
        self.record = record
        self.launches = []
        self.count = 0
        self.param_sizes = {}   # function -> the size of each kernel parameter (for decoding)
        self.param_kinds = {}   # function -> each parameter's slot kind ("ptr", "shape", "scalar", ...)
        self.calls = []         # the graph calls, in order
        self._ptrs = itertools.count(1)

    def CUstream(self, h=0):
        return ("stream", int(h))

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.count += 1
        if self.record:
            h = stream[1] if isinstance(stream, tuple) else int(stream)
            self.launches.append(Launch(f, (gx, gy, gz), (bx, by, bz), shared, h, self._params(f, params)))
        return (SUCCESS,)

    # cuLaunchKernelEx (dependent launches): a config object, recorded as a launch
    class CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = "programmatic"

    def CUlaunchConfig(self):
        return types.SimpleNamespace()

    def CUlaunchAttribute(self):
        return types.SimpleNamespace(id=None, value=types.SimpleNamespace())

    def cuLaunchKernelEx(self, config, f, params, extra):
        self.count += 1
        if self.record:
            s = config.hStream
            h = s[1] if isinstance(s, tuple) else int(s)
            self.launches.append(Launch(f, (config.gridDimX, config.gridDimY, config.gridDimZ),
                                        (config.blockDimX, config.blockDimY, config.blockDimZ),
                                        config.sharedMemBytes, h, self._params(f, params), True))
        return (SUCCESS,)

    def _params(self, f, params):
        sizes = self.param_sizes.get(f, ())
        if not params or not sizes:
            return ()
        addrs = (ctypes.c_void_p * len(sizes)).from_address(params)
        return tuple(ctypes.string_at(a, n) for a, n in zip(addrs, sizes))

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_RELAXED = "relaxed"

    def cuStreamBeginCapture(self, s, mode):
        self.calls.append(("begin", s))
        return (SUCCESS,)

    def cuStreamEndCapture(self, s):
        self.calls.append(("end", s))
        return SUCCESS, "graph"

    def cuGraphInstantiate(self, g, flags):
        return SUCCESS, "exec"

    def cuGraphLaunch(self, e, s):
        self.calls.append(("launch", s))
        return (SUCCESS,)

    def cuGraphDestroy(self, g):
        return (SUCCESS,)

    def cuGraphExecDestroy(self, e):
        return (SUCCESS,)

    def cuMemAlloc(self, n):
        return SUCCESS, next(self._ptrs) << 32   # addresses 2**32 apart: one per allocation

    def cuMemFree(self, ptr):
        return (SUCCESS,)

    def cuMemsetD8(self, ptr, v, n):
        return (SUCCESS,)

    def cuMemsetD8Async(self, ptr, v, n, s):
        return (SUCCESS,)


# ----------------------------------------------------------------------------- a minimal torch
class dtype:   # noqa: N801 - torch's name
    def __init__(self, name):
        self.name, self.itemsize = name, _SIZES[name]

    def __repr__(self):
        return f"torch.{self.name}"

    __str__ = __repr__


class device:   # noqa: N801
    def __init__(self, kind="cuda", index=0):
        if isinstance(kind, str) and ":" in kind:
            kind, index = kind.split(":")[0], int(kind.split(":")[1])
        self.type, self.index = kind, (index if kind == "cuda" else None)

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})"


def _contiguous(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


_addresses = itertools.count(1)


class Tensor:
    """A CUDA (or CPU) tensor without memory: an address, shape, strides and dtype."""

    __slots__ = ("_ptr", "shape", "_stride", "dtype", "device", "_dev", "is_cuda", "__weakref__")

    def __init__(self, ptr, shape, dt, strides=None, dev=None):
        self._ptr, self.shape, self.dtype = ptr, tuple(shape), dt
        self._stride = tuple(strides) if strides is not None else _contiguous(self.shape)
        self.device = dev if dev is not None else device("cuda", 0)
        self.is_cuda = self.device.type == "cuda"
        self._dev = self.device.index if self.is_cuda else -1

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._stride

    def get_device(self):
        return self._dev

    def dim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def element_size(self):
        return self.dtype.itemsize

    def new_empty(self, shape, dtype=None):
        return _new(shape, dtype or self.dtype, self.device)

    new_zeros = new_empty

    def as_strided(self, shape, strides, offset=0):
        return Tensor(self._ptr + offset * self.dtype.itemsize, shape, self.dtype, strides, self.device)

    def __getitem__(self, idx):
        """Only `t[..., start:stop]` (what the stdlib's slicing of the last dimension does)."""
        if not (isinstance(idx, tuple) and len(idx) == 2 and idx[0] is Ellipsis and isinstance(idx[1], slice)):
            raise NotImplementedError("the stand-in tensor takes only t[..., start:stop]")
        start, stop, step = idx[1].indices(self.shape[-1])
        if step != 1:
            raise NotImplementedError("the stand-in tensor takes only unit steps")
        return self.as_strided(self.shape[:-1] + (stop - start,), self._stride, start * self._stride[-1])


Tensor.__module__ = "torch"


class Parameter(Tensor):
    """torch.nn.Parameter: a module's weight, a Tensor subclass."""

    __slots__ = ()

    def __init__(self, t):
        super().__init__(t.data_ptr(), t.shape, t.dtype, t.stride(), t.device)


def _device_of(d):
    if d is None:
        return device("cuda", 0)
    if isinstance(d, device):
        return d
    if isinstance(d, int):
        return device("cuda", d)
    return device(d)


def _new(shape, dtype=None, device=None):
    return Tensor(next(_addresses) << 32, tuple(shape), dtype or FLOAT32, None, _device_of(device))


FLOAT32 = dtype("float32")


def fake_torch(stream: int = 0, capturing: bool = False):
    """A module object standing for torch (see the module doc). `stream`: what
    `torch._C._cuda_getCurrentRawStream` answers; `capturing`: torch's capture state."""
    m = types.ModuleType("torch")
    m.__stand_in__ = True
    m.Tensor, m.device = Tensor, device
    m.nn = types.SimpleNamespace(Parameter=Parameter)
    for name in _SIZES:
        setattr(m, name, FLOAT32 if name == "float32" else dtype(name))
    m.float, m.half = m.float32, m.float16
    m.empty = m.zeros = _new
    m.empty_like = m.zeros_like = lambda t: _new(t.shape, t.dtype, t.device)
    m.state = types.SimpleNamespace(stream=stream, capturing=capturing)
    m._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device_index: m.state.stream)
    m.cuda = types.SimpleNamespace(is_current_stream_capturing=lambda: m.state.capturing,
                                   is_available=lambda: False, current_device=lambda: 0)
    return m


def tensor(torch, shape, name="float16", strides=None, dev=0):
    """A stand-in CUDA tensor of `shape` (contiguous unless `strides`, in elements) at a fresh address."""
    return Tensor(next(_addresses) << 32, shape, getattr(torch, name), strides,
                  device("cuda", dev) if dev >= 0 else device("cpu"))


# ----------------------------------------------------------------------------- the context
class _Patches:
    def __init__(self):
        self._undo = []

    def set(self, obj, name, value):
        missing = object()
        old = getattr(obj, name, missing)
        self._undo.append((obj, name, old, missing))
        setattr(obj, name, value)

    def set_item(self, d, key, value):
        missing = object()
        self._undo.append((d, key, d.get(key, missing), missing, True))
        d[key] = value

    def undo(self):
        for entry in reversed(self._undo):
            if len(entry) == 5:
                d, key, old, missing, _ = entry
                if old is missing:
                    d.pop(key, None)
                else:
                    d[key] = old
                continue
            obj, name, old, missing = entry
            if old is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, old)


@contextlib.contextmanager
def standin(record: bool = True, arch: str = "sm_90a", torch=None):
    """Run the GPU path against the stand-in driver and torch (`torch` given: that module, in
    sys.modules for the duration). Yields (FakeDriver, torch module). Launch plans, the stdlib
    kernels' prepared launches and the launcher's bound names are reset on entry and on exit."""
    from tilec import target as target_mod
    from tilec.runtime import driver, graph, launcher, memory, module
    from tilec.runtime import interop
    from tilec.runtime.module import LoadedKernel, Resources
    from tilec.stdlib_kernels import _plan

    fake = FakeDriver(record)
    p = _Patches()
    if torch is None:
        torch = fake_torch()
    p.set_item(sys.modules, "torch", torch)
    the_target = target_mod.Target.from_arch(arch)
    functions = itertools.count()

    def load(compiled, dev):
        f = f"fn{next(functions)}:{compiled.name}"
        fake.param_sizes[f] = tuple(ctypes.sizeof(_field(s)) for s in compiled.params)
        fake.param_kinds[f] = tuple(s.kind for s in compiled.params)
        persistent = 132 if compiled.metadata.get("persistent") else 0
        return LoadedKernel(f, None, dev, int(compiled.metadata.get("shared", 0)), compiled.num_threads, "",
                            Resources(32, 0, 0, 0, 0, compiled.num_threads, 8, arch), persistent, 15)

    def ensure_context(dev):
        driver._tls.ctx_device = dev   # noqa: SLF001

    p.set(driver, "_driver", fake)
    p.set(driver, "_initialized", True)
    p.set(driver, "current_device", lambda: 0)
    p.set(driver, "ensure_context", ensure_context)
    p.set(memory, "cu", lambda: fake)
    p.set(memory, "_resolve_device", lambda dev: 0 if dev is None else int(dev))
    p.set(graph, "cu", lambda: fake)
    p.set(module, "load", load)
    p.set(target_mod.Target, "for_device", staticmethod(lambda ordinal=None: the_target))
    p.set(interop, "_readers", {})
    p.set(interop, "_torch_dtypes", {})
    for name in ("_SUCCESS", "_cuLaunchKernel", "_torch_tensor", "_torch_param", "_torch_current_stream", "_streams"):
        p.set(launcher, name, {} if name == "_streams" else None)
    p.set(launcher, "_compiled_launches", module.PerCompiled())
    _reset_launch_state()
    _plan.clear_plans()
    try:
        yield fake, torch
    finally:
        _plan.clear_plans()
        _reset_launch_state()
        p.undo()
        driver._tls.ctx_device = None   # noqa: SLF001


def _field(slot):
    from tilec.runtime.packing import field_type
    return field_type(slot)


def _reset_launch_state():
    """Forget the stdlib kernels' prepared launches: those made before (on a GPU machine, real
    ones) must not serve the stand-in, and the stand-in's must not outlive it."""
    from tilec.runtime.launcher import KernelState
    for name, mod in list(sys.modules.items()):
        if not name.startswith("tilec.stdlib_kernels") or mod is None:
            continue
        for v in list(vars(mod).values()):
            state = getattr(v, "launch_state", None)
            if type(state) is KernelState:
                state.table.clear()
                state.last = (None, None)
                state.torch_memo = [None] * state.nparams


__all__ = ["standin", "fake_torch", "tensor", "FakeDriver", "Launch"]
