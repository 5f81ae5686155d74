"""Compile options: the reserved launch keywords, validated before any LLVM call."""
from __future__ import annotations

import difflib
import os
import warnings
from dataclasses import dataclass, field, replace
from typing import Optional

from .target import SUPPORTED_ARCHS, Target, parse_arch

__all__ = ["unknown_keyword", "CompileOptions", "CLUSTER_SIZES", "GRID_LIMITS", "OPTION_FIELDS", "RESERVED_KWARGS", "SUPPORTED_ARCHS",
           "check_cluster_arch", "check_cluster_size", "check_grid_limits", "check_min_programs", "lineinfo_default", "parse_arch",
           "split_options"]

# Launch keywords that are options, not kernel arguments. A kernel parameter may not use them.
OPTION_FIELDS = ("num_warps", "num_stages", "arch", "fast_math", "debug", "tma", "warp_specialize", "pingpong", "persistent",
                 "cluster", "min_programs_per_sm", "dependent_launch", "initcheck", "allow_large_tiles", "lineinfo")
RESERVED_KWARGS = OPTION_FIELDS + ("stream",)
CLUSTER_SIZES = tuple(range(1, 9))  # programs per thread-block cluster (8: the portable maximum)
GRID_LIMITS = (2 ** 31 - 1, 65535, 65535)  # programs a CUDA grid holds along axes 0, 1 and 2


@dataclass(frozen=True)
class CompileOptions:
    num_warps: int = 4
    num_stages: int = 3
    arch: Optional[str] = None      # None: the current device's, or sm_90a with none (validated() decides)
    fast_math: bool = False
    debug: bool = False
    tma: bool = True                # sm_90a: tensor-view loads feeding wgmma may use TMA (False: cp.async)
    warp_specialize: bool = False   # sm_90a: a producer warpgroup issues the TMA ring, the num_warps consume it
    # with warp_specialize and 8 warps: the two consumer warpgroups of a chain of dots take
    # turns at the tensor cores (pingpong pass; measured slower so far, docs/compiler.md)
    pingpong: bool = False
    persistent: bool = False        # one program per SM slot, looping over the grid's program ids
    cluster: int = 1                # sm_90+: programs per thread-block cluster, along grid axis 0
    min_programs_per_sm: int = 0    # ptxas keeps registers low enough for this many programs per SM (0: its choice)
    dependent_launch: bool = False  # sm_90+: launched as soon as the kernel before it in the stream lets it
                                    # (programmatic dependent launch); it waits for that kernel's results
                                    # at tc.grid_dependency_wait(), at its start when it calls none
    # masked vector loads read no byte past the end of the view they read from (compute-sanitizer
    # --tool initcheck reports none); costs registers (docs/language.md). Default: TILEC_INITCHECK=1
    initcheck: bool = field(default_factory=lambda: initcheck_default())
    # compile a tile taking far more registers per thread than a thread has (tilec.remarks:
    # refused by default, before LLVM spends minutes on it)
    allow_large_tiles: bool = False
    # .file/.loc line information in the PTX (and cubin), mapping instructions to the Python
    # lines: for compute-sanitizer, Nsight Compute, `tilec sass`; the instructions are the same
    # either way. Default: on, TILEC_LINEINFO=0 turns it off
    lineinfo: bool = field(default_factory=lambda: lineinfo_default())
    target: Optional[Target] = None  # set by validated(): the arch's features and the device's facts
    # the compile's remark collector (tilec.remarks.Remarks), set by the compiler for one compile:
    # not an option, and not part of the cache key or of equality
    remarks: Optional[object] = field(default=None, compare=False, repr=False)
    # set by the compiler, not an option: a loop's wgmma may stay in flight into the next
    # iteration beside other wgmmas (pipeline_loads' lag); off for the second build of a kernel
    # whose first one spilled (compile_module)
    carry_wgmma: bool = field(default=True, compare=False, repr=False)

    def validated(self, default: Optional[Target] = None) -> "CompileOptions":
        """These options checked, with `arch` and `target` resolved once: the given arch's
        Target, else `default`, else the current device's (Target.current())."""
        if not isinstance(self.num_warps, int) or self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"num_warps must be a power of two from 1 to 32, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 8:
            raise ValueError(f"num_stages must be an int from 1 to 8, got {self.num_stages!r}")
        target = self._target(default)
        check_cluster_size(self.cluster)
        check_cluster_arch(self.cluster, target)
        check_min_programs(self.min_programs_per_sm, self.num_warps, target)
        return replace(self, arch=target.arch, target=target, fast_math=bool(self.fast_math), debug=bool(self.debug),
                       tma=bool(self.tma), warp_specialize=bool(self.warp_specialize), pingpong=bool(self.pingpong), persistent=bool(self.persistent),
                       dependent_launch=bool(self.dependent_launch), allow_large_tiles=bool(self.allow_large_tiles),
                       lineinfo=bool(self.lineinfo))

    def _target(self, default: Optional[Target]) -> Target:
        if self.target is not None:
            if self.arch is not None and parse_arch(self.arch) != self.target.arch:
                raise ValueError(f"arch={self.arch!r} contradicts the target's {self.target.arch}")
            return self.target
        if self.arch is not None:
            return Target.from_arch(self.arch)
        return default if default is not None else Target.current()


