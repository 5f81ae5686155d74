"""Layer normalization forward, y = (x - mean) / sqrt(var + eps) * w + b, per row.

    python examples/layer_norm.py

Inputs and outputs are f16; statistics are accumulated in f32. One program per
row; rows longer than the tile are walked tile by tile. The mean and 1/std of
each row are stored too, as a backward pass would want them.
"""
import numpy as np

import tilec as tc
from _harness import Target, check, finish


@tc.kernel
def layer_norm_kernel(x, w, b, y, mean_out, rstd_out, eps, BLOCK: tc.constexpr):
    row = tc.program_id(0)
    n = x.shape[1]
    n_tiles = tc.cdiv(n, BLOCK)
    cols = tc.arange(0, BLOCK)

    # Mean: padding is 0, so the partial last tile adds nothing extra.
    acc = tc.zeros((1, BLOCK), tc.float32)
    for k in range(n_tiles):
        acc += tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
    mean = tc.sum(acc) / n

    # Variance from centred values (more accurate than E[x^2] - mean^2). Here
    # the padded elements would add mean^2 each, so they are masked out.
    acc = tc.zeros((1, BLOCK), tc.float32)
    for k in range(n_tiles):
        xt = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
        d = tc.where(k * BLOCK + cols < n, xt - mean, 0.0)
        acc += d * d
    rstd = tc.rsqrt(tc.sum(acc) / n + eps)

    # Normalize, scale and shift; w and b are 1-D, broadcast over the row tile.
    for k in range(n_tiles):
        xt = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
        wt = tc.load(w, index=(k,), shape=(BLOCK,)).astype(tc.float32)
        bt = tc.load(b, index=(k,), shape=(BLOCK,)).astype(tc.float32)
        yt = (xt - mean) * rstd * wt + bt
        tc.store(y, index=(row, k), tile=yt.astype(y.dtype))

    # One element each: a tile of one written at this row.
    tc.store(mean_out, index=(row,), tile=tc.full((1,), mean, tc.float32))
    tc.store(rstd_out, index=(row,), tile=tc.full((1,), rstd, tc.float32))


SIGNATURES = {
    "layer_norm_kernel": ("x=f16[?,?], w=f16[?], b=f16[?], y=f16[?,?], "
                          "mean_out=f32[?], rstd_out=f32[?], eps=f32, BLOCK=1024"),
}


def main():
    rng = np.random.default_rng()
    block = 1024
    rows = int(rng.integers(40, 80))
    cols = block + int(rng.integers(1, block))  # two tiles, the second partial
    eps = 1e-5
    x = (2.0 * rng.standard_normal((rows, cols)) + 0.5).astype(np.float16)
    w = rng.standard_normal(cols).astype(np.float16)
    b = rng.standard_normal(cols).astype(np.float16)

    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1)
    rstd = 1.0 / np.sqrt(x64.var(axis=1) + eps)
    want = (x64 - mean[:, None]) * rstd[:, None] * w.astype(np.float64) + b.astype(np.float64)

    target = Target()
    x_d, w_d, b_d = target.to_device(x), target.to_device(w), target.to_device(b)
    y = target.to_device(np.zeros_like(x))
    mean_d = target.to_device(np.zeros(rows, np.float32))
    rstd_d = target.to_device(np.zeros(rows, np.float32))
    with target.launching():
        layer_norm_kernel[(rows,)](x_d, w_d, b_d, y, mean_d, rstd_d, eps, BLOCK=block)

    # f16 output: half an ulp of values up to ~10 is ~4e-3.
    ok = check("y", target.to_host(y), want, rtol=2e-3, atol=1e-2)
    ok &= check("mean", target.to_host(mean_d), mean, rtol=1e-5, atol=1e-5)
    ok &= check("rstd", target.to_host(rstd_d), rstd, rtol=1e-4, atol=1e-5)
    finish(target, ok)


if __name__ == "__main__":
    main()
