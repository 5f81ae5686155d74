"""Compiler remarks: what the compiler chose for the user's code, and why not something better.

The passes record a remark where they decide (accelerate_dot: which instruction a
`tc.dot` became; pipeline_loads and prefetch_loads: whether a loop's loads are staged;
allocate_shared: layout conversions through shared memory), the driver adds ptxas's
spills and the occupancy they allow. Each names the user's file:line:

    softmax.py:12:9: remark[dot]: tc.dot lowered to mma.sync m16n8k16 ...

`compiled.remarks` lists them (Remark, below); `metadata["remarks"]` keeps them as plain
lists so that cached kernels carry them. TILEC_REMARKS=1 prints them to stderr at compile,
`tilec ptx --remarks` / `tilec ir --remarks` print them.

The collector travels on the CompileOptions the passes already get (`options.remarks`,
a fresh one per compile, not part of the cache key); a pass given none records nothing.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Iterable, List

__all__ = ["Remark", "Remarks", "KINDS", "print_remarks", "remarks_enabled", "from_metadata", "tile_registers",
           "check_tile_sizes", "LARGE_TILE_REGISTERS", "occupancy"]

# dot: the instruction a tc.dot became; loop: a loop's loads staged or not; layout: a layout
# conversion through shared memory; spill: ptxas spilled; occupancy: programs per SM.
KINDS = ("dot", "loop", "layout", "spill", "occupancy")


@dataclass(frozen=True)
class Remark:
    kind: str
    message: str
    file: str = "<unknown>"
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: remark[{self.kind}]: {self.message}"

    def as_list(self) -> list:
        return [self.kind, self.message, self.file, self.line, self.col]


class Remarks:
    """The remarks of one compile, in the order the passes recorded them."""

    def __init__(self) -> None:
        self.items: List[Remark] = []

    def add(self, kind: str, message: str, loc=None) -> None:
        if kind not in KINDS:
            raise ValueError(f"remark kind must be one of {', '.join(KINDS)}, got {kind!r}")
        file, line, col = (loc.file, loc.line, loc.col) if loc is not None else ("<unknown>", 0, 0)
        self.items.append(Remark(kind, message, file, line, col))

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def from_metadata(metadata) -> List[Remark]:
    """The Remarks a compiled kernel's metadata keeps (lists of kind, message, file, line, col)."""
    return [Remark(k, m, f, int(ln), int(c)) for k, m, f, ln, c in metadata.get("remarks", ())]


def remarks_enabled() -> bool:
    return os.environ.get("TILEC_REMARKS", "") not in ("", "0")


def print_remarks(remarks: Iterable[Remark], file=None) -> None:
    out = sys.stderr if file is None else file
    for r in remarks:
        print(r, file=out)


# ----------------------------------------------------------------------------- tile sizes
# A tile whose registers per thread (elements x bytes / 4 / threads: every element in some
# thread's registers) exceed this is refused before LLVM runs: LLVM and ptxas take minutes
# on such a kernel and it would spill almost everything. 2x the 255 a thread may hold, so
# that a kernel that merely spills (a tile up to twice what a thread holds) compiles with a SpillWarning.
LARGE_TILE_REGISTERS = 512


def tile_registers(tile_type, threads: int) -> float:
    """Registers per thread a tile of `tile_type` takes when spread over `threads` threads, at
    the least (16- and 8-bit elements counted packed, as tensor-core fragments hold them)."""
    dtype = getattr(tile_type, "dtype", None)
    size = dtype.itemsize if dtype is not None else 4
    return tile_type.numel * size / 4 / threads


def check_tile_sizes(module, threads: int, limit: int = LARGE_TILE_REGISTERS, kernel=None) -> None:
    """CompilationError at the first op of `module` (tile IR) whose result tile would take more
    than `limit` registers per thread over `threads` threads, naming its line and suggesting
    more warps or a smaller tile (the option allow_large_tiles=True skips this check)."""
    from .errors import CompilationError
    from .ir.types import TileType
    for op in module.walk():
        for r in op.results:
            t = r.type
            if not isinstance(t, TileType):
                continue
            regs = tile_registers(t, threads)
            if regs > limit:
                shape = "x".join(str(d) for d in t.shape)
                raise CompilationError(
                    f"a {shape} {t.dtype.name if t.dtype else ''} tile takes about {regs:.0f} registers per thread "
                    f"over {threads} threads, far above the {limit} tilec accepts (a thread holds at most 255); "
                    f"use more warps (num_warps) or a smaller tile, or pass allow_large_tiles=True to compile it "
                    f"anyway (LLVM and ptxas may take minutes)", loc=op.loc if op.loc.known else None,
                    kernel=kernel, stage="tile sizes")


# ----------------------------------------------------------------------------- occupancy
def occupancy(registers: int, threads: int, shared: int, target) -> tuple:
    """(programs per SM, what limits it) for a CTA of `threads` threads using `registers` per
    thread and `shared` bytes, on `target`'s SM: registers are allocated per warp in units of
    256, shared memory with 1 KB the system reserves per CTA."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    limits = {
        "registers": target.registers_per_sm // (per_warp * warps),
        "threads": target.max_threads_per_sm // threads,
        "programs": target.max_programs_per_sm,
    }
    if shared:
        limits["shared memory"] = target.shared_per_sm // (shared + 1024)
    n = min(limits.values())
    why = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
    return n, why
