"""Math functions written in LLVM IR (NVPTX selects no llvm.exp/llvm.sin, and there is
no libdevice here).

Each function is emitted once per module as an internal `alwaysinline` function
`__tilec_<name>_<f32|f64>` that O3 inlines. The accurate versions use only
target-independent IR (fma, bit operations, rint), so the tests JIT them for
the host and compare against numpy:

| function | method | max error measured on 20k+ random inputs (f32 / f64) |
| --- | --- | --- |
| exp, exp2 | n = rint(x·log2e), two-part ln2 reduction (exact with fma), Taylor polynomial, 2^n by two exponent scalings | 1 ulp / 1 ulp |
| log, log2 | x = 2^e·m, m ∈ [√½, √2), log m = f − (f²/2 − s(f²/2 + R(s²))), s = f/(2+f) | 2 ulp / 1 ulp |
| sin, cos | k = rint(x·2/π), three-part π/2 reduction with fma, Taylor polynomials on [−π/4, π/4] | 2 ulp / 2 ulp for abs(x) ≤ 1e5, degrading slowly beyond |
| tanh | sign(x)·e/(e+2), e = expm1(2·abs(x)), clamped where tanh rounds to 1 | 3 ulp / 3 ulp |
| sigmoid | 1/(1 + exp(−x)) | 3 ulp / 2 ulp |
| erf | Taylor series below 1, 1 − exp(−x²)·h(x) above, h a Chebyshev fit (Clenshaw) | 3 ulp / 2 ulp |
| pow | f32: exp2(y·log2 x) evaluated in f64; f64: the same in f64 | 1 ulp / relative error ≈ abs(y·log2 x)·2^-53 |
| sqrt, rsqrt | sqrt.rn; 1/sqrt.rn | correctly rounded / 2 ulp |

With `fast_math`, f32 uses the hardware approximations instead: ex2.approx,
lg2.approx, sin/cos.approx, tanh.approx, rsqrt/sqrt.approx (2-4 ulp in range;
sin/cos.approx lose accuracy fast outside [−π, π]).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Dict, List

import numpy as np
from llvmlite import ir

from .types import F32, F64, I32, I64

__all__ = ["call_math", "MATH_FUNCTIONS"]


class _Fmt:
    def __init__(self, ty, ity, mbits, bias, name):
        self.ty, self.ity, self.mbits, self.bias, self.name = ty, ity, mbits, bias, name


_F32 = _Fmt(F32, I32, 23, 127, "f32")
_F64 = _Fmt(F64, I64, 52, 1023, "f64")


def _split32(v: float):
    hi = float(np.float32(v))
    return hi, float(np.float32(v - hi))


# ln 2 and log2 e as hi + lo (the f64 low parts from exact rational arithmetic)
_LN2_PARTS = {"f32": _split32(math.log(2)), "f64": (math.log(2), 2.3190468138462996e-17)}
_LOG2E_PARTS = {"f32": _split32(1 / math.log(2)), "f64": (1 / math.log(2), 2.0355273740931033e-17)}


class _E:
    """A tiny emitter over an IRBuilder for one float format."""

    def __init__(self, b: ir.IRBuilder, fmt: _Fmt):
        self.b, self.f = b, fmt

    def c(self, v):
        return ir.Constant(self.f.ty, float(v))

    def ci(self, v):
        return ir.Constant(self.f.ity, int(v))

    def intr(self, name, *args, ret=None):
        m = self.b.module
        fn = m.globals.get(name)
        if fn is None:
            fn = ir.Function(m, ir.FunctionType(ret or args[0].type, [a.type for a in args]), name)
        return self.b.call(fn, list(args))

    def fma(self, a, b, c):
        return self.intr(f"llvm.fma.{self.f.name}", a, b, c)

    def rint(self, x):
        return self.intr(f"llvm.rint.{self.f.name}", x)

    def poly(self, x, coeffs: List[float]):
        """c0 + c1 x + c2 x^2 + ... by Horner with fma."""
        acc = self.c(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(c))
        return acc

    def sel(self, cond, a, b):
        return self.b.select(cond, a, b)

    def gt(self, a, b):
        return self.b.fcmp_ordered(">", a, b)

    def lt(self, a, b):
        return self.b.fcmp_ordered("<", a, b)

    def eq(self, a, b):
        return self.b.fcmp_ordered("==", a, b)

    def ldexp(self, p, n):
        """p · 2^n for an integral float n in the clamped exp range (or NaN), through two
        in-range exponent scalings."""
        b, f = self.b, self.f
        # n is clamped and integral, or NaN (which the product propagates anyway): mapping
        # NaN to 0 makes a plain conversion defined, cheaper than a saturating one
        n = self.sel(b.fcmp_unordered("uno", n, n), self.c(0.0), n)
        # both exponent biases added in floating point (exact: small integers), then split:
        # q = n + 2·bias > 0 gives the biased exponents q >> 1 and q - (q >> 1), so no integer
        # `(h << m) + (bias << m)` is left per exp, a candidate of NVPTX's straight-line strength
        # reduction, whose search is quadratic in them (a softmax row's 25 exps: 57 of 70 ms)
        q = b.fptosi(b.fadd(n, self.c(2 * f.bias)), f.ity)
        e1 = b.lshr(q, self.ci(1))
        e2 = b.sub(q, e1)
        s1 = b.bitcast(b.shl(e1, self.ci(f.mbits)), f.ty)
        s2 = b.bitcast(b.shl(e2, self.ci(f.mbits)), f.ty)
        return b.fmul(b.fmul(p, s1), s2)

    def clamp(self, x, lo, hi):
        # ordered compares are false for NaN, so NaN passes through unchanged
        x = self.sel(self.gt(x, self.c(hi)), self.c(hi), x)
        return self.sel(self.lt(x, self.c(lo)), self.c(lo), x)


def _taylor(coef: Callable[[int], float], n: int) -> List[float]:
    return [coef(k) for k in range(n)]


_EXP_TERMS = {"f32": 8, "f64": 14}
_LOG_TERMS = {"f32": 5, "f64": 11}
_EXP_RANGE = {"f32": (-104.0, 89.0), "f64": (-746.0, 710.0)}
_EXP2_RANGE = {"f32": (-151.0, 129.0), "f64": (-1076.0, 1025.0)}


def _exp_reduced(e: _E, x):
    """(n, r) with x = n·ln2 + r, abs(r) ≤ ln2/2."""
    n = e.rint(e.b.fmul(x, e.c(1 / math.log(2))))
    hi, lo = _LN2_PARTS[e.f.name]
    # fma makes x - n·hi exact (both are multiples of hi's ulp and the result is < 1)
    r = e.fma(e.b.fneg(n), e.c(hi), x)
    r = e.fma(e.b.fneg(n), e.c(lo), r)
    return n, r


def _exp(e: _E, x):
    x = e.clamp(x, *_EXP_RANGE[e.f.name])
    n, r = _exp_reduced(e, x)
    p = e.poly(r, _taylor(lambda k: 1 / math.factorial(k), _EXP_TERMS[e.f.name]))
    return e.ldexp(p, n)


def _exp2(e: _E, x):
    x = e.clamp(x, *_EXP2_RANGE[e.f.name])
    n = e.rint(x)
    r = e.b.fsub(x, n)
    ln2 = math.log(2)
    p = e.poly(r, _taylor(lambda k: ln2 ** k / math.factorial(k), _EXP_TERMS[e.f.name]))
    return e.ldexp(p, n)


def _expm1(e: _E, x):
    n, r = _exp_reduced(e, x)
    terms = _EXP_TERMS[e.f.name]
    q = e.poly(r, _taylor(lambda k: 1 / math.factorial(k + 2), terms - 1))
    p = e.fma(e.b.fmul(r, r), q, r)  # expm1(r)
    scaled = e.ldexp(p, n)
    two_n_minus_1 = e.b.fsub(e.ldexp(e.c(1.0), n), e.c(1.0))
    return e.sel(e.eq(n, e.c(0.0)), p, e.b.fadd(scaled, two_n_minus_1))


def _log_parts(e: _E, x):
    """(e, log m) with x = 2^e · m and m in [√½, √2), for positive finite x."""
    b, f = e.b, e.f
    sub_scale = 24 if f is _F32 else 54
    tiny = e.lt(x, e.c(2.0 ** (1 - f.bias)))
    xs = e.sel(tiny, b.fmul(x, e.c(2.0 ** sub_scale)), x)
    bits = b.bitcast(xs, f.ity)
    ex = b.sub(b.lshr(bits, e.ci(f.mbits)), e.ci(f.bias))
    ex = b.sub(ex, e.sel(tiny, e.ci(sub_scale), e.ci(0)))
    one = f.bias << f.mbits
    m = b.bitcast(b.or_(b.and_(bits, e.ci((1 << f.mbits) - 1)), e.ci(one)), f.ty)
    big = e.gt(m, e.c(math.sqrt(2)))
    m = e.sel(big, b.fmul(m, e.c(0.5)), m)
    ex = b.add(ex, b.zext(big, f.ity))
    fm = b.fsub(m, e.c(1.0))
    s = b.fdiv(fm, b.fadd(fm, e.c(2.0)))
    z = b.fmul(s, s)
    R = b.fmul(z, e.poly(z, [2 / (2 * k + 3) for k in range(_LOG_TERMS[f.name])]))
    hfsq = b.fmul(e.c(0.5), b.fmul(fm, fm))
    logm = b.fsub(fm, b.fsub(hfsq, b.fmul(s, b.fadd(hfsq, R))))
    return b.sitofp(ex, f.ty), logm


def _log_special(e: _E, x, res):
    inf = float("inf")
    res = e.sel(e.eq(x, e.c(0.0)), e.c(-inf), res)
    res = e.sel(e.lt(x, e.c(0.0)), e.c(float("nan")), res)
    res = e.sel(e.eq(x, e.c(inf)), e.c(inf), res)
    return e.sel(e.b.fcmp_unordered("uno", x, x), x, res)


def _log(e: _E, x):
    ex, logm = _log_parts(e, x)
    hi, lo = _LN2_PARTS[e.f.name]
    return _log_special(e, x, e.fma(ex, e.c(hi), e.fma(ex, e.c(lo), logm)))


def _log2(e: _E, x):
    ex, logm = _log_parts(e, x)
    hi, lo = _LOG2E_PARTS[e.f.name]
    return _log_special(e, x, e.fma(logm, e.c(hi), e.fma(logm, e.c(lo), ex)))


def _pio2_parts(f: _Fmt):
    """pi/2 as the sum of three numbers of the format (computed with exact rationals)."""
    if f is _F32:
        return 1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15
    return 1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33


def _sincos(e: _E, x):
    """(sin x, cos x) from one reduction."""
    b = e.b
    k = e.rint(b.fmul(x, e.c(2 / math.pi)))
    nk = b.fneg(k)
    r = x
    for p in _pio2_parts(e.f):
        r = e.fma(nk, e.c(p), r)
    z = b.fmul(r, r)
    ns, nc = (5, 6) if e.f is _F32 else (9, 10)
    sp = e.poly(z, [(-1) ** (j + 1) / math.factorial(2 * j + 3) for j in range(ns - 1)])
    s = e.fma(b.fmul(r, z), sp, r)
    cp = e.poly(z, [(-1) ** j / math.factorial(2 * j + 4) for j in range(nc - 1)])
    c = e.fma(b.fmul(z, z), cp, e.fma(z, e.c(-0.5), e.c(1.0)))
    q = b.and_(b.trunc(e.intr(f"llvm.fptosi.sat.i64.{e.f.name}", k, ret=I64), I32), ir.Constant(I32, 3))
    odd = b.trunc(q, ir.IntType(1))
    neg_s = b.icmp_unsigned(">=", q, ir.Constant(I32, 2))  # sin negated in quadrants 2, 3
    neg_c = b.icmp_unsigned("==", b.and_(b.add(q, ir.Constant(I32, 1)), ir.Constant(I32, 2)), ir.Constant(I32, 2))
    sin_v = e.sel(odd, c, s)
    cos_v = e.sel(odd, s, c)
    sin_v = e.sel(neg_s, b.fneg(sin_v), sin_v)
    cos_v = e.sel(neg_c, b.fneg(cos_v), cos_v)
    return sin_v, cos_v


def _tanh(e: _E, x):
    b = e.b
    a = e.intr(f"llvm.fabs.{e.f.name}", x)
    a = e.sel(e.gt(a, e.c(10.0 if e.f is _F32 else 20.0)), e.c(10.0 if e.f is _F32 else 20.0), a)
    m = _expm1(e, b.fmul(a, e.c(2.0)))
    t = b.fdiv(m, b.fadd(m, e.c(2.0)))
    return e.intr(f"llvm.copysign.{e.f.name}", t, x)


def _sigmoid(e: _E, x):
    return e.b.fdiv(e.c(1.0), e.b.fadd(e.c(1.0), _exp(e, e.b.fneg(x))))


@lru_cache(maxsize=None)
def _erfc_fit(name: str):
    """Chebyshev coefficients of h(t) = erfc(x)·exp(x²), t = (x - mid)/half on [1, top], fitted
    by least squares on Chebyshev nodes (computed once, on first use)."""
    top, deg = (4.0, 16) if name == "f32" else (6.0, 30)
    mid, half = (top + 1) / 2, (top - 1) / 2
    t = np.cos(np.pi * (np.arange(400) + 0.5) / 400)
    xs = mid + half * t
    h = np.array([math.erfc(v) * math.exp(v * v) for v in xs])
    cheb = np.polynomial.chebyshev.Chebyshev.fit(t, h, deg, domain=[-1, 1])
    return top, mid, half, [float(c) for c in cheb.coef]


def _clenshaw(e: _E, t, coef):
    """sum c_k T_k(t), evaluated stably."""
    b = e.b
    t2 = b.fmul(t, e.c(2.0))
    b1, b2 = e.c(0.0), e.c(0.0)
    for c in reversed(coef[1:]):
        b1, b2 = b.fadd(e.fma(t2, b1, b.fneg(b2)), e.c(c)), b1
    return b.fadd(e.fma(t, b1, b.fneg(b2)), e.c(coef[0]))


def _erf(e: _E, x):
    b = e.b
    a = e.intr(f"llvm.fabs.{e.f.name}", x)
    z = b.fmul(a, a)
    nt = 11 if e.f is _F32 else 19
    small = b.fmul(a, e.poly(z, [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
                                 for n in range(nt)]))
    top, mid, half, coef = _erfc_fit(e.f.name)
    ac = e.sel(e.gt(a, e.c(top)), e.c(top), a)
    t = b.fdiv(b.fsub(ac, e.c(mid)), e.c(half))
    h = _clenshaw(e, t, coef)
    hi = b.fmul(ac, ac)
    lo = e.fma(ac, ac, b.fneg(hi))
    ex = b.fmul(_exp(e, b.fneg(hi)), b.fsub(e.c(1.0), lo))
    large = b.fsub(e.c(1.0), b.fmul(ex, h))
    large = e.sel(e.gt(a, e.c(top)), e.c(1.0), large)
    r = e.sel(e.lt(a, e.c(1.0)), small, large)
    return e.intr(f"llvm.copysign.{e.f.name}", r, x)


def _pow(e: _E, x, y):
    """numpy's power for floats: negative bases need integer exponents; pow(x, 0) = 1."""
    b, f = e.b, e.f
    wide = _E(b, _F64)
    ax = e.intr(f"llvm.fabs.{f.name}", x)
    axw, yw = (b.fpext(ax, F64), b.fpext(y, F64)) if f is _F32 else (ax, y)
    lg = _log2(wide, axw)
    r = _exp2(wide, b.fmul(yw, lg))
    r = b.fptrunc(r, F32) if f is _F32 else r
    yi = e.rint(y)
    is_int = e.eq(yi, y)
    half = b.fmul(y, e.c(0.5))
    is_odd = b.and_(is_int, b.fcmp_ordered("!=", e.rint(half), half))
    neg = e.lt(x, e.c(0.0))
    r = e.sel(b.and_(neg, is_odd), b.fneg(r), r)
    r = e.sel(b.and_(neg, b.not_(is_int)), e.c(float("nan")), r)
    # 1**y = 1 even for y = nan/inf; (-1)**y = ±1 for integer (and infinite) y, else NaN
    unit = e.sel(is_int, e.sel(is_odd, e.c(-1.0), e.c(1.0)), e.c(float("nan")))
    r = e.sel(e.eq(ax, e.c(1.0)), e.sel(neg, unit, e.c(1.0)), r)
    return e.sel(e.eq(y, e.c(0.0)), e.c(1.0), r)


