"""mla_decode on the interpreter against float64 numpy: paged (one page per step, and rows
gathered through the table), contiguous, q_len 1-2, splits on and off, zero-length
sequences, NaN in every cache row no sequence owns; its plan; its argument errors; ptxas."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from tilec.lowering.target import find_ptxas
from tilec.stdlib_kernels import BF16Array, mla_decode
from tilec.target import Target

from launch_spy import spy_launches

M = importlib.import_module("tilec.stdlib_kernels.mla_decode")
D, DV = 576, 512
H100, A100 = Target.from_arch("sm_90a"), Target.from_arch("sm_80")
MT = importlib.import_module("tilec.stdlib_kernels.tuning").tuning_for(H100).mla_decode


def _cache(rng, lens, page, paged, dtype=np.float16):
    """(kv_cache, block_table or None); rows no sequence owns hold NaN."""
    b = len(lens)
    if not paged:
        kv = np.full((b, max(lens) + 7, 1, D), np.nan, np.float32)
        for i, n in enumerate(lens):
            kv[i, :n] = rng.standard_normal((n, 1, D))
        return kv.astype(dtype), None
    per = [-(-n // page) for n in lens]
    pool = sum(per) + 3
    perm = rng.permutation(pool).astype(np.int32)   # non-monotonic tables
    table = np.full((b, max(per) + 1), 10 ** 6, np.int32)   # entries past a sequence's pages: out of the pool
    kv = np.full((pool, page, 1, D), np.nan, np.float32)
    at = 0
    for i, n in enumerate(lens):
        table[i, :per[i]] = perm[at:at + per[i]]
        at += per[i]
        j = np.arange(n)
        kv[table[i, j // page], j % page] = rng.standard_normal((n, 1, D))
    return kv.astype(dtype), table


def _reference(q, kv, lens, table, page, scale, causal, dv=DV):
    """(out, lse): out (b, q_len, heads, dv), lse (b, heads, q_len), float64."""
    q = np.asarray(q, np.float64)
    kv = np.asarray(kv, np.float64)
    b, t, h, _ = q.shape
    out = np.zeros((b, t, h, dv))
    lse = np.full((b, h, t), -np.inf)
    for i, n in enumerate(lens):
        j = np.arange(n)
        rows = kv[i, :n, 0] if table is None else kv[table[i, j // page], j % page, 0]
        s = np.einsum("thd,kd->thk", q[i], rows) * scale
        if causal:
            s = np.where(j[None, None, :] <= (n - t + np.arange(t))[:, None, None], s, -np.inf)
        for tt in range(t):
            for hh in range(h):
                r = s[tt, hh]
                if n and np.isfinite(r).any():
                    p = np.exp(r - r.max())
                    out[i, tt, hh] = p @ rows[:, :dv] / p.sum()
                    lse[i, hh, tt] = r.max() + math.log(p.sum())
    return out, lse


@pytest.fixture(params=["wgmma", "chunks"])
def path(request, monkeypatch):
    """Both kernels on the interpreter: the wgmma kernel (host arrays plan as sm_90a does) and
    the chunks kernel (planned as for sm_80)."""
    if request.param == "chunks":
        monkeypatch.setattr(M, "target_of", lambda a: A100)
    return request.param


def _check(q, kv, lens, table, page, splits, causal=True, tol=3e-3):
    out, lse = mla_decode(q, kv, np.array(lens, np.int32), block_table=table, num_splits=splits,
                          causal=causal, return_lse=True)
    want, want_lse = _reference(q, kv, lens, table, page, 1 / math.sqrt(D), causal)
    got = np.asarray(out, np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)   # -inf where no key is seen


@pytest.mark.parametrize("page,splits", [(32, 1), (32, 3), (64, None), (16, 1), (5, 2), (1, 1)])
def test_paged(page, splits, path):
    rng = np.random.default_rng(page * 10 + (splits or 0))
    lens = [70, 33]
    kv, table = _cache(rng, lens, page, True)
    q = rng.standard_normal((2, 1, 16, D)).astype(np.float16)
    _check(q, kv, lens, table, page, splits)


@pytest.mark.parametrize("page,splits", [(64, 1), (16, 2)])
def test_first_value_half(page, splits, path):
    """head_dim_v 256: the wgmma kernel keeps one accumulator (VB = 1), the chunks kernel one
    value part."""
    rng = np.random.default_rng(90 + page)
    lens = [70, 33]
    kv, table = _cache(rng, lens, page, True)
    q = rng.standard_normal((2, 1, 16, D)).astype(np.float16)
    out, lse = mla_decode(q, kv, np.array(lens, np.int32), block_table=table, num_splits=splits, head_dim_v=256,
                          return_lse=True)
    want, want_lse = _reference(q, kv, lens, table, page, 1 / math.sqrt(D), True)
    np.testing.assert_allclose(np.asarray(out, np.float64), want[..., :256], rtol=3e-3, atol=3e-3)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("splits", [1, 2])
def test_two_new_tokens_causal_and_not(splits, path):
    rng = np.random.default_rng(11 + splits)
    lens = [45, 2]
    kv, table = _cache(rng, lens, 32, True)
    q = rng.standard_normal((2, 2, 16, D)).astype(np.float16)
    _check(q, kv, lens, table, 32, splits, causal=True)
    _check(q, kv, lens, table, 32, splits, causal=False)


@pytest.mark.parametrize("splits", [1, 4])
def test_contiguous(splits, path):
    rng = np.random.default_rng(5)
    lens = [50, 17, 64]
    kv, _ = _cache(rng, lens, 0, False)
    q = rng.standard_normal((3, 1, 16, D)).astype(np.float16)
    _check(q, kv, lens, None, 0, splits)


def test_more_rows_than_a_block(path):
    """q_len 2 x 48 heads = 96 rows: two M blocks, the second holding token 1's last heads."""
    rng = np.random.default_rng(3)
    lens = [40]
    kv, table = _cache(rng, lens, 32, True)
    q = rng.standard_normal((1, 2, 48, D)).astype(np.float16)
    _check(q, kv, lens, table, 32, 2)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("page", [16, 64])   # rows gathered; one page per step (wgmma) or two (chunks)
