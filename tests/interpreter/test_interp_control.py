"""Control flow, device_print, device_assert, errors and speed of the interpreter."""
import time

import numpy as np
import pytest

from interp_helpers import T, build, const, dt, scalar, tile, view
from tilec.errors import InterpreterError
from tilec.interpreter import run
from tilec.ir import Block, Builder, Region


def region(arg_types, fn):
    """A one-block region; fn(builder, *args) returns the values its terminator yields."""
    blk = Block(list(arg_types))
    b = Builder().at_end(blk)
    out = fn(b, *blk.args)
    if isinstance(out, tuple) and out and out[0] == "condition":
        b.create(T.ConditionOp, *out[1:])
    else:
        b.create(T.YieldOp, *(out or []))
    return Region([blk])


def store_scalar(b, out, k, v):
    b.create(T.StoreOp, b.value(T.AddPtrOp, b.value(T.ViewPtrOp, out), const(b, k, dt.int32)), v)


def test_for_loop_with_carried_values_and_runtime_bounds():
    # acc = 0; for i in range(lb, ub, step): acc = acc * 3 + i   (and a tile carried alongside)
    def body(b, out, lb, ub, step):
        i32, t4 = scalar(dt.int32), tile([4], dt.int32)
        loop = b.create(T.ForOp, lb, ub, step, const(b, 0, dt.int32), const(b, 1, dt.int32, [4]),
                        regions=[region([i32, i32, t4], lambda r, i, acc, t: [
                            r.value(T.AddOp, r.value(T.MulOp, acc, const(r, 3, dt.int32)), i),
                            r.value(T.AddOp, t, r.value(T.SplatOp, i, shape=[4]))])])
        store_scalar(b, out, 0, loop.results[0])
        store_scalar(b, out, 1, b.value(T.ReduceOp, loop.results[1], axis=0, kind="sum"))

    m = build([view(dt.int32, 1)] + [scalar(dt.int32)] * 3, body)
    for lb, ub, step in [(0, 5, 1), (2, 11, 3), (5, 0, 1), (10, 0, -3)]:
        out = np.zeros(2, np.int32)
        run(m, [out, lb, ub, step], (1,))
        acc, total = 0, 0
        for i in range(lb, ub, step):
            acc, total = acc * 3 + i, total + i
        assert out.tolist() == [acc, 4 + 4 * total]
    with pytest.raises(InterpreterError, match="loop step is zero"):
        run(m, [out, 0, 4, 0], (1,))


def test_while_loop_collatz_steps():
    def body(b, out, n0):
        i32 = scalar(dt.int32)

        def before(r, n, steps):
            return ("condition", r.value(T.CmpOp, n, const(r, 1, dt.int32), pred="ne"), n, steps)

        def after(r, n, steps):
            odd = r.value(T.CmpOp, r.value(T.ModOp, n, const(r, 2, dt.int32)), const(r, 1, dt.int32), pred="eq")
            nxt = r.create(T.IfOp, odd, result_types=[i32], regions=[
                region([], lambda q: [q.value(T.AddOp, q.value(T.MulOp, n, const(q, 3, dt.int32)), const(q, 1, dt.int32))]),
                region([], lambda q: [q.value(T.FloorDivOp, n, const(q, 2, dt.int32))])])
            return [nxt.results[0], r.value(T.AddOp, steps, const(r, 1, dt.int32))]

        w = b.create(T.WhileOp, n0, const(b, 0, dt.int32), result_types=[i32, i32],
                     regions=[region([i32, i32], before), region([i32, i32], after)])
        store_scalar(b, out, 0, w.results[1])

    m = build([view(dt.int32, 1), scalar(dt.int32)], body)
    out = np.zeros(1, np.int32)
    run(m, [out, 27], (1,))
    assert out[0] == 111


def test_if_without_results_and_early_return():
    # programs with an even id store their id; the others return early before storing -1
    def body(b, out):
        pid = b.value(T.ProgramIdOp, axis=0)
        odd = b.value(T.CmpOp, b.value(T.ModOp, pid, const(b, 2, dt.int32)), const(b, 1, dt.int32), pred="eq")
        blk = Block([])
        Builder().at_end(blk).create(T.ReturnOp)
        b.create(T.IfOp, odd, result_types=[], regions=[Region([blk]), region([], lambda r: [])])
        p = b.value(T.AddPtrOp, b.value(T.ViewPtrOp, out), pid)
        b.create(T.StoreOp, p, pid)

    out = np.full(6, -1, np.int32)
    run(build([view(dt.int32, 1)], body), [out], (6,))
    assert out.tolist() == [0, -1, 2, -1, 4, -1]


