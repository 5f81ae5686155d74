"""Thread-block clusters on the interpreter: programs of a cluster run together, exchange
data through global memory across tc.cluster_sync, and broken promises (deadlocks,
multicast loads of different tiles) are errors, never hangs."""
import numpy as np
import pytest

import tilec as tc
from tilec.interpreter import run

from cluster_kernels import exchange_kernel


@tc.kernel
def rank_kernel(out):
    x = tc.program_id(0)
    y = tc.program_id(1)
    tc.store(out, index=(y, x), tile=tc.full((1, 1), tc.cluster_rank(), tc.int32))


@tc.kernel
def multicast_kernel(x, out, SHIFT: tc.constexpr):
    # SHIFT breaks the promise: rank 1 loads the next tile.
    pid = tc.program_id(0)
    t = tc.load(x, index=(tc.cluster_rank() * SHIFT,), shape=(4,), multicast=True)
    tc.store(out, index=(pid,), tile=t)


@tc.kernel
def uneven_multicast_kernel(x, out):
    pid = tc.program_id(0)
    acc = tc.zeros((4,), tc.float32)
    for _ in range(tc.cluster_rank() + 1):
        acc += tc.load(x, index=(0,), shape=(4,), multicast=True)
    tc.store(out, index=(pid,), tile=acc)


@tc.kernel
def lonely_sync_kernel(out):
    if tc.cluster_rank() == 0:
        tc.cluster_sync()
    tc.store(out, index=(tc.program_id(0),), tile=tc.full((1,), 1, tc.int32))


@tc.kernel
def failing_program_kernel(out):
    rank = tc.cluster_rank()
    tc.device_assert(rank != 1, "rank 1 fails")
    tc.cluster_sync()
    tc.store(out, index=(tc.program_id(0),), tile=tc.full((1,), 1, tc.int32))


@tc.kernel
def atomic_counter_kernel(counter, seen, ROUNDS: tc.constexpr):
    # Each round every program adds 1, then after the sync all see the whole round.
    pid = tc.program_id(0)
    for k in range(ROUNDS):
        tc.atomic_add(counter.ptr + tc.arange(0, 64), 1)
        tc.cluster_sync()
        tc.store(seen, index=(pid, k), tile=tc.load(counter, index=(0,), shape=(1,))[None, :])
        tc.cluster_sync()


@pytest.fixture(autouse=True)
def _interpreted():
    with tc.interpret():
        yield


@pytest.mark.parametrize("n", [2, 4, 8])
def test_programs_exchange_through_global_memory(n):
    buf, out = np.zeros(2 * n, np.int32), np.zeros(2 * n, np.int32)
    exchange_kernel[(2 * n,)](buf, out, N=n, cluster=n)
    pid = np.arange(2 * n)
    neighbour = pid - pid % n + (pid % n + 1) % n
    np.testing.assert_array_equal(out, neighbour * 10 + 1)


def test_rank_is_x_modulo_cluster():
    out = np.full((3, 8), -1, np.int32)
    rank_kernel[(8, 3)](out, cluster=4)
    np.testing.assert_array_equal(out, np.tile(np.arange(8) % 4, (3, 1)))
    rank_kernel[(8, 3)](out)
    np.testing.assert_array_equal(out, 0)


def test_sync_without_clusters_is_a_no_op():
    buf, out = np.zeros(3, np.int32), np.zeros(3, np.int32)
    exchange_kernel[(3,)](buf, out, N=1)
    np.testing.assert_array_equal(out, np.arange(3) * 10 + 1)


def test_grid_must_be_a_multiple_of_the_cluster():
    with pytest.raises(ValueError, match="multiple of 4"):
        exchange_kernel[(6,)](np.zeros(6, np.int32), np.zeros(6, np.int32), N=4, cluster=4)


def test_cluster_size_is_checked():
    with pytest.raises(ValueError, match="cluster must be 1 to 8"):
        exchange_kernel[(18,)](np.zeros(18, np.int32), np.zeros(18, np.int32), N=9, cluster=9)
    buf, out = np.zeros(6, np.int32), np.zeros(6, np.int32)
    exchange_kernel[(6,)](buf, out, N=3, cluster=3)     # any size up to 8
    np.testing.assert_array_equal(out, [11, 21, 1, 41, 51, 31])


def test_multicast_promise_kept():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros((4, 4), np.float32)
    multicast_kernel[(4,)](x, out.reshape(-1), SHIFT=0, cluster=2)
    np.testing.assert_array_equal(out, np.tile(x[:4], (4, 1)))


