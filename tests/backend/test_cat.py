"""tile.cat: the layouts assign_layouts picks let codegen build the result by renaming
registers (each thread holds its elements of both halves), for any result layout."""
import pytest

import tilec as tc
from tilec.ir.types import ScalarType, TileType
from tilec import dtypes as dt
from tilec.lowering.codegen.rules_shape import register_map
from tilec.lowering.gpu.layouts import BlockedLayout, MmaLayout, SliceLayout
from tilec.lowering.passes.layouts import cat_layouts
from tilec.options import CompileOptions

F32 = ScalarType(dt.float32)


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("layout,shape,axis", [
    (BlockedLayout([4], [32], [4], [0]), (1024,), 0),        # the half bit is a register (repetition)
    (BlockedLayout([1], [32], [4], [0]), (128,), 0),         # ... a warp bit
    (BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0]), (4, 128), 1),
    (BlockedLayout([1, 1], [8, 4], [4, 1], [1, 0]), (64, 8), 0),
    (MmaLayout(2, [2, 2], [16, 8]), (64, 32), 1),
    (SliceLayout(0, BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])), (64,), 0),
])
def test_cat_operands_rename_into_the_produced_layout(layout, shape, axis):
    operand, produced = cat_layouts(layout, shape, axis, layout.num_warps)
    half = list(shape)
    half[axis] //= 2
    src = TileType(tuple(half), F32, operand)
    dst = TileType(tuple(shape), F32, produced)
    n0 = half[axis]

    def src_coord(c):
        if c[axis] < n0:
            return 0, c
        return 1, c[:axis] + (c[axis] - n0,) + c[axis + 1:]
    mapping = register_map([src, src], dst, layout.num_warps, src_coord, linear=False)
    assert sorted({k for k, _ in mapping}) == [0, 1]
    # the produced layout equals the requested one exactly when the half bit was a register
    half_bit = tuple(n0 if d == axis else 0 for d in range(len(shape)))
    assert (produced == layout) == (half_bit in layout.bases(shape).reg)


@tc.kernel
def _cat_rows(x, y, out, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    a = tc.load(x, index=(pid, 0), shape=(4, BLOCK))
    b = tc.load(y, index=(pid, 0), shape=(4, BLOCK))
    tc.store(out, index=(pid, 0), tile=tc.cat(a, b, axis=1) * 2.0)


@pytest.mark.parametrize("sig", ["x=f32[?,?], y=f32[?,?], out=f32[?,?], BLOCK=64",
                                 "x=f16[?,?], y=f16[?,?], out=f16[?,?], BLOCK=8"])
def test_cat_kernel_compiles_with_at_most_one_conversion(sig):
    from tilec.compiler import compile_kernel
    for arch in ("sm_80", "sm_90a"):
        ck = compile_kernel(_cat_rows, _cat_rows.specialization(sig), CompileOptions(arch=arch))
        assert ck.asm["gpu"].count("gpu.convert_layout") <= 1
        assert ck.metadata["ptxas"]["spill_stores"] == 0
