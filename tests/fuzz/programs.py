"""Hypothesis strategies that write random, well-typed tilec kernels as source text.

`programs()` draws one `Program`: a kernel of a few statements (loads, a small expression
of elementwise ops, maybe a reduction, scan, shape op, dot, loop, branch, atomic or
random draw, then a store) with its arguments. Every value carries

- its dtype (tilec's promotion rules, `tilec.dtypes.promote`),
- `mag`, a bound on its magnitude, and
- `err`, a bound on how far two correct implementations may disagree on it (0: they must
  agree bit for bit). An op that both sides round correctly (+ - * of floats, casts,
  min/max, abs, floor) adds nothing; a transcendental, a division, a float reduction or
  a dot adds its rounding (see run.py's table) and propagates the error of its inputs.

Programs avoid what the language leaves undefined, so any disagreement is a bug: integer
division by zero, shifts past the width, float-to-int conversion of NaN or out-of-range
values, unmasked pointers out of bounds, and two programs writing one element. Integer
results, comparisons and `argmax` only ever see exact values (err 0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
from hypothesis import strategies as st

from tilec import dtypes as dt

from .program import KERNEL, Program

F32, F16, BF16, I32, I64, U8 = dt.float32, dt.float16, dt.bfloat16, dt.int32, dt.int64, dt.uint8
TC = {F32: "tc.float32", F16: "tc.float16", BF16: "tc.bfloat16", I32: "tc.int32", I64: "tc.int64",
      U8: "tc.uint8", dt.bool_: "tc.bool_", dt.uint32: "tc.uint32", dt.float64: "tc.float64"}
# Unit roundoff of each float type.
EPS = {"f16": 2.0**-11, "bf16": 2.0**-8, "f32": 2.0**-24, "f64": 2.0**-53}
# How many units of roundoff each inexact op may be off by on one side (libdevice-style
# f32 math is within 2 ulps; the interpreter's numpy within 1; both round at the end).
ULPS = {"exp": 4, "exp2": 4, "log": 4, "log2": 4, "sqrt": 1, "rsqrt": 4, "sin": 4, "cos": 4, "tanh": 8,
        "sigmoid": 8, "erf": 8, "/": 2}
ARRAY_DTYPES = [F32, F16, I32, I64, U8]  # bf16 is reached by casts (numpy has no bf16)
LOAD_DTYPES = [F32, F16, BF16, I32, I64, U8]


@dataclass
class V:
    text: str
    dtype: dt.DType
    shape: Tuple[int, ...]   # () for a scalar
    mag: float
    err: float = 0.0

    @property
    def exact(self) -> bool:
        return self.err == 0.0


def eps(d: dt.DType) -> float:
    return EPS.get(d.name, 0.0)


def fmax(d: dt.DType) -> float:
    return {"f16": 65504.0, "bf16": 3.3e38, "f32": 3.4e38, "f64": 1.7e308}[d.name]


def rounding(d: dt.DType, mag: float) -> float:
    """What rounding one result of magnitude `mag` to `d` may add."""
    return eps(d) * mag if d.is_float else 0.0


class Gen:
    """Writes one kernel: lines, arguments, outputs."""

    def __init__(self, draw):
        self.draw = draw
        self.lines: List[str] = []
        self.params: List[str] = []
        self.args: List[tuple] = []
        self.outputs = {}
        self.features: List[str] = []
        self.rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        self.n = 0
        self.indent = 1
        self.funcs: List[str] = []   # @tc.func helpers written before the kernel

    # plumbing ----------------------------------------------------------------------
    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def chance(self, p: float = 0.5) -> bool:
        # hypothesis favours small integers (and shrinks towards 0): 0 means "no", so a
        # feature is off in the simplest program and on with probability about p
        return self.draw(st.integers(0, 999)) >= 1000 - int(p * 1000)

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def emit(self, line: str):
        self.lines.append("    " * self.indent + line)

    def let(self, v: V, stem: str = "t") -> V:
        name = self.name(stem)
        self.emit(f"{name} = {v.text}")
        return V(name, v.dtype, v.shape, v.mag, v.err)

    def feature(self, f: str):
        if f not in self.features:
            self.features.append(f)

    def array(self, stem: str, d: dt.DType, shape, lo=-4.0, hi=4.0) -> str:
        name = self.name(stem)
        if d.is_float:
            a = self.rng.uniform(lo, hi, size=shape).astype(d.np)
        elif d is U8:
            a = self.rng.integers(0, 256, size=shape).astype(np.uint8)
        else:
            a = self.rng.integers(-1000, 1000, size=shape).astype(d.np)
        self.params.append(name)
        self.args.append((name, a))
        return name

    def out_array(self, d: dt.DType, shape, err: float) -> str:
        """An output array filled with a sentinel pattern, so that stray or missing writes
        show as well as wrong values."""
        name = self.array("out", d, shape)
        self.outputs[name] = float(err)
        return name

    def scalar(self, stem: str, value) -> V:
        name = self.name(stem)
        self.params.append(name)
        self.args.append((name, value))
        if isinstance(value, float):
            return V(name, F32, (), abs(value))
        if isinstance(value, np.generic):
            return V(name, dt.from_numpy(value.dtype), (), abs(float(value)))
        return V(name, I32 if -2**31 <= value < 2**31 else I64, (), abs(value))

    def program(self, grid, options=None) -> Program:
        src = ["import tilec as tc", "", "", *self.funcs, "@tc.kernel", f"def {KERNEL}({', '.join(self.params)}):", *self.lines, ""]
        return Program("\n".join(src), self.args, tuple(grid), self.outputs, options or {}, self.features)


# ------------------------------------------------------------------------------ values


def literal(g: Gen, d: dt.DType) -> V:
    if d.is_float:
        x = g.pick([0.5, 2.0, -1.5, 3.0, 0.25, -0.75])
        return V(repr(x), d, (), abs(x))
    x = g.pick([1, 2, 3, 7, 5]) if d.kind == "u" else g.pick([1, 2, 3, -3, 7, -5])
    return V(repr(x) if x >= 0 else f"({x})", d, (), abs(x))


def cast(g: Gen, v: V, d: dt.DType) -> V:
    """`v.astype(d)`, guarded where float to int would be undefined."""
    if v.dtype is d:
        return v
    if v.dtype.is_float and not d.is_float:
        assert v.exact
        lo, hi = (0.0, 200.0) if d.kind == "u" else (-1000.0, 1000.0)
        text = v.text
        if v.mag >= fmax(v.dtype) / 4:  # may hold inf or NaN: map NaN to 0, clamp the rest
            text = f"tc.where({text} == {text}, {text}, 0.0)"
        g.feature("cast_f2i")
        return V(f"tc.clamp({text}, {lo}, {hi}).astype({TC[d]})", d, v.shape, min(v.mag, hi))
    g.feature(f"cast_{v.dtype.name}_{d.name}")
    mag = v.mag if not (v.dtype.is_int and d.is_int and d.bits < v.dtype.bits) else float(2 ** d.bits)
    if d.is_int and not v.dtype.is_int and not v.dtype.is_bool:
        mag = min(mag, 2.0 ** d.bits)
    err = v.err + rounding(d, v.mag) if v.err or (d.is_float and eps(d) > eps(v.dtype) and not v.dtype.is_int) else v.err
    # a correctly rounded cast of an exact value stays exact (both sides round the same)
    if v.exact:
        err = 0.0
    if d.is_float and v.mag > fmax(d):
        mag = math.inf
    return V(f"({v.text}).astype({TC[d]})", d, v.shape, mag, err)


def bshape(a, b):
    if not a:
        return b
    if not b:
        return a
    return tuple(max(x, y) for x, y in zip(a, b))


def binary(g: Gen, a: V, b: V) -> V:
    """One binary op between two values (tiles or scalars) of any dtypes."""
    d = dt.promote(a.dtype, b.dtype)
    shape = bshape(a.shape, b.shape)
    if d.is_bool:
        op = g.pick(["&", "|", "^"])
        return V(f"({a.text} {op} {b.text})", d, shape, 1.0)
    ops = ["+", "-", "*", "min", "max"] + (["&", "|", "^", "//", "%", "<<", ">>"] if d.is_int else ["/", "fma"])
    op = g.pick(ops)
    g.feature(f"op{op}_{d.name}")
    ea, eb = a.err, b.err
    if op in ("+", "-"):
        mag = a.mag + b.mag
        return _float_guard(V(f"({a.text} {op} {b.text})", d, shape, mag, ea + eb + _r(d, mag, ea + eb)))
    if op == "*":
        mag = a.mag * b.mag
        err = ea * b.mag + eb * a.mag + ea * eb
        return _float_guard(V(f"({a.text} * {b.text})", d, shape, mag, err + _r(d, mag, err)))
    if op in ("min", "max"):
        return V(f"tc.{op}imum({a.text}, {b.text})", d, shape, max(a.mag, b.mag), max(ea, eb))
    if op == "fma":
        c = literal(g, d)
        mag = a.mag * b.mag + c.mag
        err = ea * b.mag + eb * a.mag + ea * eb
        return _float_guard(V(f"tc.fma({a.text}, {b.text}, {c.text})", d, shape, mag, err + _r(d, mag, err)))
    if op == "/":  # divisor at least 1 in magnitude; the quotient is rounded by each side
        den = f"(abs({b.text}) + 1.0)"
        d = dt.promote(a.dtype, b.dtype if b.dtype.is_float else F32)
        err = ea + eb * a.mag + ULPS["/"] * eps(d) * a.mag
        return V(f"({a.text} / {den})", d, shape, a.mag, err)
    # integers: exact, wrapping; divisors positive, shift counts within the width
    if op in ("//", "%"):
        g.feature("intdiv")
        den = f"(({b.text} & 15) + 1)"
        mag = a.mag if op == "//" else 16.0
        return V(f"({a.text} {op} {den})", d, shape, mag)
    if op in ("<<", ">>"):
        if a.dtype.is_bool:
            op, a = "&", cast(g, a, I32)
        else:  # the count stays below the width of the shifted value's own type
            k = g.draw(st.integers(0, a.dtype.bits - 1))
            return V(f"({a.text} {op} {k})", a.dtype, a.shape, float(2 ** a.dtype.bits))
    d = dt.promote(a.dtype, b.dtype)
    return V(f"({a.text} {op} {b.text})", d, shape, float(2 ** d.bits))


def _r(d: dt.DType, mag: float, err_in: float) -> float:
    """Rounding added by an op that both sides round correctly: none while the inputs are
    exact (the results are then equal); after an inexact input, one rounding each side."""
    return 0.0 if err_in == 0.0 else 2 * rounding(d, mag)


def _float_guard(v: V) -> V:
    if v.dtype.is_float and v.mag >= fmax(v.dtype) and v.err:
        v.err = math.inf  # may overflow on one side only: not comparable (callers avoid it)
    return v


def unary(g: Gen, a: V) -> V:
    d = a.dtype
    if d.is_bool:
        return V(f"(~{a.text})", d, a.shape, 1.0)
    if d.is_int:
        op = g.pick(["-", "abs", "~"] if d.kind == "i" else ["~", "abs"])
        g.feature(f"un{op}_{d.name}")
        return V(f"({op}{a.text})" if op != "abs" else f"abs({a.text})", d, a.shape, float(2 ** d.bits))
    fn = g.pick(["-", "abs", "floor", "ceil", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh",
                 "sigmoid", "erf"])
    g.feature(f"un{fn}_{d.name}")
    if fn == "-":
        return V(f"(-{a.text})", d, a.shape, a.mag, a.err)
    if fn == "abs":
        return V(f"abs({a.text})", d, a.shape, a.mag, a.err)
    if fn in ("floor", "ceil"):
        if not a.exact:  # a rounding difference could move the result by one
            return V(f"abs({a.text})", d, a.shape, a.mag, a.err)
        return V(f"tc.{fn}({a.text})", d, a.shape, a.mag + 1)
    x, xm = a.text, a.mag
    if fn in ("exp", "exp2"):
        if xm > 8:
            x, xm = f"tc.clamp({x}, -8.0, 8.0)", 8.0
        mag = math.exp(xm) if fn == "exp" else 2.0 ** xm
        deriv = mag
    elif fn in ("log", "log2", "sqrt", "rsqrt"):
        x, xm = f"(abs({x}) + 1.0)", xm + 1
        mag = {"log": math.log(xm), "log2": math.log2(xm), "sqrt": math.sqrt(xm), "rsqrt": 1.0}[fn]
        deriv = 1.5
    else:
        mag, deriv = (1.0 if fn != "erf" else 1.0), 1.2
    err = a.err * deriv + ULPS[fn] * eps(d) * max(mag, 1e-30) + (eps(d) * mag if d is not F32 else 0.0)
    return V(f"tc.{fn}({x})", d, a.shape, mag, err)


def compare(g: Gen, a: V, b: V) -> V:
    """A bool tile from exact operands."""
    op = g.pick(["<", "<=", ">", ">=", "==", "!="])
    g.feature("compare")
    return V(f"({a.text} {op} {b.text})", dt.bool_, bshape(a.shape, b.shape), 1.0)


def expression(g: Gen, leaves: List[V], depth: int, top: bool = True) -> V:
    """A random expression over `leaves` (tiles and scalars of one shape class)."""
    if depth == 0 or (not top and g.chance(0.25)):
        tiles = [v for v in leaves if v.shape]
        v = g.pick(tiles) if tiles and g.chance(0.75) else g.pick(leaves)
        if g.chance(0.2):
            v = cast(g, v, g.pick(LOAD_DTYPES)) if (v.exact or not v.dtype.is_float) else v
        return v
    kind = g.pick(["binary", "binary", "binary", "unary", "where", "cast", "literal"])
    a = expression(g, leaves, depth - 1, False)
    if kind == "unary":
        return unary(g, a)
    if kind == "cast":
        if a.dtype.is_float and not a.exact:
            return cast(g, a, g.pick([F32, F16, BF16]))
        return cast(g, a, g.pick(LOAD_DTYPES))
    if kind == "literal":
        lit = literal(g, a.dtype if not a.dtype.is_bool else I32)
        op = g.pick(["+", "*", "-"])
        d = dt.promote_with_python_scalar(a.dtype, 1) if not a.dtype.is_bool else I32
        mag = a.mag * lit.mag if op == "*" else a.mag + lit.mag
        err = a.err * lit.mag if op == "*" else a.err
        return _float_guard(V(f"({a.text} {op} {lit.text})", d, a.shape, mag, err + _r(d, mag, err)))
    b = expression(g, leaves, depth - 1, False)
    if kind == "where":
        exact = [v for v in (a, b, *leaves) if v.exact and not v.dtype.is_bool]
        if not exact:
            return binary(g, a, b)
        cx, cy = g.pick(exact), g.pick(exact)
        g.feature("where")
        cond = compare(g, cx, cy)
        d = dt.promote(a.dtype, b.dtype)
        return V(f"tc.where({cond.text}, {a.text}, {b.text})", d, bshape(cond.shape, bshape(a.shape, b.shape)),
                 max(a.mag, b.mag), max(a.err, b.err))
    v = binary(g, a, b)
    if math.isinf(v.err):
        return a
    return v


# ------------------------------------------------------------------------------ memory


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def ragged(g: Gen, tile: int, max_tiles: int = 3) -> int:
    """An array extent that is usually not a multiple of the tile's."""
    return g.draw(st.integers(1, tile * max_tiles))


