"""Attention with score_mod / mask_mod: tilec's stdlib against FlexAttention on the same functions.

    python bench/attention.py --mods [--dtypes bf16] [--dims 64,128] [--seqs 2048,8192] [--json FILE]

Each function is written twice, as a @tc.func for `sk.attention` and as a torch function
for `flex_attention` (torch.compile'd), with a block mask made once by each library
(`sk.block_mask`, `create_block_mask`, outside the timing). (batch, heads, seq, dim)
tensors, 16 heads, batch so that batch · seq = 32k tokens. Times are medians of
triton.testing.do_bench; the backward is timed as forward + backward minus the forward
(both libraries alike). Prints a table and one JSON line; each row also holds the
largest difference between the two outputs (the same function on both sides).
"""
from __future__ import annotations

import json

import torch
import torch._dynamo
import triton
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import tilec as tc
from tilec import stdlib_kernels as sk

HEADS = 16
TOKENS = 32768
WINDOW = 1024
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


@tc.func
def tc_causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@tc.func
def tc_alibi(score, b, h, q_idx, kv_idx):
    return score + tc.exp2(-8.0 * (h + 1).astype(tc.float32) / HEADS) * (kv_idx - q_idx).astype(tc.float32)


@tc.func
def tc_bias_grad(score, b, h, q_idx, kv_idx):
    return 1.0


@tc.func
def tc_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= WINDOW)


@tc.func
def tc_document(b, h, q_idx, kv_idx, doc):
    row = doc.ptr + b * doc.stride(0)
    return (tc.load(row + q_idx) == tc.load(row + kv_idx)) & (q_idx >= kv_idx)


def tc_prefix(prefix: int):
    @tc.func
    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < prefix) | (q_idx >= kv_idx)
    return prefix_lm


def _cases(b, s):
    """(name, tilec score_mod, its derivative, tilec mask_mod, mod_args, flex score_mod, flex mask_mod)."""
    gen = torch.Generator().manual_seed(s)
    cuts = torch.sort(torch.randperm(s - 1, generator=gen)[:max(s // 1024, 1)] + 1).values
    doc = torch.searchsorted(cuts, torch.arange(s), right=True).to(torch.int32)[None].repeat(b, 1).cuda()
    docl = doc.long()
    prefix = s // 4
    return [
        ("causal", None, None, tc_causal, (), None, lambda b, h, q, k: q >= k),
        ("alibi+causal", tc_alibi, tc_bias_grad, tc_causal, (),
         lambda sc, b, h, q, k: sc + torch.exp2(-8.0 * (h + 1) / HEADS) * (k - q), lambda b, h, q, k: q >= k),
        (f"sliding window {WINDOW}", None, None, tc_window, (), None,
         lambda b, h, q, k: (q >= k) & (q - k <= WINDOW)),
        ("document+causal", None, None, tc_document, (doc,), None,
         lambda b, h, q, k: (docl[b, q] == docl[b, k]) & (q >= k)),
        ("prefix-LM", None, None, tc_prefix(prefix), (), None, lambda b, h, q, k: (k < prefix) | (q >= k)),
    ]


def _bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def compiled_flex():
    """flex_attention under torch.compile, with dynamo's recompile limits raised: each (shape,
    score_mod, mask) is a recompile, and past the limit dynamo silently runs the unfused eager
    version (100x slower, and it materializes the scores: 64 GiB at 16k tokens). Hitting the
    raised limit fails the row rather than timing that fallback."""
    for name, value in (("recompile_limit", 1024), ("cache_size_limit", 1024),
                        ("accumulated_recompile_limit", 4096), ("accumulated_cache_size_limit", 4096),
                        ("fail_on_recompile_limit_hit", True)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    return torch.compile(flex_attention, dynamic=False)


def run_mods(dtypes, dims, seqs, passes=("fwd", "bwd")):
    flex = compiled_flex()
    rows = []
    print("| function | dtype | D | seq | B | tilec fwd ms | Flex fwd ms | speedup | tilec bwd ms | Flex bwd ms | "
          "speedup | max diff |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dname in dtypes:
        for d in dims:
            for s in seqs:
                b = max(1, TOKENS // s)
                for name, sm, smg, mm, args, fsm, fmm in _cases(b, s):
                    row = {"function": name, "dtype": dname, "d": d, "seq": s, "b": b}
                    try:
                        _one(row, flex, DTYPES[dname], b, s, d, sm, smg, mm, args, fsm, fmm, passes)
                    except Exception as exc:  # noqa: BLE001 - reported in the row
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
                    rows.append(row)
                    _print(row)
    return rows


def _one(row, flex, dt, b, s, d, sm, smg, mm, args, fsm, fmm, passes):
    q, k, v, do = (torch.randn(b, HEADS, s, d, device="cuda", dtype=dt) for _ in range(4))
    bm = sk.block_mask(mm, b, HEADS, s, s, mod_args=args, device="cuda")
    fbm = create_block_mask(fmm, b, HEADS, s, s, device="cuda")
    kw = dict(score_mod=sm, block_mask=bm, mod_args=args, layout="bhsd")
    o, lse = sk.attention(q, k, v, return_lse=True, **kw)
    fo = flex(q, k, v, score_mod=fsm, block_mask=fbm)
    row["max_diff"] = (o.float() - fo.float()).abs().max().item()
    row["tilec_sparsity"] = bm.sparsity()
    t_fwd = _bench(lambda: sk.attention(q, k, v, return_lse=True, **kw))
    f_fwd = _bench(lambda: flex(q, k, v, score_mod=fsm, block_mask=fbm))
    row.update(tilec_fwd_ms=t_fwd, flex_fwd_ms=f_fwd)
    if "bwd" not in passes:
        return
    grads = tuple(torch.empty_like(t) for t in (q, k, v))

    def tilec_both():
        o, lse = sk.attention(q, k, v, return_lse=True, **kw)
        sk.attention_backward(do, q, k, v, o, lse, score_mod_grad=smg, dq=grads[0], dk=grads[1], dv=grads[2], **kw)

    ql, kl, vl = (t.detach().requires_grad_(True) for t in (q, k, v))

    def flex_both():
        flex(ql, kl, vl, score_mod=fsm, block_mask=fbm).backward(do)

    row.update(tilec_bwd_ms=_bench(tilec_both) - t_fwd, flex_bwd_ms=_bench(flex_both) - f_fwd)


def _ms(x):
    return "-" if x is None else f"{x:.3f}"


def _speed(a, b):
    return "-" if not a or not b else f"{b / a:.2f}x"


def _print(r):
    if "error" in r:
        print(f"| {r['function']} | {r['dtype']} | {r['d']} | {r['seq']} | {r['b']} | {r['error']} |", flush=True)
        return
    print(f"| {r['function']} | {r['dtype']} | {r['d']} | {r['seq']} | {r['b']} | {_ms(r['tilec_fwd_ms'])} | "
          f"{_ms(r['flex_fwd_ms'])} | {_speed(r['tilec_fwd_ms'], r['flex_fwd_ms'])} | {_ms(r.get('tilec_bwd_ms'))} | "
          f"{_ms(r.get('flex_bwd_ms'))} | {_speed(r.get('tilec_bwd_ms'), r.get('flex_bwd_ms'))} | "
          f"{r['max_diff']:.1e} |", flush=True)


def main(dtypes, dims, seqs, passes, json_path=None):
    rows = run_mods(dtypes, dims, seqs, passes)
    out = {"device": torch.cuda.get_device_name(), "mods_rows": rows}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))
