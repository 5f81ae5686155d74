"""Statement handlers (one per AST node type, in `STMT_HANDLERS`) and statement lists.

Early exits (`return`, `break`, `continue`) are made structural before lowering:
in `[..., if c: <exits>, rest...]` the rest moves into the branches that do not
always exit (`hoist_exits`), so every exit is the last statement of its path.
"""
from __future__ import annotations

import ast

from .. import dtypes as dt
from ..ir import tile_ops as T
from . import semantic as S
from .expressions import binop_name, eval_expr
from .values import TensorValue, ViewValue, is_constexpr

__all__ = ["STMT_HANDLERS", "lower_block", "lower_function_body", "hoist_exits", "assign_target"]

STMT_HANDLERS = {}
_EXITS = (ast.Return, ast.Break, ast.Continue)


def handles(*node_types):
    def deco(fn):
        for t in node_types:
            STMT_HANDLERS[t] = fn
        return fn
    return deco


# ----------------------------------------------------------------------------- early exits
def always_exits(stmts) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, _EXITS):
        return True
    return isinstance(last, ast.If) and always_exits(last.body) and always_exits(last.orelse)


def may_exit(stmts) -> bool:
    for s in stmts:
        if isinstance(s, _EXITS):
            return True
        if isinstance(s, ast.If) and (may_exit(s.body) or may_exit(s.orelse)):
            return True
    return False


def hoist_exits(stmts):
    """Move the statements after an `if` that may exit into its non-exiting branches."""
    for i, s in enumerate(stmts):
        if isinstance(s, _EXITS):
            return stmts[:i + 1]  # what follows an exit is unreachable
        if isinstance(s, ast.If) and (may_exit(s.body) or may_exit(s.orelse)):
            rest = stmts[i + 1:]
            if not rest:
                return stmts
            body = s.body if always_exits(s.body) else s.body + rest
            orelse = s.orelse if always_exits(s.orelse) else s.orelse + rest
            new = ast.copy_location(ast.If(test=s.test, body=body, orelse=orelse), s)
            return stmts[:i] + [new]
    return stmts


# ----------------------------------------------------------------------------- blocks
def lower_block(ctx, stmts) -> None:
    for s in hoist_exits(list(stmts)):
        lower_stmt(ctx, s)
        if isinstance(s, _EXITS):
            return


def lower_stmt(ctx, node) -> None:
    ctx.dispatch(STMT_HANDLERS, node, _unsupported_message)


def lower_function_body(ctx, fdef: ast.FunctionDef) -> None:
    lower_block(ctx, fdef.body)