def padding(g: Gen, d: dt.DType):
    if d.is_float:
        return g.pick([0.0, 1.0, -2.5, 7.0])
    return g.pick([0, 1, 7, 255] if d.kind == "u" else [0, 1, -1, 7])


def pad_text(p) -> str:
    return repr(p)


class Tiling:
    """Programs (pid0, pid1) each own one (BM, BN) tile of a (R, C) array (rank 2), or
    pid0 one (BN,) tile of a (C,) array (rank 1)."""

    def __init__(self, g: Gen, rank: int, bm: int, bn: int, rows: int, cols: int):
        self.g, self.rank, self.bm, self.bn, self.rows, self.cols = g, rank, bm, bn, rows, cols
        self.shape = (bm, bn) if rank == 2 else (bn,)
        self.array_shape = (rows, cols) if rank == 2 else (cols,)
        self.grid = (cdiv(rows, bm), cdiv(cols, bn)) if rank == 2 else (cdiv(cols, bn),)
        self._ptrs = {}

    def pids(self):
        self.g.emit("pid0 = tc.program_id(0)")
        if self.rank == 2:
            self.g.emit("pid1 = tc.program_id(1)")

    def offsets(self, shift) -> str:
        """Names of the element offsets and the mask of the tile shifted by `shift` in an
        array of this tiling's shape (written once per shift and array)."""
        key = shift
        if key in self._ptrs:
            return self._ptrs[key]
        g = self.g
        if self.rank == 1:
            o = g.name("offs")
            g.emit(f"{o} = pid0 * {self.bn} + tc.arange(0, {self.bn}) + {shift[0]}")
            self._ptrs[key] = (o,)
        else:
            r, c = g.name("rows"), g.name("cols")
            g.emit(f"{r} = pid0 * {self.bm} + tc.arange(0, {self.bm})[:, None] + {shift[0]}")
            g.emit(f"{c} = pid1 * {self.bn} + tc.arange(0, {self.bn})[None, :] + {shift[1]}")
            self._ptrs[key] = (r, c)
        return self._ptrs[key]

    def pointer(self, x: str, shift):
        names = self.offsets(shift)
        if self.rank == 1:
            o, = names
            return f"{x}.ptr + {o}", f"({o} >= 0) & ({o} < {x}.shape[0])"
        r, c = names
        return (f"{x}.ptr + {r} * {x}.stride(0) + {c} * {x}.stride(1)",
                f"({r} >= 0) & ({r} < {x}.shape[0]) & ({c} >= 0) & ({c} < {x}.shape[1])")

    def shift(self):
        if self.g.chance(0.6):
            return (0,) * self.rank
        return tuple(self.g.draw(st.integers(-3, 3)) for _ in range(self.rank))

    def load(self, x: str, d: dt.DType, mag: float) -> V:
        g = self.g
        mode = g.pick(["index", "offset", "pointer"])
        g.feature(f"load_{mode}")
        p = padding(g, d)
        shape = self.shape
        if mode == "index":
            idx = "(pid0, pid1)" if self.rank == 2 else "(pid0,)"
            text = f"tc.load({x}, index={idx}, shape={shape}, padding={pad_text(p)})"
        else:
            sh = self.shift()
            if mode == "offset":
                off = (f"(pid0 * {self.bm} + {sh[0]}, pid1 * {self.bn} + {sh[1]})" if self.rank == 2
                       else f"(pid0 * {self.bn} + {sh[0]},)")
                text = f"tc.load({x}, offset={off}, shape={shape}, padding={pad_text(p)})"
            else:
                ptr, mask = self.pointer(x, sh)
                hints = ""
                if g.chance(0.2):   # same values; reads the aligned blocks around each group
                    hints += ", realign=True"
                    g.feature("realign")
                if g.chance(0.15):
                    hints += f", eviction_policy={g.pick(['evict_first', 'evict_last'])!r}"
                    g.feature("eviction_policy")
                text = f"tc.load({ptr}, mask={mask}, other={pad_text(p)}{hints})"
        return g.let(V(text, d, shape, max(mag, abs(p))), "x")

    def store(self, x: str, v: V):
        g = self.g
        mode = g.pick(["index", "offset", "pointer"])
        g.feature(f"store_{mode}")
        if mode == "index":
            idx = "(pid0, pid1)" if self.rank == 2 else "(pid0,)"
            g.emit(f"tc.store({x}, index={idx}, tile={v.text})")
            return
        sh = self.shift()   # every program shifts alike: their tiles stay disjoint
        if mode == "offset":
            off = (f"(pid0 * {self.bm} + {sh[0]}, pid1 * {self.bn} + {sh[1]})" if self.rank == 2
                   else f"(pid0 * {self.bn} + {sh[0]},)")
            g.emit(f"tc.store({x}, offset={off}, tile={v.text})")
        else:
            ptr, mask = self.pointer(x, sh)
            g.emit(f"tc.store({ptr}, {v.text}, mask={mask})")


