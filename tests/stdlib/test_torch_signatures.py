"""torch's signatures of sum/amax/max/min/argmax/argmin (dim an int or None, keepdim, values and
indices), cumsum over any dim, transpose(dim0, dim1) of any rank and layer_norm with
normalized_shape: their plans (pure functions of descriptions), results on the interpreter
against float64 numpy on odd shapes and every dim, NaN and tie semantics, argument errors,
and the new kernels' assembly."""
from __future__ import annotations

import importlib
import itertools
import zlib

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels.launches import spec
from tilec.stdlib_kernels.schedules import STRIPS, TILES
from tilec.target import Target


RD = importlib.import_module("tilec.stdlib_kernels.reductions")
RDIM = importlib.import_module("tilec.stdlib_kernels.reductions_dim")
TR = importlib.import_module("tilec.stdlib_kernels.transpose")
NORMS = importlib.import_module("tilec.stdlib_kernels.norms")

H100 = Target.from_arch("sm_90a")
R = None   # the `rowwise` helpers (host, f64, close), set for every test below


@pytest.fixture(autouse=True)
def _helpers(rowwise):
    global R
    R = rowwise


def close(*args, **kw):
    return R.close(*args, **kw)


def f64(a):
    return R.f64(a)


def host(values, dtype):
    return R.host(values, dtype)
SHAPES = [(7,), (3, 5), (3, 5, 7), (2, 1, 3, 33)]
DIMS = [None, 0, -1, 1, 2, 3]


def _cases():
    for shape in SHAPES:
        for dim in DIMS:
            if dim is None or -len(shape) <= dim < len(shape):
                yield shape, dim


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))   # fixed per test case


# ----------------------------------------------------------------------------- plans
def test_arg_plan_strips_of_a_middle_and_a_last_dimension():
    (ln,) = RDIM.plan_arg(spec((3, 1000, 70), tc.float16), 1, is_min=False, target=H100)
    assert ln.name == "arg_reduce_kernel" and ln.schedule == STRIPS
    assert ln.grid == (3, 2, 1) and ln.consts == dict(MIN=False, BLOCK_R=32, BLOCK_I=64, STRIPS_FIRST=False)
    assert ln.args == ("x", "values", "indices") and ln.num_warps == 8
    (ln,) = RDIM.plan_arg(spec((5, 3000), tc.float32), 1, is_min=True, target=H100)
    assert ln.grid == (5, 1, 1) and ln.consts["BLOCK_R"] == 2048 and ln.consts["BLOCK_I"] == 1
    (ln,) = RDIM.plan_arg(spec((5, 3), tc.float32), 1, is_min=True, target=H100)   # small R: a small tile
    assert (ln.consts["BLOCK_R"], ln.num_warps) == (4, 1)
    assert RDIM.plan_arg(spec((0, 3), tc.float32), 1, is_min=False, target=H100) == []


def test_arg_plan_moves_strips_to_grid_axis_0_past_its_limit():
    (ln,) = RDIM.plan_arg(spec((4, 3, 10_000_000), tc.float32), 1, is_min=False, target=H100)
    assert ln.consts["STRIPS_FIRST"] and ln.grid == (156250, 4, 1)


def test_cumsum_dim_plan_reads_through_strides():
    (ln,) = RDIM.plan_cumsum_dim(spec((6, 100, 9), tc.bfloat16, (1800, 18, 2)), 1, H100)
    assert ln.name == "cumsum_strips_kernel" and ln.schedule == STRIPS and ln.grid == (6, 1, 1)
    assert ln.consts == dict(BLOCK_R=128, BLOCK_I=16, STRIPS_FIRST=False)
    assert RDIM.plan_cumsum_dim(spec((6, 0, 9), tc.float32), 1, H100) == []


