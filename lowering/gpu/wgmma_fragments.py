"""wgmma (sm_90a) bookkeeping: which dots it takes, its warps, instructions and descriptors.

A warpgroup (4 consecutive warps) issues `wgmma.mma_async.m64nNk16`: D (64 x N, f32,
in registers) += A (64 x 16) @ B (16 x N), both read from shared memory through
64-bit matrix descriptors. The accumulator layout is #mma{version = 3,
warps_per_cta = [wm, wn], instr_shape = [16, N]}: warp w covers rows 16 (w % wm)
of its M repetition, so warps 4g .. 4g+3 form warpgroup g along M (wm >= 4), and
w // wm picks the N column block.

Shared memory: both operands use the 128-byte swizzle (`SharedLayout.for_swizzle(128)`)
with the buffer's last dimension contiguous: A (BM x BK) is K-major, B (BK x BN) is
N-major ("transposed", imm-trans-b = 1). tf32 and f8 operands have no transposed form
(the PTX ISA takes K-major A and B only for them), so their B buffer keeps K
contiguous instead (order (0, 1): the B^T rows of N are the swizzle's rows) and its
descriptor is the K-major one. A 16-bit B may be K-major too (imm-trans-b = 0), when it
arrives with K contiguous (`k.T` of a loaded (N, K) tile): `buffer_k_major` reads the
choice off the buffer's layout, and the functions below take it as `k_major` (None: the
dtype's default, `b_k_major`). An instruction always spans 32 bytes of K: k16 for
16-bit elements, k8 for tf32, k32 for f8 (`k_step`). A row of 128 bytes is one swizzle row; a
wider contiguous extent is cut into 64-element column blocks stored one after the
other (`SharedLayout._block_offset`), which is the PTX ISA canonical layout

    K-major:  ((8, m), (T, 2k)) : ((8T, SBO), (1, T))       SBO = 1024 B (8 rows)
    N-major:  ((T, 8, n), (8, k)) : ((1, T, LBO), (8T, SBO))  LBO = BK * 128 B (next column block),
                                                               SBO = 1024 B (next 8 rows of K)

with T = 16 bytes / element size, so a descriptor names a 1024-byte-aligned atom
and only its start address changes between instructions (`operand_offset`). An N-major
B is addressed in whole column blocks, so a warp column's instruction takes N >= 64; a
16-bit K-major B has 8 rows of N per atom, so its warp columns may take N down to 16
(`min_instr_n`: S = Q Kᵀ of a 64 x 64 block split over two warpgroups along N takes
m64n32k16, B's slice of warp column 1 starting 32 rows = 4096 bytes in).
`tests/gemm/test_wgmma.py` checks these against an independent model of the
canonical layouts and of the hardware's address-bit swizzle.

A 16-bit A may be M-major too (imm-trans-a = 1), when it arrives with M contiguous (a tile
of a column-major view, such as x.T of a row-major x): its M x K buffer keeps M contiguous
(order (0, 1)), the bytes of an N-major B with M for N, and its descriptor is B's N-major
one (`a_k_major` False below). tf32 and f8 A are K-major only.

A from registers (16-bit operands only): `wgmma ... d, {a0, a1, a2, a3}, b-desc`. The
fragment of one k16 step is the m16n8k16 A fragment of mma.sync, per warp of the
warpgroup (rows 16 (w % 4) of the warpgroup's 64): with g = lane / 4, t = lane % 4,
a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
(each .b32 two elements, the lower column in the low half). That is the layout
#dot_op{op_idx = 0, parent = the accumulator's #mma, k_width = 2}, and it has the bases
of an m64nN accumulator over the same rows (`register_a_layout`): a P computed from
one wgmma's accumulator feeds the next one's A without moving.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from .layouts import DotOperandLayout, MmaLayout, SharedLayout

__all__ = ["SWIZZLE", "wgmma_shape", "wgmma_plan", "min_instr_n", "MIN_N_K_MAJOR", "k_step", "b_k_major", "buffer_k_major",
           "a_buffer_k_major",
           "operand_layout", "descriptor_high_bits",
           "operand_offset", "warpgroup_strides", "WgmmaInstr", "wgmma_instructions", "K_STEP", "register_a_layout",
           "REGISTER_A_BITS"]

SWIZZLE = 128          # bytes: the swizzle mode of both operands
K_STEP = 16            # K of one instruction for 16-bit operands
_SWIZZLE_CODE = {128: 1, 64: 2, 32: 3}
_INSTR_K_BYTES = 32    # every wgmma operand type: 32 bytes of K per instruction
MIN_N_K_MAJOR = 16     # the smallest instruction N wgmma_plan gives a 16-bit K-major B (`min_instr_n`)
# A element widths the register form is used for here. f8 (k32) would need its bytes
# regrouped across the lanes of a quad (the accumulator gives a thread columns 2t, 2t+1,
# the k32 fragment wants 4t..4t+3), and tf32 has no pair to pack: both keep shared memory.
REGISTER_A_BITS = (16,)


def k_step(elem_bytes: int) -> int:
    """K of one instruction: 16 (f16/bf16), 8 (tf32), 32 (f8)."""
    return _INSTR_K_BYTES // elem_bytes


def b_k_major(elem_bytes: int) -> bool:
    """Whether B's buffer is K-major (tf32, f8: no transposed form) rather than N-major."""
    return elem_bytes != 2


