"""linear_cross_entropy on the CPU interpreter: the chunk plan (no launch), the loss and the
three gradients against float64 numpy on odd shapes, over one and several chunks (the last
shorter), with ignored tokens, a bias, batch dimensions, strided operands and bf16; the
errors. The torch op and its autograd are tested in test_torch_ops.py."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec.stdlib_kernels as sk

L = importlib.import_module("tilec.stdlib_kernels.linear_cross_entropy")


# ----------------------------------------------------------------------------- the chunk plan
def test_chunk_plan_fits_the_logits_in_the_budget():
    # 16384 tokens of a 128256 bf16 vocabulary, hidden 2048: 1046 tokens fit 256 MiB -> 1024
    p = L.chunk_plan(16384, 128256, 2048, 2)
    assert (p.chunk, p.chunks) == (1024, 16) and p.logits_bytes == 1024 * 128256 * 2 <= L.DEFAULT_BUDGET
    assert p.accumulate and p.workspace_bytes == p.logits_bytes + 128256 * 2048 * 4
    # f32 logits: half the tokens; a bias adds its f32 accumulator
    p32 = L.chunk_plan(16384, 128256, 2048, 4, bias=True)
    assert (p32.chunk, p32.chunks) == (512, 32)
    assert p32.workspace_bytes == 512 * 128256 * 4 + (128256 * 2048 + 128256) * 4


@pytest.mark.parametrize("tokens,chunks", [(4096, 1), (5120, 1), (5121, 6), (4096 + 512, 1)])
def test_one_chunk_where_the_accumulators_would_take_as_much(tokens, chunks):
    # hidden 2048: the f32 dweight accumulator (128256 x 2048 x 4 bytes) is 4096 tokens of
    # bf16 logits, so up to 1024 + 4096 tokens one chunk holds no more than chunks would
    p = L.chunk_plan(tokens, 128256, 2048, 2)
    assert p.chunks == chunks and p.accumulate == (chunks > 1)
    if chunks == 1:
        assert p.workspace_bytes == tokens * 128256 * 2 <= 1024 * 128256 * 2 + 128256 * 2048 * 4
    # an explicit chunk or budget is kept
    assert L.chunk_plan(tokens, 128256, 2048, 2, chunk=1024).chunks == -(-tokens // 1024)
    assert L.chunk_plan(tokens, 128256, 2048, 2, budget=L.DEFAULT_BUDGET).chunk == 1024


@pytest.mark.parametrize("tokens,budget,want", [
    (100, None, (100, 1)),                         # everything fits: one chunk, no accumulator
    (5000, 32000 * 2 * 300, (256, 20)),            # 300 tokens fit -> a multiple of 128
    (5000, 1000, (128, 40)),                       # a budget under one row tile still takes one
    (128, 1000, (128, 1)),
    (77, 1, (77, 1)),                              # fewer tokens than a row tile
])
def test_chunk_plan_rounding(tokens, budget, want):
    p = L.chunk_plan(tokens, 32000, 512, 2, budget=budget)
    assert (p.chunk, p.chunks) == want
    assert p.accumulate == (want[1] > 1)
    assert p.chunk * (p.chunks - 1) < tokens <= p.chunk * p.chunks


def test_chunk_plan_explicit_chunk_and_errors():
    assert (lambda p: (p.chunk, p.chunks))(L.chunk_plan(1000, 10, 10, 4, chunk=300)) == (300, 4)
    assert (lambda p: (p.chunk, p.chunks))(L.chunk_plan(100, 10, 10, 4, chunk=300)) == (100, 1)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="chunk must be a positive int"):
            L.chunk_plan(100, 10, 10, 4, chunk=bad)
    with pytest.raises(ValueError, match="budget must be a positive int"):
        L.chunk_plan(100, 10, 10, 4, budget=0)
    with pytest.raises(ValueError, match="vocab must be a positive int"):
        L.chunk_plan(100, 0, 10, 4)


# ----------------------------------------------------------------------------- numerics
def ref64(h, w, b, t, ignore_index, reduction):
    """(loss, dh, dw, db) of cross_entropy(h @ w.T + b, t) in float64."""
    h, w = np.asarray(h, np.float64), np.asarray(w, np.float64)
    h2, t1 = h.reshape(-1, h.shape[-1]), np.asarray(t).reshape(-1)
    z = h2 @ w.T + (0.0 if b is None else np.asarray(b, np.float64))
    m = z.max(1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]
    ok = t1 != ignore_index
    tt = np.where(ok, t1, 0)
    rows = np.arange(len(t1))
    loss = np.where(ok, lse - z[rows, tt], 0.0)
    d = np.exp(z - lse[:, None])
    d[rows, tt] -= 1
    d[~ok] = 0
    f = 1.0 / ok.sum() if reduction == "mean" else 1.0
    d *= f
    value = loss.reshape(np.shape(t)) if reduction == "none" else loss.sum() * f
    return value, (d @ w).reshape(h.shape), d.T @ h2, d.sum(0)


def rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))


def _data(seed, lead, hidden, vocab, itype=np.int64, ignore=(3,)):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((*lead, hidden)).astype(np.float32)
    w = (rng.standard_normal((vocab, hidden)) / np.sqrt(hidden) * 3).astype(np.float32)
    b = rng.standard_normal(vocab).astype(np.float32)
    t = rng.integers(0, vocab, lead).astype(itype)
    flat = t.reshape(-1)
    for i in ignore:
        flat[i] = -100
    return h, w, b, t


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("chunk", [None, 16])   # one chunk; three (16 + 16 + 5 tokens): f32 sums over chunks
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_float64(reduction, chunk, with_bias):
    h, w, b, t = _data(1, (37,), 48, 301)
    b = b if with_bias else None
    loss, dh, dw, db = sk.linear_cross_entropy(h, w, t, bias=b, reduction=reduction, chunk=chunk)
    want = ref64(h, w, b, t, -100, reduction)
    assert np.shape(loss) == np.shape(want[0]) and np.asarray(loss).dtype == np.float32
    assert dh.shape == h.shape and dw.shape == w.shape and dh.dtype == dw.dtype == np.float32
    assert rel(loss, want[0]) < 1e-5
    assert rel(dh, want[1]) < 1e-5 and rel(dw, want[2]) < 1e-5
    if with_bias:
        assert db.shape == b.shape and rel(db, want[3]) < 1e-5
    else:
        assert db is None
    assert np.all(dh[3] == 0)   # the ignored token's row


def test_loss_alone_and_the_same_loss_with_gradients():
    h, w, b, t = _data(2, (37,), 48, 301)
    for reduction in ("mean", "none"):
        alone = sk.linear_cross_entropy(h, w, t, bias=b, reduction=reduction, chunk=16, return_grad=False)
        with_grad = sk.linear_cross_entropy(h, w, t, bias=b, reduction=reduction, chunk=16)[0]
        assert rel(alone, ref64(h, w, b, t, -100, reduction)[0]) < 1e-5
        np.testing.assert_array_equal(alone, with_grad)


def test_batch_dimensions_int32_targets_and_strided_operands():
    h, w, b, t = _data(3, (3, 7), 40, 130, itype=np.int32, ignore=(0, 20))
    wide = np.zeros((3, 7, 64), np.float32)
    wide[..., 5:45] = h                     # hidden rows of a wider buffer
    hs = wide[..., 5:45]
    wbig = np.zeros((130, 72), np.float32)
    wbig[:, :40] = w                        # weight rows of a wider buffer
    ws = wbig[:, :40]
    loss, dh, dw, db = sk.linear_cross_entropy(hs, ws, t, ignore_index=-100, chunk=8)
    want = ref64(h, w, None, t, -100, "mean")
    assert dh.shape == (3, 7, 40) and rel(loss, want[0]) < 1e-5
    assert rel(dh, want[1]) < 1e-5 and rel(dw, want[2]) < 1e-5


def test_another_ignore_index_and_every_token_ignored():
    h, w, b, t = _data(4, (20,), 32, 70, ignore=())
    t[[1, 5]] = 7
    loss, dh, dw, _ = sk.linear_cross_entropy(h, w, t, ignore_index=7, chunk=8)
    want = ref64(h, w, None, t, 7, "mean")
    assert rel(loss, want[0]) < 1e-5 and rel(dh, want[1]) < 1e-5 and rel(dw, want[2]) < 1e-5
    t[:] = -100
    loss, dh, dw, _ = sk.linear_cross_entropy(h, w, t, chunk=8)
    assert np.isnan(loss) and not np.any(dh) and not np.any(dw)   # torch: NaN mean, zero gradients


def test_bf16():
    h, w, b, t = _data(5, (29,), 64, 257)
    hb, wb, bb = sk.BF16Array(h), sk.BF16Array(w), sk.BF16Array(b)
    loss, dh, dw, db = sk.linear_cross_entropy(hb, wb, t, bias=bb, chunk=16)
    assert all(isinstance(x, sk.BF16Array) for x in (loss, dh, dw, db))
    want = ref64(np.asarray(hb), np.asarray(wb), np.asarray(bb), t, -100, "mean")
    # the logits and their gradient are held in bf16, as the GEMM's output
    assert rel(loss, want[0]) < 1e-2
    for got, ref in zip((dh, dw, db), want[1:]):
        assert rel(got, ref) < 3e-2


# ----------------------------------------------------------------------------- errors
def test_bad_arguments_are_named():
    h, w, b, t = _data(6, (5,), 8, 11)
    cases = [
        (dict(hidden=h.astype(np.float64)), TypeError, "hidden: dtype f64"),
        (dict(weight=w.astype(np.float16)), TypeError, "weight has dtype f16, expected hidden's f32"),
        (dict(target=t.astype(np.float32)), TypeError, "target: dtype f32"),
        (dict(weight=w[:, :7]), ValueError, r"weight has shape \(11, 7\), expected \(vocab, 8\)"),
        (dict(target=t[:4]), ValueError, r"target has shape \(4,\), expected \(5,\)"),
        (dict(bias=b[:3]), ValueError, r"bias has shape \(3,\), expected \(11,\)"),
        (dict(reduction="avg"), ValueError, "reduction must be one of"),
        (dict(ignore_index=1.5), TypeError, "ignore_index must be an int32"),
        (dict(chunk=0), ValueError, "chunk must be a positive int"),
        (dict(return_grad=1), TypeError, "return_grad must be a bool"),
        (dict(hidden=h[:0], target=t[:0]), ValueError, "at least one token"),
    ]
    for change, exc, msg in cases:
        kw = dict(hidden=h, weight=w, target=t, bias=None, reduction="mean", ignore_index=-100, chunk=None,
                  return_grad=True)
        kw.update(change)
        with pytest.raises(exc, match=msg):
            sk.linear_cross_entropy(kw.pop("hidden"), kw.pop("weight"), kw.pop("target"), **kw)


# ----------------------------------------------------------------------------- PTX
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("sig", [L.SIGNATURES["lce_accumulate_kernel"]] + [s for _, s in L.EXTRA_SIGNATURES])
def test_accumulate_kernel_assembles(sig, arch):
    # every specialization the entry point launches (f32 sums of each dtype's parts), through ptxas
    from tilec.compiler import compile_kernel
    from tilec.lowering.ptxas import find_ptxas
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    if not find_ptxas():
        pytest.skip("no ptxas")
    k = L.lce_accumulate_kernel
    compiled = compile_kernel(k, parse_signature(k, sig), CompileOptions(arch=arch, **L.OPTIONS[k.name]),
                              use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and not report["warnings"], report
    assert "ld.global.v4" in compiled.asm["ptx"]   # 16-byte accesses of the flat views
