"""`tilec explain` and `tilec bench`: a kernel's counted work and roofline from the shell.

    tilec explain FILE:KERNEL [--sig SIG] [--shape x=4096x4096 --shape n=1000 ...] [--grid G]
    tilec bench   FILE:KERNEL [--sig SIG] --shape ... [--grid G] [--baseline "torch expr"]

`--shape name=AxB` gives an array argument's extents (contiguous), `--shape name=N` an
int argument's value. Without `--grid`, the grid is the one that covers the first store
whose tile indices are program ids (one program per output tile); a kernel that computes
its tile from the program id otherwise (a swizzled GEMM) needs `--grid`.
"""
from __future__ import annotations

import statistics
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .roofline import Report, format_count, normalize, report_from_env, work_of
from .limits import limits_for
from .workcount import count_work

__all__ = ["parse_shapes", "environment", "infer_grid", "static_lines", "explain_text", "bench_lines"]


def parse_shapes(items: Optional[Sequence[str]]) -> Dict[str, Tuple[int, ...]]:
    """{name: extents} from ["x=4096x4096", "n=1000"] (a scalar: a 1-tuple); ValueError
    naming the entry that is not `name=AxB`."""
    out: Dict[str, Tuple[int, ...]] = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        name = name.strip()
        try:
            if not sep or not name.isidentifier():
                raise ValueError
            ext = tuple(int(d) for d in dims.lower().replace(",", "x").split("x"))
            if any(d < 0 for d in ext):
                raise ValueError
        except ValueError:
            raise ValueError(f"--shape expects name=AxB (extents, e.g. x=4096x1024) or name=N (an int "
                             f"argument), got {item!r}") from None
        if name in out:
            raise ValueError(f"--shape gives {name!r} twice")
        out[name] = ext
    return out


def environment(spec, shapes: Dict[str, Tuple[int, ...]]) -> Tuple[Dict[Any, int], List[str]]:
    """The evaluation environment of a specialization's run-time arguments given `shapes`
    (contiguous strides), and the names of those `shapes` leaves out. ValueError for a name
    that is not a run-time argument, or extents that do not match the argument's rank."""
    from .ir import ViewType
    params = {p.name: p for p in spec.runtime_params}
    for name in shapes:
        if name not in params:
            raise ValueError(f"--shape names {name!r}, which is not a run-time argument of the kernel "
                             f"(its arguments: {', '.join(params)})")
    env: Dict[Any, int] = {}
    missing = []
    for name, p in params.items():
        ext = shapes.get(name)
        if isinstance(p.type, ViewType):
            if ext is None:
                missing.append(name)
                continue
            if len(ext) != p.type.rank:
                raise ValueError(f"--shape {name}: the argument is rank {p.type.rank}, got {len(ext)} extent(s)")
            stride = 1
            for d in reversed(range(len(ext))):
                env[("shape", name, d)] = ext[d]
                env[("stride", name, d)] = stride
                stride *= max(ext[d], 1)
        elif getattr(p.type, "dtype", None) is not None and p.type.dtype.is_int:
            if ext is None:
                missing.append(name)
            elif len(ext) != 1:
                raise ValueError(f"--shape {name}: an int argument takes one value (name=N), got {len(ext)}")
            else:
                env[name] = ext[0]
    return env, missing