def input_tiles(g: Gen, tiling: Tiling, count: int, dtypes=None) -> List[V]:
    tiles = []
    for _ in range(count):
        d = g.pick(dtypes or LOAD_DTYPES)
        stored = F32 if d is BF16 else d
        x = g.array("a", stored, tiling.array_shape)
        v = tiling.load(x, stored, {U8: 255.0, I32: 1000.0, I64: 1000.0}.get(stored, 4.0))
        if d is BF16:
            v = g.let(V(f"{v.text}.astype(tc.bfloat16)", BF16, v.shape, v.mag), "x")
            g.feature("bf16")
        tiles.append(v)
    return tiles


def vector_tile(g: Gen, tiling: Tiling) -> V:
    """A row (1, BN) or column (BM, 1) of a 1-D array, to broadcast against the tiles."""
    d = g.pick([F32, F16, I32])
    if g.chance(0.5):
        x = g.array("row", d, (tiling.cols,))
        text = f"tc.load({x}, index=(pid1,), shape=({tiling.bn},), padding={padding(g, d)!r})[None, :]"
        shape = (1, tiling.bn)
    else:
        x = g.array("col", d, (tiling.rows,))
        text = f"tc.expand_dims(tc.load({x}, index=(pid0,), shape=({tiling.bm},), padding={padding(g, d)!r}), 1)"
        shape = (tiling.bm, 1)
    g.feature("vector_broadcast")
    return g.let(V(text, d, shape, 1000.0 if d is I32 else 7.0), "x")


