"""Conversions (casts.py) JIT-compiled for the host and compared with the interpreter's
numerics, which define tilec's semantics. (bf16 is checked in PTX instead: the host
JIT cannot resolve the soft-float helpers LLVM calls for bfloat on x86.)"""
import numpy as np
import pytest
from llvmlite import ir

from hostjit import HAS_F16C, vectorize
from tilec import dtypes as dt
from tilec.interpreter import numerics
from tilec.lowering.codegen.casts import ConversionError, convert, convert_all, f8_bits
from tilec.lowering.codegen.types import bfloat, const
from tilec.target import Target
from needs import needs

SM80 = Target.from_arch("sm_80")   # no f8 cvt instruction: the bit-exact software encoding

F32, I8, I16, I32 = ir.FloatType(), ir.IntType(8), ir.IntType(16), ir.IntType(32)


def _interesting_f32(rng, n=20000):
    tiny = np.exp(rng.uniform(-25, 12, n)) * rng.choice([-1, 1], n)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 463.9, 480.0, 57344.0, 61440.0, 61439.0,
               2.0 ** -6, 2.0 ** -9, 2.0 ** -10, 2.0 ** -14, 2.0 ** -16, 2.0 ** -17, 1.0e30]
    return np.concatenate([tiny, special, -np.array(special)]).astype(np.float32)


@pytest.mark.parametrize("fmt", [dt.float8e4m3, dt.float8e5m2])
def test_f8_encode_matches_interpreter(fmt):
    x = _interesting_f32(np.random.default_rng(1))
    enc = vectorize(lambda b, v: convert(b, v, dt.float32, fmt, SM80), 1, F32, I8)
    got = enc(x)
    want = numerics.to_bits(numerics.cast(x, fmt), fmt)
    got_v, want_v = numerics.from_bits(got, fmt), numerics.from_bits(want, fmt)
    same = (got_v == want_v) | (np.isnan(got_v) & np.isnan(want_v))
    assert same.all(), list(zip(x[~same][:5], got[~same][:5], want[~same][:5]))
    host = np.array([f8_bits(float(v), fmt.name) for v in x], dtype=np.uint8)
    host_v = numerics.from_bits(host, fmt)
    assert ((host_v == want_v) | (np.isnan(host_v) & np.isnan(want_v))).all()


@pytest.mark.parametrize("fmt", [dt.float8e4m3, dt.float8e5m2])
def test_f8_decode_every_code(fmt):
    codes = np.arange(256, dtype=np.uint8)
    dec = vectorize(lambda b, v: convert(b, v, fmt, dt.float32, SM80), 1, I8, F32)
    got, want = dec(codes), numerics.from_bits(codes, fmt)
    assert ((got == want) | (np.isnan(got) & np.isnan(want))).all()


@pytest.mark.parametrize("src,dst", [(dt.float32, dt.int32), (dt.float32, dt.uint8), (dt.float32, dt.int8),
                                     (dt.int32, dt.float32), (dt.uint32, dt.float32), (dt.int32, dt.int8),
                                     (dt.int8, dt.int32), (dt.uint8, dt.int32), (dt.float32, dt.bool_)])
def test_numeric_casts_in_range(src, dst):
    rng = np.random.default_rng(3)
    if src.is_float:
        lo, hi = (0, 255) if dst is dt.uint8 else (-128, 127)
        x = rng.uniform(lo, hi, 5000).astype(np.float32)
        x[:3] = [0.0, -0.7, 0.7] if dst.kind != "u" else [0.0, 0.7, 254.9]
    else:
        info = np.iinfo(src.np)
        x = rng.integers(info.min, info.max, 5000, dtype=src.np, endpoint=True)
    to_ty = {32: I32, 8: I8, 1: I8}[dst.bits] if not dst.is_float else F32
    in_ty = F32 if src.is_float else {32: I32, 8: I8}[src.bits]

    def build(b, v):
        r = convert(b, v, src, dst, SM80)
        return b.zext(r, I8) if dst.is_bool else r
    got = vectorize(build, 1, in_ty, to_ty)(x.view(np.uint32) if in_ty == I32 else (x.view(np.uint8) if in_ty == I8 else x))
    want = numerics.cast(x, dst)
    if dst.is_bool:
        assert (got.astype(bool) == want).all()
    elif dst.is_float:
        assert (got == want).all()
    else:
        assert (got.view(dst.np) == want).all()


