"""LaunchPlan: a kernel launch prepared once and replayed with new array addresses.

`kernel[grid](*args)` recomputes the call's signature on every launch (cheaply, but
still per argument) to find its prepared launcher. A caller that launches the same
kernel with arrays of the same shapes, strides, dtypes, alignment and device over
and over (the standard library's launch plans, a training loop's fixed shapes) can
do that work once:

    plan = launch_plan(kernel.launch_state, grid, args, kwargs)   # compiles if needed
    plan.launch(pointers)              # the array arguments' addresses, in plan.arrays order
    plan.launch(pointers, scalars)     # new values for plan.scalars too
    plan.launch(pointers, stream=h)    # on a stream (raw handle, tc.Stream, torch/CuPy stream)

A plan holds the prepared launcher (compiled kernel loaded on the device, its
argument packer), the normalized grid, each array argument's shape, strides and
dtype, and the scalar arguments' values. `launch` writes the new addresses (and
scalars) into the packer and calls cuLaunchKernel: no signature, no table lookup.
The caller promises that the new arrays look like the ones the plan was made with
(same shape, strides, dtype, device, and an address with at least the same
16-byte alignment): the kernel was specialized for them. The public entry is
`tilec.Kernel.prepare(grid, *args, **options)`.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from ..grid import normalize_grid
from ..options import OPTION_FIELDS
from . import driver
from . import launcher
from .launcher import KernelState, PreparedLaunch, _cu_launch, _signature
from .packing import build_address_writer, build_packer
from .stream import stream_handle

__all__ = ["LaunchPlan", "launch_plan"]


class LaunchPlan:
    """One prepared launch (see the module doc). `arrays` / `scalars`: the names of the
    kernel's array and scalar (non-constexpr) parameters, the orders `launch` takes them in."""

    __slots__ = ("prepared", "grid", "device", "arrays", "scalars", "array_positions", "scalar_positions", "_rest",
                 "_vals", "_infos", "_buffers", "_write", "_scalar_values", "_described")

    def __init__(self, prepared: PreparedLaunch, grid: Tuple[int, int, int], vals: Sequence, infos: Sequence,
                 params: Sequence[str], constexpr: Sequence[bool]):
        self.prepared, self.grid, self.device = prepared, tuple(grid), prepared.device
        # positions in the kernel's parameter list of the array and the scalar arguments
        self.array_positions = tuple(i for i, info in enumerate(infos) if info is not None)
        self.scalar_positions = tuple(i for i, info in enumerate(infos) if info is None and not constexpr[i])
        self.arrays = tuple(params[i] for i in self.array_positions)
        self.scalars = tuple(params[i] for i in self.scalar_positions)
        self._rest = tuple(tuple(infos[i][1:]) for i in self.array_positions)   # (shape, strides, dtype, device)
        # the scalars only: the packers read arrays from `infos`, and holding the first call's
        # arrays would keep them allocated for as long as the plan lives
        self._vals = [v if info is None else None for v, info in zip(vals, infos)]
        self._infos = list(infos)
        self._scalar_values = tuple(self._vals[i] for i in self.scalar_positions)
        # what a fault report names (shapes, strides, dtypes: the addresses are not shown)
        self._described = (prepared,) + self.grid + (tuple(self._infos),)
        self._buffers, self._write = _replay_buffers(self)

    @property
    def name(self) -> str:
        return self.prepared.name

    def shapes(self):
        """Per array parameter (in `arrays` order): (shape, strides in elements, DType) the plan was made for."""
        return tuple((r[0], r[1], r[2]) for r in self._rest)

    def scalar_values(self) -> tuple:
        """The scalar arguments the plan was made with, in `scalars` order."""
        return self._scalar_values

    def launch(self, pointers: Sequence[int], scalars: Optional[Sequence] = None, stream=0) -> None:
        """Launch on the plan's grid with the array arguments at `pointers` (device addresses,
        `arrays` order) and, if given, the scalar arguments `scalars` (`scalars` order)."""
        if type(stream) is not int:
            stream = stream_handle(stream)
        if driver._tls.ctx_device != self.device:  # noqa: SLF001 - the runtime's own state
            driver.ensure_context(self.device)
        buffers = self._buffers
        if buffers is None or launcher._profile is not None:  # noqa: SLF001 - tc.profile wraps the general path
            self._launch_packed(pointers, scalars, stream)
            return
        # the replay: a parameter buffer of this plan's, filled once, gets the new addresses (and
        # scalars); one taken from the pool (atomic under the GIL), so two threads never share one
        try:
            entry = buffers.pop()
        except IndexError:
            entry = _new_buffer(self)
        buf, addr = entry[0], entry[1]
        try:
            try:
                self._write(buf, pointers, self._scalar_values if scalars is None else scalars)
            except IndexError:
                raise self._count_error(pointers, scalars) from None
            p = self.prepared
            s = launcher._streams.get(stream)  # noqa: SLF001
            if s is None:
                s = launcher._streams[stream] = driver.cu().CUstream(stream)  # noqa: SLF001
            g = self.grid
            if p.dependent is None:
                res = launcher._cuLaunchKernel(p.function, g[0], g[1], g[2], p.threads, 1, 1, p.shared, s, addr, 0)[0]  # noqa: SLF001
            else:   # cuLaunchKernelEx, with programmatic stream serialization
                res = p.dependent.launch(g[0], g[1], g[2], s, addr)
        finally:
            buffers.append(entry)
        if res is not launcher._SUCCESS:  # noqa: SLF001
            launcher._launch_failed(p, res, g[0], g[1], g[2], self._described[4])  # noqa: SLF001
        driver.last_launch = self._described

    def _count_error(self, pointers, scalars) -> TypeError:
        if len(pointers) != len(self.arrays):
            return TypeError(f"plan of kernel '{self.name}': launch takes {len(self.arrays)} address(es) "
                             f"({', '.join(self.arrays)}), got {len(pointers)}")
        return TypeError(f"plan of kernel '{self.name}': launch takes {len(self.scalars)} scalar(s) "
                         f"({', '.join(self.scalars)}), got {len(scalars)}")

    def _launch_packed(self, pointers, scalars, stream) -> None:
        """The general path: the prepared launch's own packer (all slots), its checks and tc.profile."""
        infos = self._infos[:]
        for i, p, rest in zip(self.array_positions, pointers, self._rest):
            infos[i] = (p,) + rest
        vals = self._vals
        if scalars is not None:
            vals = vals[:]
            for i, v in zip(self.scalar_positions, scalars):
                vals[i] = v
        g = self.grid
        if g[0] and g[1] and g[2]:
            _cu_launch(self.prepared, g[0], g[1], g[2], stream, vals, infos)