def test_transpose_nd_plans():
    x = spec((3, 5, 7, 9), tc.float32)
    (ln,) = TR.plan_nd(x, spec((3, 9, 7, 5), tc.float32), 1, 3, H100)   # d1 last: batched tiles
    assert ln.name == "transpose_batched_kernel" and ln.schedule == TILES
    assert ln.grid == (3 * 7,) and ln.consts == dict(BM=16, BN=16) and ln.num_warps == 1
    (ln,) = TR.plan_nd(x, spec((7, 5, 3, 9), tc.float32), 0, 2, H100)   # rows of 9 move whole
    assert ln.name == "swap_copy_kernel" and ln.grid == (7 * 5 * 1 * 1 * 1,)
    assert ln.consts == dict(BP=4, BC=16) and ln.num_warps == 1
    (xs, xst), (os_, ost) = TR.nd_views(x, spec((7, 5, 3, 9), tc.float32), 0, 2)
    assert (xs, xst) == ((1, 7, 5, 3, 9), (0, 9, 63, 315, 1)) and (os_, ost) == ((1, 7, 5, 3, 9), (0, 135, 27, 9, 1))
    assert TR.plan_nd(spec((0, 5, 7), tc.float32), spec((7, 5, 0), tc.float32), 0, 2, H100) == []
    huge = spec((2**16, 1, 2**16, 2), tc.int8)   # 2**32 rows of 2 to move, one program each
    with pytest.raises(ValueError, match="do not fit a grid"):
        TR.plan_nd(huge, spec((2**16, 2**16, 1, 2), tc.int8), 1, 2, H100)


def test_reduced_layout_shapes():
    a = spec((3, 5, 7), tc.float32)
    assert RD.reduced_layout(a, 1, True, row_major=True)[1:] == (1, (3, 1, 7))
    assert RD.reduced_layout(a, -1, False, row_major=True)[1:] == (2, (3, 5))
    w, d, shape = RD.reduced_layout(a, None, True, row_major=True)
    assert (w.shape, w.strides, d, shape) == ((105,), (1,), 0, (1, 1, 1))
    t = spec((5, 3), tc.float32, (1, 5))     # a transposed contiguous array: flat in memory order
    assert RD.reduced_layout(t, None, False, row_major=False)[0].shape == (15,)
    with pytest.raises(ValueError, match="cannot be flattened"):
        RD.reduced_layout(t, None, False, row_major=True)
    w, d, shape = RD.reduced_layout(spec((), tc.float32), -1, False, row_major=True)
    assert (w.shape, d, shape) == ((1,), 0, ())


# ----------------------------------------------------------------------------- values on the interpreter
@pytest.mark.parametrize("shape,dim", list(_cases()))
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_amax_max_min_argmax_argmin_match_numpy(shape, dim, keepdim):
    x = _rng(shape, dim, keepdim).standard_normal(shape).astype(np.float32)
    x64 = x.astype(np.float64)
    kw = dict(axis=dim, keepdims=keepdim)
    close(sk.sum(x, dim, keepdim), x64.sum(**kw), "f32", scale=10)
    np.testing.assert_array_equal(sk.amax(x, dim, keepdim), x.max(**kw))
    np.testing.assert_array_equal(sk.amin(x, dim, keepdim=keepdim), x.min(**kw))
    np.testing.assert_array_equal(sk.argmax(x, dim, keepdim), np.argmax(x, **kw))
    np.testing.assert_array_equal(sk.argmin(x, dim, keepdim=keepdim), np.argmin(x, **kw))
    if dim is None:
        np.testing.assert_array_equal(sk.max(x, keepdim=keepdim), x.max(**kw))
        return
    for op, ref, arg in ((sk.max, np.max, np.argmax), (sk.min, np.min, np.argmin)):
        r = op(x, dim, keepdim)
        assert isinstance(r, RDIM.ValuesIndices) and r.indices.dtype == np.int64
        np.testing.assert_array_equal(r.values, ref(x, **kw))
        np.testing.assert_array_equal(r.indices, arg(x, **kw))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_two_byte_max_and_argmin_over_each_dim(dtype):
    x = host(_rng(dtype).standard_normal((4, 37, 6)), dtype)
    x64 = f64(x)
    for dim in range(3):
        v, i = sk.max(x, dim)
        np.testing.assert_array_equal(f64(v), x64.max(dim))
        np.testing.assert_array_equal(i, np.argmax(x64, dim))
        np.testing.assert_array_equal(sk.argmin(x, dim), np.argmin(x64, dim))


