"""stdlib attention_decode on the interpreter against float64 numpy: contiguous and paged
caches (random, non-monotonic block tables), GQA and MHA, q_len 1-4, splits forced on and
off, zero-length sequences, k_new/v_new appends read back, windows, softcap; its plan (the
split choice, pure); its argument errors; ptxas for the shipped configurations."""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.stdlib_kernels import BF16Array, attention_decode
from tilec.stdlib_kernels.launches import spec
from tilec.target import Target
import tilec as tc

from attention_ref import attention_ref
from ptxas_checks import assert_assembles_clean

D = importlib.import_module("tilec.stdlib_kernels.attention_decode")
T = importlib.import_module("tilec.stdlib_kernels.tuning")
H100, A100 = Target.from_arch("sm_90a"), Target.from_arch("sm_80")
DT = T.tuning_for(H100).decode   # the decode plan's numbers on H100 (tuning.DecodeTuning)


def decode_ref(q, k_cache, v_cache, lens, table=None, **kw):
    """(out, lse) in float64: each sequence's first lens[b] cached keys through attention_ref."""
    q, kc, vc = (np.asarray(np.asarray(t), dtype=np.float64) for t in (q, k_cache, v_cache))
    outs, lses = [], []
    for b in range(q.shape[0]):
        j = np.arange(int(lens[b]))
        if table is None:
            k, v = kc[b, j], vc[b, j]
        else:
            page = kc.shape[1]
            k, v = kc[table[b, j // page], j % page], vc[table[b, j // page], j % page]
        o, lse = attention_ref(q[b:b + 1], k[None], v[None], **kw)
        outs.append(o)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


def paged(rng, batch, capacity, page, kv_heads, dim, spare=3, dtype=np.float16):
    """Random pages for `capacity` keys per sequence, a random permutation of the pool as
    the block table (non-monotonic), a few pages no sequence uses."""
    blocks = -(-capacity // page)
    pool = batch * blocks + spare
    kc = rng.standard_normal((pool, page, kv_heads, dim)).astype(dtype)
    vc = rng.standard_normal((pool, page, kv_heads, dim)).astype(dtype)
    table = rng.permutation(pool)[:batch * blocks].reshape(batch, blocks).astype(np.int32)
    return kc, vc, table


def nan_cache(rng, capacity, kv_heads, dim, lens, dtype=np.float16):
    """Contiguous K and V caches (batch, capacity, kv_heads, dim): each sequence's first
    lens[b] rows random, every row past them NaN (an unwritten cache row may hold anything)."""
    kc = np.full((len(lens), capacity, kv_heads, dim), np.nan, dtype)
    vc = np.full((len(lens), capacity, kv_heads, dim), np.nan, dtype)
    for b, n in enumerate(lens):
        kc[b, :n] = rng.standard_normal((n, kv_heads, dim))
        vc[b, :n] = rng.standard_normal((n, kv_heads, dim))
    return kc, vc


def check(got, want, tol):
    got, want = np.asarray(np.asarray(got), dtype=np.float64), np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=tol, rtol=0)


def check_lse(got, want):
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)


# (page size or 0 for contiguous, heads, kv_heads, q_len, forced splits)
CASES = [(0, 8, 2, 1, None), (0, 8, 2, 1, 3), (0, 4, 4, 2, 1), (0, 8, 2, 4, 4), (1, 8, 2, 1, None),
         (3, 8, 2, 3, 2), (16, 8, 2, 1, 1), (16, 4, 4, 2, 5), (32, 8, 2, 4, None), (64, 8, 2, 1, 3),
         (64, 2, 2, 1, 1)]


@pytest.mark.parametrize("page,heads,kv_heads,q_len,splits", CASES)
def test_decode_matches_float64(page, heads, kv_heads, q_len, splits):
    rng = np.random.default_rng(page * 100 + heads * 10 + q_len)
    batch, dim, capacity = 4, 64, 150
    lens = np.array([150, 0, 77, 33], np.int32)    # full, empty, not multiples of pages or tiles
    q = rng.standard_normal((batch, q_len, heads, dim)).astype(np.float16)
    if page:
        kc, vc, table = paged(rng, batch, capacity, page, kv_heads, dim)
    else:
        kc = rng.standard_normal((batch, capacity, kv_heads, dim)).astype(np.float16)
        vc = rng.standard_normal((batch, capacity, kv_heads, dim)).astype(np.float16)
        table = None
    o, lse = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits, return_lse=True)
    want_o, want_lse = decode_ref(q, kc, vc, lens, table, causal=True)
    assert o.dtype == np.float16 and lse.shape == (batch, heads, q_len)
    check(o, want_o, 3e-3)
    check_lse(lse, want_lse)
    assert not np.asarray(o)[1].any()           # the empty sequence: zeros, lse -inf
    assert np.isneginf(lse[1]).all()


