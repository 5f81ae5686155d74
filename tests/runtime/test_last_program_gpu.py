"""tc.barrier and the last-program pattern on the GPU: every program's stores reach the
last one to take a ticket (many programs over many waves; partials stored by many
threads), and the counter it resets serves the next launch. Skipped where no GPU is found."""
from __future__ import annotations

import pytest

from last_program_kernels import block_sums_kernel, wide_partials_kernel

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("programs", [1, 133, 20000])
def test_last_program_sums_every_block(torch, programs):
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    for _ in range(3):  # the same counter again: the last program left it at 0
        x = torch.randn(programs * 256, device="cuda")
        part = torch.full((programs,), float("nan"), device="cuda")
        total = torch.zeros(1, device="cuda")
        block_sums_kernel[(programs,)](x, part, counter, total, BLOCK=256, FIN=1024, num_warps=8)
        torch.testing.assert_close(total.double()[0], x.double().sum(), rtol=1e-5, atol=1e-3 * programs ** 0.5)
    assert counter.item() == 0


@pytest.mark.parametrize("num_warps", [4, 16])
def test_wide_partials_reach_the_last_program(torch, num_warps):
    x = torch.randn(64, 1024, device="cuda")
    part, total = torch.zeros_like(x), torch.zeros(1, 1024, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    wide_partials_kernel[(64,)](x, part, counter, total, BLOCK=1024, N=64, num_warps=num_warps)
    torch.testing.assert_close(total[0].double(), 2 * x.double().sum(0), rtol=1e-5, atol=1e-4)
    assert counter.item() == 0
