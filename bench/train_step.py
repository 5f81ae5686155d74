"""Tokens per second and peak memory of a Llama training step (examples/pytorch/llama_train.py's
model: forward, backward, an SGD step) in four modes, on one GPU:

    eager           plain PyTorch (sdpa attention, logits in bf16 then f32 for the loss)
    compile         torch.compile of the eager model
    tilec           tilec's ops (rms_norm, add_rms_norm, rope, attention, swiglu, linear_cross_entropy)
    tilec-compile   torch.compile of the tilec model (the ops opaque in the graph)

    python bench/train_step.py                            # the issue's model: 16 x 2048, vocab 128256, seq 4096
    python bench/train_step.py --layers 4 --seq 2048 --steps 5 --results out.json

Each mode builds its own model (the others freed), runs --warmup steps (compilation), then
times --steps steps between CUDA events; peak memory is torch.cuda.max_memory_allocated over
the timed steps. --results writes bench/results.py rows: "<model> train step" / MODE in
items/s (tokens per second) and MODE peak memory in bytes, each against eager's.

    python bench/train_step.py --layers 4 --modes tilec,compile --profile 25

--profile N also prints, per mode, the host's issue time of one step (the GPU kept busy by a
sleep kernel first, so that nothing the host does waits: what the GPU would wait for if the
host were the bound) and the N kernels of most GPU time per step (torch.profiler over two
steps), with the step's wall time against the kernels' sum: the GPU's idle time.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("eager", "compile", "tilec", "tilec-compile")


def _example():
    spec = importlib.util.spec_from_file_location("llama_train", ROOT / "examples" / "pytorch" / "llama_train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _profile(step, mode: str, top: int) -> None:
    """Print the host's issue time of one step and the `top` kernels by GPU time per step."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda._sleep(2_000_000_000)   # about a second of GPU time ahead of the host  # noqa: SLF001
    t0 = time.perf_counter()
    step()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 2
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    rows = [(e.self_device_time_total / 2e3, e.count // 2, e.key) for e in prof.key_averages()
            if e.self_device_time_total > 0]
    total = sum(r[0] for r in rows)
    print(f"{mode}: host issue {host * 1e3:.2f} ms/step; wall {wall * 1e3:.2f} ms/step, kernels {total:.2f} "
          f"(GPU idle {wall * 1e3 - total:.2f})")
    for ms, n, key in sorted(rows, reverse=True)[:top]:
        print(f"  {ms:8.3f} ms {n:5d}x  {key[:100]}")


def measure(ex, c, mode: str, warmup: int, steps: int, profile: int = 0):
    """(tokens per second, peak bytes) of `mode`'s training step; `profile`: see the module doc."""
    import torch
    model = ex.make(c, tilec=mode.startswith("tilec"))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step_fn = torch.compile(model, fullgraph=True) if mode.endswith("compile") else model
    ids, labels = ex.batch(c, 0)

    def step():
        opt.zero_grad(set_to_none=True)
        step_fn(ids, labels).backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    if profile:
        _profile(step, mode, profile)
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000.0
    peak = torch.cuda.max_memory_allocated()
    del model, opt, step_fn
    gc.collect()
    torch.cuda.empty_cache()
    return c.batch * c.seq * steps / seconds, peak


def main(argv=None) -> int:
    import torch
    ex = _example()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "batch"):
        p.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(ex.Config, f))
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--results", help="write bench/results.py's schema here")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="print host time and the N top kernels per mode")
    a = p.parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"--modes: unknown {bad}; choose from {', '.join(MODES)}")
    if not torch.cuda.is_available():
        print("train_step needs an NVIDIA GPU")
        return 2
    c = ex.Config(**{f: getattr(a, f) for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq",
                                                "batch")})
    name = (f"llama {c.layers}x{c.hidden} heads {c.heads}/{c.kv_heads} ffn {c.ffn} vocab {c.vocab} "
            f"seq {c.seq} batch {c.batch} bf16 train step")
    got = {}
    for mode in modes:
        got[mode] = measure(ex, c, mode, a.warmup, a.steps, a.profile)
        tps, peak = got[mode]
        base = got.get("eager")
        rel = f"  ({tps / base[0]:.2f}x eager tokens/s, {peak / base[1]:.2f}x its memory)" if base else ""
        print(f"{mode:14s} {tps:12.0f} tokens/s   peak {peak / 2**30:7.2f} GiB{rel}", flush=True)
    if a.results:
        sys.path.insert(0, str(ROOT))
        from bench.results import row, write
        base = got.get("eager")
        rows = []
        for mode, (tps, peak) in got.items():
            extra = ("eager", base[0]) if base and mode != "eager" else (None, None)
            extra_m = ("eager", float(base[1])) if base and mode != "eager" else (None, None)
            rows.append(row(name, mode, tps, "items/s", *extra))
            rows.append(row(name, f"{mode} peak memory", float(peak), "bytes", *extra_m))
        write(a.results, rows, torch.cuda.get_device_name())
    return 0


if __name__ == "__main__":
    sys.exit(main())
