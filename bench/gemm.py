"""GEMM throughput: tilec's stdlib matmul vs torch.matmul (cuBLAS) vs a Triton matmul.

    python bench/gemm.py [--quick] [--dtypes bf16,f16,tf32,f8e4m3,f8e5m2] [--json FILE] [--variants]
                         [--shapes M,N,K ...] [--compare-split-k]

Shapes: square 1024..8192, and LLM shapes (M in {1, 16, 128, 4096, 16384} against
weights K x N of 4096x4096, 4096x14336, 14336x4096), or those given by --shapes. With
--compare-split-k, shapes where config_for splits K are also timed without split-K
(config_for(..., allow_split_k=False), the choice before split-K). Each measurement is the median
of triton.testing.do_bench on fresh random data; TFLOP/s = 2 M N K / time. Each
tilec configuration's ptxas register/spill report is printed with it. Prints a
table, then one JSON line (also written to --json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import triton
import triton.language as tl

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.runtime.driver import get_device
from tilec.specialize import parse_signature
from tilec.target import Target
from tilec.stdlib_kernels import matmul
from tilec.stdlib_kernels.matmul import MatmulConfig, config_for, signature

try:  # as a package module (tests) or as a script (bench/ first on sys.path)
    from bench import convert
except ImportError:
    import convert  # type: ignore[no-redef]

SPLIT_SHAPES = [(m, n, k) for m in (1, 16, 128) for (k, n) in [(4096, 4096), (4096, 14336), (14336, 4096)]] + [
    (1024, 1024, 1024)]   # the shapes with few output tiles, where split-K applies

SQUARE = [1024, 2048, 4096, 8192]
LLM_M = [1, 16, 128, 4096, 16384]
WEIGHTS = [(4096, 4096), (4096, 14336), (14336, 4096)]
TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32, "f8e4m3": torch.float8_e4m3fn,
                "f8e5m2": torch.float8_e5m2}
# tf32 and f8: B column-major (K-major, the only B layout wgmma takes for them), for every
# implementation; f8 against torch._scaled_mm (per-tensor scales, bf16 out), no Triton


@triton.jit
def _triton_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # The standard grouped-order Triton matmul.
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    rows = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _triton_config(m: int, n: int, itemsize: int):
    # Configurations of Triton's own Hopper matmul examples: large tiles for large problems;
    # f32 (tf32) operands take half the K step to fit in shared memory.
    k_scale = 2 // itemsize if itemsize <= 2 else 1
    half = 2 if itemsize == 4 else 1
    if m >= 128 and n >= 256:
        cfg = dict(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=3)
    elif m >= 64:
        cfg = dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=4, num_stages=4)
    else:
        cfg = dict(BM=16, BN=128, BK=128, GROUP_M=8, num_warps=4, num_stages=4)
    cfg["BK"] = cfg["BK"] * k_scale // half
    return cfg


def triton_matmul(a, b, c):
    m, k = a.shape
    n = b.shape[1]
    cfg = _triton_config(m, n, a.element_size())
    grid = (triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"]),)
    _triton_matmul[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), **cfg)
    return c


def _bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def _report(m: int, n: int, k: int, dname: str, config=None) -> str:
    """The ptxas register/spill report of the configuration matmul launches for this shape
    (or of `config`)."""
    sig, cfg = signature(m, n, k, "f32" if dname == "tf32" else dname, allow_tf32=dname == "tf32",
                         target=Target.current(), config=config, scaled=dname.startswith("f8"),
                         b_col_major=dname == "tf32" or dname.startswith("f8"))
    ck = compile_kernel(cfg.kernel, parse_signature(cfg.kernel, sig),
                        CompileOptions(num_warps=cfg.num_warps, num_stages=cfg.num_stages, arch=get_device().arch,
                                       warp_specialize=cfg.warp_specialize, cluster=cfg.cluster))
    r = ck.metadata["ptxas"]
    return (f"{_name(cfg)}: {r['registers']} regs, spills {r['spill_stores']}/{r['spill_loads']}")


def _name(cfg: MatmulConfig) -> str:
    return (f"{cfg.bm}x{cfg.bn}x{cfg.bk} w{cfg.num_warps} s{cfg.num_stages}"
            + (" persistent" if cfg.persistent else "") + (f" split{cfg.split_k}" if cfg.split_k > 1 else "")
            + (" ws" if cfg.warp_specialize else "") + (f" cluster{cfg.cluster}" if cfg.cluster > 1 else ""))


def _sm_count() -> int:
    return Target.current().sm_count


def _no_split(m: int, n: int, k: int, dname: str):
    """config_for's choice without split-K for this shape, or None where it does not split."""
    dtype = tc.float32 if dname == "tf32" else tc.dtypes.DType.get(dname)
    args = (m, n, k, dtype, 1, Target.current())
    if config_for(*args, tensor_cores=True).split_k == 1:
        return None
    return config_for(*args, tensor_cores=True, allow_split_k=False)


