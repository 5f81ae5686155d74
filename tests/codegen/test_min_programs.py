"""The min_programs_per_sm option: validation, the `.minnctapersm` floor ptxas fits registers
to, and lower floors tried where it would make the kernel spill."""
import re

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


@tc.kernel
def scaled_rows(x, w, b, y, BLOCK: tc.constexpr):
    # w and b are loaded once and widened in the loop, a row held across two reductions
    wt = tc.load(w, index=(0,), shape=(BLOCK,))
    bt = tc.load(b, index=(0,), shape=(BLOCK,))
    for row in range(tc.program_id(0), x.shape[0], tc.num_programs(0)):
        t = tc.load(x, index=(row, 0), shape=(1, BLOCK)).astype(tc.float32)
        t = t - tc.sum(t) / BLOCK
        t = t * tc.rsqrt(tc.sum(t * t) / BLOCK + 1e-5)
        tc.store(y, index=(row, 0), tile=(t * wt.astype(tc.float32) + bt.astype(tc.float32)).astype(y.dtype))


_ROWS = "x=bf16[?,?]{v}, w=bf16[?]:div=16, b=bf16[?]:div=16, y=bf16[?,?]{v}, BLOCK=4096".format(
    v=":div=1x16:stride_div=16x1")
TIED = "mov.b32 $0, $1;"   # tie_to's asm in the LLVM IR: a pair of 16-bit values kept in the loop


def _rows(floor):
    return scaled_rows.compile(parse_signature(scaled_rows, _ROWS), arch="sm_90a", num_warps=4,
                               min_programs_per_sm=floor)


@pytest.mark.slow
def test_a_floor_that_spills_keeps_loop_invariants_narrow():
    # LLVM hoists w's and b's conversions out of the loop: 64 f32 per thread live through it
    plain = _rows(0)
    assert TIED not in plain.asm["llvm"] and plain.metadata["ptxas"]["registers"] > 80
    # 6 programs of 128 threads fit 80 registers: only with w and b held as packed bf16
    floored = _rows(6)
    report = floored.metadata["ptxas"]
    assert ".minnctapersm 6\n" in floored.asm["ptx"] and floored.asm["llvm"].count(TIED) == 32
    assert report["registers"] <= 80 and report["spill_stores"] == 0
    # a floor the hoisted form fits keeps it; one neither fits steps down to the highest one
    # fits, here the narrow form's 6
    assert TIED not in _rows(4).asm["llvm"]
    lowered = _rows(7)
    assert ".minnctapersm 6\n" in lowered.asm["ptx"] and lowered.asm["llvm"].count(TIED) == 32
    assert lowered.metadata["ptxas"] == report


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_floor_that_spills_steps_down_to_one_that_fits():
    regs = _compile().metadata["ptxas"]["registers"]
    floored = _compile(min_programs_per_sm=16)   # 32 registers: fewer than the kernel needs
    kept = int(re.search(r"\.minnctapersm (\d+)\n", floored.asm["ptx"]).group(1))
    report = floored.metadata["ptxas"]
    assert 1 < kept < 16 and report["spill_stores"] == 0 and report["registers"] < regs
    assert 128 * -(-report["registers"] // 8) * 8 * kept <= 65536
    # every floor above it spills: asking for the next one lands on it too
    assert _compile(min_programs_per_sm=kept + 1).asm["ptx"] == floored.asm["ptx"]


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


def test_a_floor_beyond_the_targets_sm_is_refused():
    # 16 programs of 128 threads: 2048 threads, more than an sm_86 SM holds (1536, the
    # Target's max_threads_per_sm), which ptxas would ignore with a warning
    with pytest.raises(ValueError, match="from 0 .no floor. to 12 .an SM of sm_86 holds 1536 threads"):
        held.compile(parse_signature(held, SIG), arch="sm_86", num_warps=4, min_programs_per_sm=16)
    c = held.compile(parse_signature(held, SIG), arch="sm_86", num_warps=4, min_programs_per_sm=12)
    assert ".minnctapersm 12" in c.asm["ptx"] and not c.metadata["ptxas"]["warnings"]
