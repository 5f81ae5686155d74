"""axis_info is sound on values computed from concrete arguments: what it claims of an
integer tile (contiguity: aligned runs x, x+1, ...; divisibility of each run's first value;
constancy: aligned runs of equal values) and of a mask (constancy; `prefix_run`: every
aligned group of G elements true, then false) holds once the tile is evaluated with values of
the kernel's arguments that the specialization allows. The tiles are random expressions over
arange, splats of arguments (one known divisible by 16) and constants, +, -, *, casts,
expand_dims and broadcast to 2-D, compares (also as u32), and / or."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilec.ir import parse
from tilec.lowering.passes.axis_info import analyze, prefix_run

N = 32
T32 = f"tile<{N}xi32>"
TU = f"tile<{N}xu32>"
TB = f"tile<{N}xi1>"


class _Prog:
    """IR lines and a numpy evaluator built side by side."""

    def __init__(self, n: int, k: int, elem: str = "f32"):
        self.lines, self.env, self.count, self.elem = [], {"n": n, "k": k}, 0, elem

    def emit(self, text: str, ty: str, value) -> str:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"        %{name} = {text} : {ty}")
        self.env[name] = value
        return name


def _int_expr(draw, p: _Prog, depth: int, n: int = N) -> str:
    t = f"tile<{n}xi32>"
    kind = draw(st.sampled_from(["arange", "splat_n", "splat_k", "const"] +
                                (["add", "sub", "mul", "mul_tiles", "widen"] if depth else [])))
    if kind == "arange":
        s = draw(st.sampled_from([0, 1, 3, 4, 8, 16]))
        return p.emit(f"tile.arange {{start = {s}, end = {s + n}}}", t, np.arange(s, s + n, dtype=np.int64))
    if kind in ("splat_n", "splat_k"):
        arg = kind[-1]
        return p.emit(f"tile.splat %{arg} {{shape = [{n}]}}", t, np.full(n, p.env[arg], np.int64))
    if kind == "const":
        c = draw(st.sampled_from([0, 1, 2, 4, 5, 16, -3]))
        return p.emit(f"tile.constant {{value = {c}}}", t, np.full(n, c, np.int64))
    a = _int_expr(draw, p, depth - 1, n)
    if kind == "widen":  # to i64 and back: the values do not change
        w = p.emit(f"tile.cast %{a} {{to = i64}}", f"tile<{n}xi64>", p.env[a])
        return p.emit(f"tile.cast %{w} {{to = i32}}", t, p.env[a])
    if kind == "mul_tiles":
        b = _int_expr(draw, p, depth - 1, n)
        return p.emit(f"tile.mul %{a}, %{b}", t, p.env[a] * p.env[b])
    if kind == "mul":
        c = draw(st.sampled_from([1, 2, 4, 3]))
        b = p.emit(f"tile.constant {{value = {c}}}", t, np.full(n, c, np.int64))
    else:
        b = _int_expr(draw, p, depth - 1, n)
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[kind]
    return p.emit(f"tile.{kind} %{a}, %{b}", t, f(p.env[a], p.env[b]))


R = 8   # rows of the 2-D tiles


def _int_expr_2d(draw, p: _Prog) -> str:
    """(R, N): a row expression broadcast down, a column one broadcast across, combined."""
    t2 = f"tile<{R}x{N}xi32>"
    row = _int_expr(draw, p, 2, N)
    r1 = p.emit(f"tile.expand_dims %{row} {{axis = 0}}", f"tile<1x{N}xi32>", p.env[row][None, :])
    rb = p.emit(f"tile.broadcast %{r1} {{shape = [{R}, {N}]}}", t2, np.broadcast_to(p.env[r1], (R, N)))
    col = _int_expr(draw, p, 2, R)
    c1 = p.emit(f"tile.expand_dims %{col} {{axis = 1}}", f"tile<{R}x1xi32>", p.env[col][:, None])
    cb = p.emit(f"tile.broadcast %{c1} {{shape = [{R}, {N}]}}", t2, np.broadcast_to(p.env[c1], (R, N)))
    kind = draw(st.sampled_from(["add", "sub", "mul_rows"]))
    if kind == "mul_rows":  # column values times a constant row stride, plus the row: offsets
        c = draw(st.sampled_from([N, 1000, 3, 16]))
        k = p.emit(f"tile.constant {{value = {c}}}", t2, np.full((R, N), c, np.int64))
        m = p.emit(f"tile.mul %{cb}, %{k}", t2, p.env[cb] * c)
        return p.emit(f"tile.add %{m}, %{rb}", t2, p.env[m] + p.env[rb])
    f = {"add": np.add, "sub": np.subtract}[kind]
    return p.emit(f"tile.{kind} %{rb}, %{cb}", t2, f(p.env[rb], p.env[cb]))


def _mask(draw, p: _Prog, depth: int) -> str:
    kind = draw(st.sampled_from(["cmp", "ucmp"] + (["and", "or"] if depth else [])))
    if kind in ("and", "or"):
        a, b = _mask(draw, p, depth - 1), _mask(draw, p, depth - 1)
        f = np.logical_and if kind == "and" else np.logical_or
        return p.emit(f"tile.{kind} %{a}, %{b}", TB, f(p.env[a], p.env[b]))
    a, b = _int_expr(draw, p, 2), _int_expr(draw, p, 2)
    pred = draw(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]))
    if kind == "ucmp":  # compared as u32: negative values wrap to large ones
        a = p.emit(f"tile.cast %{a} {{to = u32}}", TU, p.env[a] % 2 ** 32)
        b = p.emit(f"tile.cast %{b} {{to = u32}}", TU, p.env[b] % 2 ** 32)
    f = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
         "ne": np.not_equal}[pred]
    return p.emit(f"tile.cmp %{a}, %{b} {{pred = \"{pred}\"}}", TB, f(p.env[a], p.env[b]))


@st.composite
def programs(draw):
    # concrete n and k for the evaluation; the analysis sees only their divisibility (k by 16)
    n = draw(st.integers(-40, 80))
    k = 16 * draw(st.integers(-3, 5))
    p = _Prog(n, k)
    mask = _mask(draw, p, 2)
    return p, mask


def _text(p: _Prog, out: str) -> str:
    body = "\n".join(p.lines)
    return f'''module {{
  tile.func {{sym_name = "k", arg_names = ["x", "n", "k"], arg_divisibility = [1, 1, 16]}} (
    {{
      ^bb0(%x: view<1x{p.elem}, strides=[1], index=i32, align=16>, %n: i32, %k: i32):
{body}
        tile.return %{out}
    }}
  )
}}
'''


def _func(p: _Prog, out: str):
    return parse(_text(p, out)).ops[0]


def _check(p: _Prog, mask: str) -> None:
    text = _text(p, mask)
    func = _func(p, mask)
    info = analyze(func)
    value = next(op for op in func.walk() if op.name == "tile.return").operands[0]
    g = min(prefix_run(info, value, 0), N)
    m = p.env[mask]
    for start in range(0, N, g):
        grp = m[start:start + g]
        wanted = int(grp.sum())
        assert grp[:wanted].all() and not grp[wanted:].any(), (g, start, grp, text)
    const = min(info.get(value).constancy[0], N)
    for start in range(0, N, const):
        grp = m[start:start + const]
        assert grp.all() or not grp.any(), (const, start, grp, text)


@st.composite
def int_programs(draw):
    p = _Prog(draw(st.integers(-40, 80)), 16 * draw(st.integers(-3, 5)))
    return p, (_int_expr_2d(draw, p) if draw(st.booleans()) else _int_expr(draw, p, 3))


def _check_runs(p: _Prog, out: str, step: int) -> None:
    """The claims of tile `out` along each dimension: contiguity (aligned runs `step` apart:
    1 for integers, the element size for pointers), the divisibility of each run's first
    value, constancy."""
    func = _func(p, out)
    info = analyze(func)
    value = next(op for op in func.walk() if op.name == "tile.return").operands[0]
    ai, v = info.get(value), p.env[out]
    for d in range(v.ndim):
        lines = np.moveaxis(v, d, -1).reshape(-1, v.shape[d])
        c, k = min(ai.contiguity[d], v.shape[d]), min(ai.constancy[d], v.shape[d])
        for line in lines:
            for start in range(0, len(line), c):
                run = line[start:start + c]
                assert (run == run[0] + step * np.arange(len(run))).all(), ("contiguity", d, c, run, _text(p, out))
                assert run[0] % ai.divisibility[d] == 0, ("divisibility", d, ai.divisibility[d], run, _text(p, out))
            for start in range(0, len(line), k):
                assert (line[start:start + k] == line[start]).all(), ("constancy", d, k, start, _text(p, out))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(int_programs())
def test_integer_tiles_keep_their_claims(case):
    _check_runs(*case, step=1)


@st.composite
def pointer_programs(draw):
    # view_ptr of a 16-byte-aligned view plus offsets: element runs and byte divisibility
    elem, size = draw(st.sampled_from([("f32", 4), ("f16", 2), ("f64", 8)]))
    p = _Prog(draw(st.integers(-40, 80)), 16 * draw(st.integers(-3, 5)), elem)
    base_addr = 16 * draw(st.integers(1, 1 << 20))
    offs = _int_expr_2d(draw, p) if draw(st.booleans()) else _int_expr(draw, p, 3)
    shape = p.env[offs].shape
    dims = "x".join(map(str, shape))
    base = p.emit("tile.view_ptr %x", f"ptr<{elem}>", base_addr)
    splat = p.emit(f"tile.splat %{base} {{shape = {list(shape)}}}", f"tile<{dims}xptr<{elem}>>",
                   np.full(shape, base_addr, np.int64))
    ptrs = p.emit(f"tile.addptr %{splat}, %{offs}", f"tile<{dims}xptr<{elem}>>",
                  base_addr + size * p.env[offs])
    return p, ptrs, size


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(pointer_programs())
def test_pointer_tiles_keep_their_claims(case):
    # contiguity counts elements (addresses `size` bytes apart), divisibility is in bytes:
    # together they set how many bytes one access may move (`access_vec`)
    p, out, size = case
    _check_runs(p, out, step=size)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(programs())
def test_claimed_prefix_groups_are_prefixes(case):
    _check(*case)


@pytest.mark.parametrize("pred,run_first", [("lt", True), ("ge", True), ("gt", False), ("le", False),
                                            ("gt", True), ("le", True), ("lt", False), ("ge", False),
                                            ("eq", True), ("ne", True)])
@pytest.mark.parametrize("k", [16, 0, -16])
def test_a_run_against_a_bound_of_its_divisibility(pred, run_first, k):
    # arange(16, 48) against k (both divisible by 16): x < k and x >= k change where x reaches
    # k, at a group boundary; x > k, x <= k, x == k and x != k change inside a group, which
    # a mask claimed constant over 16 elements (one bit for the group) would get wrong
    p = _Prog(0, k)
    x = p.emit(f"tile.arange {{start = 16, end = {16 + N}}}", T32, np.arange(16, 16 + N, dtype=np.int64))
    c = p.emit(f"tile.splat %k {{shape = [{N}]}}", T32, np.full(N, k, np.int64))
    a, b = (x, c) if run_first else (c, x)
    f = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
         "ne": np.not_equal}[pred]
    _check(p, p.emit(f"tile.cmp %{a}, %{b} {{pred = \"{pred}\"}}", TB, f(p.env[a], p.env[b])))
