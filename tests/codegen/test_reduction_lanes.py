"""Cross-warp reductions on the CPU: the copies of a warp's partial agree bit for bit (under
fast_math a lane's own product fused into its combine made them differ in the last bit, and
racecheck reported their writes to one shared-memory word): a product entering the butterfly
stays rounded (`mul.rn`), so no lane needs another's result."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilec as tc


@tc.kernel
def weighted_row_sum(x, w, out, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,)).astype(tc.float32)
    u = tc.load(w, index=(0,), shape=(BLOCK,)).astype(tc.float32)
    tc.store(out, index=(0,), tile=tc.full((1,), tc.sum(t * tc.exp(u)), tc.float32))


def _ptx(fast_math, warps=8, block=2048):
    c = weighted_row_sum.compile(f"x=f16[?], w=f16[?], out=f32[?], BLOCK={block}", arch="sm_90a",
                                 num_warps=warps, fast_math=fast_math)
    return c.asm["ptx"]


@tc.kernel
def row_sum(x, out, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,)).astype(tc.float32)
    tc.store(out, index=(0,), tile=tc.full((1,), tc.sum(t), tc.float32))


def test_a_product_entering_the_butterfly_is_not_fused_into_a_lane_s_combine():
    # cross_entropy's looped rows sum s * exp(m - max) of one group per thread: fused into the
    # lane's own first combine (an fma) while its partner adds the rounded copy it was sent,
    # the lanes' sums differed in the last bit before they met in shared memory
    import importlib
    ce = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
    sig = ("logits=f16[?,?], target=i64[?], loss=f32[?], part_m=f32[?,?], part_s=f32[?,?], ignore_index=i32, "
           "steps_per_chunk=i32, BLOCK=2048, SPLIT=True, WINDOW=16")
    ptx = ce.ce_loop_kernel.compile(sig, arch="sm_90a", num_warps=8, fast_math=True).asm["ptx"]
    _assert_butterflies_combine_rounded_values(ptx)
    _assert_butterflies_combine_rounded_values(_ptx(True))


def _assert_butterflies_combine_rounded_values(ptx):
    lines = [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith(".loc")]
    firsts = [i for i, ln in enumerate(lines) if ln.startswith("shfl.sync.bfly") and ln.endswith(" 1, 31, -1;")]
    assert firsts and "shfl.sync.idx" not in ptx
    for i in firsts:
        value = lines[i].split()[2].rstrip(",")                     # the lane's own value, shuffled
        made = next(ln for ln in reversed(lines[:i]) if len(ln.split()) > 1 and ln.split()[1].rstrip(",") == value)
        assert not made.startswith(("mul.f32", "mul.ftz.f32")), made   # rounded (mul.rn): ptxas fuses no add into it
        combine = next(ln for ln in lines[i + 1:] if value in ln)
        assert not combine.startswith("fma"), combine


def test_no_broadcast_where_lanes_agree_already():
    assert "shfl.sync.idx" not in _ptx(False)   # no contraction without fast_math
    c = row_sum.compile("x=f16[?], out=f32[?], BLOCK=2048", arch="sm_90a", num_warps=8, fast_math=True)
    assert "shfl.sync.bfly" in c.asm["ptx"] and "shfl.sync.idx" not in c.asm["ptx"]  # a sum of sums


def test_one_warp_keeps_no_shared_memory():
    assert "st.shared" not in _ptx(True, warps=1, block=256)


def test_the_interpreter_agrees():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(2048).astype(np.float16)
    w = rng.standard_normal(2048).astype(np.float16)
    out = np.zeros(1, np.float32)
    with tc.interpret():
        weighted_row_sum[(1,)](x, w, out, BLOCK=2048)
    ref = (x.astype(np.float64) * np.exp(w.astype(np.float64))).sum()
    assert abs(out[0] - ref) <= 1e-4 * abs(ref) + 1e-3
