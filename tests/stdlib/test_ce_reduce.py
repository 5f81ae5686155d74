"""cross_entropy's single-program mean/sum at row counts past one 1024-row tile:
the tile rule, and mean/sum against numpy under the interpreter for each dtype."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec.stdlib_kernels as sk

CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")


def test_reduce_config_is_one_tile_up_to_8192_rows():
    assert CE.reduce_config(1) == (1, 1)
    assert CE.reduce_config(100) == (128, 1)
    assert CE.reduce_config(1000) == (1024, 2)
    assert CE.reduce_config(4096) == (4096, 8)
    assert CE.reduce_config(8193) == (8192, 16)
    assert CE.reduce_config(100000) == (8192, 16)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("n_rows", [3000, 8195])  # one partial tile; one full tile and 3 rows
def test_mean_and_sum_over_many_rows_with_ignored_rows(rowwise, dtype, n_rows):
    rng = np.random.default_rng(n_rows)
    x = rowwise.host(2 * rng.standard_normal((n_rows, 5)), dtype)
    t = rng.integers(0, 5, n_rows)
    t[rng.integers(0, n_rows, n_rows // 7)] = 7  # ignored rows, spread over both tiles
    t[-1] = 7
    x64 = rowwise.f64(x)
    lse = np.log(np.exp(x64).sum(-1))
    loss = np.where(t == 7, 0.0, lse - x64[np.arange(n_rows), np.clip(t, 0, 4)])
    scale = 1 + np.log(5)
    rowwise.close(sk.cross_entropy(x, t, ignore_index=7, reduction="sum"), loss.sum(), dtype,
                  scale=scale * n_rows)
    rowwise.close(sk.cross_entropy(x, t, ignore_index=7), loss.sum() / (t != 7).sum(), dtype, scale=scale)
