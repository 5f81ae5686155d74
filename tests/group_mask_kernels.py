"""Kernels whose masks change inside a 16-byte group (a ragged end, a row off a 16-byte
boundary), shared by the CPU and GPU tests: the loads move whole aligned groups and
select per element, the stores move whole groups only where every element is wanted."""
import tilec as tc
from tilec.stdlib_kernels._window import window_start, window_tile


@tc.kernel
def ragged_copy(x, y, seen, n, BLOCK: tc.constexpr):
    # y[:n] = 2 x[:n] + 1 (y past n untouched); seen: every lane's loaded value, 7 past n
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    v = tc.load(x.ptr + offs, mask=m, other=7)
    tc.store(y.ptr + offs, v * 2 + 1, mask=m)
    tc.store(seen.ptr + offs, v)


@tc.kernel
def window_rows(x, y, sums, WINDOW: tc.constexpr, BLOCK: tc.constexpr):
    # Row `row` of x read in aligned windows: y's row = 3 x's row (stored back through the
    # same window: y has x's strides and alignment), sums = the row's sum (padding 0
    # outside it).
    row = tc.program_id(0)
    xb, lead = window_start(x, row, WINDOW)
    yb, _ = window_start(y, row, WINDOW)
    acc = tc.zeros((1, BLOCK), tc.float32)
    for j in range(tc.cdiv(x.shape[1] + WINDOW - 1, BLOCK)):
        t, inside = window_tile(x, xb, lead, x.shape[1], j, 0, BLOCK)
        acc += t.astype(tc.float32)
        tc.store(yb + j * BLOCK + tc.arange(0, BLOCK)[None, :], t * 3, mask=inside)
    tc.store(sums, index=(row,), tile=tc.full((1,), tc.sum(acc), tc.float32))


@tc.kernel
def interval_copy(x, y, lo, hi, BLOCK: tc.constexpr):
    # y = x on (lo, hi], y elsewhere untouched. With lo and hi multiples of 16 the mask
    # changes one element past a group boundary (x > lo, x <= hi): inside a group.
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = (offs > lo) & (offs <= hi)
    v = tc.load(x.ptr + offs, mask=m, other=-1)
    tc.store(y.ptr + offs, v, mask=m)
