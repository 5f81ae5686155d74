"""Decode attention: KV-cache read bandwidth of sk.attention_decode beside the device's copy
bandwidth, torch SDPA on the same (dense) cache and sk.attention used the naive way.

    python bench/decode.py [--quick] [--check] [--pages 0,16,64] [--json FILE] [--splits 8,16,32,64] [--bn 32,64]

One new token per sequence (q_len 1), bf16, head dim 128, every sequence full (cache_seqlens
= context). GB/s = the KV cache's bytes (2 x batch x context x kv_heads x 128 x 2) / time,
median of triton.testing.do_bench. Copy: `dst.copy_(src)` of a 1 GiB buffer measured in the
same run, counting bytes read + written. Paged caches (page 16, 64) hold the same keys in a
pool of pages addressed through a random permutation as the block table. SDPA gets q as
(batch, heads, 1, dim) and k/v as contiguous (batch, heads, context, dim) copies of the cache
(repeated for GQA, outside the timing; skipped past --sdpa-max-gb); sk.attention the cache
as it is (bshd; GQA through its heads, so each kv head is read once per query head). The
ratios are times: > 1 means attention_decode is faster. Prints a markdown table, then one
JSON line (also written to --json). `--splits` also times each row with num_splits forced to
each value given (outputs checked against the plan's own), after the row: what the split
heuristic's numbers (tuning.DecodeTuning) are measured by. `--bn` likewise times each
row with each given number of keys per step (DecodeTuning.keys_per_step; the plan's splits).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch
import triton

from tilec.stdlib_kernels import attention as sk_attention
from tilec.stdlib_kernels import attention_decode, tuning
from tilec.stdlib_kernels._plan import clear_plans
from tilec.stdlib_kernels.attention_decode import config_for, split_count
from tilec.target import Target

try:  # as a package module (tests) or as a script (bench/ first on sys.path)
    from bench import convert
except ImportError:
    import convert  # type: ignore[no-redef]

DIM = 128
HEADS = [(32, 8), (32, 32)]
# (batch, context): from one long sequence to many short ones; bytes capped by --max-gb
SHAPES = [(1, 512), (1, 8192), (1, 32768), (1, 131072), (8, 4096), (8, 32768), (32, 8192), (64, 2048),
          (64, 8192), (128, 4096), (256, 512), (256, 2048)]
QUICK = [(1, 32768), (8, 4096), (64, 8192), (256, 512)]


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3   # seconds


def copy_bandwidth():
    src = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src))
    return 2 * (1 << 30) / t


def paged_copy(kc, vc, page):
    """kc, vc (batch, ctx, kv_heads, dim) as pages of a pool behind a random block table."""
    batch, ctx, hk, d = kc.shape
    blocks = -(-ctx // page)
    pool = batch * blocks
    perm = torch.randperm(pool, device="cuda")
    table = perm.reshape(batch, blocks).to(torch.int32)
    kp = torch.empty(pool, page, hk, d, dtype=kc.dtype, device="cuda")
    vp = torch.empty_like(kp)
    pad = blocks * page - ctx
    for src, dst in ((kc, kp), (vc, vp)):
        full = torch.nn.functional.pad(src, (0, 0, 0, 0, 0, pad)) if pad else src
        dst[perm] = full.reshape(batch * blocks, page, hk, d)   # row i of the table -> its pages
    return kp, vp, table


def split_sweep(fn, out, tiles, kv_bytes, copy_bw, splits):
    """{num_splits: % of copy} of `fn(num_splits)` for each forced value up to `tiles`."""
    got = {}
    for n in splits:
        if n > tiles:
            continue
        err = (fn(n).float() - out.float()).abs().max().item()
        assert err < 2e-2, (n, err)
        got[n] = 100 * kv_bytes / bench(lambda n=n: fn(n)) / copy_bw
    return got


def bn_sweep(fn, out, kv_bytes, copy_bw, bns):
    """{keys per step: % of copy} of `fn()` with DecodeTuning.keys_per_step set to each value."""
    family = tuning.table_family(Target.for_device())
    saved, got = tuning.TABLES[family], {}
    try:
        for bn in bns:
            tuning.TABLES[family] = dataclasses.replace(saved, decode=dataclasses.replace(saved.decode, keys_per_step=bn))
            clear_plans()   # the entry point's recorded launches hold the old tiles
            err = (fn().float() - out.float()).abs().max().item()
            assert err < 2e-2, (bn, err)
            got[bn] = 100 * kv_bytes / bench(fn) / copy_bw
    finally:
        tuning.TABLES[family] = saved
        clear_plans()
    return got


def run(shapes, pages, check, sdpa_max, max_gb, copy_bw, splits=(), bns=()):
    rows = []
    target = Target.for_device() if splits else None
    for heads, kv_heads in HEADS:
        for batch, ctx in shapes:
            kv_bytes = 2 * batch * ctx * kv_heads * DIM * 2
            if kv_bytes > max_gb * 2**30:
                continue
            torch.manual_seed(batch + ctx)
            q = torch.randn(batch, 1, heads, DIM, dtype=torch.bfloat16, device="cuda")
            kc = torch.randn(batch, ctx, kv_heads, DIM, dtype=torch.bfloat16, device="cuda")
            vc = torch.randn_like(kc)
            lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
            base = dict(batch=batch, context=ctx, heads=heads, kv_heads=kv_heads, kv_mb=kv_bytes / 2**20)
            ref = None
            sdpa_t = naive_t = None
            if kv_bytes * heads // kv_heads <= sdpa_max * 2**30:
                qs = q.transpose(1, 2)
                ks = kc.transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1).contiguous()
                vs = vc.transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1).contiguous()
                sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs)  # noqa: E731
                ref = sdpa().transpose(1, 2)
                sdpa_t = bench(sdpa)
                del ks, vs
                naive_t = bench(lambda: sk_attention(q, kc, vc))
            for page in pages:
                if page:
                    kp, vp, table = paged_copy(kc, vc, page)
                else:
                    kp, vp, table = kc, vc, None
                fn = lambda n=None: attention_decode(q, kp, vp, lens, block_table=table, num_splits=n)  # noqa: E731
                out = fn()
                err = None
                if check and ref is not None:
                    err = (out.float() - ref.float()).abs().max().item()
                    assert err < 2e-2, (base, page, err)
                t = bench(fn)
                rows.append(dict(base, page=page, us=t * 1e6, gbs=kv_bytes / t / 1e9,
                                 pct_copy=100 * kv_bytes / t / copy_bw,
                                 sdpa_us=sdpa_t and sdpa_t * 1e6, x_sdpa=sdpa_t and sdpa_t / t,
                                 naive_us=naive_t and naive_t * 1e6, x_naive=naive_t and naive_t / t, err=err))
                print(_row(rows[-1]), flush=True)
                if splits:
                    cfg = config_for(heads // kv_heads, 1, DIM, target)
                    tiles = -(-ctx // cfg.bn)
                    planned = split_count(batch * kv_heads * cfg.row_blocks, tiles, target)
                    rows[-1]["splits"] = split_sweep(fn, out, tiles, kv_bytes, copy_bw, splits)
                    print(f"  num_splits (plan: {planned}): "
                          + ", ".join(f"{n}: {pct:.1f}%" for n, pct in rows[-1]["splits"].items()), flush=True)
                if bns:
                    rows[-1]["bn"] = bn_sweep(fn, out, kv_bytes, copy_bw, bns)
                    print("  keys per step: " + ", ".join(f"{n}: {pct:.1f}%" for n, pct in rows[-1]["bn"].items()),
                          flush=True)
            q = kc = vc = kp = vp = None   # the next shape's arrays take their place
            torch.cuda.empty_cache()
    return rows


HEADER = ("| heads/kv | batch | context | page | KV MB | decode us | GB/s | % copy | SDPA us | x SDPA "
          "| sk.attention us | x naive |\n|" + " --- |" * 12)


def _f(x, fmt):
    return "-" if x is None else format(x, fmt)


def _row(r):
    return (f"| {r['heads']}/{r['kv_heads']} | {r['batch']} | {r['context']} | {r['page'] or 'contig'} | "
            f"{r['kv_mb']:.0f} | {r['us']:.1f} | {r['gbs']:.0f} | {r['pct_copy']:.1f} | {_f(r['sdpa_us'], '.1f')} | "
            f"{_f(r['x_sdpa'], '.2f')} | {_f(r['naive_us'], '.1f')} | {_f(r['x_naive'], '.2f')} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a subset that runs in under 2 minutes")
    p.add_argument("--check", action="store_true", help="compare every output with SDPA's")
    p.add_argument("--pages", default="0,16,64", help="page sizes, 0 for the contiguous cache")
    p.add_argument("--max-gb", type=float, default=8.0, help="skip shapes whose KV cache is larger (GiB)")
    p.add_argument("--sdpa-max-gb", type=float, default=16.0, help="SDPA's repeated K/V at most this (GiB)")
    p.add_argument("--json", default=None)
    p.add_argument("--results", help="also write the rows in bench/results.py's schema (python -m bench.compare, bench.tables)")
    p.add_argument("--splits", default="", help="comma-separated num_splits to time each row with too")
    p.add_argument("--bn", default="", help="comma-separated keys per step to time each row with too (16, 32, 64)")
    args = p.parse_args(argv)
    pages = [int(x) for x in args.pages.split(",")]
    try:
        bns = [int(x) for x in args.bn.split(",") if x]
    except ValueError:
        p.error(f"--bn: expected comma-separated ints, got {args.bn!r}")
    if any(n not in (16, 32, 64) for n in bns):
        p.error(f"--bn: expected 16, 32 or 64, got {args.bn!r}")
    try:
        splits = [int(x) for x in args.splits.split(",") if x]
    except ValueError:
        p.error(f"--splits: expected comma-separated positive ints, got {args.splits!r}")
    if any(n < 1 for n in splits):
        p.error(f"--splits: expected positive ints, got {args.splits!r}")
    dev = torch.cuda.get_device_name()
    copy_bw = copy_bandwidth()
    print(f"{dev}: copy {copy_bw / 1e9:.0f} GB/s (read + write of 1 GiB)\n")
    print(HEADER, flush=True)
    rows = run(QUICK if args.quick else SHAPES, pages, args.check, args.sdpa_max_gb, args.max_gb, copy_bw, splits,
               bns)
    result = dict(device=dev, copy_gbs=copy_bw / 1e9, rows=rows)
    line = json.dumps(result)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    convert.save(args.results, convert.decode_rows(rows), dev)


if __name__ == "__main__":
    sys.exit(main())