def test_device_print_format(capsys):
    """The lines the GPU's vprintf writes: one per tile element, floats as %f."""
    def body(b, x):
        m = b.value(T.ReshapeOp, b.value(T.ArangeOp, start=0, end=4), shape=[2, 2])
        b.create(T.PrintOp, b.value(T.ProgramIdOp, axis=1), x, m, fmt="vals:")
        b.create(T.PrintOp, x, fmt="")

    run(build([scalar(dt.float32)], body), [0.5], (1, 2))
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == [
        "pid (0, 0, 0) idx (0, 0) vals: 0 0.500000 0",
        "pid (0, 0, 0) idx (0, 1) vals: 0 0.500000 1",
        "pid (0, 0, 0) idx (1, 0) vals: 0 0.500000 2",
        "pid (0, 0, 0) idx (1, 1) vals: 0 0.500000 3",
        "pid (0, 0, 0)  0.500000",
    ]
    assert lines[5] == "pid (0, 1, 0) idx (0, 0) vals: 1 0.500000 0" and len(lines) == 10


def test_device_assert_reports_program_and_line():
    def body(b, n):
        pid = b.value(T.ProgramIdOp, axis=0)
        offs = b.value(T.AddOp, b.value(T.SplatOp, pid, shape=[4]), b.value(T.ArangeOp, start=0, end=4))
        b.create(T.AssertOp, b.value(T.CmpOp, offs, b.value(T.SplatOp, n, shape=[4]), pred="lt"),
                 msg="offset past n")

    m = build([scalar(dt.int32)], body)
    run(m, [10], (7,))
    with pytest.raises(InterpreterError) as e:
        run(m, [10], (8,))
    assert str(e.value) == "device_assert failed in program (7, 0, 0) at kern.py:7: offset past n"


def test_numpy_warnings_are_silenced():
    def body(b, out, x):
        z = b.value(T.FloorDivOp, x, const(b, 0, dt.int32))
        f = b.value(T.CastOp, b.value(T.DivOp, const(b, 0.0, dt.float32), const(b, 0.0, dt.float32)), to=dt.int32)
        store_scalar(b, out, 0, b.value(T.AddOp, b.value(T.MulOp, x, x), z))
        store_scalar(b, out, 1, f)

    out = np.zeros(2, np.int32)
    with np.errstate(all="raise"):
        run(build([view(dt.int32, 1), scalar(dt.int32)], body), [out, 2**30], (1,))
    assert out[0] == 0


def test_a_few_thousand_programs_run_quickly():
    n_prog, block = 4096, 64

    def body(b, x, y, out, n):
        pid = b.value(T.ProgramIdOp, axis=0)
        t = b.value(T.AddOp, b.value(T.LoadViewOp, x, pid, shape=[block]), b.value(T.LoadViewOp, y, pid, shape=[block]))
        b.create(T.StoreViewOp, out, pid, b.value(T.MulOp, t, const(b, 0.5, dt.float32, [block])))

    m = build([view(dt.float32, 1)] * 3 + [scalar(dt.int32)], body)
    x = np.random.default_rng(0).standard_normal(n_prog * block - 5).astype(np.float32)
    out = np.zeros_like(x)
    start = time.perf_counter()
    run(m, [x, x, out, x.size], (n_prog,))
    assert time.perf_counter() - start < 2.0
    np.testing.assert_array_equal(out, x)


def test_reduce_generic_runs_structured_combiners_element_by_element():
    """A combiner holding a tile.if cannot run on whole halves; it still gives the tree result."""
    def body(b, out, src):
        t = b.value(T.LoadViewOp, src, const(b, 0, dt.int32), shape=[8])
        i32 = scalar(dt.int32)

        def combine(r, p, q):
            bigger = r.value(T.CmpOp, p, q, pred="gt")
            pick = r.create(T.IfOp, bigger, result_types=[i32], regions=[
                region([], lambda s: [p]), region([], lambda s: [s.value(T.SubOp, q, p)])])
            return [pick.results[0]]

        red = b.value(T.ReduceGenericOp, t, axis=0, regions=[region([i32, i32], combine)])
        store_scalar(b, out, 0, red)

    x = np.array([5, 9, 1, 4, 2, 2, 8, 3], np.int32)
    out = np.zeros(1, np.int32)
    run(build([view(dt.int32, 1), view(dt.int32, 1)], body), [out, x], (1,))
    v = x.tolist()
    while len(v) > 1:
        h = len(v) // 2
        v = [p if p > q else q - p for p, q in zip(v[:h], v[h:])]
    assert out[0] == v[0]


def test_special_constants_compile_without_warnings():
    def body(b, out):
        big = const(b, float("inf"), dt.float8e4m3, [4])  # e4m3 has no inf: NaN
        store_scalar(b, out, 0, b.value(T.CastOp, b.value(T.ReduceOp, big, axis=0, kind="max"), to=dt.float32))

    out = np.zeros(1, np.float32)
    with np.errstate(all="raise"):
        run(build([view(dt.float32, 1)], body), [out], (1,))
    assert np.isnan(out[0])
