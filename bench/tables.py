"""The docs' results tables from results files (bench/results.py's schema):

    python -m bench.tables RESULTS.json [--metrics tilec,triton] [--ratio]

prints a Markdown table, one line per measured thing (the rows' names, in file order) and one
column per metric, headed by the file's device, date, commit and command; `--ratio` adds each
metric's ratio to its baseline where the row has one (the numbers the targets are stated in).
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional

try:
    from bench.results import read
except ImportError:                     # pragma: no cover - run as `python bench/tables.py`
    from results import read            # type: ignore[no-redef]

__all__ = ["markdown", "update", "cell", "ratio_cell"]

_BLOCK = re.compile(r"(<!-- table: (?P<args>[^\n]*?) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def cell(x) -> str:
    """A bench's printed throughput: whole numbers, "-" for a failed measurement."""
    return "-" if x is None else f"{x:.0f}"


def ratio_cell(a, b) -> str:
    """a / b to two decimals, "-" where either is missing."""
    return "-" if a is None or not b else f"{a / b:.2f}"


def _num(v: float) -> str:
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}"


def markdown(doc, metrics: Optional[List[str]] = None, ratio: bool = False) -> str:
    """The table of a results document (bench.results.read)."""
    names: List[str] = []
    cells: Dict[str, Dict[str, dict]] = {}
    order: List[str] = []
    for r in doc["rows"]:
        if r["name"] not in cells:
            names.append(r["name"])
            cells[r["name"]] = {}
        cells[r["name"]][r["metric"]] = r
        if r["metric"] not in order:
            order.append(r["metric"])
    cols = [m for m in (metrics or order) if m in order]
    unknown = [m for m in (metrics or []) if m not in order]
    if unknown:
        raise ValueError(f"metrics not in the file: {', '.join(unknown)} (it has {', '.join(order)})")
    units = {m: next(cells[n][m]["unit"] for n in names if m in cells[n]) for m in cols}
    head = ["measured"] + [f"{m} ({units[m]})" for m in cols]
    if ratio:
        head += [f"{m} / {b}" for m, b in _ratio_cols(cells, names, cols)]
    lines = [f"{doc['device']}, {doc['date'][:10]}, commit {doc['commit']}: `{doc['command']}`", "",
             "| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for n in names:
        vals = [_num(cells[n][m]["value"]) if m in cells[n] else "" for m in cols]
        if ratio:
            for m, b in _ratio_cols(cells, names, cols):
                r = cells[n].get(m)
                ok = r is not None and r.get("baseline", {}).get("name") == b and r["baseline"]["value"]
                vals.append(f"{r['value'] / r['baseline']['value']:.2f}" if ok else "")
        lines.append("| " + " | ".join([n] + vals) + " |")
    return "\n".join(lines)


def _ratio_cols(cells, names, cols):
    seen = []
    for m in cols:
        for n in names:
            b = cells[n].get(m, {}).get("baseline")
            if b and (m, b["name"]) not in seen and m != b["name"]:
                seen.append((m, b["name"]))
    return seen


def _table_args(argv: List[str]):
    ap = argparse.ArgumentParser(prog="python -m bench.tables", description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--metrics", help="comma-separated columns, in this order (default: every metric)")
    ap.add_argument("--ratio", action="store_true", help="add each metric's ratio to its baseline")
    return ap


def _generated(args: str, base: Path) -> str:
    try:
        a = _table_args([]).parse_args(shlex.split(args))
    except SystemExit:
        raise ValueError(f"bad table arguments {args!r}") from None
    if not a.file:
        raise ValueError(f"table arguments {args!r} name no results file")
    return markdown(read(base / a.file), a.metrics.split(",") if a.metrics else None, a.ratio) + "\n"


def update(doc: Path, write: bool = True) -> List[str]:
    """Regenerate every generated table of the Markdown file `doc` (written back when `write`);
    returns the arguments of the tables whose text differed. ValueError naming the document
    for a table whose results file is missing or bad."""
    doc = Path(doc)
    text = doc.read_text()
    stale: List[str] = []

    def one(m):
        try:
            body = _generated(m.group("args"), doc.parent)
        except ValueError as e:
            raise ValueError(f"{doc}: {e}") from None
        if body != m.group("body"):
            stale.append(m.group("args"))
        return m.group(1) + body + m.group(4)
    new = _BLOCK.sub(one, text)
    if write and new != text:
        doc.write_text(new)
    return stale


def main(argv=None) -> int:
    ap = _table_args(argv)
    ap.add_argument("--update", nargs="+", metavar="DOC", help="regenerate the tables of these Markdown files")
    ap.add_argument("--check", nargs="+", metavar="DOC", help="exit 1 if a table of these files is stale")
    a = ap.parse_args(argv)
    try:
        if a.update or a.check:
            stale = [(d, t) for d in (a.update or a.check) for t in update(Path(d), write=bool(a.update))]
            for d, t in stale:
                print(f"{d}: {'updated' if a.update else 'stale'}: {t}")
            return 1 if stale and a.check else 0
        if not a.file:
            ap.error("give a results file, --update or --check")
        print(markdown(read(a.file), a.metrics.split(",") if a.metrics else None, a.ratio))
    except ValueError as e:
        print(f"bench.tables: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
