"""Views, pointers, masked loads and stores, atomics and argument checking in the interpreter."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from interp_helpers import T, build, const, dt, scalar, tile, view
from tilec.errors import InterpreterError
from tilec.interpreter import run


def copy_kernel(d, bm, bn, padding=0.0, mode="index", scale=None):
    """out[tile] = x[tile] (* scale) for the tile at (pid0, pid1)."""
    def body(b, x, out):
        i, j = b.value(T.ProgramIdOp, axis=0), b.value(T.ProgramIdOp, axis=1)
        if mode == "offset":
            i = b.value(T.MulOp, i, const(b, bm, dt.int32))
            j = b.value(T.MulOp, j, const(b, bn, dt.int32))
        t = b.value(T.LoadViewOp, x, i, j, shape=[bm, bn], padding=padding, mode=mode)
        if scale is not None:
            t = b.value(T.MulOp, t, const(b, scale, d, [bm, bn]))
        b.create(T.StoreViewOp, out, i, j, t, mode=mode)
    return build([view(d, 2), view(d, 2)], body)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.sampled_from([(8, 8), (4, 16), (16, 2)]),
       st.sampled_from(["index", "offset"]), st.integers(0, 2**32 - 1))
def test_view_tiles_cover_non_multiple_shapes(m, n, tile_shape, mode, seed):
    bm, bn = tile_shape
    x = np.random.default_rng(seed).standard_normal((m, n)).astype(np.float32)
    out = np.full((m, n), -1.0, np.float32)
    run(copy_kernel(dt.float32, bm, bn, mode=mode, scale=2.0), [x, out], (-(-m // bm), -(-n // bn)))
    np.testing.assert_array_equal(out, 2 * x)


def test_view_load_pads_and_store_skips_out_of_bounds():
    x = np.arange(10, dtype=np.int32).reshape(2, 5)

    def body(b, src, dst, i, j):
        t = b.value(T.LoadViewOp, src, i, j, shape=[4, 4], padding=-7, mode="offset")
        z = const(b, 0, dt.int32)
        b.create(T.StoreViewOp, dst, z, z, t, mode="offset")          # the whole tile
        b.create(T.StoreViewOp, src, i, j, b.value(T.NegOp, t), mode="offset")  # back, clipped

    m = build([view(dt.int32, 2), view(dt.int32, 2), scalar(dt.int32), scalar(dt.int32)], body)
    out = np.zeros((4, 4), np.int32)
    run(m, [x, out, -1, 3], (1,))
    want = np.full((4, 4), -7)
    want[1:3, 0:2] = [[3, 4], [8, 9]]
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(x, [[0, 1, 2, -3, -4], [5, 6, 7, -8, -9]])


def test_views_with_arbitrary_strides():
    base = np.arange(64, dtype=np.float64).reshape(8, 8)
    x = base[::-2, 1::3]        # negative and non-unit strides: shape (4, 3)
    out_base = np.zeros((8, 8))
    out = out_base.T[::2]       # a transposed, strided destination: shape (4, 8)

    def body(b, src, dst):
        z = const(b, 0, dt.int32)
        t = b.value(T.LoadViewOp, src, z, z, shape=[4, 4], padding=0.5)
        b.create(T.StoreViewOp, dst, z, z, t)

    run(build([view(dt.float64, 2), view(dt.float64, 2)], body), [x, out], (1,))
    want = np.full((4, 4), 0.5)
    want[:, :3] = x
    np.testing.assert_array_equal(out[:, :4], want)
    assert (out[:, 4:] == 0).all() and np.count_nonzero(out_base) == 16


def gather_kernel(d, n, with_mask=True, other=0.0):
    """out[pid*n + k] = x[idx[pid*n + k]] where mask, through pointers."""
    def body(b, x, idx, out, limit):
        base = b.value(T.MulOp, b.value(T.ProgramIdOp, axis=0), const(b, n, dt.int32))
        offs = b.value(T.AddOp, b.value(T.SplatOp, base, shape=[n]), b.value(T.ArangeOp, start=0, end=n))
        ip = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, idx), shape=[n]), offs)
        where = b.value(T.CmpOp, offs, b.value(T.SplatOp, limit, shape=[n]), pred="lt")
        src = b.value(T.LoadMaskedOp, ip, where, const(b, 0, dt.int32, [n]))
        xp = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, x), shape=[n]), src)
        op = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, out), shape=[n]), offs)
        if with_mask:
            vals = b.value(T.LoadMaskedOp, xp, where, const(b, other, d, [n]))
            b.create(T.StoreMaskedOp, op, vals, where)
        else:
            b.create(T.StoreOp, op, b.value(T.LoadOp, xp))
    return build([view(d, 1), view(dt.int32, 1), view(d, 1), scalar(dt.int32)], body)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 100), st.sampled_from([dt.float32, dt.bfloat16, dt.int8, dt.float16]),
       st.integers(0, 2**32 - 1))
def test_masked_gather_and_scatter(size, d, seed):
    rng = np.random.default_rng(seed)
    x = (rng.integers(-100, 100, 50)).astype(d.np)
    idx = rng.integers(0, 50, size).astype(np.int32)
    out = np.zeros(size, d.np)
    run(gather_kernel(d, 16), [x, idx, out, size], (-(-size // 16),))
    np.testing.assert_array_equal(out, x[idx])


def test_unmasked_out_of_bounds_load_names_program_and_line():
    x = np.arange(20, dtype=np.float32)
    idx = np.zeros(32, np.int32)
    idx[21] = 20  # one past the end
    with pytest.raises(InterpreterError) as e:
        run(gather_kernel(dt.float32, 16, with_mask=False), [x, idx, np.zeros(32, np.float32), 32], (2,))
    msg = str(e.value)
    assert "program (1, 0, 0)" in msg and "kern.py:7" in msg and "out-of-bounds load of argument 'a0'" in msg
    assert "element offset 20" in msg


def test_negative_pointer_offsets_are_out_of_bounds():
    idx = np.full(16, -1, np.int32)
    with pytest.raises(InterpreterError, match="element offset -1"):
        run(gather_kernel(dt.float32, 16, with_mask=False), [np.ones(4, np.float32), idx, np.zeros(16, np.float32), 16], (1,))


def test_masked_off_lanes_never_touch_memory_and_read_other():
    x = np.arange(4, dtype=np.float32)
    idx = np.array([3, 2, 1, 0] + [10**6] * 12, np.int32)  # wild indices only in masked-off lanes
    out = np.full(16, 5.0, np.float32)
    run(gather_kernel(dt.float32, 16, other=-1.0), [x, idx, out, 4], (1,))
    assert out.tolist() == [3, 2, 1, 0] + [5.0] * 12


def test_store_last_writer_wins_in_row_major_order():
    def body(b, out):
        p = b.value(T.SplatOp, b.value(T.ViewPtrOp, out), shape=[2, 4])
        zero = const(b, 0, dt.int32, [2, 4])  # every lane writes element 0
        vals = b.value(T.ReshapeOp, b.value(T.ArangeOp, start=0, end=8), shape=[2, 4])
        b.create(T.StoreOp, b.value(T.AddPtrOp, p, zero), vals)

    out = np.zeros(1, np.int32)
    run(build([view(dt.int32, 1)], body), [out], (1,))
    assert out[0] == 7


def histogram_kernel(n, bins, d=dt.int32):
    def body(b, x, hist, size):
        base = b.value(T.MulOp, b.value(T.ProgramIdOp, axis=0), const(b, n, dt.int32))
        offs = b.value(T.AddOp, b.value(T.SplatOp, base, shape=[n]), b.value(T.ArangeOp, start=0, end=n))
        mask = b.value(T.CmpOp, offs, b.value(T.SplatOp, size, shape=[n]), pred="lt")
        xp = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, x), shape=[n]), offs)
        v = b.value(T.LoadMaskedOp, xp, mask, const(b, 0, dt.int32, [n]))
        hp = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, hist), shape=[n]), v)
        old = b.value(T.AtomicRMWOp, hp, const(b, 1, d, [n]), mask, kind="add")
        b.create(T.StoreMaskedOp, xp, b.value(T.CastOp, old, to=dt.int32) if d is not dt.int32 else old, mask)
    return build([view(dt.int32, 1), view(d, 1), scalar(dt.int32)], body)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 16), st.sampled_from([dt.int32, dt.float32]), st.integers(0, 2**32 - 1))
def test_atomic_add_histogram(size, bins, d, seed):
    x = np.random.default_rng(seed).integers(0, bins, size).astype(np.int32)
    hist = np.zeros(bins, d.np)
    seen = x.copy()
    run(histogram_kernel(64, bins, d), [seen, hist, size], (-(-size // 64),))
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=bins))
    # the old values: lane k of the flat order sees how many earlier lanes hit its bin
    want_old = np.array([np.count_nonzero(x[:k] == x[k]) for k in range(size)])
    np.testing.assert_array_equal(seen, want_old)


@pytest.mark.parametrize("kind,d,fn", [("max", dt.int16, np.maximum), ("min", dt.float32, np.minimum),
                                       ("and", dt.uint8, np.bitwise_and), ("or", dt.int64, np.bitwise_or),
                                       ("xor", dt.uint32, np.bitwise_xor), ("xchg", dt.float64, None),
                                       ("add", dt.float16, np.add)])
def test_atomic_rmw_kinds_are_sequential_and_masked(kind, d, fn):
    rng = np.random.default_rng(3)
    addr = np.array([0, 1, 0, 2, 1, 0, 3, 0])
    vals = rng.integers(0, 100, 8).astype(d.np)
    mask = np.array([1, 1, 1, 1, 0, 1, 1, 1], bool)

    def body(b, mem, v, a, m):
        z = const(b, 0, dt.int32)
        off = b.value(T.LoadViewOp, a, z, shape=[8])
        p = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, mem), shape=[8]), off)
        old = b.value(T.AtomicRMWOp, p, b.value(T.LoadViewOp, v, z, shape=[8]),
                      b.value(T.LoadViewOp, m, z, shape=[8]), kind=kind)
        b.create(T.StoreViewOp, v, z, old)

    mem = (np.arange(4) + 40).astype(d.np)
    want_mem, want_old = mem.copy(), np.zeros(8, d.np)
    for k in range(8):
        if mask[k]:
            want_old[k] = want_mem[addr[k]]
            want_mem[addr[k]] = vals[k] if fn is None else fn(want_mem[addr[k]], vals[k])
    run(build([view(d, 1), view(d, 1), view(dt.int32, 1), view(dt.bool_, 1)], body),
        [mem, vals, addr.astype(np.int32), mask], (1,))
    np.testing.assert_array_equal(mem, want_mem)
    np.testing.assert_array_equal(vals, want_old)


def test_atomic_cas_builds_a_lock_free_counter():
    """Each lane swaps slot 0 from k to k+1 only when it holds k: exactly the lanes in order succeed."""
    def body(b, mem, out):
        p = b.value(T.SplatOp, b.value(T.ViewPtrOp, mem), shape=[8])
        lanes = b.value(T.ArangeOp, start=0, end=8)
        cmp = b.value(T.ModOp, lanes, const(b, 4, dt.int32, [8]))
        new = b.value(T.AddOp, cmp, const(b, 1, dt.int32, [8]))
        ones = b.value(T.CmpOp, lanes, lanes, pred="eq")
        old = b.value(T.AtomicCASOp, b.value(T.AddPtrOp, p, const(b, 0, dt.int32, [8])), cmp, new, ones)
        z = const(b, 0, dt.int32)
        b.create(T.StoreViewOp, out, z, old)

    mem = np.zeros(1, np.int32)
    out = np.zeros(8, np.int32)
    run(build([view(dt.int32, 1), view(dt.int32, 1)], body), [mem, out], (1,))
    assert mem[0] == 4 and out.tolist() == [0, 1, 2, 3, 4, 4, 4, 4]


def test_view_dims_and_scalar_arguments():
    def body(b, x, out, s):
        vals = [b.value(T.ViewDimOp, x, dim=d, kind=k) for k in ("shape", "stride") for d in (0, 1)]
        vals.append(b.value(T.CastOp, s, to=dt.int64))
        vals.append(b.value(T.NumProgramsOp, axis=1))
        vals[-1] = b.value(T.CastOp, vals[-1], to=dt.int64)
        for k, v in enumerate(vals):
            pk = b.value(T.AddPtrOp, b.value(T.ViewPtrOp, out), const(b, k, dt.int32))
            b.create(T.StoreOp, pk, v)

    x = np.zeros((6, 10), np.float32)[:, ::2]
    out = np.zeros(8, np.int64)
    run(build([view(dt.float32, 2), view(dt.int64, 1), scalar(dt.int8)], body), [x, out, -5], (1, 3))
    assert out[:6].tolist() == [6, 5, 10, 2, -5, 3]


@pytest.mark.parametrize("args,exc,text", [
    ([np.zeros(4, np.float32)], TypeError, "takes 2 run-time arguments"),
    ([[1.0, 2.0], 3], TypeError, "must be a numpy array of f32"),
    ([np.zeros((2, 2), np.float32), 3], ValueError, "rank-1"),
    ([np.zeros(4, np.float64), 3], TypeError, "must hold f32"),
    ([np.zeros(8, np.float32)[::2], 3], ValueError, "stride 1 in dimension 0"),
    ([np.zeros(4, np.float32), 2**40], ValueError, "does not fit in i32"),
    ([np.zeros(4, np.float32), 1.5], TypeError, "must be an integer"),
])
def test_bad_arguments_are_reported(args, exc, text):
    m = build([view(dt.float32, 1, strides=[1]), scalar(dt.int32)], lambda b, x, n: None)
    with pytest.raises(exc, match=text):
        run(m, args, (1,))


def test_bad_grids_are_reported():
    m = build([scalar(dt.int32)], lambda b, n: None)
    with pytest.raises(TypeError, match="grid"):
        run(m, [1], (1, 2, 3, 4))
    with pytest.raises(ValueError, match="grid"):
        run(m, [1], (-1,))
    run(m, [1], (0, 5))  # an empty grid runs nothing


def test_store_into_read_only_array_is_an_interpreter_error():
    x = np.broadcast_to(np.float32(1), (16,))
    with pytest.raises(InterpreterError, match="read-only"):
        run(copy_kernel(dt.float32, 1, 16), [x.reshape(1, 16), x.reshape(1, 16)], (1,))


def test_pointer_tiles_may_span_several_arguments():
    """A select between pointers into two arrays gathers from both."""
    def body(b, x, y, out):
        lanes = b.value(T.ArangeOp, start=0, end=8)
        even = b.value(T.CmpOp, b.value(T.ModOp, lanes, const(b, 2, dt.int32, [8])), const(b, 0, dt.int32, [8]), pred="eq")
        px = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, x), shape=[8]), lanes)
        py = b.value(T.AddPtrOp, b.value(T.SplatOp, b.value(T.ViewPtrOp, y), shape=[8]), lanes)
        vals = b.value(T.LoadOp, b.value(T.SelectOp, even, px, py))
        b.create(T.StoreViewOp, out, const(b, 0, dt.int32), vals)

    x, y = np.arange(8, dtype=np.float32), -np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    run(build([view(dt.float32, 1)] * 3, body), [x, y, out], (1,))
    assert out.tolist() == [0, -1, 2, -3, 4, -5, 6, -7]


def test_scalar_pointer_load_store_and_atomic():
    def body(b, mem, flag):
        p = b.value(T.ViewPtrOp, mem)
        p3 = b.value(T.AddPtrOp, p, const(b, 3, dt.int64))
        far = b.value(T.AddPtrOp, p, const(b, 1000, dt.int64))
        v = b.value(T.LoadMaskedOp, far, flag, const(b, 7.5, dt.bfloat16))  # masked off: never read
        old = b.value(T.AtomicRMWOp, p3, v, b.value(T.InvertOp, flag), kind="add")
        b.create(T.StoreOp, p, b.value(T.AddOp, b.value(T.LoadOp, p3), old))

    mem = np.array([0, 0, 0, 1.0], np.float32)  # bf16 values held in f32
    run(build([view(dt.bfloat16, 1), scalar(dt.bool_)], body), [mem, False], (1,))
    assert mem.tolist() == [9.5, 0, 0, 8.5]


def test_bf16_arrays_in_float32_are_rounded_on_load():
    x = np.array([1 + 2**-9, 1 + 3 * 2**-8], np.float32)
    out = np.zeros((1, 2), np.float32)
    run(copy_kernel(dt.bfloat16, 1, 2), [x.reshape(1, 2), out], (1,))
    assert out.tolist() == [[1.0, 1 + 2**-6]]
