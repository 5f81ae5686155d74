"""The attention forward's candidate tilings per head dim: ptxas's report, and their time against SDPA.

    python bench/attention_configs.py [--dims 64,96,128,192,256,192/128] [--seq 4096] [--batch 32]
                                      [--heads 16] [--kv-heads 4] [--json FILE]
    python bench/attention_configs.py --ptxas [--arch sm_90a] [--dims ...]     (no GPU needed)

CANDIDATES lists, per tile head dims (q/k, v: the tensors' rounded up to powers of two), the
tilings (BM, BN, warps, stages) that assemble with no spills on sm_90a; whether a dot becomes
wgmma or mma.sync follows from the tile (lowering/gpu/wgmma_fragments.wgmma_plan) and is
printed. `attention.config_for` ships one of each list (tests/stdlib/test_attention_configs.py).

On a GPU each candidate runs through the stdlib's own plan with a config override,
`attention.plan(x, target, config=cfg)`, on f16 q, k, v of (batch, heads, seq, dim), causal
and not, against SDPA's flash and cuDNN backends on the same tensors. TFLOP/s = 4 · Z·H ·
S² · (d + dv) / 2 (halved for causal) / median time of triton.testing.do_bench, as the other
attention benches. Each
candidate's output is checked against a float64 reference on one (batch, head) first (the
"err" column). Prints a table (config_for's choice marked ^, then the fastest candidate of
each head dim and mask), then writes bench/results.py rows to --json. `--ptxas` compiles
each candidate for `--arch` and prints registers, spills and shared memory, with no GPU.
"""
from __future__ import annotations

import argparse
import importlib
import math
import sys
from typing import Dict, List, Tuple

try:  # as a package module (tests) or as a script (bench/ first on sys.path)
    from bench import results
except ImportError:
    import results  # type: ignore[no-redef]

A = importlib.import_module("tilec.stdlib_kernels.attention")
AttentionConfig, next_pow2 = A.AttentionConfig, A.next_pow2

# (BM, BN, warps, stages[, programs per SM[, warp-specialized]]) per tile head dims (DK, DV);
# sm_90a registers / spill bytes / shared KiB from `--ptxas` (ptxas 13.0) in the comments (a
# warp-specialized kernel reports its launch bound, 168 at 8 + 4 warps: setmaxnreg gives the
# consumers 232)
CANDIDATES: Dict[Tuple[int, int], List[Tuple[int, ...]]] = {
    (64, 64): [(128, 64, 8, 3),      # 116 / 0 / 65: wgmma both dots
               (128, 64, 8, 3, 2),   # 106 / 0 / 65: the same, two programs per SM (shipped)
               (128, 64, 8, 4, 2),   # 106 / 0 / 81: the same, 4 stages
               (128, 128, 8, 3),     # 180 / 0 / 113: wgmma
               (64, 64, 4, 3),       # 112 / 0 / 57: wgmma
               (128, 128, 8, 3, 0, True),   # a producer warpgroup fills the ring
               (128, 64, 8, 3, 0, True)],
    (128, 128): [(128, 64, 8, 3),    # 151 / 0 / 129: wgmma both dots (shipped)
                 (128, 64, 8, 4),    # 151 / 0 / 161: the same, 4 stages
                 (64, 64, 4, 3),     # 160 / 0 / 113: wgmma
                 (128, 128, 8, 3, 0, True),   # a producer warpgroup fills the ring
                 (128, 64, 8, 3, 0, True)],
    (256, 256): [(128, 64, 8, 2),    # 243 / 0 / 192: wgmma both dots, cp.async ring (shipped)
                 (64, 64, 4, 3),     # 225 / 0 / 225: wgmma both dots, K and V by TMA
                 (64, 64, 8, 3),     # 223 / 0 / 169: QKᵀ mma.sync, P V wgmma 4 x 2 warps
                 (64, 32, 8, 3),     # 180 / 0 / 133: mma.sync
                 (64, 16, 4, 3),     # 254 / 0 / 80: mma.sync
                 (32, 32, 4, 3)],    # 228 / 0 / 114: mma.sync
    (256, 128): [(128, 64, 8, 3),    # 151 / 0 / 209: wgmma both dots, two warpgroups (shipped)
                 (64, 64, 8, 3),     # 168 / 0 / 185: QKᵀ mma.sync, P V wgmma 4 x 2 warps
                 (64, 32, 8, 3)],    # 167 / 0 / 109: mma.sync
}
HEAD_DIMS = {"64": (64, 64), "96": (96, 96), "128": (128, 128), "192": (192, 192), "256": (256, 256),
             "192/128": (192, 128)}


def tile_dims(d: int, dv: int) -> Tuple[int, int]:
    return max(next_pow2(d), 16), max(next_pow2(dv), 16)


