"""Row-wise stdlib ops on the CPU interpreter against float64 numpy references:
softmax, log_softmax, layer_norm, rms_norm, cross_entropy, sum, max, cumsum."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import _cluster_rows, _common
from tilec.target import Target

from launch_spy import spy_launches, retune
from row_refs import ref_softmax

# Row lengths: 1, primes, tile edges and one past them, a few thousand.
ROW_LENGTHS = [1, 2, 3, 7, 31, 32, 33, 127, 257, 1000, 2049, 4099]
FEW = settings(max_examples=12, deadline=None)


@st.composite
def row_shapes(draw):
    """0 to 2 leading batch dimensions, then a row length from ROW_LENGTHS."""
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    return tuple(lead) + (draw(st.sampled_from(ROW_LENGTHS)),)


def ref_layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    return (x - mean) * rstd * w + b, mean[..., 0], rstd[..., 0]


# ----------------------------------------------------------------------------- softmax
@pytest.mark.slow
@FEW
@given(shape=row_shapes(), dtype=st.sampled_from(["f32", "f16", "bf16"]), scale=st.sampled_from([1.0, 300.0, 3e4]),
       log=st.booleans(), seed=st.integers(0, 2**16))
def test_softmax_matches_numpy(rowwise, shape, dtype, scale, log, seed):
    rng = np.random.default_rng(seed)
    x = rowwise.host(scale * rng.standard_normal(shape), dtype)
    got = (sk.log_softmax if log else sk.softmax)(x)
    assert type(got) is type(x)
    want = ref_softmax(rowwise.f64(x), log)
    # log_softmax of large inputs is large: its f32 rounding is relative to |x - max|.
    rowwise.close(got, want, dtype, scale=scale if log else 1.0)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [5, 40000])  # the single-tile kernel and the looped one
def test_softmax_of_masked_rows_follows_torch(log, n):
    x = np.full((3, n), -np.inf, np.float32)
    x[1, 3], x[1, n - 1] = 2.0, 1.0           # a row masked but for two elements
    x[2] = np.linspace(-5, 5, n)              # an unmasked row
    got = (sk.log_softmax if log else sk.softmax)(x)
    assert np.isnan(got[0]).all()             # all -inf: NaN, as torch
    np.testing.assert_allclose(got[1:], ref_softmax(x[1:].astype(np.float64), log), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_softmax_rows_one_past_the_single_tile_loop(rowwise, dtype):
    x = rowwise.host(20 * np.random.default_rng(1).standard_normal((2, 16385)), dtype)
    rowwise.close(sk.softmax(x), ref_softmax(rowwise.f64(x)), dtype)
    rowwise.close(sk.log_softmax(x), ref_softmax(rowwise.f64(x), True), dtype, scale=20)


def test_softmax_of_a_256k_row():
    # One long row: split into chunks (statistics per chunk, then combined).
    x = (5 * np.random.default_rng(2).standard_normal((1, 262144))).astype(np.float32)
    got = sk.softmax(x)
    np.testing.assert_allclose(got, ref_softmax(x.astype(np.float64)), rtol=2e-5, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("log", [False, True])
def test_split_long_rows_with_masked_chunks(log):
    # Rows split into chunks of 2 tiles (4 chunks, the last part-filled): a chunk of only
    # -inf, a row of only -inf (NaN, as torch), and an ordinary row.
    from tilec.stdlib_kernels.softmax import SPLIT_ROWS
    x = np.random.default_rng(5).standard_normal((3, 7 * 4096 + 5)).astype(np.float32) * 4
    assert x.shape[0] < SPLIT_ROWS
    x[0, :2 * 4096] = -np.inf
    x[1] = -np.inf
    got = (sk.log_softmax if log else sk.softmax)(x)
    assert np.isnan(got[1]).all()
    want = ref_softmax(x[[0, 2]].astype(np.float64), log)
    np.testing.assert_allclose(got[[0, 2]], want, rtol=2e-5, atol=1e-7)


def test_softmax_strided_rows_out_and_in_place():
    base = np.random.default_rng(3).standard_normal((4, 6, 50)).astype(np.float32)
    x = base[:, ::2, 5:45]                    # row stride 100, rows cut short: no copy needed
    want = ref_softmax(x.astype(np.float64))
    out = np.empty_like(x)
    assert sk.softmax(x, out=out) is out
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=1e-7)
    y = x.copy()
    sk.softmax(y, dim=2, out=y)
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-7)


def test_softmax_argument_errors():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        sk.softmax(x[:, ::2])
    with pytest.raises(ValueError, match="cannot be flattened"):
        sk.softmax(np.zeros((3, 4, 8), np.float32).transpose(1, 0, 2))
    with pytest.raises(IndexError, match="out of range"):
        sk.softmax(x, dim=2)
    with pytest.raises(TypeError, match="dtype i32 is not supported"):
        sk.softmax(x.astype(np.int32))
    with pytest.raises(TypeError, match="expected an array"):
        sk.softmax([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"out has shape \(8, 4\), expected \(4, 8\)"):
        sk.softmax(x, out=np.zeros((8, 4), np.float32))
    with pytest.raises(TypeError, match="out has dtype f16, expected f32"):
        sk.softmax(x, out=np.zeros((4, 8), np.float16))


def test_empty_inputs_give_empty_outputs():
    assert sk.softmax(np.zeros((0, 5), np.float32)).shape == (0, 5)
    assert sk.layer_norm(np.zeros((2, 0), np.float16)).shape == (2, 0)
    np.testing.assert_array_equal(sk.sum(np.zeros((3, 0), np.float32), -1), np.zeros(3))


@pytest.mark.parametrize("n", [100, 20001, 300000])
def test_no_rows_of_any_length(n):
    # an empty batch of rows past one tile (looped and split paths) as of short ones
    x = np.zeros((0, n), np.float32)
    assert sk.softmax(x).shape == sk.log_softmax(np.zeros((2, 0, n), np.float16)).shape[1:] == (0, n)
    assert sk.layer_norm(x, np.ones(n, np.float32)).shape == sk.rms_norm(x).shape == (0, n)
    t = np.zeros((0,), np.int64)
    assert np.isnan(sk.cross_entropy(x, t))                # the mean of nothing, as torch
    assert sk.cross_entropy(x, t, reduction="sum") == 0.0
    assert sk.cross_entropy(x, t, reduction="none").shape == (0,)


# ----------------------------------------------------------------------------- norms
@pytest.mark.slow
@FEW
@given(shape=row_shapes(), dtype=st.sampled_from(["f32", "f16", "bf16"]), offset=st.sampled_from([0.0, 50.0]),
       affine=st.booleans(), seed=st.integers(0, 2**16))
def test_layer_norm_matches_numpy(rowwise, shape, dtype, offset, affine, seed):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    x = rowwise.host(offset + 2 * rng.standard_normal(shape), dtype)
    w = rowwise.host(rng.standard_normal(n), dtype) if affine else None
    b = np.asarray(rng.standard_normal(n), np.float32) if affine else None  # a dtype other than x's
    y, mean, rstd = sk.layer_norm(x, w, b, eps=1e-5, return_stats=True)
    x64 = rowwise.f64(x)
    want, want_mean, want_rstd = ref_layer_norm(x64, rowwise.f64(w) if affine else 1.0,
                                                rowwise.f64(b) if affine else 0.0, 1e-5)
    rowwise.close(y, want, dtype, scale=4)
    assert mean.dtype == np.float32 and mean.shape == shape[:-1]
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("is_max", [False, True])
def test_reductions_over_a_long_first_dim_split_among_programs(rowwise, is_max):
    from tilec.stdlib_kernels.reductions import strip_config
    # 3 column strips of 3000 rows: the rows are split among programs (uneven last part),
    # partial results in f32, then a second launch.
    shape = (3000, 300)
    assert strip_config(1, *shape, 2)[3] > 1
    x = rowwise.host(np.random.default_rng(3).standard_normal(shape), "bf16")
    x64 = rowwise.f64(x)
    if is_max:
        rowwise.close(sk.amax(x, 0), x64.max(0), "bf16")
    else:
        rowwise.close(sk.sum(x, 0), x64.sum(0), "bf16", scale=1 + np.abs(x64).sum(0).max() / 100)


@pytest.mark.parametrize("shape, itemsize, programs, tiles_each", [
    ((16384, 8192), 4, 1024, 64),   # 64 strips: 16 programs of 64 tiles per strip (H100: best)
    ((8192, 16384), 2, 1024, 32),   # 128 strips: 8 per strip
    ((4096, 4096), 2, 1024, 4),     # small: 32 strips of 32 programs of the fewest (4) tiles
])
def test_inner_reduction_split_heuristic(shape, itemsize, programs, tiles_each):
    from tilec.stdlib_kernels.reductions import strip_config
    block_r, block_i, _, splits = strip_config(1, *shape, itemsize)
    strips, n_tiles = -(-shape[1] // block_i), -(-shape[0] // block_r)
    assert (strips * splits, n_tiles // splits) == (programs, tiles_each)


@pytest.mark.slow
@FEW
@given(shape=row_shapes(), dtype=st.sampled_from(["f32", "f16", "bf16"]), seed=st.integers(0, 2**16))
def test_rms_norm_matches_numpy(rowwise, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rowwise.host(3 * rng.standard_normal(shape), dtype)
    w = rowwise.host(rng.standard_normal(shape[-1]), "f32")
    y, rstd = sk.rms_norm(x, w, eps=1e-6, return_stats=True)
    x64 = rowwise.f64(x)
    want_rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + 1e-6)
    rowwise.close(y, x64 * want_rstd[..., None] * rowwise.f64(w), dtype, scale=4)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_norms_of_long_rows_with_a_large_mean(rowwise, monkeypatch, dtype, capability):
    # 16385 columns take the looped kernel (sm_80; the mean of 1000 tests its shifted
    # statistics) or a cluster of programs (sm_90: chunk means combined by Chan's formula).
    monkeypatch.setattr(_common, "HOST_TARGET", Target.from_arch(capability))
    rng = np.random.default_rng(4)
    x = rowwise.host(1000 + rng.standard_normal((3, 16385)), dtype)
    w, b = rng.standard_normal(16385).astype(np.float32), rng.standard_normal(16385).astype(np.float32)
    x64 = rowwise.f64(x)
    y, mean, rstd = sk.layer_norm(x, w, b, return_stats=True)
    want, want_mean, want_rstd = ref_layer_norm(x64, w, b, 1e-5)
    rowwise.close(y, want, dtype, scale=8)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6)
    np.testing.assert_allclose(rstd, want_rstd, rtol=2e-3)
    y, rstd = sk.rms_norm(x, w, return_stats=True)
    want_rstd = 1.0 / np.sqrt((x64 * x64).mean(-1) + 1e-6)
    rowwise.close(y, x64 * want_rstd[:, None] * w, dtype, scale=8)


def test_norm_argument_errors():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match=r"weight has shape \(7,\), expected \(8,\)"):
        sk.layer_norm(x, np.ones(7, np.float32), None)
    with pytest.raises(ValueError, match="eps must be a non-negative number"):
        sk.rms_norm(x, None, eps=-1.0)
    with pytest.raises(TypeError, match="bias: dtype i64"):
        sk.layer_norm(x, None, np.zeros(8, np.int64))


# ----------------------------------------------------------------------------- cross entropy
def ref_cross_entropy(x, t, ignore_index):
    m = x.max(-1)
    lse = m + np.log(np.exp(x - m[..., None]).sum(-1))
    picked = np.take_along_axis(x, np.clip(t, 0, x.shape[-1] - 1)[..., None], -1)[..., 0]
    loss = np.where(t == ignore_index, 0.0, lse - picked)
    return loss, loss.sum(), loss.sum() / (t != ignore_index).sum()


@pytest.mark.slow
@FEW
@given(shape=row_shapes(), dtype=st.sampled_from(["f32", "f16", "bf16"]),
       tdtype=st.sampled_from([np.int32, np.int64]), seed=st.integers(0, 2**16))
def test_cross_entropy_matches_numpy(rowwise, shape, dtype, tdtype, seed):
    rng = np.random.default_rng(seed)
    x = rowwise.host(4 * rng.standard_normal(shape), dtype)
    t = rng.integers(0, shape[-1], shape[:-1]).astype(tdtype)
    if t.size > 1:
        t.flat[rng.integers(0, t.size)] = -100
    none, total, mean = ref_cross_entropy(rowwise.f64(x), t, -100)
    scale = 1 + np.log(shape[-1])
    rowwise.close(sk.cross_entropy(x, t, reduction="none"), none, dtype, scale=scale)
    rowwise.close(sk.cross_entropy(x, t, reduction="sum"), total, dtype, scale=scale * max(t.size, 1))
    got = sk.cross_entropy(x, t)
    assert got.shape == () and type(got) is type(x)
    rowwise.close(got, mean, dtype, scale=scale)


@pytest.mark.slow
@pytest.mark.parametrize("split_rows", [8192, 1])
def test_cross_entropy_long_rows_ignored_and_out_of_range_targets(monkeypatch, split_rows):
    # Rows split into chunks (4 rows < SPLIT_ROWS: 3 chunks of one step, merged by the
    # combine kernel) and whole rows; row 1 opens with a chunk of -inf logits only.
    CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
    retune(monkeypatch, "cross_entropy", split_rows=split_rows)
    assert CE.chunk_count(4, 16385) == ((3, 1) if split_rows == 8192 else (1, 3))
    rng = np.random.default_rng(5)
    x = (3 * rng.standard_normal((4, 16385))).astype(np.float32)
    x[1, :8192] = -np.inf
    t = np.array([16384, 9000, -1, 3])
    t_ignore = np.array([16384, 9000, -1, 3])
    none = sk.cross_entropy(x, t, ignore_index=-1, reduction="none")
    want, _, want_mean = ref_cross_entropy(x.astype(np.float64), t_ignore, -1)
    np.testing.assert_allclose(none, want, rtol=1e-5)
    np.testing.assert_allclose(sk.cross_entropy(x, t, ignore_index=-1), want_mean, rtol=1e-5)
    bad = sk.cross_entropy(x, np.array([16385, 9000, -5, 3]), reduction="none")
    assert np.isnan(bad[0]) and np.isnan(bad[2]) and np.isfinite(bad[[1, 3]]).all()
    assert np.isnan(sk.cross_entropy(x, np.full(4, -100)))  # every row ignored: 0 / 0


@pytest.mark.parametrize("rows,n,window,itemsize,want", [
    (4096, 50257, 16, 2, (2048, 8)), (8192, 32001, 8, 2, (2048, 8)), (4096, 50257, 4, 4, (2048, 8)),
    (512, 50257, 16, 2, (2048, 8)), (512, 32000, 0, 2, (2048, 8)), (512, 32000, 0, 4, (2048, 8)),
    (4096, 32000, 0, 2, (8192, 32)), (1024, 128256, 0, 2, (8192, 32)),
    (4096, 32000, 0, 4, (4096, 16)), (2048, 128257, 16, 2, (4096, 16)), (2048, 128257, 4, 4, (2048, 8))])
def test_cross_entropy_loop_config(rows, n, window, itemsize, want):
    # rows split into chunks (fewer than SPLIT_ROWS rows) and whole rows off 32-byte sectors
    # (2-byte ones of up to 65536 classes) step by 2048-column tiles at 8 warps; 2-byte rows on
    # sectors by 8192 at 32; the rest by 4096 at 16
    CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
    assert CE.loop_config(rows, n, window, itemsize) == want


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("n", [20001, 20000])
def test_cross_entropy_windowed_rows_step_by_smaller_tiles(rowwise, monkeypatch, dtype, n):
    CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
    retune(monkeypatch, "cross_entropy", split_rows=2)      # whole rows for a few rows
    launched = spy_launches(monkeypatch, (CE,), lambda kernel, cluster, c: (kernel.name, c.get("BLOCK"), c.get("WINDOW")))
    rng = np.random.default_rng(7)
    x = rowwise.host(4 * rng.standard_normal((3, n)), dtype)
    t = np.array([n - 1, 0, 7777])
    none, _, mean = ref_cross_entropy(rowwise.f64(x), t, -100)
    rowwise.close(sk.cross_entropy(x, t, reduction="none"), none, dtype, scale=1 + np.log(n))
    rowwise.close(sk.cross_entropy(x, t), mean, dtype, scale=1 + np.log(n))
    window = 0 if n * (2 if dtype == "bf16" else 4) % 32 == 0 else 32 // (2 if dtype == "bf16" else 4)
    assert launched[0] == ("ce_loop_kernel", 2048 if window else 8192 if dtype == "bf16" else 4096, window)


def test_cross_entropy_argument_errors():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="reduction must be one of"):
        sk.cross_entropy(x, np.zeros(4, np.int64), reduction="avg")
    with pytest.raises(ValueError, match=r"target has shape \(3,\), expected \(4,\)"):
        sk.cross_entropy(x, np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="target: dtype f32"):
        sk.cross_entropy(x, np.zeros(4, np.float32))


# ----------------------------------------------------------------------------- sum, max, cumsum
@pytest.mark.slow
@FEW
@given(shape=st.lists(st.sampled_from([1, 2, 3, 5, 33, 257]), min_size=1, max_size=3).map(tuple),
       dtype=st.sampled_from(["f32", "f16", "bf16"]), is_max=st.booleans(), data=st.data())
def test_sum_and_max_along_any_dim(rowwise, shape, dtype, is_max, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rowwise.host(rng.standard_normal(shape), dtype)
    x64 = rowwise.f64(x)
    if is_max:
        rowwise.close(sk.amax(x, dim), x64.max(dim), dtype)
    else:
        # f32 accumulation error grows with the number and size of the terms.
        rowwise.close(sk.sum(x, dim), x64.sum(dim), dtype, scale=1 + np.abs(x64).sum(dim).max() / 100)


def test_sum_and_max_of_long_rows_and_strided_inputs():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 16385)).astype(np.float32)
    np.testing.assert_allclose(sk.sum(x, 1), x.astype(np.float64).sum(1), atol=1e-3)
    np.testing.assert_allclose(sk.amax(x, -1), x.max(1))
    y = rng.standard_normal((5, 4, 9)).astype(np.float32)[:, :, ::3]  # last stride 3
    np.testing.assert_allclose(sk.sum(y, -1), y.astype(np.float64).sum(-1), atol=1e-5)
    np.testing.assert_allclose(sk.amax(y, 0), y.max(0))
    out = np.empty((5, 3), np.float32)
    assert sk.amax(y, 1, out=out) is out
    np.testing.assert_allclose(out, y.max(1))
    with pytest.raises(ValueError, match="size 0"):
        sk.amax(np.zeros((2, 0), np.float32), 1)


@pytest.mark.slow
@FEW
@given(shape=row_shapes(), dtype=st.sampled_from(["f32", "f16", "bf16"]), seed=st.integers(0, 2**16))
def test_cumsum_matches_numpy(rowwise, shape, dtype, seed):
    x = rowwise.host(np.random.default_rng(seed).standard_normal(shape), dtype)
    x64 = rowwise.f64(x)
    rowwise.close(sk.cumsum(x), np.cumsum(x64, -1), dtype, scale=1 + np.abs(x64).sum(-1).max() / 100)


def test_cumsum_carries_across_tiles_and_over_other_dims():
    x = np.random.default_rng(7).standard_normal((2, 9000)).astype(np.float32)
    np.testing.assert_allclose(sk.cumsum(x), np.cumsum(x.astype(np.float64), -1), atol=2e-3)
    np.testing.assert_allclose(sk.cumsum(x, dim=0), np.cumsum(x.astype(np.float64), 0), atol=1e-5)
