"""Calls inside kernels: tc.* builtins, methods, @tc.func inlining and the few Python builtins."""
from __future__ import annotations

import ast
import builtins
import inspect

from .. import language as lang
from ..definition import KernelDef
from . import semantic as S
from ..errors import CompilationError
from .context import FunctionSource, Undefined
from .expressions import eval_expr, require_constexpr
from .values import BoundMethod, TensorValue, ViewShape, ViewValue, is_constexpr

__all__ = ["BUILTIN_HANDLERS", "builtin_handler", "lower_call", "call_builtin", "inline_func"]

# language builtin (the object users call) -> handler(ctx, node, **arguments)
BUILTIN_HANDLERS = {}


def builtin_handler(*fns):
    def deco(h):
        for fn in fns:
            BUILTIN_HANDLERS[fn] = h
        return h
    return deco


def _eval_args(ctx, node):
    args = []
    for a in node.args:
        if isinstance(a, ast.Starred):
            v = eval_expr(ctx, a.value)
            if not isinstance(v, tuple):
                raise ctx.error("*-unpacking in calls works on compile-time tuples only", a)
            args.extend(v)
        else:
            args.append(eval_expr(ctx, a))
    kwargs = {}
    for k in node.keywords:
        if k.arg is None:
            raise ctx.error("**-unpacking is not supported in kernel calls", k)
        kwargs[k.arg] = eval_expr(ctx, k.value)
    return args, kwargs


def lower_call(ctx, node):
    callee = eval_expr(ctx, node.func)
    args, kwargs = _eval_args(ctx, node)
    if lang.is_builtin(callee):
        return call_builtin(ctx, node, callee, args, kwargs)
    if isinstance(callee, BoundMethod):
        if lang.is_builtin(callee.handler):
            return call_builtin(ctx, node, callee.handler, [callee.self_value] + args, kwargs,
                                display=f".{callee.name}")
        return _call_python_handler(ctx, node, callee, args, kwargs)
    if isinstance(callee, lang.Func):
        return inline_func(ctx, node, callee, args, kwargs)
    if callee is lang.constexpr:
        if len(args) != 1 or kwargs:
            raise ctx.error("tc.constexpr(...) takes one value", node)
        return require_constexpr(ctx, args[0], "tc.constexpr's argument", node)
    if isinstance(callee, KernelDef):
        raise ctx.error(f"kernel '{callee.name}' cannot be called from a kernel; make the shared code a "
                        "@tc.func helper", node)
    py = _PYTHON_BUILTINS.get(callee) if _hashable(callee) else None
    if py is not None:
        return py(ctx, node, args, kwargs)
    name = getattr(callee, "__qualname__", None) or type(callee).__name__
    raise ctx.error(f"cannot call '{name}' inside a kernel: only tilec functions (tc.*), @tc.func helpers "
                    "and range/len/min/max/abs/int/float/bool can be called", node)


def _hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def call_builtin(ctx, node, fn, args, kwargs, display=None):
    handler = BUILTIN_HANDLERS.get(fn)
    name = display or f"tc.{fn.__name__}"
    if handler is None:
        raise ctx.error(f"{name} cannot be called here", node)
    sig = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise ctx.error(f"{name}(): {e}; its signature is {fn.__name__}{sig}", node) from None
    bound.apply_defaults()
    return handler(ctx, node, **bound.arguments)


def _call_python_handler(ctx, node, method: BoundMethod, args, kwargs):
    params = list(inspect.signature(method.handler).parameters)[3:]
    try:
        inspect.signature(method.handler).bind(ctx, node, method.self_value, *args, **kwargs)
    except TypeError as e:
        raise ctx.error(f".{method.name}(): {e}; it takes ({', '.join(params)})", node) from None
    return method.handler(ctx, node, method.self_value, *args, **kwargs)


