"""Constants, grid ids, views, pointers, loads, stores and atomics.

Vectorization: a load/store whose op carries `_vec = N` (set by the axis_info and
axis-info passes) moves N consecutive register elements with one
`load <N x T>` at N * itemsize alignment; the layout guarantees those elements
are contiguous in memory. Masked accesses branch around the access, so a masked-off
group never touches memory. Where the mask changes inside a group (`_mask_vec` < N,
passes/axis_info.py), a load reads the aligned group if any element is wanted and
selects each element by its own mask (so it may read the rest of an aligned 16-byte
block past a tensor's end: initcheck reports those bytes where nothing wrote them;
docs/runtime.md; with `initcheck`, never past the end of the view the pointers come from:
`_split_at_end`, codegen/bounded.py), and a store writes the group at once only where every
element is wanted, else element by element. A load with an
eviction priority (`evict`) is inline PTX instead: the mask predicates the load.

Replicated layouts (codegen/replication.py): atomics and stores run once per
element, in the owner copy only; an atomic's old values then reach the other
copies by a shuffle (copies within a warp) or through a small static
shared-memory buffer between two barriers (copies across warps).
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import tile_ops as T
from ...ir.types import ScalarType, TileType
from .bounded import fits, read_pieces, source_view, view_end
from .casts import cast_bool
from .realign import read_blocks, shift_blocks
from .rules_gpu import barrier, shuffle
from .types import I8, I32, bit_width
from .walker import rule

__all__ = ["guarded", "owner_masks", "broadcast_from_owners", "CACHE_HINT_PTX"]

CACHE_HINT_PTX = 74  # `.L2::cache_hint` and `createpolicy` (compiler._ptx_needed)


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


def _mask_varies(op, vec: int) -> bool:
    """The mask of a masked access moving `vec` elements at once changes inside a group."""
    return vec > 1 and op.attrs.get("_mask_vec", vec) < vec


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
    per_elem = masked and _mask_varies(op, vec)  # load the group if any element is wanted
    vty = mty if vec == 1 else ir.VectorType(mty, vec)
    b = ctx.builder
    evict = op.attrs.get("evict")
    realigned = vec > op.attrs.get("_aligned_vec", vec)
    # groups that read bytes no mask wants stop at the end of the view they read from
    end = _end_of_view(ctx, op) if ctx.initcheck and (per_elem or realigned) else None
    if realigned:
        return _realigned_load(ctx, op, ptrs, masks, others, vec, vty, evict, end)
    starts = range(0, len(ptrs), vec)

    def pred(g):
        return None if not masked else _fold(b, b.or_, masks[g:g + vec]) if per_elem else masks[g]

    def fallback(g):
        return _pack(b, others[g:g + vec]) if masked else None
    if end is not None:
        preds = [pred(g) for g in starts]

        def reads(read):
            return [read(ptrs[g], vty, pr, fallback(g)) for g, pr in zip(starts, preds)]
        vals = _split_at_end(ctx, end, [(ptrs[g], bit_width(vty) // 8, pr) for g, pr in zip(starts, preds)],
                             lambda: reads(lambda p, t, pr, fb: _read_inside(ctx, p, t, pr, fb, end, dtype.itemsize)),
                             lambda: reads(lambda p, t, pr, fb: _read(ctx, p, t, pr, fb, evict)))
    out = []
    for i, g in enumerate(starts):
        # without initcheck, each group's values right after its read (as the code always had)
        v = vals[i] if end is not None else _read(ctx, ptrs[g], vty, pred(g), fallback(g), evict)
        xs = _unpack(b, v, vec)
        if per_elem:
            xs = [b.select(cast_bool(b, m), x, o) for m, x, o in zip(masks[g:g + vec], xs, others[g:g + vec])]
        out.extend(_from_memory(ctx, x, dtype) for x in xs)
    ctx.set_elems(op.result, out)


def _read(ctx, p, vty, pred, fallback, evict):
    """One access of `vty` at `p` where `pred` holds (None: always), else `fallback`."""
    if evict and _hintable(p, vty):
        return _hinted_load(ctx, p, pred, fallback if pred is not None else None, vty, evict)
    return guarded(ctx, pred, lambda: ctx.builder.load(p, typ=vty, align=bit_width(vty) // 8), fallback)


def _read_inside(ctx, p, vty, pred, fallback, end, itemsize: int):
    """`_read`, of only the bytes before `end` (bounded.read_pieces; zero after them)."""
    return guarded(ctx, pred, lambda: read_pieces(ctx, p, vty, end, itemsize), fallback)


def _split_at_end(ctx, end, accesses, slow, fast):
    """The values `fast()` reads (the plain accesses), or `slow()`'s (read up to `end` only)
    where some access (pointer, bytes, predicate or None) would pass `end`: one branch per
    thread's load, which only threads whose accesses reach the view's end take. Checking
    (or redirecting) each access instead cost ptxas registers too (a predicate or an address
    per access where one base and immediate offsets served; bench/ptx_registers.py)."""
    b = ctx.builder
    past = None
    for p, nbytes, pred in accesses:
        out = b.not_(fits(ctx, p, nbytes, end))
        out = out if pred is None else b.and_(cast_bool(b, pred), out)
        past = out if past is None else b.or_(past, out)
    slow_bb, fast_bb, merge = ctx.new_block("load.tail"), ctx.new_block("load.inside"), ctx.new_block("load.end")
    b.cbranch(past, slow_bb, fast_bb)
    ends = []
    for bb, fn in ((slow_bb, slow), (fast_bb, fast)):
        b.position_at_end(bb)
        vals = fn()
        ends.append((vals, b.block))
        b.branch(merge)
    b.position_at_end(merge)
    out = []
    for i, v in enumerate(ends[0][0]):
        phi = b.phi(v.type)
        for vals, bb in ends:
            phi.add_incoming(vals[i], bb)
        out.append(phi)
    return out


def _realigned_load(ctx, op, ptrs, masks, others, vec: int, vty, evict, end):
    """A `tc.load(realign=True)` whose groups alignment does not prove: each read as the
    two aligned blocks around it (codegen/realign.py), then masked-off elements take
    `other`. end: where the view read ends (`_split_at_end`), or None."""
    dtype = ctx.dtype(op.result.type)
    b = ctx.builder
    uniform = masks is not None and not _mask_varies(op, vec)
    groups = [(g, masks[g:g + vec] if masks is not None else None) for g in range(0, len(ptrs), vec)]

    def read_all(read):
        def read_block(p, wty, pred):
            return read(p, wty, pred, ir.Constant(wty, None))
        read = [read_blocks(ctx, ptrs[g], vty, gm, uniform, read_block) for g, gm in groups]
        return [x for blocks, s in read for x in blocks + [s]]
    fast = lambda: read_all(lambda p, t, pred, fb: _read(ctx, p, t, pred, fb, evict))  # noqa: E731
    if end is None:
        flat = fast()
    else:
        # a group's blocks end at most 2 * its bytes past its first element
        nbytes = 2 * bit_width(vty) // 8
        past = [(ptrs[g], nbytes, _fold(b, b.or_, gm) if gm is not None else None) for g, gm in groups]
        flat = _split_at_end(ctx, end, past,
                             lambda: read_all(lambda p, t, pred, fb: _read_inside(ctx, p, t, pred, fb, end,
                                                                                   dtype.itemsize)), fast)
    read = [(flat[3 * i:3 * i + 2], flat[3 * i + 2]) for i in range(len(groups))]
    out = []
    for (g, gm), (blocks, s) in zip(groups, read):
        xs = _unpack(b, shift_blocks(ctx, blocks, s, vty), vec)
        if gm is not None:
            xs = [b.select(cast_bool(b, m), x, o) for m, x, o in zip(gm, xs, others[g:g + vec])]
        out.extend(_from_memory(ctx, x, dtype) for x in xs)
    ctx.set_elems(op.result, out)


def _end_of_view(ctx, op):
    """view_end of the view a global load's pointers come from, or None (no view known)."""
    ptr = op.operands[0]
    view = source_view(ptr)
    p = ctx.elems(ptr)[0]
    if view is None or not (isinstance(p.type, ir.PointerType) and p.type.addrspace == 1):
        return None
    return view_end(ctx, view)


