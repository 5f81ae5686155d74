"""ptxas registers, spills and register-limited programs per SM of every PTX file of a
`bench/ptx_snapshot.py` folder, and the kernels whose numbers changed against another one.

    python bench/ptx_registers.py DIR [-j JOBS]              # one line per kernel
    python bench/ptx_registers.py DIR --compare BASE_DIR     # only what changed; exit 1 if worse

The CPU-side proxy for a code-generation change in memory-bound kernels: a kernel that
gains registers may lose a program per SM (its occupancy floor), which costs bandwidth.
Programs per SM are what the registers allow with the kernel's `.maxntid` threads: 64K
registers per SM, allocated per warp in units of 256 (8 per thread), at most 2048 threads
and 32 programs (sm_80 to sm_90; shared memory is not counted). "Worse" is more registers,
more spill bytes or fewer programs.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

PTXAS = "ptxas"


class Usage(NamedTuple):
    registers: int
    spill_stores: int
    spill_loads: int
    threads: int

    @property
    def programs(self) -> int:
        per_warp = max(8, -(-self.registers // 8) * 8) * 32
        warps = -(-self.threads // 32)
        return min(65536 // (per_warp * warps), 2048 // self.threads, 32)

    def worse_than(self, base: "Usage") -> bool:
        return (self.registers > base.registers or self.programs < base.programs
                or self.spill_stores > base.spill_stores or self.spill_loads > base.spill_loads)


def usage(ptx: Path) -> Optional[Usage]:
    """ptxas -v's numbers for the (one) entry of `ptx`, or None where it does not assemble."""
    text = ptx.read_text()
    arch = re.search(r"^\.target\s+(\w+)", text, re.M).group(1)
    threads = re.search(r"\.(?:maxntid|reqntid)\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", text)
    n = 1
    for g in (threads.groups() if threads else ("1024",)):
        n *= int(g or 1)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([PTXAS, f"-arch={arch}", "-v", "-o", f"{tmp}/k.cubin", str(ptx)],
                           capture_output=True, text=True)
    if r.returncode:
        return None
    regs = re.search(r"Used (\d+) registers", r.stderr)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    return Usage(int(regs.group(1)), int(spill.group(1)) if spill else 0, int(spill.group(2)) if spill else 0, n)


def table(folder: Path, jobs: int) -> Dict[str, Optional[Usage]]:
    files = sorted(folder.glob("*.ptx"))
    with ThreadPoolExecutor(jobs) as pool:
        return {f.stem: u for f, u in zip(files, pool.map(usage, files))}


def _fmt(u: Optional[Usage]) -> str:
    if u is None:
        return "ptxas failed"
    spill = f", spills {u.spill_stores}/{u.spill_loads} B" if u.spill_stores or u.spill_loads else ""
    return f"{u.registers} regs, {u.programs} programs/SM{spill}"


def compare(new: Dict[str, Optional[Usage]], base: Dict[str, Optional[Usage]]) -> List[str]:
    """One line per kernel whose numbers differ, marked WORSE where they got worse."""
    out = []
    for name in sorted(set(new) | set(base)):
        a, b = base.get(name), new.get(name)
        if a == b:
            continue
        worse = b is None or (a is not None and b.worse_than(a))
        out.append(f"{'WORSE' if worse else 'better' if a is None or a.worse_than(b) else 'mixed'}  "
                   f"{name}: {_fmt(a)} -> {_fmt(b)}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="a bench/ptx_snapshot.py folder")
    p.add_argument("--compare", type=Path, metavar="BASE_DIR", help="report only the kernels that changed")
    p.add_argument("-j", type=int, default=2, help="ptxas processes at once")
    args = p.parse_args(argv)
    new = table(args.dir, args.j)
    if args.compare is None:
        for name, u in new.items():
            print(f"{name}: {_fmt(u)}")
        return 0
    lines = compare(new, table(args.compare, args.j))
    print("\n".join(lines) if lines else f"unchanged: {len(new)} kernels")
    return 1 if any(line.startswith("WORSE") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
