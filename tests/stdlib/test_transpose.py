"""transpose of 2-D matrices on the interpreter; its kernel compiled to PTX."""
from __future__ import annotations

import numpy as np
import pytest

import importlib

from tilec.stdlib_kernels import BF16Array

T = importlib.import_module("tilec.stdlib_kernels.transpose")  # the package attribute is the function


# (130, 300) and (300, 260): several row and column tiles (row tiles vary fastest), ragged both ways
@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (17, 1), (37, 70), (65, 64), (128, 3), (130, 300), (300, 260)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_transpose(shape, dtype):
    x = (np.arange(np.prod(shape)) % 1000).astype(dtype).reshape(shape)
    np.testing.assert_array_equal(T.transpose(x), x.T)


def test_transpose_bf16_strided_and_out():
    base = np.random.default_rng(0).standard_normal((20, 50))
    xb = BF16Array(base)
    np.testing.assert_array_equal(np.asarray(T.transpose(xb)), np.asarray(xb).T)
    x = base.astype(np.float32)[:, 5:38]
    out = np.zeros((33, 24), np.float32)[:, :20]
    assert T.transpose(x, out=out) is out
    np.testing.assert_array_equal(out, x.T)
    with pytest.raises(ValueError, match="2-D"):
        T.transpose(np.zeros((2, 2, 2), np.float32))
    strided = base.astype(np.float32)[:, ::2]     # rows of stride 2: the batched kernel, through views
    np.testing.assert_array_equal(T.transpose(strided), strided.T)


@pytest.mark.slow
def test_transpose_kernel_assembles():
    for name, sig in T.SIGNATURES.items():
        for arch in ("sm_80", "sm_90a"):
            c = getattr(T, name).compile(sig, arch=arch, **T.OPTIONS[name])
            assert c.metadata["ptxas"]["spill_stores"] == 0
            if name.startswith("transpose_kernel"):   # the 2-D tiles (the any-rank kernels: test_transpose_vectors.py)
                assert "st.global.v4" in c.asm["ptx"]