def candidates(d: int, dv: int) -> List[AttentionConfig]:
    """The candidate configurations of head dims (d, dv)."""
    dk, dvt = tile_dims(d, dv)
    return [AttentionConfig(dk=dk, dv=dvt, **dict(zip(("bm", "bn", "num_warps", "num_stages", "programs_per_sm",
                                                     "warp_specialize"), c)))
            for c in CANDIDATES[(dk, dvt)]]


def label(cfg: AttentionConfig) -> str:
    floor = f" p{cfg.programs_per_sm}" if cfg.programs_per_sm else ""
    return f"{cfg.bm}x{cfg.bn} w{cfg.num_warps} s{cfg.num_stages}{floor}" + (" ws" if cfg.warp_specialize else "")


def dots(compiled) -> str:
    """Which instruction each dot of a compiled kernel became, from its remarks."""
    found = []
    for r in compiled.remarks:
        text = str(getattr(r, "message", r))
        for name in ("wgmma", "mma.sync"):
            if f"lowered to {name}" in text and name not in found:
                found.append(name)
    return "+".join(found) or "?"


def compile_report(d: int, dv: int, cfg: AttentionConfig, arch: str) -> Dict:
    """ptxas's report of `plan`'s launch at `cfg` for `arch` (no GPU): registers, spill bytes,
    shared bytes, and the dots' instructions."""
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    from tilec.target import Target
    (ln,) = A.plan(A.describe(1, 1, 1, 1000, 1000, d, dv), Target.from_arch(arch), config=cfg)
    c = compile_kernel(ln.kernel, parse_signature(ln.kernel, A.signature(ln)),
                       CompileOptions(arch=arch, num_warps=ln.num_warps, fast_math=True, **dict(ln.options)),
                       use_cache=False)
    r = c.metadata["ptxas"]
    return {"registers": r["registers"], "spill_stores": r["spill_stores"], "spill_loads": r["spill_loads"],
            "shared": c.metadata["shared"], "dots": dots(c), "warnings": r["warnings"]}


def _dims(text: str) -> List[str]:
    out = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in HEAD_DIMS]
    if bad:
        raise SystemExit(f"--dims: expected some of {', '.join(HEAD_DIMS)}, got {', '.join(bad)}")
    return out


def ptxas_table(dims: List[str], arch: str) -> List[Dict]:
    rows, seen = [], set()
    print(f"{'dims':>8} {'tile':>8} {'config':>16} {'dots':>15} {'regs':>5} {'spill st/ld':>12} {'shared':>8}")
    for name in dims:
        d, dv = HEAD_DIMS[name]
        if tile_dims(d, dv) in seen:
            continue
        seen.add(tile_dims(d, dv))
        for cfg in candidates(d, dv):
            r = compile_report(d, dv, cfg, arch)
            ship = "*" if A.config_for(d, dv, _target(arch)) == cfg else ""
            print(f"{name:>8} {cfg.dk:>4}/{cfg.dv:<3} {label(cfg) + ship:>16} {r['dots']:>15} {r['registers']:>5} "
                  f"{r['spill_stores']:>5}/{r['spill_loads']:<6} {r['shared']:>8}", flush=True)
            rows.append(dict(r, dims=name, config=label(cfg)))
    return rows


def _target(arch: str):
    from tilec.target import Target
    return Target.from_arch(arch)


# ----------------------------------------------------------------------------- GPU
def _time(fn) -> float:
    """Median milliseconds of fn() (triton.testing.do_bench, as bench/attention.py)."""
    import triton  # noqa: PLC0415 - GPU only: --ptxas runs without it
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def _reference(torch, q, k, v, causal: bool):
    """float64 softmax(q kᵀ / sqrt(d)) v of batch 0, head 0 ((seq, dv)), bottom-right causal as tilec."""
    q0, k0, v0 = (t[0, 0].double() for t in (q, k, v))
    s = q0 @ k0.T / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = s.shape
        rows = torch.arange(n_q, device=s.device)[:, None] + (n_k - n_q)
        s = s.masked_fill(torch.arange(n_k, device=s.device)[None, :] > rows, float("-inf"))
    return torch.softmax(s, dim=-1) @ v0


def _sdpa(torch, backend, q, k, v, causal: bool):
    from torch.nn.attention import sdpa_kernel
    f = torch.nn.functional.scaled_dot_product_attention
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}

    def run():
        with sdpa_kernel([backend]):
            return f(q, k, v, is_causal=causal, **gqa)
    return run