def test_unwritten_cache_rows_do_not_leak():
    # rows past a sequence (and pages it does not use) hold NaN: nothing of them reaches the output
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 2, 4, 32)).astype(np.float16)
    lens = np.array([45, 70], np.int32)
    kc, vc = nan_cache(rng, 100, 2, 32, lens)
    for splits in (1, 2):
        o = attention_decode(q, kc, vc, lens, num_splits=splits)
        check(o, decode_ref(q, kc, vc, lens, causal=True)[0], 3e-3)


@pytest.mark.parametrize("page,dim", [(1, 32), (2, 48), (8, 32), (16, 40), (48, 32), (32, 32), (64, 48)])
def test_paged_tiles_read_only_the_sequence(page, dim):
    # pages smaller than the 32-key tile, or not a multiple of it, are gathered key by key,
    # larger ones a tile per page: the interior tiles without a mask, the edges masked. Every
    # pool row no sequence holds is NaN (rows past each sequence in its last page, pages no
    # sequence uses): none may be read.
    rng = np.random.default_rng(19 + page)
    batch, heads, kv_heads, q_len, capacity = 3, 4, 2, 2, 200
    lens = np.array([200, 77, 33], np.int32)
    q = rng.standard_normal((batch, q_len, heads, dim)).astype(np.float16)
    kc, vc, table = paged(rng, batch, capacity, page, kv_heads, dim, spare=2)
    held = np.zeros(kc.shape[:2], bool)
    for b, n in enumerate(lens):
        j = np.arange(n)
        held[table[b, j // page], j % page] = True
    kc[~held] = np.nan
    vc[~held] = np.nan
    for kw in (dict(), dict(window=(70, -1))):
        for splits in (1, 3):
            o, lse = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits, return_lse=True,
                                      **kw)
            want_o, want_lse = decode_ref(q, kc, vc, lens, table, causal=True, **kw)
            check(o, want_o, 3e-3)
            check_lse(lse, want_lse)


@pytest.mark.parametrize("kw", [dict(window=(20, -1)), dict(causal=False), dict(causal=False, window=(10, 1)),
                                dict(softcap=2.0, scale=0.4), dict(window=(0, 0))],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("page", [0, 16])
def test_windows_softcap_and_scale(kw, page):
    rng = np.random.default_rng(7 + page)
    batch, heads, kv_heads, q_len, dim, capacity = 3, 4, 2, 3, 64, 130
    lens = np.array([130, 2, 61], np.int32)      # 2 < q_len: the first tokens see no key when causal
    q = rng.standard_normal((batch, q_len, heads, dim)).astype(np.float16)
    if page:
        kc, vc, table = paged(rng, batch, capacity, page, kv_heads, dim)
    else:
        kc = rng.standard_normal((batch, capacity, kv_heads, dim)).astype(np.float16)
        vc = rng.standard_normal((batch, capacity, kv_heads, dim)).astype(np.float16)
        table = None
    ref_kw = dict(kw, causal=kw.get("causal", True))
    for splits in (1, 3):
        o, lse = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits, return_lse=True, **kw)
        want_o, want_lse = decode_ref(q, kc, vc, lens, table, **ref_kw)
        check(o, want_o, 3e-3)
        check_lse(lse, want_lse)


@pytest.mark.parametrize("page", [0, 3, 16])
def test_k_new_appends_then_attends(page):
    rng = np.random.default_rng(11 + page)
    batch, heads, kv_heads, q_len, dim, capacity = 3, 8, 2, 2, 32, 90
    lens = np.array([40, 0, 86], np.int32)       # the last fills the cache to its capacity
    q = rng.standard_normal((batch, q_len, heads, dim)).astype(np.float16)
    k_new = rng.standard_normal((batch, 4, kv_heads, dim)).astype(np.float16)
    v_new = rng.standard_normal((batch, 4, kv_heads, dim)).astype(np.float16)
    if page:
        kc, vc, table = paged(rng, batch, capacity, page, kv_heads, dim)
    else:
        kc = rng.standard_normal((batch, capacity, kv_heads, dim)).astype(np.float16)
        vc = rng.standard_normal((batch, capacity, kv_heads, dim)).astype(np.float16)
        table = None
    before_k, before_v = kc.copy(), vc.copy()
    o, lse = attention_decode(q, kc, vc, lens, block_table=table, k_new=k_new, v_new=v_new, return_lse=True)
    # the cache read back: the new rows at lens[b] ..., everything else untouched
    want_k, want_v = before_k.copy(), before_v.copy()
    for b in range(batch):
        for t in range(4):
            pos = lens[b] + t
            at = (table[b, pos // page], pos % page) if page else (b, pos)
            want_k[at], want_v[at] = k_new[b, t], v_new[b, t]
    assert np.array_equal(kc, want_k) and np.array_equal(vc, want_v)
    want_o, want_lse = decode_ref(q, kc, vc, lens + 4, table, causal=True)
    check(o, want_o, 3e-3)
    check_lse(lse, want_lse)


def test_bf16_and_head_dim_not_a_tile():
    rng = np.random.default_rng(3)
    batch, heads, kv_heads, q_len, dim = 2, 4, 1, 2, 48
    lens = np.array([50, 19], np.int32)
    q = BF16Array(rng.standard_normal((batch, q_len, heads, dim)))
    kc, vc, table = paged(rng, batch, 50, 16, kv_heads, dim, dtype=np.float32)
    kc, vc = BF16Array(kc), BF16Array(vc)
    for splits in (1, 2):
        o = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits)
        assert isinstance(o, BF16Array) and o.shape == (batch, q_len, heads, dim)
        check(o, decode_ref(q, kc, vc, lens, table, causal=True)[0], 2e-2)


def test_out_is_written():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 1, 2, 16)).astype(np.float16)
    kc = rng.standard_normal((1, 20, 2, 16)).astype(np.float16)
    vc = rng.standard_normal((1, 20, 2, 16)).astype(np.float16)
    out = np.zeros_like(q)
    got = attention_decode(q, kc, vc, np.array([20], np.int32), out=out)
    assert got is out
    check(out, decode_ref(q, kc, vc, [20], causal=True)[0], 3e-3)