def _fold(b, combine, masks):
    """`combine` (b.or_, b.and_) over masks; None (always) drops out of an and."""
    bits = [cast_bool(b, m) for m in masks if m is not None]
    if not bits:
        return ir.Constant(ir.IntType(1), 1)
    acc = bits[0]
    for m in bits[1:]:
        acc = combine(acc, m)
    return acc


def _hintable(ptr, vty) -> bool:
    """A global access of 1 to 16 bytes: one `ld.global.L2::cache_hint` (_hinted_load)."""
    return isinstance(ptr.type, ir.PointerType) and ptr.type.addrspace == 1 and bit_width(vty) in (8, 16, 32, 64, 128)


def _hinted_load(ctx, ptr, mask, fallback, vty, evict: str):
    """A load of `vty` from `ptr` whose L2 lines get eviction priority `evict` ("first",
    "last"): `ld.global.L2::cache_hint` with a `createpolicy` operand (sm_80+). Masked:
    `fallback` moved into the destination registers, then the load predicated on `mask`,
    in one straight line (LLVM has no such load; an inline-asm load inside a branch would
    do too, but straight-line code lets ptxas issue several before their first use)."""
    b = ctx.builder
    bits = bit_width(vty)
    small = bits < 32
    wty = ir.IntType(16) if small else I32
    words = 1 if small else bits // 32
    reg, width = ("h", f"b{bits}") if small else ("r", "b32")
    policy = ctx.inline_asm(ir.IntType(64), f"createpolicy.fractional.L2::evict_{evict}.b64 $0, 1.0;", "=l", [],
                            side_effect=False)
    outs = [f"${i}" for i in range(words)]
    dst = outs[0] if words == 1 else "{" + ", ".join(outs) + "}"
    vec = "" if words == 1 else f".v{words}"
    args, cons, text = [], [f"={reg}"] * words, ""
    if mask is not None:
        packed = b.bitcast(b.zext(fallback, wty) if bits == 8 else fallback,
                           wty if words == 1 else ir.VectorType(wty, words))
        args = [packed] if words == 1 else [b.extract_element(packed, ir.Constant(I32, i)) for i in range(words)]
        text = " ".join(f"mov.b{16 if small else 32} ${i}, ${words + i};" for i in range(words)) + f" @${2 * words} "
        args.append(cast_bool(b, mask))
        cons += [reg] * words + ["b"]
    n = len(args) + words
    text += f"ld.global.L2::cache_hint{vec}.{width} {dst}, [${n}], ${n + 1};"
    ret = wty if words == 1 else ir.LiteralStructType([wty] * words)
    r = ctx.inline_asm(ret, text, ",".join(cons + ["l", "l"]), args + [ptr, policy])
    if words == 1:
        return b.trunc(r, vty) if bits == 8 else b.bitcast(r, vty)
    v = ir.Constant(ir.VectorType(wty, words), ir.Undefined)
    for i in range(words):
        v = b.insert_element(v, b.extract_value(r, i), ir.Constant(I32, i))
    return b.bitcast(v, vty)


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
    # copies of an element write the same value: only the owner's store is kept
    preds = owner_masks(ctx, op.operands[0].type, masks if masked else None)
    per_elem = masked and _mask_varies(op, vec)
    for g in range(0, len(ptrs), vec):
        acting = [p for p in preds[g:g + vec] if p is not False]
        if not acting:
            continue

        def emit(p=ptrs[g], v=_pack(b, vals[g:g + vec])):
            return b.store(v, p, align=dtype.itemsize * vec)
        if per_elem:
            _store_group(ctx, ptrs[g:g + vec], vals[g:g + vec], preds[g:g + vec], dtype.itemsize, emit)
        else:
            guarded(ctx, acting[0], emit)  # the mask is uniform over a vector, the owner test is per thread


