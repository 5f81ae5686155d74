"""Loops whose loads are staged through shared memory (tc.range num_stages) on the GPU (marker
gpu, sm_80+): every row of every slot lands where it should, walking up or down, with masks,
-inf padding, several loads per iteration and more programs than rows."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tilec as tc

from needs import needs
from prefetch_kernels import ref_softmax, staged_axpy_rows, staged_column_sums, staged_softmax_rows

NEAR_I32_MAX = '''
import sys
import numpy as np
import tilec as tc
sys.path.insert(0, {tests!r})
from prefetch_kernels import staged_sum_near_i32_max
ub = 2**31 - 257
lb = ub - {n}
x = np.random.default_rng({n}).standard_normal({n}).astype(np.float32)
out = tc.from_numpy(np.zeros(1, np.float32))
staged_sum_near_i32_max[(1,)](tc.from_numpy(x), out, lb, ub, STAGES={stages}, BLOCK=256, num_warps=4)
print("SUM", float(out.to_numpy()[0]), float(x.astype(np.float64).sum()))
'''

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows,cols,grid,stages,warps", [
    (1000, 4093, 132, 3, 8),     # ~8 rows per program, a part-filled tile
    (37, 300, 64, 4, 4),         # more programs than rows: some never load
    (4096, 2048, 264, 2, 4),
    (300, 30001, 132, 2, 32),    # 128 KB tiles: one slot, read first
    (500, 16000, 132, 4, 16),    # 64 KB tiles: 3 slots of the 4 asked for, read first
])
def test_staged_softmax_rows(gpu, rows, cols, grid, stages, warps):
    rng = np.random.default_rng(rows)
    x = (8 * rng.standard_normal((rows, cols))).astype(np.float32)
    x[::7, : cols // 3] = -np.inf
    out = tc.from_numpy(np.zeros_like(x))
    staged_softmax_rows[(grid,)](tc.from_numpy(x), out, STAGES=stages, BLOCK=1 << (cols - 1).bit_length(),
                                 num_warps=warps)
    np.testing.assert_allclose(out.to_numpy(), ref_softmax(x), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("down", [False, True])
@pytest.mark.parametrize("stages", [2, 3])
def test_two_staged_loads_up_and_down(gpu, down, stages):
    rng = np.random.default_rng(stages)
    x = rng.standard_normal((777, 1000)).astype(np.float32)
    y = rng.standard_normal((777, 1000)).astype(np.float32)
    out = tc.from_numpy(np.zeros_like(x))
    staged_axpy_rows[(100,)](tc.from_numpy(x), tc.from_numpy(y), out, DOWN=down, STAGES=stages, BLOCK=1024,
                             num_warps=4)
    np.testing.assert_allclose(out.to_numpy(), 2 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows,block,warps", [(4099, 128, 4), (1000, 16, 4)])   # 16 columns: elements in two threads
def test_staged_column_sums(gpu, rows, block, warps):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 8 * block - 3)).astype(np.float32)
    out = tc.from_numpy(np.zeros(8 * block, np.float32))
    staged_column_sums[(8,)](tc.from_numpy(x), out, STAGES=3, ROWS=8, BLOCK=block, num_warps=warps)
    want = np.zeros(8 * block)
    want[: x.shape[1]] = x.astype(np.float64).sum(0)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n,stages", [(1000, 3), (1000, 4), (300, 3), (2000, 4)])
def test_iterations_past_i32_max_issue_no_copy(gpu, n, stages):
    # The loop ends at 2**31 - 257 with a part-filled last tile of 256: its own last step stays
    # in the i32 range, but the iterations the copies run ahead to, k + 512 and k + 768, wrap
    # to negative values. Were they taken for live ones, their copies would read ~2**32
    # elements before x and fault, so the kernel runs in its own process.
    tests = str(Path(__file__).resolve().parent.parent)
    code = NEAR_I32_MAX.format(tests=tests, n=n, stages=stages)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got, want = (float(v) for v in out.stdout.split("SUM", 1)[1].split())
    assert got == pytest.approx(want, rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("dtype,n", [("float32", 997), ("float32", 998), ("float32", 999), ("bfloat16", 993),
                                     ("bfloat16", 1000)])
def test_ragged_rows_copy_whole_groups(gpu, dtype, n):
    # Rows 1000 elements apart (16-byte aligned) of n columns, n not a multiple of 16: the
    # column mask ends inside a 16-byte group, a prefix of it, so each copy moves the group
    # at once, reading only the wanted elements and filling zeros (softmax's -inf padding
    # then selected in); the columns past n, between the rows, stay untouched.
    torch = needs("torch")
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(n)
    buf = torch.randn((333, 1000), generator=g, device="cuda").to(dt)
    x = buf[:, :n]
    ys = torch.randn((333, 1000), generator=g, device="cuda").to(dt)
    for kernel, args, want in (
            (staged_softmax_rows, (x,), torch.softmax(x.double(), -1)),
            (staged_axpy_rows, (x, ys[:, :n]), 2 * x.double() + ys[:, :n].double())):
        obuf = torch.full((333, 1000), 7.0, device="cuda", dtype=dt)
        out = obuf[:, :n]
        opts = dict(STAGES=3, BLOCK=1024, num_warps=4, **({"DOWN": False} if kernel is staged_axpy_rows else {}))
        kernel[(64,)](*args, out, **opts)
        tol = 1e-5 if dtype == "float32" else 2e-2
        torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
        assert (obuf[:, n:] == 7.0).all()
        ptx = kernel.compile(*args, out, **opts).asm["ptx"]
        # 16-byte copies whose source size is a register (the group's wanted bytes)
        assert re.search(r"cp\.async\.cg\.shared\.global(?:\.L2::\w+)? \[[^]]+\], \[[^]]+\], 16, %r", ptx), n
