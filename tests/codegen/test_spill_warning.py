"""A kernel whose values do not fit the registers compiles with a SpillWarning naming it;
one that fits compiles silently. Both need ptxas (its report is what tells)."""
import warnings

import pytest

import tilec as tc
from tilec.lowering.target import find_ptxas

pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")


@tc.kernel
def hold_tile(x, y, n, BLOCK: tc.constexpr):
    # Two BLOCK x BLOCK f32 tiles live across a run-time loop: at BLOCK = 64 on one warp
    # that is 256 values per thread, more than the 255 registers a thread may have.
    t = tc.load(x, index=(0, 0), shape=(BLOCK, BLOCK), padding=0.0)
    acc = tc.zeros((BLOCK, BLOCK), tc.float32)
    for _ in range(n):
        acc = acc * t + t
    tc.store(y, index=(0, 0), tile=acc)


SIG = "x=f32[?,?], y=f32[?,?], n=i32, BLOCK={block}"


@pytest.mark.slow
def test_a_spilling_kernel_warns_and_records_it():
    with pytest.warns(tc.SpillWarning, match=r"kernel 'hold_tile' \(sm_80, 1 warps\) uses \d+ registers and spills"):
        compiled = hold_tile.compile(SIG.format(block=64), arch="sm_80", num_warps=1)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] > 0
    assert any("spills" in w for w in compiled.metadata["warnings"])
    # compiled again, the cached kernel still says so
    with pytest.warns(tc.SpillWarning, match="hold_tile"):
        hold_tile.compile(SIG.format(block=64), arch="sm_80", num_warps=1)


def test_a_kernel_that_fits_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error", tc.SpillWarning)
        compiled = hold_tile.compile(SIG.format(block=16), arch="sm_80", num_warps=4)
    assert compiled.metadata["ptxas"]["spill_stores"] == 0
    assert "warnings" not in compiled.metadata
