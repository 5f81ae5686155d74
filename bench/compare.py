"""The regression gate: compare two benchmark results files (bench/results.py's schema).

    python -m bench.compare OLD.json NEW.json [--tolerance 3%]

Prints, per row of either file (keyed by name and metric), the old and new values, their
ratio new/old and the change in the better direction of the row's unit (+ better, - worse:
higher is better for throughputs, lower for times). Exits 1 when a row got worse by more
than the tolerance, 2 on a usage error (unreadable file, a row whose unit changed), else 0.
Rows only one file has are listed, not failed.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Tuple

from .results import higher_is_better, read, rows_by_key

__all__ = ["main", "parse_tolerance", "compare"]


def parse_tolerance(text: str) -> float:
    """'3%' -> 0.03; a bare number is a fraction ('0.03'); ValueError otherwise."""
    t = str(text).strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"tolerance must look like 3% or 0.03, got {text!r}") from None
    if not 0 <= value < 1:
        raise ValueError(f"tolerance must be from 0% to under 100%, got {text!r}")
    return value


def compare(old: dict, new: dict, tolerance: float) -> Tuple[List[tuple], int]:
    """(table rows: name, metric, unit, old, new, ratio, change, status; regressions)."""
    a, b = rows_by_key(old), rows_by_key(new)
    out, bad = [], 0
    for key in list(a) + [k for k in b if k not in a]:
        ra, rb = a.get(key), b.get(key)
        if ra is None or rb is None:
            r = ra or rb
            out.append((*key, r["unit"], ra and ra["value"], rb and rb["value"], None, None,
                        "only in old" if rb is None else "only in new"))
            continue
        if ra["unit"] != rb["unit"]:
            raise ValueError(f"{key[0]} / {key[1]}: unit changed from {ra['unit']} to {rb['unit']}")
        up = higher_is_better(ra["unit"])
        x, y = ra["value"], rb["value"]
        ratio = y / x if x else (1.0 if y == x else float("inf"))
        change = (ratio - 1 if up else 1 - ratio) if x else (0.0 if y == x else (1.0 if up else -1.0))
        status = "ok"
        if change < -tolerance:
            status, bad = "REGRESSION", bad + 1
        elif change > tolerance:
            status = "better"
        out.append((*key, ra["unit"], x, y, ratio, change, status))
    return out, bad


def _num(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.4g}"


def _table(rows: List[tuple]) -> str:
    head = ("name", "metric", "unit", "old", "new", "new/old", "change", "")
    cells = [head] + [(n, m, u, _num(x), _num(y), "-" if r is None else f"{r:.3f}",
                       "-" if c is None else f"{100 * c:+.1f}%", s) for n, m, u, x, y, r, c, s in rows]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) if i < 3 or i == 7 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
             .rstrip() for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    p.add_argument("old", help="the reference results (bench/results.py JSON)")
    p.add_argument("new", help="the results to check against it")
    p.add_argument("--tolerance", default="3%", help="how much worse a row may get (default 3%%)")
    args = p.parse_args(argv)
    try:
        tol = parse_tolerance(args.tolerance)
        old, new = read(args.old), read(args.new)
        rows, bad = compare(old, new, tol)
    except ValueError as e:
        print(f"bench.compare: error: {e}", file=sys.stderr)
        return 2
    print(f"old: {args.old} ({old['device']}, {old['commit']}, {old['date']})")
    print(f"new: {args.new} ({new['device']}, {new['commit']}, {new['date']})")
    if old["device"] != new["device"]:
        print("note: the two runs are on different devices")
    print(_table(rows))
    worse = f"{bad} regression(s) beyond {100 * tol:g}%" if bad else f"no regression beyond {100 * tol:g}%"
    print(worse)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