def wgmma_shape(m: int, n: int, k: int, elem_bytes: int, num_warps: int,
                k_major: Optional[bool] = None) -> Optional[Tuple[int, int, int]]:
    """(wm, wn, instr_n) of a wgmma dot of an m x n accumulator over k, None if wgmma cannot
    take it: whole warpgroups, M in steps of 64 rows, a power-of-two instruction N of 64 to
    256 (whole 128-byte column blocks of an N-major B), or of `MIN_N_K_MAJOR` to 256 for a
    16-bit B stored K-major (`k_major`: B's order, None the dtype's default), K a multiple of
    a 128-byte row of A."""
    return wgmma_plan(m, n, k, elem_bytes, num_warps, k_major)[0]


def min_instr_n(elem_bytes: int, k_major: Optional[bool] = None) -> int:
    """The smallest instruction N wgmma_plan gives a warp column. An N-major B (16-bit) is
    addressed in whole 64-element column blocks (the swizzle runs along N), so N >= 64. A
    16-bit K-major B (imm-trans-b = 0) is laid out as A is, N for M: its swizzle runs along K
    and every 8 rows of N are one 1024-byte atom, so a warp column's slice starts on an atom
    for any N that is a multiple of 8 (PTX ISA: m64nNk16 takes N = 8 .. 256 in steps of 8).
    The plan stops at 16 (`MIN_N_K_MAJOR`): m64n8 does no more per instruction than the four
    warps' m16n8k16, and it would move the attention backward's 64 x 16 dK/dV dots at 8
    warps off mma.sync and its A in registers. tf32 and f8 (K-major only) keep 64."""
    if elem_bytes == 2 and _k_major(k_major, elem_bytes):
        return MIN_N_K_MAJOR
    return 64


