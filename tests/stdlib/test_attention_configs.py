"""The attention forward's tilings: `plan`'s config override, the candidates of
bench/attention_configs.py on the interpreter against float64, and (slow) every shipped
sm_90a configuration and candidate assembled by ptxas with no spills."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from tilec.target import Target
from tilec.stdlib_kernels import attention
from tilec.stdlib_kernels.launches import execute

from attention_ref import attention_ref
from bench import attention_configs as bench
from ptxas_checks import assert_assembles_clean

A = importlib.import_module("tilec.stdlib_kernels.attention")
V = importlib.import_module("tilec.stdlib_kernels.attention_varlen")
H100 = Target.from_arch("sm_90a")
DIMS = list(bench.HEAD_DIMS.values())


@pytest.mark.parametrize("d,dv", DIMS)
def test_the_shipped_config_is_a_candidate(d, dv):
    assert A.config_for(d, dv, H100) in bench.candidates(d, dv)
    assert A.config_for(d, dv, H100, n_kv=1024, causal=True) in bench.candidates(d, dv)


def test_plan_takes_the_config_it_is_given():
    x = A.describe(2, 4, 2, 1000, 900, 192, 192)
    (default,) = A.plan(x, H100)
    cfg = A.config_for(192, 192, H100)
    assert default.consts["BM"] == cfg.bm and default.num_warps == cfg.num_warps
    assert default.grid == (-(-1000 // cfg.bm), 4, 2) and default.consts["GROUP"] == 2
    other = A.AttentionConfig(32, 32, 256, 256, 4, 2)
    (ln,) = A.plan(x, H100, lse=True, config=other)
    assert ln.grid == (32, 4, 2) and ln.num_warps == 4 and dict(ln.options) == {"num_stages": 2}
    assert (ln.consts["BM"], ln.consts["BN"], ln.consts["DK"], ln.consts["DV"], ln.consts["LSE"]) == \
        (32, 32, 256, 256, True)
    assert A.plan(A.describe(2, 4, 2, 0, 900, 64, 64), H100) == []
    # a floor of programs per SM becomes the compile option; config_for asks one at head dim
    # 64 with wgmma only
    floor = A.AttentionConfig(128, 64, 64, 64, 8, 3, programs_per_sm=3)
    (ln,) = A.plan(A.describe(2, 4, 2, 1000, 900, 64, 64), H100, config=floor)
    assert dict(ln.options) == {"num_stages": 3, "min_programs_per_sm": 3}
    assert dict(A.plan(A.describe(2, 4, 2, 1000, 900, 64, 64), H100)[0].options)["min_programs_per_sm"] == 2
    for d, target in ((128, H100), (64, Target.from_arch("sm_80"))):
        (ln,) = A.plan(A.describe(2, 4, 2, 1000, 900, d, d), target)
        assert "min_programs_per_sm" not in dict(ln.options)


def test_the_varlen_plan_takes_a_config_too():
    from tilec.stdlib_kernels.launches import spec
    import tilec as tc
    q, k, v = (spec((700, h, 256), tc.float16) for h in (4, 2, 2))
    (ln,) = V.plan_forward(q, k, v, 3, 300, H100, config=A.AttentionConfig(64, 16, 256, 256, 4, 3))
    assert ln.grid == (5, 4, 3) and (ln.consts["BM"], ln.consts["BN"], ln.num_warps) == (64, 16, 4)
    with pytest.raises(ValueError, match="dk"):
        V.plan_forward(q, k, v, 3, 300, H100, config=A.AttentionConfig(64, 16, 128, 256, 4))


def test_extra_signatures_are_the_wide_plans_at_the_snapshot_warps():
    assert len(A.EXTRA_SIGNATURES) == 5
    for d, dv in ((128, 128), (256, 256), (192, 128)):
        (ln,) = A.plan(A.describe(2, 4, 2, 1000, 2000, d, dv), H100, softcap=True, lse=True)
        assert ("attention_fwd_kernel", A.signature(ln, "bf16")) in A.EXTRA_SIGNATURES
        assert ln.num_warps == A.OPTIONS["attention_fwd_kernel"]["num_warps"]
        # value head dim 256 asks 2 stages; the snapshot's default 3 gives the same kernel (3 slots
        # of its K and V do not fit, and the ring shrinks to 2)
        assert dict(ln.options)["num_stages"] == (2 if dv == 256 else 3)
    causal = [s for _, s in A.EXTRA_SIGNATURES if "SECTION=" in s]
    assert len(causal) == 2 and {"DK=64" in s for s in causal} == {True, False}


@pytest.mark.parametrize("config,err,match", [
    ((64, 64, 256, 256, 8), TypeError, "AttentionConfig"),
    (A.AttentionConfig(64, 64, 128, 256, 8), ValueError, "hold"),
    (A.AttentionConfig(64, 48, 256, 256, 8), ValueError, "config.bn"),
    (A.AttentionConfig(64, 64, 256, 256, 3), ValueError, "num_warps"),
    (A.AttentionConfig(64, 64, 256, 256, 8, 0), ValueError, "num_stages"),
    (A.AttentionConfig(64, 64, 256, 256, 8, 3, -1), ValueError, "programs_per_sm"),
])
def test_bad_configs_say_what_was_expected(config, err, match):
    with pytest.raises(err, match=match):
        A.plan(A.describe(1, 2, 2, 100, 100, 192, 192), H100, config=config)


def _candidate_cases(every_dim: bool):
    """(d, dv, config) params: each candidate once per tile head dims, and with `every_dim` the
    shipped configuration at every head dim too."""
    out, seen = [], set()
    for name, (d, dv) in bench.HEAD_DIMS.items():
        for cfg in bench.candidates(d, dv):
            shipped = cfg == A.config_for(d, dv, H100)
            if cfg in seen and not (every_dim and shipped):
                continue
            seen.add(cfg)
            out.append(pytest.param(d, dv, cfg, id=f"{name}-{bench.label(cfg)}"))
    return out


@pytest.mark.parametrize("d,dv,cfg", _candidate_cases(every_dim=True))
def test_candidates_match_float64_on_the_interpreter(d, dv, cfg):
    rng = np.random.default_rng(d * 7 + dv + cfg.bm + cfg.bn)
    q = rng.standard_normal((1, 2, 70, d)).astype(np.float16)
    k = rng.standard_normal((1, 1, 83, d)).astype(np.float16)
    v = rng.standard_normal((1, 1, 83, dv)).astype(np.float16)
    x, _ = A.check_qkv(q, k, v, "bhsd")
    for causal in (False, True):
        oa, lse = A.forward_outputs(x, "bhsd", return_lse=True)
        execute(A.plan(x, H100, lse=True, config=cfg), A.forward_operands(x, "bhsd", oa, lse, causal=causal))
        want, want_lse = attention_ref(q, k, v, layout="bhsd", causal=causal)
        assert np.abs(oa.obj.astype(np.float64) - want).max() < 3e-3
        np.testing.assert_allclose(lse.obj, want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d,dv", [(192, 192), (192, 128)])
def test_the_entry_point_at_wide_heads_matches_float64(d, dv):
    # attention() at config_for's tiling, bshd, grouped heads, a window; lengths not multiples of a block
    rng = np.random.default_rng(d + dv)
    q = rng.standard_normal((2, 75, 4, d)).astype(np.float16)
    k = rng.standard_normal((2, 90, 2, d)).astype(np.float16)
    v = rng.standard_normal((2, 90, 2, dv)).astype(np.float16)
    o = attention(q, k, v, window=(40, 3))
    assert np.abs(o.astype(np.float64) - attention_ref(q, k, v, window=(40, 3))[0]).max() < 3e-3


# ----------------------------------------------------------------------------- ptxas (sm_90a)
def _assemble(kernel, sig, ln):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    compiled = compile_kernel(kernel, parse_signature(kernel, sig),
                              CompileOptions(arch="sm_90a", num_warps=ln.num_warps, fast_math=True, **dict(ln.options)),
                              use_cache=False)
    return compiled.metadata["ptxas"]


@pytest.mark.slow
@pytest.mark.parametrize("d,dv,n,kv_heads", [(64, 64, 1000, 2), (128, 128, 1000, 4), (128, 128, 2000, 2),
                                             (256, 256, 1000, 2), (192, 128, 1000, 2)])
@pytest.mark.parametrize("dtype,softcap", [("f16", False), ("bf16", True)])
def test_shipped_forward_assembles_without_spills(d, dv, n, kv_heads, dtype, softcap):
    # (head dim 128 over 1000 keys without groups: the short tiling, 64 rows over one warpgroup)
    (ln,) = A.plan(A.describe(2, 4, kv_heads, n, n, d, dv), H100, softcap=softcap, lse=True)
    report = _assemble(ln.kernel, A.signature(ln, dtype), ln)
    assert_assembles_clean(report)


@pytest.mark.slow
@pytest.mark.parametrize("d,dv,n", [(64, 64, 4096), (128, 128, 4096), (128, 128, 8192), (256, 256, 4096),
                                    (192, 128, 4096)])
def test_causal_forward_in_heavy_first_order_assembles_without_spills(d, dv, n):
    (ln,) = A.plan(A.describe(1, 16, 16, n, n, d, dv), H100, lse=True, causal=True)
    assert dict(ln.constexprs)["SECTION"] >= 1
    report = _assemble(ln.kernel, A.signature(ln, "bf16"), ln)
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


@pytest.mark.slow
@pytest.mark.parametrize("d,dv,max_k", [(64, 64, None), (128, 128, None), (128, 128, 500), (256, 256, None),
                                        (192, 128, None)])
def test_shipped_varlen_forward_assembles_without_spills(d, dv, max_k):
    from tilec.stdlib_kernels.launches import spec
    import tilec as tc
    hk = 4 if max_k else 2
    q, k, v = (spec((1001, h, x), tc.float16) for h, x in ((4, d), (hk, d), (hk, dv)))
    (ln,) = V.plan_forward(q, k, v, 3, 500, H100, softcap=True, lse=True, max_seqlen_k=max_k)
    if d == 128:   # over at most 500 keys: the short tiling
        assert (ln.consts["BM"], ln.num_warps) == ((64, 4) if max_k else (128, 8))
    report = _assemble(ln.kernel, V.signature(ln, "bf16"), ln)
    assert_assembles_clean(report)


@pytest.mark.slow
@pytest.mark.parametrize("d,dv,cfg", _candidate_cases(every_dim=False))
def test_candidates_assemble_without_spills(d, dv, cfg):
    report = bench.compile_report(d, dv, cfg, "sm_90a")
    assert_assembles_clean(report)


@pytest.mark.parametrize("d,dv", [(256, 256), (192, 128)])
def test_varlen_at_wide_heads_matches_float64(d, dv):
    # the packed kernel at config_for(varlen=True)'s tiling: each sequence as a dense call of its own
    rng = np.random.default_rng(d * 3 + dv)
    lq, lk = [37, 70], [50, 21]
    q = rng.standard_normal((sum(lq), 4, d)).astype(np.float16)
    k = rng.standard_normal((sum(lk), 2, d)).astype(np.float16)
    v = rng.standard_normal((sum(lk), 2, dv)).astype(np.float16)
    cu_q, cu_k = (np.cumsum([0] + n).astype(np.int32) for n in (lq, lk))
    out = attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    for i in range(2):
        sq, sk = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        want = attention_ref(q[None, sq], k[None, sk], v[None, sk], causal=True)[0][0]
        assert np.abs(out[sq].astype(np.float64) - want).max() < 3e-3


@pytest.mark.parametrize("d,dv", [(256, 256), (192, 128)])
def test_mods_at_wide_heads_match_float64(d, dv):
    from attention_mods_funcs import rel_bias
    from attention_ref import attention_mods_ref
    rng = np.random.default_rng(d * 5 + dv)
    q = rng.standard_normal((2, 70, 4, d)).astype(np.float16)
    k = rng.standard_normal((2, 81, 2, d)).astype(np.float16)
    v = rng.standard_normal((2, 81, 2, dv)).astype(np.float16)
    o = attention(q, k, v, score_mod=rel_bias)
    want, _ = attention_mods_ref(q, k, v, lambda s, b, h, qi, ki: s + 0.03 * (qi - ki))
    assert np.abs(o.astype(np.float64) - want).max() < 3e-3
