"""Launch overhead on the GPU: tilec vs raw cuLaunchKernel vs Triton vs a torch op.

    python bench/launch_overhead.py [--json out.json] [--launches 500] [--rounds 40]

Each contender launches a kernel that does (almost) nothing, on one array
argument of 1024 floats, `launches` times in a loop; the loop's host time is
taken per round (the GPU is synchronized between rounds, outside the timed
part) and the table reports the median and best per-launch time over rounds.

- raw: cuda-python cuLaunchKernel with a prebuilt kernelParams address array
  (the floor any Python launcher can reach);
- tilec: `kernel[grid](out)`, the full hot path (signature, table probe, packer,
  cuLaunchKernel) with a DeviceArray and with a torch tensor argument; and
  `LaunchPlan.launch([address])`, the stdlib's replay of a planned launch (the new address
  written into a prebuilt parameter buffer, then cuLaunchKernel);
- triton: an empty @triton.jit kernel; torch: `x.add_(1)`.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

try:  # as a package module (tests) or as a script (bench/ first on sys.path)
    from bench import convert
except ImportError:
    import convert  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "runtime"))

import tilec.runtime as rt  # noqa: E402
from tilec.runtime import driver, launcher  # noqa: E402
from tilec.runtime.replay import launch_plan  # noqa: E402

EMPTY_PTX = r"""
.version 7.8
.target sm_80
.address_size 64
.visible .entry empty(.param .u64 o, .param .u32 on)
{
    ret;
}
"""


def _time(fn, launches: int, rounds: int, sync):
    per = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(launches):
            fn()
        per.append((time.perf_counter() - t0) / launches * 1e6)
        sync()
    return {"median_us": statistics.median(per), "best_us": min(per)}


def _tilec_kernel(out):
    """A tilec kernel doing nothing: the real frontend and compiler when they are there,
    else the same PTX preloaded into the launcher (the hot path is identical)."""
    try:
        import tilec as tc

        @tc.kernel
        def empty(out):
            pass

        empty[(1,)](out)
        return empty, "compiled by tilec"
    except Exception as e:  # noqa: BLE001 - frontend/compiler not available in this checkout
        print(f"tilec frontend unavailable ({type(e).__name__}: {e}); using preloaded PTX", file=sys.stderr)
        from tilec.abi import param_slots
        from tilec.compiled import CompiledKernel
        from tilec.dtypes import float32, int32
        from tilec.ir.types import ViewType

        def empty(out):
            pass

        class K:
            __name__ = "empty"

            def __init__(self):
                self.fn = empty
                self.launch_state = launcher.KernelState(empty)  # preloaded signatures only

            def __getitem__(self, grid):
                return lambda *a, **kw: launcher.launch(self.launch_state, grid, a, kw)

        k = K()
        view = ViewType(float32, 1, strides=(1,), index=int32, align=16)
        ck = CompiledKernel("empty", {"ptx": EMPTY_PTX}, {"num_warps": 1, "shared": 0, "arch": "sm_80"},
                            param_slots([view]), ["out"])
        k.preloaded = ck
        return k, "hand-written PTX preloaded (frontend unavailable)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--results", help="also write the rows in bench/results.py's schema (python -m bench.compare, bench.tables)")
    ap.add_argument("--launches", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=40)
    opt = ap.parse_args()
    d = driver.cu()
    dev = rt.get_device(0)
    driver.ensure_context(0)
    results = {}
    sync = rt.synchronize

    # raw cuLaunchKernel, arguments packed once
    out = rt.zeros(1024)
    k, how = _tilec_kernel(out)
    ck = getattr(k, "preloaded", None)  # hand-written PTX when the frontend is unavailable
    if ck is not None:
        launcher.preload(k.launch_state, ck, (out,))
    k[(1,)](out)  # compile/load outside the timing
    prepared = next(iter(k.launch_state.table.values()))
    fn = prepared.function
    ptr = ctypes.c_uint64(out.ptr)
    n = ctypes.c_int64(1024)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
    addr = ctypes.addressof(params)
    stream0 = d.CUstream(0)
    launch = d.cuLaunchKernel
    results["raw cuLaunchKernel (prepacked)"] = _time(
        lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, stream0, addr, 0), opt.launches, opt.rounds, sync)
    results["raw cuLaunchKernel (tuple args)"] = _time(
        lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, stream0, ((out.ptr, 1024), (ctypes.c_void_p, ctypes.c_int32)), 0),
        opt.launches, opt.rounds, sync)
    grid = (1,)
    results["tilec kernel[grid](DeviceArray)"] = _time(lambda: k[grid](out), opt.launches, opt.rounds, sync)
    # the stdlib's replay path: a LaunchPlan writes the address into its prebuilt parameter buffer
    plan = launch_plan(k.launch_state, grid, (out,))
    ptrs = [out.ptr]
    results["tilec LaunchPlan.launch (replay)"] = _time(lambda: plan.launch(ptrs), opt.launches, opt.rounds, sync)

    try:
        import torch
        t = torch.zeros(1024, device="cuda")
        if ck is not None:
            launcher.preload(k.launch_state, ck, (t,))
        k[grid](t)
        tsync = torch.cuda.synchronize
        results["tilec kernel[grid](torch tensor)"] = _time(lambda: k[grid](t), opt.launches, opt.rounds, tsync)
        results["torch x.add_(1)"] = _time(lambda: t.add_(1), opt.launches, opt.rounds, tsync)
    except ImportError:
        torch = None
    try:
        import triton

        @triton.jit
        def triton_empty(out_ptr, n):
            pass

        triton_empty[(1,)](t, 1024)
        results["triton kernel[grid](torch tensor)"] = _time(
            lambda: triton_empty[(1,)](t, 1024), opt.launches, opt.rounds, torch.cuda.synchronize)
    except Exception as e:  # noqa: BLE001 - Triton missing or broken: report without it
        print(f"triton skipped: {e}", file=sys.stderr)

    floor = results["raw cuLaunchKernel (prepacked)"]["median_us"]
    print(f"launch overhead on {dev.name} (tilec kernel {how}); host time per launch, "
          f"{opt.launches} launches x {opt.rounds} rounds")
    print(f"{'contender':40s} {'median us':>10s} {'best us':>10s} {'x floor':>8s}")
    for name, r in results.items():
        print(f"{name:40s} {r['median_us']:10.2f} {r['best_us']:10.2f} {r['median_us'] / floor:8.2f}")
    doc = {"device": dev.name, "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"),
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "tilec_kernel": how,
           "results": results}
    text = json.dumps(doc, indent=2)
    convert.save(opt.results, convert.launch_rows(results), dev.name)
    print(text)
    if opt.json:
        with open(opt.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
