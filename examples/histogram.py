"""Grouped histogram: one histogram per row of an integer matrix, built with atomics.

    python examples/histogram.py

Row g of `data` is counted into row g of `hist`, in bins of BIN_WIDTH values
starting at 0; values below 0 or past the last bin are not counted. Many
programs share one row of `hist`, so they add their counts with atomics.
"""
import numpy as np

import tilec as tc
from _harness import Target, check, finish


@tc.kernel
def histogram_kernel(data, hist, BIN_WIDTH: tc.constexpr, NUM_BINS: tc.constexpr,
                     BLOCK: tc.constexpr):
    # A 2-D grid: axis 0 walks along a row in tiles, axis 1 picks the group (row).
    pid = tc.program_id(0)
    g = tc.program_id(1)

    # Padding -1 sends the elements past the row's end to bin -1, which is
    # dropped below together with every other out-of-range value.
    v = tc.load(data, index=(g, pid), shape=(1, BLOCK), padding=-1)
    bins = v // BIN_WIDTH  # floor division: -3 // 8 == -1, as in Python

    # Count inside the program first: compare every element with every bin
    # (a BLOCK x NUM_BINS one-hot tile) and sum over the elements. Values of no
    # bin match no column, so they vanish here without a mask.
    onehot = bins.T == tc.arange(0, NUM_BINS)[None, :]
    counts = tc.sum(onehot.astype(tc.int32), axis=0)

    # Then one atomic per bin instead of one per element, and none for empty
    # bins. The row of `hist` is found through its stride, as in C.
    row_ptrs = hist.ptr + g * hist.stride(0) + tc.arange(0, NUM_BINS)
    tc.atomic_add(row_ptrs, counts, mask=counts > 0)


SIGNATURES = {
    "histogram_kernel": "data=i32[?,?], hist=i32[?,?], BIN_WIDTH=8, NUM_BINS=64, BLOCK=256",
}


def main():
    rng = np.random.default_rng()
    bin_width, num_bins, block = 8, 64, 256
    groups = int(rng.integers(3, 7))
    n = block * int(rng.integers(10, 30)) + int(rng.integers(1, block))
    # Some values fall below bin 0 and some past the last bin.
    data = rng.integers(-40, bin_width * num_bins + 40, size=(groups, n)).astype(np.int32)

    want = np.zeros((groups, num_bins), np.int64)
    for g in range(groups):
        bins = np.floor_divide(data[g], bin_width)
        want[g] = np.bincount(bins[(bins >= 0) & (bins < num_bins)], minlength=num_bins)

    target = Target()
    data_d = target.to_device(data)
    hist = target.to_device(np.zeros((groups, num_bins), np.int32))
    with target.launching():
        histogram_kernel[(tc.cdiv(n, block), groups)](
            data_d, hist, BIN_WIDTH=bin_width, NUM_BINS=num_bins, BLOCK=block)

    # Counts are exact.
    ok = check("histogram_kernel", target.to_host(hist), want, rtol=0.0, atol=0.0)
    finish(target, ok)


if __name__ == "__main__":
    main()