def scalar_args(g: Gen) -> List[V]:
    out = []
    if g.chance(0.4):
        out.append(g.scalar("s", g.draw(st.integers(-5, 9))))
    if g.chance(0.3):
        out.append(g.scalar("alpha", g.pick([0.5, -1.25, 3.0])))
    if g.chance(0.15):
        out.append(g.scalar("h", g.pick([np.float16(1.5), np.int64(-3), np.uint8(6)])))
        g.feature("numpy_scalar")
    return out


def as_tile(g: Gen, v: V, like: V) -> V:
    """A full tile: a scalar expression is combined with a tile of the right shape."""
    if v.shape == like.shape:
        return v
    if not broadcastable(v.shape, like.shape):   # a reduced tile against a full one: its max (exact)
        v = V(f"tc.max({v.text})", v.dtype, (), v.mag, v.err)
    if not v.shape and g.chance(0.7):
        w = binary(g, like, v)
        if math.isfinite(w.err):
            return w
    g.feature("broadcast")
    return V(f"tc.broadcast_to({v.text}, {like.shape})" if v.shape else f"tc.full({like.shape}, {v.text}, {TC[v.dtype]})",
             v.dtype, like.shape, v.mag, v.err)


def broadcastable(shape, to) -> bool:
    """numpy's rule, as tc.broadcast_to applies it: each of `shape`'s dims is 1 or `to`'s."""
    return len(shape) <= len(to) and all(a in (1, b) for a, b in zip(reversed(shape), reversed(to)))


def storable(g: Gen, v: V) -> V:
    """A value an output array can hold: bf16 is widened to f32 (exactly)."""
    if v.dtype is BF16:
        return V(f"({v.text}).astype(tc.float32)", F32, v.shape, v.mag, v.err)
    return v


def early_return(g: Gen, grid) -> None:
    if g.chance(0.2):
        lim = g.draw(st.integers(0, grid[0]))
        s = g.scalar("limit", lim)
        g.emit(f"if pid0 >= {s.text}:")
        g.emit("    return")
        g.feature("early_return")


# ------------------------------------------------------------------------------ templates


