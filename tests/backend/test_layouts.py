"""Distributed layouts cover their tiles, match the PTX fragment tables, and print/parse."""
import itertools

import numpy as np
import pytest

from tilec.ir import parse, print_module
from tilec.lowering.gpu.layouts import (
    BlockedLayout, DotOperandLayout, LayoutError, LinearLayout, MmaLayout, NumpyOps, SharedLayout,
    SliceLayout, default_blocked, equivalent,
)

OPS = NumpyOps()


def element_map(layout, shape):
    """coords[reg][d] as an array of shape (regs, lanes, warps, rank)."""
    lane = np.arange(32)[:, None]
    warp = np.arange(layout.num_warps)[None, :]
    cs = layout.coords(shape, lane, warp, OPS)
    out = np.zeros((len(cs), 32, layout.num_warps, len(shape)), np.int64)
    for r, c in enumerate(cs):
        for d, x in enumerate(c):
            out[r, :, :, d] = np.broadcast_to(x, (32, layout.num_warps))
    return out


def assert_covers(layout, shape):
    m = element_map(layout, shape)
    assert m.shape[0] == layout.elems_per_thread(shape)
    flat = m.reshape(-1, len(shape))
    assert (flat >= 0).all() and (flat < np.array(shape)).all()
    seen = np.zeros(shape, bool)
    seen[tuple(flat.T)] = True
    assert seen.all(), f"{layout} misses elements of {shape}"
    # the pure-int path (codegen folds constants this way) agrees with the numpy path
    assert layout.coords(shape, 5, layout.num_warps - 1, OPS)[-1] == tuple(m[-1, 5, -1])


SHAPES_2D = [(1, 1), (1, 128), (2, 8), (16, 16), (64, 64), (128, 32), (4, 1024), (256, 2)]
BLOCKED = [
    BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0]),
    BlockedLayout([1, 8], [1, 32], [1, 4], [1, 0]),
    BlockedLayout([2, 1], [4, 8], [2, 2], [0, 1]),
    BlockedLayout([1, 1], [32, 1], [1, 8], [0, 1]),
]


@pytest.mark.parametrize("layout,shape", list(itertools.product(BLOCKED, SHAPES_2D)))
def test_blocked_covers(layout, shape):
    assert_covers(layout, shape)


@pytest.mark.parametrize("shape", SHAPES_2D)
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_default_blocked_covers_with_few_copies(shape, num_warps):
    layout = default_blocked(shape, num_warps, vec=4)
    assert layout.num_warps == num_warps
    assert_covers(layout, shape)
    n = int(np.prod(shape))
    if n >= 32 * num_warps * layout.size_per_thread[1]:
        # a tile at least as large as the CTA's extent is held without copies
        assert layout.elems_per_thread(shape) * 32 * num_warps == n


def test_blocked_register_order_is_contiguous_vectors():
    layout = BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    offs = layout.reg_offsets((64, 64))
    assert offs[:4] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert offs[4] == (0, 16)           # the next repetition along the contiguous dim
    base = layout.thread_base((64, 64), 5, 2, OPS)
    assert base == (2 * 8 + 1, 4)       # lane 5: row 1, col chunk 1; warp 2: rows 16..


@pytest.mark.parametrize("shape,dim", [((64, 64), 0), ((64, 64), 1), ((4, 1024), 1), ((2, 8), 0)])
def test_slice_covers_and_drops_the_dim(shape, dim):
    parent = BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    s = SliceLayout(dim, parent)
    sub = tuple(x for i, x in enumerate(shape) if i != dim)
    assert_covers(s, sub)
    # each slice element sits in the threads that held the parent's row of it
    pm = element_map(parent, shape)
    sm = element_map(s, sub)
    other = 1 - dim
    assert set(np.unique(sm[..., 0])) == set(np.unique(pm[..., other]))