def test_constants():
    assert str(const(dt.bfloat16, 1.0)) == "bfloat 0xR3F80"
    assert str(const(dt.int8, 200)) == "i8 -56"  # wraps like the interpreter
    assert str(const(dt.float8e4m3, 1.0)) == "i8 56"
    assert str(bfloat) == "bfloat"


def _same(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))


@pytest.mark.skipif(not HAS_F16C, reason="the host JIT needs F16C for f16 values")
@pytest.mark.parametrize("fmt", [dt.float8e4m3, dt.float8e5m2])
def test_f8_to_f16_every_code(fmt):
    """The integer forms (sm_80: e4m3 by rebias plus a subnormal table, e5m2 by a shift):
    every code exactly, signed zeros, subnormals, NaN, and e5m2's infinities."""
    codes = np.arange(256, dtype=np.uint8)
    dec = vectorize(lambda b, v: b.bitcast(convert(b, v, fmt, dt.float16, SM80), I16), 1, I8, I16)
    got = dec(codes).view(np.float16)
    assert _same(got, numerics.from_bits(codes, fmt)).all()


@pytest.mark.skipif(not HAS_F16C, reason="the host JIT needs F16C for f16 values")
@pytest.mark.parametrize("fmt", [dt.float8e4m3, dt.float8e5m2])
def test_every_f16_to_f8_matches_interpreter(fmt):
    """astype from f16 to f8 (through f32, exact) for all 65536 f16 bit patterns."""
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    enc = vectorize(lambda b, v: convert(b, b.bitcast(v, ir.HalfType()), dt.float16, fmt, SM80), 1, I16, I8)
    got = numerics.from_bits(enc(x.view(np.uint16)), fmt)
    assert _same(got, numerics.cast(x, fmt)).all()


@pytest.mark.parametrize("fmt,ml_name", [(dt.float8e4m3, "float8_e4m3fn"), (dt.float8e5m2, "float8_e5m2")])
def test_interpreter_f8_rounding_agrees_with_ml_dtypes(fmt, ml_name):
    """The reference semantics codegen follows (round to nearest even; e4m3fn: NaN past 464,
    464 itself to 448; e5m2: inf from 61440) are ml_dtypes' for f32 and every f16."""
    ml_dtypes = needs("ml_dtypes")
    ml = getattr(ml_dtypes, ml_name)
    x = _interesting_f32(np.random.default_rng(5), 100000)
    with np.errstate(over="ignore"):
        assert _same(numerics.cast(x, fmt), x.astype(ml).astype(np.float32)).all()
        h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
        assert _same(numerics.cast(h, fmt), h.astype(ml).astype(np.float32)).all()
    codes = np.arange(256, dtype=np.uint8)
    assert _same(numerics.from_bits(codes, fmt), codes.view(ml).astype(np.float32)).all()


def test_convert_refuses_a_value_of_the_wrong_llvm_type():
    """An f8's i8 bits handed over as another dtype: an internal error, not invalid LLVM IR."""
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [I8]), "f").append_basic_block())
    bits = b.function.args[0]
    with pytest.raises(ConversionError, match="internal error: a f16 element must be an LLVM half, got i8"):
        convert(b, bits, dt.float16, dt.float32, SM80)
    with pytest.raises(ConversionError, match="a f8e5m2 element must be an LLVM i8, got i16"):
        convert_all(b, [b.zext(bits, I16)] * 2, dt.float8e5m2, dt.float16, Target.from_arch("sm_90a"))
    assert convert(b, bits, dt.float8e4m3, dt.float32, SM80).type == F32
