"""tc.range: a run-time loop like range; num_stages=S (a constexpr 2 to 8) marks its tile.for for
prefetch_loads. The IR it gives, every mistake the frontend reports (message and `# ERR` line),
and the interpreter running it as range."""

import numpy as np
import pytest

import tilec as tc
from tilec.ir import parse, print_module, verify

from err_marker import err_line

STAGES = tc.constexpr(4)


def _ir(kernel, sig):
    m = kernel.ir(kernel.specialization(sig))
    verify(m)
    assert parse(print_module(m)) == m
    return print_module(m)


def _for_lines(text):
    return [line.strip() for line in text.splitlines() if "= tile.for " in line]


def check(kernel, sig, *fragments):
    with pytest.raises(tc.CompilationError) as info:
        kernel.ir(kernel.specialization(sig))
    err = info.value
    for f in fragments:
        assert f in err.msg, err.msg
    assert err.loc.line == err_line(kernel), (err.loc, str(err))
    assert err.loc.file == __file__
    return err


# ----------------------------------------------------------------------------- the IR
@tc.kernel
def row_sum(x, out, n, BLOCK: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in tc.range(0, n, 1, num_stages=3):
        acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)
    tc.store(out, index=(0,), tile=acc)


@tc.kernel
def stages_from_constexprs(x, out, n, BLOCK: tc.constexpr, S: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in tc.range(n, num_stages=S):
        acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)
    for j in tc.range(0, n, num_stages=STAGES):
        acc += tc.load(x, index=(j,), shape=(BLOCK,), padding=0.0)
    tc.store(out, index=(0,), tile=acc)


@tc.kernel
def no_stages(x, out, n, BLOCK: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in tc.range(0, n, num_stages=1):
        acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)
    for j in tc.range(0, n, num_stages=None):
        acc += tc.load(x, index=(j,), shape=(BLOCK,), padding=0.0)
    for k in tc.range(0, n, 2):
        acc += tc.load(x, index=(k,), shape=(BLOCK,), padding=0.0)
    tc.store(out, index=(0,), tile=acc)


def test_num_stages_is_an_attribute_of_the_loop():
    fors = _for_lines(_ir(row_sum, "x=f32[?], out=f32[?], n=i32, BLOCK=128"))
    assert len(fors) == 1 and fors[0].endswith("{num_stages = 3} ("), fors


def test_num_stages_from_constexpr_parameters_and_globals():
    fors = _for_lines(_ir(stages_from_constexprs, "x=f32[?], out=f32[?], n=i32, BLOCK=128, S=2"))
    assert len(fors) == 2 and fors[0].endswith("{num_stages = 2} (") and fors[1].endswith("{num_stages = 4} ("), fors


def test_one_stage_or_none_gives_a_plain_loop():
    fors = _for_lines(_ir(no_stages, "x=f32[?], out=f32[?], n=i32, BLOCK=128"))
    assert len(fors) == 3 and not any("num_stages" in f for f in fors), fors


# ----------------------------------------------------------------------------- mistakes
@tc.kernel
def k_stages_runtime(x, n):
    for i in tc.range(0, n, num_stages=n):  # ERR
        pass


@tc.kernel
def k_stages_too_many(x, n):
    for i in tc.range(0, n, num_stages=9):  # ERR
        pass


@tc.kernel
def k_stages_zero(x, n):
    for i in tc.range(0, n, num_stages=0):  # ERR
        pass


@tc.kernel
def k_stages_float(x, n):
    for i in tc.range(0, n, num_stages=2.0):  # ERR
        pass


@tc.kernel
def k_stages_bool(x, n):
    for i in tc.range(0, n, num_stages=True):  # ERR
        pass


@tc.kernel
def k_unknown_keyword(x, n):
    for i in tc.range(0, n, foo=1):  # ERR
        pass


@tc.kernel
def k_range_keyword(x, n):
    for i in range(0, n, num_stages=2):  # ERR
        pass


@tc.kernel
def k_static_range_keyword(x):
    for i in tc.static_range(4, num_stages=2):  # ERR
        pass


@tc.kernel
def k_break_with_stages(x, n, BLOCK: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in tc.range(0, n, num_stages=2):  # ERR
        acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)
        if i > 3:
            break
    tc.store(x, index=(0,), tile=acc)