def initcheck_default() -> bool:
    """Sanitizer mode (TILEC_INITCHECK set and not 0): loads stop at their view's end, GEMM
    epilogues store without TMA, and the standard library zeroes the padding of its scratch
    buffers (launches.Operands). Under compute-sanitizer with TILEC_INITCHECK unset, a warning
    (once) says how to run its initcheck tool cleanly: the tool is not visible from here."""
    value = os.environ.get("TILEC_INITCHECK")
    if value is None and SANITIZER_ENV in os.environ:
        _warn_sanitizer_once()
    return (value or "") not in ("", "0")


SANITIZER_ENV = "NV_SANITIZER_INJECTION_PORT_BASE"   # set by compute-sanitizer in the processes it runs
_warned = []


def _warn_sanitizer_once() -> None:
    if not _warned:
        _warned.append(True)
        warnings.warn("tilec runs under compute-sanitizer with TILEC_INITCHECK unset: for --tool initcheck set "
                      "TILEC_INITCHECK=1 (masked tails and TMA stores otherwise read as uninitialized; "
                      "docs/runtime.md), for the other tools set TILEC_INITCHECK=0 to silence this", RuntimeWarning,
                      stacklevel=3)


def lineinfo_default() -> bool:
    """Line information is on unless TILEC_LINEINFO is 0 (or false, off, no)."""
    return os.environ.get("TILEC_LINEINFO", "1").strip().lower() not in ("0", "false", "off", "no")


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


def check_min_programs(n, num_warps: int, target: Target) -> None:
    """`min_programs_per_sm` is 0 (no floor) or as many programs of num_warps warps as an SM of
    `target` holds."""
    most = min(target.max_threads_per_sm // (32 * num_warps), target.max_programs_per_sm)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= most:
        raise ValueError(f"min_programs_per_sm must be an int from 0 (no floor) to {most} (an SM of "
                         f"{target.arch} holds {target.max_threads_per_sm} threads and {target.max_programs_per_sm} "
                         f"programs: {most} of {num_warps} warps), got {n!r}")


def check_cluster_arch(cluster: int, target: Target) -> None:
    """Thread-block clusters exist from sm_90 on."""
    if cluster > 1 and not target.has_clusters:
        raise ValueError(f"cluster={cluster} needs sm_90 or newer (thread-block clusters), got {target.arch}")


def split_options(kwargs: dict):
    """Split launch keywords into (CompileOptions fields, stream, the rest)."""
    opts = {k: kwargs.pop(k) for k in OPTION_FIELDS if k in kwargs}
    stream = kwargs.pop("stream", None)
    return opts, stream, kwargs


def unknown_keyword(kernel_name: str, name: str, params) -> TypeError:
    """The TypeError for a keyword that is neither a parameter of the kernel nor a launch
    option, suggesting the closest of either (`num_warp` -> `num_warps`)."""
    close = difflib.get_close_matches(name, list(params) + list(RESERVED_KWARGS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return TypeError(f"kernel '{kernel_name}' has no parameter or launch option {name!r}{hint} "
                     f"(parameters: {', '.join(params)}; options: {', '.join(RESERVED_KWARGS)})")