# ----------------------------------------------------------------------------- @tc.func inlining
def inline_func(ctx, node, func, args, kwargs):
    """Lower the helper's body at the call site with its parameters bound to the arguments."""
    if func in ctx.call_stack:
        chain = " -> ".join(f.name for f in ctx.call_stack + [func])
        raise ctx.error(f"recursive call of @tc.func '{func.name}' ({chain}); helpers are inlined, so "
                        "recursion is not supported", node)
    src = FunctionSource.of(func.fn)
    try:
        bound = func.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise ctx.error(f"{func.name}(): {e}; its signature is {func.name}{func.signature}", node) from None
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    from .statements import lower_function_body
    call_loc = ctx.source.loc(node) if hasattr(node, "lineno") else ctx.loc
    saved = (ctx.scope, ctx.source, ctx.loops, ctx.in_func, ctx.loc)
    ctx.scope, ctx.source, ctx.loops, ctx.in_func = arguments, src, [], True
    ctx.call_stack.append(func)
    try:
        lower_function_body(ctx, src.tree)
        result = ctx.scope.get("__return__")
        if isinstance(result, Undefined):
            raise ctx.error(f"not every path through @tc.func '{func.name}' returns a value", src.tree)
    except CompilationError as e:
        e.add_call_site(call_loc, func.name)  # which call of the helper led here
        raise
    finally:
        ctx.call_stack.pop()
        ctx.scope, ctx.source, ctx.loops, ctx.in_func, ctx.loc = saved
        ctx.builder.loc = ctx.loc
    return result


# ----------------------------------------------------------------------------- Python builtins
def _range(ctx, node, args, kwargs):
    raise ctx.error("range() can only be used as the iterable of a for loop", node)


def _len(ctx, node, args, kwargs):
    if len(args) != 1 or kwargs:
        raise ctx.error("len() takes one argument", node)
    x = args[0]
    if isinstance(x, (tuple, str)):
        return len(x)
    if isinstance(x, ViewShape):
        return x.view.rank
    if isinstance(x, TensorValue) and x.is_tile:
        return x.shape[0]
    raise ctx.error("len() works on tuples, tile shapes and view shapes", node)


def _minmax(which):
    def call(ctx, node, args, kwargs):
        if kwargs or not args:
            raise ctx.error(f"{which}() takes positional arguments only", node)
        if len(args) == 1 and isinstance(args[0], tuple):
            args = list(args[0])
        if all(is_constexpr(a) for a in args):
            try:
                return getattr(builtins, which)(args)
            except TypeError as e:
                raise ctx.error(f"{which}(): {e}", node) from None
        result = args[0]
        for a in args[1:]:
            result = S.binary(ctx, "minimum" if which == "min" else "maximum", result, a)
        return result
    return call


def _abs(ctx, node, args, kwargs):
    if len(args) != 1 or kwargs:
        raise ctx.error("abs() takes one argument", node)
    return S.unary(ctx, "abs", args[0])


def _convert(py_type):
    def call(ctx, node, args, kwargs):
        if len(args) != 1 or kwargs:
            raise ctx.error(f"{py_type.__name__}() takes one argument", node)
        x = args[0]
        if isinstance(x, (TensorValue, ViewValue)):
            raise ctx.error(f"{py_type.__name__}() works on compile-time values only; convert run-time "
                            f"values with x.astype(tc.int32 / tc.float32 / ...)", node)
        try:
            return py_type(x)
        except (TypeError, ValueError) as e:
            raise ctx.error(f"{py_type.__name__}(): {e}", node) from None
    return call


def _print(ctx, node, args, kwargs):
    raise ctx.error("print() cannot be used in a kernel; use tc.device_print(fmt, *values)", node)


def _isinstance(ctx, node, args, kwargs):
    raise ctx.error("isinstance() is not supported in kernels; branch on tc.constexpr parameters instead", node)


_PYTHON_BUILTINS = {
    range: _range, len: _len, builtins.min: _minmax("min"), builtins.max: _minmax("max"),
    builtins.abs: _abs, int: _convert(int), float: _convert(float), bool: _convert(bool),
    tuple: _convert(tuple), print: _print, isinstance: _isinstance,
}
