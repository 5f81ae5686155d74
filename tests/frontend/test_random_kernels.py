"""Random small kernels (elementwise expression trees, reductions, ifs, loops) written as Python
source: each compiles, verifies, round-trips through the textual IR, and runs on the interpreter
like the same code run with numpy."""
import importlib.util
import itertools
import textwrap

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import tilec as tc
import pytest
from tilec.ir import parse, verify

BLOCK = 16
_counter = itertools.count()

leaves = st.sampled_from(["a0", "a1", "a2", "s", "0.5", "2"])


def _combine(children):
    binary = st.tuples(st.sampled_from(["+", "-", "*"]), children, children).map(lambda t: f"({t[1]} {t[0]} {t[2]})")
    calls = st.tuples(st.sampled_from(["M.maximum", "M.minimum"]), children, children).map(
        lambda t: f"{t[0]}({t[1]}, {t[2]})")
    where = st.tuples(children, children, children).map(lambda t: f"M.where({t[0]} > {t[1]}, {t[1]}, {t[2]})")
    unary = st.tuples(st.sampled_from(["abs", "-"]), children).map(
        lambda t: f"abs({t[1]})" if t[0] == "abs" else f"(-{t[1]})")
    reduce = st.tuples(st.sampled_from(["M.sum", "M.max", "M.min"]), children).map(lambda t: f"{t[0]}({t[1]})")
    return st.one_of(binary, calls, where, unary, reduce)


exprs = st.recursive(leaves, _combine, max_leaves=8)


@st.composite
def programs(draw):
    """The body of a function of (a0, a1, a2, s) that computes a tile `r`, with `M` the module."""
    lines = [f"r = {draw(exprs)} + a0 * 0"]  # `+ a0 * 0` makes r a tile even if the tree is scalar
    shape = draw(st.sampled_from(["if", "loop", "plain"]))
    if shape == "if":
        lines += [f"if M.sum({draw(exprs)}) > s:", f"    r = r + {draw(exprs)}",
                  "else:", f"    r = M.maximum(r, {draw(exprs)})"]
    elif shape == "loop":
        lines += ["for i in range(3):", f"    r = r * 0.5 + {draw(exprs)} + i"]
    return "\n".join(lines)


def _load_kernel(tmp_path, body):
    name = f"rand_kernel_{next(_counter)}"
    src = textwrap.dedent("""\
        import numpy as np
        import tilec as tc

        @tc.kernel
        def kernel(x0, x1, x2, out, s, BLOCK: tc.constexpr):
            M = None  # replaced below: the kernel uses tc
        {kbody}
            tc.store(out, index=(0,), tile=r)

        def reference(a0, a1, a2, s):
            M = np
        {rbody}
            return r
        """)
    load = "a0 = tc.load(x0, index=(0,), shape=(BLOCK,))\na1 = tc.load(x1, index=(0,), shape=(BLOCK,))\n" \
           "a2 = tc.load(x2, index=(0,), shape=(BLOCK,))\n"
    kbody = textwrap.indent(load + body.replace("M.", "tc."), "    ")
    src = src.replace("    M = None  # replaced below: the kernel uses tc\n", "")
    src = src.format(kbody=kbody, rbody=textwrap.indent(body, "    "))
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, src


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=programs(), seed=st.integers(0, 2 ** 16))
def test_random_kernels(tmp_path, body, seed):
    mod, src = _load_kernel(tmp_path, body)
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(-1, 1, BLOCK).astype(np.float32) for _ in range(3)]
    s = float(np.float32(rng.uniform(-1, 1)))
    out = np.zeros(BLOCK, np.float32)
    spec = mod.kernel.specialization(*xs, out, s, BLOCK=BLOCK)
    m = mod.kernel.ir(spec)
    verify(m)
    assert parse(str(m)) == m, src
    with tc.interpret():
        mod.kernel[(1,)](*xs, out, s, BLOCK=BLOCK)
    with np.errstate(all="ignore"):
        ref = mod.reference(*xs, np.float32(s))
    np.testing.assert_allclose(out, np.broadcast_to(ref, out.shape).astype(np.float32), rtol=1e-4, atol=1e-4,
                               err_msg=src)
