"""tc.cluster_rank, tc.cluster_sync and tc.load(..., multicast=True) in the frontend: the IR
they become and the mistakes they report (with the line, marked `# ERR`)."""
import inspect

import pytest

import tilec as tc
from tilec.ir import parse, verify
from tilec.specialize import parse_signature


def _ir(kernel, sig):
    m = kernel.ir(parse_signature(kernel, sig))
    verify(m)
    assert parse(str(m)) == m
    return str(m)


def _err_line(kernel):
    lines, first = inspect.getsourcelines(kernel.fn)
    return next(first + i for i, text in enumerate(lines) if "# ERR" in text)


def _check(kernel, sig, fragment):
    with pytest.raises(tc.CompilationError) as info:
        kernel.ir(parse_signature(kernel, sig))
    err = info.value
    assert fragment in err.msg, err.msg
    assert err.loc.file == __file__ and err.loc.line == _err_line(kernel), (err.loc, str(err))
    return err


@tc.kernel
def cluster_kernel(x, out):
    r = tc.cluster_rank()
    t = tc.load(x, index=(0,), shape=(16,), multicast=True)
    tc.cluster_sync()
    tc.store(out, index=(r,), tile=t)


@tc.kernel
def plain_load_kernel(x, out):
    tc.store(out, index=(0,), tile=tc.load(x, index=(0,), shape=(16,), multicast=False))


@tc.kernel
def multicast_pointer_kernel(x, out):
    t = tc.load(x.ptr + tc.arange(0, 16), multicast=True)  # ERR
    tc.store(out, index=(0,), tile=t)


@tc.kernel
def multicast_runtime_kernel(x, out, flag):
    t = tc.load(x, index=(0,), shape=(16,), multicast=flag)  # ERR
    tc.store(out, index=(0,), tile=t)


@tc.kernel
def multicast_int_kernel(x, out):
    t = tc.load(x, index=(0,), shape=(16,), multicast=1)  # ERR
    tc.store(out, index=(0,), tile=t)


def test_builtins_become_cluster_ops():
    text = _ir(cluster_kernel, "x=f32[?], out=f32[?]")
    assert "tile.cluster_rank" in text and "tile.cluster_sync" in text
    assert "multicast = true" in text


def test_multicast_false_is_a_plain_load():
    text = _ir(plain_load_kernel, "x=f32[?], out=f32[?]")
    assert "tile.load_view" in text and "multicast" not in text


def test_multicast_on_a_pointer_load():
    _check(multicast_pointer_kernel, "x=f32[?], out=f32[?]", "multicast= is for view loads")


def test_multicast_must_be_a_constexpr():
    _check(multicast_runtime_kernel, "x=f32[?], out=f32[?], flag=i1", "multicast must be a compile-time constant")


def test_multicast_must_be_a_bool():
    _check(multicast_int_kernel, "x=f32[?], out=f32[?]", "multicast must be True or False")
