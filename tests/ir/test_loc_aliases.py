"""Source locations in the textual IR: printed once per module as `#locN` aliases, read in
either form (alias or in place)."""
import pytest

import tilec.ir as ir
from tilec.ir.printer import print_op

_INLINE = """module {
  tile.func {sym_name = "k", arg_names = []} (
    {
      ^bb0():
        %a = tile.program_id {axis = 0} : i32 loc("/src/kern.py":3:5)
        %b = tile.add %a, %a : i32 loc("/src/helpers.py":40:12)
        %c = tile.add %b, %a : i32 loc("/src/kern.py":3:5)
        tile.return loc("/src/kern.py":1:1)
    }
  ) loc("/src/kern.py":1:1)
}
"""


def _locs(m):
    return [(op.name, str(op.loc)) for op in m.walk()]


def test_each_location_is_printed_once_as_an_alias():
    m = ir.parse(_INLINE)
    text = str(m)
    header = text.split("module", 1)[0].splitlines()
    distinct = {str(op.loc) for op in m.walk() if op.loc.known}
    # one alias per distinct location, and no path on any op's line
    assert len(header) == len(distinct) == 3
    assert all(line.startswith("#loc") for line in header)
    body = text.split("module", 1)[1]
    assert "kern.py" not in body and "helpers.py" not in body
    assert body.count("loc(#loc") == sum(op.loc.known for op in m.walk())
    # the op at helpers.py names the alias whose definition is helpers.py:40:12
    alias = next(line.split(" = ")[0] for line in header if '"/src/helpers.py":40:12' in line)
    assert f"tile.add %a, %a : i32 loc({alias})" in body


def test_both_forms_parse_to_the_same_module():
    inline = ir.parse(_INLINE)
    aliased = ir.parse(str(inline))
    assert aliased == inline and _locs(aliased) == _locs(inline)
    assert str(aliased) == str(inline)


def test_one_op_prints_its_location_in_place():
    m = ir.parse(_INLINE)
    add = [op for op in m.walk() if op.name == "tile.add"][0]
    assert print_op(add).endswith('loc("/src/helpers.py":40:12)')


def test_an_undefined_or_repeated_alias_is_an_error():
    with pytest.raises(ir.IRParseError, match="undefined location alias #loc7"):
        ir.parse(_INLINE.replace('loc("/src/helpers.py":40:12)', "loc(#loc7)"))
    twice = '#loc0 = "a.py":1:1\n#loc0 = "b.py":2:2\n' + _INLINE
    with pytest.raises(ir.IRParseError, match="#loc0 defined twice"):
        ir.parse(twice)
