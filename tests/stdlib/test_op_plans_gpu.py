"""GPU tier: the planned ops (sum/max/cumsum, transpose, gelu, dropout) against torch in float64,
each called three times with fresh inputs of one layout: the first call runs the entry point's
plan (Temps allocated, dependent launches), the next two replay it (stdlib_kernels/_plan.py)."""
from __future__ import annotations

import pytest

import tilec.stdlib_kernels as S
from tilec.stdlib_kernels import _plan

pytestmark = pytest.mark.gpu


def test_planned_reductions_and_elementwise_ops_replay_correctly(torch):
    F = torch.nn.functional
    _plan.clear_plans()
    for i in range(3):
        a = torch.randn(3000, 70, device="cuda", dtype=torch.float32)       # sum over dim 0: split, then merged
        b = torch.randn(300, 4097, device="cuda", dtype=torch.bfloat16)     # max of rows off 32-byte sectors
        c = torch.randn(37, 5000, device="cuda", dtype=torch.float32)       # cumsum, looped rows
        d = torch.randn(1000, 37, device="cuda", dtype=torch.float16)       # transpose
        e = torch.randn(33, 1024, device="cuda", dtype=torch.float32)[:, :1000]   # gelu of strided rows
        torch.testing.assert_close(S.sum(a, 0).double(), a.double().sum(0), rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(S.amax(b, -1).double(), b.double().amax(-1), rtol=0, atol=0)
        torch.testing.assert_close(S.cumsum(c).double(), torch.cumsum(c.double(), -1), rtol=1e-4, atol=2e-3)
        assert torch.equal(S.transpose(d), d.t())
        torch.testing.assert_close(S.gelu(e).double(), F.gelu(e.double()), rtol=2e-5, atol=2e-5)
    for op in (S.sum, S.amax, S.cumsum, S.transpose, S.gelu):
        assert _plan.plan_count(op) == 1, op


def test_planned_dropout_keeps_its_mask_across_replays(torch):
    _plan.clear_plans()
    x = torch.randn(257, 1000, device="cuda", dtype=torch.float16)
    first = S.dropout(x, 0.3, 1234)
    for _ in range(2):   # replays: the same (seed, shape) gives the same mask and values
        assert torch.equal(S.dropout(x, 0.3, 1234), first)
    kept = first != 0
    frac = kept.double().mean().item()
    assert 0.65 < frac < 0.75
    scale = 65536 / (65536 - round(0.3 * 65536))
    torch.testing.assert_close(first[kept].double(), x[kept].double() * scale, rtol=2e-3, atol=2e-3)
    assert _plan.plan_count(S.dropout) == 1
