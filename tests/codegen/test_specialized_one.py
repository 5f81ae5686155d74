"""A specialized 1 is a typed constant in the tile IR (not a weak Python int), and the
passes still fold it: the stdlib's binary kernel launched with unit column strides
(`sac=1, sbc=1`) keeps its 16-byte loads, which unknown strides cannot have."""
import re

import pytest

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.ir import tile_ops as T
from tilec.lowering.pipeline import TILE_PASSES, run_passes
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.stdlib_kernels import elementwise as E

ARCHS = ["sm_80", "sm_90a"]


def _ptx(kernel, sig, arch):
    return compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch=arch), use_cache=False).asm["ptx"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_unit_stride_arguments_keep_vector_loads(arch):
    ones = E.SIGNATURES["binary_kernel"]
    assert "sac=1" in ones and "sbc=1" in ones
    unknown = ones.replace("sac=1", "sac=i32").replace("sbc=1", "sbc=i32")
    vec = re.compile(r"ld\.global[.\w]*\.v4\.")
    assert vec.search(_ptx(E.binary_kernel, ones, arch))
    assert not vec.search(_ptx(E.binary_kernel, unknown, arch))


@tc.kernel
def folds(x, out, s, BLOCK: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in range(s):                                  # one iteration: no loop left
        acc += tc.load(x, index=(i,), shape=(BLOCK,))
    if s == 1:                                          # decided at compile time
        acc = acc * 2.0
    tc.store(out.ptr + tc.arange(0, BLOCK) * s, acc)   # * 1 folds away


def test_loop_bound_condition_and_stride_of_one_fold():
    sig = "x=f32[?], out=f32[?], s=1, BLOCK=128"
    m = run_passes(folds.ir(parse_signature(folds, sig)), [name for name, _ in TILE_PASSES])
    kinds = {type(op) for op in m.walk()}
    assert not kinds & {T.ForOp, T.IfOp, T.CmpOp}, kinds
    assert all(op.results[0].type.element.dtype.is_float for op in m.walk() if isinstance(op, T.MulOp))
    ck = compile_kernel(folds, parse_signature(folds, sig), CompileOptions(arch="sm_90a"), use_cache=False)
    assert re.search(r"st\.global[.\w]*\.v4\.", ck.asm["ptx"])  # the stride is known to be 1
