"""tc.dot of f8 operands (e4m3, e5m2) at every shape class: on the interpreter against float64
numpy, and compiled for sm_80, sm_89 and sm_90a (PTX assembled by ptxas) with the instruction
family each arch and shape takes: wgmma where sm_90a takes the tile, mma.sync on f16 widened
from f8 elsewhere, FMAs where no mma shape fits. tests/gemm/test_f8_dots_gpu.py runs the same
dots on a GPU."""
import numpy as np
import pytest

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.interpreter import run
from tilec.interpreter.numerics import cast
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

from gemm_kernels import dot_by_constant, matmul, matmul_cast
from needs import needs

F8 = [tc.float8e4m3, tc.float8e5m2]
SHAPES = [(16, 16, 16), (16, 16, 32), (32, 32, 32), (64, 64, 64), (64, 64, 128)]
FMA_SHAPES = [(16, 16, 8), (8, 8, 16)]   # no m16n8k16 tiling: M % 16 or K % 16
ARCHS = ["sm_80", "sm_89", "sm_90a"]


def _ids(v):
    return "x".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _sizes(shape, tail: bool):
    """M, N, K of the data: one tile, or several with ragged ends (K not a multiple of BK:
    the last K step reads zero padding)."""
    bm, bn, bk = shape
    return (2 * bm - 3, bn + 5, 2 * bk + bk // 2 + 3) if tail else (bm, bn, bk)


def _interpret(kernel, sig, args, shape, m, n):
    spec = parse_signature(kernel, sig)
    run(kernel.ir(spec), args, (tc.cdiv(m, shape[0]), tc.cdiv(n, shape[1]), 1))


def _run(kernel, fmt, shape, a, b):
    """C = A @ B through `kernel`: `matmul` of f8 views (f32 arrays holding f8 values, the
    interpreter's storage), or `matmul_cast` of f32 views converted to f8 in the kernel."""
    m, n = a.shape[0], b.shape[1]
    c = np.full((m, n), np.nan, np.float32)
    bm, bn, bk = shape
    if kernel is matmul:
        sig = f"a={fmt.name}[?,?], b={fmt.name}[?,?], c=f32[?,?], BM={bm}, BN={bn}, BK={bk}, TF32=False"
    else:
        sig = f"a=f32[?,?], b=f32[?,?], c=f32[?,?], BM={bm}, BN={bn}, BK={bk}, DT={fmt.name}"
    _interpret(kernel, sig, [a, b, c], shape, m, n)
    return c


def _run_f8(fmt, shape, a, b):
    return _run(matmul, fmt, shape, a, b)


def _run_cast(fmt, shape, a, b):
    return _run(matmul_cast, fmt, shape, a, b)


@pytest.mark.parametrize("tail", [False, True], ids=["one_tile", "k_tail"])
@pytest.mark.parametrize("shape", SHAPES + FMA_SHAPES, ids=_ids)
@pytest.mark.parametrize("fmt", F8, ids=str)
def test_exact_f8_dot_on_the_interpreter(fmt, shape, tail):
    """Small integers are f8 values and their products and sums are exact in f32: the result
    equals the float64 product whatever the order of accumulation."""
    m, n, k = _sizes(shape, tail)
    rng = np.random.default_rng(sum(shape) + tail)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    b = rng.integers(-2, 3, (k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(want).max() > 4  # the data is not all zeros
    np.testing.assert_array_equal(_run_f8(fmt, shape, a, b), want)
    np.testing.assert_array_equal(_run_cast(fmt, shape, a, b), want)


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
@pytest.mark.parametrize("fmt", F8, ids=str)
def test_random_f8_dot_on_the_interpreter(fmt, shape):
    """Random f8 values (and f32 values the kernel rounds to f8) against float64 on the
    rounded inputs, within f32 accumulation over K."""
    m, n, k = _sizes(shape, True)
    rng = np.random.default_rng(len(fmt.name) * 100 + k)
    x, y = rng.standard_normal((m, k)) * 3, rng.standard_normal((k, n))
    a, b = cast(x, fmt).astype(np.float32), cast(y, fmt).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = k * 2.0 ** -24 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30
    assert np.all(np.abs(_run_f8(fmt, shape, a, b) - want) <= bound)
    got = _run_cast(fmt, shape, x.astype(np.float32), y.astype(np.float32))
    assert np.all(np.abs(got - want) <= bound)


def _compile(kernel, sig, arch):
    return compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch=arch, num_warps=4).validated(),
                          use_cache=False)


def _assembled(ck, spills_ok=False):
    if not find_ptxas():
        return
    rep = ck.metadata["ptxas"]
    assert ck.asm["cubin"] and not rep["warnings"], rep
    assert spills_ok or rep["spill_stores"] == rep["spill_loads"] == 0, rep


def _family(arch, fmt, shape) -> str:
    if shape in FMA_SHAPES:
        return "fma"
    return "wgmma" if arch == "sm_90a" and shape == (64, 64, 128) else "mma.sync"


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES + FMA_SHAPES, ids=_ids)
@pytest.mark.parametrize("fmt", F8, ids=str)
@pytest.mark.parametrize("arch", ARCHS)
def test_f8_dot_compiles_to_its_instruction_family(arch, fmt, shape):
    bm, bn, bk = shape
    sig = f"a={fmt.name}[?,?], b={fmt.name}[?,?], c=f32[?,?], BM={bm}, BN={bn}, BK={bk}, TF32=False"
    ck = _compile(matmul, sig, arch)
    ptx = ck.asm["ptx"]
    kind = fmt.name[2:]   # e4m3 / e5m2
    family = _family(arch, fmt, shape)
    if family == "wgmma":
        assert f"wgmma.mma_async.sync.aligned.m64n64k32.f32.{kind}.{kind}" in ptx
        assert "mma.sync" not in ptx and "f16x2" not in ptx
    elif family == "mma.sync":
        # f8 widened to f16 in registers: the f16 instruction, never a cvt from i8 bits to f32
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "wgmma" not in ptx
        # e4m3 by the paired cvt on sm_90+; integer operations before (and for e5m2: a shift)
        assert ("cvt.rn.f16x2.e4m3x2" in ptx) == (arch == "sm_90a" and kind == "e4m3")
    else:
        assert "fma.rn.f32" in ptx and "mma" not in ptx
    # 64 x 64 x 128 with 4 warps spills: on mma.sync as the f16 dot of that tile does (sm_80:
    # 192 bytes of spill stores for f8, 220 for f16), and on wgmma as it did before f8 had any
    # other route (144 bytes: 64 f8 elements of each operand per thread, each element loaded alone)
    _assembled(ck, spills_ok=shape == (64, 64, 128))


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(32, 32, 32), (64, 64, 128)], ids=_ids)
@pytest.mark.parametrize("fmt", F8, ids=str)
@pytest.mark.parametrize("arch", ARCHS)
def test_f8_dot_of_in_kernel_casts_compiles(arch, fmt, shape):
    """f8 operands made by astype in the kernel (from f32 storage) take the same route."""
    bm, bn, bk = shape
    sig = f"a=f32[?,?], b=f32[?,?], c=f32[?,?], BM={bm}, BN={bn}, BK={bk}, DT={fmt.name}"
    ck = _compile(matmul_cast, sig, arch)
    family = _family(arch, fmt, shape)
    assert ("wgmma.mma_async" in ck.asm["ptx"]) == (family == "wgmma")
    assert ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ck.asm["ptx"]) == (family == "mma.sync")
    # the encoding: cvt.rn.satfinite on sm_90+, integer rounding before
    assert ("cvt.rn.satfinite" in ck.asm["ptx"]) == (arch == "sm_90a")
    _assembled(ck, spills_ok=shape == (64, 64, 128))


