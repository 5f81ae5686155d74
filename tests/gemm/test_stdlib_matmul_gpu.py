"""tilec.stdlib_kernels.matmul on the GPU (marker gpu): every dtype, odd shapes, column-major
operands, batches, epilogues, against a float64 reference on fresh random data."""
import pytest

from tilec.stdlib_kernels import matmul
from needs import needs

pytestmark = pytest.mark.gpu

torch = needs("torch")

# relative error (to the largest reference magnitude) each operand type allows
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5, "tf32": 5e-3}


def _check(got, want, tol):
    err = (got.double() - want).abs().max().item()
    scale = max(want.abs().max().item(), 1e-30)
    assert err <= tol * scale, f"max error {err} for reference magnitude {scale}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 512), (16, 333, 1000), (77, 131, 45), (1000, 1000, 1000),
                                   (513, 257, 8), (128, 4096, 4096)])
def test_shapes(dtype, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    _check(matmul(a, b), a.double() @ b.double(), TOL[dtype])


@pytest.mark.parametrize("a_t,b_t", [(True, False), (False, True), (True, True)])
def test_column_major_operands(a_t, b_t):
    m, n, k = 300, 200, 260
    a = torch.randn(k, m, device="cuda", dtype=torch.float16).T if a_t else torch.randn(
        m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16).T if b_t else torch.randn(
        k, n, device="cuda", dtype=torch.float16)
    _check(matmul(a, b), a.double() @ b.double(), TOL[torch.float16])


def test_f32_and_tf32():
    a = torch.randn(200, 150, device="cuda")
    b = torch.randn(150, 90, device="cuda")
    want = a.double() @ b.double()
    _check(matmul(a, b), want, TOL[torch.float32])
    _check(matmul(a, b, allow_tf32=True), want, TOL["tf32"])


@pytest.mark.parametrize("shared", ["none", "a", "b"])
def test_batched(shared):
    bsz, m, n, k = 5, 70, 90, 130
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) if shared == "a" else torch.randn(
        bsz, m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) if shared == "b" else torch.randn(
        bsz, k, n, device="cuda", dtype=torch.bfloat16)
    got = matmul(a, b)
    assert got.shape == (bsz, m, n)
    _check(got, a.double() @ b.double(), TOL[torch.bfloat16])


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_epilogues(activation):
    m, n, k = 190, 250, 300
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float32)
    got = matmul(a, b, bias=bias, activation=activation, out=out, out_dtype=torch.float32)
    assert got is out
    want = a.double() @ b.double() + bias.double()
    act = {None: lambda x: x, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
           "silu": torch.nn.functional.silu}[activation]
    _check(got, act(want), TOL[torch.float16])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k,bm,bn,bk,warps", [(1000, 1000, 1000, 128, 128, 64, 8), (777, 3001, 515, 128, 256, 64, 8),
                                                  (300, 300, 300, 64, 64, 32, 4)])
def test_persistent(dtype, m, n, k, bm, bn, bk, warps):
    from tilec.stdlib_kernels.matmul import MatmulConfig
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    for grid in (sm, 7):  # one program per SM, and far fewer programs than tiles
        cfg = MatmulConfig(bm, bn, bk, warps, 4, persistent=True, sm_count=grid)
        want = torch.relu(a.double() @ b.double() + bias.double())
        _check(matmul(a, b, bias=bias, activation="relu", config=cfg), want, TOL[dtype])


def _f8(x, dtype):
    """x scaled into the f8 range, cast; (f8 tensor, scale that undoes it)."""
    s = x.abs().max().item() / (448.0 if dtype == torch.float8_e4m3fn else 57344.0) * 2
    return (x / s).to(dtype), s


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("m,n,k,b_col", [(1000, 1000, 1000, True), (256, 512, 384, True), (77, 131, 256, False)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_f8_with_scales(dtype, m, n, k, b_col, out_dtype):
    a, sa = _f8(torch.randn(m, k, device="cuda"), dtype)
    bt, sb = _f8(torch.randn(n, k, device="cuda"), dtype)
    b = bt.t() if b_col else bt.t().contiguous()
    got = matmul(a, b, scale_a=sa, scale_b=torch.tensor([sb], device="cuda"), out_dtype=out_dtype)
    assert got.dtype == out_dtype
    want = (a.double() * sa) @ (b.double() * sb)
    # f8 wgmma accumulates with fewer mantissa bits than f32 (H200, K = 1000: 1.7e-3 measured)
    _check(got, want, 5e-3 if out_dtype == torch.float32 else 1.6e-2)


@pytest.mark.parametrize("b_col", [True, False])
def test_tf32_on_wgmma_layouts(b_col):
    a = torch.randn(1000, 1024, device="cuda")
    bt = torch.randn(768, 1024, device="cuda")
    b = bt.t() if b_col else bt.t().contiguous()
    _check(matmul(a, b, allow_tf32=True), a.double() @ b.double(), TOL["tf32"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
@pytest.mark.parametrize("m,n,k", [(1000, 520, 264), (1001, 130, 72), (128256, 2048, 1024)])
def test_column_major_a(dtype, out_dtype, m, n, k):
    """matmul(x.T, y), the dW = dYᵀ X of a linear layer's backward: A column-major (on sm_90a
    an M-major wgmma operand, copied by TMA where the rows are 16-byte aligned (M = 1000)
    and through registers where not (M = 1001))."""
    x = torch.randn(k, m, device="cuda", dtype=dtype)
    y = torch.randn(k, n, device="cuda", dtype=dtype)
    got = matmul(x.T, y, out_dtype=out_dtype)
    assert got.dtype == (out_dtype or dtype) and tuple(got.shape) == (m, n)
    # an f32 result holds the f32 accumulation of exact products: only its rounding differs
    _check(got, x.T.double() @ y.double(), 1e-4 if out_dtype is torch.float32 else TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1000, 520, 264), (2000, 1040, 264), (4096, 8192, 2048), (77, 1000, 64)])
def test_column_major_b(dtype, m, n, k):
    """matmul(x, w.T) of a row-major w, a linear layer's forward: B column-major, on sm_90a
    K-major and copied by TMA (square 64 x 64 tiles at 1000 x 520 x 264; 128 x 256 at 4096)."""
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype)
    _check(matmul(x, w.T), x.double() @ w.T.double(), TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_column_major_a_batched(dtype):
    """Each batch entry of x.transpose(1, 2) is a column-major A (one launch each)."""
    x = torch.randn(3, 264, 1000, device="cuda", dtype=dtype)
    y = torch.randn(3, 264, 520, device="cuda", dtype=dtype)
    got = matmul(x.transpose(1, 2), y)
    _check(got, x.transpose(1, 2).double() @ y.double(), TOL[dtype])
