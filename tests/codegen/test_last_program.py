"""tc.barrier and the last-program pattern: the frontend's tile.barrier, the interpreter
(the last program reduces everyone's stores and resets its counter), and the PTX order
(bar.sync, then one acq_rel gpu-scope atom, and the reset)."""
import re

import numpy as np
import pytest

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

from last_program_kernels import block_sums_kernel, wide_partials_kernel

SIG = "x=f32[?], part=f32[?], counter=i32[?], total=f32[?], BLOCK=256, FIN=512"


def test_barrier_is_a_tile_op_before_the_ticket():
    text = block_sums_kernel.compile(SIG, arch="sm_90a").asm["tile"]
    barrier, ticket = text.index("tile.barrier"), text.index('kind = "add"')
    assert barrier < ticket
    assert 'kind = "xchg"' in text[ticket:]  # the reset


@pytest.mark.parametrize("programs", [1, 37, 1300])
def test_interpreter_last_program_sums_every_block(programs):
    rng = np.random.default_rng(programs)
    x = rng.standard_normal(programs * 256).astype(np.float32)
    part = np.full(programs, np.nan, np.float32)
    counter, total = np.zeros(1, np.int32), np.zeros(1, np.float32)
    with tc.interpret():
        block_sums_kernel[(programs,)](x, part, counter, total, BLOCK=256, FIN=512)
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-5, atol=1e-3)
    assert counter[0] == 0


def test_interpreter_wide_partials():
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    part, total = np.zeros_like(x), np.zeros((1, 64), np.float32)
    counter = np.zeros(1, np.int32)
    with tc.interpret():
        wide_partials_kernel[(8,)](x, part, counter, total, BLOCK=64, N=8)
    np.testing.assert_allclose(total[0], 2 * x.sum(0), rtol=1e-5)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptx_orders_barrier_then_release_ticket(arch):
    k = block_sums_kernel
    compiled = compile_kernel(k, parse_signature(k, SIG), CompileOptions(arch=arch, num_warps=8), use_cache=False)
    ptx = compiled.asm["ptx"]
    ticket = re.search(r"atom\.acq_rel\.gpu\.global\.add\.u32", ptx)
    assert ticket, ptx[:3000]
    before = ptx[:ticket.start()]
    assert "st.global" in before and "bar.sync" in before[before.rindex("st.global"):]
    assert re.search(r"atom\.acq_rel\.gpu\.global\.exch\.b32", ptx[ticket.end():])
    assert compiled.asm.get("cubin"), "ptxas did not run"


def test_barrier_takes_no_arguments():
    @tc.kernel
    def bad(x):
        tc.barrier(1)
    with pytest.raises(tc.CompilationError, match="barrier"):
        bad.compile("x=f32[?]", arch="sm_90a")