def test_mma_v2_matches_ptx_fragment():
    m = MmaLayout(2, [1, 1], [16, 8])
    assert m.elems_per_thread((16, 8)) == 4
    for lane in range(32):
        g, t = lane // 4, lane % 4
        cs = m.coords((16, 8), lane, 0, OPS)
        assert cs == [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]


@pytest.mark.parametrize("kw,instr_k", [(2, 16), (1, 8), (4, 32)])
def test_dot_operands_match_ptx_fragments(kw, instr_k):
    parent = MmaLayout(2, [1, 1], [16, 8])
    a = DotOperandLayout(0, parent, kw)
    b = DotOperandLayout(1, parent, kw)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        ca = a.coords((16, instr_k), lane, 0, OPS)
        want_a = []
        for row, k0 in ((g, 0), (g + 8, 0), (g, 4 * kw), (g + 8, 4 * kw)):
            want_a += [(row, kw * t + k0 + j) for j in range(kw)]
        assert ca == want_a
        cb = b.coords((instr_k, 8), lane, 0, OPS)
        want_b = []
        for k0 in (0, 4 * kw):
            want_b += [(kw * t + k0 + j, g) for j in range(kw)]
        assert cb == want_b


@pytest.mark.parametrize("layout,shape", [
    (MmaLayout(2, [2, 2], [16, 8]), (64, 64)),
    (MmaLayout(2, [4, 1], [16, 8]), (16, 16)),
    (MmaLayout(3, [4, 1], [16, 128]), (64, 128)),
    (MmaLayout(3, [8, 1], [16, 64]), (128, 128)),
    (DotOperandLayout(0, MmaLayout(2, [2, 2], [16, 8]), 2), (64, 32)),
    (DotOperandLayout(1, MmaLayout(2, [2, 2], [16, 8]), 2), (32, 64)),
    (DotOperandLayout(0, MmaLayout(3, [4, 1], [16, 64]), 2), (64, 16)),
    (SliceLayout(1, MmaLayout(2, [2, 2], [16, 8])), (64,)),
])
def test_tensor_core_layouts_cover(layout, shape):
    assert_covers(layout, shape)


def test_wgmma_accumulator_registers():
    m = MmaLayout(3, [4, 1], [16, 256])
    assert m.elems_per_thread((64, 256)) == 128  # m64n256: 128 f32 accumulators per thread


def test_equivalence_ignores_spelling_but_not_placement():
    shape = (1, 128)
    a = BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0])
    b = BlockedLayout([1, 1], [1, 32], [1, 4], [0, 1])   # order differs, placement does not
    c = BlockedLayout([1, 4], [1, 32], [1, 4], [1, 0])
    assert equivalent(a, b, shape)
    assert not equivalent(a, c, shape)
    assert equivalent(a, LinearLayout.of(a.bases(shape)), shape)


@pytest.mark.parametrize("bad", [
    lambda: BlockedLayout([1, 4], [8, 8], [4, 1], [1, 0]),       # 64 threads per warp
    lambda: BlockedLayout([1, 3], [8, 4], [4, 1], [1, 0]),       # not a power of two
    lambda: BlockedLayout([1, 4], [8, 4], [4, 1], [0, 0]),       # not a permutation
    lambda: BlockedLayout([1], [8, 4], [4, 1], [1, 0]),          # ranks disagree
    lambda: MmaLayout(2, [2, 2], [16, 16]),
    lambda: MmaLayout(3, [2, 2], [16, 64]),                      # half a warpgroup
    lambda: DotOperandLayout(1, MmaLayout(3, [4, 1], [16, 64]), 2),
    lambda: DotOperandLayout(0, MmaLayout(2, [1, 1], [16, 8]), 3),
    lambda: SliceLayout(2, BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])),
    lambda: SharedLayout(8, 2, 8, (1, 0), 128),
])
def test_invalid_layouts_are_clear_errors(bad):
    with pytest.raises(LayoutError):
        bad()


def test_rank_mismatch_is_a_layout_error():
    with pytest.raises(LayoutError, match="rank-2"):
        BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0]).elems_per_thread((64,))


