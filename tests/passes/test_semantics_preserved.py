"""canonicalize, fold, cse and dce change no result: the interpreter gives the same bits
before and after them, on kernels built to trigger their rewrites (constant operands
that are identities, absorbing values, NaN, signed zeros, round-trip casts, shifts).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilec import dtypes as dt
from tilec.interpreter import run
from tilec.ir import Block, Builder, Module, Region, ScalarType, ViewType, parse, print_module, verify
from tilec.ir import tile_ops as T
from tilec.lowering.pipeline import run_passes

PASSES = ["canonicalize", "fold", "cse", "dce"]

_SPECIAL = {
    "i": [0, 1, -1, 2, 7, 100, -128],
    "u": [0, 1, 2, 7, 100, 255],
    "f": [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, float("inf"), float("-inf"), float("nan")],
    "b": [False, True],
}
_BINARY = {
    "i": [T.AddOp, T.SubOp, T.MulOp, T.FloorDivOp, T.ModOp, T.MinimumOp, T.MaximumOp,
          T.AndOp, T.OrOp, T.XorOp, T.ShlOp, T.ShrOp],
    "f": [T.AddOp, T.SubOp, T.MulOp, T.DivOp, T.FloorDivOp, T.ModOp, T.MinimumOp, T.MaximumOp],
    "b": [T.AndOp, T.OrOp, T.XorOp, T.MinimumOp, T.MaximumOp],
}
_UNARY = {"i": [T.NegOp, T.InvertOp, T.AbsOp], "f": [T.NegOp, T.AbsOp, T.SqrtOp, T.FloorOp], "b": [T.InvertOp]}
_ROUND_TRIP = {"i8": ["i16", "i32", "f16", "bf16", "f32", "u8"], "i32": ["i64", "f64", "f32", "u32"],
               "u32": ["i64", "u64", "f64", "f32"], "f16": ["f32", "f64", "bf16"], "bf16": ["f32", "f16"],
               "f32": ["f64", "f16", "i32"], "i1": ["i8", "f32", "u64"]}
DTYPES = ["i8", "i32", "u32", "i64", "f16", "bf16", "f32", "f64", "i1"]


def _family(d: dt.DType) -> str:
    return "b" if d.is_bool else "f" if d.is_float else "u" if d.kind == "u" else "i"


def build_kernel(d: dt.DType) -> Module:
    """A kernel of two scalar inputs x, y of `d` that stores, into out[k], one expression per k."""
    fam = _family(d)
    view = ViewType(d, 1, (1,), dt.int32, 16)
    body = Block([view, ScalarType(d), ScalarType(d)], ["out", "x", "y"])
    func = T.FuncOp([], [], {"sym_name": "k", "arg_names": ["out", "x", "y"]}, [Region([body])])
    b = Builder().at_end(body)
    out, x, y = body.args
    s = ScalarType(d)
    consts = [b.value(T.ConstantOp, result_types=[s], value=v) for v in _SPECIAL[fam]]
    results = []
    ops = _BINARY.get("i" if fam == "u" else fam, [])
    for cls in ops:
        for c in consts:
            results += [b.value(cls, x, c), b.value(cls, c, x)]
        results += [b.value(cls, x, x), b.value(cls, x, y), b.value(cls, consts[1], consts[-1])]
    for cls in _UNARY.get("i" if fam == "u" else fam, []):
        results += [b.value(cls, x), b.value(cls, b.value(cls, x)), b.value(cls, consts[-1])]
    for pred in T.CMP_PREDICATES:
        for lhs, rhs in [(x, x), (x, y), (consts[0], consts[-1])]:
            results.append(b.value(T.CastOp, b.value(T.CmpOp, lhs, rhs, pred=pred), to=d))
    for c in consts[:3]:
        cond = b.value(T.CmpOp, x, c, pred="lt")
        results += [b.value(T.SelectOp, cond, x, y), b.value(T.SelectOp, cond, x, x)]
    for wide in _ROUND_TRIP.get(d.name, []):
        results.append(b.value(T.CastOp, b.value(T.CastOp, x, to=dt.DType.get(wide)), to=d))
    # store results[k] at out[k] as one-element tiles
    for k, r in enumerate(results):
        idx = b.value(T.ConstantOp, result_types=[ScalarType(dt.int32)], value=k)
        b.create(T.StoreViewOp, out, idx, b.value(T.SplatOp, r, shape=[1]), mode="offset")
    b.create(T.ReturnOp)
    module = Module([func])
    module.attrs["_count"] = len(results)  # read back by the test, dropped below
    return module


def _outputs(module: Module, d: dt.DType, n: int, x, y) -> np.ndarray:
    out = np.zeros(n, dtype=d.np)
    run(module, [out, x, y], (1,))
    return out


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "f":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        return bool(np.array_equal(nan_a, nan_b) and
                    np.array_equal(a[~nan_a].view(np.uint8 if a.itemsize == 1 else f"u{a.itemsize}"),
                                   b[~nan_b].view(np.uint8 if b.itemsize == 1 else f"u{b.itemsize}")))
    return bool(np.array_equal(a, b))


def _scalar_strategy(d: dt.DType):
    fam = _family(d)
    if fam == "b":
        return st.booleans()
    if fam == "f":
        width = 16 if d.bits <= 16 else d.bits
        specials = st.sampled_from(_SPECIAL["f"])
        values = st.floats(width=width, allow_nan=True, allow_infinity=True)
        return (specials | values).map(lambda v: float(d.np.type(v)) if d.bits >= 32 else v)
    lo, hi = (-(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1) if fam == "i" else (0, (1 << d.bits) - 1)
    return st.sampled_from([v for v in _SPECIAL[fam] if lo <= v <= hi]) | st.integers(lo, hi)


_KERNELS = {}


def _kernels(name: str):
    """(original, optimized, result count) for dtype `name`, built once."""
    if name not in _KERNELS:
        d = dt.DType.get(name)
        m = build_kernel(d)
        n = m.attrs.pop("_count")
        verify(m)
        optimized = run_passes(parse(print_module(m)), PASSES, verify_each=True)
        _KERNELS[name] = (m, optimized, n)
    return _KERNELS[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", DTYPES)
def test_passes_shrink_the_kernel(name):
    original, optimized, _ = _kernels(name)
    count = lambda m: sum(1 for o in m.walk() if not isinstance(o, (T.StoreViewOp, T.SplatOp)))  # noqa: E731
    assert count(optimized) < count(original) * 0.9, "the test kernel no longer exercises the rewrites"


@pytest.mark.slow
@pytest.mark.parametrize("name", DTYPES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_passes_preserve_interpreter_results(name, data):
    d = dt.DType.get(name)
    original, optimized, n = _kernels(name)
    x = data.draw(_scalar_strategy(d), label="x")
    y = data.draw(_scalar_strategy(d), label="y")
    want = _outputs(original, d, n, x, y)
    got = _outputs(optimized, d, n, x, y)
    bad = [k for k in range(n) if not _same_bits(want[k:k + 1], got[k:k + 1])]
    assert not bad, f"results {bad} differ after {PASSES}: {want[bad]} vs {got[bad]}"


LOOPS = """
module {
  tile.func {sym_name = "loops", arg_names = ["out", "n", "x"]} (
    {
      ^bb0(%out: view<1xf32, strides=[1], index=i32, align=16>, %n: i32, %x: f32):
        %c0 = tile.constant {value = 0} : i32
        %c1 = tile.constant {value = 1} : i32
        %c2 = tile.constant {value = 2} : i32
        %t = tile.constant {value = true} : i1
        %sum, %dead, %feeds = tile.for %c0, %n, %c1, %x, %x, %x (
          {
            ^bb0(%i: i32, %s: f32, %d: f32, %f: f32):
              %fi = tile.cast %i {to = f32} : f32
              %s2 = tile.add %s, %f : f32
              %d2 = tile.mul %d, %fi : f32
              %f2 = tile.add %f, %fi : f32
              tile.yield %s2, %d2, %f2
          }
        ) : f32, f32, f32
        %once = tile.for %c1, %c2, %c1, %sum (
          {
            ^bb0(%j: i32, %a: f32):
              %jf = tile.cast %j {to = f32} : f32
              %a2 = tile.mul %a, %jf : f32
              tile.yield %a2
          }
        ) : f32
        %pos = tile.cmp %n, %c2 {pred = "gt"} : i1
        %r, %unused = tile.if %pos (
          {
            ^bb0():
              %m = tile.mul %once, %x : f32
              tile.yield %m, %x
          },
          {
            ^bb0():
              tile.yield %once, %once
          }
        ) : f32, f32
        %k = tile.if %t (
          {
            ^bb0():
              %neg = tile.neg %r : f32
              tile.yield %neg
          },
          {
            ^bb0():
              tile.yield %r
          }
        ) : f32
        %tile = tile.splat %k {shape = [1]} : tile<1xf32>
        tile.store_view %out, %c0, %tile {mode = "offset"}
        tile.return
    }
  )
}
"""


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(n=st.integers(-2, 6), x=st.floats(-4, 4, width=32))
def test_control_flow_rewrites_preserve_results(n, x):
    original = verify(parse(LOOPS))
    optimized = run_passes(parse(LOOPS), PASSES, verify_each=True)
    assert sum(1 for o in optimized.walk() if isinstance(o, T.IfOp)) == 1
    assert len(next(o for o in optimized.walk() if isinstance(o, T.ForOp)).results) == 2
    want, got = np.zeros(1, np.float32), np.zeros(1, np.float32)
    run(original, [want, n, x], (1,))
    run(optimized, [got, n, x], (1,))
    assert _same_bits(want, got), (want, got)
