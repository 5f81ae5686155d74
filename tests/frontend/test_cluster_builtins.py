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


@tc.kernel
def gather_kernel(x, out, C: tc.constexpr):
    parts = tc.cluster_gather(tc.sum(tc.load(x, index=(0,), shape=(16,))), C)
    tc.store(out, index=(0,), tile=parts)


@tc.kernel
def gather_tile_kernel(x, out):
    parts = tc.cluster_gather(tc.load(x, index=(0,), shape=(16,)), 2)  # ERR
    tc.store(out, index=(0,), tile=parts)


@tc.kernel
def gather_f16_kernel(x, out):
    parts = tc.cluster_gather(tc.sum(tc.load(x, index=(0,), shape=(16,))).astype(tc.float16), 2)  # ERR
    tc.store(out, index=(0,), tile=parts)


@tc.kernel
def gather_size_kernel(x, out, n):
    parts = tc.cluster_gather(tc.sum(tc.load(x, index=(0,), shape=(16,))), n)  # ERR
    tc.store(out, index=(0,), tile=parts)


@tc.kernel
def gather_size9_kernel(x, out):
    parts = tc.cluster_gather(tc.sum(tc.load(x, index=(0,), shape=(16,))), 9)  # ERR
    tc.store(out, index=(0,), tile=parts)


@tc.kernel
def gather_size3_kernel(x, out):
    parts = tc.cluster_gather(tc.sum(tc.load(x, index=(0,), shape=(16,))), 3)  # ERR
    tc.store(out, index=(0,), tile=parts)


@tc.kernel
def gather_padded_kernel(x, out, C: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(16,))
    m, n = tc.cluster_gather((tc.max(t), tc.sum((t > 0).astype(tc.int32))), C, padding=(float("-inf"), 0))
    tc.store(out, index=(0,), tile=m + n.astype(tc.float32))


@tc.kernel
def gather_pad_count_kernel(x, out):
    t = tc.load(x, index=(0,), shape=(16,))
    m, s = tc.cluster_gather((tc.max(t), tc.sum(t)), 5, padding=0.0)  # ERR
    tc.store(out, index=(0,), tile=m + s)


@tc.kernel
def gather_pad_int_kernel(x, out):
    t = tc.load(x, index=(0,), shape=(16,))
    n = tc.cluster_gather(tc.sum((t > 0).astype(tc.int32)), 6, padding=0.5)  # ERR
    tc.store(out, index=(0,), tile=n.astype(tc.float32))


@tc.kernel
def gather_pad_runtime_kernel(x, out, p):
    parts = tc.cluster_gather(tc.sum(tc.load(x, index=(0,), shape=(16,))), 7, padding=p)  # ERR
    tc.store(out, index=(0,), tile=parts)


def test_cluster_gather_becomes_one_op_with_a_tile_of_the_cluster():
    text = _ir(gather_kernel, "x=f32[?], out=f32[?], C=4")
    assert "tile.cluster_gather" in text and "{size = 4} : tile<4xf32>" in text


def test_cluster_gather_of_3_5_6_7_programs_pads_to_a_power_of_two():
    text = _ir(gather_padded_kernel, "x=f32[?], out=f32[?], C=5")
    assert "{size = 5, padding = [-inf, 0]} : tile<8xf32>, tile<8xi32>" in text
    # a power-of-two cluster has no entry to pad: the padding is dropped
    text = _ir(gather_padded_kernel, "x=f32[?], out=f32[?], C=4")
    gather = next(line for line in text.splitlines() if "tile.cluster_gather" in line)
    assert "{size = 4} : tile<4xf32>, tile<4xi32>" in gather


@pytest.mark.parametrize("kernel,sig,fragment", [
    (gather_tile_kernel, "x=f32[?], out=f32[?]", "value must be a scalar, got a tile of shape [16]"),
    (gather_f16_kernel, "x=f16[?], out=f16[?]", "takes f32 or i32 scalars, got f16"),
    (gather_size_kernel, "x=f32[?], out=f32[?], n=i32", "size must be a compile-time constant"),
    (gather_size9_kernel, "x=f32[?], out=f32[?]", "size must be the launch's cluster (1 to 8), got 9"),
    (gather_size3_kernel, "x=f32[?], out=f32[?]", "of 3 programs returns tiles of 4 entries: give `padding=`"),
    (gather_pad_count_kernel, "x=f32[?], out=f32[?]", "padding must match its value: a tuple of 2 numbers, got 0.0"),
    (gather_pad_int_kernel, "x=f32[?], out=f32[?]", "padding for an i32 value must be an int, got 0.5"),
    (gather_pad_runtime_kernel, "x=f32[?], out=f32[?], p=f32", "padding must be a compile-time constant"),
])
def test_cluster_gather_mistakes(kernel, sig, fragment):
    _check(kernel, sig, fragment)
