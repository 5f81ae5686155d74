"""sum/max over a leading dimension of 2-byte arrays: 512-column strips, about 512
programs of at most 32 row tiles, against numpy under the interpreter."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec.stdlib_kernels as sk

RD = importlib.import_module("tilec.stdlib_kernels.reductions")


def test_two_byte_strips_and_splits():
    assert RD.inner_config(8192, 16384, 2) == (16, 512, 8)
    assert RD.inner_config(8192, 16384, 4) == (16, 256, 8)
    assert RD.split_count(32, 512, 2) == 16       # 8192x16384 bf16: 512 programs of 32 tiles
    assert RD.split_count(64, 512, 4) == 32       # 4-byte rule unchanged: up to 16 tiles each
    assert RD.split_count(32, 1024, 4) == 64


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_leading_dim_split_matches_numpy(rowwise, dtype, op):
    # 1000 columns: one full 512 strip and a partial one; 777 rows split into parts
    rng = np.random.default_rng(3)
    x = rowwise.host(rng.standard_normal((777, 1000)), dtype)
    block_r, block_i, _ = RD.inner_config(777, 1000, 2)
    assert block_i == 512 and RD.split_count(2, -(-777 // block_r), 2) > 1
    want = rowwise.f64(x).sum(0) if op == "sum" else rowwise.f64(x).max(0)
    rowwise.close(getattr(sk, op)(x, 0), want, dtype, scale=30 if op == "sum" else 1)
