"""mma.sync without a GPU: ldmatrix and mma.sync simulated lane by lane with numpy.

The simulation follows the PTX ISA's description of the instructions (what
each lane hands in and gets back), and runs the address and register
bookkeeping that codegen runs (gpu/mma_fragments.py). A mistake in either the
swizzle, the row addresses, the trans choice or the instruction operands gives
a wrong product here.
"""
import numpy as np
import pytest

from tilec.lowering.gpu.layouts import DotOperandLayout, MmaLayout, NumpyOps, SharedLayout
from tilec.lowering.gpu.mma_fragments import (ldmatrix_groups, ldmatrix_row_coord, ldmatrix_trans,
                                              mma_instructions, operand_shared_layout)
from tilec.lowering.passes.accelerate_dot import mma_warps

OPS = NumpyOps()
LANES = np.arange(32)


def _fill_shared(x: np.ndarray, smem: SharedLayout) -> np.ndarray:
    """The buffer `x` is stored as (every element at its swizzled offset, each exactly once)."""
    m, n = x.shape
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    off = smem.offset(x.shape, (i, j), OPS)
    assert sorted(off.ravel().tolist()) == list(range(m * n)), "the swizzle is not a permutation"
    buf = np.empty(m * n, x.dtype)
    buf[off] = x
    return buf


def _ldmatrix(buf, layout, shape, smem, warp):
    """Per lane, the elements ldmatrix leaves in its registers (register order)."""
    trans = ldmatrix_trans(layout, shape, smem)
    out = [[] for _ in range(32)]
    for first, count in ldmatrix_groups(layout, shape):
        coord = ldmatrix_row_coord(layout, shape, first, count, trans, LANES, warp, OPS)
        off = np.broadcast_to(smem.offset(shape, coord, OPS), (32,))
        rows = [buf[o:o + 8] for o in off]  # each lane's 16-byte row: 8 contiguous elements
        assert all(off % 8 == 0)
        for mi in range(count):
            mat = np.stack([rows[8 * mi + r] for r in range(8)])  # lanes 8mi.. address its rows
            for lane in range(32):
                g, t = lane // 4, lane % 4
                pair = mat[g, 2 * t:2 * t + 2] if not trans else mat[2 * t:2 * t + 2, g]
                out[lane] += list(pair)
    return out


def _coords(layout, shape, lane, warp):
    return layout.coords(shape, lane, warp, OPS)


def _mma_warp(a_regs, b_regs, c_regs, instrs, kw):
    """Run a warp's mma.sync instructions on per-lane register lists (PTX fragment tables)."""
    for ai, bi, ci in instrs:
        A = np.zeros((16, 8 * kw))
        B = np.zeros((8 * kw, 8))
        C = np.zeros((16, 8))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            a = [a_regs[lane][r] for r in ai]
            b = [b_regs[lane][r] for r in bi]
            for q, (dm, dk) in enumerate([(0, 0), (8, 0), (0, 4 * kw), (8, 4 * kw)]):
                for e in range(kw):
                    A[g + dm, kw * t + dk + e] = a[q * kw + e]
            for q, dk in enumerate([0, 4 * kw]):
                for e in range(kw):
                    B[kw * t + dk + e, g] = b[q * kw + e]
            for q, (dm, dn) in enumerate([(0, 0), (0, 1), (8, 0), (8, 1)]):
                C[g + dm, 2 * t + dn] = c_regs[lane][ci[q]]
        D = A @ B + C
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for q, (dm, dn) in enumerate([(0, 0), (0, 1), (8, 0), (8, 1)]):
                c_regs[lane][ci[q]] = D[g + dm, 2 * t + dn]


CASES = [  # (M, N, K, num_warps, A's buffer order, B's buffer order)
    (64, 64, 32, 4, (1, 0), (1, 0)),
    (32, 64, 16, 4, (1, 0), (0, 1)),
    (128, 32, 64, 8, (0, 1), (1, 0)),
    (16, 16, 16, 1, (0, 1), (0, 1)),
    (16, 128, 32, 4, (1, 0), (1, 0)),   # warps beyond M: along N
    (32, 8, 16, 4, (1, 0), (1, 0)),     # more warps than instruction tiles: copies
]


