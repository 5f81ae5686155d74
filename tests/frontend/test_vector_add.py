"""First slice: a vector add through specialization, the frontend and the interpreter."""
import numpy as np

import tilec as tc
from tilec.ir import parse, verify
from tilec.specialize import specialize


@tc.kernel
def vector_add(x, y, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    tc.store(out.ptr + offs, tc.load(x.ptr + offs, mask=mask) + tc.load(y.ptr + offs, mask=mask), mask=mask)


def test_vector_add_ir_verifies_and_round_trips():
    x = np.zeros(100, np.float32)
    spec, args = specialize(vector_add, (x, x, x, 100), {"BLOCK": 64})
    assert str(spec) == "x=f32[?], y=f32[?], out=f32[?], n=i32, BLOCK=64"
    assert len(args) == 4
    m = vector_add.ir(spec)
    verify(m)
    assert parse(str(m)) == m
    assert vector_add.ir(spec) is m  # cached per specialization


def test_vector_add_runs_on_the_interpreter():
    rng = np.random.default_rng(0)
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    out = np.zeros_like(x)
    with tc.interpret():
        vector_add[((1000 + 127) // 128,)](x, y, out, 1000, BLOCK=128)
    np.testing.assert_allclose(out, x + y)
