"""Cold compile time per stage: frontend, passes, codegen, LLVM O3, PTX emission, ptxas.

    python bench/compile_time.py [--repeat 5] [--json out.json] [--results out.json] [--no-ptxas]
    python bench/compile_time.py --llvm-passes 12     # also: LLVM's slowest passes per kernel

"Cold" means no compile cache (memory or disk) and a kernel never compiled in this
process; llvmlite is imported and the NVPTX target initialized before timing, as the
targets specify (fused softmax <= 120 ms to PTX since the redesign, 150 before it; 4-warp
layer norm < 250 ms). Each kernel is compiled `--repeat` times; the table shows the median per
stage, and "to PTX" sums every stage before ptxas. `--results` writes the medians in
bench/results.py's schema (rows "KERNEL ARCH" / to_ptx and total, in ms, the goal as
baseline), which `python -m bench.compare OLD.json NEW.json` gates. `--llvm-passes N` prints,
per kernel, the N passes of LLVM's O3 pipeline and of its NVPTX code generation that took the
most CPU time (LLVM's own pass timers), to see where llvm_opt and emit go.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    # (example file, kernel, signature, options, target for "to PTX" in ms)
    ("fused_softmax.py", "softmax_kernel", None, {"num_warps": 4}, 120.0),
    ("layer_norm.py", "layer_norm_kernel", None, {"num_warps": 4}, 250.0),
]
STAGES = ["frontend", "work count", "passes", "codegen", "llvm_print", "llvm_parse", "llvm_opt", "emit"]


def _load_example(name):
    sys.path.insert(0, str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location(f"bench_{name[:-3]}", ROOT / "examples" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _warm_up():
    """Import and initialize what "llvmlite already imported" covers (not timed)."""
    from tilec.lowering import target  # imports llvmlite
    target.target_machine("sm_90a", 80)


def run(repeat: int, arch: str, ptxas: bool):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature

    _warm_up()
    rows = []
    for file, kname, sig, opts, goal in CASES:
        mod = _load_example(file)
        kernel = getattr(mod, kname)
        sig = sig or mod.SIGNATURES[kname]
        samples = []
        for _ in range(repeat):
            spec = parse_signature(kernel, sig)
            t0 = time.perf_counter()
            ck = compile_kernel(kernel, spec, CompileOptions(arch=arch, **opts), use_cache=False) if ptxas \
                else _compile_without_ptxas(kernel, spec, CompileOptions(arch=arch, **opts))
            total = time.perf_counter() - t0
            t = dict(ck.metadata["timings"])
            t["total"] = total
            samples.append(t)
        med = {k: statistics.median(s.get(k, 0.0) for s in samples) for k in samples[0]}
        med["to_ptx"] = statistics.median(sum(s.get(k, 0.0) for k in STAGES) for s in samples)
        rows.append({"kernel": f"{file}:{kname}", "arch": arch, "goal_ms": goal,
                     "ms": {k: round(v * 1000, 2) for k, v in med.items()},
                     "ptxas_report": ck.metadata.get("ptxas")})
    return rows


def _compile_without_ptxas(kernel, spec, options):
    from tilec.compiler import _fresh_ir, compile_module
    options = options.validated()
    timings = {}
    t0 = time.perf_counter()
    module = _fresh_ir(kernel, spec)
    timings["frontend"] = time.perf_counter() - t0
    return compile_module(module, options, timings=timings, run_ptxas=False)


_TIMER_ROW = re.compile(r"^\s*((?:[\d.]+ \(\s*[\d.]+%\)\s+)+)(\S.*?)\s*$")


def parse_pass_report(report: str):
    """LLVM's pass timing report as [(pass name, CPU seconds)], slowest first (user+system
    time, the column that machine load inflates least; a pass reported twice counted once)."""
    best = {}
    for line in report.splitlines():
        m = _TIMER_ROW.match(line)
        if not m or m.group(2).startswith("Total"):
            continue
        values = [float(v) for v in re.findall(r"([\d.]+) \(", m.group(1))]
        cpu = values[2] if len(values) == 4 else values[0]  # user, system, user+system, wall
        best[m.group(2)] = max(best.get(m.group(2), 0.0), cpu)
    return sorted(best.items(), key=lambda kv: -kv[1])


def llvm_pass_times(kernel, spec, options):
    """([(O3 pass, s)], [(NVPTX codegen pass, s)]) for one compile of `kernel`, measured by
    LLVM's pass timers on the module codegen writes (the same IR a compile hands to LLVM)."""
    import llvmlite.binding as llvm
    from tilec.compiler import _fresh_ir, _ptx_needed
    from tilec.lowering import target
    from tilec.lowering.codegen import generate
    from tilec.lowering.pipeline import run_pipeline
    options = options.validated()
    tgt = options.target
    gpu = run_pipeline(_fresh_ir(kernel, spec), options)
    ptx = target.ptx_version_for(tgt, _ptx_needed(gpu))
    tm = target.target_machine(tgt, ptx)
    mod = llvm.parse_assembly(str(generate(gpu, data_layout=target.data_layout(tgt))))
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.start_pass_timing()
    pb.getModulePassManager().run(mod, pb)
    opt = parse_pass_report(pb.finish_pass_timing())
    llvm.set_time_passes(True)
    try:
        tm.emit_assembly(mod)
        emit = parse_pass_report(llvm.report_and_reset_timings())
    finally:
        llvm.set_time_passes(False)
    return opt, emit


