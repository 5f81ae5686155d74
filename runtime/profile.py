"""`with tc.profile() as prof:`: every tilec launch in the block timed with CUDA events,
set beside what the compiler counted (bytes, FLOPs) and the device's roofline.

The launcher tests one module global per launch (`launcher._profile`, None outside a
profile); inside one, each launch is bracketed by cuEventRecord on its stream and noted
with its compiled kernel, grid and argument shapes. Nothing is synchronized until
`table()` reads the events. The counts come with the compiled kernel
(`metadata["work"]`, evaluated by tilec.roofline): the runtime never asks the compiler.

Stdlib ops record their launches under the op's name (`labelled("softmax")`).
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from ..limits import DeviceLimits, limits_for
from ..roofline import Report, format_count, report_from_env
from . import driver, launcher
from .driver import check, cu

__all__ = ["Profile", "profile", "labelled", "copy_bandwidth", "ProfileRow"]


class _Launch:
    __slots__ = ("label", "compiled", "env", "grid", "device", "start", "end")

    def __init__(self, label, compiled, env, grid, device, start, end):
        self.label, self.compiled, self.env, self.grid = label, compiled, env, grid
        self.device, self.start, self.end = device, start, end


@dataclass(frozen=True)
class ProfileRow:
    """One kernel (with one set of shapes) in a profile: its launches' median time, the
    compiler's counts, and how close that time is to the roofline bound."""
    name: str                 # "op:kernel" for a stdlib op's launch, else the kernel's name
    calls: int
    seconds: float            # median
    report: Report

    @property
    def gbps(self) -> float:
        return self.report.dram_bytes / self.seconds / 1e9

    @property
    def tflops(self) -> float:
        return self.report.flops / self.seconds / 1e12

    @property
    def percent_of_bound(self) -> Optional[float]:
        b = self.report.bound
        return None if b is None else 100.0 * b.seconds / self.seconds


