"""Expression handlers: one function per Python AST node type, looked up in `EXPR_HANDLERS`."""
from __future__ import annotations

import ast
import builtins
import types

import numpy as np

from .. import language as lang
from ..definition import KernelDef
from ..dtypes import DType
from ..ir import tile_ops as T
from . import semantic as S
from .context import Undefined
from .values import BoundMethod, TensorValue, ViewShape, ViewValue, is_constexpr, is_py_scalar, py_scalar

__all__ = ["EXPR_HANDLERS", "eval_expr", "lookup_name", "check_global", "require_constexpr"]

EXPR_HANDLERS = {}


def handles(*node_types):
    def deco(fn):
        for t in node_types:
            EXPR_HANDLERS[t] = fn
        return fn
    return deco


def eval_expr(ctx, node):
    return ctx.dispatch(EXPR_HANDLERS, node, _unsupported_message)


_UNSUPPORTED = {
    ast.Lambda: "lambda expressions are not supported in kernels; define a @tc.func helper instead",
    ast.ListComp: "list comprehensions are not supported in kernels; use tc.static_range loops or tile ops",
    ast.SetComp: "set comprehensions are not supported in kernels",
    ast.DictComp: "dict comprehensions are not supported in kernels",
    ast.GeneratorExp: "generator expressions are not supported in kernels; use tc.static_range loops",
    ast.Dict: "dicts are not supported in kernels; use tuples or separate variables",
    ast.Set: "sets are not supported in kernels; use tuples",
    ast.Yield: "yield is not supported in kernels",
    ast.YieldFrom: "yield is not supported in kernels",
    ast.Await: "await is not supported in kernels",
    ast.NamedExpr: "the := operator is not supported in kernels; assign in a separate statement",
    ast.JoinedStr: "f-strings are not supported in kernels; pass values to tc.device_print after a format string",
    ast.Starred: "*-unpacking is not supported here",
}


def _unsupported_message(node) -> str:
    return _UNSUPPORTED.get(type(node), f"{type(node).__name__} expressions are not supported in kernels")


def require_constexpr(ctx, value, what, node=None):
    if not is_constexpr(value):
        got = f"a run-time value of type {value.describe()}" if hasattr(value, "describe") else \
            "a tuple holding run-time values"
        raise ctx.error(f"{what} must be a compile-time constant (a tc.constexpr, literal or expression of "
                        f"them), got {got}", node)
    return value


# ----------------------------------------------------------------------------- names and globals
_PY_BUILTINS = {"range": range, "len": len, "min": builtins.min, "max": builtins.max, "abs": builtins.abs,
                "int": int, "float": float, "bool": bool, "print": print, "True": True, "False": False,
                "None": None, "isinstance": isinstance, "tuple": tuple}


def check_global(ctx, name: str, v, node):
    """Globals a kernel may read: constants, tilec objects, @tc.func helpers and modules."""
    if isinstance(v, lang.constexpr):
        return v.value
    if isinstance(v, np.generic) and is_py_scalar(v):
        return py_scalar(v)
    if v is None or isinstance(v, (bool, int, float, str, DType, lang.Func, KernelDef, types.ModuleType)):
        return v
    if v is lang.constexpr or lang.is_builtin(v):
        return v
    if isinstance(v, tuple):
        return tuple(check_global(ctx, name, x, node) for x in v)
    if callable(v):
        raise ctx.error(f"cannot call '{name}' inside a kernel: only tilec functions (tc.*), @tc.func helpers "
                        "and range/len/min/max/abs/int/float/bool can be used (decorate it with @tc.func if it is "
                        "written in the kernel language)", node)
    raise ctx.error(f"global '{name}' (a {type(v).__name__}) cannot be used inside a kernel: only numbers, bools, "
                    "strings, tuples, tilec dtypes, tc.constexpr values, @tc.func helpers and tilec functions "
                    "can be read from globals; pass it as a kernel argument instead", node)


def lookup_name(ctx, name: str, node):
    if name in ctx.scope:
        v = ctx.scope[name]
        if isinstance(v, Undefined):
            raise ctx.error(f"'{name}' {v.why}", node)
        return v
    src = ctx.source
    if name in src.closure:
        return check_global(ctx, name, src.closure[name], node)
    if name in src.globals:
        return check_global(ctx, name, src.globals[name], node)
    if name in _PY_BUILTINS:
        return _PY_BUILTINS[name]
    raise ctx.error(f"undefined name '{name}'", node)


@handles(ast.Name)
def _name(ctx, node):
    if not isinstance(node.ctx, ast.Load):
        raise ctx.error("internal: name in store context evaluated", node)
    return lookup_name(ctx, node.id, node)


@handles(ast.Constant)
def _constant(ctx, node):
    v = node.value
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise ctx.error(f"constants of type {type(v).__name__} are not supported in kernels", node)


