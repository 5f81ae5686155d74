"""Row-wise stdlib ops on the GPU: torch CUDA tensors against torch's own ops in
float64, and tc.DeviceArrays against numpy. Skipped where no GPU is found."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk

from launch_spy import spy_launches

pytestmark = pytest.mark.gpu
plans = importlib.import_module("tilec.stdlib_kernels._plan")

TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
SHAPES = [(4096, 4096), (3, 262144), (5, 3, 1000), (7, 1), (64, 16385)]


def _close(torch, got, want, dtype_name, scale=1.0):
    rtol, atol = TOL[dtype_name]
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol * scale, equal_nan=True)


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_and_norms_match_torch(torch, shape, dtype_name):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    x64 = x.double()
    _close(torch, sk.softmax(x), torch.softmax(x64, -1), dtype_name)
    _close(torch, sk.log_softmax(x), torch.log_softmax(x64, -1), dtype_name, scale=10)
    n = shape[-1]
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=torch.float32)
    y, mean, rstd = sk.layer_norm(x, w, b, return_stats=True)
    _close(torch, y, F.layer_norm(x64, (n,), w.double(), b.double(), 1e-5), dtype_name, scale=8)
    torch.testing.assert_close(mean.double(), x64.mean(-1), rtol=1e-5, atol=1e-4)
    want_rms = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    _close(torch, sk.rms_norm(x, w), want_rms, dtype_name, scale=8)


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
# rows held as three tiles of a quarter of their power of two (`_common.split_row`), on
# 32-byte sectors (5120, 3072, 12288 f32/bf16) or off them (4097, 1025: softmax's windows);
# the norms' full rows as two halves (8192) or four quarters (14336, 16384: `norms.norm_tiles`)
@pytest.mark.parametrize("shape", [(300, 4097), (257, 5120), (129, 3072), (1000, 1025), (65, 12288), (40, 8192),
                                   (33, 14336), (70, 16384)])
def test_split_rows_match_torch_and_write_only_the_rows(torch, shape, dtype_name):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64) + 40).to(dtype)
    x[1, : shape[1] - 3] = float("-inf")
    x64 = x.double()
    n = shape[-1]
    for fn, ref, scale in ((sk.softmax, torch.softmax, 1.0), (sk.log_softmax, torch.log_softmax, 10.0)):
        buf = torch.full((shape[0], n + 16), 7.0, device="cuda", dtype=dtype)
        assert fn(x, out=buf[:, :n]) is not None
        _close(torch, buf[:, :n], ref(x64, -1), dtype_name, scale=scale)
        assert (buf[:, n:] == 7.0).all()
    x = x[2:]   # finite rows for the norms, whose mean (40) is large next to the spread
    x64 = x.double()
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    buf = torch.full((x.shape[0], n + 16), 7.0, device="cuda", dtype=dtype)
    y, mean, rstd = sk.layer_norm(x, w, b, return_stats=True, out=buf[:, :n])
    _close(torch, y, F.layer_norm(x64, (n,), w.double(), b.double(), 1e-5), dtype_name, scale=8)
    torch.testing.assert_close(mean.double(), x64.mean(-1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5), rtol=1e-3, atol=0)
    assert (buf[:, n:] == 7.0).all()
    want_rms = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    _close(torch, sk.rms_norm(x, w), want_rms, dtype_name, scale=8)


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
# rows off 32-byte sectors on each softmax path (one tile, clusters, split rows, persistent
# clusters for 2-byte rows), read and written through aligned windows whose edges lie in the
# gaps between out's rows: those must keep their sentinels
@pytest.mark.parametrize("shape", [(37, 1001), (300, 50257), (3, 40001), (40, 140001), (4099, 17)])
def test_softmax_over_rows_off_32_byte_sectors_writes_only_the_rows(torch, shape, dtype_name):
    dtype = getattr(torch, dtype_name)
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    x[1, : shape[1] // 2] = float("-inf")
    n = shape[-1]
    for fn, ref, scale in ((sk.softmax, torch.softmax, 1.0), (sk.log_softmax, torch.log_softmax, 10.0)):
        buf = torch.full((shape[0], n + 16), 7.0, device="cuda", dtype=dtype)
        out = buf[:, :n]
        assert fn(x, out=out) is out
        _close(torch, out, ref(x.double(), -1), dtype_name, scale=scale)
        assert (buf[:, n:] == 7.0).all()


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
# odd widths (50257, 16389, 32001) put every row but the first off a 16-byte boundary:
# the looped kernels read aligned windows whose edges lie in the neighbouring rows (1100 such
# rows: cross_entropy's whole rows by 2048-column tiles, `loop_config`)
@pytest.mark.parametrize("shape", [(4096, 4096), (3, 262144), (1000, 7), (64, 50257), (7, 16389), (300, 32001),
                                   (1100, 32001)])
def test_cross_entropy_and_reductions_match_torch(torch, shape, dtype_name):
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype)
    x64 = x.double()
    t = torch.randint(0, shape[-1], shape[:-1], device="cuda")
    t[0] = -100
    for reduction in ("none", "sum", "mean"):
        want = F.cross_entropy(x64, t, ignore_index=-100, reduction=reduction)
        _close(torch, sk.cross_entropy(x, t, reduction=reduction), want, dtype_name, scale=shape[0])
    for dim in (0, 1):
        _close(torch, sk.sum(x, dim), x64.sum(dim), dtype_name, scale=shape[dim])
        _close(torch, sk.amax(x, dim), x64.max(dim).values, dtype_name)
    _close(torch, sk.cumsum(x), x64.cumsum(-1), dtype_name, scale=shape[-1] ** 0.5)


def test_strided_rows_and_out(torch):
    base = torch.randn(64, 3000, device="cuda", dtype=torch.float16)
    x = base[::2, 100:2900]                     # row stride 6000, last stride 1
    out = torch.empty(x.shape, device="cuda", dtype=torch.float16)
    assert sk.softmax(x, out=out) is out
    _close(torch, out, torch.softmax(x.double(), -1), "float16")
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        sk.softmax(base.t())


def test_device_arrays_match_numpy():
    if not tc.runtime.gpu_available():
        pytest.skip("no GPU")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 5000)).astype(np.float32)
    x64 = x.astype(np.float64)
    xd = tc.from_numpy(x)
    got = sk.softmax(xd)
    assert isinstance(got, tc.DeviceArray)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    np.testing.assert_allclose(got.to_numpy(), e / e.sum(-1, keepdims=True), rtol=2e-5, atol=1e-9)
    np.testing.assert_allclose(sk.sum(xd, 0).to_numpy(), x64.sum(0), rtol=1e-4, atol=1e-4)
    t = rng.integers(0, 5000, 300)
    loss = sk.cross_entropy(xd, tc.from_numpy(t)).to_numpy()
    lse = np.log(e.sum(-1)) + x64.max(-1)
    np.testing.assert_allclose(loss, np.mean(lse - x64[np.arange(300), t]), rtol=1e-5)


@pytest.mark.parametrize("shape, dtype_name, block", [((1030, 40000), "bfloat16", "wide"), ((1030, 40000), "float16", "wide"),
                                                      ((1030, 40000), "float32", 4096), ((1030, 70001), "bfloat16", 4096),
                                                      ((1030, 50257), "bfloat16", 2048), ((1030, 70001), "float32", 2048)])
def test_cross_entropy_whole_long_rows_match_torch(torch, monkeypatch, shape, dtype_name, block):
    # SPLIT_ROWS or more long rows, each one program (`loop_config`): 2-byte rows on sectors by
    # the device's wide_loop_block (8192 in the family table, 4096 on an H200: the part's
    # tuning.PART_OVERRIDES), f32 ones and 2-byte windowed rows past 65536 classes by 4096, other
    # windowed ones by 2048; a ragged last step, an ignored row, a row of -inf but one logit, a
    # target out of range.
    CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
    plans.clear_plans()   # a replayed plan would launch without the spy seeing it
    seen = spy_launches(monkeypatch, (CE,), lambda kernel, cluster, c: (kernel.name, c.get("BLOCK")))
    F = torch.nn.functional
    x = (3 * torch.randn(shape, device="cuda", dtype=torch.float64)).to(getattr(torch, dtype_name))
    x[5] = float("-inf")
    x[5, 77] = 2.0
    t = torch.randint(0, shape[1], shape[:1], device="cuda")
    t[3], t[5], t[6] = -100, 77, shape[1] - 1
    x64 = x.double()
    for reduction in ("none", "sum", "mean"):
        want = F.cross_entropy(x64, t, ignore_index=-100, reduction=reduction)
        _close(torch, sk.cross_entropy(x, t, reduction=reduction), want, dtype_name, scale=shape[0])
    if block == "wide":
        from tilec.stdlib_kernels.tuning import row_tuning
        from tilec.target import Target
        block = row_tuning(Target.current()).cross_entropy.wide_loop_block
    assert seen[0] == ("ce_loop_kernel", block)
    t[9] = shape[1]
    bad = sk.cross_entropy(x, t, reduction="none")
    assert torch.isnan(bad[9]) and not torch.isnan(bad[:9]).any()


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_rows_one_element_in(torch, dtype_name):
    # A view whose rows start one element into an odd-width array: off 16-byte boundaries
    # and off the array's own alignment, read through the same windows.
    F = torch.nn.functional
    x = (3 * torch.randn((64, 50257), device="cuda", dtype=torch.float64)).to(getattr(torch, dtype_name))[:, 1:]
    t = torch.randint(0, x.shape[-1], x.shape[:-1], device="cuda")
    _close(torch, sk.cross_entropy(x, t, reduction="none"), F.cross_entropy(x.double(), t, reduction="none"),
           dtype_name, scale=8)
    _close(torch, sk.sum(x, -1), x.double().sum(-1), dtype_name, scale=x.shape[-1] ** 0.5 * 4)
    _close(torch, sk.amax(x, -1), x.double().max(-1).values, dtype_name)
