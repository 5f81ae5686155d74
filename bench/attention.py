"""Attention throughput, forward and backward: the tilec example kernels vs the same algorithm in Triton vs SDPA.

    python bench/attention.py [--quick] [--dtypes f16,bf16] [--dims 64,128] [--seqs 1024,...]
                              [--passes fwd,bwd] [--json FILE] [--results FILE] [--plot IMAGE]
                              [--check] [--mods] [--varlen] [--features]

The tilec kernel is `examples/flash_attention.py` as a user wrote it; the Triton kernel
below is the same algorithm with the same blocks, the example's `blocks_for` of each shape
(Q tile loaded once, online softmax in base 2, the loop split into unmasked and masked key
blocks, the last query blocks launched first). SDPA runs with its flash
(FA2) and cuDNN backends. q, k, v are (batch·heads, seq, dim); batch·heads is chosen
so every row holds 128k tokens, which fills the GPU at every sequence length.
TFLOP/s = 4 · Z · S² · D forward, 10 · Z · S² · D backward (halved for causal) / time, median of triton.testing.do_bench
on fresh random data. Each tilec configuration's ptxas register/spill report is
printed. Prints a table, then one JSON line (also written to --json).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

import tilec as tc
from tilec.stdlib_kernels import attention as sk_attention
from tilec.stdlib_kernels import attention_backward as sk_attention_backward

try:  # as a package module (tests) or as a script (bench/ first on sys.path)
    from bench import convert
    from bench.results import current_commit as results_commit
    from bench.tables import cell as _fmt, ratio_cell as _ratio
except ImportError:
    import convert  # type: ignore[no-redef]
    from results import current_commit as results_commit  # type: ignore[no-redef]
    from tables import cell as _fmt, ratio_cell as _ratio  # type: ignore[no-redef]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import flash_attention as example  # noqa: E402
import flash_attention_bwd as bwd  # noqa: E402

TOKENS = 131072
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
TILEC_DTYPE = {"f16": "f16", "bf16": "bf16"}


@triton.jit
def _triton_block(q, K, V, base, j, m_i, l_i, acc, qk_scale, q0, n_kv, s_seq,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    cols = j * BN + tl.arange(0, BN)
    d = tl.arange(0, D)
    if MASKED:
        kt = tl.load(K + base + cols[None, :] * s_seq + d[:, None], mask=cols[None, :] < n_kv, other=0.0)
        vt = tl.load(V + base + cols[:, None] * s_seq + d[None, :], mask=cols[:, None] < n_kv, other=0.0)
    else:
        kt = tl.load(K + base + cols[None, :] * s_seq + d[:, None])
        vt = tl.load(V + base + cols[:, None] * s_seq + d[None, :])
    s = tl.dot(q, kt) * qk_scale
    if MASKED:
        keep = cols[None, :] < n_kv
        if CAUSAL:
            rows = q0 + tl.arange(0, BM)
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(V.dtype.element_ty), vt, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def _triton_attention(Q, K, V, O, s_z, s_seq, n_q, n_kv, scale, CAUSAL: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    mblk = tl.num_programs(0) - 1 - tl.program_id(0)   # the longest first, as the tilec example
    z = tl.program_id(1)
    q0 = mblk * BM
    base = z.to(tl.int64) * s_z
    rows = q0 + tl.arange(0, BM)
    d = tl.arange(0, D)
    q = tl.load(Q + base + rows[:, None] * s_seq + d[None, :], mask=rows[:, None] < n_q, other=0.0)
    qk_scale = scale * 1.4426950408889634
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    if CAUSAL:
        n_full = q0 // BN
        n_all = tl.cdiv(tl.minimum(q0 + BM, n_kv), BN)
    else:
        n_full = n_kv // BN
        n_all = tl.cdiv(n_kv, BN)
    for j in range(0, n_full):
        m_i, l_i, acc = _triton_block(q, K, V, base, j, m_i, l_i, acc, qk_scale, q0, n_kv, s_seq,
                                      False, CAUSAL, BM, BN, D)
    for j in range(n_full, n_all):
        m_i, l_i, acc = _triton_block(q, K, V, base, j, m_i, l_i, acc, qk_scale, q0, n_kv, s_seq,
                                      True, CAUSAL, BM, BN, D)
    out = acc / l_i[:, None]
    tl.store(O + base + rows[:, None] * s_seq + d[None, :], out.to(O.dtype.element_ty), mask=rows[:, None] < n_q)


@triton.jit
def _triton_bwd_delta(O, DO, Delta, s_z, s_seq, n_q, BM: tl.constexpr, D: tl.constexpr):
    mblk = tl.program_id(0)
    z = tl.program_id(1)
    rows = mblk * BM + tl.arange(0, BM)
    d = tl.arange(0, D)
    off = z.to(tl.int64) * s_z + rows[:, None] * s_seq + d[None, :]
    o = tl.load(O + off, mask=rows[:, None] < n_q, other=0.0).to(tl.float32)
    do = tl.load(DO + off, mask=rows[:, None] < n_q, other=0.0).to(tl.float32)
    tl.store(Delta + z * n_q + rows, tl.sum(o * do, 1), mask=rows < n_q)


@triton.jit
def _triton_dkdv_block(kt, vt, Q, DO, LSE, Delta, base, zq, i, dk, dv, qk_scale, n0, n_q, s_seq,
                       MASKED: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    rows = i * BM + tl.arange(0, BM)
    d = tl.arange(0, D)
    inside = rows < n_q
    qT = tl.load(Q + base + rows[None, :] * s_seq + d[:, None], mask=inside[None, :], other=0.0)
    do = tl.load(DO + base + rows[:, None] * s_seq + d[None, :], mask=inside[:, None], other=0.0)
    l_i = tl.load(LSE + zq + rows, mask=inside, other=float("inf"))
    d_i = tl.load(Delta + zq + rows, mask=inside, other=0.0)
    pt = tl.math.exp2(tl.dot(kt, qT) * qk_scale - l_i[None, :])
    if MASKED:
        keys = n0 + tl.arange(0, BN)
        pt = tl.where(keys[:, None] <= rows[None, :], pt, 0.0)
    dv = tl.dot(pt.to(DO.dtype.element_ty), do, dv)
    dpt = tl.dot(vt, tl.trans(do))
    dst = pt * (dpt - d_i[None, :])
    dk = tl.dot(dst.to(Q.dtype.element_ty), tl.trans(qT), dk)
    return dk, dv


@triton.jit
def _triton_bwd_dkdv(Q, K, V, DO, LSE, Delta, DK, DV, s_z, s_seq, n_q, scale, CAUSAL: tl.constexpr,
                     BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    nblk = tl.program_id(0)
    z = tl.program_id(1)
    n0 = nblk * BN
    base = z.to(tl.int64) * s_z
    zq = z.to(tl.int64) * n_q
    keys = n0 + tl.arange(0, BN)
    d = tl.arange(0, D)
    koff = base + keys[:, None] * s_seq + d[None, :]
    kt = tl.load(K + koff, mask=keys[:, None] < n_q, other=0.0)
    vt = tl.load(V + koff, mask=keys[:, None] < n_q, other=0.0)
    qk_scale = scale * 1.4426950408889634
    dk = tl.zeros((BN, D), tl.float32)
    dv = tl.zeros((BN, D), tl.float32)
    n_qblk = tl.cdiv(n_q, BM)
    if CAUSAL:
        first = n0 // BM
        whole = tl.minimum(tl.cdiv(n0 + BN - 1, BM), n_qblk)
    else:
        first = 0
        whole = 0
    for i in range(first, whole):
        dk, dv = _triton_dkdv_block(kt, vt, Q, DO, LSE, Delta, base, zq, i, dk, dv, qk_scale, n0, n_q, s_seq,
                                    True, BM, BN, D)
    for i in range(tl.maximum(first, whole), n_qblk):
        dk, dv = _triton_dkdv_block(kt, vt, Q, DO, LSE, Delta, base, zq, i, dk, dv, qk_scale, n0, n_q, s_seq,
                                    False, BM, BN, D)
    tl.store(DK + koff, (dk * scale).to(DK.dtype.element_ty), mask=keys[:, None] < n_q)
    tl.store(DV + koff, dv.to(DV.dtype.element_ty), mask=keys[:, None] < n_q)


@triton.jit
def _triton_dq_block(q, do, l_i, d_i, K, V, base, j, dq, qk_scale, q0, n_kv, s_seq,
                     MASKED: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    keys = j * BN + tl.arange(0, BN)
    d = tl.arange(0, D)
    kT = tl.load(K + base + keys[None, :] * s_seq + d[:, None], mask=keys[None, :] < n_kv, other=0.0)
    vT = tl.load(V + base + keys[None, :] * s_seq + d[:, None], mask=keys[None, :] < n_kv, other=0.0)
    p = tl.math.exp2(tl.dot(q, kT) * qk_scale - l_i[:, None])
    if MASKED:
        rows = q0 + tl.arange(0, BM)
        p = tl.where(keys[None, :] <= rows[:, None], p, 0.0)
    dp = tl.dot(do, vT)
    ds = p * (dp - d_i[:, None])
    return tl.dot(ds.to(K.dtype.element_ty), tl.trans(kT), dq)


@triton.jit
def _triton_bwd_dq(Q, K, V, DO, LSE, Delta, DQ, s_z, s_seq, n_q, scale, CAUSAL: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    mblk = tl.num_programs(0) - 1 - tl.program_id(0)   # the longest first, as the tilec example
    z = tl.program_id(1)
    q0 = mblk * BM
    base = z.to(tl.int64) * s_z
    rows = q0 + tl.arange(0, BM)
    d = tl.arange(0, D)
    off = base + rows[:, None] * s_seq + d[None, :]
    inside = rows < n_q
    q = tl.load(Q + off, mask=inside[:, None], other=0.0)
    do = tl.load(DO + off, mask=inside[:, None], other=0.0)
    l_i = tl.load(LSE + z.to(tl.int64) * n_q + rows, mask=inside, other=float("inf"))
    d_i = tl.load(Delta + z.to(tl.int64) * n_q + rows, mask=inside, other=0.0)
    qk_scale = scale * 1.4426950408889634
    dq = tl.zeros((BM, D), tl.float32)
    if CAUSAL:
        n_whole = q0 // BN
        n_all = tl.cdiv(tl.minimum(q0 + BM, n_q), BN)
    else:
        n_whole = tl.cdiv(n_q, BN)
        n_all = n_whole
    for j in range(0, n_whole):
        dq = _triton_dq_block(q, do, l_i, d_i, K, V, base, j, dq, qk_scale, q0, n_q, s_seq, False, BM, BN, D)
    for j in range(n_whole, n_all):
        dq = _triton_dq_block(q, do, l_i, d_i, K, V, base, j, dq, qk_scale, q0, n_q, s_seq, True, BM, BN, D)
    tl.store(DQ + off, (dq * scale).to(DQ.dtype.element_ty), mask=inside[:, None])


# Triton's blocks: per kernel and head dim, the fastest of (BM, BN, warps) = (64, 64, 4),
# (64, 128, 8), (128, 64, 8), (32, 128, 4) on an H200 (seq 4096, f16, 3 stages)
TRITON_BWD_BLOCKS = {"dkdv": {64: (64, 64, 4), 128: (64, 128, 8)}, "dq": {64: (128, 64, 8), 128: (128, 64, 8)}}


def triton_attention_bwd(q, k, v, o, lse, do, grads, delta, causal, num_stages=3):
    z, s, d = q.shape
    dq, dk, dv = grads
    scale = 1.0 / math.sqrt(d)
    (bm_k, bn_k, w_k), (bm_q, bn_q, w_q) = (TRITON_BWD_BLOCKS[kind][64 if d <= 64 else 128] for kind in ("dkdv", "dq"))
    _triton_bwd_delta[(triton.cdiv(s, 64), z)](o, do, delta, q.stride(0), q.stride(1), s, BM=64, D=d)
    _triton_bwd_dkdv[(triton.cdiv(s, bn_k), z)](q, k, v, do, lse, delta, dk, dv, q.stride(0), q.stride(1), s, scale,
                                               CAUSAL=causal, BM=bm_k, BN=bn_k, D=d,
                                               num_warps=w_k, num_stages=num_stages)
    _triton_bwd_dq[(triton.cdiv(s, bm_q), z)](q, k, v, do, lse, delta, dq, q.stride(0), q.stride(1), s, scale,
                                             CAUSAL=causal, BM=bm_q, BN=bn_q, D=d,
                                             num_warps=w_q, num_stages=num_stages)
    return grads


def tilec_attention_bwd(q, k, v, o, lse, do, grads, delta, causal, blocks=None):
    z, s, d = q.shape
    dq, dk, dv = grads
    scale = 1.0 / math.sqrt(d)
    (bm_k, bn_k, w_k), (bm_q, bn_q, w_q) = ((blocks or bwd.blocks_for(d))[name]
                                            for name in ("attention_bwd_dkdv", "attention_bwd_dq"))
    bwd.attention_bwd_delta[(tc.cdiv(s, 64), z)](o, do, delta, BM=64, D=d)
    ins = (q, k, v, do, lse, delta)
    bwd.attention_bwd_dkdv[(tc.cdiv(s, bn_k), z)](*ins, dk, dv, scale, CAUSAL=causal,
                                                  BM=bm_k, BN=bn_k, D=d, num_warps=w_k, fast_math=True)
    bwd.attention_bwd_dq[(tc.cdiv(s, bm_q), z)](*ins, dq, scale, CAUSAL=causal,
                                                BM=bm_q, BN=bn_q, D=d, num_warps=w_q, fast_math=True)
    return grads


def triton_attention(q, k, v, o, causal, bm=128, bn=64, num_warps=8, num_stages=3):
    z, s, d = q.shape
    _triton_attention[(triton.cdiv(s, bm), z)](q, k, v, o, q.stride(0), q.stride(1), s, s, 1.0 / math.sqrt(d),
                                               CAUSAL=causal, BM=bm, BN=bn, D=d,
                                               num_warps=num_warps, num_stages=num_stages)
    return o


def tilec_attention(q, k, v, o, causal, bm=128, bn=64, lse=None, num_warps=8):
    z, s, d = q.shape
    lse = torch.empty(z, s, device=q.device, dtype=torch.float32) if lse is None else lse
    example.attention_fwd[(tc.cdiv(s, bm), z)](q, k, v, o, lse, 1.0 / math.sqrt(d), CAUSAL=causal,
                                               BM=bm, BN=bn, D=d, num_warps=num_warps, fast_math=True)
    return o


def sdpa(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def run(q, k, v, o, causal):
        with sdpa_kernel(which):
            return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)
    return run


@functools.lru_cache(maxsize=None)
def ptxas_report(dname, d, causal, bm=128, bn=64, num_warps=8) -> str:
    t = TILEC_DTYPE[dname]
    sig = example.SIGNATURES["attention_fwd"].replace("=f16[", f"={t}[").replace("CAUSAL=True", f"CAUSAL={causal}")
    sig = sig.replace("BM=128, BN=64, D=64", f"BM={bm}, BN={bn}, D={d}")
    r = example.attention_fwd.compile(sig, num_warps=num_warps, fast_math=True).metadata.get("ptxas") or {}
    return f"{r.get('registers')} regs, {r.get('spill_stores', 0)} B spilled"


def ptxas_report_bwd(dname, d, causal) -> str:
    t = TILEC_DTYPE[dname]
    parts = []
    for name in ("attention_bwd_dkdv", "attention_bwd_dq"):
        bm, bn, warps = bwd.blocks_for(d)[name]
        sig = bwd.SIGNATURES[name].replace("=f16[", f"={t}[").replace("CAUSAL=True", f"CAUSAL={causal}")
        sig = sig.replace("BM=64, BN=64, D=64", f"BM={bm}, BN={bn}, D={d}")
        r = getattr(bwd, name).compile(sig, num_warps=warps, fast_math=True).metadata.get("ptxas") or {}
        parts.append(f"{name[14:]}: {r.get('registers')} regs, {r.get('spill_stores', 0)} B spilled")
    return "; ".join(parts)


def _bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def check_all(dtypes, dims):
    """Every implementation against a float64 reference on odd sequence lengths."""
    worst = 0.0
    for dname in dtypes:
        for d in dims:
            for causal in (False, True):
                for s in (1, 77, 1000):
                    q, k, v = (torch.randn(3, s, d, device="cuda", dtype=DTYPES[dname]) for _ in range(3))
                    qd, kd, vd = (t.double() for t in (q, k, v))
                    sc = (qd @ kd.transpose(1, 2)) / math.sqrt(d)
                    if causal:
                        sc = sc.masked_fill(torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
                    want = torch.softmax(sc, -1) @ vd
                    bm, bn, warps = example.blocks_for(d, seq=s, causal=causal)
                    for name, fn in (("tilec", tilec_attention), ("triton", triton_attention)):
                        got = fn(q, k, v, torch.empty_like(q), causal, bm, bn, num_warps=warps).double()
                        err = ((got - want).abs() / (1 + want.abs())).max().item()
                        worst = max(worst, err)
                        status = "ok" if err < 2e-2 else "MISMATCH"
                        print(f"check {name} {dname} d={d} causal={causal} s={s}: {status} ({err:.2e})", flush=True)
    return worst


def run(dtypes, dims, seqs):
    rows = []
    for dname in dtypes:
        for d in dims:
            for causal in (False, True):
                for s in seqs:
                    # the example's tiles for this shape, Triton's the same
                    bm, bn, warps = example.blocks_for(d, seq=s, causal=causal)
                    rep = ptxas_report(dname, d, causal, bm, bn, warps)
                    z = max(1, TOKENS // s)
                    q, k, v = (torch.randn(z, s, d, device="cuda", dtype=DTYPES[dname]) for _ in range(3))
                    o = torch.empty_like(q)
                    lse = torch.empty(z, s, device="cuda", dtype=torch.float32)

                    def tilec_fwd(q, k, v, o, causal, lse=lse, bm=bm, bn=bn, warps=warps):
                        return tilec_attention(q, k, v, o, causal, bm, bn, lse, warps)

                    def triton_fwd(q, k, v, o, causal, bm=bm, bn=bn, warps=warps):
                        return triton_attention(q, k, v, o, causal, bm, bn, warps)
                    flops = 4.0 * z * s * s * d * (0.5 if causal else 1.0)
                    row = {"dtype": dname, "d": d, "causal": causal, "seq": s, "z": z, "tilec_ptxas": rep}
                    def stdlib_fwd(q, k, v, o, causal):
                        return sk_attention(q[None], k[None], v[None], causal=causal, layout="bhsd", out=o[None])

                    impls = [("tilec", tilec_fwd), ("stdlib", stdlib_fwd), ("triton", triton_fwd),
                             ("sdpa_flash", sdpa("flash")), ("sdpa_cudnn", sdpa("cudnn"))]
                    for name, fn in impls:
                        _measure(row, name, lambda fn=fn: fn(q, k, v, o, causal), flops)
                    rows.append(row)
                    _print_row(row)
    return rows


def _failed(row, name, exc) -> None:
    """An implementation that does not take this shape: no figure, and why."""
    row[name] = None
    row[name + "_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"


def _measure(row, name, call, flops) -> None:
    try:
        row[name] = flops / _bench(call) / 1e9
    except Exception as exc:  # noqa: BLE001 - reported in the row
        _failed(row, name, exc)


def _reference_grads(q, k, v, do, causal):
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(qd[None], kd[None], vd[None], is_causal=causal)[0]
    o.backward(do.double())
    return qd.grad, kd.grad, vd.grad


def _fwd_state(q, k, v, causal):
    z, s, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(z, s, device=q.device, dtype=torch.float32)
    tilec_attention(q, k, v, o, causal, lse=lse)
    return o, lse


def stdlib_bwd_state(q, k, v, do, causal, grads):
    """A call of the stdlib's attention_backward on (batch·heads, seq, dim) tensors seen as one
    (batch, heads, seq, dim) batch, from the stdlib forward's out and (natural) lse."""
    q4, k4, v4, do4 = (t[None] for t in (q, k, v, do))
    o, lse = sk_attention(q4, k4, v4, causal=causal, layout="bhsd", return_lse=True)
    dq, dk, dv = (g[None] for g in grads)
    return lambda: sk_attention_backward(do4, q4, k4, v4, o, lse, causal=causal, layout="bhsd", dq=dq, dk=dk, dv=dv)


