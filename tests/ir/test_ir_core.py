"""IR core: types, textual round trip, verifier messages."""
import math

import pytest
from hypothesis import given, settings, strategies as st

import tilec.ir as ir
from tilec import dtypes as dt
from tilec.ir.printer import format_attr
from tilec.ir.tile_ops import (AddOp, CastOp, ConstantOp, ForOp, FuncOp, LoadViewOp, ProgramIdOp, ReduceOp,
                               ReturnOp, SplatOp, ViewPtrOp, YieldOp)
from tilec.ir.types import PointerType, ScalarType, TileType, ViewType

F32 = ScalarType(dt.float32)
I32 = ScalarType(dt.int32)


def make_func(arg_types, names, loc=ir.Location("k.py", 3, 5)):
    f = FuncOp([], [], {"sym_name": "k", "arg_names": names},
               [ir.Region([ir.Block(arg_types, names)])], loc)
    m = ir.Module([f])
    b = ir.Builder(f.body)
    b.loc = loc
    return m, f, b


def test_round_trip_structured_kernel():
    view = ViewType(dt.float32, 2, (None, 1), dt.int32, 16)
    m, f, b = make_func([view, I32], ["x", "n"])
    pid = b.value(ProgramIdOp, axis=0)
    four = b.value(ConstantOp, result_types=[I32], value=4)
    row = b.value(AddOp, pid, four)
    t = b.value(LoadViewOp, f.body.args[0], row, f.body.args[1], shape=[16, 32], padding=float("-inf"))
    r = b.value(ReduceOp, t, axis=1, kind="max")
    loop = b.create(ForOp, four, f.body.args[1], four, r)
    loop.add_region(ir.Region([ir.Block([I32, r.type], ["i", "acc"])]))
    ir.Builder(loop.body).create(YieldOp, loop.body.args[1])
    b.create(ReturnOp)
    ir.verify(m)
    text = str(m)
    assert 'padding = -inf' in text and "tile.for" in text
    # the location printed once, as an alias above the module, and named by every op
    assert text.startswith('#loc0 = "k.py":3:5\nmodule') and text.count('loc(#loc0)') == sum(op.loc.known for op in m.walk())
    again = ir.parse(text)
    assert again == m
    assert str(again) == text


def test_defined_inside_follows_nested_regions():
    m, f, b = make_func([I32], ["n"])
    four = b.value(ConstantOp, result_types=[I32], value=4)
    outer = b.create(ForOp, four, f.body.args[0], four)
    outer.add_region(ir.Region([ir.Block([I32], ["i"])]))
    ob = ir.Builder(outer.body)
    inner = ob.create(ForOp, four, f.body.args[0], four)
    inner.add_region(ir.Region([ir.Block([I32], ["j"])]))
    ib = ir.Builder(inner.body)
    s = ib.value(AddOp, outer.body.args[0], inner.body.args[0])
    ib.create(YieldOp)
    ob.create(YieldOp)
    b.create(ReturnOp)
    ir.verify(m)
    assert ir.defined_inside(s, inner) and ir.defined_inside(s, outer)
    assert ir.defined_inside(inner.body.args[0], inner) and ir.defined_inside(inner.body.args[0], outer)
    assert ir.defined_inside(outer.body.args[0], outer) and not ir.defined_inside(outer.body.args[0], inner)
    assert not ir.defined_inside(four, outer) and not ir.defined_inside(f.body.args[0], inner)


@pytest.mark.parametrize("t", [
    F32, ScalarType(dt.bfloat16), ScalarType(dt.float8e4m3), PointerType(dt.float16),
    TileType((64, 32), ScalarType(dt.bfloat16)), TileType((128,), PointerType(dt.int8)),
    ViewType(dt.float16, 3, (None, None, 1), dt.int64, 16), ViewType(dt.uint8, 1),
])
def test_types_print_and_parse(t):
    m, f, b = make_func([t], ["a"])
    b.create(ReturnOp)
    text = str(m)
    assert f"%a: {t}" in text
    assert ir.parse(text) == m


attr_values = st.recursive(
    st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.booleans(),
              st.text(max_size=8), st.sampled_from(dt.ALL_DTYPES)),
    lambda inner: st.lists(inner, max_size=3), max_leaves=6)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(attr_values)
def test_attribute_round_trip(v):
    m, f, b = make_func([], [])
    b.create(ReturnOp)
    f.attrs["_probe"] = ir.normalize_attr(v)
    back = ir.parse(str(m)).func().attrs["_probe"]
    if isinstance(v, float):
        assert back == v or (math.isinf(v) and back == v)
    assert format_attr(back) == format_attr(ir.normalize_attr(v))


def test_nan_attribute():
    m, f, b = make_func([], [])
    b.create(ReturnOp)
    f.attrs["_probe"] = float("nan")
    assert math.isnan(ir.parse(str(m)).func().attrs["_probe"])


