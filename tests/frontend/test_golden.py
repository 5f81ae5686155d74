"""Golden tile IR (locations stripped) for small kernels; every module verifies and round-trips."""
import pathlib
import re

import pytest

import golden_kernels as g
from tilec.ir import parse, verify
from tilec.specialize import parse_signature

GOLDEN = pathlib.Path(__file__).parent / "golden"


def _ir(name):
    k = getattr(g, name)
    return k.ir(parse_signature(k, g.SIGNATURES[name]))


@pytest.mark.parametrize("name", sorted(g.SIGNATURES))
def test_golden_ir(name):
    # locations stripped: each op's `loc(#locN)` and the aliases above the module
    text = re.sub(r" loc\([^)]*\)|^#loc\d+ = .*\n", "", str(_ir(name)), flags=re.M)
    assert text == (GOLDEN / f"{name}.ir").read_text()


@pytest.mark.parametrize("name", sorted(g.SIGNATURES))
def test_verifies_and_round_trips(name):
    m = _ir(name)
    verify(m)
    assert parse(str(m)) == m


def test_every_op_has_the_user_location():
    m = _ir("first_negative")
    for op in m.walk():
        assert op.loc.file == g.__file__ and op.loc.line > 0 and op.loc.col >= 1, op.name
