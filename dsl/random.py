"""Counter-based random numbers in kernels: Philox4x32-10, written in the language itself.

    r = tc.rand(seed, offsets)               # f32 uniforms in [0, 1), one per offset
    r0, r1, r2, r3 = tc.rand4x(seed, offsets)  # four independent uniforms per offset

Philox (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11) maps a
128-bit counter and a 64-bit key to 128 random bits through ten rounds of 32x32->64-bit
multiplies and xors. There is no state: the numbers drawn for an offset depend only
on (seed, offset), never on the block size, the grid or the launch order, which is
what makes a kernel that draws them reproducible under any launch configuration.

The mapping, fixed so that host code can reproduce it:
- key = the seed as a 64-bit two's-complement integer: (low 32 bits, high 32 bits);
- counter = (offset low 32 bits, offset high 32 bits, 0, 0), the offset read as a
  64-bit two's-complement integer (i32 offsets are sign-extended);
- `randint4x` returns the four output words, `randint` the first;
- a uniform is `(word >> 8) * 2**-24`: 24 random bits, exactly representable in f32,
  in [0, 1) (never 1.0, so `u < p` keeps exactly a fraction p for p = k / 2**24).
"""
from __future__ import annotations

from . import dtypes as _dt
from . import language as tc
from .language import Func

__all__ = ["philox", "randint4x", "randint", "rand4x", "rand", "PHILOX_ROUNDS"]

PHILOX_ROUNDS = 10
# Round multipliers and Weyl key increments of Philox4x32 (Random123).
_M0 = 0xD2511F53
_M1 = 0xCD9E8D57
_W0 = 0x9E3779B9
_W1 = 0xBB67AE85
# 2**-24: scales the top 24 bits of a word to [0, 1).
_TO_UNIT = 5.9604644775390625e-08


def _mulhilo(a, m):
    # A 32x32 -> 64-bit product split into its high and low words; LLVM selects
    # mul.hi.u32 / mul.lo.u32 (or one mul.wide.u32) for this pattern.
    p = a.astype(_dt.uint64) * m
    return (p >> 32).astype(_dt.uint32), p.astype(_dt.uint32)


def _philox(k0, k1, c0, c1, c2, c3):
    for r in tc.static_range(PHILOX_ROUNDS):
        if r > 0:
            # The key schedule: a Weyl sequence, bumped between rounds (u32 wraps around).
            k0 = k0 + _W0
            k1 = k1 + _W1
        hi0, lo0 = _mulhilo(c0, _M0)
        hi1, lo1 = _mulhilo(c2, _M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _split64(v):
    # The low and high u32 words of an integer read as 64-bit two's complement.
    if v.dtype == _dt.int64 or v.dtype == _dt.uint64:
        return v.astype(_dt.uint32), (v >> 32).astype(_dt.uint32)
    # Narrower integers: the high word is the sign extension (all ones for negatives).
    w = v.astype(_dt.int32)
    return w.astype(_dt.uint32), (w >> 31).astype(_dt.uint32)


def _randint4x(seed, offsets):
    k0, k1 = _split64(seed)
    c0, c1 = _split64(offsets)
    zero = c0 * 0
    return _philox(k0, k1, c0, c1, zero, zero)


def _randint(seed, offsets):
    r0, _r1, _r2, _r3 = _randint4x(seed, offsets)
    return r0


def _to_unit(word):
    return (word >> 8).astype(_dt.float32) * _TO_UNIT


def _rand4x(seed, offsets):
    r0, r1, r2, r3 = _randint4x(seed, offsets)
    return _to_unit(r0), _to_unit(r1), _to_unit(r2), _to_unit(r3)


def _rand(seed, offsets):
    return _to_unit(_randint(seed, offsets))


def _library_func(fn, name, doc):
    f = Func(fn)
    f.name = name
    f.__doc__ = doc
    return f


# The helpers call each other by their module-level names, so those names must be the Funcs.
_mulhilo = _library_func(_mulhilo, "mulhilo", "(high, low) u32 words of a u32 tile times a constant.")
_split64 = _library_func(_split64, "split64", "(low, high) u32 words of an integer read as 64 bits.")
_to_unit = _library_func(_to_unit, "to_unit", "A u32 word's top 24 bits as an f32 in [0, 1).")
philox = _library_func(
    _philox, "philox",
    "`tc.philox(k0, k1, c0, c1, c2, c3)`: Philox4x32-10 of the counter (c0..c3, u32 tiles of one "
    "shape) under the key (k0, k1, u32 scalars); returns four u32 tiles.")
_philox = philox
randint4x = _library_func(
    _randint4x, "randint4x",
    "`tc.randint4x(seed, offsets)`: four u32 tiles of random bits for each offset (integer tile or "
    "scalar); the key is the seed's 64 bits, the counter (offset low, offset high, 0, 0).")
_randint4x = randint4x
randint = _library_func(_randint, "randint",
                        "`tc.randint(seed, offsets)`: the first word of `tc.randint4x(seed, offsets)`.")
_randint = randint
rand4x = _library_func(_rand4x, "rand4x",
                       "`tc.rand4x(seed, offsets)`: four f32 tiles uniform in [0, 1) for each offset.")
rand = _library_func(_rand, "rand",
                     "`tc.rand(seed, offsets)`: an f32 tile uniform in [0, 1), one per offset; depends "
                     "only on (seed, offset).")
