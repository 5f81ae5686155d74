"""softmax / log_softmax along a dimension other than the last, on the GPU: torch CUDA
tensors against torch's own ops in float64, each path of softmax_dim.py (one tile per
strip, looped strips, split strips), and sum/softmax over more column strips than grid
axis 1 holds. Skipped where no GPU is found."""
from __future__ import annotations

import pytest

import tilec.stdlib_kernels as sk
from tilec.options import GRID_LIMITS
from tilec.stdlib_kernels import reductions, softmax_dim

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


def test_sum_and_softmax_over_more_strips_than_grid_axis_1_holds(torch):
    # 3 rows of n f32 columns: past 65535 strips of the column-strip kernels (`reductions.slab_grid`
    # puts them on grid axis 0); a driver error (CUDA_ERROR_INVALID_VALUE) before. Under 2 GB.
    n = (GRID_LIMITS[1] + 100) * reductions.MAX_STRIP + 5
    x = torch.randn(3, n, device="cuda")
    assert -(-n // reductions.inner_config(3, n, 4)[1]) > GRID_LIMITS[1]
    _close(torch, sk.sum(x, 0), x.double().sum(0), "float32", scale=3)    # rows off 32-byte sectors: windows
    m = n - 5 - reductions.MAX_STRIP + 8                                   # rows on sectors: column tiles
    y = x.view(-1)[:3 * m].view(3, m)
    _close(torch, sk.sum(y, 0), y.double().sum(0), "float32", scale=3)
    single, _, block_i, _, _ = softmax_dim.dim_config(3, n, 1, 4)
    assert single and -(-n // block_i) > GRID_LIMITS[1]
    _close(torch, sk.softmax(x, dim=0), torch.softmax(x.double(), 0), "float32")
