"""device_print (vprintf) and device_assert (__assertfail, which prints and traps).

Both are PTX "system calls" that ptxas and the driver resolve. vprintf takes a
C format string and a pointer to the arguments packed as C varargs would be
(floats widened to double, small integers to 32 bits). A print shows each
element once, from its owner copy (codegen/replication.py).
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from ...ir.types import TileType
from .casts import cast_bool, convert
from .rules_memory import guarded, owner_masks
from .types import I32, I64
from .walker import rule
from ...dtypes import float64, int32, uint32

_GENERIC = ir.PointerType()


def _c_arg(ctx, x, d):
    """(value widened per C varargs, printf directive) for one element of dtype `d`."""
    b = ctx.builder
    if d.is_float:
        return convert(b, x, d, float64, ctx.target), "%f"
    if d.is_bool:
        return b.zext(x, I32), "%d"
    if d.bits == 64:
        return x, "%lld" if d.kind == "i" else "%llu"
    wide = int32 if d.kind == "i" else uint32
    return convert(b, x, d, wide, ctx.target), "%d" if d.kind == "i" else "%u"


def _vprintf(ctx, fmt: str, args):
    b = ctx.builder
    vprintf = ctx.declare("vprintf", I32, [_GENERIC, _GENERIC])
    if args:
        sty = ir.LiteralStructType([a.type for a in args])
        # One buffer per argument layout, in the prologue: loops and the elements of a
        # tile reuse it (vprintf has consumed it when it returns).
        bufs = ctx.memo.setdefault("vprintf_buffers", {})
        buf = bufs.get(str(sty))
        if buf is None:
            saved = b.block
            b.position_at_start(ctx.prologue)
            buf = bufs[str(sty)] = b.alloca(sty)
            b.position_at_end(saved)
        for i, a in enumerate(args):
            b.store(a, b.gep(buf, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
        argp = b.addrspacecast(buf, _GENERIC) if buf.type != _GENERIC else buf
    else:
        argp = ir.Constant(_GENERIC, None)
    b.call(vprintf, [ctx.global_string(fmt), argp])


@rule(T.PrintOp)
def _print(ctx, op):
    """One line per element: `pid (x, y, z) idx (i, j) <fmt> v1 v2 ...`; scalars only print
    the program id once."""
    prefix = op.attrs["fmt"].replace("%", "%%")
    vals = op.operands
    tiles = [v for v in vals if isinstance(v.type, TileType)]
    pid = [ctx.special_reg(f"ctaid.{a}") for a in "xyz"]
    n = ctx.num_elems(tiles[0].type) if tiles else 1
    coords = ctx.coords(tiles[0].type) if tiles else None
    # each element once: copies in other registers, lanes or warps stay silent
    preds = owner_masks(ctx, tiles[0].type if tiles else vals[0].type if vals else None)
    for r in range(n):
        if preds[r] is False:
            continue
        args, fmt = list(pid), "pid (%d, %d, %d)"
        if coords is not None:
            fmt += " idx (" + ", ".join("%d" for _ in coords[r]) + ")"
            args.extend(coords[r])
        fmt += " " + prefix
        for v in vals:
            x = ctx.elems(v)[r if isinstance(v.type, TileType) else 0]
            a, directive = _c_arg(ctx, x, ctx.dtype(v.type))
            args.append(a)
            fmt += " " + directive
        guarded(ctx, preds[r], lambda fmt=fmt, args=args: _vprintf(ctx, fmt + "\n", args))


@rule(T.AssertOp)
def _assert(ctx, op):
    b = ctx.builder
    fail = ctx.declare("__assertfail", ir.VoidType(), [_GENERIC, _GENERIC, I32, _GENERIC, I64])
    loc = op.loc
    for c in ctx.elems(op.operands[0]):
        ok = cast_bool(b, c)
        then, cont = ctx.new_block("assert.fail"), ctx.new_block("assert.ok")
        b.cbranch(ok, cont, then)
        b.position_at_end(then)
        b.call(fail, [ctx.global_string(op.attrs["msg"]), ctx.global_string(loc.file),
                      ir.Constant(I32, loc.line), ctx.global_string(ctx.kernel_name), ir.Constant(I64, 1)])
        b.unreachable()
        b.position_at_end(cont)