def t_elementwise(g: Gen) -> Program:
    rank = g.pick([1, 2])
    bm = g.pick([1, 2, 4, 8, 16]) if rank == 2 else 1
    bn = g.pick([16, 32, 64, 128] if rank == 2 else [16, 32, 64, 128, 256])
    tiling = Tiling(g, rank, bm, bn, ragged(g, bm), ragged(g, bn))
    tiling.pids()
    early_return(g, tiling.grid)
    tiles = input_tiles(g, tiling, g.draw(st.integers(1, 3)))
    leaves = tiles + scalar_args(g)
    if rank == 2 and g.chance(0.3):
        leaves.append(vector_tile(g, tiling))
    e = as_tile(g, expression(g, leaves, g.draw(st.integers(2, 4))), tiles[0])
    if g.chance(0.25):   # a run-time branch choosing between two expressions
        e2 = as_tile(g, expression(g, leaves, 2), tiles[0])
        if e2.dtype is not e.dtype and e2.dtype.is_float and not e.dtype.is_float and not e2.exact:
            e2 = None
        if e2 is not None:
            e2 = cast(g, e2, e.dtype)
            cond = g.pick(["(pid0 % 2) == 0", "pid0 > 1", f"pid0 * 3 < {tiling.grid[0]}"])
            g.emit(f"if {cond}:")
            g.emit(f"    r = {e.text}")
            g.emit("else:")
            g.emit(f"    r = {e2.text}")
            e = V("r", e.dtype, e.shape, max(e.mag, e2.mag), max(e.err, e2.err))
            g.feature("if")
    e = storable(g, e)
    out = g.out_array(e.dtype, tiling.array_shape, e.err)
    tiling.store(out, e)
    return g.program(tiling.grid, {"num_warps": g.pick([1, 2, 4, 8])})


def store_block(g: Gen, v: V, grid, pids=("pid0", "pid1")) -> None:
    """Store a per-program result of any shape into its own block of a fresh output: program
    (pid0, pid1) writes block (pid0, pid1) of a 2-D array whose last blocks are ragged."""
    v = storable(g, v)
    if v.shape == ():
        v = V(f"tc.full((1, 1), {v.text}, {TC[v.dtype]})", v.dtype, (1, 1), v.mag, v.err)
    elif len(v.shape) == 1:
        v = V(f"tc.expand_dims({v.text}, 0)", v.dtype, (1,) + v.shape, v.mag, v.err)
    elif len(v.shape) == 3:
        v = V(f"tc.reshape({v.text}, ({v.shape[0] * v.shape[1]}, {v.shape[2]}))", v.dtype,
              (v.shape[0] * v.shape[1], v.shape[2]), v.mag, v.err)
    s0, s1 = v.shape
    g0, g1 = (tuple(grid) + (1,))[:2]
    shape = (g0 * s0 - g.draw(st.integers(0, s0 - 1)), g1 * s1 - g.draw(st.integers(0, s1 - 1)))
    out = g.out_array(v.dtype, shape, v.err)
    p1 = pids[1] if len(grid) > 1 else "0"
    g.emit(f"tc.store({out}, index=({pids[0]}, {p1}), tile={v.text})")


def sum_dtype(d: dt.DType) -> dt.DType:
    if d.is_bool or (d.kind == "i" and d.bits < 32):
        return I32
    if d.kind == "u" and d.bits < 32:
        return dt.uint32
    return d


def sum_err(v: V, n: int, d: dt.DType) -> float:
    """Two tree sums of n terms (f32 accumulation, rounded to d at the end)."""
    if not d.is_float:
        return 0.0
    total = n * v.mag
    return n * v.err + 2 * (math.log2(max(n, 2)) + 1) * EPS["f32"] * total + 2 * rounding(d, total)


def reduction(g: Gen, v: V) -> V:
    """A reduction or a scan of the tile `v` along a random axis."""
    op = g.pick(["sum", "max", "min", "argmax", "argmin", "cumsum", "prod", "combine"])
    if v.dtype.is_float and op == "prod":
        op = "sum"
    if v.dtype.is_bool and op == "combine":
        op = "max"
    if op in ("argmax", "argmin") and not v.exact:
        op = op[3:]
    rank = len(v.shape)
    axis = g.pick([None] + list(range(rank))) if op != "cumsum" else g.pick(list(range(rank)))
    keep = axis is not None and op != "cumsum" and g.chance(0.4)
    n = math.prod(v.shape) if axis is None else v.shape[axis]
    shape = () if axis is None else (v.shape[:axis] + ((1,) if keep else ()) + v.shape[axis + 1:])
    g.feature(f"red_{op}_{v.dtype.name}")
    kw = f", axis={axis}" + (", keep_dims=True" if keep else "")
    if op == "cumsum":
        rev = g.chance(0.4)
        d = sum_dtype(v.dtype)
        return V(f"tc.cumsum({v.text}, axis={axis}{', reverse=True' if rev else ''})", d, v.shape, n * v.mag,
                 sum_err(v, n, d))
    if op in ("sum", "prod"):
        d = sum_dtype(v.dtype)
        return V(f"tc.{op}({v.text}{kw})", d, shape, n * v.mag, sum_err(v, n, d) if op == "sum" else 0.0)
    if op in ("max", "min"):
        return V(f"tc.{op}({v.text}{kw})", v.dtype, shape, v.mag, v.err)
    if op == "combine":   # tc.reduce with a @tc.func combiner: exact (max of magnitudes)
        if not g.funcs:
            g.funcs += ["@tc.func", "def max_abs(a, b):", "    return tc.maximum(abs(a), abs(b))", "", ""]
        return V(f"tc.reduce({v.text}, {axis}, max_abs)", v.dtype, shape if not keep else
                 v.shape[:axis] + v.shape[axis + 1:], v.mag, v.err)
    return V(f"tc.{op}({v.text}{kw})", I32, shape, float(n))