# ----------------------------------------------------------------------------- plan
def _plan(batch, q_len, heads, kv_heads, context, page=0, n_new=0, splits=None, target=H100, dim=128):
    q = spec((batch, q_len, heads, dim), tc.bfloat16)
    k = spec((batch if not page else 1000, page or context, kv_heads, dim), tc.bfloat16)
    return D.plan(q, k, page, context, n_new, splits, False, False, target)


def test_plan_splits_few_sequences_over_the_sms():
    lns = _plan(1, 1, 32, 8, 131072)
    assert [ln.schedule for ln in lns] == [D.SPLIT, D.SPLIT]
    main, merge = lns
    assert main.kernel is D.decode_kernel and merge.kernel is D.decode_combine_kernel
    splits = main.grid[1]
    assert main.grid == (8, splits, 1)
    # as many as split_waves programs per SM hold: 8 sequences x heads, 132 SMs
    assert splits == DT.split_waves * H100.sm_count // 8
    assert dict(merge.options) == {"dependent_launch": True}
    assert merge.consts["SPLITS"] == D.next_pow2(splits) and main.consts["SPLIT"] is True
    assert merge.grid == (8, 4)            # one merge program per query row: 4 heads x 1 token
    assert merge.consts["CHUNK"] == 32     # 33 splits: two (32, 128) chunks


def test_split_count_never_spills_into_another_round():
    # programs x splits stay within split_waves per SM (a program past them costs a round)
    for programs in (1, 7, 8, 32, 64, 100):
        n = D.split_count(programs, 1 << 20, H100)
        assert n * programs <= DT.split_waves * H100.sm_count
        assert (n + 1) * programs > DT.split_waves * H100.sm_count or n == DT.max_splits


