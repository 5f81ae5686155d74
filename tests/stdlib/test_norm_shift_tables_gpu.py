"""layer_norm / rms_norm on the GPU over rows off 32-byte sectors large enough for the
shifted w and b tables (`norms._shift_tables`): against torch in float64, nothing written
outside the rows. Skipped where no GPU is found."""
from __future__ import annotations

import importlib

import pytest

import tilec.stdlib_kernels as sk

from launch_spy import spy_launches

pytestmark = pytest.mark.gpu
norms = importlib.import_module("tilec.stdlib_kernels.norms")
plans = importlib.import_module("tilec.stdlib_kernels._plan")
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize("shape, dtype_name", [((2100, 4097), "bfloat16"), ((8300, 1025), "float16"),
                                               ((1100, 4097), "float32"), ((1300, 7001), "bfloat16"),
                                               ((700, 14001), "bfloat16")])
def test_shifted_tables_match_torch(torch, monkeypatch, shape, dtype_name):
    plans.clear_plans()   # a replayed plan would launch without the spy seeing it
    seen = spy_launches(monkeypatch, (norms,), lambda kernel, cluster, c: (kernel.name, c.get("SHIFTED", False)))
    F = torch.nn.functional
    dtype = getattr(torch, dtype_name)
    n = shape[-1]
    assert shape[0] * n * torch.finfo(dtype).bits // 8 >= norms.SHIFT_TABLE_MIN_BYTES
    def rows_off_sectors():   # a pitch of n + 3: every row but the first starts off a 32-byte sector
        return torch.full((shape[0], n + 3), 7.0, device="cuda", dtype=dtype)

    buf = rows_off_sectors()
    x = rows_off_sectors()[:, :n].copy_((3 * torch.randn(shape, device="cuda", dtype=torch.float64) + 40).to(dtype))
    x64 = x.double()
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    rtol = atol = TOL[dtype_name]
    y, mean, rstd = sk.layer_norm(x, w, b, return_stats=True, out=buf[:, :n])   # x's leads: windows
    assert seen == [("shift_tables_kernel", False), ("norm_tile_kernel", True)]
    torch.testing.assert_close(y.double(), F.layer_norm(x64, (n,), w.double(), b.double(), 1e-5),
                               rtol=rtol, atol=8 * atol)
    torch.testing.assert_close(mean.double(), x64.mean(-1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5), rtol=1e-3, atol=0)
    assert (buf[:, n:] == 7.0).all()
    # the same call again replays its launch plan: new tables, the same launches
    w2 = torch.randn(n, device="cuda", dtype=dtype)
    y2, _, _ = sk.layer_norm(x, w2, b, return_stats=True, out=rows_off_sectors()[:, :n])
    torch.testing.assert_close(y2.double(), F.layer_norm(x64, (n,), w2.double(), b.double(), 1e-5),
                               rtol=rtol, atol=8 * atol)
    assert len(seen) == 2
    seen.clear()
    want = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    out = rows_off_sectors()
    torch.testing.assert_close(sk.rms_norm(x, w, out=out[:, :n]).double(), want, rtol=rtol, atol=8 * atol)
    assert seen[-1] == ("norm_tile_kernel", dtype_name != "float32")   # f32 rms_norm keeps its gathers
    assert (out[:, n:] == 7.0).all()
    seen.clear()
    want = F.layer_norm(x64, (n,), None, b.double(), 1e-5)
    torch.testing.assert_close(sk.layer_norm(x, None, b, out=rows_off_sectors()[:, :n]).double(), want,
                               rtol=rtol, atol=8 * atol)
    assert seen == [("shift_tables_kernel", False), ("norm_tile_kernel", True)]
