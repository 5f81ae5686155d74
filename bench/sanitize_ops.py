"""Every standard-library op on boundary shapes, once each: the program `bench/sanitize.sh`
runs under compute-sanitizer's memcheck, racecheck, synccheck and initcheck.

Shapes: one row, one column, odd lengths, lengths just past a tile, rows past one tile
(looped, split and windowed row kernels), strided views; f16, bf16 and f32; torch tensors
as a user passes them (from the caching allocator, so memory past a tensor's end is other
data or never written: what initcheck catches a masked-off read of). Each op's result is
checked against torch in float64, so a run also proves the kernels still compute the
right thing with the sanitizer's instrumentation.

    python3 bench/sanitize_ops.py [--ops softmax,matmul] [--quick] [--jobs 8]

`--jobs J` runs the groups in J processes at once (each its own group, outputs printed in
group order): `sanitize.sh` warms the compile cache that way before the tools run, since
compiling every kernel one after another takes minutes.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

import tilec as tc
import tilec.stdlib_kernels as sk

SHAPES = [(1, 1), (1, 7), (3, 1000), (5, 4097), (2, 16385), (7, 33), (4, 65), (9, 257), (3, 70001)]
QUICK = [(1, 7), (5, 4097), (2, 16385), (7, 33)]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
TOL = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-3}


def rand(shape, dtype, scale=1.0):
    return (torch.randn(shape, device="cuda", dtype=torch.float32) * scale).to(dtype)


def strided(shape, dtype):
    """Rows of a wider buffer: a view whose row stride is not its width."""
    rows, cols = shape
    return rand((rows, cols + 3), dtype)[:, 1:cols + 1]


FAILURES = []


def close(name, got, ref, dtype, floor=1e-30):
    """Records a failure (the run goes on, so that one log shows every op's findings). The error
    is relative to the reference's norm, or to `floor` where that is larger (a gradient that is
    zero in exact arithmetic, as dq and dk of attention over one key, is rounding noise)."""
    got, ref = got.double(), ref.double()
    nan = ref.isnan()
    if not torch.equal(got.isnan(), nan):
        FAILURES.append(f"{name} {tuple(ref.shape)} {dtype}: NaN where the reference has none, or none where it has")
        return
    got, ref = got[~nan], ref[~nan]
    if ref.numel() == 0:
        return
    err = ((got - ref).norm() / ref.norm().clamp_min(floor)).item()
    if not err <= TOL[dtype]:
        FAILURES.append(f"{name} {tuple(ref.shape)} {dtype}: relative error {err:.3g}")


def _rowwise(shape, dtype):
    for x in (rand(shape, dtype), strided(shape, dtype)):
        close("softmax", sk.softmax(x), torch.softmax(x.double(), -1), dtype)
        close("log_softmax", sk.log_softmax(x), torch.log_softmax(x.double(), -1), dtype)
        w, b = rand(shape[1:], dtype), rand(shape[1:], dtype)
        close("layer_norm", sk.layer_norm(x, w, b),
              torch.nn.functional.layer_norm(x.double(), shape[1:], w.double(), b.double()), dtype)
        close("rms_norm", sk.rms_norm(x, w), torch.nn.functional.rms_norm(x.double(), shape[1:], w.double(), 1e-6),
              dtype)
        close("cumsum", sk.cumsum(x), x.double().cumsum(-1), dtype)
        for dim in (0, 1):
            close(f"sum dim {dim}", sk.sum(x, dim), x.double().sum(dim), dtype)
            close(f"max dim {dim}", sk.amax(x, dim), x.double().amax(dim), dtype)


def _cross_entropy(shape, dtype):
    x = rand(shape, dtype, 3.0)
    t = torch.randint(0, shape[1], (shape[0],), device="cuda", dtype=torch.int64)
    t[0] = -100
    for reduction in ("none", "mean", "sum"):
        ref = torch.nn.functional.cross_entropy(x.double(), t, reduction=reduction)
        close(f"cross_entropy {reduction}", sk.cross_entropy(x, t, reduction=reduction), ref, dtype)  # in x.dtype


def _elementwise(shape, dtype):
    x = rand(shape, dtype)
    close("gelu", sk.gelu(x), torch.nn.functional.gelu(x.double()), dtype)
    close("gelu tanh", sk.gelu(x, approximate="tanh"), torch.nn.functional.gelu(x.double(), approximate="tanh"), dtype)
    y = rand(shape, dtype)
    close("add", sk.add(x, y), x.double() + y.double(), dtype)
    close("mul", sk.mul(x, y), x.double() * y.double(), dtype)
    row = rand(shape[1:], dtype)
    close("add (broadcast)", sk.add(x, row), x.double() + row.double(), dtype)
    close("swiglu", sk.swiglu(x, y), torch.nn.functional.silu(x.double()) * y.double(), dtype)
    if shape[1] % 2 == 0:
        d = shape[1] // 2
        close("silu_and_mul", sk.silu_and_mul(x),
              torch.nn.functional.silu(x[:, :d].double()) * x[:, d:].double(), dtype)
    close("transpose", sk.transpose(x), x.double().t(), dtype)
    kept = sk.dropout(x, 0.25, seed=7)
    scaled = x.double() / 0.75
    nz = kept.double() != 0
    close("dropout", kept.double()[nz], scaled[nz], dtype)


def _rope(dtype):
    for seq, heads, dim in ((1, 1, 2), (7, 3, 64), (33, 2, 128)):
        x = rand((2, seq, heads, dim), dtype)
        ang = torch.rand(seq, dim // 2, device="cuda", dtype=torch.float64) * 6
        cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
        x1, x2 = x.double()[..., :dim // 2], x.double()[..., dim // 2:]
        c, s = cos.double()[None, :, None], sin.double()[None, :, None]
        ref = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
        close("rope", sk.rope(x, cos, sin, seq_dim=1), ref, dtype)


def _matmul(dtype):
    if dtype == torch.float32:
        return
    for m, n, k in ((1, 1, 1), (7, 33, 65), (129, 257, 63), (300, 100, 1000), (1024, 1024, 512)):
        a, b = rand((m, k), dtype), rand((k, n), dtype)
        close(f"matmul {m}x{n}x{k}", sk.matmul(a, b), a.double() @ b.double(), dtype)


def _sdpa(q, k, v, causal, window=None, softcap=None):
    """float64 reference, bshd layout, GQA by repetition; causal bottom-right aligned."""
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    rep = qd.shape[1] // kd.shape[1]
    kd, vd = kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1)
    s = qd @ kd.transpose(-1, -2) / q.shape[-1] ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    n_q, n_k = s.shape[-2:]
    i = torch.arange(n_q, device="cuda")[:, None] + (n_k - n_q)
    j = torch.arange(n_k, device="cuda")[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device="cuda")
    if causal:
        keep &= j <= i
    if window is not None:
        keep &= (j >= i - window[0]) & (j <= i + window[1])
    s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return (p @ vd).transpose(1, 2)


def _attention(dtype):
    """Forward and backward over the shipped head dims, GQA, masks, lengths off the tiles."""
    if dtype == torch.float32:
        return
    cases = [  # batch, n_q, n_k, heads, kv_heads, d, dv, causal, window, softcap
        (1, 1, 1, 1, 1, 64, 64, False, None, None),
        (2, 77, 77, 4, 2, 64, 64, True, None, None),
        (1, 130, 200, 2, 1, 128, 128, True, None, None),
        (1, 65, 65, 2, 2, 96, 96, False, (16, 0), 30.0),
        (1, 33, 70, 2, 1, 192, 128, False, None, None),
        (1, 40, 40, 1, 1, 256, 256, True, None, None),
    ]
    for b, n_q, n_k, h, hk, d, dv, causal, window, cap in cases:
        q, k, v = rand((b, n_q, h, d), dtype), rand((b, n_k, hk, d), dtype), rand((b, n_k, hk, dv), dtype)
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        ref = _sdpa(*leaves, causal, window, cap)
        name = f"attention d{d} causal={causal}"
        o, lse = sk.attention(q, k, v, causal=causal, window=window, softcap=cap, return_lse=True)
        close(name, o, ref.detach(), dtype)
        do = rand(o.shape, dtype)
        ref.backward(do.double())
        dq, dk, dv_ = sk.attention_backward(do, q, k, v, o, lse, causal=causal, window=window, softcap=cap)
        for nm, got, leaf in (("dq", dq, leaves[0]), ("dk", dk, leaves[1]), ("dv", dv_, leaves[2])):
            close(f"{name} {nm}", got, leaf.grad, dtype, floor=1.0)


def _decode(dtype):
    """attention_decode (contiguous and paged caches, GQA, split-KV, k_new append) and mla_decode."""
    if dtype == torch.float32:
        return
    for page, lens, q_len, splits in ((0, [0, 1, 700], 1, None), (16, [33, 1000, 5], 4, 3), (64, [129, 64, 1], 1, None)):
        batch, h, hk, d = len(lens), 8, 2, 128
        cap = max(lens) + 17
        if page:
            per = -(-cap // page)
            kc, vc = rand((batch * per + 3, page, hk, d), dtype), rand((batch * per + 3, page, hk, d), dtype)
            table = torch.randperm(batch * per + 3, device="cuda")[:batch * per].reshape(batch, per).to(torch.int32)
            rows = lambda c, i, n: c[table[i, torch.arange(n, device="cuda") // page].long(),  # noqa: E731
                                     torch.arange(n, device="cuda") % page]
        else:
            kc, vc, table = rand((batch, cap, hk, d), dtype), rand((batch, cap, hk, d), dtype), None
            rows = lambda c, i, n: c[i, :n]  # noqa: E731
        seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
        q = rand((batch, q_len, h, d), dtype)
        o = sk.attention_decode(q, kc, vc, seqlens, block_table=table, num_splits=splits)
        for i, n in enumerate(lens):
            if n == 0:
                continue
            ref = _sdpa(q[i:i + 1], rows(kc, i, n)[None], rows(vc, i, n)[None], causal=True)
            close(f"attention_decode page={page}", o[i:i + 1], ref, dtype)
    lens = [5, 300, 1]
    kv = rand((len(lens), max(lens) + 9, 1, 576), dtype)
    q = rand((len(lens), 1, 16, 576), dtype)
    o = sk.mla_decode(q, kv, torch.tensor(lens, device="cuda", dtype=torch.int32))
    for i, n in enumerate(lens):
        s = torch.einsum("thd,kd->thk", q[i].double(), kv[i, :n, 0].double()) / 576 ** 0.5
        ref = torch.einsum("thk,kd->thd", torch.softmax(s, -1), kv[i, :n, 0, :512].double())
        close("mla_decode", o[i], ref, dtype)


def _backward(shape, dtype):
    """The row ops' and elementwise ops' gradients against float64 autograd."""
    F = torch.nn.functional
    x, dy = rand(shape, dtype), rand(shape, dtype)
    for name, fwd, bwd, ref in (("softmax_backward", sk.softmax, sk.softmax_backward, lambda t: torch.softmax(t, -1)),
                                ("log_softmax_backward", sk.log_softmax, sk.log_softmax_backward,
                                 lambda t: torch.log_softmax(t, -1))):
        xd = x.double().requires_grad_()
        ref(xd).backward(dy.double())
        close(name, bwd(dy, fwd(x)), xd.grad, dtype)
    w, b = rand(shape[1:], dtype), rand(shape[1:], dtype)
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    F.layer_norm(xd, shape[1:], wd, bd).backward(dy.double())
    _, mean, rstd = sk.layer_norm(x, w, b, return_stats=True)
    dx, dw, db = sk.layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    for nm, got, leaf in (("dx", dx, xd), ("dw", dw, wd), ("db", db, bd)):
        close(f"layer_norm_backward {nm}", got, leaf.grad, dtype)
    xd, wd = (t.double().requires_grad_() for t in (x, w))
    F.rms_norm(xd, shape[1:], wd, 1e-6).backward(dy.double())
    _, rstd = sk.rms_norm(x, w, return_stats=True)
    dx, dw = sk.rms_norm_backward(dy, x, w, rstd)
    close("rms_norm_backward dx", dx, xd.grad, dtype)
    close("rms_norm_backward dw", dw, wd.grad, dtype)
    xd = x.double().requires_grad_()
    F.gelu(xd).backward(dy.double())
    close("gelu_backward", sk.gelu_backward(dy, x), xd.grad, dtype)
    u = rand(shape, dtype)
    xd, ud = x.double().requires_grad_(), u.double().requires_grad_()
    (F.silu(xd) * ud).backward(dy.double())
    dg, du = sk.swiglu_backward(dy, x, u)
    close("swiglu_backward dgate", dg, xd.grad, dtype)
    close("swiglu_backward dup", du, ud.grad, dtype)
    t = torch.randint(0, shape[1], (shape[0],), device="cuda")
    xd = x.double().requires_grad_()
    F.cross_entropy(xd, t).backward()
    _, g = sk.cross_entropy(x, t, return_grad=True)
    close("cross_entropy grad", g, xd.grad, dtype)
    kept = sk.dropout_backward(dy, 0.25, 7)
    fwd = sk.dropout(dy, 0.25, seed=7)
    close("dropout_backward", kept, fwd.double(), dtype)


def _llm(shape, dtype):
    """embedding (+ its gradient), add_rms_norm (+ backward), topk, sample, the torch-signature
    reductions (values and indices over either dim), cumsum and softmax over dim 0, transposes
    of a 3-D tensor, linear_cross_entropy."""
    F = torch.nn.functional
    rows, cols = shape
    w = rand((max(rows, 3) * 5, cols), dtype)
    ids = torch.randint(0, w.shape[0], (rows, 3), device="cuda")
    close("embedding", sk.embedding(w, ids), w.double()[ids], dtype)
    dy = rand((rows, 3, cols), dtype)
    wd = w.double().requires_grad_()
    F.embedding(ids, wd).backward(dy.double())
    close("embedding_backward", sk.embedding_backward(dy, ids, w.shape[0]), wd.grad, dtype)
    x, r, g = rand(shape, dtype), rand(shape, dtype), rand(shape[1:], dtype)
    xd, rd, gd = (t.double().requires_grad_() for t in (x, r, g))
    hd = xd + rd
    yd = F.rms_norm(hd, shape[1:], gd, 1e-6)
    y, h, rstd = sk.add_rms_norm(x, r, g, return_stats=True)
    close("add_rms_norm", y, yd.detach(), dtype)
    close("add_rms_norm residual", h, hd.detach(), dtype)
    dy, dh = rand(shape, dtype), rand(shape, dtype)
    torch.autograd.backward((yd, hd), (dy.double(), dh.double()))
    grads = sk.add_rms_norm_backward(dy, dh, h, g, rstd)
    close("add_rms_norm_backward dx", grads[0], xd.grad, dtype)
    close("add_rms_norm_backward dw", grads[-1], gd.grad, dtype)
    k = min(cols, 5)
    vals, idx = sk.topk(x, k)
    close("topk", vals, torch.topk(x.double(), k).values, dtype)
    close("topk indices", torch.gather(x, -1, idx), vals, dtype)
    tok = sk.sample(x, temperature=0.8, top_k=k, top_p=0.9, seed=3)
    if not ((tok >= 0) & (tok < cols)).all():
        FAILURES.append(f"sample {shape} {dtype}: a token outside the vocabulary")
    for dim in (0, 1):
        for name, ours, ref in (("max", sk.max, torch.max), ("min", sk.min, torch.min)):
            v, i = ours(x, dim)
            close(f"{name} dim {dim}", v, ref(x.double(), dim).values, dtype)
            close(f"{name} dim {dim} indices", torch.gather(x, dim, i.unsqueeze(dim)).squeeze(dim), v, dtype)
        close(f"argmax dim {dim}", torch.gather(x, dim, sk.argmax(x, dim, keepdim=True)),
              x.double().amax(dim, keepdim=True), dtype)
    close("cumsum dim 0", sk.cumsum(x, 0), x.double().cumsum(0), dtype)
    close("softmax dim 0", sk.softmax(x, 0), torch.softmax(x.double(), 0), dtype)
    t3 = rand((rows, 3, cols), dtype)
    for d0, d1 in ((0, 1), (0, 2), (1, 2)):
        close(f"transpose {d0},{d1}", sk.transpose(t3, d0, d1), t3.double().transpose(d0, d1), dtype)
    if dtype != torch.float32:
        hid, lw = rand((rows * 3, 64), dtype), rand((cols, 64), dtype, 0.2)
        tgt = torch.randint(0, cols, (rows * 3,), device="cuda")
        hd, lwd = hid.double().requires_grad_(), lw.double().requires_grad_()
        ref = F.cross_entropy(hd @ lwd.T, tgt)
        ref.backward()
        loss, dh, dw = sk.linear_cross_entropy(hid, lw, tgt)[:3]
        close("linear_cross_entropy", loss, ref.detach(), dtype)
        close("linear_cross_entropy dhidden", dh, hd.grad, dtype)
        close("linear_cross_entropy dweight", dw, lwd.grad, dtype)


@tc.func
def _alibi(score, b, h, q_idx, kv_idx, doc):
    return score + tc.exp2(-(h + 1).astype(tc.float32)) * (kv_idx - q_idx).astype(tc.float32)


@tc.func
def _alibi_grad(score, b, h, q_idx, kv_idx, doc):
    return 1.0


@tc.func
def _document_causal(b, h, q_idx, kv_idx, doc):
    row = doc.ptr + b * doc.stride(0)
    return (tc.load(row + q_idx) == tc.load(row + kv_idx)) & (q_idx >= kv_idx)


def _mods(dtype):
    """score_mod (ALiBi) and mask_mod (documents, causal) through a block mask, forward and
    backward, on lengths off the block."""
    if dtype == torch.float32:
        return
    for b, n, h, hk, d in ((2, 300, 4, 2, 64), (1, 777, 2, 1, 128)):
        cuts = torch.sort(torch.randperm(n - 1)[:3] + 1).values
        doc = torch.searchsorted(cuts, torch.arange(n), right=True).to(torch.int32)[None].repeat(b, 1).cuda()
        q, k, v = rand((b, n, h, d), dtype), rand((b, n, hk, d), dtype), rand((b, n, hk, d), dtype)
        bm = sk.block_mask(_document_causal, b, h, n, n, mod_args=(doc,), device="cuda")
        kw = dict(score_mod=_alibi, block_mask=bm, mod_args=(doc,))
        o, lse = sk.attention(q, k, v, return_lse=True, **kw)
        leaves = [t.double().transpose(1, 2).requires_grad_() for t in (q, k, v)]
        qd, kd, vd = leaves
        kd, vd = kd.repeat_interleave(h // hk, 1), vd.repeat_interleave(h // hk, 1)
        i = torch.arange(n, device="cuda")
        hi = torch.arange(h, device="cuda")[:, None, None]
        s = qd @ kd.transpose(-1, -2) / d ** 0.5 + 2.0 ** -(hi + 1.0) * (i[None, :] - i[:, None])
        dl = doc.long()
        keep = (dl[:, None, :, None] == dl[:, None, None, :]) & (i[:, None] >= i[None, :])
        ref = (torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ vd).transpose(1, 2)
        close(f"attention mods d{d}", o, ref.detach(), dtype)
        do = rand(o.shape, dtype)
        ref.backward(do.double())
        got = sk.attention_backward(do, q, k, v, o, lse, score_mod_grad=_alibi_grad, **kw)
        for nm, g, leaf in zip(("dq", "dk", "dv"), got, leaves):
            close(f"attention mods d{d} {nm}", g, leaf.grad.transpose(1, 2), dtype, floor=1.0)


OPS = {
    "rowwise": lambda shapes: [_rowwise(s, d) for s in shapes for d in DTYPES],
    "cross_entropy": lambda shapes: [_cross_entropy(s, d) for s in shapes for d in DTYPES],
    "elementwise": lambda shapes: [_elementwise(s, d) for s in shapes for d in DTYPES],
    "rope": lambda shapes: [_rope(d) for d in DTYPES],
    "matmul": lambda shapes: [_matmul(d) for d in DTYPES],
    "attention": lambda shapes: [_attention(d) for d in DTYPES],
    "decode": lambda shapes: [_decode(d) for d in DTYPES],
    "backward": lambda shapes: [_backward(s, d) for s in shapes for d in DTYPES],
    "llm": lambda shapes: [_llm(s, d) for s in shapes for d in DTYPES],
    "mods": lambda shapes: [_mods(d) for d in DTYPES],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated groups of {', '.join(OPS)}")
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--jobs", type=int, default=1, help="groups run in this many processes at once")
    args = ap.parse_args(argv)
    unknown = [g for g in args.ops.split(",") if g not in OPS]
    if unknown:
        ap.error(f"unknown groups {unknown}; the groups are {', '.join(OPS)}")
    if args.jobs > 1:
        return _parallel(args.ops.split(","), args.quick, args.jobs)
    torch.manual_seed(0)
    shapes = QUICK if args.quick else SHAPES
    for group in args.ops.split(","):
        OPS[group](shapes)
        torch.cuda.synchronize()
        print(f"sanitize_ops: {group} done", flush=True)
    for f in FAILURES:
        print("sanitize_ops: FAILED", f)
    return 1 if FAILURES else 0


def _parallel(groups, quick: bool, jobs: int) -> int:
    """Each group in its own process, `jobs` at a time; their outputs in group order."""
    def one(group):
        cmd = [sys.executable, __file__, "--ops", group] + (["--quick"] if quick else [])
        return subprocess.run(cmd, capture_output=True, text=True)
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(one, groups))
    for proc in done:
        sys.stdout.write(proc.stdout + proc.stderr)
    return max(p.returncode for p in done)


if __name__ == "__main__":
    sys.exit(main())
