"""GPU tier: the standard library's ops and user kernels on tensors of more than 2**31
elements (f16/bf16, 2**31 + 3 * 4096 elements as 2**19 + 3 rows of 4096), where every
element offset past 2**31 needs 64-bit arithmetic (docs/language.md; the launch picks i64
views, tests/runtime/test_i64_offsets.py). Each op is checked on a few sampled rows, the
rows around element 2**31 and the last rows, against float64 torch on those rows only.

Needs about 13 GB of GPU memory at a time (one input and one output of 4.3 GB, freed after
each test); skips, saying why, where the device has less than 40 GB free. Select them alone
with `-m large`.
"""
from __future__ import annotations

import math

import pytest

import tilec as tc
import tilec.stdlib_kernels as S

pytestmark = [pytest.mark.gpu, pytest.mark.large]

COLS = 4096
ROWS = 2 ** 31 // COLS + 3                  # 524291 rows: 2**31 + 12288 elements
FIRST_PAST = 2 ** 31 // COLS                # row 524288 starts at element 2**31
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
NEED_FREE = 40 * 2 ** 30


@pytest.fixture
def big(torch):
    """A function making fresh (ROWS, cols) random tensors; skips without 40 GB free."""
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info()
    if free < NEED_FREE:
        pytest.skip(f"needs {NEED_FREE / 2 ** 30:.0f} GB of free GPU memory for tensors of 2**31+ elements, "
                    f"{free / 2 ** 30:.1f} GB free")

    def make(dtype, cols=COLS, rows=ROWS):
        return torch.randn((rows, cols), device="cuda", dtype=getattr(torch, dtype))
    yield make
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def sample_rows(torch):
    """The first rows, a middle one, those around element 2**31, the last ones and a few at random."""
    fixed = {0, 1, 2 ** 18 + 5, FIRST_PAST - 1, FIRST_PAST, FIRST_PAST + 1, ROWS - 2, ROWS - 1}
    drawn = set(torch.randint(0, ROWS, (4,)).tolist())
    return torch.tensor(sorted(fixed | drawn), device="cuda")


def close(torch, got, want, dtype, scale=1.0):
    torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype] * scale)


