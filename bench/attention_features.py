"""Grouped-query heads and a sliding window: the stdlib against SDPA and FlexAttention (issue 45's
"GQA 32/8" and "sliding window 4096" rows).

    python bench/attention.py --features [--dtypes bf16] [--dims 64,128] [--seqs 4096,16384] [--passes fwd,bwd]
                              [--json FILE]

(batch, seq, heads, dim) tensors, batch so that batch · seq = 32k tokens, 32 query heads:
- gqa: 8 key/value heads, causal and not. `sk.attention` reads each K/V head once for its 4
  query heads; SDPA (cuDNN and flash backends) gets `enable_gqa=True` where the backend takes
  it, FlexAttention (`torch.compile`d) `enable_gqa=True`.
- window: causal with a left window of 4096 keys (Mistral's), 32 / 8 heads too:
  `sk.attention(window=(4095, 0))` against FlexAttention with the same mask_mod and its block
  mask (made once, outside the timing); SDPA has no window.
TFLOP/s count the pairs each row sees (for the window: min(i + 1, 4096) keys of row i);
4 · D per pair forward, 10 · D backward. The backward alone is timed from a saved forward for
the stdlib and SDPA-by-autograd; FlexAttention's as forward + backward minus its forward.
Medians of triton.testing.do_bench. Prints a table and one JSON line.
"""
from __future__ import annotations

import json

import torch
import triton

from tilec import stdlib_kernels as sk

try:  # as a package module or as a script (bench/ first on sys.path)
    from bench.tables import cell as _fmt, ratio_cell as _ratio
except ImportError:
    from tables import cell as _fmt, ratio_cell as _ratio  # type: ignore[no-redef]

HEADS, KV_HEADS = 32, 8
TOKENS = 32768
WINDOW = 4096
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
IMPLS = ("stdlib", "sdpa_cudnn", "sdpa_flash", "flex")


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def pairs(seq: int, causal: bool, window) -> int:
    """(query, key) pairs a head computes: all, the causal triangle, or the causal band of
    `window` keys."""
    if window is not None:
        w = min(window, seq)
        return w * (w + 1) // 2 + (seq - w) * w
    return seq * (seq + 1) // 2 if causal else seq * seq


def _stdlib(q, k, v, do, causal, window):
    kw = dict(causal=causal, window=None if window is None else (window - 1, 0))
    o, lse = sk.attention(q, k, v, return_lse=True, **kw)
    grads = tuple(torch.empty_like(t) for t in (q, k, v))
    return (lambda: sk.attention(q, k, v, out=o, **kw),
            lambda: sk.attention_backward(do, q, k, v, o, lse, dq=grads[0], dk=grads[1], dv=grads[2], **kw))


def _sdpa(backend, q, k, v, do, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))

    def fwd():
        with sdpa_kernel(which):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)
    o = fwd()
    dot = do.transpose(1, 2)
    return fwd, lambda: torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True)


def _flex(q, k, v, do, causal, window):
    from torch.nn.attention.flex_attention import create_block_mask
    try:
        from bench.attention_mods import compiled_flex
    except ImportError:
        from attention_mods import compiled_flex  # type: ignore[no-redef]
    flex = compiled_flex()
    qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
    s = q.shape[1]
    if window is not None:
        def mask(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
    elif causal:
        def mask(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    else:
        mask = None
    block = create_block_mask(mask, None, None, s, s) if mask is not None else None
    dot = do.transpose(1, 2)

    def fwd():
        return flex(qt, kt, vt, block_mask=block, enable_gqa=True)

    def both():
        torch.autograd.grad(fwd(), (qt, kt, vt), dot)
    fwd(), both()   # compile both before timing
    return fwd, both


def run_features(dtypes, dims, seqs, passes):
    rows = []
    print("| case | pass | dtype | D | causal | seq | B | stdlib | SDPA cuDNN | SDPA flash | Flex | "
          "stdlib/cuDNN | stdlib/Flex |")
    print("| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    cases = [("gqa", False, None), ("gqa", True, None), (f"window {WINDOW}", True, WINDOW)]
    for dname in dtypes:
        dt = DTYPES[dname]
        for d in dims:
            for s in seqs:
                b = max(1, TOKENS // s)
                q, do = (torch.randn(b, s, HEADS, d, device="cuda", dtype=dt) for _ in range(2))
                k, v = (torch.randn(b, s, KV_HEADS, d, device="cuda", dtype=dt) for _ in range(2))
                for case, causal, window in cases:
                    if window is not None and s <= window:
                        continue   # the band is the causal triangle: the gqa rows have it
                    calls = {"stdlib": lambda: _stdlib(q, k, v, do, causal, window),
                             "flex": lambda: _flex(q, k, v, do, causal, window)}
                    if window is None:
                        calls["sdpa_cudnn"] = lambda: _sdpa("cudnn", q, k, v, do, causal)
                        calls["sdpa_flash"] = lambda: _sdpa("flash", q, k, v, do, causal)
                    made, errors = {}, {}
                    for name, make in calls.items():
                        try:
                            made[name] = make()
                        except Exception as exc:  # noqa: BLE001 - reported in the row
                            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
                    n = b * HEADS * pairs(s, causal, window) * d
                    for pname in passes:
                        bwd = pname == "bwd"
                        row = {"case": case, "pass": pname, "dtype": dname, "d": d, "causal": causal, "seq": s,
                               "batch": b, **{name + "_error": e for name, e in errors.items()}}
                        for name in IMPLS:
                            row[name] = None
                            if name not in made:
                                continue
                            fwd_call, bwd_call = made[name]
                            try:
                                ms = _time(bwd_call if bwd else fwd_call)
                                if bwd and name == "flex":   # forward + backward, less the forward
                                    ms -= _time(fwd_call)
                                row[name] = (10.0 if bwd else 4.0) * n / ms / 1e9
                            except Exception as exc:  # noqa: BLE001 - reported in the row
                                row[name + "_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
                        rows.append(row)
                        _print(row)
    return rows


def _print(r):
    print(f"| {r['case']} | {r['pass']} | {r['dtype']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seq']} | "
          f"{r['batch']} | {_fmt(r['stdlib'])} | {_fmt(r['sdpa_cudnn'])} | {_fmt(r['sdpa_flash'])} | "
          f"{_fmt(r['flex'])} | {_ratio(r['stdlib'], r['sdpa_cudnn'])} | {_ratio(r['stdlib'], r['flex'])} |",
          flush=True)


def main(dtypes, dims, seqs, passes, json_path=None):
    rows = run_features(dtypes, dims, seqs, passes)
    out = {"device": torch.cuda.get_device_name(), "feature_rows": rows}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))
