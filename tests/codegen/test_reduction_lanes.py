"""Cross-warp reductions on the CPU: the butterfly's lanes compute bit-identical partials
(no fma contraction of a lane's own product into a combine, even under fast_math), and a
warp's partial is written to shared memory by one lane, not by its 32 copies (a
write-after-write hazard racecheck reports, with values that may differ)."""
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


def _butterfly_combines(ptx):
    """The instruction that combines each shuffled value with the lane's own one."""
    lines = ptx.splitlines()
    out = []
    for i, ln in enumerate(lines):
        m = re.search(r"shfl\.sync\.bfly\.b32\s+(%r\d+),", ln)
        if m:
            use = next(x for x in lines[i + 1:] if re.search(re.escape(m.group(1)) + r"\b", x))
            out.append(use.split()[0])
    return out


@pytest.mark.parametrize("fast_math", [False, True])
def test_butterfly_combines_round_every_step(fast_math):
    ops = _butterfly_combines(_ptx(fast_math))
    assert len(ops) == 5 and all(op == "add.rn.f32" for op in ops), ops


def test_warp_partials_are_stored_by_one_lane():
    c = weighted_row_sum.compile("x=f16[?], w=f16[?], out=f32[?], BLOCK=2048", arch="sm_90a", num_warps=8,
                                 fast_math=True)
    assert c.asm["ptx"].count("st.shared") == 1
    # the store sits in the block only the owner lane enters (codegen's guard)
    blocks = re.split(r"\n(?=[\w.]+:)", c.asm["llvm"])
    holding = [blk for blk in blocks if re.search(r"store float .*ptr addrspace\(3\)", blk)]
    assert len(holding) == 1 and holding[0].startswith("mask.then"), holding


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