def test_zero_length_sequences_give_zeros(splits, page, path):
    rng = np.random.default_rng(9)
    lens = [0, 40, 0]
    kv, table = _cache(rng, lens, page, True)
    q = rng.standard_normal((3, 1, 16, D)).astype(np.float16)
    out, lse = mla_decode(q, kv, np.array(lens, np.int32), block_table=table, num_splits=splits, return_lse=True)
    out = np.asarray(out, np.float64)
    assert not np.isnan(out).any()
    assert (out[0] == 0).all() and (out[2] == 0).all() and np.isneginf(lse[[0, 2]]).all()
    assert np.abs(out[1]).max() > 0 and np.isfinite(lse[1]).all()


def test_bf16_and_scale_and_out():
    rng = np.random.default_rng(21)
    lens = [37]
    kv, table = _cache(rng, lens, 64, True, np.float32)
    q = rng.standard_normal((1, 1, 16, D)).astype(np.float32)
    qb, kvb = BF16Array(q), BF16Array(kv)
    out = BF16Array(np.zeros((1, 1, 16, DV), np.float32))
    got = mla_decode(qb, kvb, np.array(lens, np.int32), block_table=table, scale=0.07, out=out)
    assert got is out
    want, _ = _reference(np.asarray(qb), np.asarray(kvb), lens, table, 64, 0.07, True)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------- the plan
def test_plan_modes_and_blocks():
    p = M.config(4, 1, 128, 512, 4096, True, 64, H100)
    assert (p.kv_mode, p.m_blocks, p.v_blocks, p.wgmma, p.num_warps) == (M.KV_PAGE, 2, 2, True, M.WG_WARPS)
    assert M.config(4, 1, 16, 512, 4096, True, 16, H100).kv_mode == M.KV_GATHER
    assert M.config(4, 1, 16, 512, 4096, True, 128, H100).kv_mode == M.KV_PAGE    # 128 = 2 steps of 64
    assert M.config(4, 1, 16, 512, 4096, True, 96, H100).kv_mode == M.KV_GATHER   # not whole steps of 64
    assert M.config(4, 1, 16, 512, 4096, True, 96, A100).kv_mode == M.KV_PAGE     # chunks: 3 steps of 32
    assert M.config(4, 1, 16, 512, 4096, True, 1, H100).kv_mode == M.KV_GATHER
    assert M.config(4, 2, 16, 512, 4096, False, 4096, H100).kv_mode == M.KV_CONTIG
    assert M.config(4, 2, 48, 512, 4096, False, 4096, H100).m_blocks == 2
    assert M.config(4, 1, 16, 512, 4096, True, 64, H100, num_splits=5).num_splits == 5
    # the kernel: wgmma where the target has it and the head dim is MLA's 576, else chunks
    assert not M.config(4, 1, 16, 512, 4096, True, 64, A100).wgmma
    assert not M.config(4, 1, 16, 512, 4096, True, 64, H100, dim=640).wgmma
    assert M.config(4, 1, 16, 512, 4096, True, 64, A100).num_warps == M.WARPS