def _sqrt(e, x):
    return e.intr(f"llvm.sqrt.{e.f.name}", x)


def _rsqrt(e, x):
    return e.b.fdiv(e.c(1.0), _sqrt(e, x))


_ACCURATE = {
    "exp": _exp, "exp2": _exp2, "log": _log, "log2": _log2,
    "sin": lambda e, x: _sincos(e, x)[0], "cos": lambda e, x: _sincos(e, x)[1],
    "tanh": _tanh, "sigmoid": _sigmoid, "erf": _erf, "pow": _pow, "sqrt": _sqrt, "rsqrt": _rsqrt,
}
MATH_FUNCTIONS = tuple(_ACCURATE)

_LOG2E, _LN2 = 1 / math.log(2), math.log(2)


def _nv(e, name, x):
    return e.intr(f"llvm.nvvm.{name}.approx.ftz.f", x)


def _tanh_approx(e, x):
    return e.b.asm(ir.FunctionType(F32, [F32]), "tanh.approx.f32 $0, $1;", "=f,f", [x], False)


_FAST = {
    "exp": lambda e, x: _nv(e, "ex2", e.b.fmul(x, e.c(_LOG2E))),
    "exp2": lambda e, x: _nv(e, "ex2", x),
    "log": lambda e, x: e.b.fmul(_nv(e, "lg2", x), e.c(_LN2)),
    "log2": lambda e, x: _nv(e, "lg2", x),
    "sin": lambda e, x: _nv(e, "sin", x),
    "cos": lambda e, x: _nv(e, "cos", x),
    "tanh": _tanh_approx,
    "sigmoid": lambda e, x: e.fma(_tanh_approx(e, e.b.fmul(x, e.c(0.5))), e.c(0.5), e.c(0.5)),
    "rsqrt": lambda e, x: _nv(e, "rsqrt", x),
    "sqrt": lambda e, x: _nv(e, "sqrt", x),
}


