"""sample on the interpreter: the documented Philox/Gumbel stream, greedy and top_k=1 as argmax,
the top-k and top-p sets, frequencies against the (filtered) softmax, plans and bad arguments."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import tilec as tc
from tilec.stdlib_kernels import BF16Array
from tilec.stdlib_kernels.launches import spec
from tilec.stdlib_kernels.schedules import CANDIDATES, LOOPED, MERGE, ONE_TILE, SPLIT

S = importlib.import_module("tilec.stdlib_kernels.sampling")   # the package attribute is the function
sample = S.sample
H100 = tc.Target.from_arch("sm_90a")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from philox_ref import philox4x32_10  # noqa: E402


def _host(v: np.ndarray, dtype: str):
    return BF16Array(v) if dtype == "bf16" else v.astype({"f32": np.float32, "f16": np.float16}[dtype])


def _f64(a) -> np.ndarray:
    return np.asarray(np.asarray(a), dtype=np.float64)


def gumbel_ref(seed: int, offset: int, n_rows: int, n_cols: int) -> np.ndarray:
    """The module doc's noise, float64: token i of row r reads word 0 of Philox under key = the
    seed, counter (i, r, offset lo, offset hi); v = (top 23 bits + 1/2) / 2**23, g = -log(-log(1 - v))."""
    i = np.broadcast_to(np.arange(n_cols, dtype=np.uint64), (n_rows, n_cols))
    r = np.broadcast_to(np.arange(n_rows, dtype=np.uint64)[:, None], (n_rows, n_cols))
    s, o = seed & (2 ** 64 - 1), offset & (2 ** 64 - 1)
    w = philox4x32_10(i, r, np.full_like(i, o & 0xFFFFFFFF), np.full_like(i, o >> 32), s & 0xFFFFFFFF, s >> 32)[0]
    v = ((w >> np.uint32(9)).astype(np.float64) + 0.5) * 2.0 ** -23
    return -np.log(-np.log1p(-v))


def nucleus64(z: np.ndarray, top_p: float) -> np.ndarray:
    """The nucleus per row in float64: p_i with the mass of the probabilities strictly above it < top_p."""
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    above = (p[:, None, :] * (p[:, None, :] > p[:, :, None])).sum(-1)
    return above, p


def _logits(rng, rows, n, dtype="f32", scale=3.0):
    return _host(rng.standard_normal((rows, n)) * scale, dtype)


# ----------------------------------------------------------------------------- the stream
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("n", [1, 37, 5000])
def test_tokens_are_the_documented_gumbel_argmax(dtype, n):
    rng = np.random.default_rng(n)
    x = _logits(rng, 6, n, dtype)
    temperature, seed, offset = 0.7, 2 ** 40 + 11, 3
    got = np.asarray(sample(x, temperature=temperature, seed=seed, offset=offset))
    score = _f64(x) / temperature + gumbel_ref(seed, offset, 6, n)
    want = score.argmax(-1)
    top2 = np.sort(score, -1)[:, -2:] if n > 1 else None
    for r in range(6):
        if n == 1 or top2[r, 1] - top2[r, 0] > 1e-3:   # f32 rounding may swap near ties only
            assert got[r] == want[r], (r, got[r], want[r])


def test_same_seed_same_tokens_other_offset_other_tokens():
    rng = np.random.default_rng(0)
    x = _logits(rng, 64, 100, scale=0.5)
    a = sample(x, seed=7)
    np.testing.assert_array_equal(a, sample(x, seed=7))
    np.testing.assert_array_equal(a, sample(x, seed=7, offset=0))
    assert (a != sample(x, seed=7, offset=1)).sum() > 32
    assert (a != sample(x, seed=8)).sum() > 32
    # negative and 64-bit seeds are the same 64 bits
    np.testing.assert_array_equal(sample(x, seed=-1), sample(x, seed=2 ** 64 - 1))


def test_top_k_of_the_whole_row_is_no_top_k():
    # the noise belongs to (row, token): the candidates' draw is the row's
    rng = np.random.default_rng(1)
    x = _logits(rng, 16, 300)
    np.testing.assert_array_equal(sample(x, top_k=300, seed=5, offset=9), sample(x, seed=5, offset=9))
    np.testing.assert_array_equal(sample(x, top_k=300, top_p=0.6, seed=5), sample(x, top_p=0.6, seed=5))


# ----------------------------------------------------------------------------- greedy
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_greedy_and_top_k_one_are_argmax(dtype):
    rng = np.random.default_rng(2)
    x = _logits(rng, 9, 4099, dtype)
    want = _f64(x).argmax(-1)
    np.testing.assert_array_equal(sample(x, temperature=0.0, seed=0), want)
    np.testing.assert_array_equal(sample(x, temperature=0.0, top_k=5, top_p=0.1, seed=3), want)
    np.testing.assert_array_equal(sample(x, top_k=1, seed=1), want)
    np.testing.assert_array_equal(sample(x, top_k=1, temperature=2.0, top_p=0.3, seed=1), want)
    np.testing.assert_array_equal(sample(x, temperature=1e-300, seed=1), want)   # 1 / t past f32: greedy


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_argmax(dtype):
    rng = np.random.default_rng(9)
    x = _logits(rng, 5, 20000, dtype)   # few long rows: chunks merged
    want = _f64(x).argmax(-1)
    np.testing.assert_array_equal(S.argmax(x), want)
    got = S.argmax(x, keepdim=True)
    assert got.shape == (5, 1) and got.dtype == np.int64
    np.testing.assert_array_equal(got[:, 0], want)
    y = np.array([[1.0, np.nan, 3.0, np.nan], [-np.inf, -np.inf, -np.inf, -np.inf]], np.float32)
    assert S.argmax(y).tolist() == [1, 0]   # the first NaN, as numpy and torch
    with pytest.raises(ValueError, match="only the last dimension"):
        S.argmax(np.zeros((2, 3), np.float32), dim=0)
    with pytest.raises(TypeError, match="keepdim must be a bool"):
        S.argmax(np.zeros((2, 3), np.float32), keepdim=1)
    with pytest.raises(ValueError, match="empty"):
        S.argmax(np.zeros((2, 0), np.float32))


def test_greedy_ties_take_the_first_index():
    x = np.zeros((3, 5000), np.float32)
    x[0, [4000, 17, 4500]] = 2.0
    x[1, :] = -np.inf
    x[1, [4097, 4096]] = 1.0
    x[2, :] = 1.0
    assert np.asarray(sample(x, temperature=0.0, seed=0)).tolist() == [17, 4096, 0]
    assert np.asarray(sample(x, top_k=1, seed=0)).tolist() == [17, 4096, 0]


def test_minus_infinity_logits_are_never_drawn():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((200, 50)).astype(np.float32)
    x[:, ::2] = -np.inf
    for kw in ({}, {"top_p": 0.9}, {"top_k": 10}):
        got = np.asarray(sample(x, seed=4, **kw))
        assert (got % 2 == 1).all(), kw


# ----------------------------------------------------------------------------- the filters
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_tokens_are_in_the_top_k(dtype):
    rng = np.random.default_rng(4)
    x = _logits(rng, 100, 1000, dtype, scale=0.3)   # flat: without the filter most draws fall outside
    got = np.asarray(sample(x, top_k=20, temperature=1.5, seed=11))
    kth = np.sort(_f64(x), -1)[:, -20]
    assert (np.take_along_axis(_f64(x), got[:, None], -1)[:, 0] >= kth).all()


@pytest.mark.parametrize("top_k", [None, 64])
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9])
def test_tokens_are_in_the_float64_nucleus(top_p, top_k):
    rng = np.random.default_rng(5)
    x = _logits(rng, 64, 200, scale=2.0)
    temperature = 0.8
    got = np.asarray(sample(x, temperature=temperature, top_p=top_p, top_k=top_k, seed=12))
    z = _f64(x) / temperature
    if top_k is not None:   # the nucleus of the renormalized top k
        kth = np.sort(z, -1)[:, -top_k][:, None]
        z = np.where(z >= kth, z, -np.inf)
    above, p = nucleus64(z, top_p)
    mass_above = np.take_along_axis(above, got[:, None], -1)[:, 0]
    assert (mass_above < top_p + 1e-5).all()
    # and the filter did something: tokens outside the nucleus are likely without it
    free = np.asarray(sample(x, temperature=temperature, seed=12, offset=1))
    if top_p <= 0.5:
        assert (np.take_along_axis(above, free[:, None], -1)[:, 0] >= top_p).any()


def test_nucleus_of_one_token_is_argmax():
    rng = np.random.default_rng(6)
    x = _logits(rng, 20, 3000)
    x[np.arange(20), np.arange(20) * 7] = 40.0   # one token holds almost all the mass
    np.testing.assert_array_equal(sample(x, top_p=0.5, seed=1), np.arange(20) * 7)


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    keep = probs > 0
    assert counts[~keep].sum() == 0, counts
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


LOGITS8 = np.array([0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 1.5, 2.5])


@pytest.mark.parametrize("kw,support", [
    ({}, [0, 1, 2, 3, 4, 5, 6, 7]),
    ({"temperature": 2.0}, [0, 1, 2, 3, 4, 5, 6, 7]),
    ({"top_k": 3}, [2, 3, 7]),
    # probabilities .403 .244 .148 .090 .055 ...: the mass above 0.090 is .795 < 0.8
    ({"top_p": 0.8}, [2, 3, 6, 7]),
    # top 4 at temperature 0.5: .644 .237 .087 .032; the mass above .237 is .644 < 0.7
    ({"top_k": 4, "top_p": 0.7, "temperature": 0.5}, [3, 7]),
])
def test_frequencies_follow_the_filtered_softmax(kw, support):
    rows = 2000 if not kw else 800
    x = np.tile(LOGITS8.astype(np.float32), (rows, 1))
    got = np.asarray(sample(x, seed=123, **kw))
    z = LOGITS8 / kw.get("temperature", 1.0)
    p = np.zeros(8)
    p[support] = np.exp(z[support] - z.max())
    p /= p.sum()
    counts = np.bincount(got, minlength=8)
    # 7 degrees of freedom at most: chi2 above 35 has probability below 2e-5
    assert _chi2(counts, p) < 35.0, (counts, p * rows)


# ----------------------------------------------------------------------------- plans
def test_plans():
    [ln] = S.plan(spec((8, 128256), tc.bfloat16), H100, greedy=False, nucleus=True)
    assert ln.schedule == LOOPED and ln.grid == (8,)
    assert ln.consts == {"GREEDY": False, "NUCLEUS": True, "BLOCK": 4096} and ln.num_warps == 8
    [ln] = S.plan(spec((3, 100), tc.float32), H100, greedy=True, top_k=5, nucleus=True)
    assert ln.consts == {"GREEDY": True, "NUCLEUS": False, "BLOCK": 128} and ln.num_warps == 1
    lns = S.plan(spec((8, 128256), tc.float16), H100, greedy=False, top_k=50, nucleus=False)
    assert [ln.schedule for ln in lns] == [CANDIDATES, MERGE, ONE_TILE]
    assert [t.name for t in lns[0].temps][:2] == ["cand_values", "cand_indices"]
    assert lns[0].temps[0].dtype is tc.float16 and lns[0].temps[1].shape == (8, 50)
    assert lns[1].args[3:5] == ("cand_values", "cand_indices")
    assert lns[2].args[:4] == ("cand_values", "cand_indices", "out", 50) and lns[2].consts["KP"] == 64
    assert S.plan(spec((0, 10), tc.float32), H100, greedy=False) == []


@pytest.mark.parametrize("kw", [{"temperature": 0.0}, {"temperature": 1.3}])
def test_split_rows_draw_the_rows_tokens(monkeypatch, kw):
    # few long rows: chunks' draws merged (SPLIT) give the one-program-per-row draw (LOOPED)
    from launch_spy import retune
    rng = np.random.default_rng(8)
    v = rng.standard_normal((3, 20000)) * 0.5
    v[1] = 1.0   # greedy ties across chunks: the first index
    x = BF16Array(v)
    assert [ln.schedule for ln in S.plan(S.as_array(x, "x"), H100, greedy=not kw["temperature"])] == [SPLIT] * 2
    split = np.asarray(sample(x, seed=21, **kw))
    retune(monkeypatch, "sampling", split_rows=0)
    np.testing.assert_array_equal(split, sample(x, seed=21, **kw))
    if not kw["temperature"]:
        assert split[1] == 0


def test_split_chunks():
    t = S.tuning_for(H100).sampling
    assert S.split_chunks(1, 32, t) == (16, 2)      # a 128k vocabulary: 16 chunks of 2 tiles
    assert S.split_chunks(8, 32, t) == (16, 2)
    assert S.split_chunks(100, 32, t) == (11, 3)
    assert S.split_chunks(300, 32, t) == (1, 32)    # enough rows: one program each
    assert S.split_chunks(4, 1, t) == (1, 1)


def test_bad_arguments():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(TypeError, match="seed must be an int"):
        sample(x, seed=1.5)
    with pytest.raises(TypeError):
        sample(x)                                   # seed is required
    with pytest.raises(ValueError, match="offset must fit in 64 bits"):
        sample(x, seed=1, offset=2 ** 64)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        sample(x, seed=1, temperature=-1.0)
    with pytest.raises(TypeError, match="temperature must be a float"):
        sample(x, seed=1, temperature="hot")
    with pytest.raises(ValueError, match="top_p must be in"):
        sample(x, seed=1, top_p=0.0)
    with pytest.raises(ValueError, match="top_p must be in"):
        sample(x, seed=1, top_p=1.5)
    with pytest.raises(ValueError, match="top_k=9 is out of range"):
        sample(x, seed=1, top_k=9)
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        sample(x, seed=1, top_k=0)
    with pytest.raises(TypeError, match="top_k must be an int"):
        sample(x, seed=1, top_k=2.0)
    with pytest.raises(TypeError, match="dtype i32"):
        sample(np.zeros((2, 8), np.int32), seed=1)
    with pytest.raises(ValueError, match="no tokens"):
        sample(np.zeros((2, 0), np.float32), seed=1)
    with pytest.raises(ValueError, match="contiguous"):
        sample(np.zeros((8, 2), np.float32).T, seed=1)


def test_shapes():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 40)).astype(np.float32)
    got = sample(x, seed=1)
    assert got.shape == (2, 3) and got.dtype == np.int64
    np.testing.assert_array_equal(got.reshape(-1), sample(x.reshape(6, 40), seed=1))
    one = sample(x[0, 0], seed=1)
    assert one.shape == () and int(one) == int(got[0, 0])
    assert sample(np.zeros((0, 4), np.float32), seed=1).shape == (0,)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel,sig", S.EXTRA_SIGNATURES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(S.EXTRA_SIGNATURES)])
def test_extra_signatures_assemble_without_spills(kernel, sig, arch):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    k = getattr(S, kernel)
    s = parse_signature(k, sig)
    warps = _warps(s.constexprs)
    compiled = compile_kernel(k, s, CompileOptions(arch=arch, num_warps=warps, fast_math=True), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


def test_signatures_name_every_kernel():
    from tilec import Kernel
    assert set(S.SIGNATURES) == {k for k, v in vars(S).items() if isinstance(v, Kernel)}


@pytest.mark.slow
@pytest.mark.parametrize("kernel,sig", list(S.SIGNATURES.items()) + S.EXTRA_SIGNATURES)
def test_kernel_ir_round_trips(kernel, sig):
    from tilec.ir import parse, print_module, verify
    k = getattr(S, kernel)
    module = k.ir(k.specialization(sig))
    assert verify(parse(print_module(module))) == module


def _warps(c) -> int:
    if "KP" in c:
        return S.candidates_warps(c["KP"])
    if "CHUNKS" in c:
        return S.merge_warps(c["CHUNKS"])
    return max(1, min(c["BLOCK"] // 512, 8))


def test_options_are_the_plans_warp_counts():
    for name, sig in S.SIGNATURES.items():
        c = getattr(S, name).specialization(sig).constexprs
        assert S.OPTIONS[name] == {"num_warps": _warps(c), "fast_math": True}


def test_torch_op_impls_on_host_arrays():
    # the custom ops' implementations are the entry points (torch_ops imports without torch)
    from tilec.stdlib_kernels import torch_ops as T
    rng = np.random.default_rng(10)
    x = _logits(rng, 4, 300)
    np.testing.assert_array_equal(T.OPS["sample"].impl(x, 0.8, 5, 0.9, 3, 1),
                                  sample(x, temperature=0.8, top_k=5, top_p=0.9, seed=3, offset=1))
    np.testing.assert_array_equal(T.OPS["sample"].impl(x, 1.0, None, None, -1, 0), sample(x, seed=2 ** 64 - 1))
    np.testing.assert_array_equal(T.OPS["argmax"].impl(x, -1, True)[:, 0], x.argmax(-1))
    vals, idx = T.OPS["topk"].impl(x, 7, False)
    np.testing.assert_array_equal(idx, np.argsort(x, -1, kind="stable")[:, :7])
    np.testing.assert_array_equal(vals, np.take_along_axis(x, idx, -1))