def test_split_rule():
    # few programs, long contexts: split until the programs fill the SMs (wgmma: one per SM,
    # its shared memory; chunks: two), rounded down
    few = M.config(1, 1, 16, 512, 8192, True, 64, H100)
    assert few.num_splits == min(H100.sm_count, MT.max_splits)     # 1 program: both value halves
    assert M.config(4, 1, 16, 512, 1 << 16, True, 64, H100).num_splits == min(H100.sm_count // 4, MT.max_splits)
    assert M.config(4, 1, 128, 512, 1 << 16, True, 64, H100).num_splits == min(H100.sm_count // 8, MT.max_splits)
    assert M.config(8, 1, 16, 512, 1 << 16, True, 64, A100).num_splits == 2 * A100.sm_count // 16
    # enough programs already: no split
    assert M.config(128, 1, 128, 512, 8192, True, 64, H100).num_splits == 1
    # a short context caps the splits: each keeps min_steps_per_split steps
    short = M.config(1, 1, 16, 512, 512, True, 64, H100)
    assert short.num_splits == 512 // (M.WG_BN * MT.min_steps_per_split)
    # the SM count enters: fewer SMs, fewer splits
    assert M.split_count(8, 1 << 16, A100) == 2 * A100.sm_count // 8
    assert M.split_count(8, 1 << 16, A100) < M.split_count(8, 1 << 16, H100) or A100.sm_count >= H100.sm_count
    for programs in (1, 3, 8, 40, 100):   # never a program past the per-SM target
        assert programs * M.split_count(programs, 1 << 20, H100, 1) <= H100.sm_count


def test_entry_point_launches_what_the_plan_says(monkeypatch):
    seen = spy_launches(monkeypatch, [M], lambda kernel, cluster, consts: (kernel.name, consts))
    rng = np.random.default_rng(4)
    lens = [300, 90]
    kv, table = _cache(rng, lens, 64, True)
    q = rng.standard_normal((2, 1, 16, D)).astype(np.float16)
    _check(q, kv, lens, table, 64, None)
    cfg = M.config(2, 1, 16, DV, table.shape[1] * 64, True, 64, H100)
    assert cfg.num_splits > 1
    (k1, c1), (k2, c2) = seen
    assert k1 == "mla_decode_kernel" and c1["SPLIT"] and c1["KV"] == M.KV_PAGE and c1["VB"] == 2
    assert k2 == "mla_combine_kernel" and c2["options"] == {"dependent_launch": True}
    seen.clear()
    mla_decode(q, kv, np.array(lens, np.int32), block_table=table, num_splits=1)
    assert [k for k, _ in seen] == ["mla_decode_kernel"] and not seen[0][1]["SPLIT"]
    seen.clear()
    monkeypatch.setattr(M, "target_of", lambda a: A100)
    mla_decode(q, kv, np.array(lens, np.int32), block_table=table, num_splits=1, head_dim_v=256)
    assert [k for k, _ in seen] == ["mla_chunks_kernel"] and seen[0][1]["VB"] == 1


def test_plan_grids_warps_and_partials():
    # the plan alone (no array): the split launches' grids, warps and the partials they share
    cfg = M.config(2, 1, 16, DV, 4096, True, 64, H100)
    first, combine = M.plan(cfg, 2, 16, DV, lse=True, causal=True)
    # one program per M block, both value halves (8 warps)
    assert first.grid == (cfg.m_blocks, cfg.num_splits, 2) and first.num_warps == M.WG_WARPS == 8
    assert first.consts["VB"] == 2
    assert [t.name for t in first.temps] == ["o_part", "lse_part"] and first.temps == combine.temps
    assert first.temps[0].shape == (2, cfg.num_splits, 16, DV)
    assert combine.grid == (16, 2) and combine.consts["LSE"]   # one merge program per row
    assert combine.consts["SPLITS"] >= cfg.num_splits and combine.consts["CHUNK"] * DV <= 32 * 128
    (only,) = M.plan(M.config(2, 1, 16, 256, 4096, True, 64, H100, num_splits=1), 2, 16, 256, lse=False,
                     causal=True)   # head_dim_v 256: the first half only
    assert not only.temps and not only.consts["SPLIT"] and only.consts["VB"] == 1
    chunks = M.config(2, 1, 16, DV, 4096, True, 64, A100)
    first, combine = M.plan(chunks, 2, 16, DV, lse=True, causal=True)
    assert first.kernel is M.mla_chunks_kernel and first.grid == (chunks.m_blocks * 2, chunks.num_splits, 2)


# ----------------------------------------------------------------------------- argument errors
def _args(rng=None):
    rng = rng or np.random.default_rng(0)
    kv, table = _cache(rng, [10, 20], 16, True)
    q = rng.standard_normal((2, 1, 16, D)).astype(np.float16)
    return q, kv, np.array([10, 20], np.int32), table


@pytest.mark.parametrize("change,exc,word", [
    (lambda a: dict(a, q=a["q"].astype(np.float32)), TypeError, "q"),
    (lambda a: dict(a, kv_cache=a["kv_cache"].astype(np.float32)), TypeError, "kv_cache"),
    (lambda a: dict(a, q=a["q"][..., :512]), ValueError, "kv_cache"),
    (lambda a: dict(a, q=a["q"][0]), ValueError, "q"),
    (lambda a: dict(a, cache_seqlens=a["cache_seqlens"].astype(np.int64)), TypeError, "cache_seqlens"),
    (lambda a: dict(a, cache_seqlens=np.array([10], np.int32)), ValueError, "cache_seqlens"),
    (lambda a: dict(a, cache_seqlens=np.array([10, 10 ** 4], np.int32)), ValueError, "cache_seqlens"),
    (lambda a: dict(a, cache_seqlens=np.array([-1, 3], np.int32)), ValueError, "cache_seqlens"),
    (lambda a: dict(a, block_table=a["block_table"].astype(np.int64)), TypeError, "block_table"),
    (lambda a: dict(a, block_table=a["block_table"][:1]), ValueError, "block_table"),
    (lambda a: dict(a, block_table=np.where(np.arange(a["block_table"].shape[1]) == 0, 999,
                                            a["block_table"]).astype(np.int32)), ValueError, "block_table"),
    (lambda a: dict(a, head_dim_v=384), ValueError, "head_dim_v"),
    (lambda a: dict(a, num_splits=0), ValueError, "num_splits"),
    (lambda a: dict(a, out=np.zeros((2, 1, 16, 256), np.float16)), ValueError, "out"),
])
def test_errors_name_the_argument(change, exc, word):
    q, kv, lens, table = _args()
    a = change(dict(q=q, kv_cache=kv, cache_seqlens=lens, block_table=table))
    q, kv, lens = a.pop("q"), a.pop("kv_cache"), a.pop("cache_seqlens")
    with pytest.raises(exc, match=word):
        mla_decode(q, kv, lens, **a)


def test_contiguous_cache_needs_the_batch():
    q, kv, lens, _ = _args()
    with pytest.raises(ValueError, match="kv_cache"):
        mla_decode(q, kv[:3], lens)


# ----------------------------------------------------------------------------- PTX
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name,sig", list(M.EXTRA_SIGNATURES), ids=lambda x: x if isinstance(x, str) and len(x) < 30
                         else None)
def test_extra_signatures_assemble_without_spills(arch, name, sig):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    kernel = getattr(M, name)
    compiled = compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch=arch, **M.OPTIONS[name]),
                              use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0 and not report["warnings"], report