def shape_op(g: Gen, v: V, leaves: List[V]) -> V:
    """A shape op on the 2-D tile `v`."""
    s0, s1 = v.shape
    op = g.pick(["T", "permute", "reshape", "reshape3", "cat", "expand"])
    g.feature(f"shape_{op}")
    if op == "T":
        return V(f"({v.text}).T", v.dtype, (s1, s0), v.mag, v.err)
    if op == "permute":
        return V(f"tc.permute({v.text}, (1, 0))", v.dtype, (s1, s0), v.mag, v.err)
    total = s0 * s1
    if op == "reshape":
        a = 2 ** g.draw(st.integers(0, int(math.log2(total))))
        return V(f"tc.reshape({v.text}, ({a}, {total // a}))", v.dtype, (a, total // a), v.mag, v.err)
    if op == "reshape3":
        k = int(math.log2(total))
        i = g.draw(st.integers(0, k))
        j = g.draw(st.integers(0, k - i))
        dims = (2 ** i, 2 ** j, 2 ** (k - i - j))
        perm = g.pick([(0, 2, 1), (1, 0, 2), (2, 1, 0), (1, 2, 0), (2, 0, 1)])
        out = tuple(dims[p] for p in perm)
        return V(f"tc.permute(tc.reshape({v.text}, {dims}), {perm})", v.dtype, out, v.mag, v.err)
    if op == "cat":
        other = as_tile(g, expression(g, leaves, 1), v)
        if other.dtype is not v.dtype:
            if other.dtype.is_float and not other.exact and not v.dtype.is_float:
                other = v
            other = cast(g, other, v.dtype)
        axis = g.pick([0, 1])
        shape = (2 * s0, s1) if axis == 0 else (s0, 2 * s1)
        return V(f"tc.cat({v.text}, {other.text}, axis={axis})", v.dtype, shape, max(v.mag, other.mag),
                 max(v.err, other.err))
    # expand: a row or column reduction broadcast back over the tile and combined with it
    axis = g.pick([0, 1])
    red = g.pick(["max", "min"] + (["sum"] if v.dtype.is_float or v.dtype.bits >= 32 else []))
    d = v.dtype if red != "sum" else sum_dtype(v.dtype)
    n = v.shape[axis]
    err = v.err if red != "sum" else sum_err(v, n, d)
    r = f"tc.expand_dims(tc.{red}({v.text}, axis={axis}), {axis})"
    b = V(f"tc.broadcast_to({r}, {v.shape})", d, v.shape, v.mag * (n if red == "sum" else 1), err)
    return binary(g, v, b)


def t_reduce(g: Gen) -> Program:
    bm = g.pick([1, 2, 4, 8, 16, 32])
    bn = g.pick([16, 32, 64])
    tiling = Tiling(g, 2, bm, bn, ragged(g, bm), ragged(g, bn))
    tiling.pids()
    early_return(g, tiling.grid)
    tiles = input_tiles(g, tiling, g.draw(st.integers(1, 2)))
    leaves = tiles + scalar_args(g)
    e = as_tile(g, expression(g, leaves, g.draw(st.integers(1, 3))), tiles[0])
    if not math.isfinite(e.err) or e.mag > 1e6:
        e = tiles[0]
    e = g.let(e)
    steps = g.draw(st.integers(1, 2))
    for _ in range(steps):
        if len(e.shape) == 2 and g.chance(0.5):
            e = shape_op(g, e, leaves)
        elif e.shape:
            e = reduction(g, e)
        if e.shape:
            e = g.let(e)
    store_block(g, e, tiling.grid)
    return g.program(tiling.grid, {"num_warps": g.pick([1, 2, 4, 8])})


def t_dot(g: Gen) -> Program:
    """C[BM, BN] tiles of A (M, K) @ B (K, N), over a run-time K loop or one K tile, with an
    epilogue; or a chained pair of dots (attention's shape: softmax(Q K^T) V)."""
    bm, bn, bk = g.pick([16, 32, 64, 128]), g.pick([16, 32, 64, 128]), g.pick([16, 32, 64])
    if bm * bn > 8192:
        bn = 8192 // bm
    kind = g.pick(["f16", "bf16", "f32", "tf32", "f16_arrays"])
    chained = g.chance(0.2)
    g.feature(f"dot_{kind}" + ("_chained" if chained else ""))
    m, n = ragged(g, bm, 2), ragged(g, bn, 2)
    k = ragged(g, bk, 3) if g.chance(0.7) else g.draw(st.integers(1, bk))
    store_dt = F16 if kind == "f16_arrays" else F32
    # batched: rank-3 arrays, (1, BM, BK) tiles reshaped to 2-D (attention's per-head tiles)
    nb = g.draw(st.integers(1, 3)) if g.chance(0.3) else 0
    lead = (nb,) if nb else ()
    a = g.array("A", store_dt, lead + (m, k), -1.0, 1.0)
    trans = g.chance(0.3)
    b = g.array("B", store_dt, lead + ((n, k) if trans else (k, n)), -1.0, 1.0)
    g.emit("pid0 = tc.program_id(0)")
    g.emit("pid1 = tc.program_id(1)")
    if nb:
        g.emit("pid2 = tc.program_id(2)")
        g.feature("dot_batched")

    def tile(x, i, j, r, c):
        if not nb:
            return f"tc.load({x}, index=({i}, {j}), shape=({r}, {c}))"
        return f"tc.reshape(tc.load({x}, index=(pid2, {i}, {j}), shape=(1, {r}, {c})), ({r}, {c}))"

    def put(out, i, j, val, r, c):
        if not nb:
            g.emit(f"tc.store({out}, index=({i}, {j}), tile={val})")
        else:
            g.emit(f"tc.store({out}, index=(pid2, {i}, {j}), tile=tc.reshape({val}, (1, {r}, {c})))")
    loop = g.pick(["range", "tc.range", "once"]) if k > bk else "once"
    stages = g.pick([1, 2, 3, 4]) if loop == "tc.range" else None
    options = {"num_warps": g.pick([4, 8]) if bm * bn >= 1024 else g.pick([1, 2, 4])}
    if loop == "range" and g.chance(0.5):
        options["num_stages"] = g.pick([1, 2, 3])
    if g.chance(0.25):
        options["warp_specialize"] = True
    if g.chance(0.15):
        options["tma"] = False
    g.emit(f"acc = tc.zeros(({bm}, {bn}), tc.float32)")
    if loop == "once":
        kk = "0"
    else:
        header = (f"for k in range(0, tc.cdiv({a}.shape[1], {bk})):" if loop == "range"
                  else f"for k in tc.range(0, tc.cdiv({a}.shape[1], {bk}), num_stages={stages}):")
        if nb:
            header = header.replace(f"{a}.shape[1]", f"{a}.shape[2]")
        g.emit(header)
        g.indent += 1
        kk = "k"
        g.feature(f"dot_loop_{loop}")
    ta = tile(a, "pid0", kk, bm, bk)
    tb = f"{tile(b, 'pid1', kk, bn, bk)}.T" if trans else tile(b, kk, "pid1", bk, bn)
    cast_to = {"f16": "tc.float16", "bf16": "tc.bfloat16"}.get(kind)
    if cast_to:
        ta, tb = f"{ta}.astype({cast_to})", f"({tb}).astype({cast_to})"
    tf32 = ", allow_tf32=True" if kind == "tf32" else ""
    if g.chance(0.5):
        g.emit(f"acc = tc.dot({ta}, {tb}, acc{tf32})")
    else:
        g.emit(f"acc += tc.dot({ta}, {tb}{tf32})")
    if loop != "once":
        g.indent -= 1
    else:
        k = min(k, bk)
    # f32 sums of K products of |x| <= 1 (rounded inputs are rounded alike on both sides)
    err = 2 * (math.log2(max(k, 2)) + 2) * EPS["f32"] * k + 2 * k * EPS["f32"] * k / 64
    v = V("acc", F32, (bm, bn), float(k), err)
    grid = (cdiv(m, bm), cdiv(n, bn)) + lead
    if chained:
        # p = exp(acc - rowmax) in (0, 1]; o = p @ V with V (N, D): one program per row block
        d_ = g.pick([16, 32, 64])
        vv = g.array("V", store_dt, lead + (n, d_), -1.0, 1.0)
        g.emit("p = tc.exp(acc - tc.max(acc, axis=1, keep_dims=True))")
        pd = cast_to or ("tc.float16" if kind == "f16_arrays" else "tc.float32")
        g.emit(f"pv = tc.dot(p.astype({pd}), {tile(vv, 'pid1', 0, bn, d_)}{'.astype(' + cast_to + ')' if cast_to else ''}{tf32})")
        e_p = 2 * err + 4 * EPS["f32"] + (EPS["f16"] if pd == "tc.float16" else 0.0) + (EPS["bf16"] if pd == "tc.bfloat16" else 0.0) \
            + (2 * EPS["f16"] if kind in ("tf32",) else 0.0)
        err2 = bn * e_p + 2 * (math.log2(bn) + 2) * EPS["f32"] * bn + 2 * bn * EPS["f32"] * bn / 64
        v = V("pv", F32, (bm, d_), float(bn), err2)
        out = g.out_array(F32, lead + (m, grid[1] * d_), err2)
        put(out, "pid0", "pid1", "pv", bm, d_)
        return g.program(grid, options)
    epi = g.pick(["none", "bias", "relu", "scale16"])
    g.feature(f"dot_epilogue_{epi}")
    if epi == "bias":
        bias = g.array("bias", F32, (n,))
        g.emit(f"acc = acc + tc.load({bias}, index=(pid1,), shape=({bn},))[None, :]")
        v = V("acc", F32, (bm, bn), k + 4.0, err + 2 * EPS["f32"] * (k + 4.0))
    elif epi == "relu":
        g.emit("acc = tc.maximum(acc, 0.0)")
    elif epi == "scale16":
        v = V("(acc * 0.5).astype(tc.float16)", F16, (bm, bn), k * 0.5, err * 0.5 + 2 * EPS["f16"] * k * 0.5)
    out = g.out_array(v.dtype, lead + (m, n), v.err)
    put(out, "pid0", "pid1", v.text, bm, bn)
    return g.program(grid, options)


def t_loop(g: Gen) -> Program:
    """Each program walks the column tiles of its rows in a run-time loop carrying a tile
    and a scalar, then stores them."""
    bm, bn = g.pick([1, 2, 4, 8]), g.pick([16, 32, 64])
    rows, cols = ragged(g, bm, 2), ragged(g, bn, 4)
    tiling = Tiling(g, 2, bm, bn, rows, cols)
    grid = (tiling.grid[0],)
    g.emit("pid0 = tc.program_id(0)")
    early_return(g, grid)
    loop = g.pick(["range", "tc.range", "while", "range_step"])
    stages = g.pick([1, 2, 3, 4]) if loop == "tc.range" else None
    d = g.pick(LOAD_DTYPES)
    stored = F32 if d is BF16 else d
    x = g.array("a", stored, (rows, cols))
    scal = scalar_args(g)
    # the carried values, of the type the body gives them
    brk = None
    if loop != "tc.range" and g.chance(0.3):
        brk = g.scalar("stop", g.draw(st.integers(0, cdiv(cols, bn))))
    nk = f"tc.cdiv({x}.shape[1], {bn})"
    g.feature(f"loop_{loop}")
    # body expression drawn first (into a scratch generator state) to know the carried type
    p = padding(g, stored)
    mode = g.pick(["index", "pointer"])
    if mode == "index":
        load = f"tc.load({x}, index=(pid0, k), shape=({bm}, {bn}), padding={p!r})"
    else:
        load = (f"tc.load({x}.ptr + rws * {x}.stride(0) + (k * {bn} + cls) * {x}.stride(1), "
                f"mask=(rws < {x}.shape[0]) & (k * {bn} + cls < {x}.shape[1]), other={p!r})")
        g.emit(f"rws = pid0 * {bm} + tc.arange(0, {bm})[:, None]")
        g.emit(f"cls = tc.arange(0, {bn})[None, :]")
    tile = V("t", stored, (bm, bn), max(4.0 if stored.is_float else {U8: 255.0}.get(stored, 1000.0), abs(p)))
    body_lines = [f"t = {load}"]
    if d is BF16:
        body_lines.append("t = t.astype(tc.bfloat16)")
        tile = V("t", BF16, tile.shape, tile.mag)
    saved = g.lines
    g.lines = []
    e = as_tile(g, expression(g, [tile] + scal, g.draw(st.integers(1, 3))), tile)
    if not math.isfinite(e.err) or e.mag > 1e4:
        e = tile
    if e.dtype.is_bool:
        e = cast(g, e, I32)
    extra, g.lines = g.lines, saved
    acc_dt = e.dtype
    combine = g.pick(["+", "max"] if acc_dt.is_float else ["+", "max", "^"])
    g.emit(f"acc = tc.zeros(({bm}, {bn}), {TC[acc_dt]})")
    sd = sum_dtype(acc_dt)
    g.emit(f"s = tc.zeros((1,), {TC[sd]})")
    iters = cdiv(cols, bn)
    if loop == "range":
        g.emit(f"for k in range(0, {nk}):")
    elif loop == "range_step":
        g.emit(f"for k in range({nk} - 1, -1, -1):")
    elif loop == "tc.range":
        g.emit(f"for k in tc.range(0, {nk}, num_stages={stages}):")
    else:
        g.emit("k = 0")
        g.emit(f"while k < {nk}:")
    g.indent += 1
    for ln in body_lines + [ln.strip() for ln in extra]:
        g.emit(ln)
    g.emit(f"e = {e.text}")
    if loop in ("range", "range_step") and g.chance(0.2):
        g.feature("loop_continue")
        g.emit(f"if k == {g.draw(st.integers(0, 3))}:")
        g.emit("    continue")
    if g.chance(0.3):   # each iteration writes its own tile (blocks skipped by break/continue keep theirs)
        g.feature("loop_store")
        se = storable(g, V("e", e.dtype, e.shape, e.mag, e.err))
        inner = g.out_array(se.dtype, (rows, cols), se.err)
        g.emit(f"tc.store({inner}, index=(pid0, k), tile={se.text})")
    upd = {"+": "acc + e", "max": "tc.maximum(acc, e)", "^": "acc ^ e"}[combine]
    if g.chance(0.3):
        g.feature("loop_if")
        g.emit("if k % 2 == 0:")
        g.emit(f"    acc = {upd}")
        g.emit("else:")
        g.emit("    acc = acc - e" if combine != "^" else "    acc = acc | e")
    else:
        g.emit(f"acc = {upd}")
    g.emit("s += tc.sum(e)")
    if brk is not None:
        g.feature("loop_break")
        g.emit(f"if k == {brk.text}:")
        g.emit("    break")
    if loop == "while":
        g.emit("k += 1")
    g.indent -= 1
    acc_err = iters * e.err + (2 * iters * rounding(acc_dt, iters * e.mag) if e.err else 0.0)
    s_err = iters * sum_err(e, bm * bn, sd) + 2 * rounding(sd, iters * bm * bn * e.mag) * iters
    if acc_dt.is_float and combine == "+" and e.err == 0.0:
        acc_err = 0.0   # one order on both sides, correctly rounded adds
    store_block(g, V("acc", acc_dt, (bm, bn), iters * e.mag, acc_err), grid)
    store_block(g, V("s", sd, (1,), iters * bm * bn * e.mag, s_err), grid)
    return g.program(grid, {"num_warps": g.pick([1, 2, 4])})


def t_atomic(g: Gen) -> Program:
    """Every program adds (or maxes) into a few bins: heavy contention on each address."""
    block = g.pick([16, 32, 64, 128])
    n = ragged(g, block, 4)
    nb = g.pick([1, 2, 4, 8, 32])
    op = g.pick(["add", "add", "max", "min"])
    d = g.pick([I32, I64, F32, dt.uint32] if op == "add" else [I32, I64, dt.uint32])
    g.feature(f"atomic_{op}_{d.name}")
    keys = g.array("keys", g.pick([I32, U8]), (n,))
    vals = g.array("vals", I32 if not d.is_float else F32, (n,), -4.0, 4.0)
    bins = g.array("bins", d, (nb,))
    g.emit("pid0 = tc.program_id(0)")
    g.emit(f"offs = pid0 * {block} + tc.arange(0, {block})")
    g.emit(f"m = offs < {keys}.shape[0]")
    g.emit(f"k = tc.load({keys}.ptr + offs, mask=m, other=0)")
    g.emit(f"v = tc.load({vals}.ptr + offs, mask=m, other=0)")
    if g.chance(0.4):
        g.emit("m = m & (v > 0)" if d.is_float else "m = m & ((v & 1) == 0)")
    val = "v" if (d is I32 or d is F32) else f"v.astype({TC[d]})"
    g.emit(f"tc.atomic_{op}({bins}.ptr + (k & {nb - 1}), {val}, mask=m)")
    err = 2 * (n + 1) * EPS["f32"] * (4.0 * n + 4.0) if d.is_float else 0.0
    g.outputs[bins] = err
    return g.program((cdiv(n, block),), {"num_warps": g.pick([1, 2, 4])})


def t_rand(g: Gen) -> Program:
    block = g.pick([16, 64, 256])
    n = ragged(g, block, 3)
    fn = g.pick(["rand", "randint", "rand4x", "dropout"])
    g.feature(f"rand_{fn}")
    seed = g.scalar("seed", g.draw(st.integers(0, 2**31 - 1)))
    g.emit("pid0 = tc.program_id(0)")
    g.emit(f"offs = pid0 * {block} + tc.arange(0, {block})")
    if fn == "randint":
        v = V(f"tc.randint({seed.text}, offs)", dt.uint32, (block,), 2.0**32)
    elif fn == "rand4x":
        g.emit(f"r0, r1, r2, r3 = tc.rand4x({seed.text}, offs)")
        v = V("tc.maximum(r0, r1) - r2 * r3", F32, (block,), 2.0)
    elif fn == "dropout":
        x = g.array("a", F32, (n,))
        g.emit(f"x = tc.load({x}, index=(pid0,), shape=({block},))")
        v = V(f"tc.where(tc.rand({seed.text}, offs) >= 0.3, x, 0.0)", F32, (block,), 4.0)
    else:
        v = V(f"tc.rand({seed.text}, offs)", F32, (block,), 1.0)
    out = g.out_array(v.dtype, (n,), v.err)
    g.emit(f"tc.store({out}.ptr + offs, {v.text}, mask=offs < {n})")
    return g.program((cdiv(n, block),), {"num_warps": g.pick([1, 4])})


TEMPLATES = {"elementwise": t_elementwise, "reduce": t_reduce, "dot": t_dot, "loop": t_loop,
             "atomic": t_atomic, "rand": t_rand}
# How often each is drawn: the memory and arithmetic core most, the rest often enough.
WEIGHTS = {"elementwise": 4, "reduce": 3, "dot": 2, "loop": 2, "atomic": 1, "rand": 1}


@st.composite
def programs(draw, kinds: Optional[List[str]] = None) -> Program:
    """One random kernel and its arguments (kinds: a subset of TEMPLATES)."""
    pool = [k for k in (kinds or TEMPLATES) for _ in range(WEIGHTS[k])]
    kind = draw(st.sampled_from(pool))
    g = Gen(draw)
    p = TEMPLATES[kind](g)
    p.features.insert(0, kind)
    if g.chance(0.15):  # the body wrapped in a loop over the grid's program ids
        p.options["persistent"] = True
        p.features.append("persistent")
    if g.chance(0.1):   # loads that read nothing past a view's last element
        p.options["initcheck"] = True
        p.features.append("initcheck")
    return p
