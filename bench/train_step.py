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


def measure(ex, c, mode: str, warmup: int, steps: int):
    """(tokens per second, peak bytes) of `mode`'s training step."""
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
        got[mode] = measure(ex, c, mode, a.warmup, a.steps)
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