def print_pass_times(arch: str, top: int):
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    _warm_up()
    for file, kname, sig, opts, _ in CASES:
        mod = _load_example(file)
        kernel = getattr(mod, kname)
        spec = parse_signature(kernel, sig or mod.SIGNATURES[kname])
        opt, emit = llvm_pass_times(kernel, spec, CompileOptions(arch=arch, **opts))
        for what, rows in (("llvm_opt", opt), ("emit", emit)):
            print(f"{file}:{kname} {what}: {sum(s for _, s in rows) * 1000:.1f} ms CPU in all passes; slowest:")
            for name, s in rows[:top]:
                print(f"    {s * 1000:8.1f} ms  {name}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--results", help="also write the results here in bench/results.py's schema")
    p.add_argument("--no-ptxas", action="store_true", help="stop at PTX")
    p.add_argument("--llvm-passes", type=int, default=0, metavar="N",
                   help="also print the N slowest LLVM passes (O3 and NVPTX codegen) per kernel")
    args = p.parse_args(argv)
    if args.llvm_passes < 0:
        p.error(f"--llvm-passes must be 0 or more, got {args.llvm_passes}")
    rows = run(args.repeat, args.arch, not args.no_ptxas)
    cols = STAGES + ["to_ptx", "ptxas", "total"]
    print(f"{'kernel':40s} " + " ".join(f"{c:>10s}" for c in cols) + "   goal (to PTX)")
    for r in rows:
        ms = r["ms"]
        flag = "ok" if ms["to_ptx"] <= r["goal_ms"] else "SLOW"
        print(f"{r['kernel']:40s} " + " ".join(f"{ms.get(c, 0.0):10.1f}" for c in cols)
              + f"   {r['goal_ms']:.0f} ms {flag}")
    if args.json:
        info = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
                "python": platform.python_version(), "command": " ".join(sys.argv), "results": rows}
        Path(args.json).write_text(json.dumps(info, indent=2))
    if args.results:
        write_results(args.results, rows)
    if args.llvm_passes:
        print_pass_times(args.arch, args.llvm_passes)


def write_results(path, rows):
    """The medians of `run` as bench/results.py rows (the host's CPU is the device)."""
    sys.path.insert(0, str(ROOT))
    from bench.results import row, write
    out = []
    for r in rows:
        name = f"{r['kernel']} {r['arch']}"
        out.append(row(name, "to_ptx", r["ms"]["to_ptx"], "ms", "goal", r["goal_ms"]))
        out.append(row(name, "total", r["ms"]["total"], "ms"))
    return write(path, out, device=f"CPU {platform.machine()} {platform.processor() or ''}".strip())


if __name__ == "__main__":
    main()