def check_bwd(dtypes, dims):
    """The backward implementations against float64 autograd on odd sequence lengths."""
    worst = 0.0
    for dname in dtypes:
        for d in dims:
            for causal in (False, True):
                for s in (1, 77, 1000):
                    q, k, v, do = (torch.randn(3, s, d, device="cuda", dtype=DTYPES[dname]) for _ in range(4))
                    want = _reference_grads(q, k, v, do, causal)
                    o, lse = _fwd_state(q, k, v, causal)
                    delta = torch.empty(3, s, device="cuda", dtype=torch.float32)
                    for name, fn in (("tilec", tilec_attention_bwd), ("triton", triton_attention_bwd), ("stdlib", None)):
                        grads = tuple(torch.empty_like(q) for _ in range(3))
                        if fn is None:
                            stdlib_bwd_state(q, k, v, do, causal, grads)()
                        else:
                            fn(q, k, v, o, lse, do, grads, delta, causal)
                        for gname, g, w in zip(("dq", "dk", "dv"), grads, want):
                            err = ((g.double() - w).abs() / (1 + w.abs())).max().item()
                            worst = max(worst, err)
                            status = "ok" if err < 3e-2 else "MISMATCH"
                            print(f"check bwd {name} {gname} {dname} d={d} causal={causal} s={s}: {status} ({err:.2e})",
                                  flush=True)
    return worst


