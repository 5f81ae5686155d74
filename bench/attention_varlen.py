"""Variable-length attention against dense attention at the same token count (issue 45's
"varlen within 10% of dense").

    python bench/attention.py --varlen [--dtypes f16] [--dims 64,128] [--seqs 2048,8192] [--passes fwd,bwd]
                              [--json FILE]

Per (dtype, head dim, causal, seq S): 16 heads, batch B = 32k tokens / S. Three calls of
the stdlib, timed with triton.testing.do_bench (median; the backward alone, from a saved
forward):
- dense: `sk.attention` on (B, S, 16, D) tensors;
- varlen_equal: the same tokens packed (B·S, 16, D) with cu_seqlens of B sequences of S,
  the same work as dense (the ratio to dense is the varlen overhead);
- varlen_mixed: B sequences of mixed odd lengths (pairs S ± δ, δ up to 3S/4) summing to
  B·S tokens, whose FLOPs are counted per sequence.
cu_seqlens live on the device and max_seqlen is given (no synchronization). Prints a
table (TFLOP/s; varlen / dense ratios) and one JSON line.
"""
from __future__ import annotations

import json
import random

import torch
import triton

from tilec import stdlib_kernels as sk

try:  # as a package module or as a script (bench/ first on sys.path)
    from bench.tables import cell as _fmt, ratio_cell as _ratio
except ImportError:
    from tables import cell as _fmt, ratio_cell as _ratio  # type: ignore[no-redef]

HEADS = 16
TOKENS = 32768
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def mixed_lengths(batch: int, seq: int, seed: int = 0):
    """`batch` odd-ish lengths around `seq` summing to batch · seq: pairs seq ± δ."""
    rng = random.Random(seed)
    lens = []
    for _ in range(batch // 2):
        delta = rng.randrange(1, 3 * seq // 4) | 1
        lens += [seq + delta, seq - delta]
    if batch % 2:
        lens.append(seq)
    rng.shuffle(lens)
    return lens


def _cu(lens):
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32, device="cuda")


def _flops(lens, d, causal, bwd):
    per = (10.0 if bwd else 4.0) * HEADS * d * (0.5 if causal else 1.0)
    return per * sum(n * n for n in lens)


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def _case(q, k, v, do, causal, cu):
    """(forward call, backward call) of one configuration."""
    kw = dict(causal=causal, **cu)
    o, lse = sk.attention(q, k, v, return_lse=True, **kw)
    grads = tuple(torch.empty_like(t) for t in (q, k, v))
    return (lambda: sk.attention(q, k, v, out=o, **kw),
            lambda: sk.attention_backward(do, q, k, v, o, lse, dq=grads[0], dk=grads[1], dv=grads[2], **kw))


def run_varlen(dtypes, dims, seqs, passes):
    rows = []
    print("| pass | dtype | D | causal | seq | B | dense | varlen equal | varlen mixed | equal/dense | mixed/dense |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dname in dtypes:
        dt = DTYPES[dname]
        for d in dims:
            for causal in (False, True):
                for s in seqs:
                    b = max(1, TOKENS // s)
                    equal, mixed = [s] * b, mixed_lengths(b, s, seed=s + d)
                    q, k, v, do = (torch.randn(b * s, HEADS, d, device="cuda", dtype=dt) for _ in range(4))
                    configs = {
                        "dense": ((q.view(b, s, HEADS, d), k.view(b, s, HEADS, d), v.view(b, s, HEADS, d),
                                   do.view(b, s, HEADS, d)), {}, equal),
                        "varlen_equal": ((q, k, v, do), dict(cu_seqlens_q=_cu(equal), cu_seqlens_k=_cu(equal),
                                                             max_seqlen_q=s, max_seqlen_k=s), equal),
                        "varlen_mixed": ((q, k, v, do), dict(cu_seqlens_q=_cu(mixed), cu_seqlens_k=_cu(mixed),
                                                             max_seqlen_q=max(mixed), max_seqlen_k=max(mixed)), mixed),
                    }
                    for pname in passes:
                        bwd = pname == "bwd"
                        row = {"pass": pname, "dtype": dname, "d": d, "causal": causal, "seq": s, "batch": b,
                               "mixed_lengths": mixed}
                        for name, (tensors, cu, lens) in configs.items():
                            try:
                                fwd_call, bwd_call = _case(*tensors, causal, cu)
                                row[name] = _flops(lens, d, causal, bwd) / _time(bwd_call if bwd else fwd_call) / 1e9
                            except Exception as exc:  # noqa: BLE001 - reported in the row
                                row[name], row[name + "_error"] = None, f"{type(exc).__name__}: {str(exc)[:80]}"
                        rows.append(row)
                        _print(row)
    return rows


def _print(r):
    print(f"| {r['pass']} | {r['dtype']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seq']} | {r['batch']} | "
          f"{_fmt(r['dense'])} | {_fmt(r['varlen_equal'])} | {_fmt(r['varlen_mixed'])} | "
          f"{_ratio(r['varlen_equal'], r['dense'])} | {_ratio(r['varlen_mixed'], r['dense'])} |", flush=True)


def main(dtypes, dims, seqs, passes, json_path=None):
    rows = run_varlen(dtypes, dims, seqs, passes)
    out = {"device": torch.cuda.get_device_name(), "varlen_rows": rows}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))
