"""Control flow: `if` on run-time scalars (tile.if), `for` over range (tile.for), `while`
(tile.while), `for` with `break` (a tile.while with a carried flag), and unrolled loops.

Variables that a construct assigns and that exist before it flow through it as
SSA values: branch results of tile.if, loop-carried values of tile.for/while.
A Python number held by such a variable becomes a constant of the type that
the other path gives it (a loop tries once more with the widened type).
"""
from __future__ import annotations

import ast

from .. import dtypes as dt
from .. import language as lang
from ..ir import tile_ops as T
from ..ir.core import Block, Region
from . import semantic as S
from .context import LoopInfo, Undefined
from .expressions import eval_expr, require_constexpr
from .statements import lower_block
from .regions import (MISSING, Carried, hint, run_loop, new_block, show, unify, flatten,
                      materialize, same_struct, unflatten)
from .values import TensorValue, ViewValue, is_constexpr, py_scalar

__all__ = ["lower_if", "lower_for", "lower_while"]

_BRANCH_ONLY = "is assigned in only one branch of a run-time if, so it is not defined after it; assign it " \
               "before the if"
_LOOP_ONLY = "is first assigned inside a loop, so it is not defined after the loop; assign it before the loop"


# ----------------------------------------------------------------------------- if
def _with_block(ctx, block, fn):
    saved = (ctx.builder.block, ctx.builder.index)
    ctx.builder.at_end(block)
    try:
        return fn()
    finally:
        ctx.builder.block, ctx.builder.index = saved


def lower_if(ctx, node):
    cond = eval_expr(ctx, node.test)
    if is_constexpr(cond):
        lower_block(ctx, node.body if cond else node.orelse)
        return
    if isinstance(cond, ViewValue) or (isinstance(cond, TensorValue) and cond.is_tile):
        raise ctx.error("a run-time if needs a scalar condition; for tiles use tc.where(cond, a, b), or reduce "
                        "the condition first (e.g. tc.max(mask) != 0)", node.test)
    c = S.to_bool(ctx, cond)
    before = ctx.scope
    scopes, blocks = [], []
    for stmts in (node.body, node.orelse):
        blk = Block()
        ctx.scope = dict(before)
        _with_block(ctx, blk, lambda: lower_block(ctx, stmts))
        scopes.append(ctx.scope)
        blocks.append(blk)
    ctx.scope = before
    merged, yields = {}, []  # yields: (name, struct, then leaves, else leaves)
    names = list(dict.fromkeys(list(scopes[0]) + list(scopes[1])))
    for name in names:
        a, b = scopes[0].get(name, MISSING), scopes[1].get(name, MISSING)
        if a is b:
            merged[name] = a
            continue
        if a is MISSING or b is MISSING or isinstance(a, Undefined) or isinstance(b, Undefined):
            merged[name] = Undefined(name, _BRANCH_ONLY)
            continue
        sa, la = flatten(a)
        sb, lb = flatten(b)
        if not same_struct(sa, sb):
            raise ctx.error(f"'{name}' holds different kinds of values in the two branches of a run-time if "
                            f"({show(a)} and {show(b)}); only numbers, tiles and tuples of them can differ", node)
        if sa[0] == "const":
            merged[name] = a
            continue
        yields.append((name, sa, la, lb))
    types = []
    for name, _, la, lb in yields:
        types.extend(unify(ctx, name, x, y, node) for x, y in zip(la, lb))
    for bi, blk in enumerate(blocks):
        def emit():
            vals = []
            k = 0
            for name, _, la, lb in yields:
                for leaf in (la if bi == 0 else lb):
                    vals.append(materialize(ctx, leaf, types[k], name, node).value)
                    k += 1
            ctx.builder.insert(T.YieldOp.build(*vals, loc=ctx.loc))
        _with_block(ctx, blk, emit)
    op = ctx.create(T.IfOp, c, result_types=types, regions=[Region([blocks[0]]), Region([blocks[1]])])
    it = iter(TensorValue(r) for r in op.results)
    for name, struct, _, _ in yields:
        merged[name] = unflatten(struct, it)
        hint(merged[name], name)
    ctx.scope.clear()
    ctx.scope.update(merged)


def _assigned_names(stmts):
    names = []
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.append(n.id)
    return list(dict.fromkeys(names))


def _contains_break(stmts) -> bool:
    for s in stmts:
        if isinstance(s, ast.Break):
            return True
        if isinstance(s, ast.If) and (_contains_break(s.body) or _contains_break(s.orelse)):
            return True
    return False


def _finish_scope(ctx, before, body_names, carried, results, hidden=()):
    ctx.scope = before
    for n in body_names:
        if n not in carried.names:
            ctx.scope[n] = Undefined(n, _LOOP_ONLY)
    carried.bind(ctx, results)
    for n in carried.names:
        hint(ctx.scope[n], n)
    for n in hidden:
        ctx.scope.pop(n, None)


