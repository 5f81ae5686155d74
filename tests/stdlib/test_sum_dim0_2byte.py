"""sum/max over a leading dimension: 128-column strips of 8 KB tiles, about 1024
programs (`reductions.strip_config`), against numpy under the interpreter."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec.stdlib_kernels as sk

RD = importlib.import_module("tilec.stdlib_kernels.reductions")


@pytest.mark.parametrize("outer, r, inner, itemsize, want", [
    (1, 8192, 16384, 2, (32, 128, 4, 8)),      # 128 strips x 8 splits of 32 tiles
    (1, 16384, 8192, 4, (16, 128, 4, 16)),     # 64 strips x 16 splits of 64 tiles
    (1, 4096, 4096, 2, (32, 128, 4, 32)),      # 32 strips x 32 splits of the fewest (4) tiles
    (1, 1024, 131072, 4, (16, 128, 4, 1)),     # strips enough: no split
    (1, 2097152, 64, 4, (32, 64, 4, 1024)),    # one narrow strip, split 1024 ways
    (16, 4096, 2048, 2, (32, 128, 4, 4)),      # slabs count as strips
    (1, 3, 5, 4, (4, 8, 1, 1)),                # tiny: one small tile, one warp
])
def test_strip_config(outer, r, inner, itemsize, want):
    assert RD.strip_config(outer, r, inner, itemsize) == want


def test_windowed_strips_and_splits():
    # the windowed kernel's and softmax's (f32) strips: 1 KB rows, 16 KB tiles (`inner_config`)
    assert RD.inner_config(8192, 16384, 2) == (16, 512, 8)
    assert RD.inner_config(8192, 16384, 4) == (16, 256, 8)
    assert RD.split_count(32, 512, 2) == 16       # 2-byte: 512 programs of 32 tiles
    assert RD.split_count(64, 512, 4) == 32       # 4-byte: up to 16 tiles each
    assert RD.split_count(32, 1024, 4) == 64


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_leading_dim_split_matches_numpy(rowwise, dtype, op):
    # 1000 columns: seven full 128 strips and a partial one; 777 rows split into parts
    rng = np.random.default_rng(3)
    x = rowwise.host(rng.standard_normal((777, 1000)), dtype)
    _, block_i, _, splits = RD.strip_config(1, 777, 1000, 2)
    assert block_i == 128 and splits > 1
    want = rowwise.f64(x).sum(0) if op == "sum" else rowwise.f64(x).max(0)
    rowwise.close(getattr(sk, "amax" if op == "max" else op)(x, 0), want, dtype, scale=30 if op == "sum" else 1)
