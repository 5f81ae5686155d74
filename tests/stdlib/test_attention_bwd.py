"""stdlib attention backward on the interpreter against float64 gradients: layouts, GQA,
masks, softcap, lse's gradient; its plan, its PTX, its argument errors."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.stdlib_kernels import BF16Array, attention, attention_backward
from tilec.target import Target

from attention_ref import attention_grads_ref

B = importlib.import_module("tilec.stdlib_kernels.attention_bwd")
A = importlib.import_module("tilec.stdlib_kernels.attention")

MASKS = [dict(), dict(causal=True), dict(window=(20, 5)), dict(causal=True, window=(30, -1)), dict(window=(-1, 0)),
         dict(softcap=5.0), dict(scale=0.3, causal=True)]


def _inputs(rng, layout, b, h, hk, n_q, n_k, d, dv=None, dtype=np.float16):
    dv = d if dv is None else dv

    def shape(n, heads, dim):
        return (b, n, heads, dim) if layout == "bshd" else (b, heads, n, dim)
    return tuple(rng.standard_normal(shape(n, hh, dd)).astype(dtype)
                 for n, hh, dd in ((n_q, h, d), (n_k, hk, d), (n_k, hk, dv), (n_q, h, dv)))


def _grads(q, k, v, do, layout="bshd", dlse=None, **kw):
    o, lse = attention(q, k, v, layout=layout, return_lse=True, **kw)
    return attention_backward(do, q, k, v, o, lse, layout=layout, dlse=dlse, **kw)


def _check(got, want, tol):
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.shape == w.shape, name
        err = np.abs(np.asarray(g, dtype=np.float64) - w).max() if w.size else 0.0
        # f16 P and dS before their products: ~1e-3 of the gradients' scale
        assert err < tol * max(np.abs(w).max() if w.size else 0.0, 1.0), (name, err)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("kw", MASKS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
@pytest.mark.parametrize("n_q,n_k", [(71, 71), (33, 90), (90, 33)])
def test_gradients_match_float64(layout, kw, n_q, n_k):
    rng = np.random.default_rng(n_q * 1000 + n_k)
    q, k, v, do = _inputs(rng, layout, 2, 4, 2, n_q, n_k, 32)
    _check(_grads(q, k, v, do, layout, **kw), attention_grads_ref(q, k, v, do, layout=layout, **kw), 4e-3)


@settings(max_examples=12, deadline=None)
@given(n_q=st.integers(1, 90), n_k=st.integers(1, 90), group=st.sampled_from([(2, 1), (3, 3), (4, 2)]),
       causal=st.booleans(), left=st.sampled_from([-1, 0, 7, 40]), right=st.sampled_from([-1, 0, 3]),
       layout=st.sampled_from(["bshd", "bhsd"]), seed=st.integers(0, 2 ** 16))
def test_random_shapes_heads_and_windows(n_q, n_k, group, causal, left, right, layout, seed):
    rng = np.random.default_rng(seed)
    q, k, v, do = _inputs(rng, layout, 1, group[0], group[1], n_q, n_k, 16)
    kw = dict(causal=causal, window=(left, right), layout=layout)
    _check(_grads(q, k, v, do, **kw), attention_grads_ref(q, k, v, do, **kw), 4e-3)


@pytest.mark.parametrize("h,hk", [(6, 1), (6, 3), (4, 4)])
def test_grouped_heads_sum_dk_dv_over_the_group(h, hk):
    rng = np.random.default_rng(h * 10 + hk)
    q, k, v, do = _inputs(rng, "bhsd", 1, h, hk, 40, 53, 16)
    _check(_grads(q, k, v, do, "bhsd", causal=True), attention_grads_ref(q, k, v, do, causal=True, layout="bhsd"),
           4e-3)


@pytest.mark.parametrize("split", [1, 2, 3, 6])
def test_grouped_heads_split_over_programs(split, monkeypatch):
    # a kv head's 6 query heads walked by 1 (no split), 2, 3 or 6 programs: f32 partials per
    # share, then summed (attention_bwd_group_sum_kernel); odd lengths, head dims not tiles
    monkeypatch.setattr(B, "gqa_split", lambda programs, group, target: split)
    rng = np.random.default_rng(split)
    q, k, v, do = _inputs(rng, "bshd", 2, 6, 1, 45, 71, 24, 40)
    for kw in (dict(causal=True), dict(window=(20, 5))):
        _check(_grads(q, k, v, do, **kw), attention_grads_ref(q, k, v, do, **kw), 4e-3)


def test_bwd_order_of_a_llama_sequence():
    # one 4096-token sequence, 16 query / 4 kv heads, head dim 128 on an H200: 32 key blocks x 4
    # kv heads = 128 dK/dV programs, so each group splits in 4; causal, both launches walk
    # heaviest first in sections of pairs whose reads fit the L2 budget (divisors of the pairs)
    h200 = Target.from_arch("sm_90a")
    A = importlib.import_module("tilec.stdlib_kernels.attention")
    x = A.describe(1, 16, 4, 4096, 4096, 128, 128, dtype=A.tc.bfloat16)
    cfg = B.bwd_config_for(128, h200)
    budget = A.tuning_for(h200).attention_fwd.section_l2_bytes

    def section(pairs, pair_bytes):
        return max(d for d in range(1, min(pairs, budget // pair_bytes) + 1) if pairs % d == 0)
    order = B.bwd_order(x, cfg, h200, causal=True)
    assert order.split == 4
    assert order.dkdv_section == section(16, 4096 * 256 * 2)        # Q and dO of one query head each
    assert order.dq_section == section(16, 4096 * 256 * 2 // 4)     # K and V shared by 4 query heads
    assert B.bwd_order(x, cfg, h200, causal=False) == B.BwdOrder(4, 0, 0)
    # many programs: no split; one block on a side: that launch keeps the grid order
    wide = A.describe(8, 16, 16, 4096, 100, 128, 128, dtype=A.tc.bfloat16)
    assert B.bwd_order(wide, cfg, h200, causal=True) == B.BwdOrder(1, 0, section(128, 100 * 256 * 2))


def test_gqa_split_fills_the_sms_with_the_fewest_shares():
    h200 = Target.from_arch("sm_90a")
    want = h200.sm_count * B.tuning_for(h200).attention_bwd.gqa_split_waves   # 264 programs
    assert B.gqa_split(128, 4, h200) == 4          # 32 key blocks x 4 kv heads: 256 is short of 264
    assert B.gqa_split(want // 2, 4, h200) == 2
    assert B.gqa_split(100, 6, h200) == 3          # 200 < 264 <= 300
    assert B.gqa_split(10, 4, h200) == 4           # never more than the group
    assert B.gqa_split(want, 4, h200) == 1 and B.gqa_split(10, 1, h200) == 1


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window=(70, 90)), dict(softcap=5.0, window=(100, 0))],
                         ids=["plain", "causal", "window", "softcap"])
def test_grouped_heads_walk_several_query_blocks_per_loop(kw):
    # head dim 128 (the wgmma blocks: 128 keys owned, 64-row query steps): each kv head's
    # three query loops walk the blocks of its 3 query heads in turn, several blocks per head
    rng = np.random.default_rng(len(kw))
    q, k, v, do = _inputs(rng, "bshd", 1, 6, 2, 300, 260, 128)
    assert B.bwd_config_for(128, Target.from_arch("sm_90a"), softcap="softcap" in kw).q_step < 300 // 3
    _check(_grads(q, k, v, do, **kw), attention_grads_ref(q, k, v, do, **kw), 4e-3)


@pytest.mark.parametrize("d,dv", [(96, 96), (48, 32), (128, 64), (192, 128), (256, 256)])
def test_head_dims_that_are_not_tiles(d, dv):
    rng = np.random.default_rng(d + dv)
    q, k, v, do = _inputs(rng, "bshd", 1, 2, 1, 37, 45, d, dv)
    _check(_grads(q, k, v, do, window=(9, 4)), attention_grads_ref(q, k, v, do, window=(9, 4)), 4e-3)


def test_lse_gradient_enters_through_delta():
    rng = np.random.default_rng(11)
    q, k, v, do = _inputs(rng, "bshd", 1, 2, 2, 30, 41, 16)
    dlse = rng.standard_normal((1, 2, 30)).astype(np.float32)
    _check(_grads(q, k, v, do, dlse=dlse, causal=True), attention_grads_ref(q, k, v, do, causal=True, dlse=dlse),
           4e-3)


def test_rows_that_see_no_key_get_no_gradient():
    # window (0, 0) with seq_q > seq_k: the first rows (bottom-right alignment) see no key
    rng = np.random.default_rng(5)
    q, k, v, do = _inputs(rng, "bshd", 1, 2, 2, 40, 20, 16)
    got = _grads(q, k, v, do, causal=True)
    assert all(np.isfinite(np.asarray(g, dtype=np.float64)).all() for g in got)
    assert not np.asarray(got[0])[:, :20].any()
    _check(got, attention_grads_ref(q, k, v, do, causal=True), 4e-3)


def test_bf16_and_given_outputs():
    rng = np.random.default_rng(9)
    q, k, v, do = (BF16Array(t) for t in _inputs(rng, "bshd", 1, 4, 2, 25, 25, 16, dtype=np.float32))
    dq, dk, dv = (BF16Array(np.zeros(t.shape, np.float32)) for t in (q, k, v))
    got = _grads(q, k, v, do, causal=True)
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    given = attention_backward(do, q, k, v, o, lse, causal=True, dq=dq, dk=dk, dv=dv)
    assert given[0] is dq and given[1] is dk and given[2] is dv
    want = attention_grads_ref(*(np.asarray(t) for t in (q, k, v, do)), causal=True)
    _check([np.asarray(g) for g in got], want, 3e-2)
    _check([np.asarray(g) for g in given], want, 3e-2)


@pytest.mark.parametrize("n_q,n_k", [(0, 5), (5, 0), (1, 1)])
def test_empty_and_single_sequences(n_q, n_k):
    rng = np.random.default_rng(1)
    q, k, v, do = _inputs(rng, "bshd", 2, 2, 2, n_q, n_k, 16)
    got = _grads(q, k, v, do, causal=True)
    _check(got, attention_grads_ref(q, k, v, do, causal=True), 4e-3)


def test_config_is_a_function_of_head_dims_and_target():
    h100 = Target.from_arch("sm_90a")
    c64, c128 = B.bwd_config_for(64, h100), B.bwd_config_for(128, h100)
    assert (c64.num_warps, c64.dk, c64.dv) == (4, 64, 64)
    assert (c128.num_warps, c128.dk, c128.dv) == (8, 128, 128)
    # the wgmma blocks up to head dim 128 on the dense path (two warpgroups of 64 owned rows),
    # up to 64 one warpgroup's (64 owned rows, steps of 64)
    assert (c128.kv_block, c128.q_step, c128.q_block, c128.kv_step) == (128, 64, 128, 64)
    assert (c64.kv_block, c64.q_step, c64.q_block, c64.kv_step) == (64, 64, 64, 64)
    assert B.bwd_config_for(32, h100) == B.AttentionBwdConfig(64, 64, 64, 64, 32, 32, 4, dkdv_programs=3)
    # the one-warpgroup dK/dV kernel held to three programs per SM, the others to ptxas's choice
    assert c64.dkdv_options() == {"num_stages": 3, "min_programs_per_sm": 3}
    assert c128.dkdv_options() == {"num_stages": 3}
    # the mods kernels keep two warpgroups at 64
    mods64 = B.bwd_config_for(64, h100, path="mods")
    assert (mods64.kv_block, mods64.q_block, mods64.num_warps) == (128, 128, 8)
    # sm_80: the mma.sync tiles (owned blocks of at most 64)
    a100 = Target.from_arch("sm_80")
    for cfg in (B.bwd_config_for(128, a100), B.bwd_config_for(128, a100, path="mods"),
                B.bwd_config_for(128, a100, softcap=True)):
        assert max(cfg.kv_block, cfg.q_block) <= 64 and cfg.dk == 128
    # softcap: the wgmma blocks too
    assert B.bwd_config_for(64, h100, softcap=True) == c64
    for path in ("dense", "varlen"):
        assert B.bwd_config_for(128, h100, softcap=True, path=path) == c128
    # the mods kernels at 128: the wgmma blocks; "mods_heavy" calls keep the dK/dV kernel on mma.sync
    assert B.bwd_config_for(128, h100, path="mods") == c128
    heavy = B.bwd_config_for(128, h100, path="mods_heavy")
    assert (heavy.q_block, heavy.kv_step) == (c128.q_block, c128.kv_step) and heavy.kv_block <= 64
    assert B.bwd_config_for(64, h100, path="mods_heavy") == mods64
    # varlen: the dense path's blocks (the wgmma blocks at 128 too), with softcap too
    assert B.bwd_config_for(128, h100, path="varlen") == c128
    assert B.bwd_config_for(128, h100, softcap=True, path="varlen") == B.bwd_config_for(128, h100, softcap=True)
    assert B.bwd_config_for(64, h100, path="varlen") == c64
    with pytest.raises(ValueError, match="path"):
        B.bwd_config_for(64, h100, path="paged")
    assert B.bwd_config_for(96, h100) == c128
    assert B.bwd_config_for(40, h100, 128).num_warps == 8 and B.bwd_config_for(8, h100).dk == 16
    c192 = B.bwd_config_for(192, h100, 128)   # MLA: 256-wide tiles, v's padded too (no spills)
    assert (c192.dk, c192.dv, c192.num_warps, c192.num_stages) == (256, 256, 8, 2) and c192.q_block < c128.q_block


def test_config_reads_the_tuning_table():
    from dataclasses import replace

    from tilec.stdlib_kernels import tuning
    h100 = Target.from_arch("sm_90a")
    saved = tuning.TABLES["sm_90"]
    tuning.TABLES["sm_90"] = replace(saved, attention_bwd=replace(saved.attention_bwd, wgmma_max_head_dim=64,
                                                                  wgmma_dq=(128, 32), wgmma_small_max_head_dim=32,
                                                                  wgmma_small=(64, 32, 64, 16, 4)))
    try:
        c32, c64, c128 = B.bwd_config_for(32, h100), B.bwd_config_for(64, h100), B.bwd_config_for(128, h100)
    finally:
        tuning.TABLES["sm_90"] = saved
    assert (c32.kv_block, c32.q_step, c32.q_block, c32.kv_step, c32.num_warps) == (64, 32, 64, 16, 4)
    assert (c64.q_block, c64.kv_step) == (128, 32) and max(c128.kv_block, c128.q_block) <= 64
    assert B.bwd_config_for(128, h100).kv_block == saved.attention_bwd.wgmma_dkdv[0]
    tuning.TABLES["sm_90"] = replace(saved, attention_bwd=replace(saved.attention_bwd,
                                                                  wgmma_max_head_dim_mods_heavy_dkdv=128))
    try:
        heavy = B.bwd_config_for(128, h100, path="mods_heavy")
    finally:
        tuning.TABLES["sm_90"] = saved
    assert heavy == B.bwd_config_for(128, h100) != B.bwd_config_for(128, h100, path="mods_heavy")
    tuning.TABLES["sm_90"] = replace(saved, attention_bwd=replace(saved.attention_bwd,
                                                                  wgmma_max_head_dim_softcap_dkdv=64))
    try:
        cap128, cap64 = B.bwd_config_for(128, h100, softcap=True), B.bwd_config_for(64, h100, softcap=True)
    finally:
        tuning.TABLES["sm_90"] = saved
    assert cap128.kv_block <= 64 and cap128.q_block == 128 and cap64 == B.bwd_config_for(64, h100)


def _config(kernel, sig, arch="sm_90a"):
    spec = getattr(B, kernel).specialization(sig)
    return B.bwd_config_for(spec.constexprs["DK"], Target.from_arch(arch), spec.constexprs["DV"],
                            spec.constexprs.get("SOFTCAP", False))


def _planned(kernel, sig, arch):
    """Whether the entry point on `arch` launches `kernel` at the blocks of `sig` (sm_80 never
    runs the wgmma blocks, nor sm_90a the mma.sync tiles where the wgmma blocks fit)."""
    if kernel in ("attention_bwd_delta_kernel", "attention_bwd_group_sum_kernel"):
        return True
    c, cfg = getattr(B, kernel).specialization(sig).constexprs, _config(kernel, sig, arch)
    blocks = (cfg.q_step, cfg.kv_block) if kernel == "attention_bwd_dkdv_kernel" else (cfg.q_block, cfg.kv_step)
    return (c["BM"], c["BN"]) == blocks


_EXTRA = [(k, s, arch) for arch in ("sm_80", "sm_90a") for k, s in B.EXTRA_SIGNATURES if _planned(k, s, arch)]


def _warps(kernel, sig, arch="sm_90a"):
    if kernel == "attention_bwd_group_sum_kernel":
        return 4
    if kernel == "attention_bwd_delta_kernel":
        return B.delta_warps(getattr(B, kernel).specialization(sig).constexprs["DV"])
    return _config(kernel, sig, arch).num_warps


def _stages(kernel, sig):
    if kernel in ("attention_bwd_delta_kernel", "attention_bwd_group_sum_kernel"):
        return 3
    return _config(kernel, sig).num_stages


def test_options_are_the_entry_points_warp_counts():
    for kernel, sig in B.SIGNATURES.items():   # sm_80's plan at head dim 64
        assert B.OPTIONS[kernel]["num_warps"] == _warps(kernel, sig, "sm_80")
    assert (B.delta_warps(64), B.delta_warps(128), B.delta_warps(256)) == (4, 4, 8)


def test_extra_signatures_cover_the_planned_blocks():
    # every signature is launched on some arch; head dim 128 at the wgmma blocks on sm_90a
    # (grouped and not, softcap too) and at the mma.sync tiles on sm_80
    assert {(k, s) for k, s, _ in _EXTRA} == set(B.EXTRA_SIGNATURES)
    wgmma128 = [s for k, s, arch in _EXTRA if arch == "sm_90a" and "DK=128" in s and "BN=128" in s]
    assert any("GROUP=4" in s for s in wgmma128) and any("GROUP=1" in s for s in wgmma128)
    assert any(arch == "sm_80" and "DK=128" in s for _, s, arch in _EXTRA)
    assert any(arch == "sm_90a" and "DK=128" in s and "SOFTCAP=True" in s for _, s, arch in _EXTRA)
    # softcap at 128 on sm_90a: both kernels on the wgmma blocks
    for kernel, blocks in (("attention_bwd_dq_kernel", "BM=128, BN=64"), ("attention_bwd_dkdv_kernel", "BM=64, BN=128")):
        assert any(k == kernel and arch == "sm_90a" and "DK=128" in s and "SOFTCAP=True" in s and blocks in s
                   for k, s, arch in _EXTRA)


@pytest.mark.slow
@pytest.mark.parametrize("kernel,sig,arch", _EXTRA, ids=[f"{k}-{i}-{a}" for i, (k, _, a) in enumerate(_EXTRA)])
def test_extra_signatures_assemble_without_spills(kernel, sig, arch):
    # SIGNATURES go through tests/test_ptxas.py; these at the warps the entry point launches them with
    k = getattr(B, kernel)
    compiled = compile_kernel(k, parse_signature(k, sig), CompileOptions(arch=arch, num_warps=_warps(kernel, sig, arch),
                                                                        num_stages=_stages(kernel, sig),
                                                                        fast_math=True), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


@pytest.mark.parametrize("call,err,match", [
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse, layout="sbhd"), ValueError, "layout"),
    (lambda q, k, v, do, o, lse: attention_backward(do[:, :3], q, k, v, o, lse), ValueError, "do: expected"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o.astype(np.float32), lse), TypeError, "o:"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse[:, :1]), ValueError, "lse"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse.astype(np.float16)), TypeError, "lse"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse, dq=np.zeros((1,), np.float16)),
     ValueError, "dq"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse, dlse=lse[:, :1]), ValueError, "dlse"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse, dk=np.zeros((1, 8, 2, 32), np.float16)[..., ::2]),
     ValueError, "dk: the head dim must be contiguous"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse, softcap=-1.0), ValueError, "softcap"),
    (lambda q, k, v, do, o, lse: attention_backward(do, q, k, v, o, lse, deterministic=1), TypeError,
     "deterministic: expected True or False"),
])
def test_bad_arguments_say_what_was_expected(call, err, match):
    rng = np.random.default_rng(0)
    q, k, v, do = _inputs(rng, "bshd", 1, 4, 2, 8, 8, 16)
    o, lse = attention(q, k, v, return_lse=True)
    with pytest.raises(err, match=match):
        call(q, k, v, do, o, lse)


@pytest.mark.parametrize("h,hk", [(3, 3), (4, 2)])
def test_causal_heaviest_first_order_gives_the_same_gradients(h, hk):
    # sections of (batch, head) pairs, heaviest block first (attention.program_block), more
    # blocks than one on both sides
    from dataclasses import replace
    from tilec.stdlib_kernels import tuning
    A = importlib.import_module("tilec.stdlib_kernels.attention")
    rng = np.random.default_rng(h + hk)
    q, k, v, do = _inputs(rng, "bshd", 2, h, hk, 300, 290, 32)
    pair_bytes = 300 * 64 * 2
    saved = tuning.TABLES["sm_90"]
    tuning.TABLES["sm_90"] = replace(saved, attention_fwd=replace(saved.attention_fwd, section_l2_bytes=4 * pair_bytes,
                                                                  heavy_first_gqa=True))
    try:
        (ln,) = A.plan(A.check_qkv(q, k, v, "bshd")[0], Target.from_arch("sm_90a"), causal=True)
        assert dict(ln.constexprs)["SECTION"] == {3: 3, 2: 8}[hk]   # divisors of the 6 or 8 pairs
        got = _grads(q, k, v, do, causal=True)
    finally:
        tuning.TABLES["sm_90"] = saved
    _check(got, attention_grads_ref(q, k, v, do, causal=True), 4e-3)


def test_backward_plan_from_descriptions():
    # plan_backward: a pure function of the q, k, v descriptions and the Target, no array
    from tilec.stdlib_kernels.attention import describe
    h100 = Target.from_arch("sm_90a")
    cfg = B.bwd_config_for(64, h100)
    lns = B.plan_backward(describe(2, 4, 4, 300, 500, 64, 64), h100)
    assert [ln.schedule for ln in lns] == ["delta", "dkdv", "dq"]
    delta, dkdv, dq = lns
    assert delta.args == ("o", "do", "delta", "delta") and delta.consts["DLSE"] is False
    assert [(t.name, t.shape) for t in delta.temps] == [("delta", (2, 4, 300))]
    assert dkdv.grid == (-(-500 // cfg.kv_block), 4, 2) and dq.grid == (-(-300 // cfg.q_block), 4, 2)
    assert dkdv.args[6:8] == ("dk", "dv") and dq.args[6] == "dq"
    assert (dkdv.consts["BM"], dkdv.consts["BN"], dq.consts["BM"], dq.consts["BN"]) == \
        (cfg.q_step, cfg.kv_block, cfg.q_block, cfg.kv_step)
    assert "SPLIT" not in dkdv.consts and "SECTION" not in dkdv.consts
    # a GQA group of 8 on one kv head, few key blocks: the dK/dV programs split the group and
    # write f32 partials that two launches sum; dlse enters the delta kernel
    x = describe(1, 8, 1, 256, 256, 128, 128)
    split = B.gqa_split(-(-256 // B.bwd_config_for(128, h100).kv_block), 8, h100)
    assert split > 1
    lns = B.plan_backward(x, h100, dlse=True, softcap=True)
    assert [ln.schedule for ln in lns] == ["delta", "dkdv", "group_sum", "group_sum", "dq"]
    assert lns[0].args[2] == "dlse" and lns[0].consts["DLSE"] is True
    assert lns[1].args[6:8] == ("dk_part", "dv_part") and lns[1].consts["SPLIT"] == split
    assert lns[1].consts["SOFTCAP"] is True and lns[1].consts["GROUP"] == 8
    assert [ln.args for ln in lns[2:4]] == [("dk_part", "dk"), ("dv_part", "dv")]
    parts = {t.name: t.shape for t in lns[1].temps}
    assert parts["dk_part"] == (1, split, 256, 128) == parts["dv_part"]
    # causal: both launches walk heaviest first in sections
    lns = B.plan_backward(describe(1, 16, 16, 4096, 4096, 64, 64), h100, causal=True)
    assert lns[1].consts["SECTION"] > 0 and lns[2].consts["SECTION"] > 0


@pytest.mark.parametrize("kw", [dict(), dict(causal=True, window=(9, -1)),
                                dict(cu_seqlens_q=np.array([0, 0, 13, 40], np.int32))],
                         ids=["dense", "window", "varlen"])
def test_deterministic_calls_give_the_same_bits(kw):
    # flash-attn's switch: accepted either way; with no atomics each call repeats the last bit for bit
    rng = np.random.default_rng(7)
    if "cu_seqlens_q" in kw:
        kw = dict(kw, cu_seqlens_k=kw["cu_seqlens_q"], max_seqlen_q=27, max_seqlen_k=27)
        q, k, v, do = (rng.standard_normal((40, h, 32)).astype(np.float16) for h in (4, 2, 2, 4))
    else:
        q, k, v, do = _inputs(rng, "bshd", 2, 4, 2, 45, 45, 32)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    runs = [attention_backward(do, q, k, v, o, lse, deterministic=det, **kw) for det in (True, True, False)]
    for got in runs[1:]:
        for a, b in zip(runs[0], got):
            assert np.array_equal(np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16))


# ----------------------------------------------------------------------------- dQ in the dK/dV kernel
@pytest.fixture
def fused_dq_on():
    """AttentionBwdTuning.fused_dq_head_dims = (64, 128)."""
    from dataclasses import replace

    from tilec.stdlib_kernels import tuning
    saved = tuning.TABLES["sm_90"]
    tuning.TABLES["sm_90"] = replace(saved, attention_bwd=replace(saved.attention_bwd, fused_dq_head_dims=(64, 128)))
    try:
        importlib.import_module("tilec.stdlib_kernels._plan").clear_plans()
        yield
    finally:
        importlib.import_module("tilec.stdlib_kernels._plan").clear_plans()
        tuning.TABLES["sm_90"] = saved


def test_plans_with_dq_in_the_dkdv_kernel(fused_dq_on):
    h100, a100 = Target.from_arch("sm_90a"), Target.from_arch("sm_80")
    x = A.describe(2, 4, 4, 1000, 900, 64, 64)
    names = [ln.name for ln in B.plan_backward(x, h100, causal=True)]
    assert names == ["attention_bwd_delta_zero_kernel", "attention_bwd_dkdv_dq_kernel", "attention_bwd_dq_convert_kernel"]
    zero, fused, convert = B.plan_backward(x, h100)
    # δ and lse rows padded to whole blocks of 64 (read unmasked by the fused kernel), lse copied there
    assert [(t.name, t.shape) for t in fused.temps] == [("delta", (2, 4, 1024)), ("lse_rows", (2, 4, 1024)),
                                                        ("dq_acc", (2, 4, 1000, 64))]
    assert zero.args[3:6] == ("lse", "delta", "lse_rows") and fused.args[4:6] == ("lse_rows", "delta")
    assert zero.grid == convert.grid == (16, 4, 2) and fused.grid == (15, 4, 2)
    # the fixed-order plan: deterministic, another head dim, no wgmma, a GQA split
    two_kernels = ["attention_bwd_delta_kernel", "attention_bwd_dkdv_kernel", "attention_bwd_dq_kernel"]
    assert [ln.name for ln in B.plan_backward(x, h100, deterministic=True)] == two_kernels
    assert [ln.name for ln in B.plan_backward(A.describe(2, 4, 4, 1000, 900, 256, 256), h100)] == two_kernels
    assert [ln.name for ln in B.plan_backward(x, a100)] == two_kernels
    assert [ln.name for ln in B.plan_backward(x, h100, softcap=True)] == two_kernels   # no tanh in the fused step
    assert "attention_bwd_dkdv_dq_kernel" not in [ln.name for ln in B.plan_backward(A.describe(1, 8, 1, 64, 64, 64, 64),
                                                                                      h100)]   # split: partials
    # grouped query heads without a split: fused, the group's query heads per program
    zero, fused, convert = B.plan_backward(A.describe(4, 32, 8, 4096, 4096, 64, 64), h100)
    assert fused.name == "attention_bwd_dkdv_dq_kernel" and dict(fused.constexprs)["GROUP"] == 4
    assert fused.grid[1:] == (8, 4) and zero.grid[1:] == convert.grid[1:] == (32, 4)


def test_the_shipped_table_fuses_dq_at_head_dim_128_only():
    # measured: faster than two kernels at 128, not at 64 (AttentionBwdTuning.fused_dq_head_dims)
    h100 = Target.from_arch("sm_90a")
    assert B.tuning_for(h100).attention_bwd.fused_dq_head_dims == (128,)
    names = lambda d, b=2, h=16, hk=16, **kw: [ln.name for ln in B.plan_backward(A.describe(b, h, hk, 4096, 4096, d, d),
                                                                                  h100, **kw)]
    assert names(128)[1] == names(128, causal=True)[1] == "attention_bwd_dkdv_dq_kernel"
    assert names(96)[1] == "attention_bwd_dkdv_dq_kernel"   # (padded to the 128 tiles)
    assert "attention_bwd_dq_kernel" in names(128, deterministic=True) and "attention_bwd_dq_kernel" in names(64)
    # grouped query heads too, not a GQA split (too few programs: partials); causal, groups of up to 4
    assert names(128, 4, 32, 8)[1] == names(128, 4, 32, 8, causal=True)[1] == "attention_bwd_dkdv_dq_kernel"
    assert names(128, 8, 16, 2)[1] == "attention_bwd_dkdv_dq_kernel"
    assert B.tuning_for(h100).attention_bwd.fused_dq_max_group_causal == 4
    assert "attention_bwd_dq_kernel" in names(128, 8, 16, 2, causal=True)
    assert "attention_bwd_dq_kernel" in names(128, 1, 8, 1)


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window=(20, 5)), dict(window=(3, 70), scale=0.3)],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
@pytest.mark.parametrize("h,hk", [(3, 3), (4, 2), (6, 2)])
def test_dq_in_the_dkdv_kernel_matches_float64(fused_dq_on, monkeypatch, kw, h, hk):
    # grouped query heads: no GQA split (these few programs would take one, which is not fused)
    monkeypatch.setattr(B, "gqa_split", lambda programs, group, target: 1)
    rng = np.random.default_rng(7)
    q, k, v, do = _inputs(rng, "bshd", 2, h, hk, 77, 150, 48)
    assert [ln.name for ln in B.plan_backward(A.check_qkv(q, k, v, "bshd")[0], B.HOST_TARGET,
                                              causal=kw.get("causal", False))][1] == "attention_bwd_dkdv_dq_kernel"
    _check(_grads(q, k, v, do, **kw), attention_grads_ref(q, k, v, do, **kw), 4e-3)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    same = attention_backward(do, q, k, v, o, lse, deterministic=True, **kw)
    _check(_grads(q, k, v, do, **kw), [np.asarray(g, np.float64) for g in same], 2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,causal", [("f16", False), ("bf16", True)])
def test_the_small_dkdv_kernel_fits_three_programs_per_sm(dtype, causal):
    from ptxas_checks import assert_assembles_clean
    h100 = Target.from_arch("sm_90a")
    x = A.describe(2, 16, 16, 4096, 4096, 64, 64, dtype=A.tc.bfloat16 if dtype == "bf16" else A.tc.float16)
    dkdv = [ln for ln in B.plan_backward(x, h100, causal=causal) if ln.name == "attention_bwd_dkdv_kernel"][0]
    assert dict(dkdv.options)["min_programs_per_sm"] == 3
    sig = B._signature("attention_bwd_dkdv_kernel", dtype, B.bwd_config_for(64, h100),
                       section=dict(dkdv.constexprs).get("SECTION", 0))
    compiled = compile_kernel(B.attention_bwd_dkdv_kernel, parse_signature(B.attention_bwd_dkdv_kernel, sig),
                              CompileOptions(arch="sm_90a", num_warps=dkdv.num_warps, fast_math=True,
                                             **dict(dkdv.options)), use_cache=False)
    assert_assembles_clean(compiled.metadata["ptxas"])
    assert ".minnctapersm 3" in compiled.asm["ptx"] and compiled.metadata["ptxas"]["registers"] <= 168


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_fused_paths_row_kernels_assemble_without_spills(dtype):
    # the δ kernel that also copies lse into padded rows and zeroes dq_acc, and dq's scale and cast,
    # as plan_backward launches them at head dim 128 on sm_90a (odd lengths: unaligned rows)
    from ptxas_checks import assert_assembles_clean
    zero, _, convert = B.plan_backward(A.describe(2, 16, 16, 1000, 1000, 128, 128), Target.from_arch("sm_90a"))
    v4 = f"{dtype}[?,?,?,?]:div=1x16x1x16:stride_div=16x16x16x1"
    rows, padded = "f32[?,?,?]:div=1x16x1:stride_div=16x8x1", "f32[?,?,?]:div=1x16x16:stride_div=16x16x1"
    acc = "f32[?,?,?,?]:div=1x16x1x16:stride_div=16x16x16x1"
    types = {"o": v4, "do": v4, "dq": v4, "delta": padded, "lse": rows, "lse_rows": padded, "dq_acc": acc,
             "scale": "f32"}
    for ln in (zero, convert):
        params = ln.kernel.param_names
        sig = ", ".join([f"{p}={types[a]}" for p, a in zip(params, ln.args)] + [f"{k}={v}" for k, v in ln.constexprs])
        compiled = compile_kernel(ln.kernel, parse_signature(ln.kernel, sig),
                                  CompileOptions(arch="sm_90a", num_warps=ln.num_warps, fast_math=True), use_cache=False)
        assert_assembles_clean(compiled.metadata["ptxas"])


@pytest.mark.slow
@pytest.mark.parametrize("d,n,b,hk", [(64, 4096, 2, 16), (128, 4096, 2, 16), (128, 1000, 2, 16), (128, 4096, 4, 4)])
def test_the_fused_kernel_assembles_without_spills(fused_dq_on, d, n, b, hk):
    # n = 1000: q, k, v, dO rows not a multiple of 16 (masked), δ and lse rows padded (read whole);
    # hk = 4: groups of 4 query heads (the group walked within each query block, 4 bytes spilled else)
    from ptxas_checks import assert_assembles_clean
    h100 = Target.from_arch("sm_90a")
    for causal in (False, True):
        _, fused, _ = B.plan_backward(A.describe(b, 16, hk, n, n, d, d, dtype=A.tc.bfloat16), h100,
                                      causal=causal)
        assert fused.name == "attention_bwd_dkdv_dq_kernel" and dict(fused.constexprs)["GROUP"] == 16 // hk
        seq = "16" if n % 16 == 0 else "1"
        v4, rows = f"bf16[?,?,?,?]:div=1x16x{seq}x16:stride_div=16x16x16x1", "f32[?,?,?]:div=1x16x16:stride_div=16x16x1"
        kv4 = f"bf16[?,?,?,?]:div=1x{16 if hk % 16 == 0 else 1}x{seq}x16:stride_div=16x16x16x1"
        types = {"lse": rows, "delta": rows, "dq_acc": f"f32[?,?,?,?]:div=1x16x{seq}x16:stride_div=16x16x16x1",
                 "left": "i32", "right": "i32", "qk_scale": "f32", "cap": "f32", "scale": "f32",
                 **dict.fromkeys(("k", "v", "dk", "dv"), kv4)}
        # (the launch's operands by position: its "lse_rows" is the kernel's lse)
        sig = ", ".join([f"{p}={types.get(p, v4)}" for p in fused.kernel.param_names[:len(fused.args)]]
                        + [f"{k}={v}" for k, v in fused.constexprs])
        compiled = compile_kernel(fused.kernel, parse_signature(fused.kernel, sig),
                                  CompileOptions(arch="sm_90a", num_warps=fused.num_warps, fast_math=True,
                                                 **dict(fused.options)), use_cache=False)
        assert_assembles_clean(compiled.metadata["ptxas"])
        assert "cp.reduce.async.bulk.tensor" in compiled.asm["ptx"]
