"""An int argument equal to 1 is specialized by its value, never its type (issue 51): inside
the kernel it is a typed constant, i32 for a Python int and the argument's own dtype for a
numpy integer, so an expression has the same dtype (and the same values as numpy) whatever
the argument's value. Before, a 1 became a weak Python int: `i8 tile + 1` stayed i8 and
wrapped where `i8 tile + 2` gave i32."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
from tilec import dtypes as dt
from parity_helpers import INT_DTYPES

BLOCK = 16


def _want_dtype(x: np.dtype, scalar: np.dtype) -> np.dtype:
    """numpy's promotion of an array with a typed scalar; u64 with a signed type is i64 in the
    language (docs/language.md, promotion), where numpy gives f64."""
    if x == np.uint64 and scalar.kind == "i":
        return np.dtype(np.int64)
    return np.result_type(x, scalar)


def _wrap(values, d: np.dtype) -> np.ndarray:
    """Python ints wrapped to `d`'s width, as integer arithmetic wraps in the kernel."""
    bits = 8 * d.itemsize
    v = np.array([int(a) % (1 << bits) for a in values], dtype=object)
    if d.kind == "i":
        v = np.array([a - (1 << bits) if a >= 1 << (bits - 1) else a for a in v], dtype=object)
    return v.astype(d)


@tc.kernel
def arith_with_arg_kernel(x, sums, prods, maxes, s, WANT: tc.constexpr, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,))
    r = t + s
    tc.static_assert(r.dtype == WANT, "the dtype of x + s must not depend on the value of s")
    tc.store(sums, index=(0,), tile=r)
    tc.store(prods, index=(0,), tile=s * t)
    tc.store(maxes, index=(0,), tile=tc.maximum(t, s))


def _inputs(d: np.dtype) -> np.ndarray:
    info = np.iinfo(d)
    # the edges of the type, where `+ 1` wraps in the narrow type and not in the wide one
    vals = [info.max, info.max - 1, info.min, info.min + 1, 0, 1, 2, 100 if info.max > 100 else 3]
    return np.array((vals * 2)[:BLOCK], dtype=d)


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("s", [0, 1, 2])
def test_int_argument_promotes_as_a_typed_i32(backend, d, s):
    x = _inputs(d.np)
    want = _want_dtype(x.dtype, np.dtype(np.int32))
    sums, prods, maxes = (np.zeros(BLOCK, want) for _ in range(3))
    backend.launch(arith_with_arg_kernel, (1,), x, sums, prods, maxes, s, WANT=dt.from_numpy(want), BLOCK=BLOCK)
    np.testing.assert_array_equal(sums, _wrap([int(a) + s for a in x], want))
    np.testing.assert_array_equal(prods, _wrap([int(a) * s for a in x], want))
    np.testing.assert_array_equal(maxes, np.maximum(x.astype(want), np.asarray(s, want)))


@pytest.mark.parametrize("scalar", [np.int8, np.int16, np.int64, np.uint8, np.uint32], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("s", [1, 2])
def test_numpy_integer_argument_keeps_its_dtype(backend, scalar, s):
    x = _inputs(np.dtype(np.int8))
    want = _want_dtype(x.dtype, np.dtype(scalar))
    sums, prods, maxes = (np.zeros(BLOCK, want) for _ in range(3))
    backend.launch(arith_with_arg_kernel, (1,), x, sums, prods, maxes, scalar(s), WANT=dt.from_numpy(want),
                   BLOCK=BLOCK)
    np.testing.assert_array_equal(sums, _wrap([int(a) + s for a in x], want))
    np.testing.assert_array_equal(prods, _wrap([int(a) * s for a in x], want))


@tc.kernel
def repro_kernel(x, out, s):
    tc.store(out, index=(0,), tile=(tc.load(x, index=(0,), shape=(16,)) + s).astype(tc.int32))


@pytest.mark.parametrize("s", [1, 2])
def test_issue_repro_i8_plus_one_does_not_wrap(backend, s):
    x = np.full(16, 127, np.int8)
    out = np.zeros(16, np.int32)
    backend.launch(repro_kernel, (1,), x, out, s)
    np.testing.assert_array_equal(out, 127 + s)


@tc.kernel
def uses_of_one_kernel(x, out, s, BLOCK: tc.constexpr):
    """The places a 1 used to be a Python int: a loop bound, a condition, a stride, an index."""
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in range(s):
        acc += tc.load(x, index=(i,), shape=(BLOCK,))
    if s == 1:
        acc = acc * 2.0
    offs = tc.arange(0, BLOCK) * s
    tc.store(out.ptr + offs, acc + tc.load(x.ptr + offs + s * BLOCK))


@pytest.mark.parametrize("s", [1, 2])
def test_loops_conditions_and_strides_on_the_argument(backend, s):
    x = np.arange(4 * BLOCK, dtype=np.float32)
    out = np.zeros(2 * BLOCK, np.float32)
    backend.launch(uses_of_one_kernel, (1,), x, out, s, BLOCK=BLOCK)
    acc = sum(x[i * BLOCK:(i + 1) * BLOCK] for i in range(s)) * (2.0 if s == 1 else 1.0)
    offs = np.arange(BLOCK) * s
    want = np.zeros_like(out)
    want[offs] = acc + x[offs + s * BLOCK]
    np.testing.assert_array_equal(out, want)
