"""GPU tier of the torch-compatible signatures: sum/amax/amin with keepdim, max/min(dim) with
indices, argmax/argmin, cumsum over any dim, transpose(dim0, dim1) of any rank, layer_norm
over trailing dims, on torch CUDA tensors against torch (float64 where values are summed)."""
from __future__ import annotations

import pytest

import tilec.stdlib_kernels as S

pytestmark = pytest.mark.gpu


def _x(torch, shape, dtype="float32"):
    return torch.randn(shape, device="cuda", dtype=torch.float32).to(getattr(torch, dtype))


def _want(t, op, dim, keepdim):
    """torch's result; dim=None with keepdim: every dimension kept as 1 (as tilec gives)."""
    if dim is None:
        r = getattr(t, op)()
        return r.reshape([1] * t.dim()) if keepdim else r
    return getattr(t, op)(dim, keepdim=keepdim)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("dim", [0, 1, -1, None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_against_torch(torch, dtype, dim, keepdim):
    x = _x(torch, (37, 5, 1001), dtype)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == "bfloat16" else dict(rtol=1e-4, atol=1e-3)
    want_sum = _want(x.double(), "sum", dim, keepdim)
    got = S.sum(x, dim, keepdim)
    assert tuple(got.shape) == tuple(want_sum.shape)
    torch.testing.assert_close(got.double(), want_sum, **tol)
    want_max = _want(x, "amax", dim, keepdim)
    assert torch.equal(S.amax(x, dim, keepdim), want_max)
    assert torch.equal(S.amin(x, dim, keepdim), _want(x, "amin", dim, keepdim))
    if dim is not None:
        values, indices = S.max(x, dim, keepdim)
        assert torch.equal(values, want_max) and indices.dtype == torch.int64
        idx = indices if keepdim else indices.unsqueeze(dim)
        assert torch.equal(torch.gather(x, dim, idx), values if keepdim else values.unsqueeze(dim))
        assert torch.equal(S.argmax(x, dim, keepdim), x.argmax(dim, keepdim=keepdim))
        assert torch.equal(S.argmin(x, dim, keepdim), x.argmin(dim, keepdim=keepdim))


def test_argmax_ties_and_nan_as_torch(torch):
    x = torch.zeros(4, 300, device="cuda")
    x[1, 7] = x[1, 200] = 5.0                    # a tie: the first index
    x[2, 9] = float("nan")
    x[2, 100] = float("nan")                     # NaN wins, the first one
    assert torch.equal(S.argmax(x, 1), x.argmax(1))
    assert S.argmax(x, 1).tolist() == [0, 7, 9, 0]


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cumsum_any_dim(torch, dim):
    x = _x(torch, (19, 33, 257))
    torch.testing.assert_close(S.cumsum(x, dim).double(), x.double().cumsum(dim), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dims", [(0, 1), (1, 2), (0, 3), (2, 3), (-1, -3), (1, 1)])
def test_transpose_any_rank(torch, dims):
    x = _x(torch, (3, 17, 33, 65), "float16")
    got = S.transpose(x, *dims)
    assert got.is_contiguous()
    assert torch.equal(got, x.transpose(*dims).contiguous())


def test_layer_norm_over_trailing_dims(torch):
    x = _x(torch, (9, 7, 30, 41), "bfloat16")
    w, b = _x(torch, (30, 41), "bfloat16"), _x(torch, (30, 41), "bfloat16")
    want = torch.nn.functional.layer_norm(x.double(), (30, 41), w.double(), b.double(), 1e-5)
    got = S.layer_norm(x, (30, 41), w, b, 1e-5)
    assert got.shape == x.shape and got.dtype == x.dtype
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=3e-2)
    plain = S.layer_norm(x, 41)                  # an int: the last dim, no weight or bias
    torch.testing.assert_close(plain.double(), torch.nn.functional.layer_norm(x.double(), (41,)),
                               rtol=2e-2, atol=3e-2)
