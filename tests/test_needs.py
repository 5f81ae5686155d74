"""tests/needs.py: a GPU run that lacks a test dependency fails naming it; other runs skip."""
import pytest

import needs as needs_mod


@pytest.fixture
def selection():
    saved = dict(needs_mod._state)
    yield needs_mod.note_selection
    needs_mod._state.update(saved)


@pytest.mark.parametrize("markexpr, has_gpu, outcome", [
    ("gpu", True, pytest.fail.Exception),
    ("gpu and not slow", True, pytest.fail.Exception),
    ("gpu", False, pytest.skip.Exception),
    ("not gpu", True, pytest.skip.Exception),
    ("", True, pytest.skip.Exception),
])
def test_missing_package(selection, markexpr, has_gpu, outcome):
    selection(markexpr, has_gpu)
    with pytest.raises(outcome, match="needs 'tilec_no_such_package'.*gpu-test"):
        needs_mod.needs("tilec_no_such_package")


def test_present_package_is_returned(selection):
    selection("gpu", True)
    assert needs_mod.needs("numpy").__name__ == "numpy"
