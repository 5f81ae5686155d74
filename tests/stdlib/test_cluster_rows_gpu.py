"""Long rows on thread-block clusters on the GPU (sm_90+): softmax, log_softmax,
layer_norm and rms_norm against torch in float64, on row lengths that are not
multiples of the chunk, every dtype. Skipped where no GPU is found."""
from __future__ import annotations

import importlib

import pytest

import tilec.stdlib_kernels as sk

from launch_spy import spy_launches, retune

pytestmark = pytest.mark.gpu

softmax = importlib.import_module("tilec.stdlib_kernels.softmax")   # the package exports the functions
norms = importlib.import_module("tilec.stdlib_kernels.norms")

TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
DTYPES = ["float32", "float16", "bfloat16"]


@pytest.fixture(scope="module")
def torch(torch):  # the shared fixture (tests/conftest.py), on sm_90+ only
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("thread-block clusters need sm_90+")
    return torch


@pytest.fixture
def launched(monkeypatch):
    """(kernel name, cluster) of every launch the entry points make."""
    return spy_launches(monkeypatch, (softmax, norms), lambda kernel, cluster, c: (kernel.name, cluster))


def _close(torch, got, want, dtype_name, scale=1.0):
    rtol, atol = TOL[dtype_name]
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol * scale, equal_nan=True)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape,force", [((40, 200003), False), ((3, 200003), True), ((300, 16411), False),
                                         ((300, 200003), False), ((300, 262144), False), ((300, 40001), False),
                                         ((300, 50257), False), ((300, 45000), False), ((2, 150, 24576), False), ((300, 28000), False),
                                         ((300, 70001), False), ((300, 100000), False), ((300, 100277), False), ((300, 151936), False)])
