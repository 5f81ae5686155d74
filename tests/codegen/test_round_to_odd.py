"""Integer and f64 -> bf16 conversions round once (found with the fuzzer, tests/fuzz).

Before sm_90 PTX has no cvt.rn.bf16 from integers, and LLVM converted through f32: two
roundings to nearest, so 2**30 + 2**22 + 1 became 2**30 in bf16 instead of 2**30 + 2**23 (the
interpreter's answer); f64 -> bf16 went through f32 on every arch. Codegen now converts to f32
rounded to odd first (`casts.f32_round_to_odd`), which the final cvt.rn.bf16.f32 rounds
correctly. The helper is plain LLVM IR, so it is run here on the host through llvmlite's JIT;
the PTX check makes sure the kernels use it.
"""
import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir

from tilec import dtypes as dt
from tilec.interpreter.numerics import cast
from tilec.lowering.codegen.casts import f32_round_to_odd

import tilec as tc


def _jit(src: dt.DType):
    ty = {"i32": ir.IntType(32), "u32": ir.IntType(32), "i64": ir.IntType(64), "u64": ir.IntType(64),
          "f64": ir.DoubleType()}[src.name]
    mod = ir.Module(name="odd")
    fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [ty]), name="odd")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(f32_round_to_odd(b, fn.args[0], src))
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple().create_target_machine()
    m = llvm.parse_assembly(str(mod))
    engine = llvm.create_mcjit_compiler(m, target)
    engine.finalize_object()
    ctype = {"i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
             "f64": ctypes.c_double}[src.name]
    f = ctypes.CFUNCTYPE(ctypes.c_float, ctype)(engine.get_function_address("odd"))
    return f, engine, m


def _bf16_once(values, src):
    """bf16 of each value, rounded once (the interpreter's rule: exact f64 or round to odd)."""
    return [float(v) for v in cast(np.array(values, dtype=src.np), dt.bfloat16)]


CASES = {
    dt.int32: [2**30 + 2**22 + 1, -(2**30 + 2**22 + 1), 2**30 + 2**22, 2**31 - 1, -2**31, 2**24 + 2**16 + 1,
               16777217, 255, 0, -1, 3],
    dt.uint32: [2**32 - 1, 2**31 + 2**23 + 1, 2**31 + 2**23, 2**24 + 1, 0, 7],
    dt.int64: [2**62 + 2**54 + 1, -(2**62 + 2**54 + 1), 2**63 - 1, -2**63, 2**40 + 2**32 + 1, 2**30 + 2**22 + 1, 0, -5],
    dt.uint64: [2**64 - 1, 2**63 + 2**55 + 1, 2**40 + 2**32 + 1, 1],
    dt.float64: [1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-8, 1.0, 0.0, -0.0, 3.5e38, 1e-45, 1e-300,
                 float("inf"), -float("inf"), 1.2345678901234567],
}


@pytest.mark.parametrize("src", list(CASES), ids=lambda d: d.name)
def test_round_to_odd_then_bf16_is_one_rounding(src):
    f, _engine, _mod = _jit(src)
    values = CASES[src]
    got = [float(cast(np.float32(f(v)), dt.bfloat16)) for v in values]
    assert got == _bf16_once(values, src), list(zip(values, got))


def test_round_to_odd_keeps_nan():
    f, _engine, _mod = _jit(dt.float64)
    assert np.isnan(f(float("nan")))


@tc.kernel
def _to_bf16(x, out, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,))
    tc.store(out, index=(0,), tile=t.astype(tc.bfloat16).astype(tc.float32))


@pytest.mark.parametrize("np_dtype", [np.int32, np.uint64, np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_convert_through_round_to_odd(np_dtype, arch):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    x, out = np.zeros(8, np_dtype), np.zeros(8, np.float32)
    ptx = compile_kernel(_to_bf16, _to_bf16.specialization(x, out, BLOCK=8), CompileOptions(arch=arch),
                         use_cache=False).asm["ptx"]
    direct = arch == "sm_90a" and np.dtype(np_dtype).kind != "f"   # cvt.rn.bf16.s32 etc.: one rounding
    if direct:
        assert "cvt.rn.bf16.f32" not in ptx
    else:   # rounded to odd in f32 (the bit length of an integer, the f64 compared back), then bf16
        assert "cvt.rn.bf16.f32" in ptx
        assert ("cvt.f64.f32" if np.dtype(np_dtype).kind == "f" else "clz.b") in ptx, ptx
