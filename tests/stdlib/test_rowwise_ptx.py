"""Every kernel of the row-wise stdlib modules: IR round trip, and PTX for sm_80 and
sm_90a that ptxas assembles with no spills, at the warp count the entry points use."""
from __future__ import annotations

import importlib
import math

import pytest

from tilec import Kernel

MODULES = ["softmax", "softmax_dim", "norms", "cross_entropy", "reductions"]
TILE_CONSTEXPRS = ("ROWS", "BLOCK", "BLOCK_R", "BLOCK_I")


def _module(name):
    return importlib.import_module(f"tilec.stdlib_kernels.{name}")


def _cases():
    for name in MODULES:
        mod = _module(name)
        for kernel, sig in list(mod.SIGNATURES.items()) + list(mod.EXTRA_SIGNATURES):
            yield pytest.param(name, kernel, sig, id=f"{kernel}[{sig}]")


# Kernels launched at a fixed warp count rather than by the tile rule.
# (reduce_inner_kernel and its windowed form: tile bytes / 2048, at most 8; every signature
# listed is a full tile.)
FIXED_WARPS = {"reduce_inner_window_kernel": 8}


def _num_warps(spec, kernel: str = "") -> int:
    # The entry points' rule (`_common.row_config`): tile elements / 512, 1..16.
    # 8192-column tiles at 32 warps, 4096 at 16, 2048 at 8 (`loop_config`)
    if kernel in ("ce_loop_kernel", "ce_grad_chunk_kernel"):
        ce = _module("cross_entropy")
        return {ce.WIDE_LOOP_BLOCK: ce.WIDE_LOOP_WARPS, ce.LOOP_BLOCK: ce.LOOP_WARPS,
                ce.SHORT_LOOP_BLOCK: ce.SHORT_LOOP_WARPS}[spec.constexprs["BLOCK"]]
    if kernel in FIXED_WARPS:
        return FIXED_WARPS[kernel]
    if kernel in ("ce_reduce_kernel", "ce_scale_kernel"):  # their own rule: few elements per thread
        return _module("cross_entropy").reduce_config(spec.constexprs["BLOCK"])[1]
    if kernel == "reduce_inner_kernel" or kernel.startswith("softmax_dim_"):   # `softmax_dim.dim_config`
        tile = spec.constexprs["BLOCK_R"] * spec.constexprs["BLOCK_I"]
        if kernel == "softmax_dim_tile_kernel":   # 64 elements per thread, 1..16 warps
            return min(max(tile // 2048, 1), 16)
        # column strips: 2 KB of tile per warp (`reductions.strip_tile`)
        return min(max(tile * spec.params[0].type.dtype.itemsize // 2048, 1), 8)
    elems = math.prod(v for k, v in spec.constexprs.items() if k in TILE_CONSTEXPRS)
    return min(max(elems // 512, 1), 16)


@pytest.mark.parametrize("name", MODULES)
def test_options_are_the_entry_points_warp_counts(name):
    # tests/test_ptxas.py assembles SIGNATURES with OPTIONS: they must be what the entry points use.
    mod = _module(name)
    for kernel, sig in mod.SIGNATURES.items():
        spec = getattr(mod, kernel).specialization(sig)
        options = dict(mod.OPTIONS[kernel])
        # a merge launched as a dependent of the launch before it (test_dependent_launches.py)
        assert options.pop("dependent_launch", True) is True, kernel
        assert options == {"num_warps": _num_warps(spec, kernel), "fast_math": True}, kernel


@pytest.mark.parametrize("name", MODULES)
def test_signatures_name_every_kernel(name):
    mod = _module(name)
    kernels = {k for k, v in vars(mod).items() if isinstance(v, Kernel)}
    assert kernels and set(mod.SIGNATURES) == kernels


@pytest.mark.slow
@pytest.mark.parametrize("name,kernel,sig", list(_cases()))
def test_kernel_ir_round_trips(name, kernel, sig):
    from tilec.ir import parse, print_module, verify
    k = getattr(_module(name), kernel)
    module = k.ir(k.specialization(sig))
    assert verify(parse(print_module(module))) == module


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name,kernel,sig", list(_cases()))
def test_kernel_assembles_without_spills(name, kernel, sig, arch):
    k = getattr(_module(name), kernel)
    spec = k.specialization(sig)
    # fast_math as the entry points launch (`_common.launch`)
    compiled = k.compile(spec, arch=arch, num_warps=_num_warps(spec, kernel), fast_math=True)
    assert f".entry {compiled.name}" in compiled.asm["ptx"]
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and ptxas["spill_loads"] == 0, ptxas


@pytest.mark.slow
@pytest.mark.parametrize("kernel,sig", [
    ("softmax.softmax_tile_kernel", "x=bf16[?,?], out=bf16[?,?], LOG=False, ROWS=1, BLOCK=8192"),
    ("norms.norm_tile_kernel", "x=f16[?,?], w=f16[?], b=f16[?], y=f16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                               "eps=f32, RMS=False, HAS_W=True, HAS_B=True, STATS=True, ROWS=1, BLOCK=8192"),
    ("norms.norm_tile_kernel", "x=f32[?,?], w=f32[?], b=f32[?], y=f32[?,?], mean_out=f32[?], rstd_out=f32[?], "
                               "eps=f32, RMS=True, HAS_W=True, HAS_B=False, STATS=False, ROWS=1, BLOCK=8192"),
])
def test_big_tiles_at_32_elements_per_thread_assemble_without_spills(kernel, sig):
    # The entry points launch these at 8 warps (`row_config(big_tile_per_thread=32)`).
    from tilec.stdlib_kernels._common import row_config
    assert row_config(8192, 100, big_tile_per_thread=32).num_warps == 8
    mod, name = kernel.split(".")
    k = getattr(_module(mod), name)
    compiled = k.compile(k.specialization(sig), arch="sm_90a", num_warps=8, fast_math=True)
    ptxas = compiled.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and ptxas["spill_loads"] == 0, ptxas
