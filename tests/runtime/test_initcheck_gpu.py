"""CompileOptions.initcheck on the GPU (marker gpu): loads that stop at their view's end read
the same values as the plain ones, for every length of a tensor that ends inside its last
16-byte group (the last thread's groups read in pieces), every element size, and realigned
loads at every offset (the PTX is checked on the CPU, tests/codegen/test_initcheck_loads.py;
the sanitizer run over the standard library, tests/stdlib/test_sanitizer_gpu.py)."""
from __future__ import annotations

import pytest

import tilec as tc

from realign_kernels import shifted_copy

pytestmark = pytest.mark.gpu

DTYPES = ["float16", "bfloat16", "float32", "int8", "float64"]


@tc.kernel
def view_copy(x, y, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    tc.store(y, index=(pid,), tile=tc.load(x, index=(pid,), shape=(BLOCK,)))


def _data(torch, n, dtype):
    g = torch.Generator(device="cuda").manual_seed(n)
    return (torch.randn(n, device="cuda", generator=g, dtype=torch.float64) * 50).to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_view_loads_to_every_tail_length(torch, dtype):
    for n in list(range(1, 41)) + [1023, 1024, 1025, 3001]:
        x = _data(torch, n, dtype)   # its own allocation: the view ends where the tensor does
        y = torch.zeros(n, device="cuda", dtype=x.dtype)
        view_copy[(tc.cdiv(n, 1024),)](x, y, BLOCK=1024, num_warps=4, initcheck=True)
        assert torch.equal(y, x), n


@pytest.mark.parametrize("dtype", DTYPES)
def test_realigned_loads_to_the_end_at_every_offset(torch, dtype):
    for shift in range(17):
        for n in (1, 7, 1023, 3001):
            x = _data(torch, shift + n, dtype)
            y = torch.zeros(3072, device="cuda", dtype=x.dtype)
            shifted_copy[(3,)](x, y, shift, n, REALIGN=True, BLOCK=1024, num_warps=4, initcheck=True)
            assert torch.equal(y[:n], x[shift:shift + n]), (shift, n)
            assert not y[n:].any()
