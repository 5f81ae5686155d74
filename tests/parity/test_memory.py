"""Loads and stores on both backends against numpy: tensor views (index and offset mode,
padding, edges that are not tile multiples, every dtype), pointer tiles with masks and
`other`, shape ops (expand_dims, broadcast, reshape, permute/.T, cat) and atomics with
the old values they return."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
from parity_helpers import random_ints

# ----------------------------------------------------------------------------- views


@tc.kernel
def copy_tiles(x, y, BM: tc.constexpr, BN: tc.constexpr):
    i, j = tc.program_id(0), tc.program_id(1)
    tc.store(y, index=(i, j), tile=tc.load(x, index=(i, j), shape=(BM, BN)))


@pytest.mark.parametrize("np_dtype", [np.bool_, np.int8, np.uint16, np.int32, np.uint64, np.float16,
                                      np.float32, np.float64], ids=lambda t: np.dtype(t).name)
def test_view_tiles_over_ragged_edges(backend, np_dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 45)) * 50).astype(np_dtype)
    y = np.zeros_like(x)
    backend.launch(copy_tiles, (tc.cdiv(37, 8), tc.cdiv(45, 16)), x, y, BM=8, BN=16)
    np.testing.assert_array_equal(y, x)


@tc.kernel
def window_kernel(x, out, SHIFT: tc.constexpr, PAD: tc.constexpr, BN: tc.constexpr):
    """out[r, :] = x[r, SHIFT : SHIFT + BN] read in offset mode (PAD outside), stored one row
    down and two columns right (what falls outside `out` is dropped)."""
    r = tc.program_id(0)
    w = tc.load(x, offset=(r, SHIFT), shape=(1, BN), padding=PAD)
    tc.store(out, offset=(r + 1, 2), tile=w)


@pytest.mark.parametrize("shift", [-3, 5])
def test_offset_mode_loads_and_stores_with_padding(backend, shift):
    rows, cols, bn = 11, 29, 32
    rng = np.random.default_rng(2)
    x = rng.integers(-100, 100, size=(rows, cols)).astype(np.int32)
    out = np.full((rows, 30), 7, np.int32)
    backend.launch(window_kernel, (rows,), x, out, SHIFT=shift, PAD=-1, BN=bn)
    padded = np.full((rows, cols + 2 * bn), -1, np.int32)
    padded[:, bn:bn + cols] = x
    windows = padded[:, bn + shift: bn + shift + bn]
    want = np.full((rows, 30), 7, np.int32)
    want[1:, 2:] = windows[:rows - 1, :28]
    np.testing.assert_array_equal(out, want)


@tc.kernel
def padding_kernel(x, out, BN: tc.constexpr):
    row = tc.program_id(0)
    t = tc.load(x, index=(row, 0), shape=(1, BN), padding=float("-inf"))
    m = tc.max(t)
    e = tc.exp(t - m)
    tc.store(out, index=(row, 0), tile=e / tc.sum(e))


def test_padding_feeds_a_softmax(backend):
    rng = np.random.default_rng(3)
    x = (3 * rng.standard_normal((6, 100))).astype(np.float32)
    out = np.zeros_like(x)
    backend.launch(padding_kernel, (6,), x, out, BN=128)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- pointer tiles


@tc.kernel
def gather_scatter_kernel(src, idx, out, n, OTHER: tc.constexpr, BLOCK: tc.constexpr):
    """out[perm] = src[idx] where idx >= 0, OTHER where idx < 0; lanes past n touch nothing."""
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    inside = offs < n
    j = tc.load(idx.ptr + offs, mask=inside, other=-1)
    v = tc.load(src.ptr + j, mask=inside & (j >= 0), other=OTHER)
    tc.store(out.ptr + (n - 1 - offs), v, mask=inside)


@pytest.mark.parametrize("np_dtype", [np.float32, np.int16, np.float16], ids=lambda t: np.dtype(t).name)
def test_gather_with_mask_and_other(backend, np_dtype):
    n, m = 300, 77
    rng = np.random.default_rng(4)
    src = (rng.standard_normal(m) * 20).astype(np_dtype)
    idx = rng.integers(-1, m, size=n).astype(np.int32)
    out = np.full(n + 5, 9, np_dtype)  # 5 guard elements past n stay untouched
    backend.launch(gather_scatter_kernel, (tc.cdiv(n, 128),), src, idx, out, n, OTHER=-3, BLOCK=128)
    got = np.where(idx >= 0, src[np.maximum(idx, 0)], np.asarray(-3, np_dtype))
    np.testing.assert_array_equal(out[:n], got[::-1])
    np.testing.assert_array_equal(out[n:], 9)


@tc.kernel
def transpose_ptr_kernel(x, y, R: tc.constexpr, C: tc.constexpr):
    """y = x.T through 2-D pointer tiles and strides, masked at the ragged edges."""
    r = tc.arange(0, R)[:, None]
    c = tc.arange(0, C)[None, :]
    mask = (r < x.shape[0]) & (c < x.shape[1])
    t = tc.load(x.ptr + r * x.stride(0) + c * x.stride(1), mask=mask, other=0.0)
    tc.store(y.ptr + c * y.stride(0) + r * y.stride(1), t, mask=mask)


def test_2d_pointer_tiles_with_strides(backend):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((13, 27)).astype(np.float32)
    y = np.zeros((27, 13), np.float32)
    backend.launch(transpose_ptr_kernel, (1,), x, y, R=16, C=32)
    np.testing.assert_array_equal(y, x.T)


# ----------------------------------------------------------------------------- shape ops


@tc.kernel
def shape_ops_kernel(x, rowdiff, bcast, resh, trans, perm, cat0, cat1, BM: tc.constexpr, BN: tc.constexpr):
    t = tc.load(x, index=(0, 0), shape=(BM, BN))
    tc.store(rowdiff, index=(0, 0), tile=t - t.max(axis=1, keep_dims=True) + tc.sum(t, axis=0)[None, :])
    cols = tc.expand_dims(tc.arange(0, BN), 0)
    rows = tc.arange(0, BM)[:, None]
    tc.store(bcast, index=(0, 0), tile=tc.broadcast_to(cols, (BM, BN)) * 100 + tc.broadcast_to(rows, (BM, BN)))
    tc.store(resh, index=(0, 0), tile=tc.reshape(t, (BN, BM)))
    tc.store(trans, index=(0, 0), tile=t.T)
    p = tc.permute(tc.reshape(t, (4, BM // 4, BN)), (2, 0, 1))
    tc.store(perm, index=(0, 0), tile=tc.reshape(p, (BN, BM)))
    tc.store(cat0, index=(0, 0), tile=tc.cat(t, tc.trans(tc.trans(t)) * 2, axis=0))
    tc.store(cat1, index=(0, 0), tile=tc.cat(t, -t, axis=1))


def test_shape_ops(backend):
    bm, bn = 16, 32
    rng = np.random.default_rng(6)
    x = rng.integers(-50, 50, size=(13, 29)).astype(np.float32)  # ragged: zero padding in the tile
    t = np.zeros((bm, bn), np.float32)
    t[:13, :29] = x
    outs = [np.zeros((13, 29), np.float32), np.zeros((bm, bn), np.int32), np.zeros((bn, bm), np.float32),
            np.zeros((29, 13), np.float32), np.zeros((bn, bm), np.float32),
            np.zeros((2 * bm, bn), np.float32), np.zeros((bm, 2 * bn), np.float32)]
    backend.launch(shape_ops_kernel, (1,), x, *outs, BM=bm, BN=bn)
    want = [(t - t.max(axis=1, keepdims=True) + t.sum(axis=0)[None, :])[:13, :29],
            np.arange(bn)[None, :] * 100 + np.arange(bm)[:, None], t.reshape(bn, bm), x.T,
            t.reshape(4, bm // 4, bn).transpose(2, 0, 1).reshape(bn, bm),
            np.concatenate([t, 2 * t], 0), np.concatenate([t, -t], 1)]
    for name, got, w in zip(["keep_dims", "broadcast", "reshape", "T", "permute", "cat0", "cat1"], outs, want):
        np.testing.assert_array_equal(got, w, err_msg=name)


# ----------------------------------------------------------------------------- atomics


@tc.kernel
def histogram_kernel(keys, counts, olds, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    valid = offs < n
    k = tc.load(keys.ptr + offs, mask=valid, other=0)
    old = tc.atomic_add(counts.ptr + k, tc.full((BLOCK,), 1, tc.int32), mask=valid)
    tc.store(olds.ptr + offs, old, mask=valid)


def test_atomic_add_with_colliding_addresses_returns_distinct_olds(backend):
    n, bins = 1000, 23
    rng = np.random.default_rng(7)
    keys = rng.integers(0, bins, size=n).astype(np.int32)
    counts = np.zeros(bins, np.int32)
    olds = np.full(n, -1, np.int32)
    backend.launch(histogram_kernel, (tc.cdiv(n, 128),), keys, counts, olds, n, BLOCK=128)
    np.testing.assert_array_equal(counts, np.bincount(keys, minlength=bins))
    for b in range(bins):  # each increment saw a different count before it: 0, 1, ..., count-1
        np.testing.assert_array_equal(np.sort(olds[keys == b]), np.arange(counts[b]), err_msg=f"bin {b}")


@tc.kernel
def rmw_kernel(target, vals, cmp, olds, n, OP: tc.constexpr, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    valid = offs < n
    v = tc.load(vals.ptr + offs, mask=valid, other=0)
    if OP == "add":
        old = tc.atomic_add(target.ptr + offs, v, mask=valid)
    elif OP == "max":
        old = tc.atomic_max(target.ptr + offs, v, mask=valid)
    elif OP == "min":
        old = tc.atomic_min(target.ptr + offs, v, mask=valid)
    elif OP == "xchg":
        old = tc.atomic_xchg(target.ptr + offs, v, mask=valid)
    else:
        c = tc.load(cmp.ptr + offs, mask=valid, other=0)
        old = tc.atomic_cas(target.ptr + offs, c, v, mask=valid)
    tc.store(olds.ptr + offs, old, mask=valid)


RMW_CASES = [("add", np.int32), ("add", np.float32), ("add", np.uint64), ("max", np.int32), ("max", np.uint32),
             ("max", np.float32), ("max", np.int64), ("min", np.int32), ("min", np.float32), ("min", np.uint64),
             ("xchg", np.int32), ("xchg", np.float32), ("xchg", np.int64), ("cas", np.int32), ("cas", np.int64)]


@pytest.mark.parametrize("op,np_dtype", RMW_CASES, ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_atomic_read_modify_write_and_old_values(backend, op, np_dtype):
    n = 200  # distinct addresses: the old value is the initial one
    rng = np.random.default_rng(8)
    if np.dtype(np_dtype).kind == "f":
        init = rng.integers(-50, 50, size=n).astype(np_dtype)
        vals = rng.integers(-50, 50, size=n).astype(np_dtype)
    else:
        d = tc.dtypes.from_numpy(np.dtype(np_dtype))
        init, vals = random_ints(rng, d, n), random_ints(rng, d, n)
    if op == "add" and np.dtype(np_dtype).kind == "f":
        init[:4], vals[:4] = [-0.0, 1.0, -3.0, 2.0], [0.0, -1.0, 3.0, -0.0]
    cmp = np.where(rng.random(n) < 0.5, init, vals).astype(np_dtype)
    target = init.copy()
    olds = np.zeros(n, np_dtype)
    backend.launch(rmw_kernel, (tc.cdiv(n, 64),), target, vals, cmp, olds, n, OP=op, BLOCK=64)
    with np.errstate(over="ignore"):
        want = {"add": init + vals, "max": np.maximum(init, vals), "min": np.minimum(init, vals),
                "xchg": vals, "cas": np.where(init == cmp, vals, init)}[op]
    np.testing.assert_array_equal(target, want)
    np.testing.assert_array_equal(olds, init)


@tc.kernel
def lock_kernel(lock, winners, maxes, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    prev = tc.atomic_cas(lock.ptr, 0, pid + 1)
    tc.store(winners.ptr + pid + tc.arange(0, 1), tc.full((1,), prev, tc.int32))
    vals = tc.arange(0, BLOCK) * 3 - pid * 7
    tc.atomic_max(maxes, vals[None, :], index=(0, 0))
    tc.atomic_min(maxes, vals[None, :], index=(1, 0))


def test_contended_cas_and_view_atomics(backend):
    programs, block = 9, 16
    lock = np.zeros(1, np.int32)
    winners = np.full(programs, -5, np.int32)
    maxes = np.array([[np.iinfo(np.int32).min] * block, [np.iinfo(np.int32).max] * block], np.int32)
    backend.launch(lock_kernel, (programs,), lock, winners, maxes, BLOCK=block)
    assert 1 <= lock[0] <= programs
    winner = lock[0] - 1
    assert winners[winner] == 0, winners  # the winner saw the lock free ...
    assert (np.delete(winners, winner) == lock[0]).all(), winners  # ... the rest saw it taken
    v = np.arange(block)[None, :] * 3 - np.arange(programs)[:, None] * 7
    np.testing.assert_array_equal(maxes, np.stack([v.max(0), v.min(0)]))
