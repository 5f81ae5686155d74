"""The launch hot path: `kernel[grid](*args, **kw)` on a GPU.

Per kernel, a dict maps a cheap per-call signature to a prepared launcher. The
signature holds, per parameter: for a constexpr its value; for an array its
dtype, rank, 16-byte base alignment, whether the last stride is 1, whether
every element offset fits in 31 bits, and its device; for an int whether it is
1, divisible by 16 and fits in 32 bits; for other scalars their type; then the
compile options. It is at least as fine as the frontend's Specialization, so
one prepared launcher never serves two different compiled kernels.

A prepared launcher owns the CUfunction and a packer generated once for its
signature (packing.py): per call it writes pointers, shapes, strides and
scalars into a preallocated ctypes buffer and hands cuLaunchKernel the
prebuilt array of parameter addresses.

A miss (first call of a signature) runs the slow path: specialize, compile (the
compiler probes the compile cache), load the module on the device, build the
packer.
"""
from __future__ import annotations

import inspect
import sys
import threading
from typing import Any, Dict, Tuple

from ..options import CompileOptions
from . import driver, interop
from .packing import build_packer
from .stream import stream_handle

__all__ = ["launch", "launch_compiled", "preload", "kernel_state", "PreparedLaunch"]

_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31 - 1
_OFFSET_LIMIT = 2 ** 31


def _array_sig(info) -> Tuple:
    # Mirrors specialize.view_type_for: the low pointer bits decide the alignment, a unit
    # last stride (or a last extent of 1) a static stride, the reach the index width.
    ptr, shape, strides, dt, dev = info
    reach = 0
    small = True
    for s, st in zip(shape, strides):
        if s > 1:
            reach += (s - 1) * (st if st >= 0 else -st)
            small = small and s < _OFFSET_LIMIT
    last_unit = bool(strides) and (strides[-1] == 1 or shape[-1] == 1)
    return (dt, len(shape), ptr & 15, last_unit, small and reach < _OFFSET_LIMIT, dev)


def _int_sig(v: int) -> Tuple:
    return ("int", v == 1, v & 15 == 0, _I32_MIN <= v <= _I32_MAX)


