"""Where mma.sync fragments come from and go: ldmatrix row addresses, instruction operands.

Everything here is derived from the layouts' bases (layouts.py), with an `ops`
object (IndexOps in codegen, NumpyOps in tests), so the numpy simulation in
the tests runs the very functions codegen runs.

ldmatrix. In a #dot_op layout with k_width 2, each 32-bit register of a thread
(elements 2j, 2j+1) spans, over the 32 lanes, one 8x8 matrix of 16-bit
elements: lane bits 2..4 pick its "row" g, and register bit 0 with lane bits
0..1 pick one of 8 elements along the other direction ("pair" bits). ldmatrix
hands lane l, for matrix j, the elements at (row l/4, pair 2(l%4)..+1) of an
8x8 matrix whose 8 rows of 16 bytes it reads from 8 addresses. So:
- when the pair bits run along the buffer's contiguous dimension, the 8 rows
  are the g rows (plain ldmatrix);
- when the g bits run along it, the rows are the pairs (ldmatrix.trans).
Lane l supplies the address of row l % 8 of matrix l / 8 of its group.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from .layouts import Coord, DotOperandLayout, MmaLayout, SharedLayout

__all__ = ["ldmatrix_groups", "ldmatrix_trans", "ldmatrix_row_coord", "mma_instructions", "mma_k_step",
           "operand_shared_layout"]


def _unit_run(bases: Sequence[Coord], dim: int) -> bool:
    """The bases step 1, 2, 4, ... along `dim` and nothing else."""
    return all(b == tuple((1 << k) if d == dim else 0 for d in range(len(b))) for k, b in enumerate(bases))


def ldmatrix_trans(layout: DotOperandLayout, shape, smem: SharedLayout) -> bool:
    """Whether reading `layout` from a buffer laid out by `smem` needs ldmatrix.trans."""
    bs = layout.bases(tuple(shape))
    contig = smem.order[0]
    pair = [bs.reg[0], bs.lane[0], bs.lane[1]]
    g = list(bs.lane[2:5])
    if _unit_run(pair, contig):
        return False
    if _unit_run(g, contig):
        return True
    raise ValueError(f"ldmatrix cannot read {layout} from a buffer contiguous along dimension {contig}")


def ldmatrix_groups(layout: DotOperandLayout, shape) -> List[Tuple[int, int]]:
    """(first 32-bit register, number of matrices) of each ldmatrix: x4 where it can, then x2, x1."""
    nregs = layout.elems_per_thread(tuple(shape)) // 2
    out, j = [], 0
    while j < nregs:
        n = 4
        while j + n > nregs or j % n:
            n //= 2
        out.append((j, n))
        j += n
    return out


def _xor_terms(rank: int, terms, ops) -> tuple:
    """Per dimension, the XOR of bit * basis over (bit, basis) terms (bit: 0/1 value or int)."""
    out = [ops.const(0)] * rank
    for bit, basis in terms:
        for d in range(rank):
            if basis[d]:
                out[d] = ops.xor(out[d], ops.mul(bit, ops.const(basis[d])))
    return tuple(out)


def ldmatrix_row_coord(layout: DotOperandLayout, shape, first: int, count: int, trans: bool,
                       lane, warp, ops) -> tuple:
    """The tile coordinate of the first element of the row whose address `lane` supplies to
    the ldmatrix of 32-bit registers first .. first+count-1."""
    shape = tuple(shape)
    bs = layout.bases(shape)
    rank = len(shape)
    one = ops.const(1)

    def bit(v, k):
        return ops.and_(ops.lshr(v, ops.const(k)) if k else v, one)

    terms = []
    # which matrix of the group: register bits 1.. of element 2*(first + m)
    m = ops.and_(ops.lshr(lane, ops.const(3)), ops.const(count - 1))
    base_reg = 2 * first
    for k, b in enumerate(bs.reg):
        if base_reg >> k & 1:
            terms.append((1, b))
    for k in range(count.bit_length() - 1):
        terms.append((bit(m, k), bs.reg[1 + k]))
    row = ops.and_(lane, ops.const(7))
    rows = [bs.reg[0], bs.lane[0], bs.lane[1]] if trans else list(bs.lane[2:5])
    for k, b in enumerate(rows):
        terms.append((bit(row, k), b))
    for k, b in enumerate(bs.warp):
        terms.append((bit(warp, k), b))
    return _xor_terms(rank, terms, ops)


def mma_k_step(dtype_bits: int) -> int:
    return 16 if dtype_bits == 16 else 8


def _index(layout, shape) -> Dict[Coord, int]:
    out: Dict[Coord, int] = {}
    for r, off in enumerate(layout.reg_offsets(tuple(shape))):
        out.setdefault(off, r)
    return out


def mma_instructions(a: DotOperandLayout, b: DotOperandLayout, c: MmaLayout, m: int, n: int, k: int
                     ) -> List[Tuple[List[int], List[int], List[int]]]:
    """Per mma.sync instruction of a thread, in issue order: the element registers of A
    (pairs of a0..a3, or a0..a3 for tf32), of B (pairs of b0, b1, or b0, b1) and of C/D
    (c0..c3). Registers are matched by their offsets from the thread's base, which agree
    because the operand layouts share the accumulator's lane and warp placement."""
    kw = a.k_width
    a_at, b_at = _index(a, (m, k)), _index(b, (k, n))
    c_off = c.reg_offsets((m, n))
    step = 8 * kw
    out = []
    for q in range(0, len(c_off), 4):
        om, on = c_off[q]
        c_regs = list(range(q, q + 4))
        for kk in range(0, k, step):
            a_regs, b_regs = [], []
            for dk in (0, 4 * kw):
                for dm in (0, 8):
                    a_regs += [a_at[(om + dm, kk + dk + e)] for e in range(kw)]
            for dk in (0, 4 * kw):
                b_regs += [b_at[(kk + dk + e, on)] for e in range(kw)]
            # a0 = rows g, a1 = rows g+8, a2 = rows g with K + 4kw, a3 = rows g+8 with K + 4kw
            out.append((a_regs, b_regs, c_regs))
    return out


def operand_shared_layout(shape, elem_bytes: int, order=(1, 0)) -> SharedLayout:
    """A swizzled buffer layout that ldmatrix reads without bank conflicts: 16-byte chunks,
    XORed by the row so that 8 consecutive rows of one chunk column hit 8 different
    16-byte bank groups (rows shorter than 128 bytes share a phase: `per_phase` rows)."""
    vec = max(1, 16 // elem_bytes)
    row_bytes = shape[order[0]] * elem_bytes
    per_phase = max(1, 128 // row_bytes)
    max_phase = max(1, min(8 // per_phase, row_bytes // 16))
    return SharedLayout(vec, per_phase, max_phase, tuple(order), 0)