def test_strided_and_transposed_inputs():
    base = _rng("strided").standard_normal((9, 40)).astype(np.float32)
    for x in (base[:, 3:30], base.T, base[::2, ::3]):
        for dim in (0, 1):
            close(sk.sum(x, dim), x.astype(np.float64).sum(dim), "f32", scale=10)
            np.testing.assert_array_equal(sk.argmax(x, dim), np.argmax(x, dim))
        v, i = sk.max(x, 1)
        np.testing.assert_array_equal(v, x.max(1))
    # dim=None: a sum or max flattens in memory order (a transposed array too); an index needs row-major
    close(sk.sum(base.T), base.astype(np.float64).sum(), "f32", scale=10)
    assert sk.amax(base.T) == base.max()
    with pytest.raises(ValueError, match="cannot be flattened"):
        sk.sum(base[:, 3:30])


def test_max_propagates_nan_and_takes_the_first_index():
    nan, inf = np.nan, np.inf
    x = np.array([[1, 3, 3, nan, 2, nan],      # NaN wins: the first one
                  [5, 5, 1, 1, 5, 0],          # ties: the first
                  [-inf] * 6,                  # all the padding value: index 0
                  [0, -inf, inf, inf, 1, 2]], np.float32)
    v, i = sk.max(x, 1)
    np.testing.assert_array_equal(v, [nan, 5, -inf, inf])
    np.testing.assert_array_equal(i, [3, 0, 0, 2])
    v, i = sk.min(x, 1)
    np.testing.assert_array_equal(v, [nan, 0, -inf, -inf])
    np.testing.assert_array_equal(i, [3, 5, 0, 1])
    np.testing.assert_array_equal(sk.argmax(x.T, 0), [3, 0, 0, 2])   # the same down a first dimension
    np.testing.assert_array_equal(sk.amax(x, 1), [nan, 5, -inf, inf])
    np.testing.assert_array_equal(sk.amax(x.T.copy(), 0), [nan, 5, -inf, inf])
    assert np.isnan(sk.amax(x)) and np.isnan(sk.max(x)) and sk.argmax(x) == 3 and sk.argmin(x[1:]) == 6
    long = np.zeros((2, 5000), np.float32)      # a NaN in a later tile than the max
    long[:, 10] = 7.0
    long[0, 4321] = nan
    v, i = sk.max(long, -1)
    np.testing.assert_array_equal(i, [4321, 10])
    assert np.isnan(v[0]) and v[1] == 7.0


def test_zero_dimensional_and_out_arguments():
    s = np.array(2.5, np.float32)
    assert sk.sum(s) == 2.5 and sk.sum(s, 0) == 2.5 and sk.amax(s, -1) == 2.5
    v, i = sk.max(s, 0)
    assert v.shape == i.shape == () and v == 2.5 and i == 0
    x = _rng("out").standard_normal((4, 6)).astype(np.float32)
    vals, idx = np.zeros((4, 1), np.float32), np.zeros((4, 1), np.int64)
    r = sk.max(x, 1, True, out=(vals, idx))
    assert r.values is vals and r.indices is idx
    np.testing.assert_array_equal(idx[:, 0], np.argmax(x, 1))
    out = np.zeros((1, 1), np.float32)
    assert sk.sum(x, None, True, out=out) is out
    close(out, x.astype(np.float64).sum(keepdims=True), "f32", scale=10)
    assert sk.argmax(x, 0, out=np.zeros(6, np.int64)).dtype == np.int64


@pytest.mark.parametrize("shape", [(5,), (3, 5), (3, 5, 7), (2, 1, 3, 130)])
def test_cumsum_over_every_dim(shape):
    x = _rng("cumsum", shape).standard_normal(shape).astype(np.float32)
    for dim in range(-len(shape), len(shape)):
        close(sk.cumsum(x, dim), np.cumsum(x.astype(np.float64), dim), "f32", scale=10)


def test_cumsum_strided_in_place_bf16_and_0d():
    base = _rng("cs").standard_normal((40, 9)).astype(np.float32)
    x = base.T                                   # the last dim strided: the strip kernel, no copy
    close(sk.cumsum(x, -1), np.cumsum(x.astype(np.float64), -1), "f32", scale=10)
    y = base.copy()
    assert sk.cumsum(y, 0, out=y) is y           # in place
    close(y, np.cumsum(base.astype(np.float64), 0), "f32", scale=10)
    b = host(_rng("bf").standard_normal((3, 300, 5)), "bf16")
    close(sk.cumsum(b, 1), np.cumsum(f64(b), 1), "bf16", scale=20)
    assert sk.cumsum(np.array(3.0, np.float32), 0) == 3.0


