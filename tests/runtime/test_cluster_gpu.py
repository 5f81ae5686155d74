"""Thread-block clusters on the GPU (marker gpu, sm_90+): programs of a cluster exchange data
through global memory across tc.cluster_sync, over many clusters, and match the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc

from cluster_kernels import exchange_kernel

pytestmark = pytest.mark.gpu


@tc.kernel
def cluster_sum_kernel(x, part, out, N: tc.constexpr, BLOCK: tc.constexpr):
    # Row y is shared by the N programs of cluster y: each sums its chunk, publishes the
    # partial sum, and after the sync every program writes the row total.
    rank = tc.cluster_rank()
    row = tc.program_id(0) // N
    t = tc.load(x, index=(row, rank), shape=(1, BLOCK), padding=0.0)
    tc.store(part, index=(row, rank), tile=tc.full((1, 1), tc.sum(t), tc.float32))
    tc.cluster_sync()
    total = tc.sum(tc.load(part, index=(row, 0), shape=(1, N)))
    tc.store(out, index=(row, rank), tile=tc.full((1, 1), total, tc.float32))


@tc.kernel
def multicast_sum_kernel(x, out, BLOCK: tc.constexpr):
    # Every program of the cluster loads the same tile (the promise holds).
    pid = tc.program_id(0)
    t = tc.load(x, index=(0, 0), shape=(1, BLOCK), multicast=True)
    tc.store(out, index=(pid,), tile=tc.full((1,), tc.sum(t), tc.float32))


@pytest.fixture
def sm90(gpu):
    if gpu.capability[0] < 9:
        pytest.skip(f"thread-block clusters need sm_90+, this is {gpu.arch}")
    return gpu


@pytest.mark.parametrize("n", [2, 4, 8])
def test_exchange_between_programs_of_a_cluster(sm90, n):
    programs = 1024 * n
    buf = tc.from_numpy(np.zeros(programs, np.int32))
    out = tc.from_numpy(np.zeros(programs, np.int32))
    exchange_kernel[(programs,)](buf, out, N=n, cluster=n)
    pid = np.arange(programs)
    np.testing.assert_array_equal(out.to_numpy(), (pid - pid % n + (pid % n + 1) % n) * 10 + 1)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_cluster_row_sum_matches_interpreter(sm90, n):
    rows, block = 300, 1024
    rng = np.random.default_rng(n)
    x = rng.standard_normal((rows, n * block - 5)).astype(np.float32)
    got = tc.from_numpy(np.zeros((rows, n), np.float32))
    part = tc.from_numpy(np.zeros((rows, n), np.float32))
    cluster_sum_kernel[(rows * n,)](tc.from_numpy(x), part, got, N=n, BLOCK=block, num_warps=8, cluster=n)
    want = np.zeros((rows, n), np.float32)
    with tc.interpret():
        cluster_sum_kernel[(rows * n,)](x, np.zeros((rows, n), np.float32), want, N=n, BLOCK=block, cluster=n)
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(want, np.repeat(x.astype(np.float64).sum(1, keepdims=True), n, 1),
                               rtol=1e-5, atol=1e-3)


def test_multicast_load_in_clusters(sm90):
    x = np.arange(256, dtype=np.float32)[None, :]
    out = tc.from_numpy(np.zeros(64, np.float32))
    multicast_sum_kernel[(64,)](tc.from_numpy(x), out, BLOCK=256, cluster=4)
    np.testing.assert_array_equal(out.to_numpy(), np.full(64, x.sum(), np.float32))


@pytest.mark.parametrize("n", [2, 8])
def test_loaded_cluster_kernels_know_how_many_clusters_run_at_once(sm90, n):
    from tilec.runtime.module import load
    buf = tc.from_numpy(np.zeros(16, np.int32))
    out = tc.from_numpy(np.zeros(16, np.int32))
    for persistent in (False, True):
        ck = exchange_kernel.compile(buf, out, N=n, cluster=n, persistent=persistent)
        loaded = load(ck, 0)
        resident = loaded.resources.max_blocks_per_sm * sm90.multiprocessors
        # the driver's answer: at least one, at most the resident programs' worth of clusters
        assert 1 <= loaded.max_active_clusters <= resident // n, (resident, loaded.max_active_clusters)
        if persistent:   # a persistent grid of whole clusters that all run at once
            assert loaded.persistent_programs == min(resident, loaded.max_active_clusters * n)


@pytest.mark.parametrize("n,programs,rows", [(2, 264, 1000), (4, 16, 37), (8, 8 * 15, 500), (3, 240, 700),
                                             (5, 25, 61), (7, 7 * 18, 500)])
def test_cluster_gather_on_the_gpu(sm90, n, programs, rows):
    """Values by rank through distributed shared memory, many gathers per program (the
    buffer's rounds in turn), against float64 numpy and the interpreter."""
    from cluster_kernels import gather_rows_kernel, reference
    x = np.random.default_rng(rows).standard_normal((rows, 100 * n + 3)).astype(np.float32)
    total = tc.from_numpy(np.zeros((rows, n), np.float32))
    nb = tc.from_numpy(np.zeros((rows, n), np.float32))
    gather_rows_kernel[(programs,)](tc.from_numpy(x), total, nb, C=n, BLOCK=128, cluster=n)
    want_total, want_nb = reference(x, n, 128)
    np.testing.assert_allclose(total.to_numpy(), want_total, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(nb.to_numpy(), want_nb, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("c", [4, 5, 6])
def test_cluster_gather_of_two_values_on_the_gpu(sm90, c):
    from cluster_kernels import gather_pair_kernel, pair_reference
    x = np.random.default_rng(1).standard_normal((300, 250 * c)).astype(np.float32)
    x[7] = -np.abs(x[7])        # no positives and a negative max: the padding must change neither
    stats = tc.from_numpy(np.zeros((300, c), np.float32))
    gather_pair_kernel[(300 * c,)](tc.from_numpy(x), stats, C=c, BLOCK=256, cluster=c)
    np.testing.assert_allclose(stats.to_numpy(), pair_reference(x, c, 256), rtol=1e-6)


@pytest.mark.parametrize("n,programs,rows", [(1, 132, 2000), (2, 264, 5000), (4, 64, 3001), (8, 8 * 15, 4000),
                                             (6, 6 * 22, 3001)])
def test_cluster_gathers_back_to_back_on_the_gpu(sm90, n, programs, rows):
    """Hundreds of gathers per program, two per row with no reduction between them: every
    value lands in its round, none overwrites a round still being read."""
    from cluster_kernels import gather_rounds_kernel, rounds_reference
    sums = tc.from_numpy(np.zeros((rows, n), np.int32))
    picks = tc.from_numpy(np.zeros((rows, n), np.float32))
    gather_rounds_kernel[(programs,)](sums, picks, C=n, cluster=n, num_warps=8)
    want_sums, want_picks = rounds_reference(rows, n)
    np.testing.assert_array_equal(sums.to_numpy(), want_sums)
    np.testing.assert_array_equal(picks.to_numpy(), want_picks)
