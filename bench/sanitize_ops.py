"""Every standard-library op on boundary shapes, once each: the program `bench/sanitize.sh`
runs under compute-sanitizer's memcheck, racecheck, synccheck and initcheck.

Shapes: one row, one column, odd lengths, lengths just past a tile, rows past one tile
(looped, split and windowed row kernels), strided views; f16, bf16 and f32; torch tensors
as a user passes them (from the caching allocator, so memory past a tensor's end is other
data or never written: what initcheck catches a masked-off read of). Each op's result is
checked against torch in float64, so a run also proves the kernels still compute the
right thing with the sanitizer's instrumentation.

    python3 bench/sanitize_ops.py [--ops softmax,matmul] [--quick]
"""
from __future__ import annotations

import argparse
import sys

import torch

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


def close(name, got, ref, dtype):
    """Records a failure (the run goes on, so that one log shows every op's findings)."""
    got, ref = got.double(), ref.double()
    nan = ref.isnan()
    if not torch.equal(got.isnan(), nan):
        FAILURES.append(f"{name} {tuple(ref.shape)} {dtype}: NaN where the reference has none, or none where it has")
        return
    got, ref = got[~nan], ref[~nan]
    if ref.numel() == 0:
        return
    err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
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
            close(f"max dim {dim}", sk.max(x, dim), x.double().amax(dim), dtype)


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


OPS = {
    "rowwise": lambda shapes: [_rowwise(s, d) for s in shapes for d in DTYPES],
    "cross_entropy": lambda shapes: [_cross_entropy(s, d) for s in shapes for d in DTYPES],
    "elementwise": lambda shapes: [_elementwise(s, d) for s in shapes for d in DTYPES],
    "rope": lambda shapes: [_rope(d) for d in DTYPES],
    "matmul": lambda shapes: [_matmul(d) for d in DTYPES],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated groups of {', '.join(OPS)}")
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    shapes = QUICK if args.quick else SHAPES
    for group in args.ops.split(","):
        OPS[group](shapes)
        torch.cuda.synchronize()
        print(f"sanitize_ops: {group} done", flush=True)
    for f in FAILURES:
        print("sanitize_ops: FAILED", f)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
