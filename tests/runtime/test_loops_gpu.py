"""Run-time loops on the GPU (marker gpu) run as many iterations as Python's range, also where
they end within one step of the i32 limit (`k + step` past 2**31 - 1 or below -2**31): the
count comes from the distance between the bounds (codegen's trip_count; on the host:
tests/codegen/test_loops.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc

pytestmark = pytest.mark.gpu


@tc.kernel
def loop_trips(out, lb, ub, step):
    n = 0
    last = lb
    for k in range(lb, ub, step):
        n += 1
        last = k
    tc.store(out, index=(0,), tile=tc.full((1,), n, tc.int64))
    tc.store(out, index=(1,), tile=tc.full((1,), last, tc.int64))


I32_MAX, I32_MIN = 2**31 - 1, -2**31


@pytest.mark.parametrize("lb,ub,step", [
    (I32_MAX - 1000, I32_MAX, 256),        # the 4th iteration's k + 256 wraps
    (I32_MAX - 1000, I32_MAX, 1),          # step 1 (specialized to the constant)
    (0, I32_MAX, 2**30),                   # k = 2**30, then 2**31 would wrap
    (I32_MIN + 1000, I32_MIN, -256),       # counting down past -2**31
    (I32_MIN, I32_MAX, 2**31 - 1),         # the whole range in three steps
    (17, 17, 5), (20, 10, 3), (10, 20, -3),  # empty
    (2**40, 2**40 + 10, 3),                # i64 bounds
])
def test_loop_runs_range_iterations(gpu, lb, ub, step):
    out = tc.from_numpy(np.zeros(2, np.int64))
    loop_trips[(1,)](out, lb, ub, step, num_warps=1)
    r = range(lb, ub, step)
    assert out.to_numpy().tolist() == [len(r), r[-1] if len(r) else lb]
