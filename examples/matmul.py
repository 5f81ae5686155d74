"""Tiled matrix multiplication C = A @ B with f16 inputs and f32 accumulation.

    python examples/matmul.py

Each program computes one BM x BN tile of C, walking K in steps of BK. Any M,
N and K work: tensor-view loads pad the tiles that overhang an edge with zeros,
which add nothing to the dot products, and stores skip what lies outside C.
"""
import numpy as np

import tilec as tc
from _harness import Target, check, finish


@tc.kernel
def matmul_kernel(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr,
                  GROUP_M: tc.constexpr):
    M, K = a.shape[0], a.shape[1]
    N = b.shape[1]
    num_m = tc.cdiv(M, BM)
    num_n = tc.cdiv(N, BN)

    # Grouped ordering: rather than sweeping C row of tiles by row of tiles,
    # consecutive programs walk down a GROUP_M-tall band column by column. The
    # programs running at the same time then share A and B tiles, which stay
    # in L2 instead of being fetched again.
    pid = tc.program_id(0)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tc.minimum(num_m - first_m, GROUP_M)  # the last band may be shorter
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tc.dot(at, bt, acc)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


SIGNATURES = {
    "matmul_kernel": "a=f16[?,?], b=f16[?,?], c=f16[?,?], BM=64, BN=64, BK=64, GROUP_M=4",
}


def main():
    rng = np.random.default_rng()
    bm, bn, bk = 64, 64, 64  # BK = 64: 128-byte rows of A, what wgmma takes on sm_90a
    # None of M, N, K a multiple of its tile.
    M = bm * int(rng.integers(2, 5)) + int(rng.integers(1, bm))
    N = bn * int(rng.integers(2, 5)) + int(rng.integers(1, bn))
    K = bk * int(rng.integers(3, 8)) + int(rng.integers(1, bk))
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)

    target = Target()
    a_d, b_d = target.to_device(a), target.to_device(b)
    c = target.to_device(np.zeros((M, N), np.float16))
    grid = (tc.cdiv(M, bm) * tc.cdiv(N, bn),)
    with target.launching():
        matmul_kernel[grid](a_d, b_d, c, BM=bm, BN=bn, BK=bk, GROUP_M=4)

    # Sums of K products of size ~1 reach ~sqrt(K); f16 rounds them to ~1e-3 relative.
    ok = check("matmul_kernel", target.to_host(c), want, rtol=2e-3, atol=2e-2)
    finish(target, ok)


if __name__ == "__main__":
    main()
