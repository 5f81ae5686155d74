"""Constants, grid ids, views, pointers, loads, stores and atomics.

Vectorization: a load/store whose op carries `_vec = N` (set by the axis_info and
axis-info passes) moves N consecutive register elements with one
`load <N x T>` at N * itemsize alignment; the layout guarantees those elements
are contiguous in memory and the mask is uniform across them. Masked accesses
branch around the access, so a masked-off lane never touches memory.
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from ...ir.types import ScalarType, TileType
from .casts import arch_number, cast_bool
from .types import I8, I32
from .walker import rule

__all__ = ["guarded"]


@rule(T.ConstantOp)
def _constant(ctx, op):
    t = op.result.type
    c = ctx.const(ctx.dtype(t), op.attrs["value"])
    ctx.set_elems(op.result, [c] * ctx.num_elems(t))


@rule(T.ArangeOp)
def _arange(ctx, op):
    start = op.attrs["start"]
    b = ctx.builder
    ctx.set(op.result, [c[0] if start == 0 else b.add(c[0], ir.Constant(I32, start))
                        for c in ctx.coords(op.result.type)])


_AXES = "xyz"


@rule(T.ProgramIdOp)
def _program_id(ctx, op):
    ctx.set(op.result, ctx.special_reg(f"ctaid.{_AXES[op.attrs['axis']]}"))


@rule(T.NumProgramsOp)
def _num_programs(ctx, op):
    ctx.set(op.result, ctx.special_reg(f"nctaid.{_AXES[op.attrs['axis']]}"))


@rule(T.SplatOp)
def _splat(ctx, op):
    ctx.set(op.result, [ctx.get(op.operands[0])] * ctx.num_elems(op.result.type))


@rule(T.ViewDimOp)
def _view_dim(ctx, op):
    view = ctx.get(op.operands[0])
    ctx.set(op.result, (view.shape if op.attrs["kind"] == "shape" else view.strides)[op.attrs["dim"]])


@rule(T.ViewPtrOp)
def _view_ptr(ctx, op):
    ctx.set(op.result, ctx.get(op.operands[0]).ptr)


@rule(T.AddPtrOp)
def _addptr(ctx, op):
    elem = ctx.ltype(ir_pointee(op.result.type))
    b = ctx.builder
    out = [b.gep(p, [o], source_etype=elem) for p, o in zip(ctx.elems(op.operands[0]), ctx.elems(op.operands[1]))]
    ctx.set_elems(op.result, out)


def ir_pointee(t):
    e = t.element if isinstance(t, TileType) else t
    return ScalarType(e.pointee)


def _vec(op, n: int) -> int:
    v = int(op.attrs.get("_vec", op.attrs.get("vec", 1)) or 1)  # _vec: set by axis_info
    return v if v > 1 and n % v == 0 else 1


def guarded(ctx, mask, emit, fallback=None):
    """Run `emit()` only where `mask` holds; returns its value merged with `fallback`."""
    if mask is None:
        return emit()
    b = ctx.builder
    cur = b.block
    then, merge = ctx.new_block("mask.then"), ctx.new_block("mask.end")
    b.cbranch(cast_bool(b, mask), then, merge)
    b.position_at_end(then)
    val = emit()
    then_end = b.block
    b.branch(merge)
    b.position_at_end(merge)
    if fallback is None:
        return None
    phi = b.phi(val.type)
    phi.add_incoming(val, then_end)
    phi.add_incoming(fallback, cur)
    return phi


def _pack(b, xs):
    if len(xs) == 1:
        return xs[0]
    v = ir.Constant(ir.VectorType(xs[0].type, len(xs)), ir.Undefined)
    for i, x in enumerate(xs):
        v = b.insert_element(v, x, ir.Constant(I32, i))
    return v


def _unpack(b, v, n):
    if n == 1:
        return [v]
    return [b.extract_element(v, ir.Constant(I32, i)) for i in range(n)]


def _load(ctx, op, masked: bool):
    dtype = ctx.dtype(op.result.type)
    mty = _memory_type(ctx, op.result.type)
    ptrs = ctx.elems(op.operands[0])
    masks = ctx.elems(op.operands[1]) if masked else None
    others = [_to_memory(ctx, x, dtype) for x in ctx.elems(op.operands[2])] if masked else None
    vec = _vec(op, len(ptrs))
    vty = mty if vec == 1 else ir.VectorType(mty, vec)
    align = dtype.itemsize * vec
    b = ctx.builder
    out = []
    for g in range(0, len(ptrs), vec):
        def emit(p=ptrs[g]):
            return b.load(p, typ=vty, align=align)
        if masked:
            v = guarded(ctx, masks[g], emit, _pack(b, others[g:g + vec]))
        else:
            v = emit()
        out.extend(_from_memory(ctx, x, dtype) for x in _unpack(b, v, vec))
    ctx.set_elems(op.result, out)


def _memory_type(ctx, t):
    """How an element sits in memory: bools are bytes (a vector of i1 would be bit-packed)."""
    return I8 if ctx.dtype(t) is not None and ctx.dtype(t).is_bool else ctx.ltype(t)


def _to_memory(ctx, x, dtype):
    return ctx.builder.zext(x, I8) if dtype is not None and dtype.is_bool else x


def _from_memory(ctx, x, dtype):
    return cast_bool(ctx.builder, x) if dtype is not None and dtype.is_bool else x


rule(T.LoadOp)(lambda ctx, op: _load(ctx, op, False))
rule(T.LoadMaskedOp)(lambda ctx, op: _load(ctx, op, True))


def _store(ctx, op, masked: bool):
    dtype = ctx.dtype(op.operands[1].type)
    ptrs = ctx.elems(op.operands[0])
    vals = [_to_memory(ctx, x, dtype) for x in ctx.elems(op.operands[1])]
    masks = ctx.elems(op.operands[2]) if masked else None
    vec = _vec(op, len(ptrs))
    b = ctx.builder
    for g in range(0, len(ptrs), vec):
        def emit(p=ptrs[g], v=_pack(b, vals[g:g + vec])):
            return b.store(v, p, align=dtype.itemsize * vec)
        guarded(ctx, masks[g] if masked else None, emit)


rule(T.StoreOp)(lambda ctx, op: _store(ctx, op, False))
rule(T.StoreMaskedOp)(lambda ctx, op: _store(ctx, op, True))

_ORDER = {"relaxed": "monotonic", "acquire": "acquire", "release": "release",
          "acq_rel": "acq_rel", "seq_cst": "seq_cst"}


_SCOPE = {"gpu": 'syncscope("device") ', "cta": 'syncscope("block") ', "cluster": 'syncscope("cluster") ',
          "sys": ""}


def _ordering(op, order=None):
    """LLVM's `[syncscope(...)] ordering` text (llvmlite prints the ordering verbatim)."""
    sem = op.attrs.get("sem", "acq_rel")
    scope = op.attrs.get("scope", "gpu")
    if sem not in _ORDER:
        raise ValueError(f"atomic sem must be one of {', '.join(_ORDER)}, got {sem!r}")
    if scope not in _SCOPE:
        raise ValueError(f"atomic scope must be one of {', '.join(_SCOPE)}, got {scope!r}")
    return _SCOPE[scope] + (order or _ORDER[sem])


