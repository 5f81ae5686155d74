"""One JSON schema for benchmark results, so that any two runs can be compared
(`python -m bench.compare OLD.json NEW.json`):

    {"schema": "tilec-bench/1",
     "device": "NVIDIA H200", "date": "2026-11-28T01:40:00+00:00", "commit": "9f782cc",
     "command": "python bench/compile_time.py --results out.json",
     "rows": [{"name": "softmax 4096x4096 bf16", "metric": "tilec", "value": 2410.0, "unit": "GB/s",
               "baseline": {"name": "torch", "value": 1980.0}}, ...]}

A row is one measurement: `name` says what was measured (op, shape, dtype), `metric` which
number of it (a row's name and metric together are its key), `value` in `unit`, and an
optional `baseline` measured beside it in the same run (torch, a copy, a goal). Whether
higher is better follows from the unit (`higher_is_better`): throughputs (GB/s, TFLOP/s,
x, %) up, times (ms, us, s) and sizes (registers, bytes) down.
"""
from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

__all__ = ["SCHEMA", "row", "write", "read", "higher_is_better", "current_commit", "rows_by_key", "HIGHER",
           "LOWER"]

SCHEMA = "tilec-bench/1"
HIGHER = ("GB/s", "TB/s", "TFLOP/s", "GFLOP/s", "FLOP/s", "items/s", "x", "%")   # throughputs, speedups
LOWER = ("s", "ms", "us", "ns", "registers", "bytes")                              # times, sizes


def higher_is_better(unit: str) -> bool:
    """True for throughput units, False for times and sizes; ValueError for a unit that says
    neither (a row must be comparable)."""
    if unit in HIGHER:
        return True
    if unit in LOWER:
        return False
    raise ValueError(f"unit must be one of {', '.join(HIGHER + LOWER)} (its direction decides what a "
                     f"regression is), got {unit!r}")


def row(name: str, metric: str, value: float, unit: str, baseline_name: Optional[str] = None,
        baseline_value: Optional[float] = None) -> Dict[str, Any]:
    """One result row, checked."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a non-empty string, got {metric!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"value of {name!r} must be a finite number, got {value!r}")
    higher_is_better(unit)
    out: Dict[str, Any] = {"name": name, "metric": metric, "value": float(value), "unit": unit}
    if baseline_name is not None or baseline_value is not None:
        if not baseline_name or baseline_value is None:
            raise ValueError(f"baseline of {name!r} needs both a name and a value, got "
                             f"{baseline_name!r}, {baseline_value!r}")
        out["baseline"] = {"name": baseline_name, "value": float(baseline_value)}
    return out


def current_commit(root: Optional[Path] = None) -> str:
    """The short hash of the checkout's HEAD (with "+dirty" when files changed), "unknown" outside git."""
    root = root or Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def write(path, rows: Iterable[Dict[str, Any]], device: str, commit: Optional[str] = None,
          date: Optional[str] = None, command: Optional[str] = None) -> Dict[str, Any]:
    """Write `rows` (from `row`, or dicts of the same fields) to `path` as one results document
    and return it. `commit` defaults to the checkout's, `date` to now (UTC), `command` to argv."""
    checked = [row(r["name"], r["metric"], r["value"], r["unit"], *_baseline(r)) for r in rows]
    keys = [(r["name"], r["metric"]) for r in checked]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"rows must be unique by (name, metric); repeated: {dup}")
    doc = {"schema": SCHEMA, "device": str(device),
           "date": date or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit or current_commit(),
           "command": command if command is not None else " ".join(sys.argv), "rows": checked}
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def _baseline(r):
    b = r.get("baseline")
    return (b["name"], b["value"]) if b else (None, None)


def read(path) -> Dict[str, Any]:
    """A results document, checked: ValueError naming the file and what is wrong."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} results file (its 'schema' is "
                         f"{doc.get('schema') if isinstance(doc, dict) else None!r})")
    try:
        doc["rows"] = [row(r["name"], r["metric"], r["value"], r["unit"], *_baseline(r)) for r in doc["rows"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: bad row: {e}") from None
    return doc


def rows_by_key(doc) -> Dict[tuple, Dict[str, Any]]:
    """{(name, metric): row} of a results document."""
    return {(r["name"], r["metric"]): r for r in doc["rows"]}
