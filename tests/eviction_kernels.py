"""Kernels whose loads carry an L2 eviction priority (tc.load(..., eviction_policy=...)),
shared by the CPU tests (tests/codegen/test_eviction.py) and the GPU ones."""
import tilec as tc


@tc.kernel
def hinted_row_sums(x, out, POLICY: tc.constexpr, BLOCK: tc.constexpr):
    # View loads, padded past the row's end: the loads are masked.
    row = tc.program_id(0)
    acc = tc.zeros((1, BLOCK), tc.float32)
    for k in range(tc.cdiv(x.shape[1], BLOCK)):
        acc += tc.load(x, index=(row, k), shape=(1, BLOCK), padding=0.0, eviction_policy=POLICY).astype(tc.float32)
    tc.store(out, index=(row,), tile=tc.reshape(tc.sum(acc, axis=1), (1,)))


@tc.kernel
def hinted_gather(x, y, n, POLICY: tc.constexpr, BLOCK: tc.constexpr):
    # Pointer loads: masked (other=7) and unmasked (every lane reads element 0).
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    a = tc.load(x.ptr + offs, mask=offs < n, other=7, eviction_policy=POLICY)
    b = tc.load(x.ptr + offs * 0, eviction_policy=POLICY)
    tc.store(y.ptr + offs, a + b, mask=offs < n)
