"""MLA decode throughput: sk.mla_decode against the device's copy bandwidth and torch.

    python bench/mla_decode.py [--quick] [--json FILE]

DeepSeek-V3 shapes: q (batch, 1, heads, 576) bf16, a paged latent cache (page 64, random
block table) of `context` tokens per sequence, values the first 512 columns. Reported per
shape, median of triton.testing.do_bench on fresh random data:

- GB/s of cache read (batch x context x 576 x 2 bytes, plus q and out) and TFLOP/s
  (2 x heads x context x (576 + 512) per sequence) of sk.mla_decode, and its split count
  (called with validate=False: no read-back of the lengths and the table per call);
- the copy bandwidth measured in the same run (a device-to-device copy of 512 MB,
  read + write bytes / time) and the percent of it mla_decode reaches;
- torch: the cache gathered through the table into a dense (batch, context, 576) tensor,
  then the scores, softmax and values in bf16 (einsum), as a serving stack without an
  MLA kernel would do it.

`run_mla(rows)` returns the rows (dicts) so that bench/decode.py can merge this table.
"""
from __future__ import annotations

import argparse
import json
import math

import torch
import triton

from tilec.stdlib_kernels import mla_decode
from tilec.stdlib_kernels.mla_decode import config
from tilec.stdlib_kernels._common import target_of, as_array

try:  # as a package module (tests) or as a script (bench/ first on sys.path)
    from bench import convert
except ImportError:
    import convert  # type: ignore[no-redef]

D, DV, PAGE = 576, 512, 64
SHAPES = [(h, b, ctx) for h in (16, 64, 128) for b in (64, 128) for ctx in (1024, 4096, 8192)]
QUICK = [(16, 64, 4096), (128, 64, 4096), (128, 128, 8192)]


def copy_gbps() -> float:
    src = torch.empty(256 * 2 ** 20, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * src.numel() * 2 / (ms * 1e-3) / 1e9


def _inputs(heads, batch, ctx):
    blocks = -(-ctx // PAGE)
    pool = batch * blocks
    kv = torch.randn((pool, PAGE, 1, D), device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(pool, device="cuda").to(torch.int32).view(batch, blocks)
    q = torch.randn((batch, 1, heads, D), device="cuda", dtype=torch.bfloat16)
    lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    return q, kv, table, lens


def _torch_mla(q, kv, table, ctx, scale):
    b = q.shape[0]
    k = kv[table.long()].view(b, -1, D)[:, :ctx]                     # (b, ctx, 576), materialized
    s = torch.einsum("bhd,bkd->bhk", q[:, 0], k) * scale
    p = torch.softmax(s.float(), dim=-1).to(q.dtype)
    return torch.einsum("bhk,bkd->bhd", p, k[..., :DV])


def run_mla(rows=None, shapes=SHAPES):
    """Measure every (heads, batch, context) of `shapes`; append one dict per shape to `rows`."""
    rows = [] if rows is None else rows
    copy = copy_gbps()
    for heads, batch, ctx in shapes:
        q, kv, table, lens = _inputs(heads, batch, ctx)
        scale = 1.0 / math.sqrt(D)
        out = mla_decode(q, kv, lens, block_table=table, scale=scale)
        ref = _torch_mla(q, kv, table, ctx, scale)
        err = (out[:, 0].float() - ref.float()).abs().max().item()
        ms = triton.testing.do_bench(lambda: mla_decode(q, kv, lens, block_table=table, scale=scale, validate=False),
                                     return_mode="median")
        ms_t = triton.testing.do_bench(lambda: _torch_mla(q, kv, table, ctx, scale), return_mode="median")
        nbytes = batch * ctx * D * 2 + q.numel() * 2 + batch * heads * DV * 2
        flops = 2 * batch * heads * ctx * (D + DV)
        p = config(batch, 1, heads, DV, table.shape[1] * PAGE, True, PAGE, target_of(as_array(q, "q")))
        rows.append(dict(op="mla_decode", heads=heads, batch=batch, context=ctx, page=PAGE, splits=p.num_splits,
                         us=ms * 1e3, gbps=nbytes / (ms * 1e-3) / 1e9, tflops=flops / (ms * 1e-3) / 1e12,
                         copy_gbps=copy, torch_us=ms_t * 1e3, max_err=err))
        del q, kv, table, lens, out, ref
        torch.cuda.empty_cache()
    return rows


def table(rows) -> str:
    lines = ["| heads | batch | context | splits | us | GB/s | % of copy | TFLOP/s | torch us | vs torch | max err |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['heads']} | {r['batch']} | {r['context']} | {r['splits']} | {r['us']:.1f} | "
                     f"{r['gbps']:.0f} | {100 * r['gbps'] / r['copy_gbps']:.0f}% | {r['tflops']:.1f} | "
                     f"{r['torch_us']:.1f} | {r['torch_us'] / r['us']:.2f}x | {r['max_err']:.3f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three shapes only")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--results", help="also write the rows in bench/results.py's schema (python -m bench.compare, bench.tables)")
    args = ap.parse_args()
    rows = run_mla(shapes=QUICK if args.quick else SHAPES)
    print(f"{torch.cuda.get_device_name()}: copy {rows[0]['copy_gbps']:.0f} GB/s (read + write)")
    print(table(rows))
    print(json.dumps(rows))
    convert.save(args.results, convert.mla_decode_rows(rows), torch.cuda.get_device_name())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