def wgmma_plan(m: int, n: int, k: int, elem_bytes: int, num_warps: int,
               k_major: Optional[bool] = None) -> Tuple[Optional[Tuple[int, int, int]], str]:
    """(wgmma_shape's answer, why not when it is None: the first condition that fails, for
    the compiler's remarks; "" when it fits). `k_major`: B's buffer order (None: the dtype's
    default, N-major for 16-bit operands)."""
    if elem_bytes not in (1, 2, 4):
        return None, f"wgmma takes 1-, 2- or 4-byte operands, not {elem_bytes}-byte ones"
    if num_warps % 4:
        return None, f"wgmma needs whole warpgroups (num_warps a multiple of 4), got num_warps={num_warps}"
    if m % 64:
        return None, f"wgmma needs M a multiple of 64 (BM={m})"
    if (k * elem_bytes) % SWIZZLE:
        return None, (f"wgmma needs K a multiple of {SWIZZLE // elem_bytes} for {elem_bytes}-byte operands "
                      f"(a {SWIZZLE}-byte row), BK={k}")
    wm = 4
    while wm * 2 <= num_warps and m % (16 * wm * 2) == 0:
        wm *= 2
    wn = num_warps // wm
    if n % wn:
        return None, f"N={n} does not split over the {wn} warp columns of {num_warps} warps"
    instr_n = min(256, n // wn)
    width = min_instr_n(elem_bytes, k_major)
    if instr_n < width or instr_n & (instr_n - 1) or n % (instr_n * wn):
        b = ("a K-major B" if _k_major(k_major, elem_bytes) else "an N-major B") if elem_bytes == 2 else \
            f"{elem_bytes}-byte operands"
        return None, (f"wgmma needs each of the {wn} warp column(s) to take N in a power-of-two "
                      f"instruction of {width} to 256 columns for {b} (BN={n})")
    return (wm, wn, instr_n), ""


def buffer_k_major(layout: SharedLayout, has_slot: bool) -> bool:
    """Whether a B buffer of this layout (a leading slot dimension when `has_slot`) is K-major."""
    return layout.order[0] == (1 if has_slot else 0)


def a_buffer_k_major(layout: SharedLayout, has_slot: bool) -> bool:
    """Whether an A buffer (M x K) of this layout is K-major (else M-major, 16-bit only)."""
    return not buffer_k_major(layout, has_slot)


def _k_major(k_major: Optional[bool], elem_bytes: int) -> bool:
    return b_k_major(elem_bytes) if k_major is None else k_major


def _a_m_major(op_idx: int, k_major: Optional[bool], elem_bytes: int) -> bool:
    """Operand `op_idx` is an M-major A (`k_major` False; None and True: K-major)."""
    if op_idx != 0 or k_major is None or k_major:
        return False
    if elem_bytes != 2:
        raise ValueError(f"an M-major wgmma A operand must have 2-byte elements, not {elem_bytes}-byte ones")
    return True


def operand_layout(elem_bytes: int, op_idx: int = 0, k_major: Optional[bool] = None) -> SharedLayout:
    """The shared layout of an operand: 128-byte swizzle, K contiguous for A and for a K-major
    B (order (0, 1) of its K x N buffer), else the last dimension (N) contiguous; an M-major
    A (`k_major` False, 16-bit) keeps M contiguous (order (0, 1) of its M x K buffer)."""
    if op_idx == 0:
        order = (0, 1) if _a_m_major(0, k_major, elem_bytes) else (1, 0)
    else:
        order = (0, 1) if _k_major(k_major, elem_bytes) else (1, 0)
    return SharedLayout.for_swizzle(SWIZZLE, elem_bytes, order)


def descriptor_high_bits(op_idx: int, shape, elem_bytes: int, k_major: Optional[bool] = None) -> int:
    """The constant fields of an operand's descriptor (everything but the start address):
    leading byte offset (bits 16-29), stride byte offset (bits 32-45), swizzle (bits 62-63),
    each offset encoded as bytes >> 4. `shape` is one slot of the buffer. An M-major A
    (`k_major` False) is described as the N-major B of its transpose."""
    if _a_m_major(op_idx, k_major, elem_bytes):
        return descriptor_high_bits(1, (shape[1], shape[0]), elem_bytes, False)
    sbo = 8 * SWIZZLE                      # the next 8 rows (A: of M, B: of K, K-major B: of N)
    if op_idx == 0 or _k_major(k_major, elem_bytes):
        lbo = 16                           # unused by swizzled K-major layouts ("assumed 1")
    else:
        lbo = shape[0] * SWIZZLE           # B: the next 64-element column block of N
    return ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (_SWIZZLE_CODE[SWIZZLE] << 62)


def operand_offset(op_idx: int, shape, elem_bytes: int, row: int, col: int, k_major: Optional[bool] = None) -> int:
    """Byte offset, in a slot of `shape`, of the instruction operand that starts at element
    (row, col): A at (m0, k0), B at (k0, n0). Within a 128-byte row the start moves by
    bytes (k0 of A); B's n0 is always a whole column block. A K-major B is laid out as A
    is, with N for M: B^T at (n0, k0); an M-major A (`k_major` False) as an N-major B, with
    M for N: A^T at (k0, m0)."""
    width = SWIZZLE // elem_bytes
    if _a_m_major(op_idx, k_major, elem_bytes):
        return operand_offset(1, (shape[1], shape[0]), elem_bytes, col, row, False)
    if op_idx == 1 and _k_major(k_major, elem_bytes):
        return operand_offset(0, (shape[1], shape[0]), elem_bytes, col, row)
    block, within = divmod(col, width)
    if op_idx == 1 and within:
        raise ValueError(f"a wgmma B operand starts on a {width}-column block, not at column {col}")
    return (block * shape[0] + row) * SWIZZLE + within * elem_bytes


def register_a_layout(acc: MmaLayout, bits: int) -> Optional[DotOperandLayout]:
    """The register layout wgmma reads A in, for the accumulator layout `acc` and A elements
    of `bits` bits; None where the register form is not used (`REGISTER_A_BITS`)."""
    if acc.version != 3 or bits not in REGISTER_A_BITS:
        return None
    return DotOperandLayout(0, acc, 32 // bits)


def warpgroup_strides(acc: MmaLayout, a_shape, b_shape, elem_bytes: int,
                      k_major: Optional[bool] = None, a_k_major: bool = True) -> Tuple[int, int]:
    """Bytes by which A's and B's operands move per warpgroup along M and per warp column
    block along N (the warp id supplies those indices at run time); `k_major` is B's order,
    `a_k_major` A's."""
    wm, wn = acc.warps_per_cta
    n = acc.instr_shape[1]
    return (operand_offset(0, a_shape, elem_bytes, 64, 0, a_k_major),
            operand_offset(1, b_shape, elem_bytes, 0, n, k_major) if wn > 1 else 0)


@dataclass(frozen=True)
class WgmmaInstr:
    a_offset: int          # bytes into A's slot for warpgroup 0 (add warpgroup * stride)
    b_offset: int          # bytes into B's slot for warp column 0
    regs: Tuple[int, ...]  # the thread's accumulator registers d0 .. d(N/2 - 1)
    a_regs: Tuple[int, ...] = ()  # A from registers: the element registers of a0..a3, in pairs


def _a_registers(a_layout, m: int, k: int, row: int, k0: int) -> Tuple[int, ...]:
    """The thread's A element registers of the k16 step at (row, k0), in the order
    a0 (low, high), a1, a2, a3, found by their offsets from the thread's base element
    (the lanes and warps give every layout equivalent to #dot_op the same base)."""
    at = {}
    for r, off in enumerate(a_layout.reg_offsets((m, k))):
        at.setdefault(off, r)
    return tuple(at[(row + dm, k0 + dk + e)] for dk in (0, 8) for dm in (0, 8) for e in (0, 1))


def wgmma_instructions(acc: MmaLayout, m: int, n: int, k: int, elem_bytes: int, a_layout=None,
                       k_major: Optional[bool] = None, a_k_major: bool = True) -> List[WgmmaInstr]:
    """A thread's wgmma instructions in issue order (K innermost, so that consecutive
    instructions chain on one accumulator), for warpgroup 0 / warp column 0. With A in
    registers (`a_layout`, 16-bit), each names the A element registers it reads. `k_major`:
    B's buffer order (None: the dtype's default); `a_k_major`: A's (False: M-major)."""
    wm, wn = acc.warps_per_cta
    instr_n = acc.instr_shape[1]
    reps_n = n // (instr_n * wn)
    reps_m = m // (16 * wm)
    per = instr_n // 2
    out = []
    for rm in range(reps_m):
        for rn in range(reps_n):
            first = (rn + reps_n * rm) * per
            regs = tuple(range(first, first + per))
            for kk in range(0, k, k_step(elem_bytes)):
                a_regs = () if a_layout is None else _a_registers(a_layout, m, k, 16 * wm * rm, kk)
                out.append(WgmmaInstr(operand_offset(0, (m, k), elem_bytes, 16 * wm * rm, kk, a_k_major),
                                      operand_offset(1, (k, n), elem_bytes, kk, instr_n * wn * rn, k_major), regs,
                                      a_regs))
    return out
