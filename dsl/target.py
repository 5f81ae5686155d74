"""The target: one GPU architecture's features and one device's facts, resolved once.

`Target.from_arch("sm_90a")` gives the arch's features and the nominal facts of one
representative part (sm_90a: an H100 SXM); `Target.current()` asks the current device
(through the `DeviceSource` the runtime registers on import) and falls back to sm_90a's
without one.
Both are cached. The compiler reads features (`has_wgmma`, ...) to decide which passes
run, and facts (`shared_per_block`, ...) as the limits those passes plan against; the
stdlib reads `sm_count`, `l2_bytes` and the per-SM limits to size its launches.

This module imports nothing of tilec's, so that options, the compiler, the runtime and
the stdlib can all import it.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Tuple, Union

__all__ = ["Target", "SUPPORTED_ARCHS", "DEFAULT_ARCH", "parse_arch"]

# Compute capabilities LLVM 22's NVPTX backend and ptxas 13 both accept, with the PTX
# ISA version each needs at least (LLVM exits the process below it: see NVPTX-NOTES).
SUPPORTED_ARCHS = {
    "sm_80": 70, "sm_86": 71, "sm_87": 74, "sm_89": 78,
    "sm_90": 78, "sm_90a": 80,
    "sm_100": 86, "sm_100a": 86, "sm_120": 87, "sm_120a": 87,
}
DEFAULT_ARCH = "sm_90a"   # what a compile targets with no GPU to ask

_KB, _MB = 1024, 1024 * 1024
# Nominal facts per compute capability (the CUDA programming guide's per-SM limits, and the
# SM count and L2 of one representative part): (part, SMs, shared per block (opt-in),
# shared per SM, threads per SM, CTAs per SM, L2 bytes, resident clusters of 8). A device's
# own values replace all but the last in Target.current().
_FACTS = {
    (8, 0): ("A100 SXM", 108, 163 * _KB, 164 * _KB, 2048, 32, 40 * _MB, 0),
    (8, 6): ("A10", 72, 99 * _KB, 100 * _KB, 1536, 16, 6 * _MB, 0),
    (8, 7): ("Jetson AGX Orin", 16, 163 * _KB, 164 * _KB, 2048, 16, 4 * _MB, 0),
    (8, 9): ("L40S", 142, 99 * _KB, 100 * _KB, 1536, 24, 96 * _MB, 0),
    # 15 clusters of 8, not 132 / 8 = 16: clusters do not span GPCs (measured on an H200)
    (9, 0): ("H100 SXM", 132, 227 * _KB, 228 * _KB, 2048, 32, 50 * _MB, 15),
    (10, 0): ("B200", 148, 227 * _KB, 228 * _KB, 2048, 32, 126 * _MB, 148 // 8),   # SMs / 8: not measured
    (12, 0): ("RTX 5090", 170, 99 * _KB, 100 * _KB, 1536, 32, 96 * _MB, 170 // 8),  # SMs / 8: not measured
}


def parse_arch(arch) -> str:
    """Normalize `arch` ("sm_90a", "90a", 90, (9, 0)) or raise ValueError naming what is allowed."""
    if isinstance(arch, tuple) and len(arch) == 2:
        arch = f"sm_{arch[0]}{arch[1]}"
    elif isinstance(arch, int) and not isinstance(arch, bool):
        arch = f"sm_{arch}"
    if not isinstance(arch, str) or not re.fullmatch(r"(sm_)?\d+a?", arch):
        raise ValueError(f"arch must look like 'sm_90a', got {arch!r}")
    if not arch.startswith("sm_"):
        arch = "sm_" + arch
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported arch {arch!r}; tilec targets {', '.join(SUPPORTED_ARCHS)}")
    return arch


@dataclass(frozen=True)
class Target:
    arch: str                        # what LLVM and ptxas are given: "sm_90a"
    capability: Tuple[int, int]      # (9, 0)
    ptx_min: int                     # oldest PTX ISA (times 10) LLVM emits for the arch
    # features (what the arch's instructions allow tilec to emit)
    has_cp_async: bool               # cp.async (sm_80+)
    has_wgmma: bool                  # wgmma.mma_async: the arch-specific sm_90a set only
    has_tma: bool                    # bulk tensor copies and mbarrier transactions (sm_90+)
    has_clusters: bool               # thread-block clusters, distributed shared memory (sm_90+)
    has_setmaxnreg: bool             # setmaxnreg: sm_90a and sm_100a
    has_dependent_launch: bool       # griddepcontrol, programmatic dependent launch (sm_90+)
    has_f8_convert: bool             # cvt between f8 pairs and f16/f32 pairs, as tilec emits them (sm_90+)
    has_f8_mma: bool                 # tensor cores on f8 operands, as tilec emits them (wgmma only)
    # facts of the device (or the arch's nominal part)
    device: str                      # the device's name, or the nominal part's
    sm_count: int
    shared_per_block: int            # bytes one CTA may use (the opt-in maximum)
    shared_per_sm: int
    registers_per_sm: int            # 32-bit registers of an SM's register file
    registers_per_thread: int
    max_threads_per_sm: int
    max_programs_per_sm: int         # resident CTAs per SM
    l2_bytes: int
    clusters_of_8: int               # 8-program clusters (one program per SM) resident at once; 0: no clusters

    @property
    def number(self) -> int:
        """90 for sm_90a: the capability as the arch name writes it."""
        return self.capability[0] * 10 + self.capability[1]

    @staticmethod
    def of(target: Union["Target", str, int, tuple]) -> "Target":
        """`target` itself, or the Target of an arch written any way parse_arch accepts."""
        return target if isinstance(target, Target) else Target.from_arch(target)

    @staticmethod
    def from_arch(arch) -> "Target":
        """The Target of `arch` with its nominal part's facts (ValueError for an unknown arch)."""
        return _from_arch(parse_arch(arch))

    @staticmethod
    def default() -> "Target":
        """The target of a compile with no GPU to ask: sm_90a (an H100 SXM)."""
        return _from_arch(DEFAULT_ARCH)

    @staticmethod
    def current() -> "Target":
        """The current device's Target (its arch and the driver's facts), or `default()`
        when there is no driver or no device."""
        try:
            ordinal = _devices.current() if _devices is not None else None
            if ordinal is not None:
                return Target.for_device(ordinal)
        except Exception:  # no cuda-python, no libcuda, no device: compile for the default target
            pass
        return Target.default()

    @staticmethod
    def for_device(ordinal=None) -> "Target":
        """The Target of device `ordinal` (default: the current one): its arch's features,
        the driver's facts."""
        if _devices is None:
            raise RuntimeError("no device source is registered (tilec.runtime registers one on import)")
        if ordinal is None:
            ordinal = _devices.current()
            if ordinal is None:
                raise RuntimeError("no CUDA device is available")
        return _for_device(ordinal)