def test_plan_keeps_one_pass_when_the_programs_fill_the_gpu():
    lns = _plan(64, 1, 32, 8, 4096)        # 512 programs >= 132 SMs
    assert [ln.schedule for ln in lns] == [D.ONE_PASS]
    assert lns[0].consts["SPLIT"] is False and lns[0].grid == (512, 1, 1)
    # 60 programs split: in 4 on an A100 (108 SMs), 5 on an H100 (132)
    a, h = _plan(15, 1, 16, 4, 8192, target=A100)[0], _plan(15, 1, 16, 4, 8192)[0]
    assert 1 < a.grid[1] < h.grid[1]


def test_plan_short_contexts_split_no_finer_than_min_tiles():
    lns = _plan(1, 1, 8, 8, 1024)
    tiles = 1024 // DT.keys_per_step
    assert lns[0].grid[1] == tiles // DT.min_split_tiles
    assert [ln.schedule for ln in _plan(1, 1, 8, 8, 4 * DT.keys_per_step)] == [D.ONE_PASS]   # 4 tiles: one split


def test_plan_forced_splits_and_rows():
    assert _plan(1, 1, 8, 8, 4096, splits=1)[0].schedule == D.ONE_PASS
    lns = _plan(64, 1, 8, 8, 4096, splits=6)
    assert lns[0].grid[1] == 6 and lns[1].schedule == D.SPLIT
    assert _plan(1, 1, 8, 8, 2 * DT.keys_per_step, splits=50)[0].grid[1] == 2      # no more splits than tiles
    # GQA 8 x q_len 16 = 128 rows: two 64-row blocks per kv head
    ln = _plan(2, 16, 32, 4, 4096, splits=1)[0]
    assert ln.grid == (8, 1, 2) and ln.consts["BM"] == 64 and ln.consts["GROUP"] == 8
    assert ln.consts["BM"] == 64 and ln.num_warps == 8
    assert _plan(2, 1, 4, 4, 4096, splits=1)[0].consts["BM"] == 16   # MHA: one row, padded to 16


def test_plan_appends_first_and_pages():
    lns = _plan(4, 2, 8, 2, 4096, page=16, n_new=2, splits=1)
    assert [ln.schedule for ln in lns] == [D.APPEND, D.ONE_PASS]
    assert lns[0].kernel is D.decode_append_kernel and lns[0].grid == (4, 2) and lns[0].consts["PAGE"] == 16
    assert lns[1].consts["PAGE"] == 16


def test_config_for():
    assert D.config_for(4, 1, 128) == D.DecodeConfig(16, 64, 128, 8, 1)
    assert D.config_for(8, 4, 128) == D.DecodeConfig(32, 64, 128, 8, 1)
    assert D.config_for(5, 16, 96) == D.DecodeConfig(64, 64, 128, 8, 2)
    assert D.config_for(4, 4, 256) == D.DecodeConfig(16, 64, 256, 8, 1)
    assert D.config_for(8, 8, 256).bm == 32


# ----------------------------------------------------------------------------- errors
def _args(rng=None, page=0):
    rng = rng or np.random.default_rng(0)
    q = rng.standard_normal((2, 1, 4, 16)).astype(np.float16)
    if page:
        kc, vc, table = paged(rng, 2, 40, page, 2, 16)
    else:
        kc = rng.standard_normal((2, 40, 2, 16)).astype(np.float16)
        vc = rng.standard_normal((2, 40, 2, 16)).astype(np.float16)
        table = None
    return q, kc, vc, np.array([10, 40], np.int32), table


