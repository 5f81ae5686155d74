"""stdlib attention on the interpreter: layouts, GQA, masks, softcap, lse; its plan; its argument errors."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilec.target import Target
from tilec.stdlib_kernels import BF16Array, attention

from attention_ref import attention_ref

A = importlib.import_module("tilec.stdlib_kernels.attention")

MASKS = [dict(), dict(causal=True), dict(window=(20, 5)), dict(causal=True, window=(30, -1)), dict(window=(-1, 0)),
         dict(softcap=5.0), dict(scale=0.3)]


def _qkv(rng, layout, b, h, hk, n_q, n_k, d, dv=None, dtype=np.float16):
    dv = d if dv is None else dv

    def shape(n, heads, dim):
        return (b, n, heads, dim) if layout == "bshd" else (b, heads, n, dim)
    return tuple(rng.standard_normal(shape(n, hh, dd)).astype(dtype)
                 for n, hh, dd in ((n_q, h, d), (n_k, hk, d), (n_k, hk, dv)))


def _check(got, want, tol):
    err = np.abs(np.asarray(got, dtype=np.float64) - want).max() if want.size else 0.0
    assert err < tol, err


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("kw", MASKS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
@pytest.mark.parametrize("n_q,n_k", [(70, 70), (33, 90), (90, 33)])
def test_attention_matches_float64(layout, kw, n_q, n_k):
    rng = np.random.default_rng(n_q * 1000 + n_k)
    q, k, v = _qkv(rng, layout, 2, 4, 2, n_q, n_k, 64)
    o, lse = attention(q, k, v, layout=layout, return_lse=True, **kw)
    want_o, want_lse = attention_ref(q, k, v, layout=layout, **kw)
    assert o.shape == want_o.shape and o.dtype == q.dtype
    _check(o, want_o, 3e-3)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)


@settings(max_examples=12, deadline=None)
@given(n_q=st.integers(1, 90), n_k=st.integers(1, 90), group=st.sampled_from([(1, 1), (2, 1), (3, 3), (4, 2), (6, 2)]),
       causal=st.booleans(), left=st.sampled_from([-1, 0, 7, 40]), right=st.sampled_from([-1, 0, 3]),
       softcap=st.sampled_from([None, 4.0]), layout=st.sampled_from(["bshd", "bhsd"]), seed=st.integers(0, 2 ** 16))
def test_random_shapes_heads_windows_and_caps(n_q, n_k, group, causal, left, right, softcap, layout, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, layout, 1, group[0], group[1], n_q, n_k, 16)
    kw = dict(causal=causal, window=(left, right), softcap=softcap, layout=layout)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    want_o, want_lse = attention_ref(q, k, v, **kw)
    _check(o, want_o, 3e-3)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))   # rows that see no key
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d,dv", [(96, 96), (48, 32), (192, 128), (256, 256)])
def test_head_dims_that_are_not_tiles(d, dv):
    rng = np.random.default_rng(d + dv)
    q, k, v = _qkv(rng, "bshd", 1, 2, 1, 37, 45, d, dv)
    o = attention(q, k, v, causal=True)
    _check(o, attention_ref(q, k, v, causal=True)[0], 3e-3)


def test_multi_query_and_bf16():
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, "bhsd", 2, 6, 1, 50, 50, 32, dtype=np.float32)
    qb, kb, vb = (BF16Array(t) for t in (q, k, v))
    o = attention(qb, kb, vb, layout="bhsd", causal=True)
    want = attention_ref(np.asarray(qb), np.asarray(kb), np.asarray(vb), layout="bhsd", causal=True)[0]
    _check(np.asarray(o), want, 2e-2)


def test_out_is_written_and_returned():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, "bshd", 1, 2, 2, 20, 20, 16)
    out = np.zeros_like(q)
    assert attention(q, k, v, out=out) is out
    _check(out, attention_ref(q, k, v)[0], 3e-3)


@pytest.mark.parametrize("n_q,n_k", [(0, 5), (5, 0), (1, 1)])
def test_empty_and_single_sequences(n_q, n_k):
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, "bshd", 2, 2, 2, n_q, n_k, 16)
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    want_o, want_lse = attention_ref(q, k, v, causal=True)
    _check(o, want_o, 3e-3)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))


def test_config_is_a_function_of_head_dims_and_target():
    h100, a100 = Target.from_arch("sm_90a"), Target.from_arch("sm_80")
    # a producer warpgroup and 128 keys per step at tile head dim 128 (setmaxnreg: sm_90a)
    specialized = A.AttentionConfig(128, 128, 128, 128, 8, 3, warp_specialize=True)
    assert A.config_for(128, 128, h100) == specialized and A.config_for(96, 96, h100) == specialized
    plain = A.AttentionConfig(128, 64, 128, 128, 8, 3)
    assert A.config_for(128, 128, h100, specialize=False) == plain   # kernels not measured so
    assert A.config_for(128, 128, Target.from_arch("sm_90")) == plain   # no setmaxnreg without the a
    assert A.config_for(192, 128, h100) == A.AttentionConfig(128, 64, 256, 128, 8)   # wgmma, two warpgroups
    # both dots wgmma over two warpgroups; 2 stages (3 slots of 64 x 256 K and V overflow)
    assert A.config_for(256, 256, h100) == A.AttentionConfig(128, 64, 256, 256, 8, 2)
    assert A.config_for(192, 192, h100) == A.config_for(256, 256, h100)
    assert A.config_for(192, 192, a100) == A.AttentionConfig(64, 32, 256, 256, 8)    # mma.sync
    # the packed kernel: smaller mma.sync blocks (64 x 64 and 128 x 64 overflow shared memory)
    assert A.config_for(256, 256, h100, varlen=True) == A.AttentionConfig(64, 16, 256, 256, 8)
    assert A.config_for(192, 128, h100, varlen=True) == A.AttentionConfig(64, 32, 256, 128, 8)
    assert A.config_for(128, 128, h100, varlen=True) == plain
    assert A.config_for(8, 8, h100).dk == 16   # the smallest tile a dot takes


def test_few_keys_take_the_short_tiling_at_head_dim_128():
    h100, a100 = Target.from_arch("sm_90a"), Target.from_arch("sm_80")
    short = A.AttentionConfig(64, 64, 128, 128, 4, 3)
    specialized = A.config_for(128, 128, h100)
    # the dense kernel: causal over up to 1024 keys (else warp-specialized)
    assert A.config_for(128, 128, h100, n_kv=1024, causal=True) == short
    assert A.config_for(96, 96, h100, n_kv=1000, causal=True) == short
    assert A.config_for(128, 128, h100, n_kv=1025, causal=True) == specialized
    assert A.config_for(128, 128, h100, n_kv=512) == specialized
    # the packed kernel (not warp-specialized): non-causal up to 1024 keys, causal up to 4096
    assert A.config_for(128, 128, h100, varlen=True, n_kv=1024) == short
    assert A.config_for(128, 128, h100, varlen=True, n_kv=4096, causal=True) == short
    assert A.config_for(128, 128, h100, varlen=True, n_kv=4097, causal=True) == A.config_for(128, 128, h100, varlen=True)
    assert A.config_for(128, 128, h100, specialize=False, n_kv=1024) == short
    # not where it was not measured: other head dims, mma.sync
    assert A.config_for(64, 64, h100, n_kv=512) == A.config_for(64, 64, h100)
    assert A.config_for(256, 256, h100, n_kv=512) == A.config_for(256, 256, h100)
    assert A.config_for(128, 128, a100, n_kv=512) == A.config_for(128, 128, a100)
    (short_launch,) = A.plan(A.describe(2, 4, 4, 1000, 1000, 128, 128), h100, causal=True)
    (long_launch,) = A.plan(A.describe(2, 4, 4, 1000, 2000, 128, 128), h100, causal=True)
    assert (short_launch.consts["BM"], short_launch.num_warps) == (64, 4)
    assert (long_launch.consts["BM"], long_launch.consts["BN"], long_launch.num_warps) == (128, 128, 8)
    assert dict(long_launch.options)["warp_specialize"] and "warp_specialize" not in dict(short_launch.options)
    (grouped,) = A.plan(A.describe(2, 4, 2, 1000, 1000, 128, 128), h100, causal=True)   # grouped heads too
    assert (grouped.consts["BM"], grouped.num_warps) == (64, 4)


def test_config_reads_the_tuning_table():
    from dataclasses import replace

    from tilec.stdlib_kernels import tuning
    h100 = Target.from_arch("sm_90a")
    saved = tuning.TABLES["sm_90"]
    tuning.TABLES["sm_90"] = replace(saved, attention_fwd=replace(saved.attention_fwd, narrow=(64, 32, 4),
                                                                  wide_v=(32, 32, 4), specialized=(128, 256, 8)))
    try:
        c128, c256 = A.config_for(128, 128, h100, varlen=True), A.config_for(256, 256, h100)
        ws = A.config_for(128, 128, h100)
    finally:
        tuning.TABLES["sm_90"] = saved
    assert (c128.bm, c128.bn, c128.num_warps, c128.dk) == (64, 32, 4, 128)
    assert (c256.bm, c256.bn, c256.num_warps, c256.dv) == (32, 32, 4, 256)
    assert (ws.bm, ws.bn, ws.warp_specialize) == (128, 256, True)
    assert A.config_for(128, 128, h100, varlen=True).bm == saved.attention_fwd.narrow[0]
    assert A.config_for(128, 128, h100).bn == saved.attention_fwd.specialized[1]


@pytest.mark.parametrize("call,err,match", [
    (lambda q, k, v: attention(q, k, v, layout="sbhd"), ValueError, "layout"),
    (lambda q, k, v: attention(q[0], k, v), ValueError, "4 dimensions"),
    (lambda q, k, v: attention(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2)), ValueError,
     "divide"),
    (lambda q, k, v: attention(q, k.astype(np.float32), v), TypeError, "dtype"),
    (lambda q, k, v: attention(q, k, v, window=(3,)), TypeError, "window"),
    (lambda q, k, v: attention(q, k, v, window=(-2, 0)), ValueError, "window"),
    (lambda q, k, v: attention(q, k, v, softcap=0.0), ValueError, "softcap"),
    (lambda q, k, v: attention(q, k, v, scale=0.0), ValueError, "scale"),
    (lambda q, k, v: attention(q, k, v, scale=-0.125), ValueError, "scale"),
    (lambda q, k, v: attention(q, k, v, scale=float("nan")), ValueError, "scale"),
    (lambda q, k, v: attention(q, k, v[:, :5]), ValueError, "agree"),
    (lambda q, k, v: attention(q, k, v, out=np.zeros((1,), np.float16)), ValueError, "shape"),
    (lambda q, k, v: attention(q[..., ::2], k[..., ::2], v[..., ::2]), ValueError, "contiguous"),
])
def test_bad_arguments_say_what_was_expected(call, err, match):
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, "bshd", 1, 4, 2, 8, 8, 16)
    with pytest.raises(err, match=match):
        call(q, k, v)


# ----------------------------------------------------------------------------- heavy-first order
import tilec as tc  # noqa: E402


@tc.kernel
def _program_blocks(out, heads, HEAVY_LAST: tc.constexpr, SECTION: tc.constexpr):
    # out[launch-order index] = (block, head, batch) of that program
    n = tc.program_id(0) + tc.num_programs(0) * (tc.program_id(1) + tc.num_programs(1) * tc.program_id(2))
    blk, h, b = A.program_block(heads, HEAVY_LAST, SECTION)
    tc.store(out.ptr + n * 3, blk)
    tc.store(out.ptr + n * 3 + 1, h)
    tc.store(out.ptr + n * 3 + 2, b)


@pytest.mark.parametrize("section", [0, 1, 2, 3, 6])
@pytest.mark.parametrize("heavy_last", [True, False])
def test_program_block_walks_sections_heaviest_first(section, heavy_last):
    blocks, heads, batch = 5, 3, 2
    grid = A.section_grid(blocks, heads, batch, section)
    out = np.full((int(np.prod(grid)), 3), -1, np.int32)
    with tc.interpret():
        _program_blocks[grid](out, heads, HEAVY_LAST=heavy_last, SECTION=section)
    triples = [tuple(t) for t in out]   # launch order
    assert sorted(triples) == sorted((m, h, b) for m in range(blocks) for h in range(heads) for b in range(batch))
    if section == 0:
        assert triples[:3] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
        return
    size = min(section, heads * batch)
    first = triples[:size]   # the first section's pairs, each at its heaviest block
    assert [t[0] for t in first] == [blocks - 1 if heavy_last else 0] * size
    assert [t[1] + heads * t[2] for t in first] == list(range(size))
    # within a section the blocks only get lighter
    steps = [t[0] for t in triples[:size * blocks]]
    assert steps == sorted(steps, reverse=heavy_last)


def test_causal_plans_walk_heaviest_first_in_l2_sized_sections():
    h200 = Target.from_arch("sm_90a")
    budget = A.tuning_for(h200).attention_fwd.section_l2_bytes
    (ln,) = A.plan(A.describe(2, 16, 16, 4096, 4096, 128, 128), h200, causal=True)
    # K and V of one head: 2 MiB per (batch, head) pair
    section = dict(ln.constexprs)["SECTION"]
    cap = min(32, budget // (4096 * 256 * 2))
    blocks = 4096 // dict(ln.constexprs)["BM"]   # (causal over 4096 keys: the short tiling's 64 rows)
    assert section == max(d for d in range(1, cap + 1) if 32 % d == 0) and ln.grid == (section, blocks, 32 // section)
    (full,) = A.plan(A.describe(2, 16, 16, 4096, 4096, 128, 128), h200)
    assert "SECTION" not in dict(full.constexprs) and full.grid == (32, 16, 2)
    # grouped-query heads keep the launch order (measured slower heaviest first: heavy_first_gqa)
    (gqa,) = A.plan(A.describe(1, 16, 4, 4096, 4096, 128, 128), h200, causal=True)
    assert "SECTION" not in dict(gqa.constexprs)
    assert A.heavy_first_section(1000, 1 << 30, h200) == 1 and A.heavy_first_section(3, 1, h200) == 3
    # a divisor of the pairs: no program of the grid idles
    assert A.heavy_first_section(36, budget // 10, h200) == 9 and A.heavy_first_section(7, budget // 5, h200) == 1
