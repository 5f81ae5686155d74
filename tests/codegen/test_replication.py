"""Replicated layouts: atomics, stores and prints act once per element (owner copy only),
and an atomic's old values reach every copy."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

import tilec as tc
from tilec.lowering.codegen.replication import owner_flag, replication, scalar_replication
from tilec.lowering.gpu.layouts import (BlockedLayout, DotOperandLayout, LinearLayout, MmaLayout, NumpyOps,
                                        SliceLayout, default_blocked)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_MMA = MmaLayout(2, (2, 2), (16, 8))
LAYOUTS = [
    (default_blocked((16,), 4, vec=4), (16,)),                     # lanes and warps replicate
    (default_blocked((256,), 4), (16,)),                           # a layout bigger than the tile
    (BlockedLayout((4,), (32,), (1,), (0,)), (2,)),                 # registers replicate too
    (default_blocked((8, 64), 4, vec=4), (8, 64)),                 # exact fit: nothing replicated
    (SliceLayout(0, default_blocked((256, 64), 4)), (64,)),         # a reduction's result
    (SliceLayout(1, BlockedLayout((1, 4), (4, 8), (2, 2), (1, 0))), (8,)),
    (DotOperandLayout(0, _MMA, 2), (32, 16)),                      # A replicated over warps along N
    (DotOperandLayout(1, _MMA, 2), (16, 16)),
    (_MMA, (16, 8)),
    # a lane basis equal to a register basis: replication without a zero basis
    (LinearLayout(((0, 1),), ((0, 1), (1, 0), (2, 0), (0, 2), (0, 0)), ((4, 0),)), (8, 4)),
]


def _simulate(rep, layout, shape, num_warps):
    """Per tile element, how many (thread, register) copies act; and whether each register's
    owner register holds the same element."""
    lane = np.tile(np.arange(32), num_warps)
    warp = np.repeat(np.arange(num_warps), 32)
    ops = NumpyOps()
    coords = layout.coords(shape, lane, warp, ops)
    acting = np.asarray(owner_flag(rep, lane, warp, ops)) == 0
    acting = np.broadcast_to(acting, lane.shape)
    counts = Counter()
    for r, cs in enumerate(coords):
        cs = [np.broadcast_to(np.asarray(c), lane.shape) for c in cs]
        owner = [np.broadcast_to(np.asarray(c), lane.shape) for c in coords[rep.reg_owner[r]]]
        assert all((a == b).all() for a, b in zip(cs, owner)), f"register {r} and its owner differ"
        if rep.reg_owner[r] != r:
            continue
        for t in np.nonzero(acting)[0]:
            counts[tuple(int(c[t]) for c in cs)] += 1
    return counts


@pytest.mark.parametrize("layout,shape", LAYOUTS, ids=[f"{type(lay).__name__}{list(s)}" for lay, s in LAYOUTS])
def test_every_element_has_exactly_one_acting_copy(layout, shape):
    rep = replication(layout, shape)
    counts = _simulate(rep, layout, shape, layout.num_warps)
    every = {tuple(int(i) for i in idx) for idx in np.ndindex(*shape)}
    assert set(counts) == every
    assert set(counts.values()) == {1}


def test_replication_is_found_where_it_is():
    rep = replication(default_blocked((16,), 4, vec=4), (16,))
    assert rep.lane_mask == 0b11100 and rep.warp_mask == 0b11 and not rep.lane_copies_only
    rep = replication(BlockedLayout((4,), (32,), (1,), (0,)), (2,))
    assert rep.reg_owner == (0, 1, 0, 1) and rep.lane_mask == 31 and rep.lane_copies_only
    assert not replication(default_blocked((8, 64), 4, vec=4), (8, 64)).replicated
    linear = LAYOUTS[-1][0]
    assert replication(linear, (8, 4)).lane_mask == 0b10001  # the aliased basis and the zero one
    assert not replication(linear, (8, 4)).lane_copies_only


def test_owner_lane_of_lane_copies_holds_the_same_element():
    layout, shape = BlockedLayout((1,), (32,), (1,), (0,)), (8,)
    rep = replication(layout, shape)
    lane = np.arange(32)
    src = lane & (31 & ~rep.lane_mask)
    (mine,), = layout.coords(shape, lane, 0, NumpyOps())
    (theirs,), = layout.coords(shape, src, 0, NumpyOps())
    assert (np.asarray(mine) == np.asarray(theirs)).all()


def test_scalar_is_owned_by_thread_zero():
    rep = scalar_replication(4)
    flag = owner_flag(rep, np.tile(np.arange(32), 4), np.repeat(np.arange(4), 32), NumpyOps())
    assert np.nonzero(np.asarray(flag) == 0)[0].tolist() == [0]


# ----------------------------------------------------------------------------- PTX
@tc.kernel
def small_tile_atomic(cnt, old_out, BLOCK: tc.constexpr, WIDE: tc.constexpr):
    offs = tc.arange(0, BLOCK)
    old = tc.atomic_add(cnt.ptr + offs, 1)
    # every copy of `old` is stored: the broadcast exposes each thread's value
    wide = old[:, None] + tc.zeros((BLOCK, WIDE), tc.int32)
    tc.store(old_out.ptr + offs[:, None] * WIDE + tc.arange(0, WIDE)[None, :], wide)


@tc.kernel
def small_tile_atomic_unused(cnt, BLOCK: tc.constexpr):
    tc.atomic_add(cnt.ptr + tc.arange(0, BLOCK), 1)


@tc.kernel
def scalar_atomic(c, out, BLOCK: tc.constexpr):
    old = tc.atomic_add(c.ptr, 1)
    tc.store(out.ptr + tc.arange(0, BLOCK), old + tc.zeros((BLOCK,), tc.int32))


@tc.kernel
def print_small(x, BLOCK: tc.constexpr):
    tc.device_print("v", tc.load(x.ptr + tc.arange(0, BLOCK)))


def _ptx(kernel, sig, **kw):
    return kernel.compile(sig, arch="sm_90a", **kw).asm["ptx"]


def test_ptx_atomics_are_guarded_and_old_values_broadcast():
    unused = _ptx(small_tile_atomic_unused, "cnt=i32[?], BLOCK=16", num_warps=4)
    assert re.search(r"setp\.(eq|ne)", unused) and "bar.sync" not in unused and ".shared" not in unused
    used = _ptx(small_tile_atomic, "cnt=i32[?], old_out=i32[?], BLOCK=16, WIDE=32", num_warps=4)
    assert "__tilec_bcast" in used and used.count("bar.sync") >= 2  # copies across warps
    one_warp = _ptx(small_tile_atomic, "cnt=i32[?], old_out=i32[?], BLOCK=8, WIDE=4", num_warps=1)
    assert "__tilec_bcast" not in one_warp and "shfl.sync.idx" in one_warp  # lane copies: a shuffle
    scalar = _ptx(scalar_atomic, "c=i32[?], out=i32[?], BLOCK=128", num_warps=4)
    assert scalar.count("atom.") == 1 and "__tilec_bcast" in scalar


def test_ptx_histogram_atomics_once_per_owned_register():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import histogram
    finally:
        sys.path.pop(0)
    ck = histogram.histogram_kernel.compile(histogram.SIGNATURES["histogram_kernel"], arch="sm_90a")
    gpu_ir = ck.asm["gpu"]
    line = next(ln for ln in gpu_ir.splitlines() if "tile.atomic_rmw" in ln)
    from tilec.ir import parse
    module = parse(gpu_ir)
    op = next(o for o in module.walk() if o.name == "tile.atomic_rmw")
    t = op.operands[0].type
    rep = replication(t.encoding, tuple(t.shape))
    assert rep.threads_replicated, line  # the one-hot sum leaves copies across lanes
    owned = sum(1 for r, o in enumerate(rep.reg_owner) if o == r)
    assert ck.asm["ptx"].count("atom.") == owned


def test_ptx_print_once_per_element():
    ptx = _ptx(print_small, "x=f32[?], BLOCK=16", num_warps=4)
    assert ptx.count("call.uni") <= 4 and re.search(r"setp\.(eq|ne)", ptx)


# ----------------------------------------------------------------------------- GPU
@pytest.fixture
def gpu():
    from tilec.runtime import gpu_available
    if not gpu_available():
        pytest.skip("needs an NVIDIA GPU and the CUDA driver (none found)")


@pytest.mark.gpu
def test_gpu_atomic_into_small_tile_counts_once_and_returns_everywhere(gpu):
    for block, wide, warps in ((16, 32, 4), (8, 4, 1), (4, 64, 8)):
        start = np.arange(block, dtype=np.int32) + 100
        cnt = tc.from_numpy(start.copy())
        out = tc.from_numpy(np.zeros(block * wide, np.int32))
        small_tile_atomic[(1,)](cnt, out, BLOCK=block, WIDE=wide, num_warps=warps)
        np.testing.assert_array_equal(cnt.to_numpy(), start + 1)
        np.testing.assert_array_equal(out.to_numpy().reshape(block, wide), np.repeat(start[:, None], wide, 1))


@pytest.mark.gpu
def test_gpu_scalar_atomic_once_per_program(gpu):
    c = tc.from_numpy(np.array([7], np.int32))
    out = tc.from_numpy(np.zeros(128, np.int32))
    for p in range(3):
        scalar_atomic[(1,)](c, out, BLOCK=128, num_warps=4)
        assert c.to_numpy()[0] == 8 + p
        assert (out.to_numpy() == 7 + p).all()


@pytest.mark.gpu
def test_gpu_histogram_example_exact(gpu):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "histogram.py")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