@handles(ast.Tuple, ast.List)
def _tuple(ctx, node):
    return tuple(eval_expr(ctx, e) for e in node.elts)


# ----------------------------------------------------------------------------- attributes
_DTYPE_ATTRS = ("is_float", "is_int", "is_signed", "is_bool", "is_fp8", "bits", "itemsize", "name")


@handles(ast.Attribute)
def _attribute(ctx, node):
    base = eval_expr(ctx, node.value)
    attr = node.attr
    if isinstance(base, types.ModuleType):
        if not hasattr(base, attr):
            raise ctx.error(f"module '{base.__name__}' has no attribute '{attr}'", node)
        return check_global(ctx, f"{base.__name__}.{attr}", getattr(base, attr), node)
    if isinstance(base, TensorValue):
        from .methods import tensor_attribute
        return tensor_attribute(ctx, base, attr, node)
    if isinstance(base, ViewValue):
        return _view_attribute(ctx, base, attr, node)
    if isinstance(base, DType) and attr in _DTYPE_ATTRS:
        return getattr(base, attr)
    raise ctx.error(f"{type(base).__name__} value has no attribute '{attr}' usable in a kernel", node)


def _view_attribute(ctx, view: ViewValue, attr, node):
    if attr == "shape":
        return ViewShape(view)
    if attr == "ptr":
        return ctx.value(T.ViewPtrOp, view.value)
    if attr == "dtype":
        return view.dtype
    if attr in ("ndim", "rank"):
        return view.rank
    if attr == "stride":
        from .methods import view_stride
        return BoundMethod("stride", view_stride, view)
    raise ctx.error(f"tensor views have no attribute '{attr}'; use x.shape[d], x.stride(d), x.ptr or x.dtype", node)


# ----------------------------------------------------------------------------- subscripts
@handles(ast.Subscript)
def _subscript(ctx, node):
    base = eval_expr(ctx, node.value)
    if isinstance(base, ViewShape):
        d = _const_index(ctx, eval_expr(ctx, node.slice), base.view.rank, node)
        return view_dim(ctx, base.view, d, "shape")
    if isinstance(base, TensorValue):
        return _index_tile(ctx, base, node.slice)
    if isinstance(base, ViewValue):
        raise ctx.error("tensor views cannot be indexed; read a tile with tc.load(x, index=..., shape=...) or "
                        "gather with tc.load(x.ptr + offsets)", node)
    if isinstance(base, (tuple, str)):
        idx = eval_expr(ctx, node.slice)
        require_constexpr(ctx, idx, "a tuple index", node)
        try:
            return base[idx]
        except (IndexError, TypeError) as e:
            raise ctx.error(f"invalid index {idx!r} into {base!r}: {e}", node) from None
    raise ctx.error(f"{type(base).__name__} values cannot be indexed in a kernel", node)


def _const_index(ctx, idx, rank, node) -> int:
    if not isinstance(idx, int) or isinstance(idx, bool):
        raise ctx.error(f"the dimension must be a constexpr int, got {idx!r}", node)
    if not -rank <= idx < rank:
        raise ctx.error(f"dimension {idx} is out of range for a rank-{rank} view", node)
    return idx % rank


def view_dim(ctx, view: ViewValue, d: int, kind: str):
    if kind == "stride" and view.type.strides[d] is not None:
        return S.constant(ctx, view.type.strides[d], view.type.index)
    return ctx.value(T.ViewDimOp, view.value, dim=d, kind=kind)


def _index_tile(ctx, t: TensorValue, sl):
    """t[None, :], t[:, None], t[..., None]: insert extent-1 dimensions; ':' keeps one."""
    items = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
    kinds = []
    for it in items:
        if isinstance(it, ast.Slice) and it.lower is None and it.upper is None and it.step is None:
            kinds.append("keep")
        elif isinstance(it, ast.Constant) and it.value is None:
            kinds.append("new")
        elif isinstance(it, ast.Constant) and it.value is Ellipsis:
            kinds.append("...")
        else:
            raise ctx.error("tiles can only be indexed with None and ':' (as in t[:, None]) to add dimensions; "
                            "elements are selected with masks, tc.where or reductions", it)
    if kinds.count("...") > 1:
        raise ctx.error("only one ... is allowed in an index", sl)
    keeps = kinds.count("keep")
    if "..." in kinds:
        i = kinds.index("...")
        kinds[i:i + 1] = ["keep"] * (len(t.shape) - keeps)
        keeps = len(t.shape)
    if keeps != len(t.shape):
        raise ctx.error(f"the index keeps {keeps} dimensions of a rank-{len(t.shape)} tile; write one ':' "
                        "per dimension", sl)
    if not t.is_tile and "new" in kinds:
        t = ctx.value(T.SplatOp, t, shape=[1])
        kinds.remove("new")
        kinds.insert(0, "keep")
    for axis, k in enumerate(kinds):
        if k == "new":
            t = ctx.value(T.ExpandDimsOp, t, axis=axis)
    return t