@pytest.mark.parametrize("m,n,k,num_warps,a_order,b_order", CASES)
def test_ldmatrix_and_mma_sync_compute_the_product(m, n, k, num_warps, a_order, b_order):
    rng = np.random.default_rng(m * n + k)
    x_a = rng.integers(-4, 5, (m, k)).astype(np.float64)
    x_b = rng.integers(-4, 5, (k, n)).astype(np.float64)
    x_c = rng.integers(-4, 5, (m, n)).astype(np.float64)
    acc = MmaLayout(2, mma_warps(m, n, num_warps), (16, 8))
    la, lb = DotOperandLayout(0, acc, 2), DotOperandLayout(1, acc, 2)
    sa = operand_shared_layout((m, k), 2, a_order)
    sb = operand_shared_layout((k, n), 2, b_order)
    buf_a, buf_b = _fill_shared(x_a, sa), _fill_shared(x_b, sb)
    instrs = mma_instructions(la, lb, acc, m, n, k)
    want = x_a @ x_b + x_c
    for warp in range(num_warps):
        a_regs = _ldmatrix(buf_a, la, (m, k), sa, warp)
        b_regs = _ldmatrix(buf_b, lb, (k, n), sb, warp)
        for lane in range(32):  # ldmatrix filled every register with the element the layout names
            for r, (i, j) in enumerate(_coords(la, (m, k), lane, warp)):
                assert a_regs[lane][r] == x_a[i, j]
            for r, (i, j) in enumerate(_coords(lb, (k, n), lane, warp)):
                assert b_regs[lane][r] == x_b[i, j]
        c_regs = [[x_c[i, j] for i, j in _coords(acc, (m, n), lane, warp)] for lane in range(32)]
        _mma_warp(a_regs, b_regs, c_regs, instrs, 2)
        for lane in range(32):
            got = [c_regs[lane][r] for r in range(len(c_regs[lane]))]
            exp = [want[i, j] for i, j in _coords(acc, (m, n), lane, warp)]
            assert got == exp, (warp, lane)


def test_tf32_instructions_read_the_operand_registers_the_layouts_name():
    m, n, k, nw = 32, 32, 16, 4
    rng = np.random.default_rng(1)
    x_a, x_b = rng.integers(-3, 4, (m, k)).astype(float), rng.integers(-3, 4, (k, n)).astype(float)
    acc = MmaLayout(2, mma_warps(m, n, nw), (16, 8))
    la, lb = DotOperandLayout(0, acc, 1), DotOperandLayout(1, acc, 1)
    instrs = mma_instructions(la, lb, acc, m, n, k)
    for warp in range(nw):
        a_regs = [[x_a[i, j] for i, j in _coords(la, (m, k), lane, warp)] for lane in range(32)]
        b_regs = [[x_b[i, j] for i, j in _coords(lb, (k, n), lane, warp)] for lane in range(32)]
        c_regs = [[0.0] * acc.elems_per_thread((m, n)) for _ in range(32)]
        _mma_warp(a_regs, b_regs, c_regs, instrs, 1)
        want = x_a @ x_b
        for lane in range(32):
            assert c_regs[lane] == [want[i, j] for i, j in _coords(acc, (m, n), lane, warp)]


@pytest.mark.parametrize("shape,order", [((64, 32), (1, 0)), ((32, 64), (1, 0)), ((64, 16), (1, 0)),
                                         ((128, 64), (1, 0)), ((64, 32), (0, 1)), ((16, 128), (1, 0))])
def test_ldmatrix_reads_are_bank_conflict_free(shape, order):
    """Each 8-lane phase of an ldmatrix reads 8 rows of 16 bytes: they must cover 32 distinct banks."""
    smem = operand_shared_layout(shape, 2, order)
    for op_idx in (0, 1):
        m, n = (shape[0], 64) if op_idx == 0 else (64, shape[1])
        acc = MmaLayout(2, mma_warps(m, n, 4), (16, 8))
        lay = DotOperandLayout(op_idx, acc, 2)
        trans = ldmatrix_trans(lay, shape, smem)
        for warp in range(4):
            for first, count in ldmatrix_groups(lay, shape):
                coord = ldmatrix_row_coord(lay, shape, first, count, trans, LANES, warp, OPS)
                byte = np.broadcast_to(smem.offset(shape, coord, OPS), (32,)) * 2
                for phase in range(count):
                    rows = byte[8 * phase:8 * phase + 8]
                    banks = {(b // 4 + w) % 32 for b in rows for w in range(4)}
                    assert len(banks) == 32, (op_idx, warp, first, phase, rows)


def test_unswizzled_buffer_would_conflict():
    """The check above can fail: a plain row-major 64x32 f16 buffer puts rows 0, 2, 4, ... on one bank group."""
    smem = SharedLayout(1, 1, 1, (1, 0), 0)
    acc = MmaLayout(2, (2, 2), (16, 8))
    lay = DotOperandLayout(0, acc, 2)
    coord = ldmatrix_row_coord(lay, (64, 32), 0, 4, False, LANES, 0, OPS)
    byte = smem.offset((64, 32), coord, OPS) * 2
    banks = {(b // 4 + w) % 32 for b in byte[:8] for w in range(4)}
    assert len(banks) < 32


def test_mma_warps_tile_the_accumulator():
    assert mma_warps(64, 64, 4) == (2, 2)
    assert mma_warps(128, 128, 8) == (4, 2) or mma_warps(128, 128, 8) == (2, 4)
    assert mma_warps(16, 128, 4) == (1, 4)
    assert mma_warps(128, 8, 4) == (4, 1)
