"""loop_bounds.below_block_count: which loop-indexed view blocks are provably whole."""
from __future__ import annotations

import pytest

from tilec.ir import tile_ops as T
from tilec.ir.parser import parse
from tilec.lowering.passes.loop_bounds import below_block_count

_IR = """
module {
  tile.func {sym_name = "k", arg_names = ["x", "y", "n"]} (
    {
      ^bb0(%x: view<2xf32, strides=[?, 1], index=i32, align=16>, %y: view<2xf32, strides=[?, 1], index=i32, align=16>, %n: i32):
        %zero = tile.constant {value = 0} : i32
        %one = tile.constant {value = 1} : i32
        %step = tile.constant {value = STEP} : i32
        %b = tile.constant {value = 16} : i32
        %rx = tile.view_dim %x {dim = 0, kind = "shape"} : i32
        %ry = tile.view_dim %y {dim = 0, kind = "shape"} : i32
        %m = tile.minimum %rx, %ry : i32
        %q = tile.floordiv %rx, %b : i32
        %ub = UB
        tile.for %zero, %ub, %step (
          {
            ^bb0(%j: i32):
              %last = tile.sub %ub, %one : i32
              %next = tile.add %j, %one : i32
              %clamped = tile.minimum %next, %last : i32
              tile.yield
          }
        )
        tile.return
    }
  )
}
"""


def _loop(ub: str, step: int = 1):
    m = parse(_IR.replace("UB", ub).replace("STEP", str(step)))
    loop = next(op for op in m.walk() if isinstance(op, T.ForOp))
    func = m.func().regions[0].block
    names = {op.results[0].name_hint: op.results[0] for op in loop.body.ops if op.results}
    return func.args[0], func.args[1], loop.body.args[0], names


@pytest.mark.parametrize("ub, on_x, on_y", [
    ("tile.floordiv %rx, %b : i32", True, False),        # x's blocks only
    ("tile.floordiv %m, %b : i32", True, True),          # min(x, y) rows: both views' blocks
    ("tile.minimum %n, %q : i32", True, False),          # up to a minimum with such a bound
    ("tile.floordiv %n, %b : i32", False, False),        # a bound unrelated to the views
])
def test_the_induction_variable_below_the_bound(ub, on_x, on_y):
    x, y, j, _ = _loop(ub)
    assert below_block_count(j, x, 0, 16) is on_x
    assert below_block_count(j, y, 0, 16) is on_y
    assert not below_block_count(j, x, 1, 16)            # another dimension of x
    assert not below_block_count(j, x, 0, 32)            # blocks larger than the bound's


def test_a_block_count_that_divides_the_bounds_divisor():
    x, _, j, _ = _loop("tile.floordiv %rx, %b : i32")
    assert below_block_count(j, x, 0, 8)                 # j < rx // 16 <= rx // 8
    assert below_block_count(j, x, 0, 4)


def test_the_next_iteration_clamped_to_the_last_one():
    x, _, _, v = _loop("tile.floordiv %rx, %b : i32")
    assert below_block_count(v["clamped"], x, 0, 16)     # min(j + 1, ub - 1) < ub
    assert not below_block_count(v["next"], x, 0, 16)    # j + 1 may equal ub


def test_a_loop_counting_down_proves_nothing():
    x, _, j, _ = _loop("tile.floordiv %rx, %b : i32", step=-1)
    assert not below_block_count(j, x, 0, 16)
