"""Under CI=true the property tests draw fixed examples and write no example database
(tests/conftest.py); elsewhere hypothesis keeps its own defaults."""
import os
import subprocess
import sys
import textwrap
import pytest
from pathlib import Path


def _settings(tmp_path, ci):
    for helper in ("conftest.py", "needs.py"):   # the conftest imports needs
        (tmp_path / helper).write_text((Path(__file__).parent / helper).read_text())
    (tmp_path / "test_show.py").write_text(textwrap.dedent("""
        from hypothesis import settings
        def test_show():
            s = settings()
            print("SETTINGS", s.derandomize, s.database is None)
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_show.py"],
                         env=_env(ci), capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return next(ln for ln in out.stdout.splitlines() if ln.startswith("SETTINGS"))


def _env(ci):
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # hypothesis reads CI's presence itself
    if ci is not None:
        env["CI"] = ci
    return env


@pytest.mark.slow
def test_ci_draws_fixed_examples(tmp_path):
    assert _settings(tmp_path, "true") == "SETTINGS True True"


def test_elsewhere_hypothesis_keeps_its_defaults(tmp_path):
    assert _settings(tmp_path, None) == "SETTINGS False False"
