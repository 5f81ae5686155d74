"""JIT-compile target-independent codegen helpers for the host, to check their numerics
against numpy on the CPU."""
from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

_ENGINES = []  # keep engines (and their code) alive for the test session
# integers travel as unsigned arrays of their width (pass signed values through .view)
_NUMPY = {"half": np.float16, "float": np.float32, "double": np.float64, "i8": np.uint8, "i16": np.uint16, "i32": np.uint32,
          "i64": np.uint64}


def _host():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # f16 <-> f32 as instructions (F16C): without them LLVM calls compiler-rt helpers that the
    # JIT cannot resolve (the process crashes); every x86-64 CPU since 2012 has them
    return llvm.Target.from_default_triple().create_target_machine(opt=2, features=_F16C)


def _host_f16c() -> str:
    llvm.initialize_native_target()
    return "+f16c" if "+f16c" in llvm.get_host_cpu_features().flatten().split(",") else ""


_F16C = _host_f16c()
HAS_F16C = bool(_F16C)


def vectorize(build, nargs: int, ty: ir.Type, out_ty: ir.Type = None):
    """A numpy-callable f(*arrays) applying `build(builder, *scalars) -> value` elementwise."""
    out_ty = out_ty or ty
    mod = ir.Module(name="host")
    ptr = ir.PointerType()
    i64 = ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr] * (nargs + 1) + [i64]), "apply")
    entry, loop, done = fn.append_basic_block(), fn.append_basic_block(), fn.append_basic_block()
    b = ir.IRBuilder(entry)
    n = fn.args[-1]
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    xs = [b.load(b.gep(fn.args[k], [i], source_etype=ty), typ=ty) for k in range(nargs)]
    b.store(build(b, *xs), b.gep(fn.args[nargs], [i], source_etype=out_ty))
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    tm = _host()
    m = llvm.parse_assembly(str(mod))
    m.verify()
    eng = llvm.create_mcjit_compiler(m, tm)
    eng.finalize_object()
    _ENGINES.append(eng)
    cfn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (nargs + 1)), ctypes.c_int64)(eng.get_function_address("apply"))
    np_in, np_out = (_NUMPY[str(t)] for t in (ty, out_ty))

    def call(*arrays):
        arrs = [np.ascontiguousarray(a, dtype=np_in) for a in arrays]
        out = np.empty(arrs[0].shape, dtype=np_out)
        cfn(*[a.ctypes.data for a in arrs], out.ctypes.data, out.size)
        return out
    return call
