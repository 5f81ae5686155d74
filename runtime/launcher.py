"""The launch hot path: `kernel[grid](*args, **kw)` on a GPU.

Per kernel, a dict maps a per-call key to a prepared launcher. The key holds the
compile options, then per parameter: for a constexpr its value, else the
argument's `specialize.signature_of` (for an array its dtype, rank, low pointer
bits, unit strides, index width, divisibilities and device; for an int whether it
is 1, divisible by 16 and fits in 32 bits; for other scalars their type). The
Specialization is a function of those signatures, so one prepared launcher never
serves two different compiled kernels.

A prepared launcher owns the CUfunction and a packer generated once for its
signature (packing.py): per call it writes pointers, shapes, strides and
scalars into a preallocated ctypes buffer and hands cuLaunchKernel the
prebuilt array of parameter addresses.

Repeated calls skip most of that: the parts of the last launch are compared
(cheaply, they are mostly the same objects) before the table is hashed, and a
torch tensor whose dtype, shape, strides, pointer alignment and device match
the last tensor at its position reuses that tensor's signature part.

A kernel compiled with persistent=True runs on min(requested programs, SMs x resident
CTAs per SM) programs (computed once when the module is loaded), a 1-D grid; the
requested (gx, gy, gz) travel in its hidden grid parameters (`_persistent_grid`).

A miss (first call of a signature) runs the slow path: the kernel's own compile
step (`KernelState.compile`, given by the layer above: tilec.kernel specializes and
compiles, probing the compile cache), load the module on the device, build the
packer. The runtime never imports the frontend or the compiler.
"""
from __future__ import annotations

import inspect
import sys
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from ..definition import is_constexpr_annotation
from ..grid import normalize_grid
from ..options import OPTION_FIELDS as _OPTION_NAMES
from ..options import CompileOptions, check_grid_limits, unknown_keyword
from ..specialize import array_signature, int_signature, signature_of
from ..target import Target
from . import driver, interop, module
from .memory import DeviceArray
from .packing import build_packer
from .graph import current_stream
from .stream import stream_handle

__all__ = ["launch", "launch_compiled", "preload", "KernelState", "PreparedLaunch", "DependentLaunch",
           "prepared_launch_count"]

_I32_MAX = 2 ** 31 - 1


class KernelState:
    """What the launcher keeps per kernel: its parameters and the table of prepared launches.

    `kernel`: a tilec Kernel or a plain function (its parameters are read). `compile(named
    args, options)`: the CompiledKernel for a call whose signature has no prepared launch
    yet; without it, only signatures installed with `preload` launch."""

    def __init__(self, kernel, compile: Optional[Callable] = None):
        self.kernel = kernel
        self.compile = compile
        self.name = getattr(kernel, "__name__", None) or getattr(kernel, "name", "kernel")
        self.params, self.constexpr, self.defaults = _describe(kernel)
        if list(getattr(kernel, "param_names", self.params)) != self.params:
            raise TypeError(f"kernel '{self.name}': parameter list does not match its function")
        self.index = {n: i for i, n in enumerate(self.params)}
        self.nparams = len(self.params)
        self.ce_mask = tuple(i in self.constexpr for i in range(self.nparams))
        self.table: Dict[Tuple, "PreparedLaunch"] = {}
        self.lock = threading.Lock()
        # Per parameter position, what the last torch tensor there looked like:
        # ((torch dtype, shape, strides, ptr & 15, device), signature part, DType). A call
        # whose tensor matches reuses the signature part instead of recomputing it.
        self.torch_memo: list = [None] * self.nparams
        # (key parts, PreparedLaunch) of the last launch: a repeated call compares its parts
        # (mostly the very same objects) instead of hashing them for the table.
        self.last: Tuple = (None, None)

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
                raise unknown_keyword(self.name, k, self.params)
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


def _describe(kernel):
    """(parameter names, constexpr indices, defaults) of a kernel object or plain function."""
    fn = getattr(kernel, "fn", None) or getattr(kernel, "func", None) or kernel
    sig = inspect.signature(fn)
    names, constexpr, defaults = [], set(), {}
    declared = getattr(kernel, "constexprs", None)
    for i, (name, p) in enumerate(sig.parameters.items()):
        names.append(name)
        ann = p.annotation
        is_ce = (declared is not None and name in declared) or is_constexpr_annotation(ann)
        if is_ce:
            constexpr.add(i)
        if p.default is not inspect.Parameter.empty:
            defaults[name] = p.default
    return names, frozenset(constexpr), defaults