class Profile:
    """What `tc.profile()` returns (see the module doc). `bandwidth`: "measured" (a timed
    device-to-device copy, once per device: the default), "datasheet", or bytes/s."""

    def __init__(self, bandwidth="measured"):
        if not (bandwidth in ("measured", "datasheet") or (isinstance(bandwidth, (int, float))
                                                             and not isinstance(bandwidth, bool) and bandwidth > 0)):
            raise ValueError(f"bandwidth must be 'measured', 'datasheet' or bytes per second > 0, got {bandwidth!r}")
        self.bandwidth = bandwidth
        self.launches: List[_Launch] = []
        self._labels: List[str] = []
        self._events: List[Any] = []
        self._outer = None

    # ----------------------------------------------------------------- collecting
    def __enter__(self) -> "Profile":
        self._outer = launcher._profile
        launcher._profile = self
        return self

    def __exit__(self, *exc) -> None:
        launcher._profile = self._outer
        self._outer = None

    def _event(self):
        if self._events:
            return self._events.pop()
        return check(cu().cuEventCreate(0), "cuEventCreate")

    def launch(self, prepared, params, vals, infos, grid, stream, go):
        """Launch through `go()` between two events on `stream`; its result code."""
        start, end = self._event(), self._event()
        d = cu()
        d.cuEventRecord(start, stream)
        res = go()
        d.cuEventRecord(end, stream)
        env = {}
        for name, v, info in zip(params, vals, infos):
            if info is not None:
                for i, n in enumerate(info[1]):
                    env[("shape", name, i)] = int(n)
                for i, s in enumerate(info[2]):
                    env[("stride", name, i)] = int(s)
            elif type(v) is int:
                env[name] = v
        label = f"{self._labels[-1]}:{prepared.name}" if self._labels else prepared.name
        grid = (int(grid[0]), int(grid[1]), int(grid[2]))
        self.launches.append(_Launch(label, prepared.compiled, env, grid, prepared.device, start, end))
        return res

    # ----------------------------------------------------------------- reading
    def rows(self) -> List[ProfileRow]:
        """One row per kernel and shapes, in order of first launch (synchronizes)."""
        groups: Dict[Tuple, List[_Launch]] = {}
        for ln in self.launches:
            key = (ln.label, id(ln.compiled), ln.grid, tuple(sorted(ln.env.items(), key=repr)))
            groups.setdefault(key, []).append(ln)
        out = []
        for lns in groups.values():
            times = []
            for ln in lns:
                check(cu().cuEventSynchronize(ln.end), "cuEventSynchronize")
                times.append(float(check(cu().cuEventElapsedTime(ln.start, ln.end), "cuEventElapsedTime")) / 1e3)
            first = lns[0]
            limits, bw = self._limits(first.device)
            rep = report_from_env(first.compiled, first.env, first.grid, limits, bw)
            out.append(ProfileRow(first.label, len(lns), statistics.median(times), rep))
        return out

    def _limits(self, device: int) -> Tuple[Optional[DeviceLimits], Optional[float]]:
        limits = limits_for(driver.get_device(device).name)
        if self.bandwidth == "datasheet":
            return limits, None
        if self.bandwidth == "measured":
            return limits, copy_bandwidth(device)
        return limits, float(self.bandwidth)

    def table(self, file=None) -> str:
        """The rows as a text table (printed to `file` too when given)."""
        head = ("kernel", "calls", "time", "DRAM bytes", "FLOPs", "GB/s", "TFLOP/s", "FLOP/B", "bound", "% of bound")
        lines = []
        for r in self.rows():
            rep, b = r.report, r.report.bound
            bound = "?" if b is None else f"{b.limit} {b.seconds * 1e6:.1f} us"
            pct = "?" if r.percent_of_bound is None else f"{r.percent_of_bound:.1f}"
            lines.append((r.name, str(r.calls), f"{r.seconds * 1e6:.1f} us", format_count(rep.dram_bytes, "B"),
                          format_count(rep.flops, ""), f"{r.gbps:.0f}", f"{r.tflops:.1f}",
                          f"{rep.intensity:.2f}", bound, pct))
        widths = [max(len(x[i]) for x in [head] + lines) for i in range(len(head))]
        text = "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                         for row in [head] + lines)
        if file is not None:
            print(text, file=file)
        return text

    def plot(self, path: str) -> None:
        """A roofline chart of the profiled kernels (one point each) written to `path`
        (needs matplotlib: `pip install tilec[plot]`)."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("Profile.plot needs matplotlib: install the plot extra (pip install 'tilec[plot]')") \
                from None
        rows = self.rows()
        fig, ax = plt.subplots(figsize=(7, 5))
        drawn = set()
        for r in rows:
            b = r.report.bound
            if b is not None and b.device not in drawn:
                drawn.add(b.device)
                lim = limits_for(b.device)
                peaks = {d: p for d, p in lim.tensor.items()} if lim else {}
                peaks["f32 (CUDA cores)"] = lim.cuda_peak("f32") if lim else 0
                xs = [2.0 ** e for e in range(-4, 13)]
                for name, p in peaks.items():
                    if p:
                        ax.plot(xs, [min(p, x * b.bandwidth) / 1e12 for x in xs], lw=1,
                                label=f"{b.device} {name}")
            x = r.report.intensity if r.report.dram_bytes else 1.0
            ax.scatter([x], [max(r.tflops, 1e-6)], zorder=3)
            ax.annotate(r.name, (x, max(r.tflops, 1e-6)), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title("tilec roofline")
        ax.legend(fontsize=6)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)

    def __del__(self):
        handles = [h for ln in getattr(self, "launches", ()) for h in (ln.start, ln.end)]
        handles += getattr(self, "_events", [])
        if handles and driver._initialized:  # noqa: SLF001
            for h in handles:
                try:
                    cu().cuEventDestroy(h)
                except Exception:  # noqa: BLE001 - a destructor must not raise
                    pass


def profile(bandwidth="measured") -> Profile:
    """`with tc.profile() as prof:` times every tilec launch in the block; `prof.table()`."""
    return Profile(bandwidth)


_NULL = contextlib.nullcontext()


def labelled(name: str):
    """Inside a profile, record the launches of the block under `name` (a stdlib op's);
    outside one, nothing (a shared null context)."""
    prof = launcher._profile
    if prof is None:
        return _NULL
    return _Label(prof, name)


class _Label:
    __slots__ = ("prof", "name")

    def __init__(self, prof, name):
        self.prof, self.name = prof, name

    def __enter__(self):
        self.prof._labels.append(self.name)  # noqa: SLF001

    def __exit__(self, *exc):
        self.prof._labels.pop()  # noqa: SLF001


_bandwidth: Dict[int, float] = {}


def copy_bandwidth(device: Optional[int] = None, nbytes: int = 1 << 28, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy on `device` (read + write counted), the
    median of `repeats` timed copies of `nbytes`; measured once per device and cached."""
    dev = driver.current_device() if device is None else device
    hit = _bandwidth.get(dev)
    if hit is not None:
        return hit
    driver.ensure_context(dev)
    d = cu()
    src = check(d.cuMemAlloc(nbytes), "cuMemAlloc")
    dst = check(d.cuMemAlloc(nbytes), "cuMemAlloc")
    start, end = check(d.cuEventCreate(0), "cuEventCreate"), check(d.cuEventCreate(0), "cuEventCreate")
    try:
        check(d.cuMemsetD8(src, 1, nbytes), "cuMemsetD8")
        check(d.cuMemcpyDtoD(dst, src, nbytes), "cuMemcpyDtoD")   # warm-up
        times = []
        for _ in range(repeats):
            check(d.cuEventRecord(start, 0), "cuEventRecord")
            check(d.cuMemcpyDtoDAsync(dst, src, nbytes, 0), "cuMemcpyDtoDAsync")
            check(d.cuEventRecord(end, 0), "cuEventRecord")
            check(d.cuEventSynchronize(end), "cuEventSynchronize")
            times.append(float(check(d.cuEventElapsedTime(start, end), "cuEventElapsedTime")) / 1e3)
    finally:
        for h in (start, end):
            d.cuEventDestroy(h)
        d.cuMemFree(src)
        d.cuMemFree(dst)
    bw = 2 * nbytes / statistics.median(times)
    _bandwidth[dev] = bw
    return bw