_ATOM_OP = {"add": "add", "max": "max", "min": "min", "xchg": "exch", "and": "and", "or": "or", "xor": "xor"}
_REG = {32: "r", 64: "l"}


def _ptx_atom(ctx, kind, d, sem, scope):
    """(asm, constraints) of one PTX `atom` carrying the requested order and scope, or None
    where PTX has no such instruction (LLVM then expands a CAS loop, which keeps them).

    Inline PTX because LLVM's NVPTX backend drops the order of atomicrmw (it writes a
    plain, i.e. relaxed, `atom`)."""
    op = _ATOM_OP[kind]
    if d.is_float:
        if kind != "add" or d.bits not in (32, 64):
            return None
        ty, reg = f"f{d.bits}", "f" if d.bits == 32 else "d"
    elif d.bits in (32, 64):
        if kind in ("max", "min"):
            ty = f"{'s' if d.kind == 'i' else 'u'}{d.bits}"
        elif kind == "add":
            ty = f"u{d.bits}"
        else:
            ty = f"b{d.bits}"
        reg = _REG[d.bits]
    else:
        return None
    ptx_scope = {"gpu": "gpu", "cta": "cta", "cluster": "cluster", "sys": "sys"}[scope]
    if scope == "cluster" and arch_number(ctx.arch) < 90:
        raise ValueError("atomic scope 'cluster' needs sm_90 or newer")
    pre = ""
    if sem == "seq_cst":  # the PTX memory model's mapping of a seq_cst read-modify-write
        pre, sem = f"fence.sc.{ptx_scope}; ", "acq_rel"
    return (f"{pre}atom.{sem}.{ptx_scope}.global.{op}.{ty} $0, [$1], $2;", f"={reg},l,{reg},~{{memory}}")


