"""Host time per call of the stdlib entry points' replay path, on the CPU (no GPU needed).

    python bench/host_path.py [--calls 2000] [--rounds 7] [--ops softmax,gelu] [--json out.json]
                              [--compare before.json] [--profile softmax]

Every op is called at a tiny shape (64x64, f16) against the stand-in driver of
tests/runtime/standin.py: kernels are really compiled on the first call, and later calls
run tilec's real Python path (the launch plan's key, its replay, the packer, the launcher's
checks) down to the driver call, which the stand-in answers at once. So what this prints is
the Python part of `bench/membound.py --host` on a GPU, without the driver's own time
(cuLaunchKernel in the driver: about 2 us on an H200) and with a stand-in torch whose
tensor reads and `empty` are Python functions rather than torch's C++ ones (torch.empty: about
2 us). Each op is timed with the stand-in's torch tensors and with tc.DeviceArrays.

Per op: the best of `rounds` rounds of `calls` back-to-back calls, in microseconds per call.
`--json` writes the numbers; `--compare FILE` prints them beside those of an earlier run (of
another checkout: run this file from each), the "before/after" of a change to the path.
`--profile OP` prints cProfile's top entries for the torch calls of one op.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "runtime"))

import tilec as tc  # noqa: E402
import tilec.stdlib_kernels as sk  # noqa: E402
from standin import standin, tensor  # noqa: E402

SHAPE = (64, 64)


def _ops(make):
    """name -> (inputs, call) with `make(shape, dtype name)` building one input array."""
    x, y, w, b = make(SHAPE, "float16"), make(SHAPE, "float16"), make(SHAPE[-1:], "float16"), make(SHAPE[-1:], "float16")
    return {
        "softmax": ((x,), lambda x: sk.softmax(x)),
        "gelu": ((x,), lambda x: sk.gelu(x)),
        "mul": ((x, y), lambda x, y: sk.mul(x, y)),
        "add_bias": ((x, b), lambda x, b: sk.add(x, b)),
        "layer_norm": ((x, w, b), lambda x, w, b: sk.layer_norm(x, w, b)),
        "rms_norm": ((x, w), lambda x, w: sk.rms_norm(x, w)),
        "cumsum": ((x,), lambda x: sk.cumsum(x)),
        "sum_last": ((x,), lambda x: sk.sum(x, -1)),
        "dropout": ((x,), lambda x: sk.dropout(x, 0.1, 1)),
        "silu_and_mul": ((x,), lambda x: sk.silu_and_mul(x)),
        # two launches, the second a dependent launch (cuLaunchKernelEx)
        "cross_entropy": ((x, make(SHAPE[:1], "int64")), lambda x, t: sk.cross_entropy(x, t)),
    }


def _time(fn, args, calls, rounds):
    for _ in range(50):
        fn(*args)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def _driver_floor(fake, calls, rounds):
    """The stand-in driver's own call, as the launcher makes it: what no change can remove here."""
    s = fake.CUstream(0)
    return _time(lambda: fake.cuLaunchKernel("f", 1, 1, 1, 128, 1, 1, 0, s, 0, 0), (), calls, rounds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--compare", help="an earlier run's --json: print before/after")
    ap.add_argument("--profile", help="cProfile the torch calls of this op")
    opt = ap.parse_args(argv)
    wanted = [s for s in opt.ops.split(",") if s]
    rows = {}
    with standin(record=False) as (fake, torch):
        kinds = {"torch": lambda shape, dt: tensor(torch, shape, dt),
                 "DeviceArray": lambda shape, dt: tc.empty(shape, getattr(tc, dt))}
        for kind, make in kinds.items():
            for name, (inputs, call) in _ops(make).items():
                if wanted and name not in wanted:
                    continue
                rows.setdefault(name, {})[kind] = _time(call, inputs, opt.calls, opt.rounds)
                if opt.profile == name and kind == "torch":
                    import cProfile  # noqa: PLC0415
                    import pstats  # noqa: PLC0415
                    prof = cProfile.Profile()
                    prof.runcall(lambda: [call(*inputs) for _ in range(opt.calls)])
                    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        floor = _driver_floor(fake, opt.calls, opt.rounds)
    before = {}
    if opt.compare:
        with open(opt.compare) as f:
            before = json.load(f)["ops"]
    print(f"host time per call on the CPU against the stand-in driver (us; best of {opt.rounds} x {opt.calls} "
          f"calls, {SHAPE} f16; the stand-in's driver call alone: {floor:.2f} us)")
    head = f"{'op':14s} {'torch':>8s} {'DeviceArray':>12s}"
    if before:
        head += f"   {'torch before':>12s} {'DeviceArray before':>18s}"
    print(head)
    for name, r in rows.items():
        line = f"{name:14s} {r.get('torch', float('nan')):8.2f} {r.get('DeviceArray', float('nan')):12.2f}"
        if before:
            b = before.get(name, {})
            line += f"   {b.get('torch', float('nan')):12.2f} {b.get('DeviceArray', float('nan')):18.2f}"
        print(line)
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump({"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                       "date": time.strftime("%Y-%m-%d"), "driver_call_us": floor, "ops": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
