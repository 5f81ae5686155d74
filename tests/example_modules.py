"""Import an example (examples/<name>.py) as a module, as the tests that read its kernels,
signatures or tilings do."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name):
    """Import examples/<name>.py as a module (its folder on sys.path for _harness)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(EXAMPLES))