def _rmw_name(kind, d):
    if d.is_float:
        return {"add": "fadd", "max": "fmax", "min": "fmin", "xchg": "xchg"}.get(kind)
    if kind in ("max", "min"):
        return kind if d.kind == "i" else "u" + kind
    return {"add": "add", "xchg": "xchg", "and": "and", "or": "or", "xor": "xor"}[kind]


@rule(T.AtomicRMWOp)
def _atomic_rmw(ctx, op):
    d = ctx.dtype(op.operands[1].type)
    name = _rmw_name(op.attrs["kind"], d)
    if name is None:
        raise ValueError(f"atomic {op.attrs['kind']} is not defined for {d.name}")
    if d.is_fp8 or d.is_bool:
        raise ValueError(f"atomics on {d.name} are not supported")
    order = _ordering(op)
    ptx = _ptx_atom(ctx, op.attrs["kind"], d, op.attrs.get("sem", "acq_rel"), op.attrs.get("scope", "gpu"))
    b = ctx.builder
    out = []
    for p, v, m in zip(ctx.elems(op.operands[0]), ctx.elems(op.operands[1]), ctx.elems(op.operands[2])):
        def emit(p=p, v=v):
            if ptx is not None:
                asm, cons = ptx
                return ctx.inline_asm(v.type, asm, cons, [p, v])
            return b.atomic_rmw(name, p, v, order)
        out.append(guarded(ctx, m, emit,
                           ir.Constant(v.type, 0 if not d.is_float else 0.0)))
    ctx.set_elems(op.result, out)


@rule(T.AtomicCASOp)
def _atomic_cas(ctx, op):
    d = ctx.dtype(op.operands[2].type)
    sem = _ORDER.get(op.attrs.get("sem", "acq_rel"))
    order = _ordering(op)
    fail = {"acq_rel": "acquire", "release": "monotonic"}.get(sem, sem)  # syncscope goes once, first
    b = ctx.builder
    ity = ir.IntType(d.bits)
    out = []
    cols = [ctx.elems(v) for v in op.operands]
    for p, c, v, m in zip(*cols):
        def emit(p=p, c=c, v=v):
            if d.is_float:
                c, v = b.bitcast(c, ity), b.bitcast(v, ity)
            old = b.extract_value(b.cmpxchg(p, c, v, order, fail), 0)
            return b.bitcast(old, v.type if not d.is_float else ctx.ltype(op.result.type)) if d.is_float else old
        out.append(guarded(ctx, m, emit, ir.Constant(ctx.ltype(op.result.type), 0 if not d.is_float else 0.0)))
    ctx.set_elems(op.result, out)

