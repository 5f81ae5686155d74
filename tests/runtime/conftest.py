"""The `gpu` marker: tests marked @pytest.mark.gpu run only where a CUDA driver and device exist."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # ptx_kernels helpers


def _gpu_present() -> bool:
    from tilec.runtime import gpu_available
    return gpu_available()


def pytest_collection_modifyitems(config, items):
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and the CUDA driver (none found)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture
def gpu():
    """The current tilec Device; skips the test where there is no GPU."""
    if not _gpu_present():
        pytest.skip("needs an NVIDIA GPU and the CUDA driver (none found)")
    from tilec.runtime import get_device
    return get_device()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty TILEC_CACHE_DIR and an empty in-memory cache for one test."""
    from tilec.runtime import cache
    d = tmp_path / "cache"
    monkeypatch.setenv("TILEC_CACHE_DIR", str(d))
    cache.clear_memory()
    yield d
    cache.clear_memory()
