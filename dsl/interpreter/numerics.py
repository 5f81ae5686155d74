"""Number formats of the interpreter: how each dtype is stored in numpy and rounded.

Storage (`DType.np`): bool, the numpy integer types, float16, float32, float64;
bf16, f8e4m3 and f8e5m2 live in float32 and are rounded to their format after
every op that produces them. Rounding is round-to-nearest-even everywhere, with
the overflow rules of PyTorch's (and ml_dtypes') conversions: bf16 and f8e5m2 overflow
to inf, f8e4m3 (the `e4m3fn` variant: no inf) gives NaN where the rounded magnitude passes
448 (|x| > 464: 464 itself is a tie that rounds to even, 448) and for inf.

Every helper here accepts numpy scalars and arrays alike and returns the same
kind (0-d results come back as numpy scalars through `[()]`).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .. import dtypes as dt

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

# mantissa bits (with the implicit one), smallest normal exponent, largest finite value,
# whether the format has infinities (else overflow gives NaN)
_FORMATS = {
    "bf16": (8, -126, float.fromhex("0x1.fep127"), True),
    "f8e4m3": (4, -6, 448.0, False),
    "f8e5m2": (3, -14, 57344.0, True),
}

EMULATED = frozenset(_FORMATS)  # dtypes stored in float32 and rounded by `round_to`


def _round_format(x, fmt):
    """Round float values (any float dtype) to `fmt`, returned in float32 storage."""
    p, emin, maxval, has_inf = _FORMATS[fmt]
    x64 = np.asarray(x, dtype=F64)
    _, e = np.frexp(x64)  # |x| = m * 2**e with m in [0.5, 1): the unit exponent is e - 1
    quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - (p - 1))
    r = np.rint(x64 / quantum) * quantum  # rint: ties to even; scaling by 2**k is exact
    if has_inf:
        r = np.where(np.abs(r) > maxval, np.copysign(np.inf, x64), r)
    else:  # inf rounds to inf (frexp leaves it), which is past maxval too
        r = np.where(np.abs(r) > maxval, np.nan, r)
    return r.astype(F32)[()]


def rounder(d: dt.DType):
    """The function that brings a computed value into `d`'s storage (wrapping integers,
    rounding floats); None when the computation already yields storage values."""
    if d.name in EMULATED:
        return lambda x: _round_format(x, d.name)
    return None


def to_storage(x, d: dt.DType):
    """Convert numeric values of any dtype to `d` (cast semantics, see `cast`)."""
    return cast(x, d)


def cast(x, d: dt.DType):
    """`tile.cast`: numeric conversion to `d`.

    To bool: x != 0. Between integers: two's complement wrap. Float to integer:
    truncation toward zero, out-of-range and NaN as numpy's astype gives them.
    To a float: rounded once to nearest even (via float64 for bf16/f8).
    """
    target = d.np
    if d.is_bool:
        return np.not_equal(x, 0)
    if d.name in EMULATED:
        return _round_format(_to_f64_odd(np.asarray(x)), d.name)
    return np.asarray(x).astype(target)[()]


def _to_f64_odd(x: np.ndarray) -> np.ndarray:
    """`x` as float64, exactly where it fits; a 64-bit integer of more than 53 significant
    bits is rounded to odd (truncated, then the last bit set if anything was dropped), so
    that rounding it once more to a format of at most 51 bits is the single correct
    rounding (rounding to nearest twice is not: 2**62 + 2**54 + 1 went to 2**62 in bf16)."""
    if x.dtype.kind not in "iu" or x.dtype.itemsize < 8:
        return x.astype(F64)
    neg = x < 0
    m = np.where(neg, np.negative(x.astype(np.uint64)), x.astype(np.uint64)) if x.dtype.kind == "i" \
        else x.astype(np.uint64)
    _, e = np.frexp(m.astype(F64))               # the bit length, or one more where m rounded up
    sh = np.maximum(e - 53, 0).astype(np.uint64)
    low = (np.left_shift(np.uint64(1), sh) - np.uint64(1)).astype(np.uint64)
    kept = (m & ~low).astype(F64)                 # at most 53 significant bits: exact
    sticky = ((m & low) != 0).astype(np.uint64)
    odd = (kept.view(np.uint64) | sticky).view(F64)
    return np.where(neg, -odd, odd)


def const_value(value, d: dt.DType):
    """A Python attribute value as a numpy scalar of `d` (integers wrap to the width)."""
    if d.is_bool:
        return np.bool_(bool(value))
    if d.is_int:
        v = int(value) & ((1 << d.bits) - 1)
        if d.kind == "i" and v >= 1 << (d.bits - 1):
            v -= 1 << d.bits
        return d.np.type(v)
    return cast(np.float64(value), d)


def round_tf32(x):
    """f32 values as the tensor cores read them for a tf32 product: the 13 low mantissa bits
    dropped (truncation toward zero). mma.sync and wgmma take the f32 bits as they are and
    ignore those bits; a kernel's tf32 dot never rounds its inputs first (that would cost a
    cvt per element in the K loop, and wgmma reads shared memory directly)."""
    a = np.asarray(x, dtype=F32)
    r = (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(F32)
    return np.where(np.isfinite(a), r, a)[()]


def fma(a, b, c, d: dt.DType):
    """a * b + c rounded once. For f32 and narrower the product is exact in f64 and the
    sum is rounded to odd in f64, which makes the final rounding to `d` correct.
    For f64 the exact value is formed with fractions (numpy has no fused multiply-add)."""
    if d is dt.float64:
        return _FMA64(np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64)).astype(F64)[()]
    p = np.asarray(a, F64) * np.asarray(b, F64)
    c64 = np.asarray(c, F64)
    s = p + c64
    # TwoSum: err is exactly (p + c) - s
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    inexact = (err != 0) & np.isfinite(s)
    # truncate toward zero: step s back by one ulp where it was rounded away from zero
    away = inexact & ((err < 0) == (s > 0))
    t = np.where(away, np.nextafter(s, 0.0), s)
    bits = t.view(np.int64)
    odd = np.where(inexact, bits | 1, bits).view(F64)
    if d is dt.float32:
        return odd.astype(F32)[()]
    if d is dt.float16:
        return odd.astype(F16)[()]
    return _round_format(odd, d.name)


def _fma64_scalar(a: float, b: float, c: float) -> float:
    rounded_twice = a * b + c
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return rounded_twice
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:  # the sign of a zero follows IEEE's rules, which the float sum obeys
        return rounded_twice
    try:
        return float(exact)  # Fraction -> float rounds to nearest even, once
    except OverflowError:
        return math.copysign(math.inf, exact)


_FMA64 = np.frompyfunc(_fma64_scalar, 3, 1)


def erf(x):
    """erf in float64 through math.erf (results then rounded to the operand type)."""
    return np.asarray(_ERF(np.asarray(x, F64)), dtype=F64)[()]


_ERF = np.frompyfunc(math.erf, 1, 1)


# ----------------------------------------------------------------------------- bit patterns
def _f8_table(fmt: str) -> np.ndarray:
    """Values of the 128 non-negative codes of an f8 format (NaN where the code is NaN)."""
    ebits, mbits, bias = (4, 3, 7) if fmt == "f8e4m3" else (5, 2, 15)
    out = np.empty(128, dtype=F64)
    for code in range(128):
        e, m = code >> mbits, code & ((1 << mbits) - 1)
        if fmt == "f8e4m3" and code == 0x7F:
            out[code] = np.nan
        elif fmt == "f8e5m2" and e == (1 << ebits) - 1:
            out[code] = np.inf if m == 0 else np.nan
        elif e == 0:
            out[code] = m / (1 << mbits) * 2.0 ** (1 - bias)
        else:
            out[code] = (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
    return out


_F8_TABLES = {f: _f8_table(f) for f in ("f8e4m3", "f8e5m2")}
_BITS_TYPE = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def to_bits(x, d: dt.DType):
    """The bit patterns of values of `d`, as an unsigned integer of d's width (NaNs of
    bf16 keep their payload; f8 NaNs become the canonical 0x7F / 0xFF)."""
    a = np.asarray(x)
    if d is dt.bfloat16:
        return (a.astype(F32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)[()]
    if d.is_fp8:
        table = _F8_TABLES[d.name]
        finite = np.where(np.isnan(table), np.inf, table)  # codes in value order up to inf / NaN
        ax = np.abs(a.astype(F64))
        code = np.minimum(np.searchsorted(finite, ax), 127).astype(np.uint8)
        code = np.where(np.isnan(ax), np.uint8(0x7F), code)
        return (code | np.where(np.signbit(a), np.uint8(0x80), np.uint8(0)))[()].astype(np.uint8)
    if d.is_bool:
        return a.astype(np.uint8)[()]
    return a.view(_BITS_TYPE[d.bits])[()]


def from_bits(u, d: dt.DType):
    """Values of `d` whose bit patterns are the unsigned integers `u`."""
    a = np.asarray(u)
    if d is dt.bfloat16:
        return (a.astype(np.uint32) << np.uint32(16)).view(F32)[()]
    if d.is_fp8:
        v = _F8_TABLES[d.name][a & 0x7F]
        return np.where(a & 0x80, -v, v).astype(F32)[()]
    if d.is_bool:
        return (a != 0)[()]
    return a.astype(_BITS_TYPE[d.bits]).view(d.np)[()]
