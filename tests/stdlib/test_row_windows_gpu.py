"""sum, max, cumsum and cross_entropy over rows off 32-byte sectors on the GPU (aligned
windows, `_window.py`) against torch in float64, every dtype, with sentinels between the
output's rows. Skipped where no GPU is found."""
from __future__ import annotations

import pytest

import tilec.stdlib_kernels as sk

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16", "bfloat16"]
SENTINEL = 7.0


def _rows(torch, shape, dtype, pad=16):
    """x of `shape` whose rows start off 32-byte sectors (a view of a wider buffer)."""
    buf = (3 * torch.randn(shape[0], shape[1] + pad, device="cuda", dtype=torch.float64)).to(dtype)
    return buf[:, : shape[1]]


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(300, 3000), (257, 2500), (64, 9001), (1000, 99)])
def test_cumsum_of_rows_off_sectors_matches_torch(torch, shape, dtype_name):
    dtype = getattr(torch, dtype_name)
    x = _rows(torch, shape, dtype)
    buf = torch.full((shape[0], shape[1] + 16), SENTINEL, device="cuda", dtype=dtype)
    out = buf[:, : shape[1]]
    assert sk.cumsum(x, out=out) is out
    want = torch.cumsum(x.double(), -1)
    # a running sum of up to 9001 terms, rounded once to x's dtype
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype_name]
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=rtol * shape[1] ** 0.5 * 3)
    assert (buf[:, shape[1]:] == SENTINEL).all()


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(257, 4097), (300, 3000), (33, 20001), (100, 513), (64, 16001), (500, 1025),
                                   (101, 600)])
def test_sum_and_max_of_rows_off_sectors_match_torch(torch, shape, dtype_name):
    x = _rows(torch, shape, getattr(torch, dtype_name))
    x64 = x.double()
    torch.testing.assert_close(sk.amax(x, -1).double(), x64.amax(-1), rtol=0, atol=0)
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype_name]
    torch.testing.assert_close(sk.sum(x, -1).double(), x64.sum(-1), rtol=rtol, atol=rtol * shape[1] ** 0.5 * 3)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(300, 5000), (64, 2049), (40, 50257)])
def test_cross_entropy_of_rows_off_sectors_matches_torch(torch, shape, dtype_name):
    F = torch.nn.functional
    x = _rows(torch, shape, getattr(torch, dtype_name))
    t = torch.randint(0, shape[1], (shape[0],), device="cuda")
    t[0], t[1], t[2] = 0, shape[1] - 1, -100
    x64 = x.double()
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype_name]
    want = F.cross_entropy(x64, t, reduction="none")
    torch.testing.assert_close(sk.cross_entropy(x, t, reduction="none").double(), want, rtol=rtol, atol=rtol)
    torch.testing.assert_close(sk.cross_entropy(x, t).double(), F.cross_entropy(x64, t), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape, dim", [((2000, 50257), 0), ((1000, 5000), 0), ((3, 333, 1001), 1), ((4100, 200), 0)])
def test_sum_and_max_over_leading_rows_off_sectors_match_torch(torch, shape, dim, dtype_name):
    # rows in classes read through aligned windows (`reductions.reduce_inner_window_kernel`)
    dtype = getattr(torch, dtype_name)
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    x.view(-1)[-1] = 90     # the tensor's last element, read after the loop
    x64 = x.double()
    torch.testing.assert_close(sk.amax(x, dim).double(), x64.amax(dim), rtol=0, atol=0)
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype_name]
    torch.testing.assert_close(sk.sum(x, dim).double(), x64.sum(dim), rtol=rtol, atol=rtol * shape[dim] ** 0.5 * 3)
    xs = _rows(torch, (700, 3001), dtype)     # a view of a wider buffer: rows 3017 elements apart
    torch.testing.assert_close(sk.sum(xs, 0).double(), xs.double().sum(0), rtol=rtol, atol=rtol * 700 ** 0.5 * 3)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape, width, first", [
    ((300, 1001), 1008, 0),       # one tile, x on sectors, out off them
    ((2000, 99), 113, 3),         # packed rows, x off any 16-byte group
    ((64, 8191), 8256, 0),        # one tile of 8192
    ((300, 50257), 50304, 0),     # chunk tiles on clusters (a vocabulary padded to 64)
    ((200, 20001), 20016, 5),     # clusters
    ((3, 100001), 100016, 0),     # split rows: statistics in x's windows, normalized in out's
    ((270, 140001), 140016, 1),   # 2-byte chunks of 32768: one row per cluster (not persistent)
])
def test_softmax_of_rows_of_a_wider_buffer_into_a_contiguous_out(torch, shape, width, first, dtype_name):
    # x's rows start at other offsets than out's (out contiguous): x is read in out's windows,
    # each group as the two aligned 16-byte blocks around it, shifted into place
    dtype = getattr(torch, dtype_name)
    buf = (4 * torch.randn(shape[0], width, device="cuda", dtype=torch.float64)).to(dtype)
    x = buf[:, first:first + shape[1]]
    x[1, : shape[1] // 2] = float("-inf")
    x64 = x.double()
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype_name]
    y = sk.softmax(x)
    assert y.is_contiguous()
    torch.testing.assert_close(y.double(), torch.softmax(x64, -1), rtol=rtol, atol=rtol / shape[1] ** 0.5)
    torch.testing.assert_close(sk.log_softmax(x).double(), torch.log_softmax(x64, -1), rtol=rtol, atol=rtol * 30)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape, width, first", [
    ((300, 4095), 4096, 0),       # x on sectors, out off them
    ((200, 1500), 1511, 3),       # x off any 16-byte group
    ((64, 12001), 12016, 0),
    ((2048, 8191), 8256, 1),      # 16 MB and more: w and b from shifted tables
    ((64, 20001), 20016, 0),      # chunk tiles on clusters
    ((40, 50257), 50304, 3),      # chunk tiles, 2-byte layer_norm read again after the exchange
])
@pytest.mark.parametrize("rms", [False, True])
def test_norms_of_rows_of_a_wider_buffer_into_a_contiguous_out(torch, shape, width, first, rms, dtype_name):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    buf = (3 * torch.randn(shape[0], width, device="cuda", dtype=torch.float64) + 1).to(dtype)
    x = buf[:, first:first + shape[1]]
    w = torch.randn(shape[1], device="cuda", dtype=torch.float64).to(dtype)
    b = torch.randn(shape[1], device="cuda", dtype=torch.float64).to(dtype)
    x64 = x.double()
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype_name]
    if rms:
        y = sk.rms_norm(x, w, eps=1e-6)
        want = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    else:
        y = sk.layer_norm(x, w, b, eps=1e-5)
        want = F.layer_norm(x64, (shape[1],), w.double(), b.double(), eps=1e-5)
    assert y.is_contiguous()
    torch.testing.assert_close(y.double(), want, rtol=rtol, atol=rtol * 4)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape, width, first", [((300, 3000), 3011, 1), ((64, 9001), 9016, 0), ((1000, 99), 113, 5)])
def test_cumsum_of_rows_of_a_wider_buffer_into_a_contiguous_out(torch, shape, width, first, dtype_name):
    dtype = getattr(torch, dtype_name)
    buf = (3 * torch.randn(shape[0], width, device="cuda", dtype=torch.float64)).to(dtype)
    x = buf[:, first:first + shape[1]]
    y = sk.cumsum(x)
    assert y.is_contiguous()
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype_name]
    torch.testing.assert_close(y.double(), torch.cumsum(x.double(), -1), rtol=rtol,
                               atol=rtol * shape[1] ** 0.5 * 3)
