"""The fuzzing loop: draw programs with hypothesis, check each (run.py), shrink each new
kind of failure to a small program and save it under regressions/.

`hunt(n, seed, ...)` runs n programs and returns a `Report`. Hypothesis stops a run at its
first failure (after shrinking it), so the loop runs passes: each pass draws the programs
still due, ignores failures of a kind already found (`Finding.key`), and shrinks the first
new one; the next pass continues with the next seed. With `gpu`, a failure that lost the
CUDA context (`Finding.context_lost`: a fault) ends the hunt, since every later launch of
the process would fail; any other failure (a compile error at the first launch, a launch
the driver refused) is a finding like the rest and the hunt goes on.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hyp_seed

from .program import Program
from .programs import programs
from .run import ARCHS, Finding, check

REGRESSIONS = Path(__file__).parent / "regressions"


@dataclass
class Report:
    programs: int = 0
    features: Counter = field(default_factory=Counter)
    findings: Dict[str, dict] = field(default_factory=dict)   # key -> {"finding", "program", "path", "count"}
    seconds: float = 0.0

    def summary(self) -> str:
        lines = [f"{self.programs} programs in {self.seconds:.0f} s; {len(self.findings)} distinct failures"]
        for key, f in self.findings.items():
            lines.append(f"  {f['count']}x {f['finding'][:300]}" + (f"  -> {f['path']}" if f.get("path") else ""))
        kinds = {k: v for k, v in self.features.items() if k in ("elementwise", "reduce", "dot", "loop", "atomic", "rand")}
        lines.append("  templates: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
        lines.append(f"  features: {len(self.features)} distinct")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"programs": self.programs, "features": dict(self.features), "seconds": self.seconds,
                "findings": self.findings}

    def merge(self, other: dict) -> None:
        self.programs += other["programs"]
        self.features.update(other["features"])
        for k, f in other["findings"].items():
            if k in self.findings:
                self.findings[k]["count"] += f["count"]
            else:
                self.findings[k] = f


class _Found(Exception):
    pass


def save(p: Program, f: Finding, where: Path = REGRESSIONS) -> Path:
    """Write the failing program as a regression (JSON: source, arguments, grid, bounds)."""
    where.mkdir(parents=True, exist_ok=True)
    d = p.to_json()
    d["finding"] = str(f)[:2000]
    digest = hashlib.sha1(p.source.encode()).hexdigest()[:10]
    path = where / f"{f.stage}-{digest}.json"
    path.write_text(json.dumps(d, indent=1) + "\n")
    return path


def hunt(n: int, seed: int = 0, archs: Sequence[str] = ARCHS, gpu: bool = False, kinds: Optional[List[str]] = None,
         shrink: bool = True, save_dir: Optional[Path] = None, time_limit: float = float("inf"),
         known: Sequence[str] = (), log=None) -> Report:
    report = Report()
    start = time.monotonic()
    deadline = start + time_limit
    remaining, pass_seed = n, seed
    known = set(known)
    while remaining > 0 and time.monotonic() < deadline:
        state = {"target": None, "last": None, "count": 0, "fatal": None}

        @settings(max_examples=remaining, database=None, deadline=None, derandomize=False, print_blob=False,
                  suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate])
        @hyp_seed(pass_seed)
        @given(programs(kinds))
        def body(p):
            if time.monotonic() > deadline or state["fatal"]:
                return
            searching = state["target"] is None
            if searching:
                state["count"] += 1
                report.features.update(p.features)
            f = check(p, archs, gpu)
            if f is None:
                return
            k = f.key()
            if f.context_lost:
                # the launch lost the CUDA context (a fault): every later launch of this
                # process would fail too, so save this one as it is and stop. Any other
                # failure (a compile error, a refused launch) is a finding like the rest.
                state["fatal"] = (p, f)
                raise _Found(k)
            if searching and (k in report.findings or k in known):
                if k in report.findings:
                    report.findings[k]["count"] += 1
                return
            if searching:
                state["target"] = k
                if log:
                    log(f"new failure after {report.programs + state['count']} programs: {f}")
            if k == state["target"]:
                state["last"] = (p, f)
                raise _Found(k)

        try:
            body()
        except BaseException as e:  # noqa: BLE001 - _Found, or hypothesis' wrapper of it
            if state["last"] is None and state["fatal"] is None:
                raise
            # the shrunk failure (if any) and the fault that stopped the pass (if any): a fault
            # met while shrinking another failure must not lose that one
            for what, found in (("shrunk to", state["last"]), ("lost the GPU context", state["fatal"])):
                if found is None:
                    continue
                p, f = found
                path = save(p, f, save_dir) if save_dir else None
                report.findings[f.key()] = {"finding": str(f), "program": p.to_json(), "count": 1,
                                            "path": str(path) if path else None}
                if log:
                    log(f"{what}:\n{p.source}\n{f}" + (f"\nsaved {path}" if path else ""))
            del e
        report.programs += state["count"]
        remaining -= max(state["count"], 1)
        pass_seed += 1
        if state["fatal"]:
            if log:
                log("stopping: a failed launch lost the GPU context")
            break
    report.seconds = time.monotonic() - start
    return report


def worker(job) -> dict:
    """One process's share of `python -m tests.fuzz --jobs J` (a module-level function, so
    that spawned processes find it)."""
    n, seed, archs, gpu, kinds, shrink, save_dir, time_limit = job
    report = hunt(n, seed, archs, gpu, kinds, shrink, Path(save_dir) if save_dir else None, time_limit,
                  log=lambda s: print(f"[seed {seed}] {s}", flush=True))
    return report.to_json()
