"""What the stdlib tests share: inputs of each dtype on the host, float64 views of
results and per-dtype tolerances (as the `rowwise` fixture)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tilec.stdlib_kernels import BF16Array

DTYPES = ["f32", "f16", "bf16"]

# Tolerance of an output stored in each dtype (half an ulp of values near 1 plus f32 slack);
# atol covers results that cancel to near zero.
RTOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}
ATOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


def host(values, dtype: str):
    """`values` as a host input of `dtype`: numpy f32/f16, or a BF16Array."""
    if dtype == "bf16":
        return BF16Array(values)
    if dtype == "f16":
        # large, but differences of two values (log_softmax) stay finite in f16
        return np.clip(values, -3e4, 3e4).astype(np.float16)
    return np.asarray(values, dtype=np.float32)


def f64(a) -> np.ndarray:
    """A result (numpy array or BF16Array) in float64."""
    return np.asarray(np.asarray(a), dtype=np.float64)


def close(got, want, dtype: str, scale: float = 1.0) -> None:
    """Assert got ~ want within the dtype's tolerance (atol scaled by `scale`); NaNs must agree."""
    got, want = f64(got), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=ATOL[dtype] * scale, equal_nan=True)


@pytest.fixture(scope="session")
def rowwise():
    """The helpers above, for the test modules (conftest files are not importable by name)."""
    return SimpleNamespace(DTYPES=DTYPES, host=host, f64=f64, close=close)