def gpu_table(dims: List[str], seq: int, batch: int, heads: int, kv_heads: int = 0) -> List[Dict]:
    """Every candidate of each head dim, causal and not, beside SDPA; `kv_heads` (0: `heads`)
    key/value heads, grouped-query attention when fewer."""
    import torch
    from torch.nn.attention import SDPBackend

    from tilec.stdlib_kernels.launches import execute
    target = _target_of_device()
    rows: List[Dict] = []
    print(f"{'dims':>8} {'causal':>6} {'config':>16} {'dots':>15} {'regs':>5} {'spills':>6} {'ms':>8} "
          f"{'TFLOP/s':>8} {'err':>8}")
    for name in dims:
        d, dv = HEAD_DIMS[name]
        torch.manual_seed(d * 1000 + dv)
        q = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16)
        hk = kv_heads or heads
        k = torch.randn(batch, hk, seq, d, device="cuda", dtype=torch.float16)
        v = torch.randn(batch, hk, seq, dv, device="cuda", dtype=torch.float16)
        x, _ = A.check_qkv(q, k, v, "bhsd")
        for causal in (False, True):
            flops = 2.0 * batch * heads * seq * seq * (d + dv) * (0.5 if causal else 1.0)
            title = (f"attention fwd {name} S={seq} Z*H={batch}*{heads}" + (f"/{hk}" if hk != heads else "")
                     + " f16" + (" causal" if causal else ""))
            # the plan's own choice (the short tiling over few keys)
            shipped = A.config_for(d, dv, target, n_kv=seq, causal=causal)
            ref = _reference(torch, q, k, v, causal)
            sdpa = {}
            for bname, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    ms = _time(_sdpa(torch, backend, q, k, v, causal))
                except RuntimeError as e:   # the backend does not take these head dims
                    print(f"{name:>8} {str(causal):>6} {'sdpa ' + bname:>16} n/a ({str(e).splitlines()[0][:60]})")
                    continue
                sdpa[bname] = flops / ms / 1e9
                print(f"{name:>8} {str(causal):>6} {'sdpa ' + bname:>16} {'':>15} {'':>5} {'':>6} {ms:>8.3f} "
                      f"{sdpa[bname]:>8.1f}", flush=True)
                rows.append(results.row(title, f"sdpa {bname}", sdpa[bname], "TFLOP/s"))
            base = ("sdpa flash", sdpa["flash"]) if "flash" in sdpa else (
                ("sdpa cudnn", sdpa["cudnn"]) if "cudnn" in sdpa else (None, None))
            best = None
            for cfg in candidates(d, dv):
                oa, _ = A.forward_outputs(x, "bhsd")
                ops = A.forward_operands(x, "bhsd", oa, None, causal=causal)
                launches = A.plan(x, target, config=cfg, causal=causal)
                ln = launches[0]
                compiled = ln.kernel.compile(*ops.args(ln), num_warps=ln.num_warps, fast_math=ln.fast_math,
                                             **dict(ln.options), **dict(ln.constexprs))
                report = compiled.metadata.get("ptxas") or {}

                def run(launches=launches, ops=ops):
                    execute(launches, ops)
                ms = _time(run)
                err = (oa.obj[0, 0].double() - ref).abs().max().item()
                tflops = flops / ms / 1e9
                ship = shipped == cfg
                spills = report.get("spill_stores", -1)
                print(f"{name:>8} {str(causal):>6} {label(cfg) + ('^' if ship else ''):>16} {dots(compiled):>15} "
                      f"{report.get('registers', -1):>5} {spills:>6} {ms:>8.3f} {tflops:>8.1f} {err:>8.1e}",
                      flush=True)
                rows.append(results.row(title, f"tilec {label(cfg)}", tflops, "TFLOP/s", *base))
                if best is None or tflops > best[1]:
                    best = (label(cfg), tflops)
                del oa, ops
            print(f"{name:>8} {str(causal):>6} fastest: {best[0]}* {best[1]:.1f} TFLOP/s", flush=True)
        del q, k, v, x
        torch.cuda.empty_cache()
    return rows


def _target_of_device():
    from tilec.target import Target
    return Target.current()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dims", default=",".join(HEAD_DIMS), help="head dims, of " + ", ".join(HEAD_DIMS))
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=0, dest="kv_heads",
                   help="key/value heads (default: --heads; fewer: grouped-query attention)")
    p.add_argument("--json", help="write bench/results.py rows here")
    p.add_argument("--ptxas", action="store_true", help="no GPU: ptxas's registers, spills, shared per candidate")
    p.add_argument("--arch", default="sm_90a", help="with --ptxas")
    a = p.parse_args(argv)
    dims = _dims(a.dims)
    if a.ptxas:
        ptxas_table(dims, a.arch)
        return 0
    if a.kv_heads and (a.kv_heads < 0 or a.heads % a.kv_heads):
        p.error(f"--kv-heads: expected a divisor of --heads ({a.heads}), got {a.kv_heads}")
    rows = gpu_table(dims, a.seq, a.batch, a.heads, a.kv_heads)
    if a.json:
        import torch
        results.write(a.json, rows, torch.cuda.get_device_name())
        print(f"wrote {len(rows)} rows to {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