def _carried_names(ctx, stmts, exclude=()):
    return [n for n in _assigned_names(stmts)
            if n in ctx.scope and n not in exclude and not isinstance(ctx.scope[n], Undefined)]


# ----------------------------------------------------------------------------- for
def lower_for(ctx, node):
    if node.orelse:
        raise ctx.error("for/else is not supported in kernels", node)
    if not isinstance(node.target, ast.Name):
        raise ctx.error("the loop variable must be a single name", node.target)
    it = node.iter
    callee = eval_expr(ctx, it.func) if isinstance(it, ast.Call) else None
    if callee is lang.static_range or callee is range or callee is lang.range:
        stages = _num_stages(ctx, it, callee)
        args = [eval_expr(ctx, a) for a in it.args]
        if not 1 <= len(args) <= 3:
            raise ctx.error("range takes 1 to 3 arguments (start, end, step)", it)
        if callee is lang.static_range:
            for a in args:
                require_constexpr(ctx, a, "tc.static_range bounds", it)
            try:
                values = tuple(range(*args))
            except (TypeError, ValueError) as e:
                raise ctx.error(f"invalid tc.static_range bounds: {e}", it) from None
            return _unrolled(ctx, node, values)
        lb, ub, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        if is_constexpr(step) and step == 0:
            raise ctx.error("range() step must not be zero", it)
        if _contains_break(node.body):
            if stages is not None:
                raise ctx.error("a tc.range loop with num_stages cannot break (its loads are issued ahead of "
                                "the iterations); use range() or end the loop with its bounds", node)
            return _for_with_break(ctx, node, lb, ub, step)
        return _for_range(ctx, node, lb, ub, step, stages)
    iterable = eval_expr(ctx, it)
    if isinstance(iterable, tuple):
        return _unrolled(ctx, node, iterable)
    raise ctx.error("for loops iterate over range(...), tc.static_range(...) or a compile-time tuple", it)


def _num_stages(ctx, it, callee):
    """The constexpr num_stages of a tc.range loop (None when not given); other keywords are errors."""
    name = {lang.static_range: "tc.static_range", lang.range: "tc.range"}.get(callee, "range")
    stages = None
    for kw in it.keywords:
        if callee is not lang.range or kw.arg != "num_stages":
            allowed = "; tc.range also takes num_stages=" if callee is lang.range else " only"
            raise ctx.error(f"{name}() takes positional start, end and step{allowed}", kw.value)
        stages = py_scalar(require_constexpr(ctx, eval_expr(ctx, kw.value), "tc.range num_stages", kw.value))
        if stages is None:
            continue
        if not isinstance(stages, int) or isinstance(stages, bool) or not 1 <= stages <= 8:
            raise ctx.error(f"tc.range num_stages must be an int from 1 to 8 (or None), got {stages!r}", kw.value)
    return stages if stages is None or stages > 1 else None


def _unrolled(ctx, node, values):
    ctx.loops.append(LoopInfo(None, "static"))
    try:
        for v in values:
            ctx.scope[node.target.id] = v
            lower_block(ctx, node.body)
    finally:
        ctx.loops.pop()


def _bounds(ctx, lb, ub, step, node):
    for v, what in ((lb, "start"), (ub, "end"), (step, "step")):
        if isinstance(v, TensorValue) and (v.is_tile or v.dtype is None or not v.dtype.is_int):
            raise ctx.error(f"range {what} must be an integer scalar, got {v.describe()}", node.iter)
        if not isinstance(v, TensorValue) and not isinstance(py_scalar(v), int):
            raise ctx.error(f"range {what} must be an integer, got {v!r}", node.iter)
    d = None
    for v in (lb, ub, step):
        vd = v.dtype if isinstance(v, TensorValue) else dt.python_scalar_dtype(py_scalar(v))
        d = vd if d is None else dt.promote(d, vd)
    if d.bits < 32:
        d = dt.int32
    return [S.ensure_int_scalar(ctx, v, "range bound", d) for v in (lb, ub, step)]