_UNSUPPORTED = {
    ast.Try: "try/except is not supported in kernels",
    ast.With: "with blocks are not supported in kernels",
    ast.AsyncWith: "async with is not supported in kernels",
    ast.AsyncFor: "async for is not supported in kernels",
    ast.FunctionDef: "nested function definitions are not supported in kernels; define a @tc.func at module level",
    ast.AsyncFunctionDef: "nested function definitions are not supported in kernels",
    ast.ClassDef: "class definitions are not supported in kernels",
    ast.Global: "the global statement is not supported in kernels; kernels cannot assign globals",
    ast.Nonlocal: "the nonlocal statement is not supported in kernels",
    ast.Delete: "del is not supported in kernels",
    ast.Raise: "raise is not supported in kernels; use tc.device_assert(cond, msg) or tc.static_assert",
    ast.Import: "imports are not supported inside kernels; import at module level",
    ast.ImportFrom: "imports are not supported inside kernels; import at module level",
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = "try/except is not supported in kernels"
if hasattr(ast, "Match"):
    _UNSUPPORTED[ast.Match] = "match statements are not supported in kernels; use if/elif"


def _unsupported_message(node) -> str:
    return _UNSUPPORTED.get(type(node), f"{type(node).__name__} statements are not supported in kernels")


# ----------------------------------------------------------------------------- simple statements
def assign_target(ctx, target, value, node) -> None:
    if isinstance(target, ast.Name):
        if isinstance(value, TensorValue) and not target.id.startswith("__"):
            v = value.value
            if getattr(v, "op", None) is not None and v.name_hint is None:
                v.name_hint = target.id
        ctx.scope[target.id] = value
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        if not isinstance(value, tuple):
            raise ctx.error(f"cannot unpack {_what(value)} into {len(target.elts)} names; only tuples "
                            "(e.g. from a @tc.func returning several values) can be unpacked", node)
        if len(value) != len(target.elts):
            raise ctx.error(f"cannot unpack {len(value)} values into {len(target.elts)} names", node)
        for t, v in zip(target.elts, value):
            assign_target(ctx, t, v, node)
        return
    if isinstance(target, ast.Subscript):
        raise ctx.error("cannot assign into a view or tile element; write memory with tc.store(...) and build "
                        "tiles with tc.where(...)", node)
    if isinstance(target, ast.Attribute):
        raise ctx.error("cannot assign to an attribute inside a kernel", node)
    raise ctx.error(f"cannot assign to {type(target).__name__}", node)


def _what(v) -> str:
    if isinstance(v, (TensorValue, ViewValue)):
        return f"a value of type {v.describe()}"
    return f"a {type(v).__name__}"


@handles(ast.Assign)
def _assign(ctx, node):
    value = eval_expr(ctx, node.value)
    for t in node.targets:
        assign_target(ctx, t, value, node)


@handles(ast.AnnAssign)
def _ann_assign(ctx, node):
    if node.value is None:
        return
    assign_target(ctx, node.target, eval_expr(ctx, node.value), node)


@handles(ast.AugAssign)
def _aug_assign(ctx, node):
    if not isinstance(node.target, ast.Name):
        raise ctx.error("augmented assignment works on plain names only (x += y)", node)
    cur = eval_expr(ctx, ast.copy_location(ast.Name(id=node.target.id, ctx=ast.Load()), node.target))
    rhs = eval_expr(ctx, node.value)
    if isinstance(cur, (tuple, str)) or isinstance(rhs, (tuple, str)):
        if isinstance(node.op, ast.Add) and is_constexpr(cur) and is_constexpr(rhs):
            ctx.scope[node.target.id] = cur + rhs
            return
        raise ctx.error("unsupported augmented assignment on tuples", node)
    ctx.scope[node.target.id] = S.binary(ctx, binop_name(ctx, node.op, node), cur, rhs)


@handles(ast.Expr)
def _expr_stmt(ctx, node):
    if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return  # a docstring
    eval_expr(ctx, node.value)


@handles(ast.Pass)
def _pass(ctx, node):
    pass


@handles(ast.Return)
def _return(ctx, node):
    if ctx.loops:
        raise ctx.error("return inside a loop is not supported; set a flag, break, and return after the loop",
                        node)
    value = eval_expr(ctx, node.value) if node.value is not None else None
    if not ctx.in_func and value is not None:
        raise ctx.error("kernels cannot return values; write results to memory with tc.store", node)
    ctx.scope["__return__"] = value


@handles(ast.Continue)
def _continue(ctx, node):
    if not ctx.loops:
        raise ctx.error("continue outside a loop", node)


@handles(ast.Break)
def _break(ctx, node):
    if not ctx.loops:
        raise ctx.error("break outside a loop", node)
    flag = ctx.loops[-1].break_flag
    if flag is None:
        raise ctx.error("break is not supported in tc.static_range loops (the loop is unrolled); use a "
                        "run-time range() loop or guard the body with an if", node)
    ctx.scope[flag] = S.constant(ctx, True, dt.bool_)


@handles(ast.Assert)
def _assert(ctx, node):
    cond = eval_expr(ctx, node.test)
    msg = eval_expr(ctx, node.msg) if node.msg is not None else ast.unparse(node.test)
    if not isinstance(msg, str):
        raise ctx.error("the assert message must be a string", node)
    if is_constexpr(cond):
        if not cond:
            raise ctx.error(f"static assertion failed: {msg}", node)
        return
    ctx.create(T.AssertOp, S.to_bool(ctx, cond), msg=msg)


@handles(ast.If)
def _if(ctx, node):
    from .control import lower_if
    lower_if(ctx, node)


@handles(ast.For)
def _for(ctx, node):
    from .control import lower_for
    lower_for(ctx, node)


@handles(ast.While)
def _while(ctx, node):
    from .control import lower_while
    lower_while(ctx, node)
