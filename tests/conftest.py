"""Shared test set-up: the IR verifier runs after every pass, and GPU tests skip without a GPU."""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

# Test modules are imported by path (--import-mode=importlib), so two folders may hold files
# of one name; the shared helper modules beside them are found through sys.path.
for _d in sorted({p.parent for p in Path(__file__).parent.rglob("*.py")}):
    if str(_d) not in sys.path:
        sys.path.append(str(_d))

# Property tests: under CI=true (and in .ci/run) hypothesis draws the same examples every
# run (derandomized, no example database written), so a landing never hangs on one unlucky
# draw; elsewhere it draws fresh ones, as a search for bugs should.
try:
    from hypothesis import settings as _hyp_settings
    _hyp_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        _hyp_settings.load_profile("ci")
except ImportError:  # the test extra brings hypothesis; tests that use it fail on their own
    pass

# Every pipeline run in the tests verifies the IR after each pass (tilec.lowering.pipeline).
os.environ.setdefault("TILEC_VERIFY", "1")
# A fresh compile cache per test session: never results compiled by another version of the code.
if "TILEC_CACHE_DIR" not in os.environ:
    import tempfile
    os.environ["TILEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilec-test-cache-")


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """A CUDA driver with at least one device answers (never raises)."""
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:
        return False


@pytest.fixture(scope="session")
def torch():
    """torch, with a CUDA device; skips the test where it has none."""
    from needs import needs
    torch = needs("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def pytest_configure(config):
    from needs import note_selection   # tests/ is on sys.path (above)
    note_selection(config.option.markexpr or "", gpu_available())


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if it.get_closest_marker("gpu") is not None]
    if gpu_items and not gpu_available():
        skip = pytest.mark.skip(reason="no NVIDIA GPU and driver found")
        for it in gpu_items:
            it.add_marker(skip)
