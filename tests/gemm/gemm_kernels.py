"""GEMM kernels the tensor-core tests compile (and, on a GPU, run)."""
import tilec as tc


@tc.kernel
def dot_tile(a, b, c, M: tc.constexpr, N: tc.constexpr, K: tc.constexpr):
    """One program, one dot of a whole M x K and K x N tile."""
    at = tc.load(a, index=(0, 0), shape=(M, K))
    bt = tc.load(b, index=(0, 0), shape=(K, N))
    tc.store(c, index=(0, 0), tile=tc.dot(at, bt).astype(c.dtype))


@tc.kernel
def matmul(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr, TF32: tc.constexpr):
    """C = A @ B over a 2-D grid of BM x BN tiles, K in steps of BK; any M, N, K."""
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    K = a.shape[1]
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tc.dot(at, bt, acc, allow_tf32=TF32)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tc.kernel
def matmul_bias_relu(a, b, bias, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    """relu(A @ B + bias): the epilogue runs on the accumulator's layout."""
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    K = a.shape[1]
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tc.dot(at, bt, acc)
    row = tc.load(bias, index=(pid_n,), shape=(BN,)).astype(tc.float32)
    out = tc.maximum(acc + row[None, :], 0.0)
    tc.store(c, index=(pid_m, pid_n), tile=out.astype(c.dtype))