def test_transpose_every_pair_of_dims():
    x = _rng("tr").standard_normal((3, 5, 7, 9)).astype(np.float32)
    for d0, d1 in itertools.product(range(-4, 4), repeat=2):
        got = sk.transpose(x, d0, d1)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, np.swapaxes(x, d0, d1))


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.int64])
def test_transpose_dtypes_strides_and_out(dtype):
    base = (_rng("trd", dtype).standard_normal((6, 10, 4, 11)) * 50).astype(dtype)
    x = base[1:, :, :, 2:]                       # rows 11 apart, 9 long
    for d0, d1 in itertools.product(range(4), repeat=2):
        if max(d0, d1) >= 2:                     # (the dims after d1 are the rows at most: they flatten)
            np.testing.assert_array_equal(sk.transpose(x, d0, d1), np.swapaxes(x, d0, d1))
    np.testing.assert_array_equal(sk.transpose(base[1:], 0, 1), np.swapaxes(base[1:], 0, 1))
    x2 = base[:, 1:9:2, :, 2:]
    for d0, d1 in ((1, 3), (1, 2)):             # a stepped dimension alone in its group
        np.testing.assert_array_equal(sk.transpose(x2, d0, d1), np.swapaxes(x2, d0, d1))
    with pytest.raises(ValueError, match="cannot be flattened"):
        sk.transpose(x2, 0, 3)                   # dims 1, 2 between: (4, 4) with strides (88, 11)
    x = base[:, :4, :, 2:]                       # (6, 4, 4, 9): dims 1, 2 flatten (strides 44, 11)
    out = np.zeros((9, 4, 4, 8), dtype)[..., :6]         # out with padded rows
    assert sk.transpose(x, 0, 3, out=out) is out
    np.testing.assert_array_equal(out, np.swapaxes(x, 0, 3))
    assert not out.base[..., 6:].any()                 # nothing written outside it
    assert sk.transpose(np.arange(4, dtype=dtype), 0, -1).tolist() == list(range(4))
    assert sk.transpose(np.array(5, dtype), 0, 0) == 5


def _ln_ref(x, k, w, b, eps=1e-5):
    x64 = f64(x)
    ax = tuple(range(x64.ndim - k, x64.ndim))
    y = (x64 - x64.mean(ax, keepdims=True)) / np.sqrt(x64.var(ax, keepdims=True) + eps)
    return y * (1.0 if w is None else f64(w)) + (0.0 if b is None else f64(b))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_layer_norm_normalized_shape_forms(dtype):
    rng = _rng("ln", dtype)
    x = host(rng.standard_normal((3, 5, 7)) * 2 + 1, dtype)
    w, b = host(rng.standard_normal((5, 7)), dtype), host(rng.standard_normal((5, 7)), dtype)
    close(sk.layer_norm(x, (5, 7), w, b), _ln_ref(x, 2, w, b), dtype, scale=4)
    close(sk.layer_norm(x, [5, 7], None, b, eps=0.5), _ln_ref(x, 2, None, b, 0.5), dtype, scale=4)
    close(sk.layer_norm(x, (3, 5, 7)), _ln_ref(x, 3, None, None), dtype, scale=4)
    w7 = host(rng.standard_normal(7), dtype)
    close(sk.layer_norm(x, 7, w7), _ln_ref(x, 1, w7, None), dtype, scale=4)
    y, mean, rstd = sk.layer_norm(x, (5, 7), w, b, return_stats=True)
    assert mean.shape == rstd.shape == (3,) and mean.dtype == np.float32
    np.testing.assert_allclose(mean, f64(x).reshape(3, -1).mean(1), rtol=1e-5, atol=1e-5)


def test_layer_norm_earlier_form_still_works():
    x = _rng("old").standard_normal((4, 9)).astype(np.float32)
    w, b = np.linspace(0.5, 2, 9, dtype=np.float32), np.linspace(-1, 1, 9, dtype=np.float32)
    close(sk.layer_norm(x, w, b), _ln_ref(x, 1, w, b), "f32", scale=4)
    close(sk.layer_norm(x, w, b, 0.25), _ln_ref(x, 1, w, b, 0.25), "f32", scale=4)
    close(sk.layer_norm(x, None, b, eps=0.25), _ln_ref(x, 1, None, b, 0.25), "f32", scale=4)
    close(sk.layer_norm(x), _ln_ref(x, 1, None, None), "f32", scale=4)