class PreparedLaunch:
    """One compiled kernel loaded on one device, with its argument packer."""

    __slots__ = ("compiled", "loaded", "function", "threads", "shared", "pool", "param_names",
                 "name", "device", "persistent", "cluster", "dependent")

    def __init__(self, compiled, loaded, param_names):
        self.compiled, self.loaded = compiled, loaded
        self.function, self.threads, self.shared = loaded.function, loaded.threads, loaded.shared
        self.device = loaded.device
        self.name = compiled.name
        self.persistent = loaded.persistent_programs  # 0: launch the grid as asked
        self.cluster = int(compiled.metadata.get("cluster", 1))  # programs per cluster along x
        self.param_names = list(param_names)
        # Free (packer, kernelParams address) pairs, each with its own buffer. A launch pops
        # one (atomic under the GIL), so two threads never pack into the same buffer.
        self.pool = [build_packer(compiled, self.param_names)]
        # dependent_launch (sm_90+): launched by cuLaunchKernelEx with programmatic serialization
        self.dependent = DependentLaunch(self) if compiled.metadata.get("dependent_launch") else None

    def take_packer(self):
        try:
            return self.pool.pop()
        except IndexError:  # another thread holds the only one: give this thread its own
            return build_packer(self.compiled, self.param_names)


class DependentLaunch:
    """How a kernel compiled with dependent_launch=True is launched: cuLaunchKernelEx with
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so it may start while the
    kernel before it in the stream still runs (it waits for that kernel's results at its
    griddepcontrol.wait). Each launch takes a CUlaunchConfig from a pool, as packers are
    taken, so two threads never fill the same one."""

    __slots__ = ("function", "threads", "shared", "configs")

    def __init__(self, p: "PreparedLaunch"):
        self.function, self.threads, self.shared = p.function, p.threads, p.shared
        self.configs = [self._config()]

    def _config(self):
        d = driver.cu()
        config = d.CUlaunchConfig()
        config.blockDimX, config.blockDimY, config.blockDimZ = self.threads, 1, 1
        config.sharedMemBytes = self.shared
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config.attrs = [attr]
        config.numAttrs = 1
        return config

    def launch(self, gx, gy, gz, stream, params):
        """cuLaunchKernelEx's result code."""
        try:
            config = self.configs.pop()
        except IndexError:  # another thread holds the only one
            config = self._config()
        config.gridDimX, config.gridDimY, config.gridDimZ = gx, gy, gz
        config.hStream = stream
        try:
            return driver.cu().cuLaunchKernelEx(config, self.function, params, 0)[0]
        finally:
            self.configs.append(config)


def _signature(state: KernelState, vals):
    """(key parts, array infos by parameter, device) for one call (the general path)."""
    parts, infos, device = [], [], -1
    for i, (v, ce) in enumerate(zip(vals, state.ce_mask)):
        if ce:
            parts.append(v)
            infos.append(None)
            continue
        sig, info = _classify(state, i, v)
        parts.append(sig)
        infos.append(info)
        if info is not None and device != info[4]:
            device = _one_device(state, device, info[4])
    return parts, infos, (None if device < 0 else device)


def _default_stream(vals, device: int) -> int:
    h = current_stream()   # a tc.Graph capture's
    if h:
        return h
    torch = sys.modules.get("torch")
    if torch is not None:
        tensor = torch.Tensor
        for v in vals:
            if isinstance(v, tensor):
                return torch._C._cuda_getCurrentRawStream(device)  # noqa: SLF001 - int, no Stream object
    return 0


_SUCCESS = None
_cuLaunchKernel = None
_torch_tensor = None          # torch.Tensor once torch is imported
_torch_param = None           # torch.nn.Parameter (a module's weight), read as a Tensor
_torch_current_stream = None  # torch._C._cuda_getCurrentRawStream: an int, no Stream object
_streams: Dict[int, Any] = {}
_tls = driver._tls  # noqa: SLF001 - the runtime's thread state (current context, a capture's stream)