def test_errors_name_the_argument():
    q, kc, vc, lens, _ = _args()
    with pytest.raises(ValueError, match="cache_seqlens"):
        attention_decode(q, kc, vc, np.array([10, 41], np.int32))
    with pytest.raises(ValueError, match="cache_seqlens"):
        attention_decode(q, kc, vc, np.array([-1, 4], np.int32))
    with pytest.raises(ValueError, match="cache_seqlens"):   # the append would pass the end
        attention_decode(q, kc, vc, lens, k_new=kc[:, :1], v_new=vc[:, :1])
    with pytest.raises(TypeError, match="cache_seqlens"):
        attention_decode(q, kc, vc, lens.astype(np.int64))
    with pytest.raises(ValueError, match="cache_seqlens"):
        attention_decode(q, kc, vc, lens[:1])
    with pytest.raises(TypeError, match="q"):
        attention_decode(q.astype(np.float32), kc, vc, lens)
    with pytest.raises(TypeError, match="k_cache"):
        attention_decode(q, kc.astype(np.float32), vc, lens)
    with pytest.raises(ValueError, match="q_len"):
        attention_decode(np.zeros((2, 17, 4, 16), np.float16), kc, vc, lens)
    with pytest.raises(ValueError, match="kv heads"):
        attention_decode(np.zeros((2, 1, 3, 16), np.float16), kc, vc, lens)
    with pytest.raises(ValueError, match="head dim"):
        attention_decode(np.zeros((2, 1, 4, 32), np.float16), kc, vc, lens)
    with pytest.raises(ValueError, match="v_cache"):
        attention_decode(q, kc, vc[:, :30], lens)
    with pytest.raises(ValueError, match="k_new and v_new"):
        attention_decode(q, kc, vc, lens, k_new=kc[:, :1])
    with pytest.raises(ValueError, match="num_splits"):
        attention_decode(q, kc, vc, lens, num_splits=0)
    with pytest.raises(ValueError, match="softcap"):
        attention_decode(q, kc, vc, lens, softcap=-1.0)
    with pytest.raises(ValueError, match="window"):
        attention_decode(q, kc, vc, lens, window=(-2, 0))
    with pytest.raises(ValueError, match="k_cache"):          # a contiguous cache of another batch
        attention_decode(q, kc[:1], vc[:1], lens)


def test_block_table_errors():
    q, kc, vc, lens, table = _args(page=16)
    bad = table.copy()
    bad[1, 2] = kc.shape[0]                                   # a page past the pool, used by sequence 1
    with pytest.raises(ValueError, match=r"block_table\[1, 2\]"):
        attention_decode(q, kc, vc, lens, block_table=bad)
    bad[1, 2] = -1
    with pytest.raises(ValueError, match="block_table"):
        attention_decode(q, kc, vc, lens, block_table=bad)
    unused = table.copy()
    unused[0, 2] = -1                                         # sequence 0 holds 10 keys: page 2 is not read
    attention_decode(q, kc, vc, lens, block_table=unused)
    with pytest.raises(ValueError, match="cache_seqlens"):    # 3 pages of 16 cover 48 keys
        attention_decode(q, kc, vc, np.array([10, 49], np.int32), block_table=table)
    with pytest.raises(TypeError, match="block_table"):
        attention_decode(q, kc, vc, lens, block_table=table.astype(np.int64))
    with pytest.raises(ValueError, match="block_table"):
        attention_decode(q, kc, vc, lens, block_table=table[:1])
    with pytest.raises(ValueError, match="page size"):
        big = np.zeros((2, 257, 2, 16), np.float16)
        attention_decode(q, big, big, lens, block_table=table)


# ----------------------------------------------------------------------------- PTX
def _warps(name, sig):
    return D.OPTIONS[name]["num_warps"]


def _options(name, sig):
    """The options the plan launches this signature with."""
    opts = {"num_warps": _warps(name, sig), "fast_math": True}
    if name == "decode_kernel":
        opts.update(D.decode_options(int(re.search(r"BM=(\d+)", sig).group(1))))
    if name == "decode_combine_kernel":
        opts["dependent_launch"] = True
    return opts