class KernelState:
    """What the launcher keeps per kernel: its parameters and the table of prepared launches."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.name = getattr(kernel, "__name__", None) or getattr(kernel, "name", "kernel")
        self.params, self.constexpr, self.defaults = _describe(kernel)
        if list(getattr(kernel, "param_names", self.params)) != self.params:
            raise TypeError(f"kernel '{self.name}': parameter list does not match its function")
        self.index = {n: i for i, n in enumerate(self.params)}
        self.table: Dict[Tuple, "PreparedLaunch"] = {}
        self.lock = threading.Lock()

    def bind(self, args: tuple, kwargs: dict) -> list:
        """Arguments in parameter order (defaults filled); TypeError naming what is wrong."""
        n = len(self.params)
        if len(args) > n:
            raise TypeError(f"kernel '{self.name}' takes {n} argument(s) ({', '.join(self.params)}), "
                            f"got {len(args)}")
        vals = list(args) + [_MISSING] * (n - len(args))
        for k, v in kwargs.items():
            i = self.index.get(k)
            if i is None:
                raise TypeError(f"kernel '{self.name}' has no parameter {k!r}; parameters: "
                                f"{', '.join(self.params)}")
            if vals[i] is not _MISSING:
                raise TypeError(f"kernel '{self.name}' got parameter {k!r} twice")
            vals[i] = v
        for i, v in enumerate(vals):
            if v is _MISSING:
                if self.params[i] not in self.defaults:
                    raise TypeError(f"kernel '{self.name}' is missing argument {self.params[i]!r}")
                vals[i] = self.defaults[self.params[i]]
        return vals


_MISSING = object()
_states: Dict[int, KernelState] = {}


def kernel_state(kernel) -> KernelState:
    st = getattr(kernel, "_tilec_launch_state", None)
    if st is None:
        st = KernelState(kernel)
        try:
            kernel._tilec_launch_state = st
        except AttributeError:
            st = _states.setdefault(id(kernel), st)
    return st


def _describe(kernel):
    """(parameter names, constexpr indices, defaults) of a kernel object or plain function."""
    fn = getattr(kernel, "fn", None) or getattr(kernel, "func", None) or kernel
    sig = inspect.signature(fn)
    names, constexpr, defaults = [], set(), {}
    declared = getattr(kernel, "constexprs", None)
    for i, (name, p) in enumerate(sig.parameters.items()):
        names.append(name)
        ann = p.annotation
        is_ce = (declared is not None and name in declared) or _is_constexpr_annotation(ann)
        if is_ce:
            constexpr.add(i)
        if p.default is not inspect.Parameter.empty:
            defaults[name] = p.default
    return names, frozenset(constexpr), defaults


def _is_constexpr_annotation(ann) -> bool:
    if isinstance(ann, str):
        return ann.strip("'\" ").split(".")[-1] == "constexpr"
    return getattr(ann, "__name__", None) == "constexpr"


class PreparedLaunch:
    """One compiled kernel loaded on one device, with its argument packer."""

    __slots__ = ("compiled", "loaded", "function", "threads", "shared", "pack", "params_addr",
                 "lock", "name", "device")

    def __init__(self, compiled, loaded, state: KernelState):
        self.compiled, self.loaded = compiled, loaded
        self.function, self.threads, self.shared = loaded.function, loaded.threads, loaded.shared
        self.device = loaded.device
        self.name = compiled.name
        self.pack, self.params_addr = build_packer(compiled, state.params)
        self.lock = threading.Lock()


def _signature(state: KernelState, vals: list):
    """(key parts, array infos by parameter, device) for one call."""
    parts = []
    infos = [None] * len(vals)
    device = None
    ce = state.constexpr
    for i, v in enumerate(vals):
        if i in ce:
            parts.append(v)
            continue
        t = type(v)
        if t is int:
            parts.append(_int_sig(v))
        elif t is float:
            parts.append(float)
        elif t is bool:
            parts.append(bool)
        else:
            info = interop.array_info(v)
            if info is None:
                if isinstance(v, int):  # numpy integers, IntEnum
                    parts.append((t, _int_sig(int(v))))
                    continue
                if isinstance(v, float) or hasattr(v, "dtype"):
                    parts.append(t)
                    continue
                raise TypeError(f"kernel '{state.name}' argument {state.params[i]!r}: cannot pass a "
                                f"{t.__name__} to a GPU kernel (expected a GPU array or a number)")
            infos[i] = info
            sig = _array_sig(info)
            if device is None:
                device = sig[-1]
            elif sig[-1] != device:
                raise ValueError(f"kernel '{state.name}': arguments are on different devices "
                                 f"({device} and {sig[-1]} for {state.params[i]!r}); put every array "
                                 f"on one device")
            parts.append(sig)
    return parts, infos, device


def _default_stream(vals: list, device: int) -> int:
    torch = sys.modules.get("torch")
    if torch is not None:
        tensor = torch.Tensor
        for v in vals:
            if isinstance(v, tensor):
                return torch._C._cuda_getCurrentRawStream(device)  # noqa: SLF001 - int, no Stream object
    return 0


def launch(kernel, grid, args: tuple, kwargs: dict):
    """Launch `kernel` on `grid` with `args`/`kwargs` (options and stream= included)."""
    state = kernel_state(kernel)
    if kwargs:
        kwargs = dict(kwargs)
        opt_items = tuple((k, kwargs.pop(k)) for k in ("num_warps", "num_stages", "arch", "fast_math", "debug")
                          if k in kwargs)
        stream = kwargs.pop("stream", None)
    else:
        opt_items, stream = (), None
    vals = state.bind(args, kwargs) if (kwargs or len(args) != len(state.params)) else args
    parts, infos, device = _signature(state, vals)
    if device is None:
        device = driver.current_device()
    key = (tuple(parts), opt_items)
    prepared = state.table.get(key)
    if prepared is None:
        prepared = _prepare(state, key, vals, opt_items, device)
    driver.ensure_context(device)

    if callable(grid):
        grid = grid(dict(zip(state.params, vals)))
    gx, gy, gz = _grid3(grid, state.name)
    if gx == 0 or gy == 0 or gz == 0:
        return None  # an empty grid launches nothing
    h = stream_handle(stream) if stream is not None else _default_stream(vals, device)
    _cu_launch(prepared, gx, gy, gz, h, vals, infos)
    return None


def _grid3(grid, name: str):
    if isinstance(grid, int):
        return grid, 1, 1
    try:
        n = len(grid)
    except TypeError:
        n = -1
    if not 1 <= n <= 3:
        raise TypeError(f"kernel '{name}': grid must be an int or a tuple of 1 to 3 ints, got {grid!r}")
    g = tuple(int(x) for x in grid) + (1,) * (3 - n)
    if min(g) < 0:
        raise ValueError(f"kernel '{name}': grid {grid!r} has a negative extent")
    return g


_streams: Dict[int, Any] = {}


def _stream_obj(h: int):
    s = _streams.get(h)
    if s is None:
        s = _streams[h] = driver.cu().CUstream(h)
    return s


def _cu_launch(p: PreparedLaunch, gx, gy, gz, h, vals, infos):
    d = driver.cu()
    stream = _stream_obj(h)
    driver.last_kernel = p.name
    with p.lock:  # the packed buffer is shared: pack and launch as one step
        p.pack(vals, infos)
        (res,) = d.cuLaunchKernel(p.function, gx, gy, gz, p.threads, 1, 1, p.shared, stream,
                                  p.params_addr, 0)
    if res.value != 0:
        driver.check((res,), "cuLaunchKernel", p.name)


def preload(kernel, compiled, args: tuple, kwargs: dict = None) -> None:
    """Install an already compiled kernel for the signature of (args, kwargs): later launches
    of `kernel` with that signature use it without specializing or compiling (ahead-of-time
    compiled or cached kernels; also how the runtime is tested without the compiler)."""
    from . import module  # noqa: PLC0415
    state = kernel_state(kernel)
    kwargs = dict(kwargs or {})
    opt_items = tuple((k, kwargs.pop(k)) for k in ("num_warps", "num_stages", "arch", "fast_math", "debug")
                      if k in kwargs)
    kwargs.pop("stream", None)
    vals = state.bind(args, kwargs)
    parts, _, device = _signature(state, vals)
    device = driver.current_device() if device is None else device
    prepared = PreparedLaunch(compiled, module.load(compiled, device), state)
    with state.lock:
        state.table[(tuple(parts), opt_items)] = prepared


def _prepare(state: KernelState, key, vals, opt_items, device) -> PreparedLaunch:
    from .. import compiler, specialize  # noqa: PLC0415 - the frontend/compiler load on first launch
    from . import module  # noqa: PLC0415
    interop.register_with_frontend()
    dev = driver.get_device(device)
    options = CompileOptions(**dict(opt_items)).validated().with_arch(dev.arch)
    named = dict(zip(state.params, vals))
    spec, _ = specialize.specialize(state.kernel, (), named)
    compiled = compiler.compile_kernel(state.kernel, spec, options)
    loaded = module.load(compiled, device)
    prepared = PreparedLaunch(compiled, loaded, state)
    with state.lock:
        state.table[key] = prepared
    return prepared


def prepared_launch_count(kernel) -> int:
    """How many signatures of `kernel` have a prepared launcher (for tests and diagnostics)."""
    return len(kernel_state(kernel).table)



def launch_compiled(compiled, grid, *args, stream=None):
    """Launch an already compiled kernel (e.g. one read from the cache) with its run-time
    arguments in `compiled.arg_names` order; same packer and launch path as `launch`."""
    from . import module  # noqa: PLC0415
    names = list(compiled.arg_names) or [f"a{i}" for i in range(len(args))]
    if len(args) != len(names):
        raise TypeError(f"kernel '{compiled.name}' takes {len(names)} run-time argument(s) "
                        f"({', '.join(names)}), got {len(args)}")
    infos = [interop.array_info(a) if type(a) not in (int, float, bool) else None for a in args]
    devs = {i[4] for i in infos if i is not None}
    if len(devs) > 1:
        raise ValueError(f"kernel '{compiled.name}': arguments are on different devices {sorted(devs)}")
    device = devs.pop() if devs else driver.current_device()
    per_dev = compiled.__dict__.setdefault("_tilec_prepared", {})
    prepared = per_dev.get(device)
    if prepared is None:
        loaded = module.load(compiled, device)
        prepared = per_dev[device] = PreparedLaunch.__new__(PreparedLaunch)
        prepared.compiled, prepared.loaded, prepared.device, prepared.name = compiled, loaded, device, compiled.name
        prepared.function, prepared.threads, prepared.shared = loaded.function, loaded.threads, loaded.shared
        prepared.pack, prepared.params_addr = build_packer(compiled, names)
        prepared.lock = threading.Lock()
    driver.ensure_context(device)
    gx, gy, gz = _grid3(grid, compiled.name)
    if gx and gy and gz:
        h = stream_handle(stream) if stream is not None else _default_stream(list(args), device)
        _cu_launch(prepared, gx, gy, gz, h, args, infos)
