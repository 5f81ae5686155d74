"""persistent=True at launch: the hidden grid parameters, the clamped 1-D grid, and (marker gpu)
results equal to the plain launch's for grids smaller and far larger than the device."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tilec as tc
from tilec import dtypes as dt
from tilec.abi import param_slots
from tilec.compiled import CompiledKernel
from tilec.ir.types import ScalarType
from tilec.runtime import cache, launcher, packing


# ----------------------------------------------------------------------------- kernels
@tc.kernel
def grid_codes(out, BLOCK: tc.constexpr):
    """out[y, x*BLOCK:(x+1)*BLOCK] = a code of (x, y, num_programs(0), num_programs(1)) per lane."""
    x = tc.program_id(0)
    y = tc.program_id(1)
    code = x + 7919 * y + 104729 * tc.num_programs(0) + 15485863 * tc.num_programs(1)
    tc.store(out, index=(y, x), tile=(tc.arange(0, BLOCK) + code)[None, :])


@tc.kernel
def row_sums(x, out, BLOCK: tc.constexpr):
    """out[row] = sum(x[row, :]): a reduction across warps (through shared memory) per row."""
    row = tc.program_id(0)
    t = tc.load(x, index=(row, 0), shape=(1, BLOCK))
    tc.store(out, index=(row,), tile=tc.sum(t, axis=1))


# ----------------------------------------------------------------------------- CPU
def _hidden_grid_kernel():
    slots = param_slots([ScalarType(dt.int32), ScalarType(dt.float32)], grid=True)
    return CompiledKernel(name="k", asm={}, metadata={"num_warps": 4, "persistent": True}, params=slots,
                          arg_names=["n", "alpha"])


def test_grid_slots_follow_the_arguments():
    kinds = [(s.kind, s.arg, s.dim, s.name) for s in _hidden_grid_kernel().params]
    assert kinds == [("scalar", 0, -1, "a0"), ("scalar", 1, -1, "a1"), ("grid", 2, 0, "grid_x"),
                     ("grid", 3, 1, "grid_y"), ("grid", 4, 2, "grid_z")]
    assert all(s.dtype is dt.int32 for s in _hidden_grid_kernel().params[2:])


def test_packer_writes_the_requested_grid():
    pack, addr = packing.build_packer(_hidden_grid_kernel(), ["alpha", "n"])  # Python order differs
    pack([2.5, 9], [None, None], (70000, 3, 2))
    arr = (ctypes.c_void_p * 5).from_address(addr)
    read = [ctypes.c_int32, ctypes.c_float, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    assert [t.from_address(arr[i]).value for i, t in enumerate(read)] == [9, 2.5, 70000, 3, 2]


def _prepared(programs: int, cluster: int = 1):
    p = launcher.PreparedLaunch.__new__(launcher.PreparedLaunch)
    p.name, p.persistent, p.cluster = "k", programs, cluster
    return p


class _Recorder:
    def __init__(self):
        self.grids = []

    def __call__(self, vals, infos, grid):
        self.grids.append(grid)


@pytest.mark.parametrize("programs, grid, launched", [(265, (1000, 1, 1), 264), (265, (6, 1, 1), 6),
                                                      (1, (8, 1, 1), 2)])
def test_persistent_clusters_launch_whole_clusters(programs, grid, launched):
    pack = _Recorder()
    assert launcher._persistent_grid(_prepared(programs, 2), pack, (), (), *grid) == (launched, 1, 1)
    assert pack.grids == [grid]


@pytest.mark.parametrize("grid, launched", [((1000, 1, 1), 264), ((5, 2, 1), 10), ((11, 3, 8), 264),
                                            ((264, 1, 1), 264), ((0, 4, 1), 0), ((7, 0, 3), 0)])
def test_launch_grid_is_clamped_to_what_fits(grid, launched):
    pack = _Recorder()
    assert launcher._persistent_grid(_prepared(264), pack, [], [], *grid) == (launched, 1, 1)
    assert pack.grids == [grid]  # the kernel sees the grid that was asked for


def test_program_ids_must_fit_in_32_bits():
    pack = _Recorder()
    assert launcher._persistent_grid(_prepared(264), pack, [], [], 2 ** 31 - 264, 1, 1) == (264, 1, 1)
    with pytest.raises(ValueError, match=r"persistent=True counts program ids in 32 bits.*at most 2147483384"):
        launcher._persistent_grid(_prepared(264), pack, [], [], 2 ** 16, 2 ** 15, 1)
    assert len(pack.grids) == 1  # nothing packed for the refused launch


def test_grid_slots_survive_the_disk_cache(cache_dir):
    ck = _hidden_grid_kernel()
    ck.asm = {"ptx": "// empty"}
    cache.store("a" * 40, ck)
    cache.clear_memory()
    back = cache.lookup("a" * 40)
    assert back.params == ck.params and back.metadata["persistent"] is True


# ----------------------------------------------------------------------------- GPU


def _codes(torch, grid, block=4, **options):
    gx, gy = grid
    out = torch.full((gy, gx * block), -1, dtype=torch.int32, device="cuda")
    grid_codes[grid](out, BLOCK=block, **options)
    torch.cuda.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("scale", ["small", "sm_count", "large"])
def test_2d_grid_same_as_plain_launch(torch, gpu, scale):
    sm = gpu.multiprocessors
    grid = {"small": (3, 2), "sm_count": (sm, 1), "large": (sm * 9 + 5, 13)}[scale]
    plain = _codes(torch, grid)
    assert (plain >= 0).all()
    looped = _codes(torch, grid, persistent=True)
    assert torch.equal(looped, plain)
    prepared = grid_codes.launch_state.last[1]
    res = prepared.loaded.resources
    assert prepared.compiled.metadata["persistent"]
    assert prepared.persistent == sm * res.max_blocks_per_sm > 0


@pytest.mark.gpu
def test_reduction_across_warps_in_every_virtual_program(torch, gpu):
    rows = gpu.multiprocessors * 40 + 17  # many virtual programs per launched one
    x = torch.randn(rows, 1024, device="cuda", dtype=torch.float32)
    out = torch.zeros(rows, device="cuda", dtype=torch.float32)
    row_sums[(rows,)](x, out, BLOCK=1024, num_warps=8, persistent=True)
    torch.testing.assert_close(out, x.double().sum(dim=1).float(), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_empty_grid_launches_nothing(torch):
    out = torch.full((2, 8), -1, dtype=torch.int32, device="cuda")
    grid_codes[(0, 2)](out, BLOCK=4, persistent=True)
    torch.cuda.synchronize()
    assert (out == -1).all()


@pytest.mark.gpu
def test_launch_compiled_persistent(torch, gpu):
    grid = (gpu.multiprocessors * 3 + 1, 4)
    want = _codes(torch, grid)
    out = torch.full_like(want, -1)
    compiled = grid_codes.compile(out, BLOCK=4, persistent=True)
    launcher.launch_compiled(compiled, grid, out)
    torch.cuda.synchronize()
    assert torch.equal(out, want)


@pytest.mark.gpu
@pytest.mark.parametrize("bm,bn,bk,warps,stages", [(128, 128, 64, 8, 4), (64, 64, 32, 4, 3)])
# odd shapes (element-wise loads), and aligned ones (cp.async / TMA rings) with an odd number of
# K steps, so that a ring's slots end a tile in different phases; more tiles than SMs either way
@pytest.mark.parametrize("m,n,k", [(777, 3001, 515), (2048, 2048, 576)])
def test_stdlib_matmul_kernel_persistent_matches_torch(torch, m, n, k, bm, bn, bk, warps, stages):
    from tilec.stdlib_kernels.matmul import matmul_kernel
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    want = a.double() @ b.double() + bias.double()
    tiles = tc.cdiv(m, bm) * tc.cdiv(n, bn)
    consts = dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, HAS_BIAS=True, ACT="none", TF32=False, SCALED=False)
    outs = []
    for persistent in (False, True):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul_kernel[(tiles,)](a, b, c, bias, 1.0, num_warps=warps, num_stages=stages, persistent=persistent,
                                **consts)
        torch.cuda.synchronize()
        outs.append(c)
    plain, looped = outs
    assert matmul_kernel.launch_state.last[1].compiled.metadata["persistent"]
    err = (looped.double() - want).abs().max().item()
    assert err <= 1.6e-2 * want.abs().max().item(), f"max error {err}"
    assert torch.equal(looped, plain)  # the same tiles, computed the same way
