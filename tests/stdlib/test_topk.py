"""topk on the interpreter: values exactly numpy's, indices a stable sort's (equal values by
increasing index), every dtype, rows of one chunk and of several levels, -inf and NaN."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec as tc
from tilec.stdlib_kernels import BF16Array
from tilec.stdlib_kernels.launches import spec
from tilec.stdlib_kernels.schedules import CANDIDATES, MERGE
from tilec.stdlib_kernels.tuning import TABLES

K = importlib.import_module("tilec.stdlib_kernels.topk")   # the package attribute is the function
T = TABLES["sm_90"].topk
H100 = tc.Target.from_arch("sm_90a")


def _host(v: np.ndarray, dtype: str):
    return BF16Array(v) if dtype == "bf16" else v.astype({"f32": np.float32, "f16": np.float16}[dtype])


def _f64(a) -> np.ndarray:
    return np.asarray(np.asarray(a), dtype=np.float64)


def _expected(x64: np.ndarray, k: int, largest: bool):
    """(values, indices) of a stable sort: best first, equal values by increasing index."""
    order = np.argsort(-x64 if largest else x64, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x64, order, -1), order


def _check(x, k, largest=True):
    x64 = _f64(x)
    vals, idx = K.topk(x, k, largest=largest)
    assert np.asarray(idx).dtype == np.int64
    want_v, want_i = _expected(x64, k, largest)
    np.testing.assert_array_equal(_f64(vals), want_v)
    np.testing.assert_array_equal(np.asarray(idx), want_i)
    # and the indices point at the values
    np.testing.assert_array_equal(np.take_along_axis(x64, np.asarray(idx), -1), _f64(vals))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("n,k", [(1, 1), (37, 1), (37, 5), (129, 64), (4099, 64), (9001, 7)])
def test_topk_matches_a_stable_sort(dtype, n, k):
    rng = np.random.default_rng(n + k)
    _check(_host(rng.standard_normal((3, n)) * 4, dtype), k)


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 3), n=st.integers(1, 9000), data=st.data(), dtype=st.sampled_from(["f32", "f16", "bf16"]),
       largest=st.booleans(), levels=st.sampled_from([3, 1000]))
def test_topk_property(rows, n, data, dtype, largest, levels):
    # values from `levels` distinct numbers (3: mostly ties) against a stable sort
    k = data.draw(st.integers(0, min(n, 64)), label="k")
    seed = data.draw(st.integers(0, 2 ** 16), label="seed")
    rng = np.random.default_rng(seed)
    _check(_host(rng.integers(0, levels, size=(rows, n)) / 7.0 - 2.0, dtype), k, largest)


@pytest.mark.parametrize("largest", [True, False])
def test_ties_come_by_increasing_index(largest):
    # few distinct values in rows spanning several chunks: ties within and across chunks
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, size=(2, 9000)).astype(np.float32)
    _check(x, 64, largest)
    _check(_host(x.astype(np.float64), "bf16"), 33, largest)


def test_smallest_and_leading_dimensions():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 50)).astype(np.float32)
    _check(x, 10, largest=False)
    vals, idx = K.topk(x[0, 0], 4)
    assert vals.shape == (4,) and idx.shape == (4,)


def test_minus_infinity_entries():
    # fewer finite entries than k: the -inf ones come next, by index (never past the row's end)
    x = np.full((2, 300), -np.inf, np.float32)
    x[0, [7, 250, 3]] = [1.0, 2.0, -5.0]
    x[1, 299] = 0.0
    _check(x, 6)
    _check(x, 6, largest=False)


def test_nan_ranks_as_infinity():
    x = np.array([[1.0, np.nan, 3.0, -np.inf, 2.0, np.nan]], np.float32)
    vals, idx = K.topk(x, 3)
    assert np.isnan(vals[0, :2]).all() and vals[0, 2] == 3.0
    assert idx.tolist() == [[1, 5, 2]]
    vals, idx = K.topk(x, 3, largest=False)
    assert idx.tolist() == [[3, 0, 4]]


def test_several_merge_levels():
    # k = 1024: chunks of 4096 give 5 x 1024 candidates, merged in 2 programs, then 1
    assert K.levels(20000, 1024, T) == [(4096, 5), (4096, 2), (2048, 1)]
    rng = np.random.default_rng(2)
    _check(rng.standard_normal((1, 20000)).astype(np.float32), 1024)


def test_long_rows_two_levels():
    rng = np.random.default_rng(3)
    _check(_host(rng.standard_normal((2, 70001)), "bf16"), 50)


def test_k_zero_and_empty_rows():
    vals, idx = K.topk(np.zeros((3, 5), np.float32), 0)
    assert vals.shape == (3, 0) and idx.shape == (3, 0)
    vals, idx = K.topk(np.zeros((0, 5), np.float32), 2)
    assert vals.shape == (0, 2)


def test_bad_arguments():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="k=9 is out of range"):
        K.topk(x, 9)
    with pytest.raises(ValueError, match="k=-1"):
        K.topk(x, -1)
    with pytest.raises(TypeError, match="k must be an int"):
        K.topk(x, 2.0)
    with pytest.raises(ValueError, match="only the last dimension"):
        K.topk(x, 1, dim=0)
    with pytest.raises(TypeError, match="largest must be a bool"):
        K.topk(x, 1, largest=1)
    with pytest.raises(TypeError, match="dtype i32"):
        K.topk(np.zeros((2, 8), np.int32), 1)
    with pytest.raises(ValueError, match="more than topk supports"):
        K.topk(np.zeros((1, 2000), np.float32), 1025)
    with pytest.raises(ValueError, match="at least 1 dimension"):
        K.topk(np.ones((), np.float32), 1)


# ----------------------------------------------------------------------------- plans
def test_levels_shrink_to_one_program():
    assert K.levels(100, 5, T) == [(128, 1)]
    assert K.levels(4096, 64, T) == [(4096, 1)]
    assert K.levels(128256, 50, T) == [(4096, 32), (2048, 1)]
    # k = 1000: chunks of 4 KP at least
    assert K.levels(128256, 1000, T)[0] == (4096, 32)
    for n, k in [(10 ** 6, 64), (128256, 1024), (3, 3)]:
        lv = K.levels(n, k, T)
        assert lv[-1][1] == 1 and all(b >= 4 * K.next_pow2(k) or b >= n for b, _ in lv[:1])


def test_plan_one_chunk_writes_the_result():
    [ln] = K.plan(spec((8, 1000), tc.float16), 10, True, H100)
    assert ln.schedule == CANDIDATES and ln.grid == (8, 1)
    assert ln.consts == {"LARGEST": True, "FINAL": True, "KP": 16, "BLOCK": 1024}
    assert ln.args[:3] == ("x", "values", "indices")


def test_plan_vocab_rows_merge_once():
    first, merge = K.plan(spec((4, 128256), tc.bfloat16), 50, False, H100)
    assert (first.schedule, merge.schedule) == (CANDIDATES, MERGE)
    assert first.grid == (4, 32) and merge.grid == (4, 1)
    assert [t.name for t in first.temps] == ["topk_key0", "topk_id0"]
    assert first.temps[0].shape == (4, 32 * 64) and first.temps[1].dtype is tc.int32
    assert merge.args[1:3] == ("topk_key0", "topk_id0") and merge.consts["FINAL"]
    assert not first.consts["FINAL"] and first.consts["LARGEST"] is False


def test_plan_of_nothing():
    assert K.plan(spec((0, 10), tc.float32), 3, True, H100) == []
    assert K.plan(spec((5, 10), tc.float32), 0, True, H100) == []


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel,sig", K.EXTRA_SIGNATURES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(K.EXTRA_SIGNATURES)])
def test_extra_signatures_assemble_without_spills(kernel, sig, arch):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    k = getattr(K, kernel)
    s = parse_signature(k, sig)
    warps = K.warps_for(s.constexprs["BLOCK"], T)
    compiled = compile_kernel(k, s, CompileOptions(arch=arch, num_warps=warps, fast_math=True), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


def test_options_are_the_plans_warp_counts():
    from tilec.specialize import parse_signature
    for name, sig in K.SIGNATURES.items():
        block = parse_signature(getattr(K, name), sig).constexprs["BLOCK"]
        assert K.OPTIONS[name]["num_warps"] == K.warps_for(block, T)


def test_signatures_name_every_kernel():
    from tilec import Kernel
    assert set(K.SIGNATURES) == {k for k, v in vars(K).items() if isinstance(v, Kernel)}


@pytest.mark.slow
@pytest.mark.parametrize("kernel,sig", list(K.SIGNATURES.items()) + K.EXTRA_SIGNATURES)
def test_kernel_ir_round_trips(kernel, sig):
    from tilec.ir import parse, print_module, verify
    k = getattr(K, kernel)
    module = k.ir(k.specialization(sig))
    assert verify(parse(print_module(module))) == module
