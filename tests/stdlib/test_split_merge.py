"""_split_merge.merged_row, the split-KV merge shared by attention_decode and mla_decode,
against numpy: several chunks of splits, a ragged last chunk, splits that saw no key and a
row that no split saw."""
import numpy as np
import pytest

import tilec as tc
from tilec.stdlib_kernels import _split_merge as S


@tc.kernel
def _merge_rows(part_o, part_lse, o, lse, SPLITS: tc.constexpr, CHUNK: tc.constexpr, D: tc.constexpr):
    z = tc.program_id(0)
    row = tc.program_id(1)
    out, lse2 = S.merged_row(part_o, part_lse, z, row, SPLITS, CHUNK, D)
    tc.store(o, offset=(z, row, 0), tile=tc.reshape(out, (1, 1, D)))
    tc.store(lse, offset=(z, row), tile=tc.reshape(lse2, (1, 1)))


def _reference(part_o, part_lse):
    top = part_lse.max(axis=1, keepdims=True)
    w = np.where(np.isneginf(part_lse), 0.0, np.exp2(part_lse - np.where(np.isneginf(top), 0.0, top)))
    den = w.sum(axis=1)
    out = np.einsum("zsr,zsrd->zrd", w, part_o) / np.maximum(den, 1e-300)[..., None]
    lse = np.where(den > 0, np.log2(np.where(den > 0, den, 1.0)) + top[:, 0], -np.inf)
    return out, lse


@pytest.mark.parametrize("splits, d", [(37, 32), (5, 64), (1, 16), (64, 128)])
def test_merged_row_matches_numpy(splits, d):
    rng = np.random.default_rng(splits * 131 + d)
    z, rows = 2, 3
    part_o = rng.standard_normal((z, splits, rows, d)).astype(np.float32)
    part_lse = (rng.standard_normal((z, splits, rows)) * 4).astype(np.float32)
    part_lse[0, ::3, 1] = -np.inf              # splits that saw no key of this row
    part_lse[1, :, 2] = -np.inf                # a row no split saw
    chunk = S.merge_chunk(splits, 4 * d)       # several chunks where splits allow
    assert chunk < splits or splits <= 8
    o = np.full((z, rows, d), np.nan, np.float32)
    lse = np.full((z, rows), np.nan, np.float32)
    with tc.interpret():
        _merge_rows[(z, rows)](part_o, part_lse, o, lse, SPLITS=S.next_pow2(splits), CHUNK=chunk, D=d)
    want_o, want_lse = _reference(part_o.astype(np.float64), part_lse.astype(np.float64))
    np.testing.assert_allclose(o, want_o, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-5)
    assert np.all(o[1, 2] == 0) and np.isneginf(lse[1, 2])


def test_merge_chunk_bounds_the_tile():
    assert S.merge_chunk(3, 128) == 4               # all splits, as a power of two
    assert S.merge_chunk(100, 128) == S.MAX_CHUNK   # at most MAX_CHUNK x 128 values
    assert S.merge_chunk(100, 512) == S.MAX_CHUNK // 4
    assert S.merge_chunk(100, 256) * 256 == S.MAX_CHUNK * 128