def launch(state: KernelState, grid, args: tuple, kwargs: dict):
    """Launch the kernel of `state` on `grid` with `args`/`kwargs` (options and stream= included).

    Written for speed: the common argument types are read inline, and everything
    not on the common path (binding keywords, other array types, errors) is
    delegated to the slower general helpers above.
    """
    if kwargs:
        kwargs = dict(kwargs)
        opt_items = tuple((k, kwargs.pop(k)) for k in _OPTION_NAMES if k in kwargs)
        stream = kwargs.pop("stream", None)
        vals = state.bind(args, kwargs)
    else:
        opt_items, stream = (), None
        vals = args if len(args) == state.nparams else state.bind(args, kwargs)

    parts = [opt_items]
    infos = []
    device = -1
    has_torch = False
    tensor_cls, param_cls = _torch_tensor, _torch_param
    torch_memo = state.torch_memo
    for v, ce in zip(vals, state.ce_mask):
        t = type(v)
        if ce:
            parts.append(v)
            infos.append(None)
        elif t is DeviceArray:
            sig = v._sig  # noqa: SLF001
            if sig is None:
                sig = v._sig = array_signature(v._info)  # noqa: SLF001
            parts.append(sig)
            infos.append(v._info)  # noqa: SLF001
            if device != sig[5]:
                device = _one_device(state, device, sig[5])
        elif t is int:
            parts.append(int_signature(v))
            infos.append(None)
        elif t is float:
            parts.append(float)
            infos.append(None)
        elif (t is tensor_cls or t is param_cls) and (tdev := v.get_device()) >= 0:
            ptr, shape, strides = v.data_ptr(), v.shape, v.stride()
            looks = (v.dtype, shape, strides, ptr & 15, tdev)
            pos = len(infos)
            m = torch_memo[pos]
            if m is not None and m[0] == looks:
                sig, dt = m[1], m[2]
            else:
                dt = interop.torch_dtype_map(looks[0])
                sig = array_signature((ptr, shape, strides, dt, tdev))
                torch_memo[pos] = (looks, sig, dt)
            parts.append(sig)
            infos.append((ptr, shape, strides, dt, tdev))
            has_torch = True
            if device != tdev:
                device = _one_device(state, device, tdev)
        else:
            sig, info = _classify(state, len(infos), v)
            parts.append(sig)
            infos.append(info)
            if info is not None:
                if tensor_cls is None and "torch" in sys.modules:
                    # torch was imported after the launcher bound its hot-path names (a
                    # launch that hit an existing entry never rebinds): bind them now
                    tensor_cls = _bind_torch()
                has_torch = has_torch or (tensor_cls is not None and isinstance(v, tensor_cls))
                if device != info[4]:
                    device = _one_device(state, device, info[4])
    if device < 0:
        device = driver.current_device()
    last_parts, prepared = state.last
    if parts != last_parts:
        prepared = state.table.get(tuple(parts))
        if prepared is None:
            prepared = _prepare(state, tuple(parts), vals, opt_items, device)
        state.last = (parts, prepared)
    if getattr(driver._tls, "ctx_device", None) != device:  # noqa: SLF001
        driver.ensure_context(device)

    if type(grid) is not tuple or len(grid) != 1:
        gx, gy, gz = normalize_grid(grid, dict(zip(state.params, vals)) if callable(grid) else None, state.name)
    else:
        gx, gy, gz = grid[0], 1, 1
    if stream is not None:
        h = stream_handle(stream)
    else:
        h = getattr(_tls, "stream", 0)  # a tc.Graph capture's stream
        if not h and has_torch:
            h = _torch_current_stream(device)
    s = _streams.get(h)
    if s is None:
        s = _streams[h] = driver.cu().CUstream(h)
    if prepared.cluster != 1 and gx % prepared.cluster:
        _cluster_mismatch(prepared, gx)
    pool = prepared.pool
    try:
        packer = pool.pop()
    except IndexError:
        packer = prepared.take_packer()
    try:
        if prepared.persistent:
            asked = (gx, gy, gz)
            gx, gy, gz = _persistent_grid(prepared, packer[0], vals, infos, gx, gy, gz)
        else:
            packer[0](vals, infos)
        if _profile is None:  # the one test a launch pays for tc.profile
            if prepared.dependent is None:
                res = _cuLaunchKernel(prepared.function, gx, gy, gz, prepared.threads, 1, 1,
                                      prepared.shared, s, packer[1], 0)[0]
            else:
                res = prepared.dependent.launch(gx, gy, gz, s, packer[1])
        else:
            res = _profiled(prepared, vals, infos, asked if prepared.persistent else (gx, gy, gz),
                            s, packer[1], (gx, gy, gz))
        pool.append(packer)
    except (TypeError, OverflowError):
        g = normalize_grid(grid if not callable(grid) else (gx, gy, gz), None, state.name)  # says what is wrong
        check_grid_limits(g, state.name)  # (an extent past 2**32 - 1 overflows the driver's argument)
        raise
    if res is not _SUCCESS:
        if gx == 0 or gy == 0 or gz == 0:
            return None  # an empty grid launches nothing
        _launch_failed(prepared, res, gx, gy, gz, infos)
    driver.last_launch = (prepared, gx, gy, gz, infos)  # what a later fault report names
    return None


