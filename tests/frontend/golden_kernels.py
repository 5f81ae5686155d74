"""Small kernels whose tile IR the golden tests pin down (see test_golden.py)."""
import tilec as tc


@tc.kernel
def vector_add(x, y, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    tc.store(out.ptr + offs, tc.load(x.ptr + offs, mask=mask) + tc.load(y.ptr + offs, mask=mask), mask=mask)


@tc.kernel
def row_sum(x, out, n, BLOCK: tc.constexpr):
    acc = 0.0
    for i in range(0, n, BLOCK):
        acc += tc.load(x, offset=(i,), shape=(BLOCK,))
    tc.store(out, index=(0,), tile=tc.sum(acc, keep_dims=True))


@tc.kernel
def relu_if(x, n):
    v = tc.load(x.ptr)
    if n > 0:
        v = tc.maximum(v, 0.0)
    else:
        v = -v
    tc.store(x.ptr, v)


@tc.kernel
def count_while(out, n):
    k = 0
    while k * k < n:
        k += 1
    tc.store(out.ptr, k)


@tc.kernel
def first_negative(x, out, n):
    idx = -1
    for i in range(n):
        if tc.load(x.ptr + i) < 0.0:
            idx = i
            break
    tc.store(out.ptr, idx)


@tc.kernel
def early_exit(x, n):
    if tc.program_id(0) >= n:
        return
    tc.store(x.ptr + tc.program_id(0), 1.0)


@tc.func
def scaled(v, s):
    return v * s, s


@tc.kernel
def uses_func(x, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,))
    t, s = scaled(t, 2)
    tc.store(x, index=(0,), tile=t)


@tc.kernel
def unrolled(x, N: tc.constexpr):
    t = tc.zeros((4,), tc.float32)
    for i in tc.static_range(N):
        if i % 2 == 0:
            t = t + i
    tc.store(x, index=(0,), tile=t)


@tc.kernel
def reductions(x, out):
    t = tc.load(x, index=(0, 0), shape=(4, 8))
    m = t.max(1)
    a = tc.argmin(t, axis=0)
    c = tc.cumsum(t, 1)
    tc.store(out, index=(0, 0), tile=c + m[:, None] + a[None, :].astype(tc.float32))


SIGNATURES = {
    "vector_add": "x=f32[?], y=f32[?], out=f32[?], n=i32, BLOCK=64",
    "row_sum": "x=f32[?], out=f32[?], n=i32, BLOCK=16",
    "relu_if": "x=f32[?], n=i32",
    "count_while": "out=i32[?], n=i32",
    "first_negative": "x=f32[?], out=i32[?], n=i32",
    "early_exit": "x=f32[?], n=i32",
    "uses_func": "x=f32[?], BLOCK=8",
    "unrolled": "x=f32[?], N=3",
    "reductions": "x=f32[?,?], out=f32[?,?]",
}
