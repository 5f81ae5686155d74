"""Row-wise softmax in one kernel: one program per row, rows of any length.

    python examples/fused_softmax.py

Fusing max, exp, sum and the division into one kernel reads each row from
memory twice (once to find its max and sum, once to normalize) instead of the
five or more round trips of separate ops.
"""
import numpy as np

import tilec as tc
from _harness import Target, check, finish


@tc.kernel
def softmax_kernel(x, out, BLOCK: tc.constexpr):
    row = tc.program_id(0)
    n_tiles = tc.cdiv(x.shape[1], BLOCK)

    # Pass 1, online softmax: keep the running max `m` and the running sum `s`
    # of exp(x - m). When a tile raises the max, the sum so far is rescaled by
    # exp(m_old - m_new), so one read of the row gives both. Padding with -inf
    # makes the elements past the row's end vanish from max and sum alike.
    first = tc.load(x, index=(row, 0), shape=(1, BLOCK), padding=float("-inf"))
    m = tc.max(first)
    s = tc.sum(tc.exp(first - m))
    for k in range(1, n_tiles):
        t = tc.load(x, index=(row, k), shape=(1, BLOCK), padding=float("-inf"))
        m_new = tc.maximum(m, tc.max(t))
        s = s * tc.exp(m - m_new) + tc.sum(tc.exp(t - m_new))
        m = m_new

    # Pass 2: normalize; stores past the row's end are skipped.
    inv_s = 1.0 / s
    for k in range(n_tiles):
        t = tc.load(x, index=(row, k), shape=(1, BLOCK), padding=float("-inf"))
        tc.store(out, index=(row, k), tile=tc.exp(t - m) * inv_s)


SIGNATURES = {
    "softmax_kernel": "x=f32[?,?], out=f32[?,?], BLOCK=1024",
}


def main():
    rng = np.random.default_rng()
    block = 1024
    rows = int(rng.integers(60, 100))
    # Longer than one tile and not a multiple of it, so both loops and the padding matter.
    cols = 2 * block + int(rng.integers(1, block))
    x = (3.0 * rng.standard_normal((rows, cols))).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)

    target = Target()
    x_d = target.to_device(x)
    out = target.to_device(np.zeros_like(x))
    with target.launching():
        softmax_kernel[(rows,)](x_d, out, BLOCK=block)

    ok = check("softmax_kernel", target.to_host(out), want, rtol=1e-5, atol=1e-7)
    finish(target, ok)


if __name__ == "__main__":
    main()