def _store_group(ctx, ptrs, vals, preds, itemsize: int, emit_vector):
    """A group whose mask varies inside it: one vector store where every element is
    wanted (a row's interior), else each wanted element alone (its edges). A group
    holding copies (False: another register stores them) is never stored whole."""
    b = ctx.builder

    def parts():
        for p, v, pred in zip(ptrs, vals, preds):
            if pred is not False:
                guarded(ctx, pred, lambda p=p, v=v: b.store(v, p, align=itemsize))
    if any(p is False for p in preds):
        parts()
        return
    whole, split, merge = ctx.new_block("group.whole"), ctx.new_block("group.parts"), ctx.new_block("group.end")
    b.cbranch(_fold(b, b.and_, preds), whole, split)
    b.position_at_end(whole)
    emit_vector()
    b.branch(merge)
    b.position_at_end(split)
    parts()
    b.branch(merge)
    b.position_at_end(merge)


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
    if scope == "cluster" and not ctx.target.has_clusters:
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


def owner_masks(ctx, t, masks=None):
    """Per register element of a value of type `t`: False where the register is a copy of
    another register of the thread, else the condition for acting (the element's mask, if
    any, and "this thread is the owner"; None: always)."""
    rep, own = ctx.ownership(t)
    b = ctx.builder
    out = []
    for r, owner in enumerate(rep.reg_owner):
        if owner != r:
            out.append(False)
            continue
        m = cast_bool(b, masks[r]) if masks is not None else None
        out.append(own if m is None else (m if own is None else b.and_(m, own)))
    return out


