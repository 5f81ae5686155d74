"""Programmatic dependent launch on the GPU (sm_90+): a consumer compiled with
dependent_launch=True, launched right behind its producer, always sees the producer's
writes, whether it waits at its start or where it calls tc.grid_dependency_wait().
Skipped where no GPU is found."""
from __future__ import annotations

import pytest

from tilec import cdiv
from dependent_launch_kernels import consumer_explicit_kernel, consumer_kernel, producer_kernel

pytestmark = pytest.mark.gpu

N = 1 << 24  # 64 MB of f32 per array: the producer runs long enough for the consumer to start early
BLOCK = 1024


@pytest.mark.parametrize("trigger", [False, True])
def test_consumer_sees_every_write_of_its_producer(torch, trigger):
    x = torch.randn(N + 5, device="cuda")
    y = torch.empty_like(x)
    out_auto, out_explicit = torch.empty_like(x), torch.empty_like(x)
    grid = (cdiv(N + 5, BLOCK),)
    for _ in range(5):  # a race would show as NaN (y is poisoned) or stale values
        y.fill_(float("nan"))
        producer_kernel[grid](x, y, N + 5, BLOCK=BLOCK, TRIGGER=trigger, num_warps=4)
        consumer_kernel[grid](y, out_auto, N + 5, BLOCK=BLOCK, num_warps=4, dependent_launch=True)
        producer_kernel[grid](x, y, N + 5, BLOCK=BLOCK, TRIGGER=trigger, num_warps=4)
        consumer_explicit_kernel[grid](x, y, out_explicit, N + 5, BLOCK=BLOCK, num_warps=4, dependent_launch=True)
        torch.testing.assert_close(out_auto, 2 * x + 2)
        torch.testing.assert_close(out_explicit, torch.ones_like(x))


def test_dependent_launch_compiles_to_a_wait_and_is_launched_as_a_dependent(torch, gpu):
    x = torch.randn(4096, device="cuda")
    y, out = torch.empty_like(x), torch.empty_like(x)
    producer_kernel[(4,)](x, y, 4096, BLOCK=BLOCK, TRIGGER=False, num_warps=4)
    consumer_kernel[(4,)](y, out, 4096, BLOCK=BLOCK, num_warps=4, dependent_launch=True)
    prepared = consumer_kernel.launch_state.last[1]
    sm90 = gpu.capability >= (9, 0)
    assert prepared.compiled.metadata["dependent_launch"] is sm90
    assert (prepared.dependent is not None) is sm90
    assert ("griddepcontrol.wait" in prepared.compiled.asm["ptx"]) is sm90
    torch.testing.assert_close(out, 2 * x + 2)
