"""tile.for's trip count (codegen's trip_count), JIT-compiled for the host: as many iterations as
Python's range(lb, ub, step) for i32 and i64 bounds anywhere in their range, either sign of the
step, run-time or constant. Counting from the distance between the bounds is what lets a loop end
within one step of the type's limit, where `iv + step` wraps (on the GPU: tests/runtime/test_loops_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llvmlite import ir

from tilec.lowering.codegen.rules_control import trip_count

from hostjit import vectorize

I32 = ir.IntType(32)
I64 = ir.IntType(64)
LIMITS = {32: (-2**31, 2**31 - 1), 64: (-2**63, 2**63 - 1)}


def _count(bits, lbs, ubs, steps, constant_step=None):
    ty = I32 if bits == 32 else I64
    signed, unsigned = (np.int32, np.uint32) if bits == 32 else (np.int64, np.uint64)
    if constant_step is None:
        fn = vectorize(lambda b, lb, ub, step: trip_count(b, lb, ub, step), 3, ty)
    else:
        fn = vectorize(lambda b, lb, ub, _: trip_count(b, lb, ub, ir.Constant(ty, constant_step)), 3, ty)
    args = [np.asarray(v, dtype=signed).view(unsigned) for v in (lbs, ubs, steps)]
    return fn(*args).astype(np.uint64)


def _range_len(lb, ub, step):
    # len(range(lb, ub, step)), also past the 2**63 elements len() takes
    return max(0, (ub - lb + (step - 1 if step > 0 else step + 1)) // step)


def _bounds(bits):
    lo, hi = LIMITS[bits]
    near = st.one_of(st.integers(lo, lo + 4096), st.integers(hi - 4096, hi), st.integers(-4096, 4096))
    return st.one_of(near, st.integers(lo, hi))


def _steps(bits):
    lo, hi = LIMITS[bits]
    return st.one_of(st.integers(1, 600), st.integers(-600, -1), st.integers(lo, hi).filter(bool))


@pytest.mark.slow
@pytest.mark.parametrize("bits", [32, 64])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_run_time_step_counts_as_range(bits, data):
    n = 64
    lbs = data.draw(st.lists(_bounds(bits), min_size=n, max_size=n))
    ubs = data.draw(st.lists(_bounds(bits), min_size=n, max_size=n))
    steps = data.draw(st.lists(_steps(bits), min_size=n, max_size=n))
    got = _count(bits, lbs, ubs, steps)
    want = [_range_len(lb, ub, s) for lb, ub, s in zip(lbs, ubs, steps)]
    assert got.tolist() == want


@pytest.mark.parametrize("bits,step", [(32, 256), (32, -256), (32, 1), (32, -2**31), (32, 2**31 - 1), (64, 3),
                                       (64, -7)])
def test_constant_step_counts_as_range(bits, step):
    lo, hi = LIMITS[bits]
    pts = [lo, lo + 1, lo + 255, -1000, -1, 0, 1, 1000, hi - 1000, hi - 256, hi - 1, hi]
    lbs, ubs = zip(*[(a, b) for a in pts for b in pts])
    got = _count(bits, lbs, ubs, [step] * len(lbs), constant_step=step)
    assert got.tolist() == [_range_len(a, b, step) for a, b in zip(lbs, ubs)]


def test_a_loop_ending_within_a_step_of_the_i32_limit_stops_there():
    # range(2**31 - 1000, 2**31 - 1, 256) has 4 iterations; the fourth's k + 256 is past 2**31
    got = _count(32, [2**31 - 1000], [2**31 - 1], [256])
    assert got.tolist() == [4]