def infer_grid(work: Dict[str, Any], env: Dict[Any, int]) -> Optional[Tuple[int, int, int]]:
    """The grid of one program per tile of the first view store whose indices are program
    ids, constants or loop variables (index mode); None when no store is that plain."""
    for t in work["terms"]:
        if t["kind"] != "store" or "axes" not in t or t["mode"] != "index":
            continue
        grid, ok = [1, 1, 1], True
        for d, ax in enumerate(t["axes"]):
            idx = ax["idx"]
            if idx is not None and idx[0] == "pid" and ("shape", t["view"], d) in env:
                grid[idx[1]] = max(1, -(-env[("shape", t["view"], d)] // ax["T"]))
            elif idx is None or idx[0] not in ("c", "loop"):   # a loop walks the tiles of one program
                ok = False
        if ok:
            return tuple(grid)
    return None


def static_lines(compiled) -> List[str]:
    """Per program, what each load, store, dot and float op moves or computes, grouped by
    source line, and where a loop multiplies it."""
    work = work_of(compiled)
    loops = work["loops"]
    rows: Dict[Tuple, int] = {}
    for t in work["terms"]:
        what = {"load": "load", "store": "store", "atomic": "atomic", "tc": "tensor-core", "cuda": "CUDA-core"}[t["kind"]]
        if "view" in t:
            what += f" {t['view']}"
        per = f" per iteration of {' and '.join('the loop at ' + loops[i]['where'] for i in t['loops'])}" \
            if t["loops"] else ""
        key = (t["where"], what, t["dtype"], "B" if t["kind"] in ("load", "store", "atomic") else "FLOP", per)
        rows[key] = rows.get(key, 0) + t["numel"] * t["size"]
    width = max((len(k[0]) for k in rows), default=0)
    lines = ["per program:"]
    for (where, what, dtype, unit, per), n in rows.items():
        lines.append(f"  {where.ljust(width)}  {what}: {format_count(n, unit)} {dtype}{per}")
    lines += [f"  note: {n}" for n in work.get("notes", [])]
    return lines


def resource_line(compiled, target) -> str:
    from .remarks import occupancy
    meta = compiled.metadata
    ptxas = meta.get("ptxas") or {}
    regs = ptxas.get("registers")
    threads = compiled.num_threads
    shared = int(meta.get("shared", 0))
    text = f"resources: {threads} threads, {shared} B shared memory ({meta.get('num_stages')} stages)"
    if regs is None:
        return text + "; registers unknown (ptxas did not run)"
    n, why = occupancy(regs, threads, shared, target)
    spills = int(ptxas.get("spill_stores", 0)) + int(ptxas.get("spill_loads", 0))
    return text + f", {regs} registers/thread, {spills} B spilled, {n} program(s)/SM on {target.arch} (limited by {why})"


def explain_text(compiled, spec, shapes, grid, target) -> str:
    """What `tilec explain` prints: the per-program work and resources, and with shapes the
    totals and the roofline bound on `target`'s part."""
    lines = [f"kernel {compiled.name} ({compiled.metadata.get('arch')}, {compiled.num_warps} warps)"]
    lines += static_lines(compiled)
    lines.append(resource_line(compiled, target))
    if not shapes:
        lines.append("(give --shape for every array and int argument to see the totals and the roofline bound)")
        return "\n".join(lines)
    env, missing = environment(spec, shapes)
    if missing:
        raise ValueError(f"--shape is missing for {', '.join(missing)} (every array: name=AxB; every int: name=N)")
    g = _grid(work_of(compiled), env, grid)
    rep = report_from_env(compiled, env, g, limits_for(target.device))
    lines.append(f"grid {'x'.join(map(str, g))}" + ("" if grid else " (inferred: one program per output tile)"))
    # its first line repeats the kernel's name, its resources line the one above
    lines += [ln for ln in str(rep).splitlines()[1:] if not ln.startswith("  resources:")]
    return "\n".join(lines)


def _grid(work, env, grid) -> Tuple[int, int, int]:
    if grid:
        return normalize(grid)
    g = infer_grid(work, env)
    if g is None:
        raise ValueError("cannot infer the grid (no store indexed by program ids alone): give --grid, e.g. --grid 64,1")
    return g


def parse_grid(text: Optional[str]):
    if text is None:
        return None
    try:
        g = tuple(int(x) for x in text.replace("x", ",").split(","))
        return normalize(g)
    except ValueError:
        raise ValueError(f"--grid expects 1 to 3 non-negative ints like 128 or 64,8, got {text!r}") from None


# ----------------------------------------------------------------------------- bench
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64", "i32": "int32",
                 "i64": "int64", "i16": "int16", "i8": "int8", "u8": "uint8", "i1": "bool",
                 "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


def bench_grid(kernel, spec, shapes, grid) -> Tuple[int, int, int]:
    """The grid `tilec bench` launches on (checks `shapes` first: no GPU is needed)."""
    env, missing = environment(spec, shapes)
    if missing:
        raise ValueError(f"--shape is missing for {', '.join(missing)} (every array: name=AxB; every int: name=N)")
    return _grid(count_work(kernel.ir(spec)) if not grid else None, env, grid)


def bench_lines(kernel, spec, options: Dict[str, Any], shapes, g, baseline: Optional[str], iters: int,
                warmup: int = 3) -> List[str]:
    """Time `kernel` on `g` with random inputs of `shapes` (torch CUDA tensors) `iters`
    times under tc.profile; the roofline line, and the baseline expression's time when given."""
    import torch
    from .runtime.profile import Profile
    from .ir import ViewType
    env, _ = environment(spec, shapes)
    args, tensors = [], {}
    for p in spec.params:
        if not p.is_runtime:
            continue
        if isinstance(p.type, ViewType):
            dt = getattr(torch, _TORCH_DTYPES[p.type.dtype.name])
            ext = shapes[p.name]
            if dt.is_floating_point:
                t = torch.randn(ext, device="cuda", dtype=torch.float32).to(dt)
            elif dt == torch.bool:
                t = torch.rand(ext, device="cuda") > 0.5
            else:
                t = torch.randint(0, 64, ext, device="cuda", dtype=dt)
            tensors[p.name] = t
            args.append(t)
        elif getattr(p.type, "dtype", None) is not None and p.type.dtype.is_float:
            args.append(1.0)          # a float scalar (a scale): its value does not change the work
        else:
            args.append(env.get(p.name, 0))
    names = [p.name for p in spec.runtime_params]
    consts = spec.constexprs
    runtime_kw = dict(zip(names, args))

    def run():
        kernel[g](**runtime_kw, **consts, **options)

    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    with Profile() as prof:
        for _ in range(iters):
            run()
    (row, *_) = prof.rows()
    rep: Report = row.report
    out = [f"{row.name}: grid {'x'.join(map(str, g))}, {row.calls} runs, median {row.seconds * 1e6:.2f} us, "
           f"{format_count(rep.dram_bytes, 'B')} at {row.gbps:.0f} GB/s, {format_count(rep.flops, 'FLOP')} at "
           f"{row.tflops:.2f} TFLOP/s"]
    b = rep.bound
    if b is not None:
        out.append(f"roofline: {b.limit}-bound on {b.device}, bound {b.seconds * 1e6:.2f} us "
                   f"({b.bandwidth / 1e9:.0f} GB/s {b.bandwidth_source}): {row.percent_of_bound:.1f}% of the bound")
    else:
        out.append("roofline: no limits known for this device")
    if baseline:
        scope = {"torch": torch, "F": torch.nn.functional, **tensors, **{k: v for k, v in runtime_kw.items()
                                                                          if k not in tensors}}
        try:
            fn = eval(compile(f"lambda: ({baseline})", "<baseline>", "eval"), scope)  # noqa: S307 - the user's own expression
            for _ in range(warmup):
                fn()
        except Exception as e:
            raise ValueError(f"--baseline {baseline!r} failed: {type(e).__name__}: {e}") from None
        times = []
        for _ in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        t = statistics.median(times)
        out.append(f"baseline {baseline}: median {t * 1e6:.2f} us; tilec/baseline time {row.seconds / t:.3f}")
    return out


def no_gpu_reason() -> Optional[str]:
    """Why `tilec bench` cannot run here (None: it can)."""
    try:
        from .runtime import driver
        if not driver.is_available():
            return "no CUDA GPU found"
    except Exception as e:  # noqa: BLE001 - no driver at all
        return f"no CUDA driver ({type(e).__name__})"
    try:
        import torch  # noqa: F401
    except ImportError:
        return "tilec bench makes its random inputs with torch, which is not installed"
    return None


def write(lines: List[str]) -> None:
    sys.stdout.write("\n".join(lines) + "\n")
