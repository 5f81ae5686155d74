"""Memory-bound stdlib ops against the copy bandwidth, torch eager and torch.compile.

    python bench/membound.py [--quick] [--ops softmax,layer_norm] [--shapes 1024x65536] [--no-clusters]
                             [--json out.json] [--plot out.png]

For each op and each (shape, dtype) row: the time of the tilec op (median,
triton.testing.do_bench when Triton is installed, else CUDA events), the
achieved GB/s counting the bytes that must move once (inputs read once,
outputs written once), the ratio to a device-to-device copy of the same number
of bytes measured in the same run, and the speedup over torch eager and over
torch.compile of the same op (a torch.compile failure is reported, not fatal).
Prints a table, writes JSON, and saves a plot of GB/s against bytes moved per
op when matplotlib is installed.

Adding an op: append a `BenchOp` to OPS (inputs builder, tilec call, torch
reference, bytes moved, cases).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Tuple

import tilec.stdlib_kernels as sk

try:  # as a package module (tests) or as a script (bench/ first on sys.path)
    from bench import convert
except ImportError:
    import convert  # type: ignore[no-redef]

Case = Tuple[Tuple[int, ...], str]   # (shape, torch dtype name)


@dataclass
class BenchOp:
    name: str
    make: Callable            # (torch, shape, dtype) -> tuple of input tensors
    tilec: Callable           # (*inputs) -> result
    torch: Callable           # (*inputs) -> result, in torch
    bytes_moved: Callable     # (*inputs) -> bytes that must move once
    cases: List[Case]
    quick: List[Case] = field(default_factory=list)   # the --quick subset (default: the first case)


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _x(torch, shape, dtype):
    return (torch.randn(shape, device="cuda", dtype=torch.float32) * 3).to(dtype),


def _x_w_b(torch, shape, dtype):
    n = shape[-1]
    return _x(torch, shape, dtype) + (torch.randn(n, device="cuda", dtype=dtype),
                                      torch.randn(n, device="cuda", dtype=dtype))


def _logits_target(torch, shape, dtype):
    return _x(torch, shape, dtype) + (torch.randint(0, shape[-1], shape[:-1], device="cuda"),)


def _torch_rms_norm(x, w, eps=1e-6):
    import torch  # noqa: PLC0415
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _F():
    import torch.nn.functional as F  # noqa: PLC0415
    return F


ROWS = [((4096, 4096), "float16"), ((16384, 8192), "bfloat16"), ((8192, 8192), "float32"),
        ((262144, 128), "float16"), ((32, 262144), "float32"), ((1024, 262144), "bfloat16"),
        ((1024, 262144), "float32"), ((4096, 50257), "bfloat16")]
NORM_ROWS = [((4096, 4096), "float16"), ((16384, 8192), "bfloat16"), ((8192, 8192), "float32"),
             ((65536, 1024), "float16"), ((1024, 65536), "bfloat16"), ((4096, 65536), "bfloat16"),
             ((4096, 65536), "float32"), ((16384, 5120), "bfloat16"),
             ((16384, 7001), "bfloat16")]   # rows off 32-byte sectors: windows, shifted w and b
REDUCE_ROWS = [((4096, 4096), "float16"), ((16384, 8192), "float32"), ((8192, 16384), "bfloat16")]

OPS: List[BenchOp] = [
    BenchOp("softmax", _x, lambda x: sk.softmax(x), lambda x: x.softmax(-1),
            lambda x: 2 * _nbytes(x), ROWS),
    BenchOp("log_softmax", _x, lambda x: sk.log_softmax(x), lambda x: x.log_softmax(-1),
            lambda x: 2 * _nbytes(x), ROWS),
    BenchOp("layer_norm", _x_w_b, lambda x, w, b: sk.layer_norm(x, w, b),
            lambda x, w, b: _F().layer_norm(x, (x.shape[-1],), w, b), lambda x, w, b: 2 * _nbytes(x) + _nbytes(w, b),
            NORM_ROWS),
    BenchOp("rms_norm", _x_w_b, lambda x, w, b: sk.rms_norm(x, w), lambda x, w, b: _torch_rms_norm(x, w),
            lambda x, w, b: 2 * _nbytes(x) + _nbytes(w), NORM_ROWS),
    BenchOp("cross_entropy", _logits_target, lambda x, t: sk.cross_entropy(x, t),
            lambda x, t: _F().cross_entropy(x.float(), t), lambda x, t: _nbytes(x, t),
            [((4096, 32000), "bfloat16"), ((16384, 32000), "bfloat16"), ((4096, 128256), "bfloat16"),
             ((8192, 32000), "float32")]),
    BenchOp("sum_last", _x, lambda x: sk.sum(x, -1), lambda x: x.sum(-1), lambda x: _nbytes(x), REDUCE_ROWS),
    BenchOp("sum_first", _x, lambda x: sk.sum(x, 0), lambda x: x.sum(0), lambda x: _nbytes(x), REDUCE_ROWS),
    BenchOp("max_last", _x, lambda x: sk.amax(x, -1), lambda x: x.amax(-1), lambda x: _nbytes(x), REDUCE_ROWS),
    BenchOp("cumsum", _x, lambda x: sk.cumsum(x), lambda x: x.cumsum(-1), lambda x: 2 * _nbytes(x),
            [((4096, 4096), "float16"), ((16384, 8192), "float32"), ((65536, 2048), "bfloat16")]),
]

# ----------------------------------------------------------------------------- elementwise ops, dropout, transpose
EW = [((4096, 4096), "float16"), ((16384, 8192), "bfloat16"), ((8192, 8192), "float32")]


def _x_y(torch, shape, dtype):
    return _x(torch, shape, dtype) + _x(torch, shape, dtype)


def _x_bias(torch, shape, dtype):
    return _x(torch, shape, dtype) + (torch.randn(shape[-1], device="cuda", dtype=dtype),)


def _rope_inputs(torch, shape, dtype):
    b, s, h, d = shape
    ang = torch.rand(s, d // 2, device="cuda") * 6
    return _x(torch, shape, dtype) + (ang.cos(), ang.sin())


def _torch_rope(x, c, s):
    import torch  # noqa: PLC0415
    h = x.shape[-1] // 2
    c, s = c[None, :, None, :], s[None, :, None, :]
    a, b = x[..., :h].float(), x[..., h:].float()
    return torch.cat([a * c - b * s, b * c + a * s], -1).to(x.dtype)


OPS += [
    BenchOp("gelu", _x, lambda x: sk.gelu(x), lambda x: _F().gelu(x), lambda x: 2 * _nbytes(x), EW),
    BenchOp("silu_and_mul", _x, lambda x: sk.silu_and_mul(x),
            lambda x: _F().silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2:], lambda x: 1.5 * _nbytes(x),
            EW),
    BenchOp("add_bias", _x_bias, lambda x, b: sk.add(x, b), lambda x, b: x + b, lambda x, b: 2 * _nbytes(x), EW),
    BenchOp("mul", _x_y, lambda x, y: sk.mul(x, y), lambda x, y: x * y, lambda x, y: 3 * _nbytes(x), EW),
    BenchOp("rope", _rope_inputs, lambda x, c, s: sk.rope(x, c, s), _torch_rope,
            lambda x, c, s: 2 * _nbytes(x) + _nbytes(c, s),
            [((8, 4096, 32, 128), "bfloat16"), ((4, 2048, 32, 128), "float16")]),
    BenchOp("dropout", _x, lambda x: sk.dropout(x, 0.1, 1), lambda x: _F().dropout(x, 0.1),
            lambda x: 2 * _nbytes(x), EW),
    BenchOp("transpose", _x, lambda x: sk.transpose(x), lambda x: x.t().contiguous(), lambda x: 2 * _nbytes(x),
            [((8192, 8192), "float16"), ((8192, 8192), "float32")]),
    # any rank: (B, S, H, D) -> (B, H, S, D) moves rows of D whole (swap_copy_kernel); the last two
    # dimensions of (B, H, S, D) swapped transposes tiles per (B, H) (transpose_batched_kernel)
    BenchOp("transpose_heads", _x, lambda x: sk.transpose(x, 1, 2), lambda x: x.transpose(1, 2).contiguous(),
            lambda x: 2 * _nbytes(x), [((8, 4096, 32, 128), "bfloat16"), ((4, 2048, 32, 128), "float16")]),
    BenchOp("transpose_last2", _x, lambda x: sk.transpose(x, -1, -2), lambda x: x.transpose(-1, -2).contiguous(),
            lambda x: 2 * _nbytes(x), [((8, 32, 4096, 128), "bfloat16"), ((16, 2048, 1000), "float32")]),
]


# ----------------------------------------------------------------------------- backward (stdlib_kernels/backward.py, ...)
def _dy_y(torch, shape, dtype):
    return torch.randn(shape, device="cuda", dtype=dtype), _x(torch, shape, dtype)[0].softmax(-1)


def _torch_softmax_bwd(dy, y):
    import torch  # noqa: PLC0415
    return torch._softmax_backward_data(dy, y, -1, y.dtype)  # noqa: SLF001 - torch's own softmax backward


def _ln_bwd_inputs(torch, shape, dtype):
    x, w, b = _x_w_b(torch, shape, dtype)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [shape[-1]], w, b, 1e-5)   # mean, rstd: (rows, 1) f32
    return torch.randn(shape, device="cuda", dtype=dtype), x, w, b, mean, rstd


def _torch_ln_bwd(dy, x, w, b, mean, rstd):
    import torch  # noqa: PLC0415
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w, b, [True, True, True])


def _torch_ce_grad(x, t, label_smoothing=0.0):
    import torch  # noqa: PLC0415
    xr = x.detach().requires_grad_()
    loss = torch.nn.functional.cross_entropy(xr.float(), t, label_smoothing=label_smoothing)
    return torch.autograd.grad(loss, xr)[0]


OPS += [
    BenchOp("softmax_bwd", _dy_y, lambda dy, y: sk.softmax_backward(dy, y), _torch_softmax_bwd,
            lambda dy, y: 3 * _nbytes(dy), ROWS[:4]),
    BenchOp("layer_norm_bwd", _ln_bwd_inputs,
            lambda dy, x, w, b, m, r: sk.layer_norm_backward(dy, x, w, m.view(-1), r.view(-1), bias=b),
            _torch_ln_bwd, lambda dy, x, w, b, m, r: 3 * _nbytes(x) + 2 * _nbytes(w, b), NORM_ROWS[:4]),
    # the loss and dlogits in one pass (return_grad) against torch's forward and backward
    BenchOp("ce_grad", _logits_target, lambda x, t: sk.cross_entropy(x, t, return_grad=True), _torch_ce_grad,
            lambda x, t: 2 * _nbytes(x) + _nbytes(t), [((4096, 32000), "bfloat16"), ((4096, 128256), "bfloat16")]),
    # with label smoothing: one more read of the logits (the row sums) before the loss and gradient;
    # the bytes counted are those without it, so the % of copy shows what the extra read costs
    BenchOp("ce_grad_ls", _logits_target, lambda x, t: sk.cross_entropy(x, t, return_grad=True, label_smoothing=0.1),
            lambda x, t: _torch_ce_grad(x, t, 0.1), lambda x, t: 2 * _nbytes(x) + _nbytes(t),
            [((4096, 32000), "bfloat16"), ((4096, 128256), "bfloat16")]),
]


# ----------------------------------------------------------------------------- LLM ops: embedding, add_rms_norm
def _x_res_w(torch, shape, dtype):
    return _x(torch, shape, dtype) + _x(torch, shape, dtype) + (torch.randn(shape[-1], device="cuda", dtype=dtype),)


def _torch_add_rms_norm(x, r, w):
    h = x + r
    return _torch_rms_norm(h, w), h


def _ids_weight(torch, shape, dtype):
    """shape (tokens, vocabulary, dim): token ids and the embedding table."""
    tokens, vocab, dim = shape
    return torch.randint(0, vocab, (tokens,), device="cuda"), torch.randn(vocab, dim, device="cuda", dtype=dtype)


def _grad_ids(torch, shape, dtype):
    tokens, vocab, dim = shape
    return torch.randn(tokens, dim, device="cuda", dtype=dtype), torch.randint(0, vocab, (tokens,), device="cuda"), vocab


def _torch_embedding_bwd(g, ids, vocab):
    import torch  # noqa: PLC0415
    return torch.ops.aten.embedding_dense_backward(g, ids, vocab, -1, False)


EMB = [((16384, 128256, 2048), "bfloat16"), ((8192, 32000, 4096), "bfloat16"), ((4096, 50257, 768), "float32")]

OPS += [
    # x and residual read, y and h written; against torch's add then rms_norm
    BenchOp("add_rms_norm", _x_res_w, lambda x, r, w: sk.add_rms_norm(x, r, w), _torch_add_rms_norm,
            lambda x, r, w: 4 * _nbytes(x) + _nbytes(w), NORM_ROWS[:4]),
    BenchOp("embedding", _ids_weight, lambda i, w: sk.embedding(w, i), lambda i, w: _F().embedding(i, w),
            lambda i, w: 2 * i.numel() * w.shape[1] * w.element_size() + _nbytes(i), EMB),
    # the gradient read and dweight (the whole table) written, ids sorted first (torch.sort)
    BenchOp("embedding_bwd", _grad_ids, lambda g, i, v: sk.embedding_backward(g, i, v), _torch_embedding_bwd,
            lambda g, i, v: _nbytes(g, i) + v * g.shape[1] * g.element_size(), EMB),
]

# ----------------------------------------------------------------------------- timing
def _timer():
    """ms(fn) -> median milliseconds of one call."""
    try:
        from triton.testing import do_bench  # noqa: PLC0415
        return lambda fn: float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    except ImportError:
        pass
    import torch  # noqa: PLC0415

    def cuda_events(fn, reps=50):
        for _ in range(5):
            fn()
        cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # flush L2 between calls
        times = []
        for _ in range(reps):
            cache.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)
    return cuda_events


def _warm_up(torch, seconds: float = 1.0) -> None:
    """Copies for about a second first: an idle GPU clocks down, and the first case would
    be timed while the clocks ramp up."""
    import time  # noqa: PLC0415
    a = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()


def _compiled(torch, fn):
    try:
        return torch.compile(fn), None
    except Exception as e:  # noqa: BLE001 - reported in the table
        return None, f"{type(e).__name__}: {e}"


_COMPILED = {}


def _compiled_once(torch, op: BenchOp):
    """torch.compile of the op's torch reference, made once per op (new shapes recompile
    inside it, dynamically after the first)."""
    if op.name not in _COMPILED:
        _COMPILED[op.name] = _compiled(torch, op.torch)
    return _COMPILED[op.name]


def run_case(torch, ms, op: BenchOp, shape, dtype_name) -> dict:
    inputs = op.make(torch, shape, getattr(torch, dtype_name))
    moved = int(op.bytes_moved(*inputs))   # 1.5 x for silu_and_mul: a float
    copy_src = torch.empty(max(moved // 2, 1), dtype=torch.uint8, device="cuda")
    copy_dst = torch.empty_like(copy_src)
    row = {"op": op.name, "shape": list(shape), "dtype": dtype_name, "bytes": moved}
    row["copy_ms"] = ms(lambda: copy_dst.copy_(copy_src))          # reads and writes moved/2: moves `moved`
    row["tilec_ms"] = ms(lambda: op.tilec(*inputs))
    row["torch_ms"] = ms(lambda: op.torch(*inputs))
    compiled, err = _compiled_once(torch, op)
    if compiled is not None:
        try:
            compiled(*inputs)
            row["compile_ms"] = ms(lambda: compiled(*inputs))
        except Exception as e:  # noqa: BLE001 - torch.compile fails at the first call, too
            err = f"{type(e).__name__}: {e}"
    if err:
        row["compile_error"] = err.splitlines()[0][:200]
    row["tilec_gbs"] = moved / row["tilec_ms"] / 1e6
    row["copy_gbs"] = moved / row["copy_ms"] / 1e6
    row["vs_copy"] = row["tilec_gbs"] / row["copy_gbs"]
    row["vs_torch"] = row["torch_ms"] / row["tilec_ms"]
    if "compile_ms" in row:
        row["vs_compile"] = row["compile_ms"] / row["tilec_ms"]
    return row


# ----------------------------------------------------------------------------- output
def print_table(rows) -> None:
    head = f"{'op':<14} {'shape':<16} {'dtype':<9} {'MB':>8} {'GB/s':>8} {'copy':>8} {'%copy':>6} " \
           f"{'xeager':>7} {'xcompile':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        comp = f"{r['vs_compile']:.2f}" if "vs_compile" in r else "n/a"
        print(f"{r['op']:<14} {'x'.join(map(str, r['shape'])):<16} {r['dtype']:<9} {r['bytes'] / 1e6:>8.1f} "
              f"{r['tilec_gbs']:>8.0f} {r['copy_gbs']:>8.0f} {100 * r['vs_copy']:>5.0f}% {r['vs_torch']:>7.2f} "
              f"{comp:>8}")


def save_plot(rows, path: str) -> bool:
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    ops = sorted({r["op"] for r in rows})
    cols = min(len(ops), 3)
    fig, axes = plt.subplots((len(ops) + cols - 1) // cols, cols, figsize=(5 * cols, 3.5 * ((len(ops) + cols - 1) // cols)),
                             squeeze=False)
    for ax, op in zip(axes.flat, ops):
        mine = sorted((r for r in rows if r["op"] == op), key=lambda r: r["bytes"])
        x = [r["bytes"] / 1e6 for r in mine]
        ax.plot(x, [r["tilec_gbs"] for r in mine], "o-", label="tilec")
        ax.plot(x, [r["copy_gbs"] for r in mine], "k--", label="copy")
        ax.plot(x, [r["bytes"] / r["torch_ms"] / 1e6 for r in mine], "s:", label="torch eager")
        comp = [(r["bytes"] / 1e6, r["bytes"] / r["compile_ms"] / 1e6) for r in mine if "compile_ms" in r]
        if comp:
            ax.plot(*zip(*comp), "^:", label="torch.compile")
        ax.set_xscale("log")
        ax.set_title(op)
        ax.set_xlabel("MB moved")
        ax.set_ylabel("GB/s")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


# the tiny shape of an op's --host timing, by the rank of its cases ((tokens, vocabulary, dim) for
# the embeddings, (B, S, H, D) for rope and the head transposes)
_TINY = {2: (64, 64), 3: (64, 64, 64), 4: (2, 64, 4, 64)}


def host_overhead(torch, wanted, calls: int = 2000) -> List[dict]:
    """Per-call host time of each op at a tiny shape (64x64; the GPU is never the bound):
    wall time of `calls` back-to-back calls, synchronized once at the end."""
    rows = []
    for op in OPS:
        if wanted and op.name not in wanted:
            continue
        shape = _TINY[len(op.cases[0][0])]
        dtype = getattr(torch, op.cases[0][1])
        inputs = op.make(torch, shape, dtype)
        times = {}
        for side, fn in (("tilec", op.tilec), ("torch", op.torch)):
            for _ in range(50):
                fn(*inputs)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(*inputs)
            torch.cuda.synchronize()
            times[side] = (time.perf_counter() - t0) / calls * 1e6
        rows.append({"op": op.name, "shape": list(shape), "dtype": op.cases[0][1],
                     "tilec_us": times["tilec"], "torch_us": times["torch"]})
        print(f"  host {op.name}: tilec {times['tilec']:.1f} us, torch eager {times['torch']:.1f} us per call "
              f"(tilec / torch {times['tilec'] / times['torch']:.2f})",
              file=sys.stderr)
    return rows


def allocation_overhead(torch, calls: int = 2000) -> dict:
    """Host us per call of the ways to allocate a planned op's 64x64 f16 output from Python (a
    replay's `torch.empty(shape, dtype=, device=)` is part of every tilec time above)."""
    x = torch.empty((64, 64), dtype=torch.float16, device="cuda")
    dev, dt, shape = x.device, x.dtype, (64, 64)
    ways = {"torch.empty(shape, dtype=, device=)": lambda: torch.empty(shape, dtype=dt, device=dev),
            "x.new_empty(shape)": lambda: x.new_empty(shape),
            "torch.empty_like(x)": lambda: torch.empty_like(x)}
    out = {}
    for name, fn in ways.items():
        for _ in range(50):
            fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out[name] = (time.perf_counter() - t0) / calls * 1e6
        print(f"  host allocation {name}: {out[name]:.2f} us per call", file=sys.stderr)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one case per op")
    p.add_argument("--ops", default="", help="comma-separated op names (default: all): "
                   + ",".join(o.name for o in OPS))
    p.add_argument("--shapes", default="", help="comma-separated shapes to keep, as 1024x65536 (default: all)")
    p.add_argument("--json", default="membound.json", help="where to write the results")
    p.add_argument("--results", help="also write the rows in bench/results.py's schema (python -m bench.compare, bench.tables)")
    p.add_argument("--plot", default="membound.png", help="where to save the plot (needs matplotlib)")
    p.add_argument("--no-clusters", action="store_true",
                   help="long rows without thread-block clusters (the looped and split kernels), to compare")
    p.add_argument("--host", action="store_true", help="time each op's host path per call at tiny shapes instead of the bandwidth cases")
    args = p.parse_args(argv)
    import torch  # noqa: PLC0415
    if not torch.cuda.is_available():
        print("bench/membound.py needs a CUDA GPU and torch", file=sys.stderr)
        return 1
    if args.no_clusters:
        from tilec.stdlib_kernels import _cluster_rows  # noqa: PLC0415
        _cluster_rows.MAX_SOFTMAX_CHUNK = _cluster_rows.MAX_NORM_CHUNK = 0
    wanted = [s for s in args.ops.split(",") if s]
    unknown = set(wanted) - {o.name for o in OPS}
    if unknown:
        p.error(f"unknown ops: {', '.join(sorted(unknown))}")
    if args.host:
        host = host_overhead(torch, wanted)
        alloc = allocation_overhead(torch)
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "host": host, "allocation_us": alloc}, f, indent=1)
        return 0
    ms = _timer()
    _warm_up(torch)
    rows = []
    for op in OPS:
        if wanted and op.name not in wanted:
            continue
        for shape, dtype_name in ((op.quick or op.cases[:1]) if args.quick else op.cases):
            if args.shapes and "x".join(map(str, shape)) not in args.shapes.split(","):
                continue
            rows.append(run_case(torch, ms, op, shape, dtype_name))
            torch.cuda.empty_cache()  # the last case's inputs are gone: give their memory back
            r = rows[-1]
            print(f"  {op.name} {shape} {dtype_name}: {r['tilec_gbs']:.0f} GB/s, {100 * r['vs_copy']:.0f}% of copy, "
                  f"x{r['vs_torch']:.2f} eager, x{r.get('vs_compile', float('nan')):.2f} compile", file=sys.stderr)
    print_table(rows)
    meta = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "command": " ".join(["python", "bench/membound.py"] + (argv if argv is not None else sys.argv[1:])),
            "torch": torch.__version__, "python": platform.python_version()}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    convert.save(args.results, convert.membound_rows(rows), meta["device"])
    print(f"wrote {args.json}" + (f" and {args.plot}" if save_plot(rows, args.plot) else " (no matplotlib: no plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