# The tc.profile collecting launches (runtime/profile.py sets it), None outside one.
_profile = None


def _profiled(prepared: PreparedLaunch, vals, infos, asked, s, params, launched):
    """One launch bracketed by the active profile's events (`asked`: the grid the kernel's
    program ids cover; `launched`: the one the driver gets, fewer for a persistent kernel)."""
    gx, gy, gz = launched
    if prepared.dependent is None:
        def go():
            return _cuLaunchKernel(prepared.function, gx, gy, gz, prepared.threads, 1, 1, prepared.shared, s,
                                   params, 0)[0]
    else:
        def go():
            return prepared.dependent.launch(gx, gy, gz, s, params)
    return _profile.launch(prepared, prepared.param_names, vals, infos, asked, s, go)


def _one_device(state: KernelState, device: int, other: int) -> int:
    if device < 0:
        return other
    raise ValueError(f"kernel '{state.name}': arguments are on different devices ({device} and {other}); "
                     f"put every array on one device")


def _classify(state: KernelState, i: int, v):
    """(signature part, array info or None) of an argument off the common path: its
    `signature_of`, arrays read by the GPU reader (host arrays are refused there)."""
    try:
        sig, info = signature_of(v, interop.array_info)
    except TypeError as e:  # the array reader's refusal (a host array, an unsupported dtype): say where
        raise TypeError(f"kernel '{state.name}' argument {state.params[i]!r}: {e}") from None
    if sig is not None:
        return sig, info
    raise TypeError(f"kernel '{state.name}' argument {state.params[i]!r}: cannot pass a "
                    f"{type(v).__name__} to a GPU kernel (expected a GPU array or a number)")


def _cluster_mismatch(p: PreparedLaunch, gx: int):
    raise ValueError(f"kernel '{p.name}' runs in clusters of {p.cluster} programs along grid axis 0 "
                     f"(cluster={p.cluster}): the grid's x extent must be a multiple of {p.cluster}, got {gx}")


def _persistent_grid(p: PreparedLaunch, pack, vals, infos, gx, gy, gz):
    """Pack a persistent kernel's arguments with the requested grid (gx, gy, gz); return the
    grid it runs on: min(gx * gy * gz, programs that fit on the device) programs along x,
    a whole number of clusters (the requested grid is: gx is a multiple of the cluster)."""
    total = gx * gy * gz
    launched = min(total, max(p.persistent - p.persistent % p.cluster, p.cluster))
    # the kernel counts program ids in i32: the last id plus the launched grid must fit
    if total + launched > _I32_MAX + 1:
        raise ValueError(f"kernel '{p.name}': persistent=True counts program ids in 32 bits; the grid "
                         f"({gx}, {gy}, {gz}) has {total} programs, at most {_I32_MAX + 1 - launched} fit")
    pack(vals, infos, (gx, gy, gz))
    return launched, 1, 1


def _launch_failed(p: PreparedLaunch, res, gx, gy, gz, infos):
    """Raise for a launch the driver refused: a grid past the limits by its axis (the driver's
    error names none), else the driver's error (a fault of an earlier launch names that one)."""
    check_grid_limits((gx, gy, gz), p.name)
    driver.check((res,), "cuLaunchKernel" if p.dependent is None else "cuLaunchKernelEx", p.name,
                 launch=(p, gx, gy, gz, infos))


def _bind_driver() -> None:
    """Cache the driver entry points the hot path calls (after the driver is loaded)."""
    global _SUCCESS, _cuLaunchKernel
    d = driver.cu()
    _SUCCESS = d.CUresult.CUDA_SUCCESS
    _cuLaunchKernel = d.cuLaunchKernel
    _bind_torch()


def _bind_torch():
    """torch.Tensor (the exact type the hot path reads inline) once torch is imported, else None."""
    global _torch_tensor, _torch_param, _torch_current_stream
    torch = sys.modules.get("torch")
    if torch is not None and _torch_tensor is None:
        _torch_current_stream = torch._C._cuda_getCurrentRawStream  # noqa: SLF001
        _torch_tensor = torch.Tensor
        _torch_param = getattr(getattr(torch, "nn", None), "Parameter", None)
    return _torch_tensor


