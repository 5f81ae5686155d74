"""Vector reads that stop at the end of a tensor view's extent (`CompileOptions.initcheck`).

A masked vector load whose mask changes inside a group (a row's ragged end), and a
realigned load's two aligned blocks (codegen/realign.py), read bytes that no mask wants.
Inside the view's extent, [x.ptr, end) with end one past the last element's bytes
(x.ptr + (1 + sum((shape_i - 1) * stride_i)) * itemsize), those bytes belong to the same
tensor and are as initialized as it is. Past `end` lies other data or the allocator's
uninitialized padding, which `compute-sanitizer --tool initcheck` reports. With the option,
a load whose pointers derive from a view (`source_view`) checks each access against `end`
(`fits`) and, in a thread whose accesses reach past it, reads each access in the pieces
that lie before it (`read_pieces`: rules_memory._split_at_end).

Not the default: every form tried cost ptxas registers in the standard library's kernels
(bench/ptx_registers.py; a predicate, an address or a branch per access, or one branch per
thread's load: up to 73 registers more, programs per SM lost in 35 of 226 kernels), so it is a mode for
sanitizer runs (TILEC_INITCHECK=1) that leaves the default code as it was.
"""
from __future__ import annotations

from typing import Optional

from llvmlite import ir

from ...ir import tile_ops as T
from ...ir.core import Value
from ..gpu import ops as G
from .types import I32, I64, bit_width

__all__ = ["source_view", "view_end", "zero_block", "fits", "read_pieces"]

# Ops whose pointer result is their first operand's pointers rearranged (or offset: addptr)
_SAME_BASE = (T.AddPtrOp, T.SplatOp, T.BroadcastOp, T.ExpandDimsOp, T.ReshapeOp, G.ConvertLayoutOp)


def source_view(ptr: Value) -> Optional[Value]:
    """The tensor view whose `x.ptr` the pointers `ptr` are computed from (by offsets,
    splats, broadcasts, reshapes, layout conversions and selects between such pointers of
    one view), or None (a loop-carried pointer, a pointer argument)."""
    op = ptr.owner
    while isinstance(op, _SAME_BASE):
        op = op.operands[0].owner
    if isinstance(op, T.ViewPtrOp):
        return op.operands[0]
    if isinstance(op, T.SelectOp):
        a, b = source_view(op.operands[1]), source_view(op.operands[2])
        return a if a is not None and a is b else None
    return None


def view_end(ctx, view: Value) -> ir.Value:
    """The address one past the last byte of `view`'s last element, i64: x.ptr + (1 +
    sum((shape_i - 1) * max(stride_i, 0))) * itemsize (a view with an empty dimension ends
    at or before x.ptr: nothing in it is read whole)."""
    b = ctx.builder
    v = ctx.get(view)
    last = ir.Constant(I64, 1)
    for n, s in zip(v.shape, v.strides):
        n, s = _i64(b, n), _i64(b, s)
        if not isinstance(s, ir.Constant):
            s = b.select(b.icmp_signed("<", s, ir.Constant(I64, 0)), ir.Constant(I64, 0), s)
        last = b.add(last, b.mul(b.sub(n, ir.Constant(I64, 1)), s))
    itemsize = view.type.dtype.itemsize
    return b.add(b.ptrtoint(v.ptr, I64), b.mul(last, ir.Constant(I64, itemsize)))


def _i64(b, x):
    if isinstance(x, ir.Constant):
        return ir.Constant(I64, x.constant)
    return x if x.type.width == 64 else b.sext(x, I64)


def zero_block(ctx) -> ir.Value:
    """16 zero bytes of global memory, 16-byte aligned: what a read past the view reads instead."""
    g = ctx.module.globals.get("__tilec_zero16")
    if g is None:
        ty = ir.ArrayType(ir.IntType(8), 16)
        g = ir.GlobalVariable(ctx.module, ty, name="__tilec_zero16", addrspace=1)
        g.global_constant, g.linkage, g.align = True, "internal", 16
        g.initializer = ir.Constant(ty, bytearray(16))
    return g


def fits(ctx, ptr: ir.Value, nbytes: int, end: ir.Value) -> ir.Value:
    """i1: the `nbytes` at `ptr` end at or before `end` (one unsigned compare)."""
    b = ctx.builder
    return b.icmp_unsigned("<=", b.ptrtoint(ptr, I64), b.sub(end, ir.Constant(I64, nbytes)))


def read_pieces(ctx, ptr: ir.Value, vty: ir.Type, end: ir.Value, unit: int):
    """The `vty` (2 to 16 bytes) at `ptr` (aligned to its size) read in the pieces that end
    at or before `end`: its whole 4-byte words, and the first 1 to 3 bytes (units of `unit`
    bytes: 1, 2 or 4) of the word that `end` cuts; zero past `end`. One inline-PTX block
    of predicated loads (no branch: ptxas sees straight-line code)."""
    b = ctx.builder
    nbytes = bit_width(vty) // 8
    unit = min(unit, 4, nbytes)
    words = max(1, nbytes // 4)
    small = nbytes < 4
    outs = [f"${i}" for i in range(words)]
    p, e = f"${words}", f"${words + 1}"
    lines = ["{", ".reg .pred %bq;", ".reg .b64 %bn;", ".reg .b32 %bu;", f"sub.s64 %bn, {e}, {p};"]
    lines += [f"mov.b{16 if small else 32} {w}, 0;" for w in outs]
    if small:  # 2 bytes of 1-byte elements: the first alone
        lines += ["setp.ge.s64 %bq, %bn, 2;", f"@%bq ld.global.b16 {outs[0]}, [{p}];",
                  "setp.eq.s64 %bq, %bn, 1;", f"@%bq ld.global.u8 %bu, [{p}];", f"@%bq cvt.u16.u32 {outs[0]}, %bu;"]
    for k, w in enumerate(outs if not small else []):   # %bn: the bytes from p to the end
        at = f"[{p}+{4 * k}]" if k else f"[{p}]"
        lines += [f"setp.ge.s64 %bq, %bn, {4 * k + 4};", f"@%bq ld.global.b32 {w}, {at};"]
        if unit <= 2:
            lines += [f"setp.eq.s64 %bq, %bn, {4 * k + 2};", f"@%bq ld.global.u16 {w}, {at};"]
        if unit == 1:
            lines += [f"setp.eq.s64 %bq, %bn, {4 * k + 1};", f"@%bq ld.global.u8 {w}, {at};",
                      f"setp.eq.s64 %bq, %bn, {4 * k + 3};", f"@%bq ld.global.u16 {w}, {at};",
                      f"@%bq ld.global.u8 %bu, [{p}+{4 * k + 2}];", f"@%bq bfi.b32 {w}, %bu, {w}, 16, 8;"]
    wty = ir.IntType(16) if small else I32
    ret = wty if words == 1 else ir.LiteralStructType([wty] * words)
    cons = ",".join([f"={'h' if small else 'r'}"] * words + ["l", "l"])
    r = ctx.inline_asm(ret, "\n".join(lines + ["}"]), cons, [ptr, end])
    if words == 1:
        return b.bitcast(r, vty)
    v = ir.Constant(ir.VectorType(wty, words), ir.Undefined)
    for i in range(words):
        v = b.insert_element(v, b.extract_value(r, i), ir.Constant(I32, i))
    return b.bitcast(v, vty)
