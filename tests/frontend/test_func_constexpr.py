"""A @tc.func passed as a constexpr: inlined where the kernel calls it, one specialization per
func (identity), and a compile-cache key that follows the func's source and captured values."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
from tilec.compiler import cache_key
from tilec.options import CompileOptions


@tc.func
def plus_one(x):
    return x + 1.0


@tc.func
def times_idx(x):
    return x * tc.arange(0, 16).astype(tc.float32)


@tc.kernel
def apply_kernel(x, out, F: tc.constexpr, BLOCK: tc.constexpr):
    tc.store(out, index=(0,), tile=F(tc.load(x, index=(0,), shape=(BLOCK,))))


def _run(fn, x):
    out = np.zeros_like(x)
    with tc.interpret():
        apply_kernel[(1,)](x, out, F=fn, BLOCK=16)
    return out


def _make_scaled(factor):
    @tc.func
    def scaled(x):
        return x * factor
    return scaled


def _key(fn):
    x = np.zeros(16, np.float32)
    return cache_key(apply_kernel, apply_kernel.specialization(x, x, F=fn, BLOCK=16), CompileOptions())


def test_each_func_compiles_its_own_kernel_and_reuses_it():
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(_run(plus_one, x), x + 1)
    np.testing.assert_allclose(_run(times_idx, x), x * np.arange(16))
    n = len(apply_kernel._ir_cache)
    np.testing.assert_allclose(_run(plus_one, x), x + 1)   # same func: the same specialization
    assert len(apply_kernel._ir_cache) == n


def test_cache_key_follows_source_and_captured_values():
    twice, thrice = _make_scaled(2.0), _make_scaled(3.0)
    # one name and one source text: only the captured value tells them apart
    assert twice.fn.__qualname__ == thrice.fn.__qualname__
    assert _key(twice) != _key(thrice)
    assert _key(twice) == _key(_make_scaled(2.0))
    assert _key(plus_one) != _key(times_idx)
    x = np.arange(16, dtype=np.float32)
    np.testing.assert_allclose(_run(twice, x), 2 * x)
    np.testing.assert_allclose(_run(thrice, x), 3 * x)


def test_a_plain_function_is_a_type_error_naming_the_parameter():
    x = np.zeros(16, np.float32)
    with pytest.raises(TypeError, match=r"parameter 'F'.*@tc.func"):
        _run(lambda t: t, x)
