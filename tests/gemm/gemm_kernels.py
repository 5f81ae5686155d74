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


@tc.kernel
def matmul_aligned(a, b, c, M, N, K: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    """Pointer-tile GEMM whose K (a constexpr multiple of BK) and N (specialized divisible by
    16) make every row 16-byte aligned and unmasked along K: its loads qualify for cp.async."""
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    rm = pid_m * BM + tc.arange(0, BM)
    rn = pid_n * BN + tc.arange(0, BN)
    rk = tc.arange(0, BK)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(K // BK):
        at = tc.load(a.ptr + rm[:, None] * K + (k * BK + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        bt = tc.load(b.ptr + (k * BK + rk)[:, None] * N + rn[None, :], mask=rn[None, :] < N, other=0.0)
        acc = tc.dot(at, bt, acc)
    out = acc.astype(c.dtype)
    tc.store(c.ptr + rm[:, None] * N + rn[None, :], out, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tc.kernel
def matmul_grouped(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr, TF32: tc.constexpr):
    """`matmul` over a 1-D grid in grouped order (tc.swizzle2d)."""
    num_m = tc.cdiv(a.shape[0], BM)
    num_n = tc.cdiv(b.shape[1], BN)
    pid = tc.program_id(0)
    pid_m, pid_n = tc.swizzle2d(pid // num_n, pid % num_n, num_m, num_n, 4)
    K = a.shape[1]
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tc.dot(at, bt, acc, allow_tf32=TF32)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tc.kernel
def matmul_ptr(a, b, c, M, N, K, sa, sb, sc, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr,
               TF32: tc.constexpr):
    """Pointer-tile GEMM with run-time row strides and masks on M, N and K."""
    rm = tc.program_id(0) * BM + tc.arange(0, BM)
    rn = tc.program_id(1) * BN + tc.arange(0, BN)
    rk = tc.arange(0, BK)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        kk = k * BK + rk
        at = tc.load(a.ptr + rm[:, None] * sa + kk[None, :], mask=(rm < M)[:, None] & (kk < K)[None, :], other=0.0)
        bt = tc.load(b.ptr + kk[:, None] * sb + rn[None, :], mask=(kk < K)[:, None] & (rn < N)[None, :], other=0.0)
        acc = tc.dot(at, bt, acc, allow_tf32=TF32)
    tc.store(c.ptr + rm[:, None] * sc + rn[None, :], acc.astype(c.dtype), mask=(rm < M)[:, None] & (rn < N)[None, :])


@tc.kernel
def matmul_cast(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr, DT: tc.constexpr):
    """`matmul` of operands converted in the kernel to DT (e.g. f32 storage into f8)."""
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    K = a.shape[1]
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK)).astype(DT)
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN)).astype(DT)
        acc = tc.dot(at, bt, acc)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tc.kernel
def dot_by_constant(a, c, DT: tc.constexpr):
    """A @ 1.5 of 32 x 32 tiles converted to DT: B is a constant tile, which assign_layouts
    makes in its #dot_op layout (no staging through shared memory)."""
    at = tc.load(a, index=(0, 0), shape=(32, 32)).astype(DT)
    tc.store(c, index=(0, 0), tile=tc.dot(at, tc.full((32, 32), 1.5, DT)))