# ----------------------------------------------------------------------------- argument errors
X = np.zeros((4, 6), np.float32)
ERRORS = [
    (lambda: sk.sum(X, 0, keepdim=1), TypeError, r"keepdim must be a bool"),
    (lambda: sk.max(X, 1.0), TypeError, r"dim must be an int"),
    (lambda: sk.argmax(X, 2), IndexError, r"dim=2 is out of range"),
    (lambda: sk.max(np.zeros((3, 0), np.float32), 1), ValueError, r"max: cannot reduce over dimension 1"),
    (lambda: sk.argmin(np.zeros((0,), np.float32)), ValueError, r"min: cannot reduce"),
    (lambda: sk.max(X, 1, out=np.zeros(4, np.float32)), TypeError, r"out must be a \(values, indices\) pair"),
    (lambda: sk.max(X, 1, out=(np.zeros(4, np.float32), np.zeros(4, np.int32))), TypeError,
     r"indices has dtype i32, expected i64"),
    (lambda: sk.min(X, 0, out=(np.zeros(5, np.float32), np.zeros(6, np.int64))), ValueError,
     r"out has shape \(5,\), expected \(6,\)"),
    (lambda: sk.argmax(X.astype(np.int32), 0), TypeError, r"x: dtype i32"),
    (lambda: sk.argmax(X.T, None), ValueError, r"cannot be flattened"),
    (lambda: sk.cumsum(X, 2), IndexError, r"dim=2 is out of range"),
    (lambda: sk.cumsum(X, "0"), TypeError, r"dim must be an int"),
    (lambda: sk.transpose(X, 0), TypeError, r"pass both dim0 and dim1"),
    (lambda: sk.transpose(X, 0, -3), IndexError, r"dim1=-3 is out of range"),
    (lambda: sk.transpose(np.zeros((2, 3, 4), np.float32)), ValueError, r"x: transpose takes a 2-D matrix"),
    (lambda: sk.transpose(np.zeros((2, 3, 4), np.float32), 0, 2, out=np.zeros((2, 3, 4), np.float32)), ValueError,
     r"out has shape \(2, 3, 4\), expected \(4, 3, 2\)"),
    (lambda: sk.layer_norm(X, (4, 6), np.ones(6, np.float32)), ValueError,
     r"weight has shape \(6,\), expected \(4, 6\) \(normalized_shape\)"),
    (lambda: sk.layer_norm(X, (6, 4)), ValueError, r"normalized_shape \(6, 4\) must be the last dimensions"),
    (lambda: sk.layer_norm(X, ()), ValueError, r"normalized_shape \(\) must be"),
    (lambda: sk.layer_norm(X, np.ones(6, np.float32), None, np.ones(6, np.float32)), TypeError,
     r"normalized_shape must be an int or a tuple"),
    (lambda: sk.layer_norm(X[:, ::2], (4, 3)), ValueError, r"x: the last dimension must be contiguous"),
]


@pytest.mark.parametrize("call,exc,pattern", ERRORS)
def test_argument_errors_name_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# ----------------------------------------------------------------------------- assembly
NEW_KERNELS = [(RDIM, n, s, RDIM.OPTIONS[n]) for n, s in RDIM.SIGNATURES.items()] + \
    [(RDIM, n, s, RDIM.OPTIONS[n]) for n, s in RDIM.EXTRA_SIGNATURES] + \
    [(TR, n, s, TR.OPTIONS[n]) for n, s in list(TR.SIGNATURES.items())[2:] + TR.EXTRA_SIGNATURES]


@pytest.mark.parametrize("mod,name,sig,options", NEW_KERNELS, ids=[f"{c[1]}:{c[2]}" for c in NEW_KERNELS])
def test_new_kernels_assemble_without_spills(mod, name, sig, options):
    compiled = getattr(mod, name).compile(sig, arch="sm_90a", **options)
    assert compiled.metadata["ptxas"]["spill_stores"] == 0
