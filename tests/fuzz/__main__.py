"""`python -m tests.fuzz --n 2000 [--gpu] [--seed S] [--jobs J]` from the repository root.

Draws N random kernels, interprets each, compiles it for sm_80 and sm_90a (ptxas must
accept it) or, with --gpu, runs it on the GPU against the interpreter; shrinks every new
kind of failure and saves it under tests/fuzz/regressions/ (or --save DIR). With --jobs J
the programs are split over J processes (each with its own seeds and CUDA context).
Exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

from .driver import REGRESSIONS, Report, hunt, worker
from .programs import TEMPLATES
from .run import ARCHS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="programs to run (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu", action="store_true", help="run on the GPU and compare with the interpreter")
    ap.add_argument("--arch", action="append", help="archs to compile for without --gpu (default sm_80 and sm_90a)")
    ap.add_argument("--kinds", help=f"comma-separated templates ({', '.join(TEMPLATES)})")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--save", default=str(REGRESSIONS), help="where failures are saved ('' for nowhere)")
    ap.add_argument("--time-limit", type=float, default=float("inf"), help="seconds; stop drawing after it")
    ap.add_argument("--json", help="write the report here")
    a = ap.parse_args(argv)
    archs = () if a.gpu else tuple(a.arch or ARCHS)
    kinds = a.kinds.split(",") if a.kinds else None
    t0 = time.monotonic()
    if a.jobs <= 1:
        report = hunt(a.n, a.seed, archs, a.gpu, kinds, not a.no_shrink, Path(a.save) if a.save else None,
                      a.time_limit, log=lambda s: print(s, flush=True))
    else:
        per = [a.n // a.jobs + (i < a.n % a.jobs) for i in range(a.jobs)]
        jobs = [(k, a.seed * 1000 + i * 7919, archs, a.gpu, kinds, not a.no_shrink, a.save, a.time_limit)
                for i, k in enumerate(per)]
        report = Report()
        with mp.get_context("spawn").Pool(a.jobs) as pool:
            for r in pool.imap_unordered(worker, jobs):
                report.merge(r)
        report.seconds = time.monotonic() - t0
    print(report.summary())
    if a.json:
        Path(a.json).write_text(json.dumps(report.to_json(), indent=1))
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
