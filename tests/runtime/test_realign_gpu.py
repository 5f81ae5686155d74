"""Realigned loads (tc.load(..., realign=True)) on the GPU (marker gpu): exactly the elements
an element-by-element load reads, at every offset inside a 16-byte group, masked (rows that
end inside a group, groups nothing wants), unmasked, with an eviction priority, and through
windows of another array (the PTX and the block predicates are checked on the CPU,
tests/codegen/test_realign.py)."""
from __future__ import annotations

import numpy as np
import pytest

from realign_kernels import shifted_copy, shifted_copy_full, shifted_windows

pytestmark = pytest.mark.gpu

DTYPES = ["float16", "bfloat16", "float32", "int8", "float64"]


def _data(torch, n, dtype):
    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", generator=g, dtype=torch.float64) * 50
    return x.to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("policy", [None, "evict_first"])
def test_masked_copies_at_every_offset(torch, dtype, policy):
    x = _data(torch, 5000, dtype)
    for shift in range(17):
        for n in (1, 7, 1023, 3001):
            y = torch.zeros(3072, device="cuda", dtype=x.dtype)
            shifted_copy[(3,)](x, y, shift, n, REALIGN=True, BLOCK=1024, POLICY=policy, num_warps=4)
            assert torch.equal(y[:n], x[shift:shift + n]), (shift, n)
            assert not y[n:].any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_unmasked_copies_to_the_array_end(torch, dtype):
    # the last group of x ends at its last element: block 1 is read only where it holds some
    for shift in range(17):
        x = _data(torch, 2048 + shift, dtype)
        y = torch.zeros(2048, device="cuda", dtype=x.dtype)
        shifted_copy_full[(2,)](x, y, shift, REALIGN=True, BLOCK=1024, num_warps=4)
        assert torch.equal(y, x[shift:]), shift


@pytest.mark.parametrize("dtype,group", [("float16", 8), ("bfloat16", 8), ("float32", 4), ("int8", 16)])
def test_rows_read_in_another_arrays_windows(torch, dtype, group):
    # x's row starts at any element offset; y's row `lead` elements into its window
    for x_off in range(0, 2 * group + 1, 3):
        for lead in range(group):
            for n in (1, group - 1, 2000):
                xs = _data(torch, 4096, dtype)
                x = xs[x_off:x_off + n]
                y = torch.zeros(4096, device="cuda", dtype=x.dtype)
                yw = y[lead:]
                shifted_windows[(3,)](x, yw, lead, n, REALIGN=True, GROUP=group, BLOCK=1024, num_warps=4)
                assert torch.equal(yw[:n], x), (x_off, lead, n)
                assert not y[:lead].any() and not yw[n:].any()