@tc.kernel
def k_range_outside_for(x, n):
    r = tc.range(0, n)  # ERR


def test_num_stages_must_be_a_constexpr_int_from_1_to_8():
    check(k_stages_runtime, "x=f32[?], n=i32", "tc.range num_stages must be a compile-time constant")
    check(k_stages_too_many, "x=f32[?], n=i32", "num_stages must be an int from 1 to 8", "got 9")
    check(k_stages_zero, "x=f32[?], n=i32", "num_stages must be an int from 1 to 8", "got 0")
    check(k_stages_float, "x=f32[?], n=i32", "num_stages must be an int from 1 to 8", "got 2.0")
    check(k_stages_bool, "x=f32[?], n=i32", "num_stages must be an int from 1 to 8", "got True")


def test_keywords():
    check(k_unknown_keyword, "x=f32[?], n=i32", "tc.range() takes positional start, end and step", "num_stages=")
    check(k_range_keyword, "x=f32[?], n=i32", "range() takes positional start, end and step only")
    check(k_static_range_keyword, "x=f32[?]", "tc.static_range() takes positional start, end and step only")


def test_no_break_in_a_staged_loop():
    check(k_break_with_stages, "x=f32[?], n=i32, BLOCK=16", "tc.range loop with num_stages cannot break")


def test_range_only_as_a_for_iterable():
    check(k_range_outside_for, "x=f32[?], n=i32", "tc.range can only be used as the iterable of a for loop")


def test_range_outside_a_kernel():
    with pytest.raises(RuntimeError, match="tc.range can only be used inside a @tc.kernel or @tc.func"):
        tc.range(4)


# ----------------------------------------------------------------------------- the interpreter
@tc.kernel
def staged_sum(x, out, n, BLOCK: tc.constexpr, S: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in tc.range(0, tc.cdiv(n, BLOCK), num_stages=S):
        acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)
    tc.store(out, index=(tc.program_id(0),), tile=acc)


@tc.kernel
def break_without_stages(x, out, n, BLOCK: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in tc.range(0, n):
        if i >= 2:
            break
        acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)
    tc.store(out, index=(0,), tile=acc)


@tc.kernel
def stepped(x, out, start, stop, step, BLOCK: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    count = 0
    for i in tc.range(start, stop, step, num_stages=2):
        acc = acc * 0.5 + tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)  # the order matters
        count += 1
    tc.store(out, index=(0,), tile=acc + count)


def _blocks(x, block):
    padded = np.zeros(-(-x.size // block) * block, np.float32)
    padded[:x.size] = x
    return padded.reshape(-1, block)


@pytest.mark.parametrize("n, block, stages", [(1, 16, 2), (37, 16, 2), (301, 32, 3), (1000, 64, 8)])
def test_staged_loop_runs_as_range(n, block, stages):
    rng = np.random.default_rng(n)
    x = rng.uniform(-1, 1, n).astype(np.float32)
    out = np.zeros(2 * block, np.float32)
    with tc.interpret():
        staged_sum[(2,)](x, out, n, BLOCK=block, S=stages)
    ref = _blocks(x, block).sum(0)
    np.testing.assert_allclose(out, np.concatenate([ref, ref]), rtol=1e-5, atol=1e-5)


def test_break_in_a_range_loop_without_stages():
    x = np.arange(40, dtype=np.float32)
    out = np.zeros(8, np.float32)
    with tc.interpret():
        break_without_stages[(1,)](x, out, 5, BLOCK=8)
    np.testing.assert_allclose(out, x[:8] + x[8:16])


@pytest.mark.parametrize("start, stop, step", [(6, -1, -1), (7, 0, -3), (0, 7, 3), (2, 5, -1), (4, 4, -2)])
def test_run_time_step_including_negative(start, stop, step):
    block = 8
    x = np.random.default_rng(5).uniform(-1, 1, 61).astype(np.float32)
    out = np.zeros(block, np.float32)
    with tc.interpret():
        stepped[(1,)](x, out, start, stop, step, BLOCK=block)
    blocks = _blocks(x, block)
    acc = np.zeros(block, np.float32)
    iters = list(range(start, stop, step))
    for i in iters:
        acc = acc * 0.5 + blocks[i]
    np.testing.assert_allclose(out, acc + len(iters), rtol=1e-5, atol=1e-5)
