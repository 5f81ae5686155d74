"""defer_wgmma_waits.distinct_slots: when two slot indices of a ring can never be the same (a
wgmma's wait may then pass a copy into the other slot)."""
from __future__ import annotations

import pytest

from tilec.ir import parse
from tilec.lowering.passes.defer_waits import distinct_slots

_MODULE = """
module {
  tile.func {sym_name = "slots", arg_names = ["c", "d"]} (
    {
      ^bb0(%c: i32, %d: i32):
        %two = tile.constant {value = 2} : i32
        %three = tile.constant {value = 3} : i32
        %four = tile.constant {value = 4} : i32
        %read = tile.mod %c, %three : i32
        %c2 = tile.add %c, %two : i32
        %ahead = tile.mod %c2, %three : i32
        %c3 = tile.add %c, %three : i32
        %wrapped = tile.mod %c3, %three : i32
        %by4 = tile.mod %c2, %four : i32
        %other = tile.mod %d, %three : i32
        %d2 = tile.add %d, %two : i32
        %sum = tile.add %c, %d : i32
        %loose = tile.mod %sum, %three : i32
        tile.return
    }
  )
}
"""


def _values():
    func = next(op for op in parse(_MODULE).walk() if op.name == "tile.func")
    return {r.name_hint: r for op in func.regions[0].blocks[0].ops for r in op.results}


@pytest.mark.parametrize("a,b,distinct", [
    ("read", "ahead", True),       # c % 3 against (c + 2) % 3: a refill two slots ahead
    ("ahead", "read", True),
    ("read", "wrapped", False),    # (c + 3) % 3 is c % 3
    ("read", "read", False),
    ("ahead", "by4", False),       # rings of different sizes: nothing is known
    ("read", "other", False),      # another count
    ("read", "loose", False),      # c + d is not a constant away from c
    ("read", "two", False),        # not a slot index at all
])
def test_distinct_slots(a, b, distinct):
    v = _values()
    assert distinct_slots(v[a], v[b]) is distinct
