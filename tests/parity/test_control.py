"""Control flow (for with carried values, while, if/else, break, continue, early return)
and the debugging ops (device_print's lines, device_assert's message and exit) on both
backends against numpy."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

import tilec as tc
import pytest

BLOCK = 32


@tc.kernel
def row_stats_kernel(x, sums, firsts, steps, n_rows, LIMIT: tc.constexpr, BLOCK: tc.constexpr):
    """Per row: the sum over its tiles (a carried value), the index of the first tile holding
    a value above LIMIT (break), and a Collatz step count (while + if/else on scalars)."""
    row = tc.program_id(0)
    if row >= n_rows:
        return
    n_tiles = tc.cdiv(x.shape[1], BLOCK)
    acc = tc.zeros((1, BLOCK), tc.float32)
    odd_tiles = 0
    for k in range(n_tiles):
        t = tc.load(x, index=(row, k), shape=(1, BLOCK))
        acc += t
        if k % 2 == 0:
            continue
        odd_tiles += 1
    first = -1
    for k in range(n_tiles):
        if tc.max(tc.load(x, index=(row, k), shape=(1, BLOCK), padding=float("-inf"))) > LIMIT:
            first = k
            break
    v = row + 6
    count = 0
    while v != 1:
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        count += 1
    tc.store(sums.ptr + row + tc.arange(0, 1), tc.full((1,), tc.sum(acc) + odd_tiles * 1000.0, tc.float32))
    tc.store(firsts.ptr + row + tc.arange(0, 1), tc.full((1,), first, tc.int32))
    tc.store(steps.ptr + row + tc.arange(0, 1), tc.full((1,), count, tc.int32))


def _collatz(v):
    count = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        count += 1
    return count


def test_loops_branches_break_continue_and_early_return(backend):
    rows, cols, limit = 10, 150, 3.2
    rng = np.random.default_rng(12)
    x = rng.integers(-8, 8, size=(rows, cols)).astype(np.float32) / 4
    x[3, 100] = 4.0   # above LIMIT in tile 3
    x[7, 5] = 5.0     # above LIMIT in tile 0
    x[0, 149] = 3.5   # above LIMIT in the last, partial tile
    sums = np.full(rows + 2, -7.0, np.float32)
    firsts = np.full(rows + 2, -7, np.int32)
    steps = np.full(rows + 2, -7, np.int32)
    # two programs more than rows: they return early and write nothing
    backend.launch(row_stats_kernel, (rows + 2,), x, sums, firsts, steps, rows, LIMIT=limit, BLOCK=BLOCK)
    n_tiles = -(-cols // BLOCK)
    np.testing.assert_array_equal(sums[:rows], x.sum(axis=1) + (n_tiles // 2) * 1000.0)
    above = x > limit
    want_first = np.where(above.any(axis=1), above.argmax(axis=1) // BLOCK, -1)
    np.testing.assert_array_equal(firsts[:rows], want_first)
    np.testing.assert_array_equal(steps[:rows], [_collatz(r + 6) for r in range(rows)])
    np.testing.assert_array_equal(sums[rows:], -7.0)
    np.testing.assert_array_equal(firsts[rows:], -7)


@tc.func
def clipped_mean(t, lo):
    """A helper with two returns: the mean, or `lo` when the mean is below it."""
    m = tc.sum(t) / 8
    if m < lo:
        return lo
    return m


@tc.kernel
def func_return_kernel(x, out, lo):
    pid = tc.program_id(0)
    t = tc.load(x, index=(pid,), shape=(8,))
    tc.store(out.ptr + pid + tc.arange(0, 1), tc.full((1,), clipped_mean(t, lo), tc.float32))


def test_device_function_with_early_returns(backend):
    rng = np.random.default_rng(13)
    x = rng.standard_normal(8 * 6).astype(np.float32)
    out = np.zeros(6, np.float32)
    backend.launch(func_return_kernel, (6,), x, out, -0.1)
    m = x.reshape(6, 8).sum(axis=1) / 8
    np.testing.assert_allclose(out, np.where(m < np.float32(-0.1), np.float32(-0.1), m), rtol=1e-6, atol=1e-7)


@tc.kernel
def print_kernel(x, scale):
    pid = tc.program_id(0)
    t = tc.load(x, index=(pid,), shape=(4,))
    tc.device_print("vals", t, scale * 2)
    tc.device_print("sum", tc.sum(t))


def test_device_print_lines(backend, capfd):
    x = np.array([3, -1, 7, 0, 5, 5, -9, 2], np.int32)
    capfd.readouterr()
    backend.launch(print_kernel, (2,), x, 0.75)
    lines = [ln for ln in capfd.readouterr().out.splitlines() if ln.startswith("pid")]
    want = [f"pid ({p}, 0, 0) idx ({i}) vals {x[4 * p + i]} 1.500000" for p in range(2) for i in range(4)]
    want += [f"pid ({p}, 0, 0) sum {x[4 * p:4 * p + 4].sum()}" for p in range(2)]
    # the GPU delivers vprintf output at synchronization, in no particular order
    assert sorted(lines) == sorted(want)


ASSERT_CHILD = '''
import numpy as np
import tilec as tc

@tc.kernel
def checked_gather(idx, out, n, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    j = tc.load(idx, index=(pid,), shape=(BLOCK,), padding=0)
    tc.device_assert(j < n, "index out of range")
    tc.store(out, index=(pid,), tile=j)

idx = np.arange(64, dtype=np.int32)
idx[45] = 99
out = np.zeros(64, np.int32)
if GPU:
    idx, out = tc.from_numpy(idx), tc.from_numpy(out)
checked_gather[(4,)](idx, out, 64, BLOCK=16)
tc.synchronize() if GPU else None
print("NOT REACHED")
'''


@pytest.mark.slow
def test_device_assert_reports_message_and_fails(backend, tmp_path):
    child = tmp_path / "assert_child.py"
    child.write_text(f"GPU = {backend.gpu}\n" + textwrap.dedent(ASSERT_CHILD))
    env = dict(os.environ, TILEC_INTERPRET="0" if backend.gpu else "1")
    proc = subprocess.run([sys.executable, str(child)], capture_output=True, text=True, env=env, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "NOT REACHED" not in output
    assert "index out of range" in output, output
    assert "assert_child.py" in output, output  # the source file of the failed assert
    if not backend.gpu:
        assert "device_assert failed in program (2, 0, 0)" in output, output
