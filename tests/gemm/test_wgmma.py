"""wgmma without a GPU: descriptors, swizzle and accumulator fragments simulated with numpy.

The hardware side follows the PTX ISA, independently of the compiler's code: a
descriptor's fields are decoded, the operand's elements are found through the
canonical layouts of the ISA (CuTe form, in 16-byte units T) and the 128-byte
swizzle is applied to the absolute byte address (bits 4-6 ^= bits 7-9). The
compiler side is what codegen runs: SharedLayout.offset places the elements
(cp.async and st.shared write there), wgmma_fragments gives the descriptors and
the registers of each instruction, the #mma version 3 layout says which element
each register holds. A wrong field, stride, block order or register gives a wrong
product here.
"""
import numpy as np
import pytest

from tilec.lowering.gpu.layouts import MmaLayout, NumpyOps, SharedLayout
from tilec.lowering.gpu.wgmma_fragments import (descriptor_high_bits, k_step, min_instr_n, operand_layout,
                                                warpgroup_strides, wgmma_instructions, wgmma_plan, wgmma_shape)

OPS = NumpyOps()
EB = 2  # 16-bit operands
T = 16 // EB


def _store(x: np.ndarray, smem: SharedLayout, mem: np.ndarray, base: int, eb: int = EB) -> None:
    """Write tile `x` (element ids) into the element-addressed `mem` (elements of `eb` bytes)
    at byte `base` as codegen does."""
    i, j = np.meshgrid(np.arange(x.shape[0]), np.arange(x.shape[1]), indexing="ij")
    off = smem.offset(x.shape, (i, j), OPS)
    assert sorted(off.ravel().tolist()) == list(range(x.size)), "the layout is not a permutation"
    mem[base // eb + off] = x


def _decode(desc: int):
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    mode = desc >> 62
    assert (desc >> 49) & 7 == 0  # base offset: atoms start on 1024-byte boundaries
    return start, lbo, sbo, mode


def _swizzle128(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


def _read_a(mem, desc, rows: int = 64, eb: int = EB):
    """The rows x (32 bytes of K) K-major operand (A, or B^T of tf32/f8; 128B swizzle) the
    descriptor names: ((8, m), (T, 2)) : ((8T, SBO), (1, T)) in elements of eb bytes."""
    start, _, sbo, mode = _decode(desc)
    assert mode == 1
    t = 16 // eb
    r, k = np.meshgrid(np.arange(rows), np.arange(2 * t), indexing="ij")
    addr = start + ((r % 8) * 8 * t + (k % t) + (k // t) * t) * eb + (r // 8) * sbo
    return mem[_swizzle128(addr) // eb]


def _read_b(mem, desc, n: int):
    """The 16 x n B operand (N-major, 128B swizzle): ((T, 8, n/64), (8, 2)) :
    ((1, T, LBO), (8T, SBO))."""
    start, lbo, sbo, mode = _decode(desc)
    assert mode == 1
    k, c = np.meshgrid(np.arange(16), np.arange(n), indexing="ij")
    addr = start + ((c % (8 * T)) + (k % 8) * 8 * T) * EB + (c // (8 * T)) * lbo + (k // 8) * sbo
    return mem[_swizzle128(addr) // EB]


def _thread_coords(layout: MmaLayout, shape, warp: int, lane: int):
    """(row, col) of each register of one thread, from the layout's bases."""
    bs = layout.bases(tuple(shape))
    base = np.zeros(2, np.int64)
    for k, b in enumerate(bs.lane):
        if lane >> k & 1:
            base ^= np.array(b)
    for k, b in enumerate(bs.warp):
        if warp >> k & 1:
            base ^= np.array(b)
    out = []
    for r in range(1 << len(bs.reg)):
        c = base.copy()
        for k, b in enumerate(bs.reg):
            if r >> k & 1:
                c ^= np.array(b)
        out.append(tuple(c))
    return out


CASES = [  # (m, n, k, num_warps)
    (64, 64, 64, 4),
    (128, 256, 64, 8),
    (128, 128, 128, 8),    # A two column blocks wide
    (64, 256, 64, 8),      # two warpgroups side by side along N
    (128, 128, 64, 4),     # one warpgroup, two M repetitions
    (64, 512, 64, 4),      # two N repetitions of n256
]


@pytest.mark.parametrize("a_k_major", [True, False], ids=["a_k_major", "a_m_major"])
@pytest.mark.parametrize("m,n,k,num_warps", CASES)
def test_wgmma_simulation_matches_matmul(m, n, k, num_warps, a_k_major):
    """Every thread's wgmma instructions, fed by the descriptors codegen builds over the
    buffers cp.async fills, leave A @ B in the registers the #mma v3 layout names. An
    M-major A (imm-trans-a = 1, a column-major view's tile) is read through the ISA's
    MN-major canonical layout, the one of an N-major B: A^T as B."""
    wm, wn, instr_n = wgmma_shape(m, n, k, EB, num_warps)
    acc = MmaLayout(3, (wm, wn), (16, instr_n))
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (m, k)).astype(np.float64)
    b = rng.integers(-3, 4, (k, n)).astype(np.float64)
    slots, slot = 3, 2
    a_base, b_base = 1024, 1024 + slots * m * k * EB   # buffers as allocate_shared places them
    mem = np.full((b_base + slots * k * n * EB) // EB, -1, np.int64)
    smem = operand_layout(EB)
    ids_a, ids_b = np.arange(m * k).reshape(m, k), m * k + np.arange(k * n).reshape(k, n)
    _store(ids_a, operand_layout(EB, 0, a_k_major), mem, a_base + slot * m * k * EB)
    _store(ids_b, smem, mem, b_base + slot * k * n * EB)
    values = np.concatenate([a.ravel(), b.ravel()])
    a_stride, b_stride = warpgroup_strides(acc, (m, k), (k, n), EB, None, a_k_major)
    a_hi, b_hi = descriptor_high_bits(0, (m, k), EB, a_k_major), descriptor_high_bits(1, (k, n), EB)
    c = np.full((m, n), np.nan)
    per = instr_n // 2
    for warp in range(num_warps):
        wg_m, wg_n = (warp % wm) // 4, warp // wm
        regs = {}
        for ins in wgmma_instructions(acc, m, n, k, EB, a_k_major=a_k_major):
            da = a_hi | ((a_base + slot * m * k * EB + wg_m * a_stride + ins.a_offset) >> 4)
            db = b_hi | ((b_base + slot * k * n * EB + wg_n * b_stride + ins.b_offset) >> 4)
            ta, tb = _read_a(mem, da) if a_k_major else _read_b(mem, da, 64).T, _read_b(mem, db, instr_n)
            assert (ta >= 0).all() and (ta < m * k).all() and (tb >= m * k).all()
            d = values[ta] @ values[tb]   # the warpgroup's 64 x N product
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for i, r in enumerate(ins.regs):  # PTX ISA D fragment of m64nNk16
                    row = 16 * (warp % 4) + g + 8 * ((i // 2) % 2)
                    col = (i // 4) * 8 + 2 * t + (i % 2)
                    regs[lane, r] = regs.get((lane, r), 0.0) + d[row, col]
        for lane in range(32):
            coords = _thread_coords(acc, (m, n), warp, lane)
            assert len(coords) == per * (m // (16 * wm)) * (n // (instr_n * wn))
            for r, (i, j) in enumerate(coords):
                c[i, j] = regs[lane, r]
    np.testing.assert_array_equal(c, a @ b)


def test_block_layout_is_the_canonical_n_major_layout():
    """A 64 x 256 B buffer: column blocks of 64 elements, each all 64 rows (8 KB) long."""
    smem = operand_layout(EB)
    assert smem == SharedLayout(8, 1, 8, (1, 0), 128)
    assert smem.offset((64, 256), (0, 64), OPS) == 64 * 64
    assert smem.offset((64, 256), (1, 0), OPS) == 64 + 8   # row 1, chunk 0 -> chunk 1
    assert smem.offset((64, 256), (1, 8), OPS) == 64 + 0      # row 1, chunk 1 -> chunk 0
    assert smem.offset((64, 256), (9, 70), OPS) == 64 * 64 + 9 * 64 + ((0 ^ 1) * 8 + 6)


@pytest.mark.parametrize("m,n,k,num_warps,want", [
    (64, 64, 64, 4, (4, 1, 64)), (128, 256, 64, 8, (8, 1, 256)), (64, 256, 64, 8, (4, 2, 128)),
    (64, 64, 32, 4, None),        # A rows of 64 bytes: mma.sync
    (32, 64, 64, 4, None),        # less than a warpgroup's 64 rows
    (64, 32, 64, 4, None),        # N narrower than a 128-byte column block
    (64, 64, 64, 2, None),        # not a whole warpgroup
])
def test_wgmma_shape_policy(m, n, k, num_warps, want):
    assert wgmma_shape(m, n, k, EB, num_warps) == want


KMAJOR_CASES = [  # (m, n, k, num_warps, element bytes): tf32 and f8, B K-major
    (64, 64, 32, 4, 4),
    (128, 256, 32, 8, 4),
    (128, 128, 64, 8, 4),     # tf32 A two column blocks wide
    (64, 256, 32, 8, 4),      # two warpgroups side by side along N
    (64, 64, 128, 4, 1),
    (128, 256, 128, 8, 1),
    (128, 128, 256, 4, 1),    # f8: two column blocks, two M repetitions
    (128, 64, 128, 8, 2),     # f16 K-major B (q @ k.T of attention: imm-trans-b = 0)
    (128, 128, 64, 8, 2),
    (64, 256, 64, 8, 2),      # two warpgroups side by side along N
    (128, 128, 128, 4, 2),    # two M repetitions
    (64, 64, 64, 8, 2),       # f16 K-major B below 64 per warp column: m64n32, two warp columns
    (64, 64, 256, 8, 2),      # ... B four 64-element column blocks of K (MLA decode's S = Q Kᵀ)
    (64, 32, 128, 8, 2),      # m64n16, two warp columns
    (64, 32, 64, 8, 2),       # m64n16, two warp columns, K one column block
    (64, 32, 64, 4, 2),       # m64n32, one warpgroup
    (128, 32, 64, 4, 2),      # m64n32, two M repetitions
    (128, 64, 64, 16, 2),     # m64n32: two warpgroups along M, two warp columns
]


@pytest.mark.slow
@pytest.mark.parametrize("m,n,k,num_warps,eb", KMAJOR_CASES)
def test_k_major_b_simulation_matches_matmul(m, n, k, num_warps, eb):
    """tf32 / f8 (always) and f16/bf16 (`k_major=True`): B's buffer is K-major (its K x N tile
    stored as B^T rows), read through the ISA's K-major canonical layout; instructions of 32
    bytes of K (k8, k16, k32)."""
    km = True
    wm, wn, instr_n = wgmma_shape(m, n, k, eb, num_warps, km)
    acc = MmaLayout(3, (wm, wn), (16, instr_n))
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (m, k)).astype(np.float64)
    b = rng.integers(-3, 4, (k, n)).astype(np.float64)
    a_base, b_base = 1024, 1024 + m * k * eb
    mem = np.full((b_base + k * n * eb) // eb, -1, np.int64)
    assert operand_layout(eb, 1, km).order == (0, 1)
    ids_a, ids_b = np.arange(m * k).reshape(m, k), m * k + np.arange(k * n).reshape(k, n)
    _store(ids_a, operand_layout(eb, 0), mem, a_base, eb)
    _store(ids_b, operand_layout(eb, 1, km), mem, b_base, eb)
    values = np.concatenate([a.ravel(), b.ravel()])
    a_stride, b_stride = warpgroup_strides(acc, (m, k), (k, n), eb, km)
    a_hi, b_hi = descriptor_high_bits(0, (m, k), eb), descriptor_high_bits(1, (k, n), eb, km)
    assert a_hi == b_hi  # both K-major
    c = np.full((m, n), np.nan)
    for warp in range(num_warps):
        wg_m, wg_n = (warp % wm) // 4, warp // wm
        regs = {}
        for ins in wgmma_instructions(acc, m, n, k, eb, k_major=km):
            ta = _read_a(mem, a_hi | ((a_base + wg_m * a_stride + ins.a_offset) >> 4), 64, eb)
            tb = _read_a(mem, b_hi | ((b_base + wg_n * b_stride + ins.b_offset) >> 4), instr_n, eb)
            assert ta.shape == (64, k_step(eb)) and (ta >= 0).all() and (ta < m * k).all() and (tb >= m * k).all()
            d = values[ta] @ values[tb].T
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for i, r in enumerate(ins.regs):
                    row = 16 * (warp % 4) + g + 8 * ((i // 2) % 2)
                    col = (i // 4) * 8 + 2 * t + (i % 2)
                    regs[lane, r] = regs.get((lane, r), 0.0) + d[row, col]
        for lane in range(32):
            for r, (i, j) in enumerate(_thread_coords(acc, (m, n), warp, lane)):
                c[i, j] = regs[lane, r]
    np.testing.assert_array_equal(c, a @ b)


@pytest.mark.parametrize("m,n,k,num_warps,eb,want", [
    (128, 256, 32, 8, 4, (8, 1, 256)), (64, 64, 128, 4, 1, (4, 1, 64)),
    (64, 64, 16, 4, 4, None),     # tf32 rows of 64 bytes
    (64, 64, 64, 4, 1, None),     # f8 rows of 64 bytes
    (64, 32, 32, 4, 4, None),     # N below 64
])
def test_wgmma_shape_policy_tf32_f8(m, n, k, num_warps, eb, want):
    assert wgmma_shape(m, n, k, eb, num_warps) == want


@pytest.mark.parametrize("m,n,k,num_warps,want", [
    (64, 64, 64, 8, (4, 2, 32)),      # S = Q Kᵀ of a 64 x 64 block over two warpgroups along N
    (64, 64, 576, 8, (4, 2, 32)),
    (64, 32, 64, 8, (4, 2, 16)),
    (64, 16, 64, 4, (4, 1, 16)),
    (64, 32, 64, 4, (4, 1, 32)),
    (128, 32, 64, 8, (8, 1, 32)),
    (64, 128, 64, 8, (4, 2, 64)),     # 64 and up: the same answer as an N-major B
    (64, 512, 64, 8, (4, 2, 256)),
    (64, 16, 64, 8, None),            # 8 columns per warp column: m64n8 is not planned (min_instr_n)
    (64, 8, 64, 4, None),
    (64, 48, 64, 8, None),            # 24 per warp column: not a power of two
    (64, 24, 64, 4, None),
    (64, 64, 32, 8, None),            # A rows of 64 bytes
    (32, 64, 64, 8, None),            # less than a warpgroup's 64 rows
])
def test_wgmma_shape_policy_k_major_b(m, n, k, num_warps, want):
    """A 16-bit B stored K-major (q @ k.T) lets a warp column take N from 16 (its swizzle runs
    along K, 8 rows of N to a 1024-byte atom; m64n8 is not planned); an N-major B keeps whole
    64-element column blocks, and tf32 / f8 (K-major always) keep N >= 64."""
    assert wgmma_shape(m, n, k, EB, num_warps, k_major=True) == want
    if want is not None and want[2] < 64:
        assert wgmma_shape(m, n, k, EB, num_warps) is None
        assert wgmma_shape(m, n, k, EB, num_warps, k_major=False) is None
        assert wgmma_shape(m, n, k, 4 if k % 32 == 0 else 1, num_warps, k_major=True) is None
        assert "for an N-major B" in wgmma_plan(m, n, k, EB, num_warps)[1]


def test_min_instr_n():
    assert min_instr_n(2, True) == 16 and min_instr_n(2) == min_instr_n(2, False) == 64
    assert min_instr_n(4) == min_instr_n(4, True) == min_instr_n(1, True) == 64
