"""Kernels of the last-program pattern (tc.barrier, then an atomic ticket), shared by the
CPU and GPU tests."""
import tilec as tc


@tc.func
def last_program(counter, slot, n):
    # True in the n-th program to arrive at counter[slot], which it resets to 0.
    tc.barrier()  # every thread's stores come before the one thread's release (the atomic)
    ticket = tc.atomic_add(counter.ptr + slot, 1)
    last = ticket == n - 1
    if last:
        tc.atomic_xchg(counter.ptr + slot, 0)
    return last


@tc.kernel
def block_sums_kernel(x, part, counter, total, BLOCK: tc.constexpr, FIN: tc.constexpr):
    # Each program stores the sum of its block (a tile stored by many threads), and the
    # last to arrive adds every program's sum, in program order.
    pid = tc.program_id(0)
    t = tc.load(x, index=(pid,), shape=(BLOCK,))
    tc.store(part, index=(pid,), tile=tc.full((1,), tc.sum(t), tc.float32))
    if last_program(counter, 0, tc.num_programs(0)):
        acc = tc.zeros((FIN,), tc.float32)
        for k in range(tc.cdiv(part.shape[0], FIN)):
            acc += tc.load(part, index=(k,), shape=(FIN,))
        tc.store(total, index=(0,), tile=tc.full((1,), tc.sum(acc), tc.float32))


@tc.kernel
def wide_partials_kernel(x, part, counter, total, BLOCK: tc.constexpr, N: tc.constexpr):
    # Program p stores a whole (1, BLOCK) row of partials (many threads), so the last one
    # sees every thread's stores only through the barrier before the ticket.
    pid = tc.program_id(0)
    t = tc.load(x, index=(pid, 0), shape=(1, BLOCK))
    tc.store(part, index=(pid, 0), tile=t * 2.0)
    if last_program(counter, 0, tc.num_programs(0)):
        p = tc.load(part, index=(0, 0), shape=(N, BLOCK))
        tc.store(total, index=(0, 0), tile=tc.sum(p, axis=0, keep_dims=True))
