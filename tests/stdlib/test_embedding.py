"""embedding and embedding_backward on the interpreter against float64 numpy (odd shapes, ids 0
and num - 1, many duplicates, padding_idx), their plans on descriptions, argument errors, and the
PTX of the backward's extra signatures."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import BF16Array
from tilec.stdlib_kernels.launches import spec
from tilec.target import Target

EM = importlib.import_module("tilec.stdlib_kernels.embedding")
TARGETS = {arch: Target.from_arch(arch) for arch in ("sm_80", "sm_90a")}


def f64(a) -> np.ndarray:
    return np.asarray(np.asarray(a), dtype=np.float64)


def _ids(rng, shape, n_emb, dtype=np.int64, spread=None):
    """Random ids of `shape` in [0, spread or n_emb), with 0 and n_emb - 1 among them."""
    ids = rng.integers(0, spread or n_emb, size=shape).astype(dtype)
    flat = ids.reshape(-1)
    flat[0] = 0
    if flat.size > 1:
        flat[-1] = n_emb - 1
    return ids


def _dweight(grad, ids, n_emb, padding_idx=None):
    """float64 reference of the backward: np.add.at of the gradient rows at their ids."""
    g = f64(grad).reshape(-1, f64(grad).shape[-1])
    ref = np.zeros((n_emb, g.shape[1]))
    np.add.at(ref, ids.reshape(-1), g)
    if padding_idx is not None:
        ref[padding_idx] = 0.0
    return ref


# ----------------------------------------------------------------------------- forward
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("n_emb,dim,ids_shape,id_dtype", [(37, 45, (3, 7), np.int64), (5, 1, (11,), np.int32),
                                                          (300, 130, (2, 3, 5), np.int32), (1, 9, (4,), np.int64)])
def test_embedding_matches_numpy(rowwise, dtype, n_emb, dim, ids_shape, id_dtype):
    rng = np.random.default_rng(1)
    w = rowwise.host(rng.standard_normal((n_emb, dim)), dtype)
    ids = _ids(rng, ids_shape, n_emb, id_dtype)
    out = sk.embedding(w, ids)
    assert out.shape == ids_shape + (dim,)
    # a gather: exactly the rows, bit for bit
    np.testing.assert_array_equal(f64(out), f64(w)[ids])


def test_embedding_of_strided_ids_and_weight_rows():
    rng = np.random.default_rng(2)
    table = rng.standard_normal((20, 48)).astype(np.float32)
    w = table[:, :33]                    # rows 48 apart
    ids_all = _ids(rng, (9, 4), 20)
    ids = ids_all[::2, 1]                # a strided 1-D view
    np.testing.assert_array_equal(sk.embedding(w, ids), w[ids])


def test_embedding_writes_out():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((10, 6)).astype(np.float32)
    ids = _ids(rng, (5,), 10)
    out = np.full((5, 6), np.nan, np.float32)
    assert sk.embedding(w, ids, out=out) is out
    np.testing.assert_array_equal(out, w[ids])


def test_embedding_of_no_ids():
    w = np.ones((4, 3), np.float32)
    assert sk.embedding(w, np.zeros((0, 2), np.int64)).shape == (0, 2, 3)


@pytest.mark.parametrize("bad", [-1, 10])
def test_embedding_id_out_of_range_is_a_value_error(bad):
    w = np.ones((10, 3), np.float32)
    ids = np.array([0, bad, 2])
    with pytest.raises(ValueError, match=f"indices: id {bad} is out of range"):
        sk.embedding(w, ids)


def test_embedding_argument_errors():
    w = np.ones((10, 3), np.float32)
    ids = np.array([1, 2], np.int64)
    with pytest.raises(TypeError, match="indices must be int32 or int64"):
        sk.embedding(w, ids.astype(np.float32))
    with pytest.raises(TypeError, match="weight"):
        sk.embedding(w.astype(np.int32), ids)
    with pytest.raises(ValueError, match="weight must be 2-D"):
        sk.embedding(np.ones(3, np.float32), ids)
    with pytest.raises(ValueError, match="contiguous"):
        sk.embedding(np.ones((3, 10), np.float32).T, ids)
    with pytest.raises(ValueError, match="out has shape"):
        sk.embedding(w, ids, out=np.empty((3, 3), np.float32))
    with pytest.raises(TypeError, match="out has dtype"):
        sk.embedding(w, ids, out=np.empty((2, 3), np.float16))
    with pytest.raises(TypeError, match="indices: expected an array"):
        sk.embedding(w, [1, 2])


# ----------------------------------------------------------------------------- backward
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("n_emb,dim,ids_shape,spread", [(37, 45, (3, 7), None), (50, 33, (200,), 3),
                                                        (9, 130, (2, 5, 7), None), (4, 1, (13,), None)])
def test_embedding_backward_sums_duplicates(rowwise, dtype, n_emb, dim, ids_shape, spread):
    rng = np.random.default_rng(4)
    ids = _ids(rng, ids_shape, n_emb, spread=spread)
    grad = rowwise.host(rng.standard_normal(ids_shape + (dim,)), dtype)
    dw = sk.embedding_backward(grad, ids, n_emb)
    ref = _dweight(grad, ids, n_emb)
    assert dw.shape == (n_emb, dim)
    # sums of up to 200 terms stored in the dtype: its tolerance, scaled by the sums' size
    rowwise.close(dw, ref, dtype, scale=max(1.0, float(np.abs(ref).max())))
    never = np.setdiff1d(np.arange(n_emb), ids)
    assert not f64(dw)[never].any()   # ids that never occur: zero rows


def test_embedding_backward_one_id_many_times_in_f32():
    # 1000 copies of one id: one segment of many steps, summed in f32 into an f32 out
    rng = np.random.default_rng(5)
    ids = np.full((1000,), 6, np.int32)
    ids[::7] = 0
    grad = BF16Array(rng.standard_normal((1000, 20)))
    out = np.empty((8, 20), np.float32)
    dw = sk.embedding_backward(grad, ids, 8, out=out)
    assert dw is out
    np.testing.assert_allclose(out, _dweight(grad, ids, 8), rtol=1e-5, atol=1e-4)


def test_embedding_backward_is_deterministic_and_order_fixed():
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 3, size=(500,))
    grad = rng.standard_normal((500, 17)).astype(np.float32)
    a = sk.embedding_backward(grad, ids, 3)
    b = sk.embedding_backward(grad, ids, 3)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("padding_idx,row", [(2, 2), (-1, 9)])
def test_embedding_backward_padding_idx_gets_no_gradient(padding_idx, row):
    rng = np.random.default_rng(7)
    ids = _ids(rng, (40,), 10)
    ids[3] = 2
    grad = rng.standard_normal((40, 5)).astype(np.float32)
    dw = sk.embedding_backward(grad, ids, 10, padding_idx=padding_idx)
    np.testing.assert_allclose(dw, _dweight(grad, ids, 10, padding_idx=row), rtol=1e-5, atol=1e-5)
    assert not dw[row].any()


def test_embedding_backward_of_a_scalar_id_and_of_no_ids():
    g = np.arange(4, dtype=np.float32)
    dw = sk.embedding_backward(g, np.array(2), 3)
    np.testing.assert_array_equal(dw, [[0] * 4, [0] * 4, [0, 1, 2, 3]])
    dw0 = sk.embedding_backward(np.zeros((0, 4), np.float32), np.zeros((0,), np.int64), 3)
    np.testing.assert_array_equal(dw0, np.zeros((3, 4)))


def test_embedding_backward_of_strided_gradient_rows():
    rng = np.random.default_rng(8)
    ids = _ids(rng, (6,), 5)
    big = rng.standard_normal((6, 40)).astype(np.float32)
    grad = big[:, :24]
    np.testing.assert_allclose(sk.embedding_backward(grad, ids, 5), _dweight(grad, ids, 5), rtol=1e-5, atol=1e-5)


def test_embedding_backward_argument_errors():
    g = np.ones((2, 3), np.float32)
    ids = np.array([1, 2])
    with pytest.raises(TypeError, match="num_embeddings must be an int"):
        sk.embedding_backward(g, ids, 4.0)
    with pytest.raises(ValueError, match="num_embeddings must be in"):
        sk.embedding_backward(g, ids, -1)
    with pytest.raises(ValueError, match="grad_out has shape"):
        sk.embedding_backward(np.ones((3, 3), np.float32), ids, 4)
    with pytest.raises(ValueError, match="indices: id 2 is out of range"):
        sk.embedding_backward(g, ids, 2)
    with pytest.raises(TypeError, match="indices must be int32 or int64"):
        sk.embedding_backward(g, ids.astype(np.int16), 4)
    with pytest.raises(TypeError, match="grad_out"):
        sk.embedding_backward(g.astype(np.int32), ids, 4)
    with pytest.raises(TypeError, match="padding_idx must be an int"):
        sk.embedding_backward(g, ids, 4, padding_idx=1.5)
    with pytest.raises(ValueError, match="padding_idx must be in"):
        sk.embedding_backward(g, ids, 4, padding_idx=4)
    with pytest.raises(TypeError, match="out: dtype i32"):
        sk.embedding_backward(g, ids, 4, out=np.empty((4, 3), np.int32))
    with pytest.raises(ValueError, match="out has shape"):
        sk.embedding_backward(g, ids, 4, out=np.empty((3, 3), np.float32))


@settings(max_examples=15, deadline=None)
@given(n_emb=st.integers(1, 40), dim=st.integers(1, 70), n_ids=st.integers(0, 300), spread=st.integers(1, 40),
       id_dtype=st.sampled_from([np.int32, np.int64]), seed=st.integers(0, 2 ** 16))
def test_forward_and_backward_on_random_shapes(n_emb, dim, n_ids, spread, id_dtype, seed):
    # a gather and a scatter-add: embedding_backward(g, ids) == np.add.at, embedding(w, ids) == w[ids]
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, min(spread, n_emb), size=(n_ids,)).astype(id_dtype)
    w = rng.standard_normal((n_emb, dim)).astype(np.float32)
    np.testing.assert_array_equal(sk.embedding(w, ids), w[ids])
    grad = rng.standard_normal((n_ids, dim)).astype(np.float32)
    np.testing.assert_allclose(sk.embedding_backward(grad, ids, n_emb), _dweight(grad, ids, n_emb),
                               rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- plans
@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_forward_plan_tiles(arch):
    t = TARGETS[arch]
    (ln,) = EM.plan(spec((128256, 2048), tc.bfloat16), spec((4, 4096), tc.int64), spec((4, 4096, 2048), tc.bfloat16), t)
    assert ln.kernel is EM.embedding_kernel and ln.schedule == "gather"
    assert ln.consts == {"BR": 4, "BC": 1024, "WIDE": False}
    assert ln.grid == (4 * 4096 // 4, 2)
    # few ids: no more rows than ids; a narrow table: one column tile, more rows
    (small,) = EM.plan(spec((10, 24), tc.float32), spec((3,), tc.int32), spec((3, 24), tc.float32), t)
    assert small.consts["BR"] == 4 and small.consts["BC"] == 32 and small.grid == (1, 1)
    # out past 2**31 elements: 64-bit indices
    (big,) = EM.plan(spec((1000, 4096), tc.float32), spec((600000,), tc.int64), spec((600000, 4096), tc.float32), t)
    assert big.consts["WIDE"] is True


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_backward_plan_one_program_per_row_and_column_tile(arch):
    t = TARGETS[arch]
    (ln,) = EM.backward_plan(16384, 2048, 128256, t)
    tune = EM.tuning_for(t).embedding
    assert ln.kernel is EM.embedding_bwd_kernel and ln.num_warps == tune.bwd_num_warps
    assert ln.consts == {"BR": tune.bwd_tile_elems // tune.bwd_max_cols, "BC": tune.bwd_max_cols}
    assert ln.grid == (128256, 2048 // tune.bwd_max_cols)
    (few,) = EM.backward_plan(3, 20, 7, t)
    assert few.consts == {"BR": 4, "BC": 32} and few.grid == (7, 1)
    assert EM.backward_plan(10, 0, 7, t) == [] and EM.backward_plan(10, 8, 0, t) == []


# ----------------------------------------------------------------------------- PTX
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel,sig", EM.EXTRA_SIGNATURES, ids=[f"{k}[{s[-30:]}]" for k, s in EM.EXTRA_SIGNATURES])
def test_extra_signatures_assemble_without_spills(kernel, sig, arch):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    k = getattr(EM, kernel)
    compiled = compile_kernel(k, parse_signature(k, sig), CompileOptions(arch=arch, num_warps=4, fast_math=True),
                              use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report