class DeviceSource:
    """What the runtime tells the Target about devices (registered by runtime/driver.py on
    import: the target sits below the runtime and never imports it). current() -> the
    current device's ordinal, or None with no driver or device; describe(ordinal) -> (arch,
    name, {Target field: the driver's value})."""

    def __init__(self, current, describe):
        self.current, self.describe = current, describe


_devices = None


def register_device_source(source: DeviceSource) -> None:
    global _devices
    _devices = source
    _for_device.cache_clear()


@functools.lru_cache(maxsize=None)
def _from_arch(arch: str) -> Target:
    digits = re.sub(r"\D", "", arch)
    major, minor = int(digits[:-1]), int(digits[-1])
    number = major * 10 + minor
    specific = arch.endswith("a")
    part, sms, smem_block, smem_sm, threads, ctas, l2, clusters = _FACTS[(major, minor)]
    wgmma = arch == "sm_90a"
    return Target(
        arch=arch, capability=(major, minor), ptx_min=SUPPORTED_ARCHS[arch],
        has_cp_async=number >= 80, has_wgmma=wgmma, has_tma=number >= 90, has_clusters=number >= 90,
        has_setmaxnreg=specific and number in (90, 100), has_dependent_launch=number >= 90,
        # sm_89 has the f8 cvts too, but only from PTX ISA 8.1 (ptxas rejects them at its 7.8):
        # every f8 kernel there would need a CUDA 12.1 driver; the integer forms are exact
        has_f8_convert=number >= 90, has_f8_mma=wgmma,
        device=part, sm_count=sms, shared_per_block=smem_block, shared_per_sm=smem_sm,
        registers_per_sm=65536, registers_per_thread=255, max_threads_per_sm=threads,
        max_programs_per_sm=ctas, l2_bytes=l2, clusters_of_8=clusters)


@functools.lru_cache(maxsize=None)
def _for_device(ordinal: int) -> Target:
    arch, name, facts = _devices.describe(ordinal)
    return replace(_from_arch(arch), device=name, **facts)
