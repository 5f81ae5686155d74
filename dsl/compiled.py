"""What the compiler hands the runtime: text of every stage plus launch metadata.

A plain record below both: the runtime loads and launches it (its registers, shared
memory and occupancy on a device: `tilec.runtime.module.resources(compiled)`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from .abi import ParamSlot

__all__ = ["CompiledKernel"]


@dataclass
class CompiledKernel:
    name: str                        # the PTX entry's symbol
    asm: Dict[str, Any]              # "tile", "gpu", "llvm", "ptx" text; "cubin" bytes when ptxas ran
    metadata: Dict[str, Any]         # num_warps, num_threads, num_stages, shared (bytes), arch, ...
    params: List[ParamSlot] = field(default_factory=list)
    arg_names: List[str] = field(default_factory=list)   # the run-time kernel arguments, in order

    @property
    def num_warps(self) -> int:
        return self.metadata["num_warps"]

    @property
    def num_threads(self) -> int:
        """Threads per CTA: 32 * num_warps, plus a warp-specialized kernel's producer warps
        (hand-written kernels' metadata may give num_warps only)."""
        return int(self.metadata.get("num_threads", 32 * self.metadata.get("num_warps", 4)))

    @property
    def remarks(self):
        """What the compiler chose and why (tilec.remarks.Remark: kind, message, file, line, col),
        in the order the passes recorded them."""
        from .remarks import from_metadata
        return from_metadata(self.metadata)

    @property
    def shared(self) -> int:
        return self.metadata.get("shared", 0)

    def report(self, *args, grid, target=None, **kwargs):
        """What one launch on `grid` with run-time arguments `args` (in `arg_names` order, or
        by name) moves and computes, counted by the compiler, with the resources and the
        roofline bound on `target` (default: this arch's nominal part): a tilec.roofline.Report."""
        from .roofline import report
        return report(self, *args, grid=grid, target=target, **kwargs)
