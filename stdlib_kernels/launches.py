"""What an op's plan returns, and how an entry point carries it out.

An entry point is: validate its arguments -> `plan` -> `execute`. The plan is a pure
function of array descriptions (`Arr`: shape, strides in elements, dtype, where; `spec`
makes one without an array) and a Target, returning the launches as data:

    Launch(kernel, grid, args=("x", "out"), num_warps=8, cluster=4,
           constexprs=(("LOG", False), ("C", 4), ...), options=(...,), schedule="cluster")

`args` name the kernel's arguments in the order it takes them: a str is an operand the
entry point supplies (its view of x's rows, out's rows, a launch scalar like eps) or a
`Temp` the plan declares (scratch allocated before the launch that first names it);
anything else is a literal scalar. `schedule` names the strategy the launch belongs to
(schedules.py), which is what tests assert.

A few choices depend on the compiled kernel, not just on shapes (how many clusters of a
persistent kernel the device holds at once, whether a form spills): the plan asks a
`probe`. `StaticProbe(target)` answers from the Target alone (the interpreter's answers,
and what plan tests use); `DeviceProbe` compiles the launch as it will run and asks the
driver (runtime.module's LoadedKernel).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from tilec.dtypes import DType
from tilec.options import initcheck_default
from tilec.target import Target

from ._common import Arr, contiguous_strides, empty_like, launch, view

__all__ = ["Launch", "Temp", "spec", "StaticProbe", "DeviceProbe", "Operands", "execute"]


@dataclass(frozen=True)
class Temp:
    """Scratch of `shape` and `dtype` allocated where operand `like` lives (contiguous), which the
    launches see whole, or as `view` = (shape, strides in elements) of it (rows padded apart)."""
    name: str
    shape: Tuple[int, ...]
    dtype: DType
    like: str = "x"
    view: Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]] = None


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan (see the module doc)."""
    kernel: Any
    grid: Tuple[int, ...]
    args: Tuple[Any, ...]
    num_warps: int = 4
    cluster: int = 1
    constexprs: Tuple[Tuple[str, Any], ...] = ()
    options: Tuple[Tuple[str, Any], ...] = ()
    temps: Tuple[Temp, ...] = ()
    schedule: str = ""
    fast_math: bool = True   # (`_common.launch`); False where results must match exact math (GEMMs)

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def consts(self) -> Dict[str, Any]:
        return dict(self.constexprs)

    @staticmethod
    def of(kernel, grid, args, num_warps=4, cluster=1, options=None, temps=(), schedule="", fast_math=True,
           **constexprs) -> "Launch":
        return Launch(kernel, tuple(grid), tuple(args), num_warps, cluster, tuple(constexprs.items()),
                      tuple((options or {}).items()), tuple(temps), schedule, fast_math)


def spec(shape: Sequence[int], dtype: DType, strides: Optional[Sequence[int]] = None, device: int = 0) -> Arr:
    """The description of a GPU array (no array): contiguous unless `strides` (in elements) are given."""
    shape = tuple(shape)
    return Arr(None, "spec", shape, tuple(strides) if strides is not None else contiguous_strides(shape), dtype,
               device)


class StaticProbe:
    """A probe that answers from the Target: resident clusters of 8 programs as `clusters_of_8`,
    no compiled resources (None: the plan takes its host choice)."""

    def __init__(self, target: Target):
        self.target = target

    def resident_clusters(self, launch: Launch) -> Optional[int]:
        return self.target.clusters_of_8

    def resources(self, launch: Launch):
        return None


class Operands:
    """The operands an entry point supplies to `execute` (views, scalars) and the Temps
    allocated for its plan, each once: a probe and the launches share them."""

    def __init__(self, arrays: Dict[str, Arr], values: Dict[str, Any]):
        self.arrays, self.values = arrays, dict(values)

    def get(self, a):
        if isinstance(a, Temp):
            v = self.values.get(a.name)
            if v is None:
                # a padded view's gaps are read (masked) by 16-byte groups but never written:
                # zeroed in sanitizer mode so that initcheck reports only real reads
                t = empty_like(self.arrays[a.like], a.shape, a.dtype, zero=a.view is not None and initcheck_default())
                shape, strides = a.view or (a.shape, contiguous_strides(a.shape))
                v = self.values[a.name] = view(t, shape, strides)
            return v
        return self.values[a] if isinstance(a, str) else a

    def args(self, launch: Launch) -> list:
        temps = {t.name: t for t in launch.temps}
        return [self.get(temps.get(a, a)) if isinstance(a, str) else a for a in launch.args]


class DeviceProbe:
    """A probe that compiles the launch as `execute` will run it (`operands` give its arguments)
    and asks the driver about it, on the device of `operands.arrays["x"]`."""

    def __init__(self, operands: Operands, device: int):
        self.operands, self.device = operands, device

    def loaded(self, launch: Launch):
        from tilec.runtime.module import load  # noqa: PLC0415
        opts = dict(launch.options)
        if launch.cluster > 1:
            opts["cluster"] = launch.cluster
        compiled = launch.kernel.compile(*self.operands.args(launch), num_warps=launch.num_warps,
                                         fast_math=launch.fast_math,
                                         **opts, **dict(launch.constexprs))
        return load(compiled, self.device)

    def resident_clusters(self, launch: Launch) -> Optional[int]:
        """How many clusters of `launch` the device runs at once (None: the driver cannot tell).
        Not SMs / C: 8-program clusters at one program per SM fit 15 times on a 132-SM H200, and
        a 16th would run in a second wave behind the others."""
        return self.loaded(launch).max_active_clusters or None

    def resources(self, launch: Launch):
        return self.loaded(launch).resources


def probe_for(operands: Operands, x: Arr, target: Target):
    """The probe of an entry point's plan: the device's for GPU arrays, the Target's on the host."""
    return StaticProbe(target) if x.host else DeviceProbe(operands, x.device)


def execute(launches: Sequence[Launch], operands: Operands) -> None:
    """Run a plan's launches in order (`_common.launch`: the interpreter for host arrays)."""
    for ln in launches:
        launch(ln.kernel, ln.grid, operands.args(ln), ln.num_warps, fast_math=ln.fast_math, cluster=ln.cluster,
               options=dict(ln.options) or None, **dict(ln.constexprs))
