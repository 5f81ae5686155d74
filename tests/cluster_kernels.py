"""Cluster kernels shared by the interpreter, PTX and GPU tests, and their references."""
import numpy as np

import tilec as tc


@tc.kernel
def exchange_kernel(buf, out, N: tc.constexpr):
    # Every program publishes a value, then reads its right neighbour's in the cluster.
    pid = tc.program_id(0)
    rank = tc.cluster_rank()
    tc.store(buf, index=(pid,), tile=tc.full((1,), pid * 10 + 1, tc.int32))
    tc.cluster_sync()
    neighbour = pid - rank + (rank + 1) % N
    tc.store(out, index=(pid,), tile=tc.load(buf, index=(neighbour,), shape=(1,)))


@tc.kernel
def gather_rows_kernel(x, total, neighbour, C: tc.constexpr, BLOCK: tc.constexpr):
    # Cluster c walks rows c, c + clusters, ...: every program sums its chunk of the row,
    # gathers the cluster's partial sums, and writes the row's total and the partial of
    # the next rank (which checks the order). Several gathers per program exercise the
    # buffer's two rounds.
    rank = tc.cluster_rank()
    clusters = tc.num_programs(0) // C
    for row in range(tc.program_id(0) // C, x.shape[0], clusters):
        t = tc.load(x, index=(row, rank), shape=(1, BLOCK), padding=0.0)
        parts = tc.cluster_gather(tc.sum(t), C, padding=0.0)   # (entries past a cluster of 3, 5, 6, 7)
        tc.store(total, index=(row, rank), tile=tc.full((1, 1), tc.sum(parts), tc.float32))
        pick = tc.arange(0, parts.shape[0]) == (rank + 1) % C
        tc.store(neighbour, index=(row, rank), tile=tc.full((1, 1), tc.sum(tc.where(pick, parts, 0.0)), tc.float32))


def reference(x: np.ndarray, c: int, block: int):
    """(total, neighbour) that gather_rows_kernel writes: rows x c."""
    pad = np.zeros((x.shape[0], c * block), np.float64)
    pad[:, :x.shape[1]] = x
    parts = pad.reshape(x.shape[0], c, block).sum(-1)
    return np.repeat(parts.sum(1, keepdims=True), c, 1), np.roll(parts, -1, axis=1)


@tc.kernel
def gather_pair_kernel(x, stats, C: tc.constexpr, BLOCK: tc.constexpr):
    # Two values from one exchange: each program's max and its count of positives.
    rank = tc.cluster_rank()
    row = tc.program_id(0) // C
    t = tc.load(x, index=(row, rank), shape=(1, BLOCK), padding=float("-inf"))
    m, pos = tc.cluster_gather((tc.max(t), tc.sum((t > 0).astype(tc.int32))), C, padding=(float("-inf"), 0))
    tc.store(stats, index=(row, rank), tile=tc.full((1, 1), tc.max(m) + tc.sum(pos).astype(tc.float32), tc.float32))


def pair_reference(x: np.ndarray, c: int, block: int):
    pad = np.full((x.shape[0], c * block), -np.inf)
    pad[:, :x.shape[1]] = x
    return np.repeat((pad.max(1) + (pad > 0).sum(1))[:, None], c, 1)


@tc.kernel
def gather_rounds_kernel(sums, picks, C: tc.constexpr):
    # Two gathers per row and nothing between them that holds a program's threads together
    # (no reduction over the tile): what keeps a program from storing into a buffer another
    # program's threads still read is the gather itself. Cluster c walks rows c, c + G, ...
    rank = tc.cluster_rank()
    for row in range(tc.program_id(0) // C, sums.shape[0], tc.num_programs(0) // C):
        a = tc.cluster_gather(row * C + rank, C, padding=0)
        b = tc.cluster_gather((row + 7 * rank).astype(tc.float32), C, padding=0.0)
        pick = tc.arange(0, b.shape[0]) == (rank + 1) % C
        tc.store(sums, index=(row, rank), tile=tc.full((1, 1), tc.sum(a), tc.int32))
        tc.store(picks, index=(row, rank), tile=tc.full((1, 1), tc.sum(tc.where(pick, b, 0.0)), tc.float32))


def rounds_reference(rows: int, c: int):
    """(sums, picks) that gather_rounds_kernel writes: rows x c."""
    r = np.arange(rows)[:, None]
    sums = np.repeat(r * c * c + c * (c - 1) // 2, c, 1)
    picks = r + 7 * ((np.arange(c)[None, :] + 1) % c)
    return sums.astype(np.int32), picks.astype(np.float32)
