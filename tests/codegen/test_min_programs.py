"""The min_programs_per_sm option: validation, the `.minnctapersm` floor ptxas fits registers
to, and the floor dropped where it would make the kernel spill."""
import pytest

import tilec as tc
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

SIG = "x=f32[?], out=f32[?], BLOCK=1024"


@tc.kernel
def held(x, out, BLOCK: tc.constexpr):
    # the tile stays live across its reductions: 8 f32 per thread at 4 warps, 43 registers
    t = tc.load(x, index=(0,), shape=(BLOCK,), padding=float("-inf"))
    m = tc.max(t)
    e = tc.exp(t - m)
    tc.store(out, index=(0,), tile=e / tc.sum(e) + t)


def _compile(**opts):
    return held.compile(parse_signature(held, SIG), arch="sm_90a", num_warps=4, **opts)


@pytest.mark.parametrize("bad", [True, -1, 1.5, "4", 17, 33])
def test_bad_floor_is_a_value_error(bad):
    with pytest.raises(ValueError, match="min_programs_per_sm must be an int from 0"):
        CompileOptions(num_warps=4, min_programs_per_sm=bad).validated()


@pytest.mark.parametrize("warps,most", [(1, 32), (4, 16), (8, 8), (32, 2)])
def test_floor_up_to_what_an_sm_holds(warps, most):
    CompileOptions(num_warps=warps, min_programs_per_sm=most).validated()
    with pytest.raises(ValueError, match=f"to {most} "):
        CompileOptions(num_warps=warps, min_programs_per_sm=most + 1).validated()


def test_floor_lowers_registers_to_fit_the_programs():
    free = _compile()
    assert ".minnctapersm" not in free.asm["ptx"]
    regs = free.metadata["ptxas"]["registers"]
    # the most programs of 128 threads that regs (allocated in eights) allows, and one more
    programs = 65536 // (128 * -(-regs // 8) * 8) + 1
    floored = _compile(min_programs_per_sm=programs)
    report = floored.metadata["ptxas"]
    assert f".minnctapersm {programs}\n" in floored.asm["ptx"]
    assert report["registers"] < regs and 128 * -(-report["registers"] // 8) * 8 * programs <= 65536
    assert report["spill_stores"] == 0


def test_a_floor_that_spills_is_dropped():
    free = _compile()
    floored = _compile(min_programs_per_sm=16)   # 32 registers: fewer than the kernel needs
    assert ".minnctapersm" not in floored.asm["ptx"]
    assert floored.metadata["ptxas"] == free.metadata["ptxas"]


def test_floor_is_part_of_the_cache_key():
    assert _compile(min_programs_per_sm=2).asm["ptx"] != _compile().asm["ptx"]


def test_interpreter_takes_the_option():
    import numpy as np
    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    out = np.empty_like(x)
    with tc.interpret():
        held[(1,)](x, out, BLOCK=1024, min_programs_per_sm=4)
    e = np.exp(x - x.max())
    np.testing.assert_allclose(out, e / e.sum() + x, rtol=1e-5, atol=1e-6)


def test_a_floor_beyond_an_sm_86_is_ignored_with_a_warning():
    # 16 programs of 128 threads: 2048 threads, more than an sm_86 SM holds (1536)
    c = held.compile(parse_signature(held, SIG), arch="sm_86", num_warps=4, min_programs_per_sm=16)
    assert any("minnctapersm will be ignored" in w for w in c.metadata["ptxas"]["warnings"])
