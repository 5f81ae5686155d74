"""matmul(a, b): C = act(A @ B + bias) on tensor cores, for 2-D and batched 3-D inputs.

One program computes a BM x BN tile of one batch entry's C, walking K in steps
of BK. Operands are read through pointer tiles whose unit-stride dimension is a
constexpr (`A_ROW`: A is K-contiguous, else M-contiguous; `B_ROW`: B is
N-contiguous, else K-contiguous), so both row- and column-major operands give
16-byte accesses, which the compiler turns into cp.async copies `num_stages`
iterations ahead (pipeline_loads). Masks cover any M, N, K. Programs are
numbered in grouped order (tc.swizzle2d) so that the ones running together
share A rows and B columns in L2. The epilogue (bias, activation, cast) runs
on the accumulator's registers before the only store.

The configuration comes from `config_for` (the heuristic is documented there).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import tilec as tc
from tilec import dtypes as _dt

from ._common import as_array, check_float, check_same_place, launch, next_pow2, output, view
from ._rows import INDEX_LIMIT

__all__ = ["matmul", "matmul_kernel", "MatmulConfig", "config_for", "ACTIVATIONS", "SIGNATURES", "OPTIONS"]

ACTIVATIONS = (None, "relu", "gelu", "silu")
SMEM_BUDGET = 160 * 1024   # bytes of operand buffers a config may use (sm_80: 164 KB, sm_90: 227 KB per CTA)
MAX_BATCH = 65535          # grid dimension y


@tc.kernel
def matmul_kernel(a, b, c, bias, M, N, K, sab, sa, sbb, sb, scb, scm,
                  BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr, GROUP_M: tc.constexpr,
                  A_ROW: tc.constexpr, B_ROW: tc.constexpr, HAS_BIAS: tc.constexpr, ACT: tc.constexpr,
                  TF32: tc.constexpr, WIDE: tc.constexpr):
    # sa / sb: A's and B's strides along their non-unit dimension (row stride of a
    # row-major operand, column stride of a column-major one).
    pid = tc.program_id(0)
    bi = tc.program_id(1)
    if WIDE:
        pid = pid.astype(tc.int64)
        bi = bi.astype(tc.int64)
    num_m = tc.cdiv(M, BM)
    num_n = tc.cdiv(N, BN)
    pid_m, pid_n = tc.swizzle2d(pid // num_n, pid % num_n, num_m, num_n, GROUP_M)
    rm = pid_m * BM + tc.arange(0, BM)
    rn = pid_n * BN + tc.arange(0, BN)
    rk = tc.arange(0, BK)
    a_base = a.ptr + bi * sab
    b_base = b.ptr + bi * sbb
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        kk = k * BK + rk
        if A_ROW:
            a_ptrs = a_base + rm[:, None] * sa + kk[None, :]
        else:
            a_ptrs = a_base + rm[:, None] + kk[None, :] * sa
        if B_ROW:
            b_ptrs = b_base + kk[:, None] * sb + rn[None, :]
        else:
            b_ptrs = b_base + kk[:, None] + rn[None, :] * sb
        at = tc.load(a_ptrs, mask=(rm < M)[:, None] & (kk < K)[None, :], other=0.0)
        bt = tc.load(b_ptrs, mask=(kk < K)[:, None] & (rn < N)[None, :], other=0.0)
        acc = tc.dot(at, bt, acc, allow_tf32=TF32)
    if HAS_BIAS:
        acc = acc + tc.load(bias.ptr + rn, mask=rn < N, other=0.0).astype(tc.float32)[None, :]
    if ACT == "relu":
        acc = tc.maximum(acc, 0.0)
    elif ACT == "gelu":
        acc = 0.5 * acc * (1.0 + tc.erf(acc * 0.7071067811865476))
    elif ACT == "silu":
        acc = acc * tc.sigmoid(acc)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    tc.store(c.ptr + bi * scb + rm[:, None] * scm + rn[None, :], acc.astype(c.dtype), mask=mask)


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class MatmulConfig:
    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int
    group_m: int = 8

    def grid(self, m: int, n: int, batch: int) -> Tuple[int, int]:
        return (tc.cdiv(m, self.bm) * tc.cdiv(n, self.bn), batch)


def config_for(m: int, n: int, k: int, dtype, batch: int = 1, sm_count: int = 132,
               tensor_cores: bool = True) -> MatmulConfig:
    """The tile configuration for an (m x k) @ (k x n) product of `batch` entries.

    - Tiles: 128 x 128 (8 warps: 64 x 32 of C per warp), or 128 x 256 with 8 warps
      when that still gives at least one full wave of programs over the
      `sm_count` SMs; a dimension of 64 or less gets a tile of next_pow2 of it
      (at least 16) so that small M (decode, M = 1 or 16) wastes no rows. When
      128 x 128 tiles would leave most SMs idle, the tile halves along the
      larger dimension until there are at least `sm_count` programs or it is
      64 x 64.
    - BK: 32 elements of 16-bit types (64 bytes of a row per stage) or 16 of f32
      (tf32); true f32 (no tensor cores) uses 64 x 64 x 16 tiles.
    - Stages: as many as fit in SMEM_BUDGET bytes of operand buffers, 2 to 4.
    - GROUP_M = 8 rows of tiles per group of the program order.
    """
    if not tensor_cores:
        return MatmulConfig(min(64, _fit(m)), min(64, _fit(n)), 16, 4, 2)
    bk = 32 if dtype.itemsize == 2 else 16
    bm, bn = min(128, _fit(m)), min(128, _fit(n))
    if bm == 128 and n >= 256 and tc.cdiv(m, 128) * tc.cdiv(n, 256) * batch >= sm_count:
        bn = 256
    while tc.cdiv(m, bm) * tc.cdiv(n, bn) * batch < sm_count and max(bm, bn) > 64:
        if bn >= bm:
            bn //= 2
        else:
            bm //= 2
    warps = 8 if bm * bn >= 128 * 128 else 4
    stage_bytes = (bm + bn) * bk * dtype.itemsize
    stages = max(2, min(4, SMEM_BUDGET // stage_bytes))
    return MatmulConfig(bm, bn, bk, warps, stages)


def _fit(extent: int) -> int:
    return max(16, min(128, next_pow2(max(extent, 1))))


# ----------------------------------------------------------------------------- entry point
def _operand_layout(shape, strides, name: str, rows: str, cols: str) -> Tuple[bool, int]:
    """(row_major, stride of the other dimension) of a matrix's last two dims."""
    (r, c), (sr, sc) = shape[-2:], strides[-2:]
    if sc == 1 or c == 1:
        return True, sr if r > 1 else max(c, 1)
    if sr == 1 or r == 1:
        return False, sc
    raise ValueError(f"{name}: one of its last two dimensions ({rows}, {cols}) must be contiguous (stride 1), "
                     f"got strides {tuple(strides)} for shape {tuple(shape)}; pass a contiguous copy")


