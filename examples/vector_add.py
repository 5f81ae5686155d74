"""Vector addition, written twice: once with tensor views, once with pointer tiles.

    python examples/vector_add.py
"""
import numpy as np

import tilec as tc
from _harness import Target, check, finish


@tc.kernel
def add_kernel(x, y, out, BLOCK: tc.constexpr):
    # Program `pid` owns elements [pid * BLOCK, (pid + 1) * BLOCK). A view knows
    # its own length, so the last, partial tile needs no mask: out-of-bounds
    # elements load as the padding value and their stores are skipped.
    pid = tc.program_id(0)
    a = tc.load(x, index=(pid,), shape=(BLOCK,))
    b = tc.load(y, index=(pid,), shape=(BLOCK,))
    tc.store(out, index=(pid,), tile=a + b)


@tc.kernel
def add_kernel_ptr(x, y, out, n, BLOCK: tc.constexpr):
    # The same with pointer tiles: the offsets are explicit and so is the mask
    # that keeps the last program inside the n elements.
    pid = tc.program_id(0)
    offs = pid * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    a = tc.load(x.ptr + offs, mask=mask, other=0.0)
    b = tc.load(y.ptr + offs, mask=mask, other=0.0)
    tc.store(out.ptr + offs, a + b, mask=mask)


SIGNATURES = {
    "add_kernel": "x=f32[?], y=f32[?], out=f32[?], BLOCK=1024",
    "add_kernel_ptr": "x=f32[?], y=f32[?], out=f32[?], n=i32, BLOCK=1024",
}


def main():
    rng = np.random.default_rng()
    block = 1024
    # A length that is not a multiple of the tile, so the last program is partial.
    n = block * int(rng.integers(20, 60)) + int(rng.integers(1, block))
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    want = x.astype(np.float64) + y.astype(np.float64)

    target = Target()
    x_d, y_d = target.to_device(x), target.to_device(y)
    out_view = target.to_device(np.zeros(n, np.float32))
    out_ptr = target.to_device(np.zeros(n, np.float32))
    grid = (tc.cdiv(n, block),)
    with target.launching():
        add_kernel[grid](x_d, y_d, out_view, BLOCK=block)
        add_kernel_ptr[grid](x_d, y_d, out_ptr, n, BLOCK=block)

    ok = check("add_kernel (views)", target.to_host(out_view), want, rtol=1e-6, atol=1e-6)
    ok &= check("add_kernel_ptr (pointers)", target.to_host(out_ptr), want, rtol=1e-6, atol=1e-6)
    finish(target, ok)


if __name__ == "__main__":
    main()
