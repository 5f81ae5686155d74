"""Language features run end to end on the interpreter and checked against numpy."""
import numpy as np
import pytest

import tilec as tc
from tilec.ir import parse, verify


def run(kernel, grid, *args, **kw):
    with tc.interpret():
        kernel[grid](*args, **kw)
    spec = kernel.specialization(*args, **kw)
    m = kernel.ir(spec)
    verify(m)
    assert parse(str(m)) == m


@tc.func
def minmax(v):
    if tc.sum(v) > 0.0:
        return tc.max(v), tc.min(v)
    return tc.min(v), tc.max(v)


@tc.func
def max_combine(a, b):
    return tc.maximum(a, b)


@tc.kernel
def features(x, out, n, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,), padding=0.0)
    hi, lo = minmax(t)
    m = tc.reduce(t, 0, max_combine)
    ints = tc.arange(0, BLOCK)
    fl = (ints // 3 - ints % 5) / 2          # integer // and % floor; / goes to f32
    c = tc.cumsum(t, 0)
    y = tc.where(ints < n, c + fl + hi - lo + m, tc.full((BLOCK,), -1.0, tc.float32))
    y = tc.clamp(y, -4.0, 100.0) + tc.fma(t, t, 1.0) + tc.sigmoid(t) * tc.sqrt(abs(t))
    tc.store(out, index=(0,), tile=y)


def test_features_against_numpy():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, 13).astype(np.float32)
    out = np.zeros(16, np.float32)
    run(features, (1,), x, out, 13, BLOCK=16)
    t = np.zeros(16, np.float32)
    t[:13] = x
    hi, lo = (t.max(), t.min()) if t.sum() > 0 else (t.min(), t.max())
    ints = np.arange(16)
    fl = (ints // 3 - ints % 5) / 2
    y = np.where(ints < 13, np.cumsum(t) + fl + hi - lo + t.max(), -1.0)
    y = np.clip(y, -4, 100) + (t * t + 1) + 1 / (1 + np.exp(-t)) * np.sqrt(np.abs(t))
    np.testing.assert_allclose(out, y, rtol=1e-5, atol=1e-5)


@tc.kernel
def loops(x, out, n):
    total = 0.0
    i = 0
    while True:
        if i >= n:
            break
        v = tc.load(x.ptr + i)
        i += 1
        if v < 0.0:
            continue
        total += v
    pair = (0, 0.0)
    for j in range(n):
        pair = (pair[0] + 1, pair[1] + tc.load(x.ptr + j))
    tc.store(out.ptr + tc.arange(0, 4),
             tc.cat(tc.cat(tc.full((1,), total, tc.float32), tc.full((1,), pair[1], tc.float32), 0),
                    tc.full((2,), pair[0], tc.int32).astype(tc.float32), 0))


def test_while_true_break_continue_and_carried_tuples():
    x = np.array([1.0, -2.0, 3.0, -4.0, 5.0], np.float32)
    out = np.zeros(4, np.float32)
    run(loops, (1,), x, out, 5)
    np.testing.assert_allclose(out, [9.0, 3.0, 5.0, 5.0])


@tc.kernel
def view_atomics(h, vals, ROWS: tc.constexpr, COLS: tc.constexpr):
    i = tc.program_id(0)
    t = tc.load(vals, index=(0, 0), shape=(ROWS, COLS))
    old = tc.atomic_add(h, t, index=(i, 0))
    tc.atomic_max(h.ptr + tc.arange(0, 2), tc.full((2,), 100, tc.int32), mask=tc.arange(0, 2) < 1)
    prev = tc.atomic_cas(h.ptr + 1, 0, 7)


def test_atomics_on_views_and_pointers():
    h = np.zeros((5, 3), np.int32)
    vals = np.arange(1, 13, dtype=np.int32).reshape(4, 3)  # a 4x4 tile over a 4x3 view: the padding is skipped
    run(view_atomics, (2,), h, vals, ROWS=4, COLS=4)
    ref = np.zeros((5, 3), np.int32)
    ref[0:4] += vals
    ref[4:5] += vals[:1]
    ref[0, 0] = 100
    ref[0, 1] = 7 if ref[0, 1] == 0 else ref[0, 1]
    np.testing.assert_array_equal(h, ref)


@tc.kernel
def matmul(a, b, c, K, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    pm, pn = tc.swizzle2d(tc.program_id(0), tc.program_id(1), tc.num_programs(0), tc.num_programs(1), 2)
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        acc = tc.dot(tc.load(a, index=(pm, k), shape=(BM, BK)), tc.load(b, index=(k, pn), shape=(BK, BN)), acc)
    tc.store(c, index=(pm, pn), tile=acc.astype(c.dtype))


def test_matmul_with_swizzle():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((50, 37)).astype(np.float16)
    b = rng.standard_normal((37, 45)).astype(np.float16)
    c = np.zeros((50, 45), np.float32)
    run(matmul, (4, 3), a, b, c, 37, BM=16, BN=16, BK=16)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)


@tc.kernel
def debug_kernel(x, n):
    v = tc.load(x.ptr + tc.program_id(0))
    tc.device_print("v =", v)
    tc.device_assert(v < n, "value too large")


def test_device_print_and_assert(capsys):
    x = np.array([1.0, 2.0], np.float32)
    run(debug_kernel, (2,), x, 5.0)
    assert "v =" in capsys.readouterr().out
    with tc.interpret(), pytest.raises(tc.InterpreterError, match="value too large"):
        debug_kernel[(2,)](x, 1.5)


@tc.kernel
def shapes(x, out):
    t = tc.load(x, index=(0, 0), shape=(2, 4))
    u = tc.reshape(tc.permute(t, 1, 0), (8,))
    w = tc.broadcast_to(tc.expand_dims(u, 0), (2, 8)).T
    tc.store(out, index=(0, 0), tile=w + t.sum(1)[None, :] + tc.sum(t))


def test_shape_ops():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.zeros((8, 2), np.float32)
    run(shapes, (1,), x, out)
    w = np.broadcast_to(x.T.reshape(8)[None, :], (2, 8)).T
    np.testing.assert_allclose(out, w + x.sum(1)[None, :] + x.sum())


def test_dtype_promotion_rules_in_ir():
    @tc.kernel
    def promo(x, y):
        a = tc.load(x, index=(0,), shape=(4,))      # f16
        b = a * 2.5                                  # weak float: stays f16
        c = tc.arange(0, 4) * 1.5                    # int tile with a float: f32
        d = b + c                                    # f16 + f32: f32
        e = tc.arange(0, 4) / 2                      # integer / : f32
        tc.store(y, index=(0,), tile=(d + e).astype(y.dtype))

    m = promo.ir(promo.specialization("x=f16[?], y=f32[?]"))
    text = str(m)
    assert "%b = tile.mul %a" in text and ": tile<4xf16>" in text
    assert "tile.div" in text
    verify(m)


@tc.kernel
def tiles_in_a_tuple(x, out, TILES: tc.constexpr, BLOCK: tc.constexpr):
    # a row held as TILES tiles, gathered into a tuple by a static_range loop and indexed back
    pid = tc.program_id(0)
    ts = ()
    for k in tc.static_range(TILES):
        ts = ts + (tc.load(x, index=(pid, k), shape=(1, BLOCK), padding=float("-inf")),)
    m = ts[0]
    for k in tc.static_range(1, TILES):
        m = tc.maximum(m, ts[k])
    top = tc.max(m, axis=1, keep_dims=True)
    for k in tc.static_range(TILES):
        tc.store(out, index=(pid, k), tile=ts[k] - top)


def test_tuples_of_tiles_concatenate():
    x = np.random.default_rng(5).standard_normal((3, 45)).astype(np.float32)
    out = np.zeros_like(x)
    run(tiles_in_a_tuple, (3,), x, out, TILES=3, BLOCK=16)
    np.testing.assert_array_equal(out, x - x.max(1, keepdims=True))


@tc.kernel
def view_atomic_olds(h, vals, old, mx, ROWS: tc.constexpr, COLS: tc.constexpr):
    t = tc.load(vals, index=(0, 0), shape=(ROWS, COLS))
    tc.store(old, index=(0, 0), tile=tc.atomic_add(h, t, offset=(-1, 1)))   # rows -1.., cols 1..: a corner outside
    tc.atomic_max(mx, tc.reshape(t, (1, ROWS, COLS)), index=(0, 0, 0))     # the unit dimension squeezed


def test_view_atomics_return_the_old_values_and_skip_what_lies_outside():
    h = np.arange(15, dtype=np.int32).reshape(5, 3)
    vals = np.arange(1, 17, dtype=np.int32).reshape(4, 4)
    old = np.full((4, 4), -1, np.int32)
    mx = np.full((1, 4, 4), 7, np.int32)
    start = h.copy()
    run(view_atomic_olds, (1,), h, vals, old, mx, ROWS=4, COLS=4)
    want_h, want_old = start.copy(), np.zeros((4, 4), np.int32)
    for i in range(4):
        for j in range(4):
            r, c = i - 1, j + 1
            if 0 <= r < 5 and 0 <= c < 3:
                want_old[i, j] = start[r, c]
                want_h[r, c] += vals[i, j]
    np.testing.assert_array_equal(old, want_old)
    np.testing.assert_array_equal(h, want_h)
    np.testing.assert_array_equal(mx[0], np.maximum(vals, 7))