def test_softmax_on_clusters_matches_torch(torch, monkeypatch, launched, shape, force, dtype_name):
    if force:  # few rows take the split kernels unless told otherwise
        retune(monkeypatch, "softmax", cluster_min_waves=0)
    dtype = getattr(torch, dtype_name)
    x = (8 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    x[..., 0, : shape[-1] // 3] = float("-inf")     # whole chunks of -inf
    x64 = x.double()
    _close(torch, sk.softmax(x), torch.softmax(x64, -1), dtype_name)
    _close(torch, sk.log_softmax(x), torch.log_softmax(x64, -1), dtype_name, scale=30)
    # softmax and log_softmax of 2-byte rows with 32768-element chunks: persistent clusters
    # (300 rows: more than are resident, so clusters walk several rows); f32 ones when every
    # chunk is full (the next row staged in shared memory)
    # (16411 to 50257: chunks as 4 to 8 tiles of 1024, `split_chunks`; 2-byte rows up to
    # 114688 as up to 10 tiles of 1024 or 7 of 2048); 2-byte rows on 32-byte sectors longer
    # than that (151936: on the fewest programs, `schedules.softmax_persistent_candidates`)
    n = shape[-1]
    if dtype_name == "float32":
        persistent = n == 262144
    else:
        persistent = n > 131072 or (n > 7 * 8 * 2048 and n * 2 % 32 == 0)
    assert [k for k, _ in launched] == ["softmax_cluster_loop_kernel" if persistent else "softmax_cluster_kernel"] * 2
    # clusters of 3, 4, 6, 7 and 7 programs holding 8, 7, 8, 8 and 10 tiles of 1024 (24576,
    # 28000, 45000, 50257; 70001 in 2 bytes, 5 x 16384 in f32: `fewer_programs`), 7 x 7 tiles
    # of 2048 (100000 and 100277 in 2 bytes; 7 x 16384 in f32)
    clusters = {24576: 3, 28000: 4, 45000: 6, 50257: 7, 70001: 7 if dtype_name != "float32" else 5, 100000: 7,
                100277: 7}
    if shape[-1] in clusters:
        assert [c for _, c in launched] == [clusters[shape[-1]]] * 2


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(5, 70001), (3, 2, 131072), (257, 16385)])
def test_norms_on_clusters_match_torch(torch, launched, shape, dtype_name):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    n = shape[-1]
    x = (100 + 3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)   # a large mean
    x64 = x.double()
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=torch.float32)
    y, mean, rstd = sk.layer_norm(x, w, b, return_stats=True)
    _close(torch, y, F.layer_norm(x64, (n,), w.double(), b.double(), 1e-5), dtype_name, scale=8)
    torch.testing.assert_close(mean.double(), x64.mean(-1), rtol=1e-6, atol=1e-5)
    want_rstd = torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5)
    torch.testing.assert_close(rstd.double(), want_rstd, rtol=1e-3, atol=0)
    y, rstd = sk.rms_norm(x, w, return_stats=True)
    want_rstd = torch.rsqrt((x64 * x64).mean(-1) + 1e-6)
    _close(torch, y, x64 * want_rstd[..., None] * w.double(), dtype_name, scale=8)
    torch.testing.assert_close(rstd.double(), want_rstd, rtol=1e-5, atol=0)
    # Rows filling 8 chunks of 16384 on sectors run on persistent clusters; rows off sectors
    # (70001 and 16385 columns) as chunk tiles (norms.use_chunk_tiles; 70001: 7 x 10 tiles of
    # 1024), except f32 rms_norm on more than F32_CHUNK_TILES_MAX_C programs (8 x 16384).
    f32 = dtype_name == "float32"
    want = {131072: [("norm_cluster_loop_kernel", 8)] * 2,
            70001: [("norm_chunks_kernel", 7), ("norm_cluster_loop_kernel", 8)] if f32 else
            [("norm_chunks_kernel", 7)] * 2,
            16385: [("norm_chunks_kernel", 3)] * 2}
    assert [k for k in launched if k[0] != "shift_tables_kernel"] == want[n]


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape", [(64, 50257), (33, 40000), (40, 32001)])
def test_norm_chunk_tiles_in_place(torch, launched, shape, dtype_name):
    # out=x: chunks read again after the exchange (2-byte layer_norm), or held, are read
    # before the program's own stores overwrite them
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    n = shape[-1]
    x = (20 + 3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    want = F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    assert sk.layer_norm(x, w, b, out=x) is x
    _close(torch, x, want, dtype_name, scale=8)
    assert launched[-1] == ("norm_chunks_kernel", 7 if n == 50257 else 5 if n == 40000 else
                            4 if dtype.itemsize == 2 else 2)


def test_replayed_cluster_launches_match_the_first(torch):
    # The second call replays the recorded launch plan (cluster shape in the compiled kernel).
    x = torch.randn(512, 262144, device="cuda", dtype=torch.bfloat16)
    first = sk.softmax(x)
    second = sk.softmax(x)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    _close(torch, second, torch.softmax(x.double(), -1), "bfloat16")


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("shape,pad", [((450, 20001), 0), ((64, 50257), 0), ((5, 100003), 0), ((33, 40000), 0),
                                       ((40, 16411), 3), ((40, 16411), 8)])
def test_norm_chunk_tiles_match_torch(torch, launched, shape, pad, dtype_name):
    # Long rows off 32-byte sectors, ragged or not filling power-of-two chunks: one row per
    # cluster, chunks as tiles (norms.use_chunk_tiles). pad: x is a view of rows `pad` elements
    # longer, its output contiguous (no shared window: column tiles) or, for pad 8, an `out`
    # view at the same offsets (windows). 450 x 20001 reads w and b from shifted tables.
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    n = shape[-1]
    buf = (50 + 3 * torch.randn((shape[0], n + pad), device="cuda", dtype=torch.float64)).to(dtype)
    x = buf[:, :n]
    x64 = x.double()
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    out = torch.full((shape[0], n + pad), 7.0, device="cuda", dtype=dtype)[:, :n] if pad == 8 else None
    y, mean, rstd = sk.layer_norm(x, w, b, return_stats=True, out=out)
    _close(torch, y, F.layer_norm(x64, (n,), w.double(), b.double(), 1e-5), dtype_name, scale=8)
    torch.testing.assert_close(mean.double(), x64.mean(-1), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5), rtol=1e-3, atol=0)
    if out is not None:   # the bytes between the rows untouched
        assert bool((out.as_strided((shape[0], pad), (n + pad, 1), n) == 7.0).all())
    y, rstd = sk.rms_norm(x, w, return_stats=True)
    want_rstd = torch.rsqrt((x64 * x64).mean(-1) + 1e-6)
    _close(torch, y, x64 * want_rstd[..., None] * w.double(), dtype_name, scale=8)
    torch.testing.assert_close(rstd.double(), want_rstd, rtol=1e-5, atol=0)
    kernels = [k for k, _ in launched if k != "shift_tables_kernel"]
    assert kernels[0] == "norm_chunks_kernel"
    if shape == (450, 20001):
        assert ("shift_tables_kernel", 1) in launched
