"""out= of the ops whose torch counterparts take it (topk, sample, sum/amax/amin, max/min with
dim, argmax/argmin, cumsum) and of add_rms_norm and embedding_backward: the stdlib entry
points on the interpreter (written in place, the same values as without out=, a bad out a
TypeError/ValueError naming it with nothing written), the `*_out` custom ops' impls and
schemas; on the GPU (`gpu`) torch.library.opcheck of each and torch's own out= results."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.stdlib_kernels import reductions_dim as rdim
from tilec.stdlib_kernels import torch_ops as T
from tilec.stdlib_kernels.add_norm import add_rms_norm
from tilec.stdlib_kernels.sampling import sample
from tilec.stdlib_kernels.topk import topk

NEW_OUT_OPS = {"topk_out": ("values", "indices"), "sample_out": ("out",), "sum_out": ("out",),
               "amax_out": ("out",), "amin_out": ("out",), "argmax_out": ("out",), "argmin_out": ("out",),
               "max_dim_out": ("values", "indices"), "min_dim_out": ("values", "indices"), "cumsum_out": ("out",),
               "add_rms_norm_out": ("out", "residual_out"), "embedding_backward_out": ("out",)}


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", sorted(NEW_OUT_OPS))
def test_out_ops_declare_what_they_write(name):
    spec = T.OPS[name]
    outs = NEW_OUT_OPS[name]
    assert spec.mutates == outs and spec.schema.endswith(") -> ()")
    marks = ", ".join(f"Tensor({c}!) {n}" for c, n in zip("ab", outs))
    assert spec.schema[:-len(" -> ()")].endswith(marks + ")")
    assert T._arg_names(spec.schema)[-len(outs):] == list(outs)


def test_topk_out():
    x = _x((5, 300))
    values, indices = np.full((5, 7), 9.0, np.float32), np.full((5, 7), -1, np.int64)
    got = topk(x, 7, out=(values, indices))
    assert got[0] is values and got[1] is indices
    want_v, want_i = topk(x, 7)
    np.testing.assert_array_equal(values, want_v)
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(indices, np.argsort(-x, axis=-1, kind="stable")[:, :7])
    # through the custom op's impl (host arrays run on the interpreter)
    v2, i2 = np.zeros_like(values), np.zeros_like(indices)
    assert T.OPS["topk_out"].impl(x, 7, False, v2, i2) is None
    np.testing.assert_array_equal(i2, np.argsort(x, axis=-1, kind="stable")[:, :7])


@pytest.mark.parametrize("bad,err,match", [
    (lambda v, i: (v[:, :6], i), ValueError, r"out\[0\] \(values\) has shape"),
    (lambda v, i: (v, i.astype(np.int32)), TypeError, r"out\[1\] \(indices\) has dtype"),
    (lambda v, i: v, TypeError, "out must be a"),
    (lambda v, i: (v, i, i), TypeError, "out must be a")])
def test_topk_bad_out_writes_nothing(bad, err, match):
    x = _x((5, 300))
    values, indices = np.full((5, 7), 9.0, np.float32), np.full((5, 7), -1, np.int64)
    with pytest.raises(err, match=match):
        topk(x, 7, out=bad(values, indices))
    assert (values == 9.0).all() and (indices == -1).all()


def test_sample_out():
    x = _x((4, 3, 50), 1)
    out = np.full((4, 3), -7, np.int64)
    assert sample(x, top_k=5, seed=3, out=out) is out
    np.testing.assert_array_equal(out, sample(x, top_k=5, seed=3))
    greedy = np.full((4, 3), -7, np.int64)
    T.OPS["sample_out"].impl(x, 0.0, None, None, 0, 0, greedy)
    np.testing.assert_array_equal(greedy, x.argmax(-1))
    for bad, err in ((np.zeros((4, 3), np.int32), TypeError), (np.zeros((4,), np.int64), ValueError)):
        bad[...] = -7
        with pytest.raises(err, match="out has"):
            sample(x, top_k=5, seed=3, out=bad)
        assert (bad == -7).all()


def test_reduction_out_impls():
    x = _x((6, 33, 5), 2)
    x[1, 4, 2] = x[1, :, 2].max()   # a tie: the first index wins, as torch
    cases = [("sum_out", (1, False), x.sum(1), np.float32), ("amax_out", (None, False), x.max(), np.float32),
             ("amin_out", (2, True), x.min(2, keepdims=True), np.float32),
             ("argmax_out", (1, False), x.argmax(1), np.int64), ("argmin_out", (-1, True), x.argmin(-1)[..., None],
                                                                  np.int64)]
    for name, (dim, keepdim), want, dtype in cases:
        out = np.full(np.shape(want), 5, dtype)
        T.OPS[name].impl(x, dim, keepdim, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=name)
    v, i = np.zeros((6, 5), np.float32), np.zeros((6, 5), np.int64)
    T.OPS["max_dim_out"].impl(x, 1, False, v, i)
    np.testing.assert_array_equal(v, x.max(1))
    np.testing.assert_array_equal(i, x.argmax(1))
    v0, i0 = np.zeros((33, 5), np.float32), np.zeros((33, 5), np.int64)
    T.OPS["min_dim_out"].impl(x, 0, False, v0, i0)
    np.testing.assert_array_equal(v0, x.min(0))
    np.testing.assert_array_equal(i0, x.argmin(0))
    c = np.zeros_like(x)
    T.OPS["cumsum_out"].impl(x, 1, c)
    np.testing.assert_allclose(c, np.cumsum(x.astype(np.float64), 1), rtol=1e-5, atol=1e-5)


def test_max_with_dim_bad_out_writes_nothing():
    x = _x((6, 33), 3)
    v, i = np.full(6, 2.0, np.float32), np.full(6, -1, np.int64)
    with pytest.raises(TypeError, match="indices has dtype"):
        rdim.max(x, 1, out=(v, i.astype(np.int32)))
    with pytest.raises(ValueError, match="out has shape"):
        rdim.max(x, 1, out=(np.zeros(5, np.float32), i))
    assert (v == 2.0).all() and (i == -1).all()
    rdim.max(x, 1, out=(v, i))
    np.testing.assert_array_equal(i, x.argmax(1))


def test_add_rms_norm_out_and_residual_out():
    x, r, w = _x((7, 96), 4), _x((7, 96), 5), _x((96,), 6)
    want_y, want_h = add_rms_norm(x, r, w, 1e-6)
    y, h = np.zeros_like(x), np.zeros_like(x)
    T.OPS["add_rms_norm_out"].impl(x, r, w, 1e-6, y, h)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(h, want_h)
    np.testing.assert_allclose(h, x + r, rtol=1e-6)
    bad = np.full((7, 95), 3.0, np.float32)
    with pytest.raises(ValueError, match="residual_out has shape"):
        add_rms_norm(x, r, w, out=y, residual_out=bad)
    with pytest.raises(TypeError, match="residual_out has dtype"):
        add_rms_norm(x, r, w, residual_out=np.zeros((7, 96), np.float16))
    assert (bad == 3.0).all()


def test_embedding_backward_out():
    rng = np.random.default_rng(7)
    g = _x((3, 4, 8), 8)
    ids = rng.integers(0, 10, (3, 4))
    ids[0, :2] = 4   # duplicates are summed
    out = np.full((10, 8), 5.0, np.float32)
    T.OPS["embedding_backward_out"].impl(g, ids, 10, None, out)
    want = np.zeros((10, 8))
    np.add.at(want, ids.reshape(-1), g.reshape(-1, 8).astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_opcheck_and_torch_out(torch):
    T.register()
    torch.manual_seed(0)
    x = torch.randn(37, 1001, device="cuda", dtype=torch.float32)
    e = torch.empty
    cases = [("topk_out", (x, 9, True, e(37, 9, device="cuda"), e(37, 9, device="cuda", dtype=torch.int64))),
             ("sample_out", (x, 0.7, 20, 0.9, 11, 0, e(37, device="cuda", dtype=torch.int64))),
             ("sum_out", (x, 1, False, e(37, device="cuda"))), ("amax_out", (x, None, False, e((), device="cuda"))),
             ("amin_out", (x, 0, True, e(1, 1001, device="cuda"))),
             ("argmax_out", (x, 1, False, e(37, device="cuda", dtype=torch.int64))),
             ("argmin_out", (x, None, False, e((), device="cuda", dtype=torch.int64))),
             ("max_dim_out", (x, 1, True, e(37, 1, device="cuda"), e(37, 1, device="cuda", dtype=torch.int64))),
             ("min_dim_out", (x, 0, False, e(1001, device="cuda"), e(1001, device="cuda", dtype=torch.int64))),
             ("cumsum_out", (x, 1, e(37, 1001, device="cuda"))),
             ("add_rms_norm_out", (x, x * 0.5, torch.randn(1001, device="cuda"), 1e-6, torch.empty_like(x),
                                   torch.empty_like(x)))]
    for name, args in cases:
        torch.library.opcheck(getattr(torch.ops.tilec, name).default, args)
    g = torch.randn(3, 5, 64, device="cuda")
    ids = torch.randint(0, 11, (3, 5), device="cuda")
    torch.library.opcheck(torch.ops.tilec.embedding_backward_out.default, (g, ids, 11, None, e(11, 64, device="cuda")))

    # the user-facing functions against torch's own out= forms
    v, i = e(37, 9, device="cuda"), e(37, 9, device="cuda", dtype=torch.int64)
    assert T.topk(x, 9, out=(v, i))[0] is v
    tv, ti = torch.topk(x.double(), 9)
    torch.testing.assert_close(v.double(), tv, rtol=0, atol=0)
    torch.testing.assert_close(i, ti, rtol=0, atol=0)
    o = e(37, device="cuda")
    assert T.sum(x, 1, out=o) is o
    torch.testing.assert_close(o.double(), x.double().sum(1), rtol=1e-5, atol=1e-4)
    mv, mi = e(37, device="cuda"), e(37, device="cuda", dtype=torch.int64)
    T.max(x, 1, out=(mv, mi))
    torch.testing.assert_close(mi, torch.max(x, 1).indices, rtol=0, atol=0)
    a = e(1001, device="cuda", dtype=torch.int64)
    T.argmin(x, 0, out=a)
    torch.testing.assert_close(a, torch.argmin(x, 0), rtol=0, atol=0)
    c = e(37, 1001, device="cuda")
    T.cumsum(x, 1, out=c)
    torch.testing.assert_close(c.double(), x.double().cumsum(1), rtol=1e-5, atol=1e-4)
    tok = e(37, device="cuda", dtype=torch.int64)
    assert T.sample(x, top_k=20, seed=5, out=tok) is tok
    torch.testing.assert_close(tok, T.sample(x, top_k=20, seed=5), rtol=0, atol=0)
    y, h = T.add_rms_norm(x, x * 0.5, None, out=torch.empty_like(x), residual_out=torch.empty_like(x))
    torch.testing.assert_close(h, x * 1.5, rtol=1e-6, atol=1e-6)
    h64 = h.double()
    torch.testing.assert_close(y.double(), h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + 1e-6),
                               rtol=2e-5, atol=2e-5)


@pytest.mark.gpu
def test_gpu_bad_out_is_named_and_nothing_written(torch):
    x = torch.randn(6, 50, device="cuda")
    fill = torch.full((6,), 3.0, device="cuda")
    for call, err, match in [
            (lambda: T.sum(x, 1, out=fill[:5]), ValueError, "out has shape"),
            (lambda: T.sum(x, 1, out=fill.half()), TypeError, "out has dtype"),
            (lambda: T.sum(x, 1, out=fill.cpu()), TypeError, "out: tilec ops take CUDA tensors"),
            (lambda: T.argmax(x, 1, out=fill), TypeError, "out has dtype"),
            (lambda: T.max(x, 1, out=(fill, fill)), TypeError, r"out\[1\] \(indices\) has dtype"),
            (lambda: T.topk(x, 2, out=fill), TypeError, "out must be a")]:
        with pytest.raises(err, match=match):
            call()
    assert bool((fill == 3.0).all())
    g = torch.randn(6, 50, device="cuda", requires_grad=True)
    with pytest.raises(ValueError, match="out= is not differentiable, and x requires grad"):
        T.cumsum(g, 1, out=torch.empty(6, 50, device="cuda"))
    idx = torch.empty(6, device="cuda", dtype=torch.int64)
    T.argmax(g, 1, out=idx)   # an index result: no gradient either way, as torch.argmax(out=)
    torch.testing.assert_close(idx, g.detach().argmax(1), rtol=0, atol=0)


def test_registered_schemas_alias_their_outs():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: PLC0415
    T.register()
    for name, outs in NEW_OUT_OPS.items():
        schema = getattr(torch.ops.tilec, name).default._schema
        assert [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write] == list(outs), name
        assert len(schema.returns) == 0
    with FakeTensorMode():   # the functions' checks read shapes and dtypes only
        x = torch.empty(6, 10, device="cuda")
        v, i = torch.empty(6, 3, device="cuda"), torch.empty(6, 3, device="cuda", dtype=torch.int64)
        assert T.topk(x, 3, out=(v, i)) == (v, i)
        with pytest.raises(ValueError, match=r"out\[0\] \(values\) has shape"):
            T.topk(x, 2, out=(v, i))
        with pytest.raises(TypeError, match="out has dtype"):
            T.argmax(x, 1, out=torch.empty(6, device="cuda"))
        pair = (torch.empty(1, 10, device="cuda"), torch.empty(1, 10, device="cuda", dtype=torch.int64))
        assert T.max(x, 0, keepdim=True, out=pair).values is pair[0]