@pytest.mark.parametrize("layout", [
    SharedLayout(), SharedLayout(8, 1, 8, (1, 0)), SharedLayout.for_swizzle(128, 2),
    SharedLayout.for_swizzle(64, 2), SharedLayout.for_swizzle(32, 4), SharedLayout(4, 2, 4, (0, 1)),
])
@pytest.mark.parametrize("shape", [(64, 64), (8, 128), (128, 8), (16, 2)])
def test_shared_offsets_are_a_permutation(layout, shape):
    r, c = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    offs = layout.offset(shape, (r, c), OPS)
    assert sorted(offs.ravel().tolist()) == list(range(shape[0] * shape[1]))


def test_128b_swizzle_spreads_a_column_over_all_banks():
    # 8 consecutive rows of one 16-byte column chunk land in 8 different 16-byte bank groups
    layout = SharedLayout.for_swizzle(128, 2)
    rows = np.arange(8)
    offs = layout.offset((64, 64), (rows, np.zeros(8, np.int64)), OPS)
    assert len(set(((offs * 2) % 128 // 16).tolist())) == 8


@pytest.mark.parametrize("layout", [
    BLOCKED[0], SliceLayout(0, BLOCKED[1]), MmaLayout(3, [4, 2], [16, 64]),
    DotOperandLayout(0, MmaLayout(2, [2, 2], [16, 8]), 2), SharedLayout.for_swizzle(64, 2),
    LinearLayout.of(BLOCKED[2].bases((16, 16))),
])
def test_layout_round_trips_in_ir_text(layout):
    from tilec.ir.types import TileType, ScalarType
    from tilec.dtypes import float32
    text = ('module {\n  tile.func {sym_name = "k", arg_names = []} (\n    {\n    ^bb0():\n'
            f'      %0 = tile.constant {{value = 1.0, _layout = {layout}}} : f32\n'
            '      tile.return\n    }\n  )\n}\n')
    m = parse(text)
    assert m.func().body.ops[0].attrs["_layout"] == layout
    assert print_module(m) == print_module(parse(print_module(m)))
    if not isinstance(layout, SharedLayout):
        t = TileType((16, 16) if layout.rank == 2 else (16,), ScalarType(float32), layout)
        assert f"{layout}" in str(t)


def test_explicit_bases_serve_a_broadcast_source_of_unit_extent():
    """One layout serves a broadcast's source and result (assign_layouts' groups): at a unit
    extent a linear layout's bits along that dimension are copies, as a blocked layout's wrap;
    an extent that is not 1 and too small is still an error. (The fuzzer found argmax over
    the rows of a reshaped tile failing here: its index tile is an arange expanded to 2x1.)"""
    lay = LinearLayout([], [[0, 1], [0, 2], [0, 4], [1, 0], [0, 0]], [])      # a 2x8 tile on a warp
    narrow = lay.bases((2, 1))
    assert [list(b) for b in narrow.lane] == [[0, 0], [0, 0], [0, 0], [1, 0], [0, 0]]
    assert [list(b) for b in lay.bases((1, 8)).lane] == [[0, 1], [0, 2], [0, 4], [0, 0], [0, 0]]
    ops = NumpyOps()
    for lane in range(32):   # every thread of the 2x8 tile finds its row's element of the 2x1 source
        (row, _), = lay.coords((2, 8), lane, 0, ops)
        assert lay.coords((2, 1), lane, 0, ops) == [(row, 0)]
    with pytest.raises(LayoutError, match="lies outside a tile of shape"):
        lay.bases((2, 4))


def test_argmax_across_the_rows_of_a_reshape_compiles():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from layout_kernels import argmax_rows_of_reshape
    for arch in ("sm_80", "sm_90a"):
        ptx = argmax_rows_of_reshape.compile("a=f32[?,?], out=i32[?,?]", arch=arch, num_warps=1).asm["ptx"]
        assert ".entry argmax_rows_of_reshape" in ptx
