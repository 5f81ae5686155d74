"""Tiled GEMMs for the warp-specialization tests: one BM x BN tile of C per program."""
import tilec as tc


@tc.kernel
def ws_matmul(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(a.shape[1], BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tc.dot(at, bt, acc)
    tc.store(c, index=(pid_m, pid_n), tile=(acc * 0.5).astype(c.dtype))


@tc.kernel
def ws_matmul_rowmax(a, b, c, rowmax, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    # the epilogue reduces across the consumer warps: its barriers must leave the producer out
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(a.shape[1], BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tc.dot(at, bt, acc)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))
    tc.store(rowmax, index=(pid_n, pid_m), tile=tc.max(acc, axis=1)[None, :])


@tc.kernel
def cluster_matmul(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    # programs (2i, j) and (2i + 1, j) (a cluster of 2 along axis 0) read the same B tiles
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(a.shape[1], BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN), multicast=True)
        acc = tc.dot(at, bt, acc)
    tc.store(c, index=(pid_m, pid_n), tile=(acc * 0.5).astype(c.dtype))