# ----------------------------------------------------------------------------- operators
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
           ast.LShift: "lshift", ast.RShift: "rshift"}


def binop_name(ctx, op, node) -> str:
    name = _BINOPS.get(type(op))
    if name is None:
        raise ctx.error("the @ operator is not supported; use tc.dot(a, b)", node)
    return name


@handles(ast.BinOp)
def _binop(ctx, node):
    lhs = eval_expr(ctx, node.left)
    rhs = eval_expr(ctx, node.right)
    name = binop_name(ctx, node.op, node)
    if isinstance(lhs, tuple) and isinstance(rhs, tuple) and name == "add":
        return lhs + rhs  # tuples may hold tiles: built up in tc.static_range loops
    if isinstance(lhs, (tuple, str)) or isinstance(rhs, (tuple, str)):
        if name in ("add", "mul") and is_constexpr(lhs) and is_constexpr(rhs):
            return S._fold(ctx, {"add": lambda a, b: a + b, "mul": lambda a, b: a * b}[name], lhs, rhs)
        raise ctx.error(f"unsupported operand types for this operator: {type(lhs).__name__} and "
                        f"{type(rhs).__name__}", node)
    return S.binary(ctx, name, lhs, rhs)


_UNARYOPS = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert"}


@handles(ast.UnaryOp)
def _unaryop(ctx, node):
    x = eval_expr(ctx, node.operand)
    if isinstance(node.op, ast.Not):
        return S.logical_not(ctx, x)
    return S.unary(ctx, _UNARYOPS[type(node.op)], x)


_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}


@handles(ast.Compare)
def _compare(ctx, node):
    left = eval_expr(ctx, node.left)
    result = None
    for op, right_node in zip(node.ops, node.comparators):
        right = eval_expr(ctx, right_node)
        if isinstance(op, (ast.Is, ast.IsNot)):
            if not (is_constexpr(left) and is_constexpr(right)):
                raise ctx.error("'is' compares compile-time values only; use == on run-time values", node)
            r = (left is right) if isinstance(op, ast.Is) else (left is not right)
        elif isinstance(op, (ast.In, ast.NotIn)):
            if not (is_constexpr(left) and isinstance(right, (tuple, str))):
                raise ctx.error("'in' works on compile-time tuples and strings only", node)
            r = (left in right) if isinstance(op, ast.In) else (left not in right)
        else:
            r = S.compare(ctx, _CMPOPS[type(op)], left, right)
        result = r if result is None else logical_and(ctx, result, r)
        left = right
    return result


def logical_and(ctx, a, b):
    if is_constexpr(a) and is_constexpr(b):
        return a and b
    if is_constexpr(a):
        return S.to_bool(ctx, b) if a else False
    if is_constexpr(b):
        return S.to_bool(ctx, a) if b else False
    x, y = S.elementwise(ctx, S.to_bool(ctx, a), S.to_bool(ctx, b))
    return ctx.value(T.AndOp, x, y)


def logical_or(ctx, a, b):
    if is_constexpr(a) and is_constexpr(b):
        return a or b
    if is_constexpr(a):
        return True if a else S.to_bool(ctx, b)
    if is_constexpr(b):
        return True if b else S.to_bool(ctx, a)
    x, y = S.elementwise(ctx, S.to_bool(ctx, a), S.to_bool(ctx, b))
    return ctx.value(T.OrOp, x, y)


@handles(ast.BoolOp)
def _boolop(ctx, node):
    """`and`/`or`: short-circuit on constexprs; on run-time values both sides are evaluated."""
    combine = logical_and if isinstance(node.op, ast.And) else logical_or
    result = eval_expr(ctx, node.values[0])
    for v in node.values[1:]:
        if is_constexpr(result):
            if isinstance(node.op, ast.And) and not result:
                return result
            if isinstance(node.op, ast.Or) and result:
                return result
        result = combine(ctx, result, eval_expr(ctx, v))
    return result


@handles(ast.IfExp)
def _ifexp(ctx, node):
    cond = eval_expr(ctx, node.test)
    if is_constexpr(cond):
        return eval_expr(ctx, node.body if cond else node.orelse)
    a, b = eval_expr(ctx, node.body), eval_expr(ctx, node.orelse)
    from .builtins_math import where
    return where(ctx, cond, a, b)


@handles(ast.Call)
def _call(ctx, node):
    from .calls import lower_call
    return lower_call(ctx, node)


@handles(ast.Slice)
def _slice(ctx, node):
    parts = [eval_expr(ctx, p) if p is not None else None for p in (node.lower, node.upper, node.step)]
    for p in parts:
        require_constexpr(ctx, p, "slice bounds", node)
    return slice(*parts)
