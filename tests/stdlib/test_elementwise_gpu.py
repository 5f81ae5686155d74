"""GPU tier: the elementwise ops, dropout and transpose against torch in float64."""
from __future__ import annotations

import pytest

import tilec.stdlib_kernels as S

pytestmark = pytest.mark.gpu
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(1,), (4097,), (3, 1000, 257), (8, 4096)])
def test_elementwise_against_torch(torch, dtype, shape):
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    x = torch.randn(shape, device="cuda", dtype=dt)
    y = torch.randn(shape, device="cuda", dtype=dt)
    x64, y64 = x.double(), y.double()
    tol = dict(rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(S.gelu(x).double(), F.gelu(x64), **tol)
    torch.testing.assert_close(S.gelu(x, approximate="tanh").double(), F.gelu(x64, approximate="tanh"), **tol)
    torch.testing.assert_close(S.add(x, y[..., :1]).double(), x64 + y64[..., :1], **tol)
    torch.testing.assert_close(S.mul(x, y).double(), x64 * y64, **tol)
    torch.testing.assert_close(S.swiglu(x, y).double(), F.silu(x64) * y64, rtol=TOL[dtype], atol=4 * TOL[dtype])
    if shape[-1] % 2 == 0:
        d = shape[-1] // 2
        torch.testing.assert_close(S.silu_and_mul(x).double(), F.silu(x64[..., :d]) * x64[..., d:],
                                   rtol=TOL[dtype], atol=4 * TOL[dtype])


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rope_against_torch(torch, interleaved, dtype):
    b, s, h, d = 2, 77, 5, 128
    x = torch.randn(b, s, h, d, device="cuda", dtype=getattr(torch, dtype))
    ang = torch.rand(s, d // 2, device="cuda", dtype=torch.float64) * 6
    cos, sin = ang.cos().float(), ang.sin().float()
    x64, c, sn = x.double(), ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    if interleaved:
        e, o = x64[..., 0::2], x64[..., 1::2]
        want = torch.stack([e * c - o * sn, o * c + e * sn], -1).flatten(-2)
    else:
        a, bb = x64[..., : d // 2], x64[..., d // 2:]
        want = torch.cat([a * c - bb * sn, bb * c + a * sn], -1)
    got = S.rope(x, cos, sin, interleaved=interleaved).double()
    torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=2 * TOL[dtype])


def test_dropout_and_transpose_on_gpu(torch):
    x = torch.randn(1 << 20, device="cuda", dtype=torch.float16) + 4
    y = S.dropout(x, 0.25, 11)
    assert torch.equal(y, S.dropout(x, 0.25, 11))
    kept = (y != 0).double().mean().item()
    assert abs(kept - 0.75) < 0.005
    torch.testing.assert_close(y[y != 0].double(), x[y != 0].double() / 0.75, rtol=2e-3, atol=0)
    m = torch.randn(1000, 777, device="cuda")
    assert torch.equal(S.transpose(m), m.T)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "float64"])
@pytest.mark.parametrize("shape", [(1000, 777), (129, 4100), (4100, 129), (1, 300), (8192, 8192)])
def test_transpose_tiles_of_every_size_on_gpu(torch, dtype, shape):
    # 128x128 (1-2 bytes), 64x128 (4) and 64x64 (8) tiles, ragged on both sides.
    dt = getattr(torch, dtype)
    m = (torch.randn(shape, device="cuda") * 50).to(dt)
    assert torch.equal(S.transpose(m), m.T.contiguous())