def _function(module: ir.Module, name: str, fmt: _Fmt, fast: bool, nargs: int) -> ir.Function:
    use_fast = fast and fmt is _F32 and name in _FAST
    sym = f"__tilec_{name}_{fmt.name}{'_fast' if use_fast else ''}"
    fn = module.globals.get(sym)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(fmt.ty, [fmt.ty] * nargs), sym)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = _E(b, fmt)
    impl = _FAST[name] if use_fast else _ACCURATE[name]
    b.ret(impl(e, *fn.args))
    return fn


def call_math(builder: ir.IRBuilder, name: str, args, fast: bool = False) -> ir.Value:
    """Call math function `name` on f32 or f64 llvmlite values."""
    if name not in _ACCURATE:
        raise ValueError(f"no math function {name!r}; known: {', '.join(MATH_FUNCTIONS)}")
    ty = args[0].type
    fmt = {F32: _F32, F64: _F64}.get(ty)
    if fmt is None:
        raise TypeError(f"math functions take f32 or f64, got {ty}")
    fn = _function(builder.module, name, fmt, fast, len(args))
    return builder.call(fn, list(args))


def host_functions() -> Dict[str, str]:
    """Names of the accurate functions and their arity (for the host-JIT tests)."""
    return {n: (2 if n == "pow" else 1) for n in _ACCURATE}