def broadcast_from_owners(ctx, t, vals):
    """`vals` (valid in the owner copies) with every copy replaced by its owner's value."""
    rep, _ = ctx.ownership(t)
    b = ctx.builder
    if rep.threads_replicated and rep.lane_copies_only:
        src = b.and_(ctx.lane, ir.Constant(I32, 31 & ~rep.lane_mask))
        vals = [shuffle(ctx, v, "idx", src) if rep.reg_owner[r] == r else v for r, v in enumerate(vals)]
    elif rep.threads_replicated:
        vals = _through_shared(ctx, t, rep, vals)
    return [vals[o] for o in rep.reg_owner]


def _through_shared(ctx, t, rep, vals):
    """Owners write each element at its row-major index of a static shared buffer; every
    copy reads it back. The trailing barrier lets the next use overwrite the buffer."""
    b = ctx.builder
    ety = vals[0].type
    if isinstance(t, TileType):
        shape, coords = t.shape, ctx.coords(t)
        index = []
        for cs in coords:
            i = cs[0]
            for c, s in zip(cs[1:], shape[1:]):
                i = b.add(b.mul(i, ir.Constant(I32, s)), c)
            index.append(i)
        numel = 1
        for s in shape:
            numel *= s
    else:
        index, numel = [ir.Constant(I32, 0)], 1
    n = len(ctx.memo.setdefault("bcast_buffers", {}))
    buf = ir.GlobalVariable(ctx.module, ir.ArrayType(ety, numel), name=f"__tilec_bcast{n}", addrspace=3)
    buf.linkage, buf.align = "internal", 16
    buf.initializer = ir.Constant(ir.ArrayType(ety, numel), ir.Undefined)
    ctx.memo["bcast_buffers"][n] = buf

    def slot(i):
        return b.gep(buf, [ir.Constant(I32, 0), i], inbounds=True)
    preds = owner_masks(ctx, t)
    for r, v in enumerate(vals):
        if preds[r] is not False:
            guarded(ctx, preds[r], lambda r=r, v=v: b.store(v, slot(index[r])))
    barrier(ctx)
    out = [b.load(slot(index[r])) if rep.reg_owner[r] == r else None for r in range(len(vals))]
    barrier(ctx)
    return [x if x is not None else out[rep.reg_owner[r]] for r, x in enumerate(out)]


def _result_used(op) -> bool:
    return bool(op.results and op.results[0].uses)


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
    preds = owner_masks(ctx, op.operands[0].type, ctx.elems(op.operands[2]))
    for p, v, pred in zip(ctx.elems(op.operands[0]), ctx.elems(op.operands[1]), preds):
        def emit(p=p, v=v):
            if ptx is not None:
                asm, cons = ptx
                return ctx.inline_asm(v.type, asm, cons, [p, v])
            return b.atomic_rmw(name, p, v, order)
        zero = ir.Constant(v.type, 0 if not d.is_float else 0.0)
        out.append(zero if pred is False else guarded(ctx, pred, emit, zero))
    _set_atomic_result(ctx, op, out)


def _set_atomic_result(ctx, op, out):
    """Old values, from the owner copy into every copy (masked-off elements read 0)."""
    if _result_used(op):
        out = broadcast_from_owners(ctx, op.operands[0].type, out)
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
    preds = owner_masks(ctx, op.operands[0].type, cols[3])
    for p, c, v, pred in zip(*cols[:3], preds):
        def emit(p=p, c=c, v=v):
            if d.is_float:
                c, v = b.bitcast(c, ity), b.bitcast(v, ity)
            old = b.extract_value(b.cmpxchg(p, c, v, order, fail), 0)
            return b.bitcast(old, v.type if not d.is_float else ctx.ltype(op.result.type)) if d.is_float else old
        zero = ir.Constant(ctx.ltype(op.result.type), 0 if not d.is_float else 0.0)
        out.append(zero if pred is False else guarded(ctx, pred, emit, zero))
    _set_atomic_result(ctx, op, out)

