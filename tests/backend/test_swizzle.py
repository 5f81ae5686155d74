"""Layout conversions through shared memory: the scratch layout chosen by allocate_shared is
checked by simulating the 32 banks for every warp access of the store and the load (an
independent count, lane by lane), and a 2-D transpose compiles to one conversion with one
barrier and 16-byte global accesses."""
import re

import pytest

import tilec as tc
from tilec.lowering.gpu.layouts import BlockedLayout, LinearLayout, SharedLayout
from tilec.lowering.gpu.swizzle import bank_wavefronts, conversion_layout, smem_vector
from tilec.lowering.codegen.rules_shape import thread_coords
from tilec.lowering.codegen.indexing import IndexOps
from tilec.options import CompileOptions


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))


def _extra_wavefronts(layout, shape, esize, smem):
    """Wavefronts beyond the minimum over every warp instruction, counted lane by lane: lanes
    are served in phases of 128 bytes; in a phase, distinct 4-byte words of one bank serialize."""
    v = smem_vector(layout, shape, esize, smem)
    nwords = max(1, v * esize // 4)
    per_phase = 32 // nwords
    extra = 0
    ops = IndexOps(None)
    for warp in range(layout.num_warps):
        per_lane = [thread_coords(layout, shape, lane, warp) for lane in range(32)]
        for r in range(0, len(per_lane[0]), v):
            for p0 in range(0, 32, per_phase):
                banks = {}
                for lane in range(p0, p0 + per_phase):
                    first = smem.offset(shape, per_lane[lane][r], ops) * esize // 4
                    for w in range(first, first + nwords):
                        banks.setdefault(w % 32, set()).add(w)
                extra += max(len(ws) for ws in banks.values()) - 1
    return extra


ROW4 = BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])
COL4 = BlockedLayout([4, 1], [16, 2], [1, 4], [0, 1])
ROW8 = BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
COL8 = BlockedLayout([8, 1], [8, 4], [1, 4], [0, 1])


@pytest.mark.parametrize("src,dst,esize,budget", [
    (ROW8, COL8, 2, 0),                     # f16 transpose: conflict free on both sides
    (ROW4, COL4, 4, 128),                   # f32 transpose: see docs (v4 columns, 2-way on one side)
    (BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0]), BlockedLayout([1, 1], [32, 1], [1, 4], [0, 1]), 4, 0),
])
def test_conversion_scratch_has_no_bank_conflicts(src, dst, esize, budget):
    shape = (64, 64)
    smem = conversion_layout(src, dst, shape, esize)
    store = _extra_wavefronts(src, shape, esize, smem)
    load = _extra_wavefronts(dst, shape, esize, smem)
    assert (store, load) == bank_wavefronts(src, dst, shape, esize, smem)
    assert store + load <= budget
    plain = SharedLayout(1, 1, 1, (1, 0))
    assert sum(bank_wavefronts(src, dst, shape, esize, plain)) > store + load  # the swizzle pays


@tc.kernel
def _transpose(x, out):
    i = tc.program_id(0)
    j = tc.program_id(1)
    tc.store(out, index=(j, i), tile=tc.load(x, index=(i, j), shape=(64, 64)).T)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,vec", [("f16", "v4.b32"), ("f32", "v4.b32")])
def test_transpose_goes_through_one_swizzled_conversion(dtype, vec):
    from tilec.compiler import compile_kernel
    sig = f"x={dtype}[?,?]:div=16x16:stride_div=16x1, out={dtype}[?,?]:div=16x16:stride_div=16x1"
    for arch in ("sm_80", "sm_90a"):
        ck = compile_kernel(_transpose, _transpose.specialization(sig), CompileOptions(arch=arch))
        gpu = ck.asm["gpu"]
        assert gpu.count("gpu.convert_layout") == 1 and "_smem_sync = false" in gpu
        assert "max_phase = 1," not in gpu.split("gpu.convert_layout")[1].split("\n")[0]
        ptx = ck.asm["ptx"]
        assert ptx.count("bar.sync") == 1
        assert f"ld.global.{vec}" in ptx or f"ld.global.nc.{vec}" in ptx
        assert f"st.global.{vec}" in ptx and not re.search(r"st\.global\.b", ptx)
        assert ck.metadata["ptxas"]["spill_stores"] == 0