def test_multicast_promise_broken_names_programs_and_place():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(16, np.float32)
    with pytest.raises(tc.InterpreterError) as e:
        multicast_kernel[(4,)](x, out, SHIFT=1, cluster=2)
    msg = str(e.value)
    assert "test_cluster.py" in msg and "multicast" in msg
    assert "(0, 0, 0)" in msg and "(1, 0, 0)" in msg
    assert "(0,)" in msg and "(1,)" in msg
    # without clusters there is nobody to share with: no promise to check
    multicast_kernel[(4,)](x, out, SHIFT=1)


def test_multicast_executed_unevenly():
    x = np.ones(4, np.float32)
    with pytest.raises(tc.InterpreterError, match=r"executes it 1 time\(s\), program \(1, 0, 0\) 2"):
        uneven_multicast_kernel[(2,)](x, np.zeros(8, np.float32), cluster=2)


def test_sync_that_not_every_program_reaches_is_an_error():
    with pytest.raises(tc.InterpreterError, match=r"deadlock.*program \(0, 0, 0\).*program \(1, 0, 0\)"):
        lonely_sync_kernel[(2,)](np.zeros(2, np.int32), cluster=2)


def test_failing_program_is_reported_not_the_wait():
    with pytest.raises(tc.InterpreterError, match="rank 1 fails") as e:
        failing_program_kernel[(4,)](np.zeros(4, np.int32), cluster=4)
    assert "deadlock" not in str(e.value)


def test_run_takes_cluster_directly():
    module = exchange_kernel.ir(exchange_kernel.specialization(np.zeros(4, np.int32), np.zeros(4, np.int32), N=2))
    buf, out = np.zeros(4, np.int32), np.zeros(4, np.int32)
    run(module, [buf, out], (4,), cluster=2)
    np.testing.assert_array_equal(out, [11, 1, 31, 21])
    with pytest.raises(ValueError, match="multiple of 2"):
        run(module, [buf, out], (3,), cluster=2)


def test_atomics_of_concurrent_programs_all_count():
    counter, seen = np.zeros(64, np.int32), np.zeros((8, 3), np.int32)
    atomic_counter_kernel[(8,)](counter, seen, ROUNDS=3, cluster=8)
    np.testing.assert_array_equal(counter, 24)
    np.testing.assert_array_equal(seen, np.tile([8, 16, 24], (8, 1)))


@pytest.mark.parametrize("n,programs", [(2, 6), (4, 8), (8, 8), (1, 3), (3, 6), (5, 10), (7, 7)])
def test_cluster_gather_hands_every_program_the_values_by_rank(n, programs):
    from cluster_kernels import gather_rows_kernel, reference
    rng = np.random.default_rng(n)
    x = rng.standard_normal((7, 13 * n)).astype(np.float32)   # 7 rows: several gathers per program
    total, nb = np.zeros((7, n), np.float32), np.zeros((7, n), np.float32)
    gather_rows_kernel[(programs,)](x, total, nb, C=n, BLOCK=16, cluster=n)
    want_total, want_nb = reference(x, n, 16)
    np.testing.assert_allclose(total, want_total, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nb, want_nb, rtol=1e-5, atol=1e-5)


def test_cluster_gather_size_must_be_the_cluster():
    from cluster_kernels import gather_rows_kernel
    x = np.ones((2, 32), np.float32)
    out = np.zeros((2, 4), np.float32)
    with pytest.raises(tc.InterpreterError, match="size must be the `cluster` option"):
        gather_rows_kernel[(4,)](x, out, out, C=4, BLOCK=8, cluster=2)


@pytest.mark.parametrize("c", [4, 5])
def test_cluster_gather_of_two_values_at_once(c):
    from cluster_kernels import gather_pair_kernel, pair_reference
    x = np.random.default_rng(0).standard_normal((5, 50)).astype(np.float32)
    x[1] = -np.abs(x[1])        # no positives and a negative max: the padding must change neither
    stats = np.zeros((5, c), np.float32)
    gather_pair_kernel[(5 * c,)](x, stats, C=c, BLOCK=16, cluster=c)
    np.testing.assert_allclose(stats, pair_reference(x, c, 16), rtol=1e-6)


@pytest.mark.parametrize("n,programs,rows", [(1, 3, 7), (2, 6, 11), (4, 8, 9), (6, 12, 9)])
def test_back_to_back_gathers(n, programs, rows):
    from cluster_kernels import gather_rounds_kernel, rounds_reference
    sums, picks = np.zeros((rows, n), np.int32), np.zeros((rows, n), np.float32)
    gather_rounds_kernel[(programs,)](sums, picks, C=n, cluster=n)
    want_sums, want_picks = rounds_reference(rows, n)
    np.testing.assert_array_equal(sums, want_sums)
    np.testing.assert_array_equal(picks, want_picks)
