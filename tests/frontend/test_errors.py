"""Every user mistake the frontend reports: the message and the line (marked `# ERR`) are asserted."""
import inspect
import linecache

import numpy as np
import pytest

import tilec as tc
from tilec.specialize import parse_signature

from err_marker import err_line

GLOBAL_LIST = [1, 2]
GLOBAL_BLOCK = tc.constexpr(64)


def not_a_tilec_function(x):
    return x


@tc.func
def recurse(x):
    return recurse(x)  # ERR


@tc.func
def helper2(a, b):
    return a + b


def _compile(kernel, sig):
    return kernel.ir(parse_signature(kernel, sig))


def check(kernel, sig, *fragments, line_of=None):
    with pytest.raises(tc.CompilationError) as info:
        _compile(kernel, sig)
    err = info.value
    for f in fragments:
        assert f in err.msg, err.msg
    assert err.loc.line == err_line(line_of or kernel), (err.loc, str(err))
    assert err.loc.file == __file__
    assert err.loc.col >= 1
    text = str(err)
    assert f"{__file__}:{err.loc.line}:{err.loc.col}" in text and "^" in text
    return err


# ----------------------------------------------------------------------------- unsupported constructs
@tc.kernel
def k_try(x):
    try:  # ERR
        pass
    except Exception:
        pass


@tc.kernel
def k_with(x):
    with open("f"):  # ERR
        pass


@tc.kernel
def k_lambda(x):
    f = lambda v: v  # ERR  # noqa: E731


@tc.kernel
def k_listcomp(x):
    a = [i for i in range(3)]  # ERR


@tc.kernel
def k_call_python(x):
    a = not_a_tilec_function(1)  # ERR


@tc.kernel
def k_global_list(x):
    a = GLOBAL_LIST  # ERR


@tc.kernel
def k_class(x):
    class A:  # ERR
        pass


@tc.kernel
def k_global_stmt(x):
    global GLOBAL_LIST  # ERR


@tc.kernel
def k_nested_def(x):
    def inner():  # ERR
        pass


@tc.kernel
def k_print(x):
    print(1)  # ERR


@pytest.mark.parametrize("kernel, fragment", [
    (k_try, "try/except is not supported"),
    (k_with, "with blocks are not supported"),
    (k_lambda, "define a @tc.func helper instead"),
    (k_listcomp, "list comprehensions are not supported"),
    (k_call_python, "cannot call 'not_a_tilec_function'"),
    (k_global_list, "global 'GLOBAL_LIST' (a list) cannot be used"),
    (k_class, "class definitions are not supported"),
    (k_global_stmt, "the global statement is not supported"),
    (k_nested_def, "define a @tc.func at module level"),
    (k_print, "use tc.device_print"),
])
def test_unsupported_constructs(kernel, fragment):
    check(kernel, "x=f32[?]", fragment)


# ----------------------------------------------------------------------------- names, arity, constexprs
@tc.kernel
def k_undefined(x):
    a = y + 1  # ERR  # noqa: F821


@tc.kernel
def k_arity(x):
    a = tc.arange(0, 16, 2, 3)  # ERR


@tc.kernel
def k_keyword(x):
    a = tc.load(x.ptr, maskk=None)  # ERR


@tc.kernel
def k_non_constexpr_shape(x, n):
    a = tc.zeros((n, 4), tc.float32)  # ERR


@tc.kernel
def k_non_constexpr_axis(x, n, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,))
    s = tc.sum(t, axis=n)  # ERR


@tc.kernel
def k_static_range_runtime(x, n):
    for i in tc.static_range(n):  # ERR
        pass


@tc.kernel
def k_func_arity(x):
    a = helper2(1)  # ERR


@tc.kernel
def k_recursion(x):
    a = recurse(1)


@tc.kernel
def k_global_constexpr_ok(x):
    t = tc.zeros((GLOBAL_BLOCK,), tc.float32)
    a = tc.arange(0, GLOBAL_BLOCK) + 1.5  # reading an annotated constexpr global works
    tc.store(x, index=(0,), tile=t + a)
    b = tc.arange(0, 3)  # ERR


def test_undefined_name():
    check(k_undefined, "x=f32[?]", "undefined name 'y'")


def test_wrong_arity_and_keyword():
    check(k_arity, "x=f32[?]", "tc.arange()", "too many positional arguments")
    check(k_keyword, "x=f32[?]", "unexpected keyword argument 'maskk'")
    check(k_func_arity, "x=f32[?]", "helper2()", "missing a required argument: 'b'")


def test_non_constexpr_where_constexpr_needed():
    check(k_non_constexpr_shape, "x=f32[?], n=i32", "must be a compile-time constant")
    check(k_non_constexpr_axis, "x=f32[?], n=i32, BLOCK=16", "axis of tc.sum must be a compile-time constant")
    check(k_static_range_runtime, "x=f32[?], n=i32", "tc.static_range bounds must be a compile-time constant")


def test_recursion_is_reported_in_the_helper():
    check(k_recursion, "x=f32[?]", "recursive call of @tc.func 'recurse'", line_of=recurse)


def test_non_power_of_two_shape_names_the_line():
    check(k_global_constexpr_ok, "x=f32[?]", "not powers of two")


# ----------------------------------------------------------------------------- shapes and types
@tc.kernel
def k_shape_mismatch(x):
    a = tc.arange(0, 16) + tc.arange(0, 32)  # ERR


@tc.kernel
def k_store_dtype(x):
    t = tc.zeros((16,), tc.float32)
    tc.store(x, index=(0,), tile=t)  # ERR


@tc.kernel
def k_dot_shapes(x):
    a = tc.zeros((16, 32), tc.float16)
    b = tc.zeros((16, 16), tc.float16)
    c = tc.dot(a, b)  # ERR