def _batch(a, name: str):
    if a.ndim not in (2, 3):
        raise ValueError(f"{name}: matmul takes 2-D or batched 3-D arrays, got shape {a.shape}")
    return (a.shape[0], a.strides[0]) if a.ndim == 3 else (1, 0)


def matmul(a, b, *, bias=None, activation=None, out_dtype=None, out=None, allow_tf32=False):
    """act(a @ b + bias) for a of shape (M, K) or (B, M, K) and b of shape (K, N) or (B, K, N).

    A 2-D operand beside a 3-D one is shared by every batch entry. Operands may be
    row- or column-major (one of the last two strides 1; batch strides anything).
    a and b share a dtype: f16, bf16 or f32 (f32 multiplies in true f32 unless
    `allow_tf32=True` lets tensor cores round the operands to tf32). Accumulation is
    f32; `bias` (shape (N,), any float dtype) is added and `activation`
    ("relu", "gelu" (exact, erf), "silu") applied in f32 before the result is cast to
    `out_dtype` (default: a's dtype). `out` (contiguous rows) receives the result.
    """
    A, B = as_array(a, "a"), as_array(b, "b")
    check_float(A, "a")
    check_float(B, "b")
    if A.dtype is not B.dtype:
        raise TypeError(f"a and b must have one dtype, got {A.dtype.name} and {B.dtype.name}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    ba, sab = _batch(A, "a")
    bb, sbb = _batch(B, "b")
    if ba != bb and A.ndim == B.ndim == 3:
        raise ValueError(f"a and b have batch sizes {ba} and {bb}")
    batch = max(ba, bb)
    if batch > MAX_BATCH:
        raise ValueError(f"batch of {batch} entries is more than the {MAX_BATCH} matmul supports")
    m, k = A.shape[-2:]
    k2, n = B.shape[-2:]
    if k != k2:
        raise ValueError(f"a has shape {A.shape} and b has shape {B.shape}: inner dimensions {k} and {k2} differ")
    places = {"a": A, "b": B}
    bias_arg, has_bias = None, False
    if bias is not None:
        Bi = as_array(bias, "bias")
        check_float(Bi, "bias")
        if Bi.shape != (n,):
            raise ValueError(f"bias has shape {Bi.shape}, expected ({n},)")
        places["bias"] = Bi
        if n > 1 and Bi.strides[0] != 1:
            raise ValueError(f"bias must be contiguous, got stride {Bi.strides[0]}")
        bias_arg, has_bias = view(Bi, (n,), (1,)), True
    check_same_place(places)
    out_dt = _out_dtype(out_dtype, A.dtype)
    if out_dt not in (tc.float16, tc.bfloat16, tc.float32):
        raise TypeError(f"out_dtype must be f16, bf16 or f32, got {out_dt!r}")
    shape = (batch, m, n) if max(A.ndim, B.ndim) == 3 else (m, n)
    O = output(out, A, shape, out_dt)
    if n > 1 and O.strides[-1] != 1:
        raise ValueError(f"out: its last dimension must be contiguous (stride 1), got strides {O.strides}")
    scm = O.strides[-2] if m > 1 else max(n, 1)
    scb = O.strides[0] if O.ndim == 3 else 0
    a_row, sa = _operand_layout(A.shape, A.strides, "a", "M", "K")
    b_row, sb = _operand_layout(B.shape, B.strides, "b", "K", "N")
    if m == 0 or n == 0 or batch == 0:
        return O.obj
    tensor_cores = A.dtype is not tc.float32 or allow_tf32
    cfg = config_for(m, n, k, A.dtype, batch, _sm_count(A), tensor_cores)
    reach = max(_extent(A), _extent(B), _extent(O))
    if bias_arg is None:
        bias_arg = view(O, (1,), (1,))  # never read: HAS_BIAS is False
    args = [view(A, A.shape, A.strides), view(B, B.shape, B.strides), view(O, O.shape, O.strides), bias_arg,
            m, n, k, sab, sa, sbb, sb, scb, scm]
    _launch(cfg, (m, n, batch), args, A.host, a_row, b_row, has_bias, activation, bool(allow_tf32),
            reach >= INDEX_LIMIT)
    return O.obj


def _out_dtype(out_dtype, default):
    if out_dtype is None:
        return default
    if isinstance(out_dtype, str):
        return _dt.DType.get(out_dtype)
    if isinstance(out_dtype, _dt.DType):
        return out_dtype
    try:  # a numpy or torch dtype
        return _dt.from_numpy(out_dtype)
    except TypeError:
        name = str(out_dtype).rpartition(".")[2]
        return _dt.DType.get({"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(name, name))


def _launch(cfg: MatmulConfig, mnb, args, host, a_row, b_row, has_bias, act, tf32, wide) -> None:
    consts = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, A_ROW=a_row, B_ROW=b_row,
                  HAS_BIAS=has_bias, ACT=act or "none", TF32=tf32, WIDE=wide)
    grid = cfg.grid(*mnb)
    if host:
        launch(matmul_kernel, grid, args, **consts)  # the interpreter
    else:
        matmul_kernel[grid](*args, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **consts)


def _extent(a) -> int:
    """One past the largest element offset `a` reaches."""
    return 1 + sum((s - 1) * abs(st) for s, st in zip(a.shape, a.strides) if s > 0)


def _sm_count(a) -> int:
    if a.host:
        return 132
    from tilec.runtime.driver import get_device  # noqa: PLC0415
    return get_device(a.device).multiprocessors


def _div(x: int) -> str:
    return "i32:16" if x % 16 == 0 else "i32"


def signature(m: int, n: int, k: int, dtype, *, out_dtype=None, allow_tf32: bool = False,
              activation=None, bias_dtype=None, batch: int = 1, sm_count: int = 132):
    """(signature text, MatmulConfig) of the kernel `matmul` launches for contiguous row-major
    (batch x) m x k and k x n operands of `dtype`: what `tilec ptx matmul` and the benchmark
    compile."""
    dtype = _out_dtype(dtype, None)
    out = _out_dtype(out_dtype, dtype)
    cfg = config_for(m, n, k, dtype, batch, sm_count, dtype is not tc.float32 or allow_tf32)
    d, o = dtype.name, out.name
    bias = "f32" if bias_dtype is None else _out_dtype(bias_dtype, None).name
    sig = (f"a={d}[?,?], b={d}[?,?], c={o}[?,?], bias={bias}[?], M={_div(m)}, N={_div(n)}, "
           f"K={_div(k)}, sab={_div(m * k if batch > 1 else 0)}, sa={_div(k)}, "
           f"sbb={_div(k * n if batch > 1 else 0)}, sb={_div(n)}, scb={_div(m * n if batch > 1 else 0)}, "
           f"scm={_div(n)}, BM={cfg.bm}, BN={cfg.bn}, BK={cfg.bk}, GROUP_M={cfg.group_m}, A_ROW=True, "
           f"B_ROW=True, HAS_BIAS={bias_dtype is not None}, ACT='{activation or 'none'}', "
           f"TF32={bool(allow_tf32)}, WIDE=False")
    return sig, cfg


SIGNATURES = {
    "matmul_kernel": "a=f16[?,?], b=f16[?,?], c=f16[?,?], bias=f32[?], M=i32:16, N=i32:16, K=i32:16, sab=i32:16, "
                     "sa=i32:16, sbb=i32:16, sb=i32:16, scb=i32:16, scm=i32:16, BM=128, BN=128, BK=32, GROUP_M=8, "
                     "A_ROW=True, B_ROW=True, HAS_BIAS=False, ACT='none', TF32=False, WIDE=False",
}
OPTIONS = {"matmul_kernel": {"num_warps": 8, "num_stages": 4}}