@pytest.mark.slow
@pytest.mark.parametrize("name,sig,warps", list(M.SM90_SIGNATURES), ids=lambda x: x if isinstance(x, str) and len(x) < 30
                         else None)
def test_wgmma_kernel_assembles_clean(name, sig, warps):
    # sm_90a only: 8 warps, no spill, no ptxas warning, no serialized wgmma; S on m64n32k16
    # (the two warpgroups split the 64 keys), each value half's P V on m64n128k16, the
    # step's three tiles staged by a 2-slot cp.async ring, within sm_90a's shared memory
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    from ptxas_checks import assert_assembles_clean
    kernel = getattr(M, name)
    assert warps == M.OPTIONS[name]["num_warps"] == 8
    compiled = compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch="sm_90a", **M.OPTIONS[name]),
                              use_cache=False)
    if find_ptxas():
        assert_assembles_clean(compiled.metadata["ptxas"])
    assert compiled.metadata["shared"] <= 232448, compiled.metadata["shared"]
    dots = [r.message for r in compiled.remarks if r.kind == "dot"]
    halves = 2 if "VB=2" in sig else 1
    assert sum("wgmma m64n32k16 (4 warps along M, 2 along N)" in d for d in dots) == 3, dots
    assert sum("wgmma m64n128k16 (4 warps along M, 2 along N)" in d for d in dots) == halves, dots
    assert len(dots) == 3 + halves, dots
    loops = [r.message for r in compiled.remarks if r.kind == "loop"]
    assert any("3 tc.dot operand load(s) go through a cp.async ring of 2 stages" in m for m in loops), loops
