"""A kernel's report: compiler-counted work for concrete arguments, its resources, and the
roofline bound on a device.

`report(compiled, *args, grid=...)` (what `CompiledKernel.report` calls) evaluates the
kernel's counted work (tilec.workcount) for the arguments' shapes and scalars over the
grid; `Bound.of(...)` is the roofline: the least time the device's bandwidth and peak
throughput allow for those bytes and FLOPs. tc.profile (the runtime) divides that by the
measured time of each launch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .limits import DeviceLimits, limits_for
from .remarks import occupancy
from .target import Target
from .workcount import count_work, evaluate

__all__ = ["Report", "Bound", "work_of", "env_of", "report", "format_count"]


@dataclass(frozen=True)
class Bound:
    """The roofline of one launch on one device: the time its bytes need at `bandwidth`,
    the time its FLOPs need at the peaks, and the larger of the two."""
    device: str
    bandwidth: float              # bytes/s the bound uses (measured copy bandwidth, else datasheet)
    bandwidth_source: str         # "measured" or "datasheet"
    memory_s: float
    compute_s: float
    missing_peak: Tuple[str, ...] = ()   # dtypes with FLOPs but no peak in the table (left out)

    @property
    def seconds(self) -> float:
        return max(self.memory_s, self.compute_s)

    @property
    def limit(self) -> str:
        return "memory" if self.memory_s >= self.compute_s else "compute"

    @staticmethod
    def of(nbytes: int, tc_flops: Dict[str, int], cuda_flops: int, limits: DeviceLimits,
           bandwidth: Optional[float] = None) -> "Bound":
        bw = bandwidth or limits.bandwidth
        compute, missing = 0.0, []
        for dtype, n in tc_flops.items():
            peak = limits.tensor_peak(dtype)
            if peak:
                compute += n / peak
            elif n:
                missing.append(dtype)
        compute += cuda_flops / limits.cuda_peak("f32")
        return Bound(limits.part, bw, "measured" if bandwidth else "datasheet", nbytes / bw, compute, tuple(missing))


@dataclass(frozen=True)
class Report:
    """What one launch of a compiled kernel moves and computes (totals over its grid), its
    resources, and the roofline bound on `bound.device` (None for a part tilec has no limits of)."""
    kernel: str
    grid: Tuple[int, int, int]
    bytes_read: int
    bytes_written: int
    bytes_upper: int              # every tile whole: no clipping to the views' extents
    unique_read: int              # each view's bytes at most once per direction: the DRAM traffic
    unique_written: int           # a perfect cache would leave (the roofline's bytes)
    tc_flops: Dict[str, int]      # tensor-core FLOPs by operand dtype
    cuda_flops: int
    exact: bool                   # False: some counts are upper bounds (see notes)
    notes: Tuple[str, ...]
    registers: Optional[int]      # per thread (ptxas; None when ptxas did not run)
    spills: Optional[int]         # bytes spilled per thread (stores + loads)
    shared: int                   # dynamic shared memory per program (all pipeline stages)
    num_stages: int
    threads: int
    programs_per_sm: Optional[int]
    occupancy_limit: Optional[str]
    arch: str
    bound: Optional[Bound] = None
    terms: List[dict] = field(default_factory=list, repr=False)

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def dram_bytes(self) -> int:
        """The compulsory traffic: what the roofline, GB/s and the intensity count."""
        return self.unique_read + self.unique_written

    @property
    def flops(self) -> int:
        return sum(self.tc_flops.values()) + self.cuda_flops

    @property
    def intensity(self) -> float:
        """FLOPs per byte of compulsory traffic."""
        return self.flops / self.dram_bytes if self.dram_bytes else float("inf")

    def __str__(self) -> str:
        g = "x".join(str(x) for x in self.grid)
        lines = [f"kernel {self.kernel} on grid {g} ({self.grid[0] * self.grid[1] * self.grid[2]} programs), {self.arch}"]
        exact = "" if self.exact else " (upper bound)"
        lines.append(f"  bytes:      {format_count(self.bytes, 'B')}{exact} in tiles: read {format_count(self.bytes_read, 'B')}, "
                     f"written {format_count(self.bytes_written, 'B')}; whole tiles {format_count(self.bytes_upper, 'B')}")
        lines.append(f"  DRAM:       {format_count(self.dram_bytes, 'B')} at least (each array once): read "
                     f"{format_count(self.unique_read, 'B')}, written {format_count(self.unique_written, 'B')}")
        tc = ", ".join(f"{format_count(n, 'FLOP')} {d}" for d, n in sorted(self.tc_flops.items())) or "none"
        lines.append(f"  FLOPs:      tensor cores {tc}; CUDA cores {format_count(self.cuda_flops, 'FLOP')}")
        lines.append(f"  intensity:  {self.intensity:.2f} FLOP/B")
        regs = "?" if self.registers is None else str(self.registers)
        spills = "?" if self.spills is None else f"{self.spills} B"
        occ = "?" if self.programs_per_sm is None else f"{self.programs_per_sm} program(s)/SM ({self.occupancy_limit})"
        lines.append(f"  resources:  {self.threads} threads, {regs} registers/thread, {spills} spilled, "
                     f"{self.shared} B shared ({self.num_stages} stages), occupancy {occ}")
        if self.bound is not None:
            b = self.bound
            lines.append(f"  roofline:   {b.limit}-bound on {b.device}: at least {b.seconds * 1e6:.2f} us "
                         f"(memory {b.memory_s * 1e6:.2f} us at {b.bandwidth / 1e9:.0f} GB/s {b.bandwidth_source}, "
                         f"compute {b.compute_s * 1e6:.2f} us)")
            if b.missing_peak:
                lines.append(f"  (no peak known for {', '.join(b.missing_peak)} on {b.device}: those FLOPs are left out)")
        for n in self.notes:
            lines.append(f"  note: {n}")
        return "\n".join(lines)


def format_count(n: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.0f} {unit}"


def work_of(compiled) -> Dict[str, Any]:
    """The counted work of a compiled kernel: its metadata's, or counted from its tile IR
    (a kernel compiled before the count existed, a hand-made one)."""
    work = compiled.metadata.get("work")
    if work is None:
        from .ir import parse
        text = compiled.asm.get("tile")
        if not text:
            raise ValueError(f"kernel '{compiled.name}' has no tile IR to count its work from")
        work = count_work(parse(text))
    return work


def env_of(names: Sequence[str], args: Sequence[Any], kernel: str = "kernel") -> Dict[Any, int]:
    """The evaluation environment of run-time arguments `args` named `names`: each array's
    extents and strides (anything with .shape: numpy, torch, tilec arrays) and each int."""
    if len(args) != len(names):
        raise TypeError(f"kernel '{kernel}' takes {len(names)} run-time argument(s) ({', '.join(names)}), "
                        f"got {len(args)}")
    env: Dict[Any, int] = {}
    for name, a in zip(names, args):
        shape = getattr(a, "shape", None)
        if shape is not None:
            for d, n in enumerate(shape):
                env[("shape", name, d)] = int(n)
            for d, s in enumerate(_strides(a)):
                env[("stride", name, d)] = int(s)
        elif isinstance(a, bool):
            env[name] = int(a)
        elif isinstance(a, int) or type(a).__name__.startswith("int"):
            env[name] = int(a)
        elif not isinstance(a, float):
            raise TypeError(f"kernel '{kernel}' argument {name!r}: expected an array or a number, "
                            f"got {type(a).__name__}")
    return env


def _strides(a) -> Sequence[int]:
    """Strides in elements (torch's stride(), numpy's bytes / itemsize); () when unknown."""
    st = getattr(a, "stride", None)
    if callable(st):
        try:
            return tuple(st())
        except TypeError:
            return ()
    st = getattr(a, "strides", None)
    item = getattr(getattr(a, "dtype", None), "itemsize", None)
    if st is not None and item:
        return tuple(s // item for s in st)
    return ()


def normalize(grid) -> Tuple[int, int, int]:
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3 or not all(
            isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in grid):
        raise ValueError(f"grid must be an int or a tuple of 1 to 3 non-negative ints, got {grid!r}")
    return tuple(list(grid) + [1] * (3 - len(grid)))


def report(compiled, *args, grid, target=None, bandwidth: Optional[float] = None, **kwargs) -> Report:
    """The Report of one launch of `compiled` on `grid` with run-time arguments `args` (in
    `compiled.arg_names` order, or by name), its roofline on `target` (a Target, an arch or a
    device name; default: the arch it was compiled for, on that arch's nominal part)."""
    names = list(compiled.arg_names)
    if kwargs:
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise TypeError(f"kernel '{compiled.name}' has no run-time argument {unknown[0]!r}; "
                            f"its arguments are {', '.join(names)}")
        args = list(args) + [kwargs[n] for n in names[len(args):] if n in kwargs]
    grid3 = normalize(grid)
    totals = evaluate(work_of(compiled), env_of(names, args, compiled.name), grid3)
    return _build(compiled, grid3, totals, _limits(compiled, target), bandwidth)


def _limits(compiled, target) -> Tuple[Optional[DeviceLimits], Target]:
    arch = compiled.metadata.get("arch", "sm_90a")
    if target is None or isinstance(target, Target):
        tgt = target or Target.from_arch(arch)
        return limits_for(tgt.device), tgt
    if isinstance(target, str) and not target.startswith("sm_"):
        return limits_for(target), Target.from_arch(arch)
    tgt = Target.of(target)
    return limits_for(tgt.device), tgt


def _build(compiled, grid3, totals, limits_target, bandwidth=None) -> Report:
    limits, tgt = limits_target
    meta = compiled.metadata
    ptxas = meta.get("ptxas") or {}
    regs = ptxas.get("registers")
    spills = None if regs is None else int(ptxas.get("spill_stores", 0)) + int(ptxas.get("spill_loads", 0))
    threads = int(meta.get("num_threads", 32 * meta.get("num_warps", 4)))
    shared = int(meta.get("shared", 0))
    per_sm, why = (occupancy(regs, threads, shared, tgt) if regs is not None else (None, None))
    nbytes = totals["unique_read"] + totals["unique_written"]
    bound = (Bound.of(nbytes, totals["tc_flops"], totals["cuda_flops"], limits, bandwidth)
             if limits is not None else None)
    return Report(kernel=compiled.name, grid=grid3, bytes_read=totals["bytes_read"],
                  bytes_written=totals["bytes_written"], bytes_upper=totals["bytes_upper"],
                  unique_read=totals["unique_read"], unique_written=totals["unique_written"],
                  tc_flops=dict(totals["tc_flops"]), cuda_flops=totals["cuda_flops"], exact=totals["exact"],
                  notes=tuple(totals["notes"]), registers=regs, spills=spills, shared=shared,
                  num_stages=int(meta.get("num_stages", 1)), threads=threads, programs_per_sm=per_sm,
                  occupancy_limit=why, arch=meta.get("arch", tgt.arch), bound=bound)


def report_from_env(compiled, env: Dict[Any, int], grid, limits: Optional[DeviceLimits],
                    bandwidth: Optional[float] = None) -> Report:
    """A Report from an environment already built (the runtime's profiler, the CLI's shapes)."""
    grid3 = normalize(grid)
    totals = evaluate(work_of(compiled), env, grid3)
    tgt = Target.from_arch(compiled.metadata.get("arch", "sm_90a"))
    return _build(compiled, grid3, totals, (limits, tgt), bandwidth)