def test_options_are_the_plans():
    ln = _plan(1, 1, 32, 8, 131072)
    assert ln[0].num_warps == D.OPTIONS["decode_kernel"]["num_warps"]
    assert ln[1].num_warps == _warps("decode_combine_kernel", D.SIGNATURES["decode_combine_kernel"])
    assert _plan(1, 1, 8, 8, 4096, n_new=1)[0].num_warps == D.OPTIONS["decode_append_kernel"]["num_warps"]
    assert dict(ln[0].options) == {"min_programs_per_sm": 2, "num_stages": 2}        # 16 rows
    assert dict(_plan(2, 16, 32, 4, 4096, splits=1)[0].options) == {}              # 64 rows: no floor
    for name, sig in D.SIGNATURES.items():
        assert _options(name, sig) == D.OPTIONS[name], name


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name,sig", D.EXTRA_SIGNATURES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(D.EXTRA_SIGNATURES)])
def test_extra_signatures_assemble_without_spills(name, sig, arch):
    # SIGNATURES are assembled by tests/test_ptxas.py; these are the plan's other configurations.
    kernel = getattr(D, name)
    opts = _options(name, sig)
    compiled = compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch=arch, **opts), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert_assembles_clean(report)


def test_large_pages_hold_many_tiles():
    # pages of 256 keys: 8 tiles of 32 per page, the tile's offset inside its page
    rng = np.random.default_rng(13)
    batch, heads, kv_heads, dim = 2, 4, 2, 32
    kc, vc, table = paged(rng, batch, 700, 256, kv_heads, dim, spare=1)
    lens = np.array([700, 300], np.int32)
    q = rng.standard_normal((batch, 2, heads, dim)).astype(np.float16)
    for splits in (1, 4):
        o, lse = attention_decode(q, kc, vc, lens, block_table=table, num_splits=splits, return_lse=True)
        want_o, want_lse = decode_ref(q, kc, vc, lens, table, causal=True)
        check(o, want_o, 3e-3)
        check_lse(lse, want_lse)


@pytest.mark.parametrize("name,sig", list(D.SIGNATURES.items()) + D.EXTRA_SIGNATURES,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(list(D.SIGNATURES.items()) + D.EXTRA_SIGNATURES)])
def test_kernel_ir_round_trips(name, sig):
    from tilec.ir import parse, print_module, verify
    k = getattr(D, name)
    module = k.ir(k.specialization(sig))
    assert verify(parse(print_module(module))) == module


@pytest.mark.parametrize("bn", [16, 32])
def test_other_keys_per_step_give_the_same_attention(bn, monkeypatch):
    # DecodeTuning.keys_per_step (what bench/decode.py --bn times): contiguous and paged
    # caches, split and not, NaN past every sequence, at steps other than the shipped 64
    import dataclasses
    table = T.TABLES["sm_90"]
    monkeypatch.setitem(T.TABLES, "sm_90", dataclasses.replace(
        table, decode=dataclasses.replace(table.decode, keys_per_step=bn)))
    assert D.config_for(4, 1, 32).bn == bn and D.config_for(4, 1, 32, H100).bn == bn
    rng = np.random.default_rng(bn)
    q = rng.standard_normal((2, 1, 8, 32)).astype(np.float16)
    lens = np.array([101, 150], np.int32)
    kc, vc = nan_cache(rng, 150, 2, 32, lens)
    want = decode_ref(q, kc, vc, lens, causal=True)[0]
    for splits in (1, 3):
        check(attention_decode(q, kc, vc, lens, num_splits=splits), want, 3e-3)
    kp, vp, table = paged(rng, 2, 150, 16, 2, 32)
    lens_p = np.array([77, 140], np.int32)
    o = attention_decode(q, kp, vp, lens_p, block_table=table, num_splits=2)
    check(o, decode_ref(q, kp, vp, lens_p, table, causal=True)[0], 3e-3)


@pytest.mark.slow
@pytest.mark.parametrize("page,split", [(0, True), (0, False), (16, True), (64, False)])
def test_sixteen_row_kernels_keep_two_programs_per_sm(page, split):
    # the plan's floor of two programs per SM (decode_options) holds without spills for the
    # GQA-4 configurations, contiguous included: with 4-D view loads the contiguous split
    # kernel took 171 registers, the compiler dropped the floor and one program ran per SM
    sig = D._decode_sig("bf16", page, split, 4, 1, 16, D.config_for(4, 1, 128).bn)
    compiled = compile_kernel(D.decode_kernel, parse_signature(D.decode_kernel, sig),
                              CompileOptions(arch="sm_90a", **_options("decode_kernel", sig)), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["registers"] <= 128 and report["spill_stores"] == 0, report
    assert ".minnctapersm 2" in compiled.asm["ptx"]