def _cu_launch(p: PreparedLaunch, gx, gy, gz, h, vals, infos):
    """Pack and launch one prepared kernel (the path of launch_compiled)."""
    if _cuLaunchKernel is None:
        _bind_driver()
    s = _streams.get(h)
    if s is None:
        s = _streams[h] = driver.cu().CUstream(h)
    if p.cluster != 1 and gx % p.cluster:
        _cluster_mismatch(p, gx)
    packer = p.take_packer()
    if p.persistent:  # launch_compiled launches no empty grid
        asked = (gx, gy, gz)
        gx, gy, gz = _persistent_grid(p, packer[0], vals, infos, gx, gy, gz)
    else:
        packer[0](vals, infos)
    if _profile is not None:
        res = _profiled(p, vals, infos, asked if p.persistent else (gx, gy, gz), s, packer[1], (gx, gy, gz))
    elif p.dependent is None:
        res = _cuLaunchKernel(p.function, gx, gy, gz, p.threads, 1, 1, p.shared, s, packer[1], 0)[0]
    else:
        res = p.dependent.launch(gx, gy, gz, s, packer[1])
    p.pool.append(packer)
    if res is not _SUCCESS:
        _launch_failed(p, res, gx, gy, gz, infos)
    driver.last_launch = (p, gx, gy, gz, infos)


def preload(state: KernelState, compiled, args: tuple, kwargs: dict = None) -> None:
    """Install an already compiled kernel for the signature of (args, kwargs): later launches
    through `state` with that signature use it without compiling (ahead-of-time compiled or
    cached kernels; also how the runtime is tested without the compiler)."""
    kwargs = dict(kwargs or {})
    opt_items = tuple((k, kwargs.pop(k)) for k in _OPTION_NAMES
                      if k in kwargs)
    kwargs.pop("stream", None)
    vals = state.bind(args, kwargs)
    parts, _, device = _signature(state, vals)
    device = driver.current_device() if device is None else device
    prepared = PreparedLaunch(compiled, module.load(compiled, device), state.params)
    _bind_driver()
    with state.lock:
        state.table[tuple([opt_items] + parts)] = prepared
        state.last = (None, None)  # the last launch may have used the entry just replaced


def _prepare(state: KernelState, key, vals, opt_items, device) -> PreparedLaunch:
    if state.compile is None:
        raise TypeError(f"kernel '{state.name}' has no compiled kernel for this call's signature and no "
                        f"compile step: preload one (launcher.preload)")
    options = CompileOptions(**dict(opt_items)).validated(Target.for_device(device))
    compiled = state.compile(dict(zip(state.params, vals)), options)
    loaded = module.load(compiled, device)
    prepared = PreparedLaunch(compiled, loaded, state.params)
    _bind_driver()
    with state.lock:
        state.table[key] = prepared
    return prepared


def prepared_launch_count(state: KernelState) -> int:
    """How many signatures of the kernel of `state` have a prepared launcher (tests, diagnostics)."""
    return len(state.table)



_compiled_launches = module.PerCompiled()  # launch_compiled's prepared launch per (kernel, device)


def launch_compiled(compiled, grid, *args, stream=None):
    """Launch an already compiled kernel (e.g. one read from the cache) with its run-time
    arguments in `compiled.arg_names` order; same packer and launch path as `launch`."""
    names = list(compiled.arg_names) or [f"a{i}" for i in range(len(args))]
    if len(args) != len(names):
        raise TypeError(f"kernel '{compiled.name}' takes {len(names)} run-time argument(s) "
                        f"({', '.join(names)}), got {len(args)}")
    infos = [interop.array_info(a) if type(a) not in (int, float, bool) else None for a in args]
    devs = {i[4] for i in infos if i is not None}
    if len(devs) > 1:
        raise ValueError(f"kernel '{compiled.name}': arguments are on different devices {sorted(devs)}")
    device = devs.pop() if devs else driver.current_device()
    prepared = _compiled_launches.get(compiled, device)
    if prepared is None:
        prepared = PreparedLaunch(compiled, module.load(compiled, device), names)
        _compiled_launches.put(compiled, device, prepared)
    driver.ensure_context(device)
    gx, gy, gz = normalize_grid(grid, None, compiled.name)
    if gx and gy and gz:
        h = stream_handle(stream) if stream is not None else _default_stream(list(args), device)
        _cu_launch(prepared, gx, gy, gz, h, args, infos)