def _replay_buffers(plan: LaunchPlan):
    """(pool of (parameter buffer, kernelParams address), writer of the address and scalar
    slots) of `plan`, or (None, None): the plan then packs every slot at each launch. Not
    replayed from a buffer: an empty grid, a cluster grid it does not divide (the general
    path says why), a persistent kernel (its launched grid), or a prepared launch without a
    compiled kernel (a test's stand-in)."""
    p = plan.prepared
    g = plan.grid
    if not (g[0] and g[1] and g[2]) or getattr(p, "compiled", None) is None:
        return None, None
    if p.persistent or (p.cluster != 1 and g[0] % p.cluster):
        return None, None
    try:
        write = build_address_writer(p.compiled, p.param_names, plan.array_positions, plan.scalar_positions,
                                     plan._rest)  # noqa: SLF001
        buffers = [_new_buffer(plan)]
    except (KeyError, TypeError, ValueError, OverflowError):
        # a slot it cannot place, or values the packer refuses: the general path (which says why at launch)
        return None, None
    if launcher._cuLaunchKernel is None:  # noqa: SLF001 - the launcher binds the driver's entry points
        launcher._bind_driver()  # noqa: SLF001
    return buffers, write


def _new_buffer(plan: LaunchPlan):
    """(buffer, kernelParams address, its packer: what keeps both alive) holding every slot of the
    plan's launch, with the plan's own addresses and scalars."""
    pack, addr = build_packer(plan.prepared.compiled, plan.prepared.param_names)
    pack(plan._vals, plan._infos)  # noqa: SLF001
    return pack.buffer, addr, pack


def launch_plan(state: KernelState, grid, args: tuple, kwargs: Optional[dict] = None) -> LaunchPlan:
    """The LaunchPlan of `state`'s kernel launched on `grid` with `args`/`kwargs` (constexprs and
    compile options among them), compiling and loading the kernel if no launch prepared it yet.
    Nothing is launched."""
    kwargs = dict(kwargs or {})
    opt_items = tuple((k, kwargs.pop(k)) for k in OPTION_FIELDS if k in kwargs)
    if kwargs.pop("stream", None) is not None:
        raise TypeError("launch_plan: a plan takes its stream at each launch (plan.launch(..., stream=))")
    vals = state.bind(args, kwargs)
    parts, infos, device = _signature(state, vals)
    device = driver.current_device() if device is None else device
    key = tuple([opt_items] + parts)
    prepared = state.table.get(key)
    if prepared is None:
        prepared = launcher._prepare(state, key, vals, opt_items, device)  # noqa: SLF001 - its own package
    g = normalize_grid(grid, dict(zip(state.params, vals)) if callable(grid) else None, state.name)
    return LaunchPlan(prepared, g, vals, infos, state.params, state.ce_mask)
