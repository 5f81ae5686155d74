"""softmax / log_softmax along a dimension other than the last, on the GPU: torch CUDA
tensors against torch's own ops in float64, each path of softmax_dim.py (one tile per
strip, looped strips, split strips). Skipped where no GPU is found."""
from __future__ import annotations

import pytest

import tilec.stdlib_kernels as sk

pytestmark = pytest.mark.gpu

TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}


def _close(torch, got, want, dtype_name, scale=1.0):
    rtol, atol = TOL[dtype_name]
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol * scale, equal_nan=True)


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape,dim", [
    ((8, 150, 1001), 1),      # one tile per strip (segmentation-like: classes over pixels)
    ((3, 7, 5, 33), -3),      # short, odd, a negative dim
    ((1100, 2100, 17), 1),    # looped strips, enough of them (1100) not to split
    ((5000, 333), 0),         # few strips: split among programs
    ((20001, 7), 0),          # one strip, split, odd widths
])
def test_softmax_along_a_dim_matches_torch(torch, shape, dim, dtype_name):
    dtype = getattr(torch, dtype_name)
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    x64 = x.double()
    for _ in range(2):   # the second call replays the launch plan
        _close(torch, sk.softmax(x, dim=dim), torch.softmax(x64, dim), dtype_name)
        _close(torch, sk.log_softmax(x, dim=dim), torch.log_softmax(x64, dim), dtype_name, scale=10)


@pytest.mark.parametrize("r", [100, 20000])
def test_masked_columns_strides_and_out(torch, r):
    base = torch.randn(r, 40, device="cuda", dtype=torch.float32)
    base[:, 0] = float("-inf")               # all -inf: NaN, as torch
    base[: r - 3, 1] = float("-inf")          # masked but for its last 3 rows
    x = base[:, 1::3]                         # strided columns
    out = torch.full((r, 20), 7.0, device="cuda")[:, 3:16]
    assert sk.softmax(x, dim=0, out=out) is out
    _close(torch, out, torch.softmax(x.double(), 0), "float32")
    y = sk.log_softmax(base, dim=0)
    assert torch.isnan(y[:, 0]).all()
    _close(torch, y[:, 1:], torch.log_softmax(base[:, 1:].double(), 0), "float32", scale=10)
