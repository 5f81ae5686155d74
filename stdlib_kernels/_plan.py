"""Launch plans: the stdlib entry points' host work done once per argument layout.

An entry point's Python (reading its arguments, checking them, viewing arrays as
rows, picking tiles, binding the launch) costs tens of microseconds, more than the
GPU time of a small op. Everything it decides is a function of the arrays' kinds,
shapes, strides, dtypes, devices and 16-byte alignment and of the other arguments'
values. So the first call with a given such key runs the entry point as written
while recording what it does: the outputs it allocates, and per launch the
runtime's `LaunchPlan` of it (`Kernel.prepare`: compiled kernel, packer, grid,
shapes, scalars; runtime/replay.py) with each array argument as (which array,
element offset). Later calls with the same key replay that record: allocate the
outputs, compute the addresses, `LaunchPlan.launch`. No views are built, nothing
is re-validated, and nothing here touches the launcher's private state.

Only GPU calls whose arrays are all torch CUDA tensors or `tc.DeviceArray`s are
planned; anything else (numpy on the interpreter, CuPy, DLPack objects, an
argument that is not hashable, a recording that meets something it cannot
describe) takes the entry point's own path every time.

Per-call scalars (dropout's seed and p, a norm's eps) would make every new value a
new key, and so a full recording. An entry point whose decisions do not depend on
such arguments names a function of them, `planned(per_call=fn)`: `fn` validates
them and returns the launch scalars they become, and the entry point takes those
through `derived(fn, ...)`. Their values then stay out of the key (only their
types, and for a launch scalar its `specialize.signature_of`, what the launcher keys
on), and a replay calls `fn` and puts its results where the recording saw them.
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from tilec.options import OPTION_FIELDS as _OPTION_NAMES
from tilec.runtime import driver as _driver
from tilec.runtime import launcher as _launcher
from tilec.runtime.profile import labelled
from tilec.specialize import int_signature, signature_of

__all__ = ["planned", "named", "derived", "recording", "register_root", "register_view", "record_launch", "clear_plans",
           "plan_count"]


class _Recorder(threading.local):
    """Per thread: the recording it is making, None (a class default, so every call reads a
    plain attribute: driver._ThreadState says why)."""
    rec = None


_tls = _Recorder()
_MAX_PLANS = 256          # per entry point; the oldest plan goes first
_UNPLANNABLE = object()   # a key whose recording failed: always the entry's own path
_plans: Dict[str, Dict] = {}
_driver_tls = _driver._tls  # noqa: SLF001 - its `stream`: a tc.Graph capture's (graph.current_stream), read inline


class _Recording:
    """What one first call did, in terms of its array arguments ("in", i) and the
    arrays it allocated ("out", j)."""

    def __init__(self):
        self.where: Dict[int, Tuple] = {}   # id(obj) -> (root, element offset)
        self.views: Dict[int, Tuple] = {}   # id(view) -> (root, offset, shape, strides)
        self.keep: List[Any] = []           # objects whose ids are in the maps stay alive
        self.outs: List[Tuple] = []         # (allocate, input index or None) per allocation (register_alloc)
        self.launches: List[Tuple] = []
        self.ok = True
        self.per_call = None                # the entry's per-call function, its results
        self.derived: Tuple = ()
        self.derived_used = False


def derived(fn, *args) -> Tuple:
    """`fn(*args)`: the launch scalars of an entry point's per-call arguments. While that
    entry point records, the very objects its plan substitutes at replay."""
    rec = _tls.rec
    if rec is not None and rec.per_call is fn:
        rec.derived_used = True
        return rec.derived
    return fn(*args)


def recording() -> Optional[_Recording]:
    return _tls.rec


def register_root(obj, root: Tuple, offset: int = 0) -> None:
    """`obj` (an array) is `root` shifted by `offset` elements."""
    rec = _tls.rec
    rec.where[id(obj)] = (root, offset)
    rec.keep.append(obj)


def register_alloc(obj, allocate, like=None, allocate_like=None) -> None:
    """`obj` was allocated by the entry point; `allocate()` makes another like it. Where `like`
    (an array on the output's device) is one of the call's arguments, `allocate_like(arg)`
    makes it from the replayed call's argument instead (torch: `new_empty` takes the device
    from the tensor, where `torch.empty(..., device=)` parses it on every call)."""
    rec = _tls.rec
    register_root(obj, ("out", len(rec.outs)))
    w = rec.where.get(id(like)) if allocate_like is not None else None
    if w is not None and w[0][0] == "in" and w[1] == 0:
        rec.outs.append((allocate_like, w[0][1]))
    else:
        rec.outs.append((allocate, None))


def register_slice(parent, obj, offset: int) -> None:
    rec = _tls.rec
    w = rec.where.get(id(parent))
    if w is None:
        rec.ok = False
        return
    register_root(obj, w[0], w[1] + offset)


def register_view(base, view_obj, shape, strides) -> None:
    rec = _tls.rec
    w = rec.where.get(id(base))
    if w is None:
        rec.ok = False
        return
    rec.views[id(view_obj)] = (w[0], w[1], tuple(shape), tuple(strides))
    rec.keep.append(view_obj)


def record_launch(kernel, grid, args, kwargs) -> None:
    """After a launch of `kernel[grid](*args, **kwargs)`: its runtime LaunchPlan and, per array
    argument of the plan, where its address comes from; per scalar, a per-call value or not."""
    rec = _tls.rec
    vals = kernel.launch_state.bind(args, {k: v for k, v in kwargs.items() if k not in _OPTION_NAMES})
    try:
        lp = kernel.prepare(grid, *args, **kwargs)   # the launch just made prepared it: a table hit
    except Exception:  # noqa: BLE001 - anything it cannot describe: this key is not planned
        rec.ok = False
        return
    arrays = []
    for i in lp.array_positions:
        recipe = rec.views.get(id(vals[i]))
        if recipe is None:   # an array passed without `view`: its shape is not recorded
            rec.ok = False
            return
        arrays.append(recipe[:2])   # (root, element offset)
    subs = []
    for k, i in enumerate(lp.scalar_positions):
        d = next((d for d, v in enumerate(rec.derived) if v is vals[i]), None)
        if d is not None:
            subs.append((k, d))
        elif type(vals[i]) not in (int, float) and not hasattr(vals[i], "dtype"):
            rec.ok = False
            return
    rec.launches.append((lp, tuple(arrays), tuple(subs)))


# ----------------------------------------------------------------------------- keys
def _torch_cls():
    torch = sys.modules.get("torch")
    return torch.Tensor if torch is not None else None


_PLAIN = (int, float, str, bool)


def _read_args(key: list, values, skip, tensor_cls, device_array_cls, param_cls=None):
    """Append each argument's part of the key to `key`; return the arguments' addresses (0 for a
    non-array), or None when the call cannot be planned. One loop with the common types read
    inline: this runs on every call. An array's part is (type, dtype, shape, strides, address
    mod 16, device); a per-call argument's (position in `skip`) only its type. A Parameter
    keys as a Tensor: both replay alike."""
    ptrs = []
    for n, v in enumerate(values):
        t = type(v)
        if skip and n in skip:
            key.append(t)
            ptrs.append(0)
        elif t is tensor_cls or t is param_cls:
            if not v.is_cuda:
                return None
            p = v.data_ptr()
            key.append((tensor_cls, v.dtype, v.shape, v.stride(), p & 15, v.get_device()))   # shape: a tuple (torch.Size)
            ptrs.append(p)
        elif t is device_array_cls:
            p = v.ptr
            key.append((t, v.dtype, v.shape, v.strides, p & 15, v.device))
            ptrs.append(p)
        elif v is None or t in _PLAIN or (t is tuple and all(e is None or type(e) in _PLAIN for e in v)):
            key.append((t, v))   # (a tuple of plain values: attention's window)
            ptrs.append(0)
        else:
            return None
    return ptrs


_BY_TYPE = (float, bool, np.float16, np.float32, np.float64)   # signature_of: the type itself
_NP_INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)


def _derived_key(derived_now) -> tuple:
    """Per launch scalar of the per-call function: its type and `signature_of` (what the launcher
    keys on), read inline for Python and numpy scalars (tests check it against signature_of)."""
    out = []
    for d in derived_now:
        t = type(d)
        if t in _BY_TYPE:
            sig = t
        elif t is int:
            sig = int_signature(d)
        elif t in _NP_INTS:
            sig = (t, int_signature(int(d)))
        else:
            sig = signature_of(d)[0]
        out.append((t, sig))
    return tuple(out)


def _root_info(v, tensor_cls):
    """(address, itemsize, DType, device, is torch) of an array argument."""
    if tensor_cls is not None and isinstance(v, tensor_cls):
        from tilec.runtime.interop import torch_dtype_map  # noqa: PLC0415
        dt = torch_dtype_map(v.dtype)
        return v.data_ptr(), dt.itemsize, dt, v.get_device(), True
    return v.ptr, v.dtype.itemsize, v.dtype, v.device, False


def _per_call_reader(fn, per_call):
    """For the parameters of `per_call` (named as `fn`'s): a function of (args, kwargs)
    giving their values and their positions in the key's value list."""
    params = list(inspect.signature(fn).parameters.values())
    names = [p.name for p in params]
    wanted = []
    for name in inspect.signature(per_call).parameters:
        if name not in names:
            raise TypeError(f"planned: {fn.__qualname__} has no parameter {name!r} (named by {per_call.__qualname__})")
        pos = names.index(name)
        wanted.append((name, pos, params[pos].default))

    def read(args, kwargs):
        vals, where = [], []
        for name, pos, default in wanted:
            if name in kwargs:
                vals.append(kwargs[name])
                where.append(len(args) + list(kwargs).index(name))
            elif pos < len(args):
                vals.append(args[pos])
                where.append(pos)
            else:
                vals.append(default)
        return vals, where
    return read


# ----------------------------------------------------------------------------- the decorators
def named(fn):
    """Name the launches of an entry point that is not `planned` after it inside a tc.profile
    (a planned one names its own): `prof.table()` shows `attention: attention_fwd_kernel`."""
    op = fn.__name__

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        prof = _launcher._profile
        if prof is None or (prof._labels and prof._labels[-1] == op):  # noqa: SLF001
            return fn(*args, **kwargs)
        with labelled(op):
            return fn(*args, **kwargs)
    return entry


def planned(fn=None, *, per_call=None, label: Optional[str] = None):
    """Wrap an entry point so that repeated calls of one key replay the first call's launches.
    `per_call`: see the module doc; the entry point must then read those arguments only
    through `derived(per_call, ...)` (a recording where it did not is not kept). `label`: the
    op's name in a tc.profile (default: fn's), for a planned path inside an entry point."""
    if fn is None:
        return lambda f: planned(f, per_call=per_call, label=label)
    name = f"{fn.__module__}.{fn.__qualname__}"
    table = _plans.setdefault(name, {})
    from tilec.runtime.memory import DeviceArray  # noqa: PLC0415
    read_per_call = _per_call_reader(fn, per_call) if per_call is not None else None

    op = label or fn.__name__

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        prof = _launcher._profile
        if prof is not None and (not prof._labels or prof._labels[-1] != op):  # noqa: SLF001
            with labelled(op):   # tc.profile names this op's launches
                return entry(*args, **kwargs)
        torch = sys.modules.get("torch")
        key = [tuple(kwargs) if kwargs else ()]
        values = list(args) + list(kwargs.values()) if kwargs else args
        skip = ()
        if read_per_call is not None:
            pc_values, skip = read_per_call(args, kwargs)
        if torch is not None:
            ptrs = _read_args(key, values, skip, torch.Tensor, DeviceArray, torch.nn.Parameter)
        else:
            ptrs = _read_args(key, values, skip, None, DeviceArray)
        if ptrs is None or _tls.rec is not None:
            return fn(*args, **kwargs)
        derived_now = ()
        if read_per_call is not None:
            derived_now = per_call(*pc_values)  # validates; raises as the entry point would
            key.append(_derived_key(derived_now))
        key = tuple(key)
        plan = table.get(key)
        if plan is _UNPLANNABLE:
            return fn(*args, **kwargs)
        if plan is not None:
            return _replay(plan, values, ptrs, derived_now)
        return _record(fn, args, kwargs, values, key, table, per_call, derived_now)

    entry.__wrapped_entry__ = fn
    return entry


def _record(fn, args, kwargs, values, key, table, per_call, derived_now):
    rec = _tls.rec = _Recording()
    rec.per_call, rec.derived = per_call, derived_now
    try:
        for i, v in enumerate(values):
            if v is not None and type(v) not in (int, float, str, bool, tuple):
                register_root(v, ("in", i))
        result = fn(*args, **kwargs)
    finally:
        _tls.rec = None
    ok = rec.ok and (per_call is None or rec.derived_used)
    plan = _finish(rec, result, values) if ok else None
    if len(table) >= _MAX_PLANS:
        table.pop(next(iter(table)))
    table[key] = _UNPLANNABLE if plan is None else plan
    return result


def _finish(rec, result, values):
    """The replayable form of a recording: (allocations, launches, whether the result is a
    tuple, the roots it returns), roots numbered inputs first, then allocations; per launch its
    LaunchPlan, its array arguments as (root, byte offset), its scalars and their per-call
    substitutions, and torch's stream function where it runs on torch's stream. None when
    the result is not one of the roots (a tuple's entries may also be None)."""
    n_in = len(values)

    def index(root):
        return root[1] if root[0] == "in" else n_in + root[1]

    items = result if isinstance(result, tuple) else (result,)
    returns = []
    for r in items:
        if r is None and isinstance(result, tuple):   # (a gradient the call has no parameter for)
            returns.append(None)
            continue
        w = rec.where.get(id(r))
        if w is None or w[1] != 0:
            return None
        returns.append(index(w[0]))
    objs = list(values) + [rec.keep[i] for i in _alloc_positions(rec)]
    tensor_cls = _torch_cls()
    launches = []
    for lp, arrays, subs in rec.launches:
        recipe, torch_stream = [], False
        for root, offset in arrays:
            j = index(root)
            _ptr, isz, _dt, _device, is_torch = _root_info(objs[j], tensor_cls)
            torch_stream = torch_stream or is_torch
            recipe.append((j, offset * isz))
        # a launch with a torch tensor among its arrays goes to torch's current stream (an int, no Stream)
        raw_stream = sys.modules["torch"]._C._cuda_getCurrentRawStream if torch_stream else None  # noqa: SLF001
        launches.append((lp, tuple(recipe), lp.scalar_values() if subs else None, subs, raw_stream))
    # per allocation: how to make another, and whether it is a torch tensor (else a DeviceArray)
    outs = tuple((allocate, like, type(o) is tensor_cls) for (allocate, like), o in zip(rec.outs, objs[n_in:]))
    return (outs, tuple(launches), isinstance(result, tuple), tuple(returns))


def _alloc_positions(rec):
    """Where in `rec.keep` each allocation's object is (in allocation order)."""
    by_root = {w[0]: id_ for id_, w in rec.where.items() if w[0][0] == "out" and w[1] == 0}
    pos = {id(o): n for n, o in enumerate(rec.keep)}
    return [pos[by_root[("out", j)]] for j in range(len(rec.outs))]


def _replay(plan, values, ptrs, derived_now):
    """Carry out a plan for a call whose arguments are `values` at addresses `ptrs`."""
    outs, launches, is_tuple, returns = plan
    objs = values
    if outs:
        objs = list(values)
        for allocate, like, is_torch in outs:
            o = allocate() if like is None else allocate(values[like])
            objs.append(o)
            ptrs.append(o.data_ptr() if is_torch else o.ptr)
    # the stream the launcher would pick: a tc.Graph capture's, else torch's current one when a
    # torch tensor is an argument, else the legacy default stream
    captured = _driver_tls.stream
    for lp, recipe, scalars, subs, raw_stream in launches:
        if subs:
            scalars = list(scalars)
            for k, d in subs:
                scalars[k] = derived_now[d]
        h = captured or (raw_stream(lp.device) if raw_stream is not None else 0)
        lp.launch([ptrs[j] + offset for j, offset in recipe], scalars, h)
    if is_tuple:
        return tuple(None if j is None else objs[j] for j in returns)
    return objs[returns[0]]


def clear_plans() -> None:
    """Forget every recorded plan (tests; a process that changed devices' state)."""
    for table in _plans.values():
        table.clear()


def plan_count(entry) -> int:
    """How many plans an entry point holds."""
    fn = getattr(entry, "__wrapped_entry__", entry)
    return len(_plans.get(f"{fn.__module__}.{fn.__qualname__}", {}))
