"""The attention forward's candidate tilings (bench/attention_configs.py, each through
`attention.plan`'s config override) and the mods forward at head dims above 128, on the GPU
against float64, on lengths that are not multiples of a block."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from tilec.stdlib_kernels import attention
from tilec.stdlib_kernels.launches import execute

from attention_mods_funcs import rel_bias
from attention_ref import attention_mods_ref, attention_ref
from bench import attention_configs as bench

pytestmark = pytest.mark.gpu

A = importlib.import_module("tilec.stdlib_kernels.attention")


def _cases():
    out, seen = [], set()
    for name, (d, dv) in bench.HEAD_DIMS.items():
        for cfg in bench.candidates(d, dv):
            if (d, dv, cfg) not in seen:
                seen.add((d, dv, cfg))
                out.append(pytest.param(d, dv, cfg, id=f"{name}-{bench.label(cfg)}"))
    return out


def _qkv(torch, d, dv, n_q=333, n_k=400, layout="bhsd"):
    def shape(n, h, x):
        return (2, h, n, x) if layout == "bhsd" else (2, n, h, x)
    return (torch.randn(shape(n_q, 4, d), device="cuda", dtype=torch.float16),
            torch.randn(shape(n_k, 2, d), device="cuda", dtype=torch.float16),
            torch.randn(shape(n_k, 2, dv), device="cuda", dtype=torch.float16))


@pytest.mark.parametrize("d,dv,cfg", _cases())
def test_candidates_match_float64(torch, d, dv, cfg):
    from tilec.target import Target
    torch.manual_seed(d * 31 + dv + cfg.bm * 7 + cfg.bn)
    q, k, v = _qkv(torch, d, dv)
    x, _ = A.check_qkv(q, k, v, "bhsd")
    host = [t.float().cpu().numpy() for t in (q, k, v)]
    for causal in (False, True):
        oa, lse = A.forward_outputs(x, "bhsd", return_lse=True)
        execute(A.plan(x, Target.current(), lse=True, config=cfg),
                A.forward_operands(x, "bhsd", oa, lse, causal=causal))
        want, want_lse = attention_ref(*host, layout="bhsd", causal=causal)
        assert np.abs(oa.obj.double().cpu().numpy() - want).max() < 4e-3, causal
        np.testing.assert_allclose(lse.obj.cpu().numpy(), want_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d,dv", [(256, 256), (192, 128)])
def test_mods_forward_at_wide_heads_matches_float64(torch, d, dv):
    torch.manual_seed(d + dv)
    q, k, v = _qkv(torch, d, dv, 300, 300, layout="bshd")
    o = attention(q, k, v, score_mod=rel_bias)
    want, _ = attention_mods_ref(*(t.float().cpu().numpy() for t in (q, k, v)),
                                 lambda s, b, h, qi, ki: s + 0.03 * (qi - ki))
    assert np.abs(o.double().cpu().numpy() - want).max() < 4e-3
