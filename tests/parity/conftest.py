"""The `backend` fixture: every parity test runs once on the numpy interpreter and once on
the GPU (the gpu parameter carries the `gpu` marker, so it skips where no GPU is found)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # parity_helpers

from parity_helpers import Backend  # noqa: E402


@pytest.fixture(params=["interpreter", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request) -> Backend:
    return Backend(request.param)
