"""Kernels of the dependent-launch tests (tests/runtime/test_dependent_launch_gpu.py,
tests/frontend/test_dependent_launch.py): a producer and consumers of what it writes."""
import tilec as tc


@tc.kernel
def producer_kernel(x, y, n, BLOCK: tc.constexpr, TRIGGER: tc.constexpr):
    if TRIGGER:
        tc.launch_dependents()  # the consumer may be launched now; it still waits for y
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    v = tc.load(x.ptr + offs, mask=offs < n, other=0.0)
    tc.store(y.ptr + offs, 2.0 * v + 1.0, mask=offs < n)


@tc.kernel
def consumer_kernel(y, out, n, BLOCK: tc.constexpr):
    # compiled with dependent_launch=True and no wait of its own: it waits at its start
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    tc.store(out.ptr + offs, tc.load(y.ptr + offs, mask=offs < n, other=0.0) + 1.0, mask=offs < n)


@tc.kernel
def consumer_explicit_kernel(x, y, out, n, BLOCK: tc.constexpr):
    # x is only read by the producer: loaded before the wait; y after it
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    v = tc.load(x.ptr + offs, mask=offs < n, other=0.0)
    tc.grid_dependency_wait()
    w = tc.load(y.ptr + offs, mask=offs < n, other=0.0)
    tc.store(out.ptr + offs, w - 2.0 * v, mask=offs < n)
