"""Compile options: the reserved launch keywords, validated before any LLVM call."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional

__all__ = ["CompileOptions", "CLUSTER_SIZES", "GRID_LIMITS", "MAX_PROGRAMS_PER_SM", "MAX_THREADS_PER_SM",
           "OPTION_FIELDS", "REGISTERS_PER_SM", "RESERVED_KWARGS", "SUPPORTED_ARCHS", "check_cluster_arch", "check_cluster_size",
           "check_grid_limits", "check_min_programs",
           "parse_arch", "split_options"]

# Launch keywords that are options, not kernel arguments. A kernel parameter may not use them.
OPTION_FIELDS = ("num_warps", "num_stages", "arch", "fast_math", "debug", "tma", "warp_specialize", "persistent",
                 "cluster", "min_programs_per_sm", "dependent_launch")
RESERVED_KWARGS = OPTION_FIELDS + ("stream",)
CLUSTER_SIZES = tuple(range(1, 9))  # programs per thread-block cluster (8: the portable maximum)
MAX_THREADS_PER_SM = 2048          # resident threads of an sm_80/sm_90/sm_100 SM (sm_86/sm_89: 1536, where
                                   # ptxas ignores a larger min_programs_per_sm with a warning)
MAX_PROGRAMS_PER_SM = 32           # and resident CTAs
REGISTERS_PER_SM = 65536           # 32-bit registers of an SM's register file
GRID_LIMITS = (2 ** 31 - 1, 65535, 65535)  # programs a CUDA grid holds along axes 0, 1 and 2

# Compute capabilities LLVM 22's NVPTX backend and ptxas 13 both accept, with the PTX
# ISA version each needs at least (LLVM exits the process below it: see NVPTX-NOTES).
SUPPORTED_ARCHS = {
    "sm_80": 70, "sm_86": 71, "sm_87": 74, "sm_89": 78,
    "sm_90": 78, "sm_90a": 80,
    "sm_100": 86, "sm_100a": 86, "sm_120": 87, "sm_120a": 87,
}


def parse_arch(arch) -> str:
    """Normalize `arch` ("sm_90a", "90a", 90, (9, 0)) or raise ValueError naming what is allowed."""
    if isinstance(arch, tuple) and len(arch) == 2:
        arch = f"sm_{arch[0]}{arch[1]}"
    elif isinstance(arch, int):
        arch = f"sm_{arch}"
    if not isinstance(arch, str) or not re.fullmatch(r"(sm_)?\d+a?", arch):
        raise ValueError(f"arch must look like 'sm_90a', got {arch!r}")
    if not arch.startswith("sm_"):
        arch = "sm_" + arch
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported arch {arch!r}; tilec targets {', '.join(SUPPORTED_ARCHS)}")
    return arch


def arch_number(arch: str) -> int:
    """The number of a normalized arch: 90 for "sm_90a"."""
    return int("".join(c for c in arch[3:] if c.isdigit()))


@dataclass(frozen=True)
class CompileOptions:
    num_warps: int = 4
    num_stages: int = 3
    arch: Optional[str] = None      # None: the current device's, or sm_90a with none
    fast_math: bool = False
    debug: bool = False
    tma: bool = True                # sm_90a: tensor-view loads feeding wgmma may use TMA (False: cp.async)
    warp_specialize: bool = False   # sm_90a: a producer warpgroup issues the TMA ring, the num_warps consume it
    persistent: bool = False        # one program per SM slot, looping over the grid's program ids
    cluster: int = 1                # sm_90+: programs per thread-block cluster, along grid axis 0
    min_programs_per_sm: int = 0    # ptxas keeps registers low enough for this many programs per SM (0: its choice)
    dependent_launch: bool = False  # sm_90+: launched as soon as the kernel before it in the stream lets it
                                    # (programmatic dependent launch); it waits for that kernel's results
                                    # at tc.grid_dependency_wait(), at its start when it calls none

    def validated(self) -> "CompileOptions":
        if not isinstance(self.num_warps, int) or self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"num_warps must be a power of two from 1 to 32, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 8:
            raise ValueError(f"num_stages must be an int from 1 to 8, got {self.num_stages!r}")
        arch = parse_arch(self.arch) if self.arch is not None else None
        check_cluster_size(self.cluster)
        check_cluster_arch(self.cluster, arch)
        check_min_programs(self.min_programs_per_sm, self.num_warps)
        return replace(self, arch=arch, fast_math=bool(self.fast_math), debug=bool(self.debug), tma=bool(self.tma),
                       warp_specialize=bool(self.warp_specialize), persistent=bool(self.persistent),
                       dependent_launch=bool(self.dependent_launch))

    def with_arch(self, default_arch: str) -> "CompileOptions":
        if self.arch is not None:
            return self
        arch = parse_arch(default_arch)
        check_cluster_arch(self.cluster, arch)
        return replace(self, arch=arch)


def check_cluster_size(cluster) -> int:
    """`cluster` as an int, or a ValueError unless it is one of CLUSTER_SIZES."""
    if isinstance(cluster, bool) or not hasattr(cluster, "__index__") or cluster not in CLUSTER_SIZES:
        raise ValueError(f"cluster must be 1 to 8 programs, got {cluster!r}")
    return int(cluster)


def check_grid_limits(grid3, kernel: str) -> None:
    """ValueError naming the first axis of `grid3` (3 ints) that holds more programs than
    CUDA allows (GRID_LIMITS), else nothing."""
    for axis, (n, most) in enumerate(zip(grid3, GRID_LIMITS)):
        if n > most:
            fix = ("spread the programs over axes 1 and 2 (up to 65535 each)" if axis == 0 else
                   "put the largest extent on axis 0 (up to 2**31 - 1)")
            raise ValueError(f"kernel '{kernel}': grid axis {axis} holds at most {most} programs, got {n}; {fix}")


def check_min_programs(n, num_warps: int) -> None:
    """`min_programs_per_sm` is 0 (no floor) or as many programs of num_warps warps as an SM holds."""
    most = min(MAX_THREADS_PER_SM // (32 * num_warps), MAX_PROGRAMS_PER_SM)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= most:
        raise ValueError(f"min_programs_per_sm must be an int from 0 (no floor) to {most} (an SM holds "
                         f"{MAX_THREADS_PER_SM} threads and {MAX_PROGRAMS_PER_SM} programs: {most} of "
                         f"{num_warps} warps), got {n!r}")


def check_cluster_arch(cluster: int, arch: Optional[str]) -> None:
    """Thread-block clusters exist from sm_90 on."""
    if cluster > 1 and arch is not None and int(re.match(r"sm_(\d+)", arch).group(1)) < 90:
        raise ValueError(f"cluster={cluster} needs sm_90 or newer (thread-block clusters), got {arch}")


def split_options(kwargs: dict):
    """Split launch keywords into (CompileOptions fields, stream, the rest)."""
    opts = {k: kwargs.pop(k) for k in OPTION_FIELDS if k in kwargs}
    stream = kwargs.pop("stream", None)
    return opts, stream, kwargs