@tc.kernel
def k_float_bitwise(x):
    a = tc.zeros((16,), tc.float32) & 1  # ERR


@tc.kernel
def k_carried_type_change(x, n):
    acc = tc.zeros((16,), tc.float32)
    for i in range(n):
        acc = acc.astype(tc.float16)  # noqa
    tc.store(x, index=(0,), tile=acc)  # the error names the loop below  # noqa


@tc.kernel
def k_if_type_mismatch(x, n):
    if n > 0:  # ERR
        a = tc.zeros((16,), tc.float32)
    else:
        a = tc.zeros((16,), tc.int32)


@tc.kernel
def k_branch_only(x, n):
    if n > 0:
        a = 1.0
    b = a + 1  # ERR


@tc.kernel
def k_loop_only(x, n):
    for i in range(n):
        a = 1.0
    b = a + 1  # ERR


@tc.kernel
def k_assign_view(x):
    x[0] = 1.0  # ERR


@tc.kernel
def k_tile_if(x):
    t = tc.arange(0, 16)
    if t > 3:  # ERR
        pass


@tc.kernel
def k_return_value(x):
    return 1  # ERR


@tc.kernel
def k_return_in_loop(x, n):
    for i in range(n):
        return  # ERR


@tc.kernel
def k_break_static(x):
    for i in tc.static_range(4):
        break  # ERR


def test_shape_and_dtype_mismatches():
    check(k_shape_mismatch, "x=f32[?]", "shapes [16] and [32] cannot be broadcast")
    check(k_store_dtype, "x=f16[?]", "the tile is f32 but the view holds f16", "astype")
    check(k_dot_shapes, "x=f32[?]", "inner dimensions differ")
    check(k_float_bitwise, "x=f32[?]", "needs integer or bool operands, got f32")


def test_loop_carried_type_change():
    with pytest.raises(tc.CompilationError) as info:
        _compile(k_carried_type_change, "x=f16[?], n=i32")
    assert "'acc' changes type from tile<16xf32> to tile<16xf16>" in info.value.msg
    lines, first = inspect.getsourcelines(k_carried_type_change.fn)
    assert info.value.loc.line == first + 3  # the for statement


def test_branch_errors():
    check(k_if_type_mismatch, "x=f32[?], n=i32", "'a' is tile<16xf32> in one branch and tile<16xi32>")
    check(k_branch_only, "x=f32[?], n=i32", "'a' is assigned in only one branch")
    check(k_loop_only, "x=f32[?], n=i32", "'a' is first assigned inside a loop")
    check(k_tile_if, "x=f32[?]", "a run-time if needs a scalar condition")


def test_misc_statement_errors():
    check(k_assign_view, "x=f32[?]", "tc.store(...)", "cannot assign into a view")
    check(k_return_value, "x=f32[?]", "kernels cannot return values")
    check(k_return_in_loop, "x=f32[?], n=i32", "return inside a loop is not supported")
    check(k_break_static, "x=f32[?]", "break is not supported in tc.static_range loops")


# ----------------------------------------------------------------------------- outside kernels, launch errors
def test_builtins_outside_a_kernel():
    with pytest.raises(RuntimeError, match=r"tc.load can only be used inside a @tc.kernel or @tc.func"):
        tc.load(None)
    with pytest.raises(RuntimeError, match="can only be called inside"):
        helper2(1, 2)
    with pytest.raises(TypeError, match=r"launched with a grid"):
        k_try(1)


def test_reserved_parameter_name_is_an_error_at_decoration():
    with pytest.raises(tc.CompilationError, match="'num_warps' has the name of a launch option") as info:
        @tc.kernel
        def bad(x, num_warps):
            pass
    # the caret points at the offending parameter of the (indented) definition
    line = inspect.getsourcelines(test_reserved_parameter_name_is_an_error_at_decoration)[1] + 3
    assert info.value.loc.line == line
    src = linecache.getline(__file__, line)
    assert src[info.value.loc.col - 1:].startswith("num_warps")


def test_no_compiler_traceback_reaches_the_user(monkeypatch):
    monkeypatch.delenv("TILEC_DEBUG", raising=False)
    with pytest.raises(tc.CompilationError) as info:
        _compile(k_undefined, "x=f32[?]")
    assert info.value.__cause__ is None and info.value.__suppress_context__
    frames = [f.name for f in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert not any(n.startswith("_") and n != "_compile" for n in frames[1:]), frames


def test_launch_argument_errors_name_the_parameter():
    x = np.zeros(16, np.float32)
    with tc.interpret():
        with pytest.raises(TypeError, match="missing a required argument: 'n'"):
            k_loop_only[(1,)](x)
        with pytest.raises(TypeError, match="parameter 'n' got a str"):
            k_loop_only[(1,)](x, "3")


@tc.kernel
def k_add(x):
    tc.store(x, index=(0,), tile=tc.zeros((4,), tc.float32) + 1.0)


def test_internal_errors_are_wrapped_unless_debugging(monkeypatch):
    import tilec.frontend.expressions as ex

    def broken(ctx, name, a, b):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(ex.S, "binary", broken)
    monkeypatch.delenv("TILEC_DEBUG", raising=False)
    with pytest.raises(tc.CompilationError, match=r"internal compiler error \(ZeroDivisionError: boom\)") as info:
        _compile(k_add, "x=f32[?]")
    assert info.value.loc.line == inspect.getsourcelines(k_add.fn)[1] + 2
    monkeypatch.setenv("TILEC_DEBUG", "1")
    with pytest.raises(ZeroDivisionError, match="boom"):
        _compile(k_add, "x=f32[?]")