def _for_range(ctx, node, lb, ub, step, stages=None):
    lb, ub, step = _bounds(ctx, lb, ub, step, node)
    target = node.target.id
    body_names = _assigned_names(node.body)
    carried = Carried(ctx, _carried_names(ctx, node.body, exclude=(target,)), node)
    before = ctx.scope

    def build():
        blk = new_block(carried, [lb.type], [target])
        ctx.scope = dict(before)
        ctx.scope[target] = TensorValue(blk.args[0])
        carried.bind(ctx, [TensorValue(a) for a in blk.args[1:]])
        ctx.loops.append(LoopInfo(None, "for"))
        try:
            _with_block(ctx, blk, lambda: lower_block(ctx, node.body))
        finally:
            ctx.loops.pop()
        leaves = carried.collect(ctx)
        finish = lambda: _with_block(ctx, blk, lambda: ctx.builder.insert(  # noqa: E731
            T.YieldOp.build(*carried.yield_values(ctx, leaves), loc=ctx.loc)))
        return [Region([blk])], leaves, finish

    regions = run_loop(ctx, carried, build)
    ctx.scope = before
    attrs = {} if stages is None else {"num_stages": stages}
    op = ctx.create(T.ForOp, lb, ub, step, *carried.inits, result_types=carried.types, regions=regions, **attrs)
    _finish_scope(ctx, before, body_names + [target], carried, [TensorValue(r) for r in op.results])


def _for_with_break(ctx, node, lb, ub, step):
    """`for i in range(a, b, c)` with a break: a while loop over a hidden counter and a carried flag."""
    lb, ub, step = _bounds(ctx, lb, ub, step, node)
    iv, flag = ctx.fresh_name("iv"), ctx.fresh_name("broke")
    ctx.scope[iv] = lb
    ctx.scope[flag] = S.constant(ctx, False, dt.bool_)
    target = node.target.id

    def cond(ctx):
        i = ctx.scope[iv]
        if step.value.owner is not None and isinstance(step.value.owner, T.ConstantOp):
            up = step.value.owner.attrs["value"] > 0
            return S.compare(ctx, "lt" if up else "gt", i, ub)
        zero = S.constant(ctx, 0, step.dtype)
        up = ctx.value(T.AndOp, S.compare(ctx, "gt", step, zero), S.compare(ctx, "lt", i, ub))
        down = ctx.value(T.AndOp, S.compare(ctx, "lt", step, zero), S.compare(ctx, "gt", i, ub))
        return ctx.value(T.OrOp, up, down)

    def prologue(ctx):
        ctx.scope[target] = ctx.scope[iv]
        ctx.scope[iv] = S.binary(ctx, "add", ctx.scope[iv], step)

    _while_loop(ctx, node, cond, flag, prologue, extra_names=[iv, flag], hidden=[iv, flag])
    ctx.scope[target] = Undefined(target, "is the loop variable; it cannot be used after the loop")


# ----------------------------------------------------------------------------- while
def lower_while(ctx, node):
    if node.orelse:
        raise ctx.error("while/else is not supported in kernels", node)
    flag = None
    if _contains_break(node.body):
        flag = ctx.fresh_name("broke")
        ctx.scope[flag] = S.constant(ctx, False, dt.bool_)
    _while_loop(ctx, node, lambda ctx: eval_expr(ctx, node.test), flag, None,
                extra_names=[flag] if flag else [], hidden=[flag] if flag else [])


def _while_loop(ctx, node, make_cond, flag, prologue, extra_names, hidden):
    names = extra_names + [n for n in _carried_names(ctx, node.body) if n not in extra_names]
    body_names = _assigned_names(node.body)
    carried = Carried(ctx, names, node)
    before = ctx.scope

    def build():
        cond_blk, body_blk = new_block(carried), new_block(carried)
        ctx.scope = dict(before)
        carried.bind(ctx, [TensorValue(a) for a in cond_blk.args])

        def emit_cond():
            c = make_cond(ctx)
            if isinstance(c, TensorValue) and c.is_tile:
                raise ctx.error("a while condition must be a scalar, not a tile", node)
            c = S.to_bool(ctx, c)
            if flag is not None:
                c = ctx.value(T.AndOp, c, ctx.value(T.InvertOp, ctx.scope[flag]))
            ctx.builder.insert(T.ConditionOp.build(c.value, *cond_blk.args, loc=ctx.loc))
        _with_block(ctx, cond_blk, emit_cond)
        ctx.scope = dict(before)
        carried.bind(ctx, [TensorValue(a) for a in body_blk.args])
        ctx.loops.append(LoopInfo(flag, "while"))
        try:
            def body():
                if prologue is not None:
                    prologue(ctx)
                lower_block(ctx, node.body)
            _with_block(ctx, body_blk, body)
        finally:
            ctx.loops.pop()
        leaves = carried.collect(ctx)
        finish = lambda: _with_block(ctx, body_blk, lambda: ctx.builder.insert(  # noqa: E731
            T.YieldOp.build(*carried.yield_values(ctx, leaves), loc=ctx.loc)))
        return [Region([cond_blk]), Region([body_blk])], leaves, finish

    regions = run_loop(ctx, carried, build)
    ctx.scope = before
    op = ctx.create(T.WhileOp, *carried.inits, result_types=carried.types, regions=regions)
    _finish_scope(ctx, before, body_names, carried, [TensorValue(r) for r in op.results], hidden)
