"""GEMM with A column-major (dW = dYᵀ X of a linear layer's backward): tilec vs torch.

    python bench/gemm_col_major_a.py [--dtypes bf16,f16] [--shapes M,N,K ...]

For each shape, x (K, M) and y (K, N) row-major, A = x.T: times tilec's matmul(x.T, y)
(TMA, and tma=False: the cp.async ring), torch.matmul(x.T, y) (cuBLAS), and tilec on a
contiguous copy of A (the row-major speed the column-major path should reach), as the
median of triton.testing.do_bench; TFLOP/s = 2 M N K / time. Each tilec result is checked
against torch's first (relative error to the largest magnitude).
"""
from __future__ import annotations

import argparse

import torch
import triton

from tilec.stdlib_kernels import matmul

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
SHAPES = [(128256, 2048, 1024), (4096, 4096, 4096)]


def _bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def _row(dname: str, m: int, n: int, k: int) -> str:
    dtype = DTYPES[dname]
    x = torch.randn(k, m, device="cuda", dtype=dtype)
    y = torch.randn(k, n, device="cuda", dtype=dtype)
    a, a_rows = x.T, x.T.contiguous()
    want = torch.matmul(a, y).float()
    err = ((matmul(a, y).float() - want).abs().max() / want.abs().max()).item()
    times = [_bench(lambda: matmul(a, y)), _bench(lambda: matmul(a, y, tma=False)),
             _bench(lambda: torch.matmul(a, y)), _bench(lambda: matmul(a_rows, y))]
    tflops = [2 * m * n * k / t / 1e9 for t in times]
    return f"{dname:5} {m:>7} {n:>6} {k:>6}  " + " ".join(f"{v:7.0f}" for v in tflops) + f"  {err:.1e}"


def run(shapes, dtypes):
    print(f"{'dtype':5} {'M':>7} {'N':>6} {'K':>6}  {'tilec':>7} {'tma=off':>7} {'torch':>7} {'rowmajA':>7}  "
          f"(TFLOP/s)  max rel err")
    for dname in dtypes:
        for m, n, k in shapes:
            print(_row(dname, m, n, k), flush=True)
            torch.cuda.empty_cache()


def _shape(text: str):
    m, n, k = (int(v) for v in text.split(","))
    return m, n, k


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="bf16,f16")
    p.add_argument("--shapes", nargs="+", type=_shape, metavar="M,N,K", default=SHAPES)
    args = p.parse_args(argv)
    run(args.shapes, [d for d in args.dtypes.split(",") if d])


if __name__ == "__main__":
    main()
