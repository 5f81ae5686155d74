"""topk and sampling from logits: sk.topk / sk.sample beside torch's usual ways.

    python bench/sampling.py [--quick] [--json FILE]

Logits bf16 (batch, vocab). Rows of the table (median of triton.testing.do_bench, µs):
- topk k=50: sk.topk against torch.topk;
- greedy: sk.sample(temperature=0) against torch.argmax;
- top_k=50, top_p=0.9: sk.sample against torch.topk, softmax over the k, the nucleus by a
  cumulative sum of the sorted k, torch.multinomial (what Hugging Face's warpers do);
- top_p=0.9 (no top_k): sk.sample against a full-row torch.sort, cumsum, mask, softmax and
  torch.multinomial;
- plain: sk.sample(temperature=0.8) against softmax + torch.multinomial.
The ratio is torch's time / tilec's (> 1: tilec faster). Prints a markdown table, then
one JSON line (also written to --json).
"""
from __future__ import annotations

import argparse
import json

import torch
import triton

from tilec.stdlib_kernels import sample, topk

SHAPES = [(1, 32000), (1, 128256), (8, 128256), (64, 128256), (256, 32000)]
QUICK = [(1, 128256), (64, 128256)]


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3   # µs


def torch_top_k_top_p(x, k, p, t):
    v, i = torch.topk(x.float() / t, k, dim=-1)
    probs = torch.softmax(v, -1)
    before = probs.cumsum(-1) - probs
    probs = torch.where(before < p, probs, 0.0)
    return torch.gather(i, -1, torch.multinomial(probs, 1))[:, 0]


def torch_top_p(x, p, t):
    v, i = torch.sort(x.float() / t, dim=-1, descending=True)
    probs = torch.softmax(v, -1)
    before = probs.cumsum(-1) - probs
    probs = torch.where(before < p, probs, 0.0)
    return torch.gather(i, -1, torch.multinomial(probs, 1))[:, 0]


def cases(x):
    return [
        ("topk k=50", lambda: topk(x, 50), lambda: torch.topk(x, 50, dim=-1)),
        ("greedy", lambda: sample(x, temperature=0.0, seed=1), lambda: torch.argmax(x, -1)),
        ("top_k=50 top_p=0.9", lambda: sample(x, temperature=0.8, top_k=50, top_p=0.9, seed=1),
         lambda: torch_top_k_top_p(x, 50, 0.9, 0.8)),
        ("top_p=0.9", lambda: sample(x, temperature=0.8, top_p=0.9, seed=1), lambda: torch_top_p(x, 0.9, 0.8)),
        ("plain", lambda: sample(x, temperature=0.8, seed=1),
         lambda: torch.multinomial(torch.softmax(x.float() / 0.8, -1), 1)[:, 0]),
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    rows = []
    print(f"device: {torch.cuda.get_device_name()}\n")
    print("| batch x vocab | op | tilec µs | torch µs | torch / tilec |")
    print("| --- | --- | --- | --- | --- |")
    for batch, vocab in QUICK if args.quick else SHAPES:
        x = (torch.randn(batch, vocab, device="cuda") * 3).to(torch.bfloat16)
        for name, ours, theirs in cases(x):
            ours()   # compile outside the timing
            t_ours, t_theirs = bench(ours), bench(theirs)
            rows.append(dict(batch=batch, vocab=vocab, op=name, tilec_us=t_ours, torch_us=t_theirs))
            print(f"| {batch} x {vocab} | {name} | {t_ours:.1f} | {t_theirs:.1f} | {t_theirs / t_ours:.2f} |",
                  flush=True)
    doc = dict(device=torch.cuda.get_device_name(), rows=rows)
    print(json.dumps(doc))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    main()
