"""Masks that change inside a 16-byte group, on the CPU: the PTX moves whole groups (the GPU
results are in tests/runtime/test_group_masks_gpu.py), and the interpreter's results."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

import tilec as tc

from group_mask_kernels import interval_copy, ragged_copy, window_rows


def _accesses(ptx):
    return Counter(re.findall(r"((?:ld|st)\.global(?:\.v\d)?\.b\d+)", ptx))


@pytest.mark.parametrize("dtype,vector", [("f32", "v4.b32"), ("f16", "v4.b32"), ("i8", "v4.b32"),
                                          ("f64", "v2.b64")])
def test_ragged_end_moves_whole_groups(dtype, vector):
    c = ragged_copy.compile(f"x={dtype}[?], y={dtype}[?], seen={dtype}[?], n=i32, BLOCK=1024", arch="sm_90a",
                            num_warps=4)
    acc = _accesses(c.asm["ptx"])
    loads = {k for k in acc if k.startswith("ld.")}
    assert loads == {f"ld.global.{vector}"}, acc
    assert acc[f"st.global.{vector}"] >= 2, acc  # y's whole groups and seen
    assert any(k.startswith("st.global.b") for k in acc), acc  # y's elements at the ragged end
    assert c.metadata["ptxas"]["spill_stores"] == 0


def test_unaligned_rows_through_windows_move_whole_groups():
    c = window_rows.compile("x=f16[?,?], y=f16[?,?], sums=f32[?], WINDOW=8, BLOCK=1024", arch="sm_90a",
                            num_warps=4)
    acc = _accesses(c.asm["ptx"])
    assert {k for k in acc if k.startswith("ld.")} == {"ld.global.v4.b32"}, acc
    assert "st.global.v4.b32" in acc, acc


def test_bounds_one_past_a_group_boundary_store_elements_at_the_edge():
    # lo and hi divisible by 16: (offs > lo) & (offs <= hi) flips one element past a group
    # boundary, so the groups at the edges store element by element (a group stored under
    # one mask bit would write hi + 1.. or skip lo + 1..)
    c = interval_copy.compile("x=f32[?], y=f32[?], lo=i32:16, hi=i32:16, BLOCK=1024", arch="sm_90a", num_warps=4)
    acc = _accesses(c.asm["ptx"])
    assert acc["st.global.v4.b32"] >= 1 and acc["st.global.b32"] >= 1, acc
    assert {k for k in acc if k.startswith("ld.")} == {"ld.global.v4.b32"}, acc


def test_the_interpreter_agrees():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1001).astype(np.float32)
    y = np.full(1024, -5, np.float32)
    seen = np.zeros(1024, np.float32)
    with tc.interpret():
        ragged_copy[(4,)](x, y, seen, 1001, BLOCK=256)
    np.testing.assert_array_equal(y[:1001], x * 2 + 1)
    assert (y[1001:] == -5).all()
    np.testing.assert_array_equal(seen[1001:], 7)
    xr = rng.standard_normal((5, 1003)).astype(np.float32)
    yr = np.zeros_like(xr)
    sums = np.zeros(5, np.float32)
    with tc.interpret():
        window_rows[(5,)](xr, yr, sums, WINDOW=4, BLOCK=256)
    np.testing.assert_allclose(sums, xr.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(yr, xr * 3)