def test_verifier_names_op_and_location():
    m, f, b = make_func([], [])
    c = b.value(ConstantOp, result_types=[F32], value=1.0)
    i = b.value(ConstantOp, result_types=[I32], value=1)
    bad = AddOp([c, i], [F32], {}, (), ir.Location("user.py", 7, 9))
    b.insert(bad)
    b.create(ReturnOp)
    with pytest.raises(ir.VerifyError, match=r"'tile.add' at user.py:7:9: operands must have one type"):
        ir.verify(m)


def test_verifier_rejects_a_cast_of_a_pointer():
    """tile.cast converts numbers: a pointer operand is caught here, not by LLVM after codegen."""
    view = ViewType(dt.float8e4m3, 1, (1,), dt.int32, 16)
    m, f, b = make_func([view], ["x"])
    p = b.value(ViewPtrOp, f.body.args[0])
    bad = CastOp([p], [ScalarType(dt.float32)], {"to": dt.float32}, (), ir.Location("user.py", 4, 8))
    b.insert(bad)
    b.create(ReturnOp)
    with pytest.raises(ir.VerifyError, match=r"'tile.cast' at user.py:4:8: cast converts numbers, got ptr<f8e4m3>"):
        ir.verify(m)


def test_verifier_rejects_non_power_of_two_tile():
    m, f, b = make_func([], [])
    c = b.value(ConstantOp, result_types=[F32], value=1.0)
    b.create(SplatOp, c, shape=[48])
    b.create(ReturnOp)
    with pytest.raises(ir.VerifyError, match="powers of two"):
        ir.verify(m)


def test_verifier_checks_dominance_and_terminators():
    m, f, b = make_func([], [])
    c = b.value(ConstantOp, result_types=[I32], value=1)
    loop = b.create(ForOp, c, c, c)
    loop.add_region(ir.Region([ir.Block([I32], ["i"])]))
    b.create(ReturnOp)
    with pytest.raises(ir.VerifyError, match="terminator"):
        ir.verify(m)


def test_parse_errors_are_clear():
    with pytest.raises(ir.IRParseError, match="undefined value"):
        ir.parse("module {\n  tile.return %nope\n}\n")
    with pytest.raises(ir.IRParseError, match="unknown op"):
        ir.parse("module {\n  tile.frobnicate\n}\n")
    with pytest.raises(ir.IRParseError, match="invalid IR"):
        ir.parse("module { %0 = }")


def test_op_without_operands_before_multi_result_op():
    import tilec.lowering.gpu  # noqa: F401 - registers the gpu dialect (gpu.barrier below)
    text = """module {
  tile.func {sym_name = "k", arg_names = []} (
    {
      ^bb0():
        gpu.barrier {id = 0}
        %a, %b = tile.while (
          {
            ^bb0():
              %c = tile.constant {value = true} : i1
              tile.condition %c
          },
          {
            ^bb0():
              tile.yield
          }
        ) : i32, i32
        tile.return
    }
  )
}
"""
    m = ir.parse(text)
    ops = [o.name for o in m.func().body.ops]
    assert ops == ["gpu.barrier", "tile.while", "tile.return"]
    assert len(m.func().body.ops[1].results) == 2


def test_an_unregistered_dialect_says_what_registers_it():
    # the IR core imports no dialect itself: a gpu op parses once tilec.lowering.gpu is imported
    text = 'module {\n  tilec.nonexistent {id = 0}\n}\n'
    with pytest.raises(ir.parser.IRParseError, match="unknown op 'tilec.nonexistent'"):
        ir.parse(text)
    assert "importing tilec.lowering.gpu" in ir.core.unregistered_hint("gpu")


@pytest.mark.parametrize("attrs,message", [
    ({"shape": [2, 16], "squeeze": [0]}, "squeeze must list distinct dimensions of extent 1"),
    ({"shape": [1, 16], "squeeze": [1, 0]}, "squeeze must list distinct dimensions of extent 1"),
    ({"shape": [1, 16], "squeeze": [0], "order": [1, 0]}, "order must permute the tile's 1 dimensions"),
])
def test_verifier_rejects_bad_view_squeeze_and_order(attrs, message):
    """load_view's squeeze drops box dimensions of extent 1 only; its order permutes what is left."""
    from tilec.ir.tile_ops import LoadViewOp
    view = ViewType(dt.float16, 2, (None, 1), dt.int32, 16)
    m, f, b = make_func([view, ScalarType(dt.int32)], ["x", "i"])
    x, i = f.body.args
    t = ir.types.tile([16], dt.float16)
    b.insert(LoadViewOp([x, i, i], [t], {"mode": "index", **attrs}, (), ir.Location("user.py", 3, 5)))
    b.create(ReturnOp)
    with pytest.raises(ir.VerifyError, match=message):
        ir.verify(m)
