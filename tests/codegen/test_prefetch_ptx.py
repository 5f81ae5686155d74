"""prefetch_loads end to end on the CPU: the staged kernels give numpy's results under the
interpreter, and their PTX copies with cp.async, reads the slots back from shared memory and
assembles (ptxas) for sm_80 and sm_90a without spills."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilec as tc

from prefetch_kernels import (ref_softmax, staged_axpy_rows, staged_column_sums, staged_softmax_rows,
                              staged_sum_near_i32_max)


@pytest.mark.parametrize("grid,stages", [(1, 3), (3, 2), (7, 4)])
def test_staged_rows_run_under_the_interpreter(grid, stages):
    rng = np.random.default_rng(grid)
    x = (5 * rng.standard_normal((11, 37))).astype(np.float32)
    x[4, :20] = -np.inf
    out = np.zeros_like(x)
    with tc.interpret():
        staged_softmax_rows[(grid,)](x, out, STAGES=stages, BLOCK=64)
    np.testing.assert_allclose(out, ref_softmax(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("down", [False, True])
def test_two_staged_loads_walk_either_way_under_the_interpreter(down):
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((2, 9, 21)).astype(np.float32)
    out = np.zeros_like(x)
    with tc.interpret():
        staged_axpy_rows[(4,)](x, y, out, DOWN=down, STAGES=3, BLOCK=32)
    np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6)


SIGNATURES = [
    (staged_softmax_rows, "x=bf16[?,?]:div=1x16:stride_div=16x1, out=bf16[?,?]:div=1x16:stride_div=16x1, "
                          "STAGES=3, BLOCK=4096", 8, 3 * 4096 * 2),
    (staged_axpy_rows, "x=f32[?,?]:div=1x16:stride_div=16x1, y=f16[?,?]:div=1x16:stride_div=16x1, "
                       "out=f32[?,?]:div=1x16:stride_div=16x1, DOWN=True, STAGES=2, BLOCK=1024", 4,
     2 * 1024 * (4 + 2)),
    (staged_column_sums, "x=f32[?,?]:div=1x16:stride_div=16x1, out=f32[?], STAGES=4, ROWS=8, BLOCK=128", 4,
     4 * 8 * 128 * 4),
]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel,sig,warps,staged", SIGNATURES, ids=lambda v: getattr(v, "__name__", None))
def test_staged_kernels_copy_with_cp_async(kernel, sig, warps, staged, arch):
    compiled = kernel.compile(kernel.specialization(sig), arch=arch, num_warps=warps, fast_math=True)
    ptx = compiled.asm["ptx"]
    copies = re.findall(r"cp\.async\.(?:cg|ca)\.shared\.global \[[^]]+\], \[[^]]+\], (\d+)", ptx)
    assert copies and set(copies) <= {"16", "8", "4"}, copies
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group" in ptx
    assert re.search(r"ld\.shared\.v\d", ptx)                      # the slot read back as vectors
    assert not re.search(r"ld\.global(\.nc)?\.v\d\.(b|f|u)", ptx)  # no load of the row left in registers
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and not ptxas["warnings"], ptxas
    # S slots of each staged tile, besides the reductions' scratch
    assert staged <= compiled.metadata["shared"] < staged + 4096


def test_without_num_stages_the_loads_stay_in_registers():
    sig = ("x=bf16[?,?]:div=1x16:stride_div=16x1, out=bf16[?,?]:div=1x16:stride_div=16x1, "
           "STAGES=1, BLOCK=4096")
    ptx = staged_softmax_rows.compile(staged_softmax_rows.specialization(sig), arch="sm_90a", num_warps=8,
                                      fast_math=True).asm["ptx"]
    assert "cp.async" not in ptx and "ld.global.v4" in ptx


@pytest.mark.parametrize("arch,slots", [("sm_80", 1), ("sm_90a", 2)])
def test_stages_that_do_not_fit_read_their_slot_first(arch, slots):
    # 3 stages of 16384 f32 + f16 elements (96 KB each) fit neither in sm_80's 163 KB nor in
    # sm_90a's 227 KB (less the 16 KB kept for other buffers): the loop reads first, with 1
    # and 2 slots, keeping as many iterations in flight (sm_90a: the 2 that 3 stages ask for).
    sig = ("x=f32[?,?]:div=1x16:stride_div=16x1, y=f16[?,?]:div=1x16:stride_div=16x1, "
           "out=f32[?,?]:div=1x16:stride_div=16x1, DOWN=False, STAGES=3, BLOCK=16384")
    compiled = staged_axpy_rows.compile(staged_axpy_rows.specialization(sig), arch=arch, num_warps=16,
                                        fast_math=True)
    ptx = compiled.asm["ptx"]
    per_stage = 16384 * (4 + 2)
    assert slots * per_stage <= compiled.metadata["shared"] < slots * per_stage + 4096
    loop = ptx[ptx.index("cp.async.wait_group"):]
    # wait for the slot, read it, refill it: the first read precedes the first refill
    assert re.search(r"ld\.shared\.v\d", loop).start() < loop.index("cp.async.cg")
    assert re.findall(r"cp\.async\.wait_group\s+(\d+)", ptx)[0] == str(slots - 1)   # stages - 2
    ptxas = compiled.metadata["ptxas"]
    assert ptxas["spill_stores"] == 0 and not ptxas["warnings"], ptxas


def test_a_loop_ending_near_i32_max_is_staged():
    # k + 2 * 256 wraps past 2**31 - 1 in the last iteration: the interpreter (a plain
    # range) sums every element once and the loop's load becomes cp.async copies. That the
    # wrapped iterations issue none is checked on the GPU (tests/runtime/test_prefetch_gpu.py)
    # and in the pass's golden text (tests/golden/prefetch_loads/three_stages_row_loop.ir).
    ub = 2**31 - 257
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    out = np.zeros(1, np.float32)
    with tc.interpret():
        staged_sum_near_i32_max[(1,)](x, out, ub - 1000, ub, STAGES=3, BLOCK=256)
    np.testing.assert_allclose(out[0], x.astype(np.float64).sum(), rtol=1e-5, atol=1e-4)
    sig = "x=f32[?], out=f32[?], lb=i32, ub=i32, STAGES=3, BLOCK=256"
    ptx = staged_sum_near_i32_max.compile(staged_sum_near_i32_max.specialization(sig), arch="sm_90a",
                                          num_warps=4).asm["ptx"]
    assert "cp.async.commit_group" in ptx and not re.search(r"ld\.global(\.nc)?\.f32", ptx)