@pytest.mark.parametrize("fmt", F8, ids=str)
def test_ml_dtypes_f8_arrays_on_the_interpreter(fmt):
    """f8 arrays of ml_dtypes' types (what a GPU run copies back) launch on the interpreter too:
    numpy names float8_e5m2 "<f1", which the interpreter's flat views must not rebuild from."""
    ml_dtypes = needs("ml_dtypes")
    ml = {"f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}[fmt.name]
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-2, 3, s).astype(ml) for s in ((20, 37), (37, 24)))
    c = np.full((20, 24), np.nan, np.float32)
    with tc.interpret():
        matmul[(2, 2)](a, b, c, BM=16, BN=16, BK=16, TF32=False)
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("fmt", F8, ids=str)
def test_f8_operand_already_in_its_register_layout(fmt):
    """An operand that needs no staging is widened where it is: same instruction, same result."""
    a = np.random.default_rng(4).integers(-2, 3, (32, 32)).astype(np.float32)
    c = np.full((32, 32), np.nan, np.float32)
    with tc.interpret():
        dot_by_constant[(1,)](a, c, DT=fmt)
    np.testing.assert_array_equal(c, a.astype(np.float64) @ np.full((32, 32), 1.5))
    ck = _compile(dot_by_constant, f"a=f32[?,?], c=f32[?,?], DT={fmt.name}", "sm_80")
    assert "tile.constant {value = 1.5} : tile<32x32x" + fmt.name + ", #dot_op{op_idx = 1" in ck.asm["gpu"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ck.asm["ptx"]
    _assembled(ck)
