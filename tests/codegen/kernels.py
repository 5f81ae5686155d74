"""Small DSL kernels that exercise every codegen rule (imported by the codegen tests)."""
import tilec as tc


@tc.kernel
def arith(x, y, out, iout, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    a = tc.load(x, index=(pid,), shape=(BLOCK,))
    b = tc.load(y, index=(pid,), shape=(BLOCK,))
    i = a.astype(tc.int32)
    j = b.astype(tc.int32) | 1
    ints = (i // j) + (i % j) + (i << 3) + (i >> 2) + (i & j) - (i ^ j) + ~i + tc.abs(i)
    ints = tc.where(i < j, tc.minimum(i, j), tc.maximum(i, j)) + ints
    u = i.astype(tc.uint32)
    ints = ints + (u // 7 + (u >> 3)).astype(tc.int32)
    f = a / b + a // b + a % b - tc.abs(a) * tc.minimum(a, b) + tc.maximum(a, b) + tc.floor(a) + tc.ceil(b)
    f = tc.where((a > b) & (a != b), f, -f)
    tc.store(out, index=(pid,), tile=f)
    tc.store(iout, index=(pid,), tile=ints)


@tc.kernel
def math_all(x, out, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    a = tc.load(x, index=(pid,), shape=(BLOCK,))
    r = tc.exp(a) + tc.exp2(a) + tc.log(a) + tc.log2(a) + tc.sqrt(a) + tc.rsqrt(a)
    r = r + tc.sin(a) + tc.cos(a) + tc.tanh(a) + tc.sigmoid(a) + tc.erf(a) + a ** a
    tc.store(out, index=(pid,), tile=r)


@tc.kernel
def casts(x, out, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    a = tc.load(x, index=(pid,), shape=(BLOCK,))
    r = a.astype(tc.bfloat16).astype(tc.float32) + a.astype(tc.float16).astype(tc.float32)
    r = r + a.astype(tc.float8e4m3).astype(tc.float32) + a.astype(tc.float8e5m2).astype(tc.float32)
    r = r + a.astype(tc.int8).astype(tc.float32) + a.astype(tc.uint8).astype(tc.float32)
    r = r + a.astype(tc.int64).astype(tc.float32) + a.astype(tc.float64).astype(tc.float32)
    r = r + a.astype(tc.bool_).astype(tc.float32) + a.astype(tc.float64).astype(tc.bfloat16).astype(tc.float32)
    tc.store(out, index=(pid,), tile=r)


@tc.kernel
def control_flow(x, out, n, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    acc = tc.zeros((BLOCK,), tc.float32)
    for k in range(0, n):
        acc += tc.load(x, index=(k,), shape=(BLOCK,))
    i = 0
    while i < n:
        acc = acc * 0.5
        i += 2
    if pid % 2 == 0:
        acc = acc + 1.0
    else:
        acc = acc - 1.0
    tc.store(out, index=(pid,), tile=acc)


@tc.kernel
def atomics(x, counts, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    v = tc.load(x.ptr + offs, mask=mask, other=0.0)
    tc.atomic_add(counts.ptr + offs % 16, v, mask=mask)
    tc.atomic_max(counts.ptr + 16 + offs % 16, v, mask=mask, sem="relaxed")


@tc.kernel
def int_atomics(x, BLOCK: tc.constexpr):
    offs = tc.arange(0, BLOCK)
    old = tc.atomic_cas(x.ptr + offs, 0, 1)
    tc.atomic_max(x.ptr + offs, old + 5)
    tc.atomic_xchg(x.ptr + offs, 3, sem="release", scope="cta")


@tc.kernel
def debug_ops(x, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    a = tc.load(x, index=(pid,), shape=(BLOCK,))
    tc.device_print("a", a)
    tc.device_assert(a >= 0, "negative input")


@tc.kernel
def bools(m, out, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    tc.store(out.ptr + offs, ~tc.load(m.ptr + offs))


KERNELS = {
    "bools": (bools, "m=i1[?], out=i1[?], BLOCK=1024"),
    "arith": (arith, "x=f32[?], y=f32[?], out=f32[?], iout=i32[?], BLOCK=256"),
    "math_f32": (math_all, "x=f32[?], out=f32[?], BLOCK=256"),
    "math_f16": (math_all, "x=f16[?], out=f16[?], BLOCK=256"),
    "math_bf16": (math_all, "x=bf16[?], out=bf16[?], BLOCK=256"),
    "math_f64": (math_all, "x=f64[?], out=f64[?], BLOCK=128"),
    "casts": (casts, "x=f32[?], out=f32[?], BLOCK=256"),
    "control_flow": (control_flow, "x=f32[?], out=f32[?], n=i32, BLOCK=512"),
    "atomics": (atomics, "x=f32[?], counts=f32[?], n=i32, BLOCK=256"),
    "int_atomics": (int_atomics, "x=i32[?], BLOCK=128"),
    "debug_ops": (debug_ops, "x=f32[?], BLOCK=64"),
}
