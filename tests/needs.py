"""`needs("torch")`: a package a GPU test needs (pip install -e ".[gpu-test]").

Where the package is missing, a run that selects GPU tests (`-m gpu`) on a machine with
a GPU fails, naming the package: a GPU machine without torch must not pass by skipping
every test that compares against it. Elsewhere (no GPU, or GPU tests not selected) the
test skips, as it would without a GPU.
"""
from __future__ import annotations

import importlib

import pytest

_state = {"gpu_selected": False}


def note_selection(markexpr: str, has_gpu: bool) -> None:
    """Called once by conftest: whether this run asked for the GPU tests on a GPU machine."""
    expr = " ".join(markexpr.split())
    _state["gpu_selected"] = has_gpu and "gpu" in expr and "not gpu" not in expr


def needs(module: str):
    """The imported `module`; a failure or a skip (see the module doc) when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        msg = f"this GPU test needs {module!r} ({e}): pip install -e \".[gpu-test]\""
        if _state["gpu_selected"]:
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg, allow_module_level=True)
