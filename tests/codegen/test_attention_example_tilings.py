"""The attention examples' tilings (flash_attention.blocks_for, flash_attention_bwd.blocks_for),
as the examples and bench/attention.py launch them, assemble with no spills on sm_90a and sm_80
(issue 44's "ptxas assembles the listed configurations for sm_90a and sm_80 with zero spill
bytes")."""
from __future__ import annotations

import pytest

from tilec.target import Target

from example_modules import load_example

pytestmark = pytest.mark.slow   # ptxas on 24 kernels

FWD, BWD = load_example("flash_attention"), load_example("flash_attention_bwd")


def _report(kernel, sig, arch, warps):
    compiled = kernel.compile(sig, arch=arch, num_warps=warps, fast_math=True)
    return compiled.metadata["ptxas"]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [1024, 16384])
def test_the_forward_tiling_assembles_without_spills(arch, d, causal, seq):
    bm, bn, warps = FWD.blocks_for(d, Target.from_arch(arch), seq=seq, causal=causal)
    sig = FWD.SIGNATURES["attention_fwd"].replace("CAUSAL=True", f"CAUSAL={causal}") \
        .replace("BM=128, BN=64, D=64", f"BM={bm}, BN={bn}, D={d}")
    report = _report(FWD.attention_fwd, sig, arch, warps)
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["attention_bwd_dkdv", "attention_bwd_dq"])
def test_the_backward_tilings_assemble_without_spills(arch, d, causal, name):
    bm, bn, warps = BWD.blocks_for(d, Target.from_arch(arch))[name]
    sig = BWD.SIGNATURES[name].replace("CAUSAL=True", f"CAUSAL={causal}") \
        .replace("BM=64, BN=64, D=64", f"BM={bm}, BN={bn}, D={d}")
    report = _report(getattr(BWD, name), sig, arch, warps)
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


def test_targets_without_wgmma_take_the_narrower_tilings():
    h100, a100 = Target.from_arch("sm_90a"), Target.from_arch("sm_80")
    assert FWD.blocks_for(128, h100) == (128, 64, 8) and FWD.blocks_for(128, a100) == (128, 32, 8)
    assert FWD.blocks_for(64, a100) == FWD.blocks_for(64, h100)
    assert FWD.blocks_for(128, a100, seq=1024) == (128, 32, 8)
    assert BWD.blocks_for(128, h100) is BWD.BLOCKS[128] and BWD.blocks_for(128, a100) is BWD.BLOCKS_MMA[128]
    assert BWD.blocks_for(64, a100) == BWD.blocks_for(64, h100)


def test_short_sequences_take_one_warpgroup_at_head_dim_128():
    h100 = Target.from_arch("sm_90a")
    assert FWD.blocks_for(128, h100, seq=1024) == (64, 64, 4)
    assert FWD.blocks_for(128, h100, seq=1025) == (128, 64, 8)
    assert FWD.blocks_for(128, h100, seq=4096, causal=True) == (64, 64, 4)
    assert FWD.blocks_for(128, h100, seq=4097, causal=True) == (128, 64, 8)
    assert FWD.blocks_for(64, h100, seq=1024) == (128, 64, 8)