def _sdpa_bwd(backend, q, k, v, do, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(which):
        o = torch.nn.functional.scaled_dot_product_attention(qg[None], kg[None], vg[None], is_causal=causal)
    return lambda: torch.autograd.grad(o, (qg, kg, vg), do[None], retain_graph=True)


def run_bwd(dtypes, dims, seqs):
    rows = []
    for dname in dtypes:
        for d in dims:
            for causal in (False, True):
                rep = ptxas_report_bwd(dname, d, causal)
                for s in seqs:
                    z = max(1, TOKENS // s)
                    q, k, v, do = (torch.randn(z, s, d, device="cuda", dtype=DTYPES[dname]) for _ in range(4))
                    o, lse = _fwd_state(q, k, v, causal)
                    grads = tuple(torch.empty_like(q) for _ in range(3))
                    delta = torch.empty(z, s, device="cuda", dtype=torch.float32)
                    flops = 10.0 * z * s * s * d * (0.5 if causal else 1.0)
                    row = {"pass": "bwd", "dtype": dname, "d": d, "causal": causal, "seq": s, "z": z,
                           "tilec_ptxas": rep}
                    impls = [("tilec", lambda: tilec_attention_bwd(q, k, v, o, lse, do, grads, delta, causal)),
                             ("stdlib", stdlib_bwd_state(q, k, v, do, causal, grads)),
                             ("triton", lambda: triton_attention_bwd(q, k, v, o, lse, do, grads, delta, causal))]
                    for backend in ("flash", "cudnn"):
                        try:
                            impls.append(("sdpa_" + backend, _sdpa_bwd(backend, q, k, v, do, causal)))
                        except Exception as exc:  # noqa: BLE001 - reported in the row
                            _failed(row, "sdpa_" + backend, exc)
                    for name, fn in impls:
                        _measure(row, name, fn, flops)
                    rows.append(row)
                    _print_row(row)
    return rows


def _print_row(r):
    print(f"| {r.get('pass', 'fwd')} | {r['dtype']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seq']} | "
          f"{r['z']} | {_fmt(r['tilec'])} | {_fmt(r.get('stdlib'))} | {_fmt(r['triton'])} | "
          f"{_fmt(r['sdpa_flash'])} | {_fmt(r['sdpa_cudnn'])} | "
          f"{_ratio(r['tilec'], r['triton'])} | {_ratio(r['tilec'], r['sdpa_cudnn'])} | {r['tilec_ptxas']} |",
          flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="f16, dims 64 and 128, seq 1024 and 4096")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    p.add_argument("--check", action="store_true", help="check every implementation against float64 first")
    p.add_argument("--passes", default="fwd,bwd", help="fwd, bwd or both")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--results", help="also write the rows in bench/results.py's schema (python -m bench.compare, bench.tables)")
    p.add_argument("--plot", help="also plot the rows into this image (bench/attention_plot.py; needs matplotlib)")
    p.add_argument("--mods", action="store_true",
                   help="only the score_mod / mask_mod section: sk.attention against FlexAttention on the same "
                        "functions (bench/attention_mods.py; seqs default to 2048,8192)")
    p.add_argument("--features", action="store_true",
                   help="only the grouped-query (32 / 8 heads) and sliding-window (4096) section: sk.attention "
                        "against SDPA and FlexAttention (bench/attention_features.py; seqs default to 4096,16384)")
    p.add_argument("--varlen", action="store_true",
                   help="only the variable-length section: sk.attention on packed sequences (equal and mixed "
                        "lengths) against dense at the same token count (bench/attention_varlen.py; seqs default "
                        "to 2048,8192)")
    args = p.parse_args(argv)
    dtypes = args.dtypes.split(",")
    dims = [int(x) for x in args.dims.split(",")]
    seqs = [int(x) for x in args.seqs.split(",")]
    if args.quick:
        dtypes, seqs = ["f16"], [1024, 4096]
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    passes = args.passes.split(",")
    sections = ((args.mods, "attention_mods", [2048, 8192]), (args.varlen, "attention_varlen", [2048, 8192]),
                (args.features, "attention_features", [4096, 16384]))
    for flag, name, default_seqs in sections:
        if flag:   # its own table, at its own lengths unless --seqs says otherwise
            try:
                sub = importlib.import_module(f"bench.{name}")
            except ImportError:
                sub = importlib.import_module(name)
            sub_seqs = default_seqs if args.seqs == p.get_default("seqs") and not args.quick else seqs
            sub.main(dtypes, dims, sub_seqs, passes, args.json)
            return
    if args.check:
        worst = max(check_all(dtypes, dims) if "fwd" in passes else 0.0,
                    check_bwd(dtypes, dims) if "bwd" in passes else 0.0)
        print(f"worst relative error {worst:.2e}", flush=True)
    print("| pass | dtype | D | causal | seq | Z | tilec | stdlib | Triton | SDPA flash | SDPA cuDNN | tilec/Triton | "
          "tilec/cuDNN | tilec ptxas |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    rows = (run(dtypes, dims, seqs) if "fwd" in passes else []) + (
        run_bwd(dtypes, dims, seqs) if "bwd" in passes else [])
    out = {"device": torch.cuda.get_device_name(), "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))
    convert.save(args.results, convert.attention_rows(rows), out["device"])
    if args.plot:
        try:
            from bench import attention_plot
        except ImportError:
            import attention_plot  # type: ignore[no-redef]
        attention_plot.plot({"device": out["device"], "commit": results_commit(), "date": "",
                             "rows": convert.attention_rows(rows)}, args.plot)


if __name__ == "__main__":
    main()
