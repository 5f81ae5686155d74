"""The kernel calling convention shared by codegen (lowering/) and the launcher (runtime/).

The entry block arguments of a `tile.func` are the kernel's run-time parameters
(constexprs and integers specialized to 1 are folded away by the frontend).
Each becomes one or more PTX parameters, in order:

- a scalar of type T: one T;
- a tensor view `x` of rank r: the base pointer, then its r shape extents, then
  the strides whose value is not known at compile time (ViewType.strides[d] is
  None), all in the view's index type (i32 or i64).

After every argument's slots come the tensor maps (sm_90a TMA), one per (view argument,
box) that the compiled kernel copies with TMA (`tmaps`, from lowering/gpu/tma_ops.tma_params):
a 128-byte CUtensorMap the runtime encodes (`.param .align 64 .b8 [128]`, grid constant).

A kernel compiled with `persistent=True` takes, last, the extents (x, y, z) of the grid
the launch asked for, as three i32 "grid" slots: it runs on fewer programs than that
grid and loops over the requested program ids (lowering/passes/persistent.py). Their
`arg` is the index of the entry-block argument that make_persistent appends for them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from . import dtypes as dt
from .dtypes import DType
from .ir.types import ScalarType, ViewType

__all__ = ["ParamSlot", "param_slots", "GRID_AXES"]

GRID_AXES = "xyz"


@dataclass(frozen=True)
class ParamSlot:
    arg: int                 # index of the kernel argument this slot comes from
    kind: str                # "ptr" | "scalar" | "shape" | "stride" | "tmap" | "grid"
    dtype: Optional[DType]   # element type for ptr and tmap, value type otherwise
    dim: int = -1            # for shape/stride slots; the axis of a grid slot
    box: Tuple[int, ...] = ()  # for tmap slots: the TMA box (rows, columns)

    @property
    def name(self) -> str:
        if self.kind == "tmap":
            return f"a{self.arg}_tmap{'x'.join(map(str, self.box))}"
        if self.kind == "grid":
            return f"grid_{GRID_AXES[self.dim]}"
        return {"ptr": f"a{self.arg}_ptr", "scalar": f"a{self.arg}",
                "shape": f"a{self.arg}_shape{self.dim}", "stride": f"a{self.arg}_stride{self.dim}"}[self.kind]


def param_slots(arg_types, tmaps: Sequence[Tuple[int, Tuple[int, ...]]] = (), grid: bool = False) -> List[ParamSlot]:
    """The flat PTX parameter list for the kernel arguments' IR types (and tensor maps, and
    with `grid` the requested grid's extents of a persistent kernel)."""
    out: List[ParamSlot] = []
    for i, t in enumerate(arg_types):
        if isinstance(t, ViewType):
            out.append(ParamSlot(i, "ptr", t.dtype))
            out.extend(ParamSlot(i, "shape", t.index, d) for d in range(t.rank))
            out.extend(ParamSlot(i, "stride", t.index, d) for d in range(t.rank) if t.strides[d] is None)
        elif isinstance(t, ScalarType):
            out.append(ParamSlot(i, "scalar", t.dtype))
        else:
            raise TypeError(f"kernel argument {i} has type {t}, which cannot be passed to a kernel")
    for arg, box in tmaps:
        t = arg_types[arg]
        if not isinstance(t, ViewType) or t.rank != len(box):
            raise TypeError(f"a tensor map needs a view argument of rank {len(box)}, argument {arg} is {t}")
        out.append(ParamSlot(arg, "tmap", t.dtype, box=tuple(box)))
    if grid:
        out.extend(ParamSlot(len(arg_types) + axis, "grid", dt.int32, axis) for axis in range(3))
    return out
