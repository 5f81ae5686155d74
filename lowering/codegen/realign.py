"""Realigned loads (`tc.load(realign=True)`): a group of contiguous elements read from an
address the compiler cannot prove aligned, as the two aligned blocks around it.

A group of `vec` elements (B = vec * itemsize bytes, 4 to 16) starts `s` bytes past an
aligned address a (s = address mod B, known at run time only). Block 0 is [a, a + B),
block 1 [a + B, a + 2B); each is read, as B-aligned 32-bit words, only where some wanted
element lies in it: an aligned block holding a wanted byte lies on a page the program may
read, so neither read can fault. The group is the 2B bytes shifted right by s: its word k
is the funnel shift (`prmt.b32.f4e`) of words k + q and k + q + 1 (q = s / 4) by the bytes
left over, (s mod 4) * 8 bits. Words q .. q + B / 4 are picked first, by q's bits with
selects, then shifted: picking among the shifted words instead kept more of them live
(bf16 softmax chunks of 7 x 2048: 119 registers against 84). Read element by element, a
2-byte row off its 16-byte group moves 2 bytes per access; this moves 16 in two.
"""
from __future__ import annotations

from typing import List, Optional

from llvmlite import ir

from .casts import cast_bool
from .types import I32, I64, bit_width

__all__ = ["read_blocks", "shift_blocks"]


def _any(b, bits):
    acc = ir.Constant(ir.IntType(1), 0) if not bits else None
    for x in bits:
        acc = x if acc is None else b.or_(acc, x)
    return acc


def _block_preds(b, s, masks: Optional[List], itemsize: int, nbytes: int, uniform: bool):
    """(block 0's, block 1's) predicate: some wanted element's first byte lies in it (None:
    always). Element e starts at byte s + e * itemsize of the two blocks."""
    split = b.icmp_unsigned("!=", s, ir.Constant(I64, 0))  # an aligned group needs no block 1
    if masks is None:
        return None, split
    if uniform:  # one mask bit for the group: element 0 is always in block 0
        m = cast_bool(b, masks[0])
        return m, b.and_(m, split)
    first, second = [], []
    for e, m in enumerate(masks):
        m = cast_bool(b, m)
        in_first = b.icmp_unsigned("<", s, ir.Constant(I64, nbytes - e * itemsize))
        first.append(b.and_(m, in_first))
        if e:  # element 0 never reaches block 1 (s < nbytes)
            second.append(b.and_(m, b.not_(in_first)))
    return _any(b, first), _any(b, second)


def _pick(b, cands: List[ir.Value], q: ir.Value) -> ir.Value:
    """cands[q] for a run-time q < len(cands) (a power of two), by q's bits."""
    level, bit = cands, 0
    while len(level) > 1:
        sel = b.trunc(b.lshr(q, ir.Constant(I32, bit)), ir.IntType(1)) if bit else b.trunc(q, ir.IntType(1))
        level = [b.select(sel, level[i + 1], level[i]) for i in range(0, len(level), 2)]
        bit += 1
    return level[0]


def read_blocks(ctx, ptr, vty: ir.Type, masks: Optional[List], uniform: bool, read_block):
    """(the two aligned blocks around the `vty` (vec elements, 4 to 16 bytes) at `ptr`, its
    offset s into the first, i64) for `shift_blocks`. masks: the elements' mask bits (None:
    all wanted); uniform: one bit serves the group. read_block(pointer, word vector type,
    predicate or None) reads one block where the predicate holds (zeros elsewhere). A load
    reads every group's blocks before shifting any, so that no shift waits on a load while
    later loads are still to be issued."""
    b = ctx.builder
    nbytes = bit_width(vty) // 8
    words = nbytes // 4
    wty = I32 if words == 1 else ir.VectorType(I32, words)
    s = b.and_(b.ptrtoint(ptr, I64), ir.Constant(I64, nbytes - 1))
    start = b.gep(ptr, [b.neg(s)], source_etype=ir.IntType(8))
    itemsize = nbytes // (vty.count if isinstance(vty, ir.VectorType) else 1)
    p0, p1 = _block_preds(b, s, masks, itemsize, nbytes, uniform)
    return [read_block(start, wty, p0),
            read_block(b.gep(start, [ir.Constant(I64, nbytes)], source_etype=ir.IntType(8)), wty, p1)], s


def shift_blocks(ctx, blocks, s, vty: ir.Type) -> ir.Value:
    """The `vty` s bytes into the two blocks `read_blocks` gave. Elements no mask wants hold
    garbage: the caller selects its `other` there."""
    b = ctx.builder
    words = bit_width(vty) // 32
    wty = blocks[0].type
    w = [x for blk in blocks for x in ([blk] if words == 1 else
                                       [b.extract_element(blk, ir.Constant(I32, i)) for i in range(words)])]
    s32 = b.trunc(s, I32)
    r = b.shl(b.and_(s32, ir.Constant(I32, 3)), ir.Constant(I32, 3))
    q = b.lshr(s32, ir.Constant(I32, 2))
    # the words q .. q + words first (selects on q), then one funnel shift per word
    picked = [_pick(b, w[k:k + words], q) for k in range(words + 1)] if words > 1 else w
    out = [ctx.intrinsic("llvm.fshr.i32", I32, [picked[k + 1], picked[k], r]) for k in range(words)]
    if words == 1:
        return b.bitcast(out[0], vty)
    v = ir.Constant(wty, ir.Undefined)
    for k, x in enumerate(out):
        v = b.insert_element(v, x, ir.Constant(I32, k))
    return b.bitcast(v, vty)