def run(shapes, dtypes, compare_cp_async=False, compare_split_k=False):
    rows = []
    for dname in dtypes:
        dtype = TORCH_DTYPES[dname]
        torch.backends.cuda.matmul.allow_tf32 = dname == "tf32"
        for (m, n, k) in shapes:
            f8 = dname.startswith("f8")
            a = torch.randn(m, k, device="cuda").to(dtype)
            b = torch.randn(n, k, device="cuda").to(dtype).t() if f8 or dname == "tf32" else \
                torch.randn(k, n, device="cuda", dtype=dtype)
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16 if f8 else dtype)
            flops = 2.0 * m * n * k
            row = {"dtype": dname, "M": m, "N": n, "K": k}
            if f8:
                one = torch.ones((), device="cuda")
                fns = {"tilec": lambda: matmul(a, b, out=c, scale_a=1.0, scale_b=1.0),
                       "cublas": lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)}
            else:
                fns = {"tilec": lambda: matmul(a, b, out=c, allow_tf32=dname == "tf32"),
                       "cublas": lambda: torch.matmul(a, b, out=c),
                       "triton": lambda: triton_matmul(a, b, c)}
            if compare_cp_async:  # the same configuration on the cp.async ring instead of TMA
                fns["tilec_cp_async"] = lambda: matmul(a, b, out=c, allow_tf32=dname == "tf32", tma=False)
            no_split = _no_split(m, n, k, dname) if compare_split_k and not f8 else None
            if no_split is not None:
                fns["tilec_no_split"] = lambda: matmul(a, b, out=c, allow_tf32=dname == "tf32", config=no_split)
                row["no_split_config"] = _name(no_split)
            for name, fn in fns.items():
                try:
                    fn()
                    torch.cuda.synchronize()
                    row[name] = flops / _bench(fn) / 1e9
                except Exception as e:  # a failing implementation is reported, not fatal
                    row[name] = None
                    row[name + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            ref = a.double() @ b.double() if m * n * k <= 2 ** 33 else None
            if ref is not None:
                matmul(a, b, out=c, allow_tf32=dname == "tf32", scale_a=1.0 if f8 else None)
                row["rel_err"] = ((c.double() - ref).abs().max() / ref.abs().max()).item()
            try:
                row["config"] = _report(m, n, k, dname)
            except Exception as e:
                row["config"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            _print_row(row)
    return rows


def _variants():
    """(shape, configurations) pairs: config_for's choice first, then the alternatives it was
    chosen against (old choices, persistent scheduling, wider K steps for skinny M, split-K
    with other tiles and slice counts)."""
    sm = _sm_count()

    def c(bm, bn, bk, w, s, persistent=False, split=1, ws=False, cluster=1):
        return MatmulConfig(bm, bn, bk, w, s, persistent=persistent, sm_count=sm, split_k=split, warp_specialize=ws,
                            cluster=cluster)

    def skinny(bn_plain):   # M = 1, 16: the tile without split, and split-K around the chosen 4 slices
        return [c(16, bn_plain, 128, 4, 4), c(16, 64, 128, 4, 4, split=2), c(16, 64, 128, 4, 4, split=8),
                c(16, 128, 128, 4, 4, split=4)]

    def m128():             # M = 128 against a 4096-wide weight: 128 x 128 tiles, split 4 chosen
        return [c(64, 64, 64, 4, 4), c(128, 128, 64, 8, 4, split=2), c(128, 256, 64, 8, 4, split=8),
                c(64, 64, 64, 4, 4, split=2), c(128, 64, 64, 4, 4, split=2)]
    table = {
        (1024, 1024, 1024): [c(64, 64, 64, 4, 4), c(128, 128, 64, 8, 4), c(64, 128, 64, 4, 4, split=2),
                             c(128, 128, 64, 8, 4, split=4)],
        (2048, 2048, 2048): [c(128, 128, 64, 8, 3), c(128, 128, 64, 8, 4, True), c(128, 256, 64, 8, 4),
                             c(128, 256, 64, 8, 4, True)],
        (4096, 4096, 4096): [c(128, 256, 64, 8, 4), c(128, 256, 64, 8, 4, ws=True), c(128, 256, 64, 8, 4, ws=True, cluster=2),
                             c(128, 256, 64, 8, 4, True, ws=True, cluster=2)],
        (8192, 8192, 8192): [c(128, 256, 64, 8, 4), c(128, 256, 64, 8, 4, ws=True), c(128, 256, 64, 8, 4, ws=True, cluster=2),
                             c(128, 256, 64, 8, 4, True, ws=True, cluster=2)],
        (1, 4096, 4096): skinny(64),
        (16, 4096, 4096): skinny(64),
        (1, 4096, 14336): skinny(64),
        (16, 4096, 14336): skinny(64) + [c(16, 32, 128, 4, 4, split=4)],
        (1, 14336, 4096): [c(16, 64, 128, 4, 4, split=2)],
        (16, 14336, 4096): [c(16, 64, 128, 4, 4, split=2), c(16, 128, 128, 4, 4, split=2)],
        (128, 4096, 4096): m128() + [c(128, 128, 64, 8, 4, split=4, ws=True), c(128, 256, 64, 8, 4, split=8, ws=True)],
        (128, 4096, 14336): m128() + [c(128, 128, 64, 8, 4, split=8)],
        (128, 14336, 4096): [c(128, 128, 64, 8, 4), c(128, 256, 64, 8, 4, split=2), c(128, 128, 64, 8, 4, split=2)],
    }
    return [(shape, [config_for(*shape, tc.bfloat16, 1, Target.current(), tensor_cores=True)] + alts)
            for shape, alts in table.items()]


def run_variants(dname="bf16", only=None):
    """Time each candidate configuration of _variants() (of the shapes in `only`, if given)
    beside cuBLAS; error against cuBLAS's."""
    rows = []
    dtype = TORCH_DTYPES[dname]
    for (m, n, k), cfgs in _variants():
        if only is not None and (m, n, k) not in only:
            continue
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        c = torch.empty(m, n, device="cuda", dtype=dtype)
        flops = 2.0 * m * n * k
        ref = torch.matmul(a, b).float()
        cublas = flops / _bench(lambda: torch.matmul(a, b, out=c)) / 1e9
        for i, cfg in enumerate(cfgs):
            row = {"dtype": dname, "M": m, "N": n, "K": k, "config": _name(cfg), "default": i == 0,
                   "cublas": cublas}
            try:
                matmul(a, b, out=c, config=cfg)
                torch.cuda.synchronize()
                row["err_vs_cublas"] = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                row["tilec"] = flops / _bench(lambda: matmul(a, b, out=c, config=cfg)) / 1e9
                row["ptxas"] = _report(m, n, k, dname, cfg)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _shape(text: str):
    try:
        m, n, k = (int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--shapes takes M,N,K triples of ints (or 'split'), got {text!r}") from None
    return m, n, k


def _fmt(x):
    return "   -  " if x is None else f"{x:6.1f}"


def _print_row(r):
    ratio = r["tilec"] / r["cublas"] if r.get("tilec") and r.get("cublas") else None
    vs_tr = r["tilec"] / r["triton"] if r.get("tilec") and r.get("triton") else None
    print(f"{r['dtype']:5} {r['M']:6} {r['N']:6} {r['K']:6} | {_fmt(r.get('tilec'))} {_fmt(r.get('cublas'))} "
          f"{_fmt(r.get('triton'))} | {'  - ' if ratio is None else f'{ratio:4.2f}'} "
          f"{'  - ' if vs_tr is None else f'{vs_tr:4.2f}'} | {r.get('config', '')}"
          + (f" | err {r['rel_err']:.1e}" if "rel_err" in r else "")
          + (f" | cp.async ring {_fmt(r['tilec_cp_async'])}" if r.get("tilec_cp_async") else "")
          + (f" | no split-K {_fmt(r['tilec_no_split'])} ({r['no_split_config']})" if r.get("tilec_no_split") else "")
          + "".join(f" | {k}: {v}" for k, v in r.items() if k.endswith("_error")), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default="bf16,f16,tf32")
    p.add_argument("--quick", action="store_true", help="4096 and 8192 squares only")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--results", help="also write the rows in bench/results.py's schema (python -m bench.compare, bench.tables)")
    p.add_argument("--variants", action="store_true",
                   help="time config_for's choice against alternative configurations (bf16)")
    p.add_argument("--compare-cp-async", action="store_true", help="also time tilec with tma=False")
    p.add_argument("--compare-split-k", action="store_true",
                   help="also time shapes that config_for splits with its choice without split-K")
    p.add_argument("--shapes", nargs="+", metavar="M,N,K",
                   help="these shapes instead of the default list ('split': the few-tile shapes split-K is for); "
                        "with --variants, only the variants of these shapes")
    args = p.parse_args(argv)
    shapes = [(s, s, s) for s in ([4096, 8192] if args.quick else SQUARE)]
    if not args.quick:
        shapes += [(m, n, k) for (k, n) in WEIGHTS for m in LLM_M]
    if args.shapes:
        shapes = [t for x in args.shapes for t in (SPLIT_SHAPES if x == "split" else [_shape(x)])]
    dev = torch.cuda.get_device_name(0)
    print(f"# {dev}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.strftime('%Y-%m-%d')}; TFLOP/s (median of do_bench)")
    print("dtype      M      N      K |  tilec cublas triton | t/cb t/tr | tilec config: ptxas")
    if args.variants:
        rows = run_variants(only=shapes if args.shapes else None)
    else:
        rows = run(shapes, [d for d in args.dtypes.split(",") if d], args.compare_cp_async, args.compare_split_k)
    out = {"device": dev, "date": time.strftime("%Y-%m-%d"), "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))
    convert.save(args.results, convert.gemm_rows(rows), dev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