# ----------------------------------------------------------------------------- row-wise ops
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_softmax(torch, big, dtype):
    x = big(dtype)
    y = S.softmax(x)
    idx = sample_rows(torch)
    # scaled by the row length: values near 1, so the tolerance means something
    close(torch, y[idx] * COLS, torch.softmax(x[idx].double(), -1) * COLS, dtype, scale=4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm(torch, big, dtype):
    x = big(dtype)
    w = torch.randn(COLS, device="cuda", dtype=x.dtype)
    b = torch.randn(COLS, device="cuda", dtype=x.dtype)
    y = S.layer_norm(x, w, b)
    idx = sample_rows(torch)
    want = torch.nn.functional.layer_norm(x[idx].double(), (COLS,), w.double(), b.double(), eps=1e-5)
    close(torch, y[idx], want, dtype, scale=8)


def test_rms_norm(torch, big):
    dtype = "bfloat16"
    x = big(dtype)
    w = torch.randn(COLS, device="cuda", dtype=x.dtype)
    y = S.rms_norm(x, w)
    idx = sample_rows(torch)
    x64 = x[idx].double()
    want = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    close(torch, y[idx], want, dtype, scale=8)


def test_cross_entropy(torch, big):
    dtype = "float16"
    logits = big(dtype)
    target = torch.randint(0, COLS, (ROWS,), device="cuda", dtype=torch.int64)
    loss = S.cross_entropy(logits, target, reduction="none")
    idx = sample_rows(torch)
    want = torch.nn.functional.cross_entropy(logits[idx].double(), target[idx], reduction="none")
    close(torch, loss[idx], want, dtype, scale=8)


# ----------------------------------------------------------------------------- elementwise
def test_gelu(torch, big):
    dtype = "bfloat16"
    x = big(dtype)
    y = S.gelu(x)
    idx = sample_rows(torch)
    close(torch, y[idx], torch.nn.functional.gelu(x[idx].double()), dtype)


def test_silu_and_mul(torch, big):
    dtype = "float16"
    x = big(dtype)                                     # 2**31+ elements in, half of that out
    y = S.silu_and_mul(x)
    idx = sample_rows(torch)
    x64 = x[idx].double()
    d = COLS // 2
    close(torch, y[idx], torch.nn.functional.silu(x64[:, :d]) * x64[:, d:], dtype, scale=4)


def test_dropout(torch, big):
    dtype = "bfloat16"
    x = big(dtype)
    p = 0.25                                           # exactly representable in 16 bits: scale 4/3
    y = S.dropout(x, p, seed=20261128)
    idx = sample_rows(torch)
    got, x64 = y[idx].double(), x[idx].double()
    kept = got != 0
    close(torch, got, torch.where(kept, x64 / (1 - p), torch.zeros_like(x64)), dtype, scale=2)
    for r in (FIRST_PAST, ROWS - 1):                   # past 2**31: rows drawn, not left alone
        frac = (y[r] != 0).double().mean().item()
        assert abs(frac - (1 - p)) < 0.05, (r, frac)


# ----------------------------------------------------------------------------- reductions, scans, transpose
def test_sum_and_max_over_rows(torch, big):
    dtype = "float16"
    x = big(dtype)
    idx = sample_rows(torch)
    s = S.sum(x, -1)
    m = S.amax(x, -1)
    x64 = x[idx].double()
    want = x64.sum(-1)
    err = (s[idx].double() - want).abs()
    assert bool((err <= TOL[dtype] * (want.abs() + math.sqrt(COLS))).all()), err.max()
    assert torch.equal(m[idx], x[idx].amax(-1))         # a max is exact


def test_sum_and_max_over_the_long_dimension(torch, big):
    """Over dim 0: every program walks all 2**19 + 3 rows (offsets past 2**31 in its loop)."""
    dtype = "bfloat16"
    x = big(dtype, cols=COLS)
    s = S.sum(x, 0)
    m = S.amax(x, 0)
    want = torch.zeros(COLS, dtype=torch.float64, device="cuda")
    want_max = torch.full((COLS,), float("-inf"), dtype=x.dtype, device="cuda")
    step = 2 ** 16
    for a in range(0, ROWS, step):                      # float64 reference by slabs (2 GB each)
        want += x[a:a + step].double().sum(0)
        want_max = torch.maximum(want_max, x[a:a + step].amax(0))
    err = (s.double() - want).abs()
    assert bool((err <= TOL[dtype] * (want.abs() + math.sqrt(ROWS))).all()), err.max()
    assert torch.equal(m, want_max)


def test_cumsum(torch, big):
    dtype = "bfloat16"
    x = big(dtype)
    c = S.cumsum(x, -1)
    idx = sample_rows(torch)
    want = x[idx].double().cumsum(-1)
    err = (c[idx].double() - want).abs()
    assert bool((err <= TOL[dtype] * (want.abs() + math.sqrt(COLS))).all()), err.max()


def test_transpose(torch, big):
    x = big("float16")
    t = S.transpose(x)                                 # (4096, 2**19 + 3): every column of t is a row of x
    assert tuple(t.shape) == (COLS, ROWS)
    idx = sample_rows(torch)
    assert torch.equal(t[:, idx], x[idx].T)


# ----------------------------------------------------------------------------- user kernels
@tc.kernel
def double_rows(x, out, n_cols, BLOCK: tc.constexpr):
    """A pointer-tile kernel the way docs/language.md writes one: row * stride + columns.
    On views past 2**31 elements the strides are i64, so the row offset is 64-bit."""
    row = tc.program_id(0)
    cols = tc.arange(0, BLOCK)
    m = cols < n_cols
    t = tc.load(x.ptr + row * x.stride(0) + cols, mask=m, other=0.0)
    tc.store(out.ptr + row * out.stride(0) + cols, t * 2, mask=m)


@tc.kernel
def double_flat(x, out, n, BLOCK: tc.constexpr):
    """A flat pointer kernel over a 1-D tensor: the program's first offset in 64 bits (an i32
    `pid * BLOCK` would wrap past 2**31: integer arithmetic is the user's, docs/language.md)."""
    offs = tc.program_id(0).astype(tc.int64) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    tc.store(out.ptr + offs, tc.load(x.ptr + offs, mask=m, other=0.0) * 2, mask=m)


@tc.kernel
def double_view(x, out, BN: tc.constexpr):
    """A view-load kernel: tile (1, BN) at row i, column tile j."""
    i, j = tc.program_id(0), tc.program_id(1)
    tc.store(out, index=(i, j), tile=tc.load(x, index=(i, j), shape=(1, BN)) * 2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pointer_kernel_by_rows(torch, big, dtype):
    x = big(dtype)
    out = torch.empty_like(x)
    double_rows[(ROWS,)](x, out, COLS, BLOCK=COLS)
    idx = sample_rows(torch)
    assert torch.equal(out[idx], x[idx] * 2)


def test_pointer_kernel_flat(torch, big):
    x = big("float16").view(-1)                        # one dimension of 2**31 + 12288 elements
    out = torch.empty_like(x)
    n = x.numel()
    double_flat[(triton_cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    for start in (0, 2 ** 31 - 4096, 2 ** 31, n - 4096):
        assert torch.equal(out[start:start + 4096], x[start:start + 4096] * 2), start


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_view_kernel(torch, big, dtype):
    x = big(dtype)
    out = torch.empty_like(x)
    double_view[(ROWS, COLS // 1024)](x, out, BN=1024)
    idx = sample_rows(torch)
    assert torch.equal(out[idx], x[idx] * 2)


def test_view_kernel_on_a_strided_view(torch, big):
    """Half of each row: 2**30 elements, but the row stride makes the last ones lie past 2**31."""
    base = big("bfloat16")
    x, out = base[:, :COLS // 2], torch.empty((ROWS, COLS // 2), device="cuda", dtype=base.dtype)
    double_view[(ROWS, COLS // 2 // 1024)](x, out, BN=1024)
    idx = sample_rows(torch)
    assert torch.equal(out[idx], x[idx] * 2)


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
