"""matmul(a, b): C = act(A @ B + bias) on tensor cores, for 2-D and batched 3-D inputs.

One program computes a BM x BN tile of C, walking K in steps of BK with tensor-view
loads: tiles overhanging an edge read zeros, so any M, N, K work. When a view's last
stride is 1 and its row stride a multiple of 16 elements (the launch specializes on
that), the loads are 16 bytes wide and the compiler turns them into cp.async copies
`num_stages` iterations ahead (pipeline_loads); other layouts (column-major) are read
element by element. Programs are numbered in grouped order (tc.swizzle2d) so that the
ones running together share A rows and B columns in L2. The epilogue (bias,
activation, cast) runs on the accumulator's registers before the only store. A batch
is one launch per entry.

The configuration comes from `config_for` (the heuristic is documented there).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import tilec as tc
from tilec import dtypes as _dt

from ..lowering.gpu.wgmma_fragments import wgmma_shape
from ._common import as_array, check_float, check_same_place, launch, next_pow2, output, view

__all__ = ["matmul", "matmul_kernel", "MatmulConfig", "config_for", "ACTIVATIONS", "SIGNATURES", "OPTIONS"]

ACTIVATIONS = (None, "relu", "gelu", "silu")
SMEM_BUDGET = 160 * 1024   # bytes of operand buffers a config may use (sm_80: 164 KB, sm_90: 227 KB per CTA)
SMEM_BUDGET_WGMMA = 200 * 1024  # sm_90a (227 KB per CTA), wgmma tiles


@tc.func
def _tile(a, b, c, bias, scale, pid_m, pid_n, BM, BN, BK, HAS_BIAS, ACT, TF32, SCALED):
    """C[pid_m, pid_n] = act(scale * A[pid_m, :] @ B[:, pid_n] + bias[pid_n])."""
    K = a.shape[1]
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(tc.cdiv(K, BK)):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tc.dot(at, bt, acc, allow_tf32=TF32)
    if SCALED:
        acc = acc * scale
    if HAS_BIAS:
        acc = acc + tc.load(bias, index=(pid_n,), shape=(BN,)).astype(tc.float32)[None, :]
    if ACT == "relu":
        acc = tc.maximum(acc, 0.0)
    elif ACT == "gelu":
        acc = 0.5 * acc * (1.0 + tc.erf(acc * 0.7071067811865476))
    elif ACT == "silu":
        acc = acc * tc.sigmoid(acc)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tc.kernel
def matmul_kernel(a, b, c, bias, scale, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr,
                  GROUP_M: tc.constexpr, HAS_BIAS: tc.constexpr, ACT: tc.constexpr, TF32: tc.constexpr,
                  SCALED: tc.constexpr):
    num_m = tc.cdiv(a.shape[0], BM)
    num_n = tc.cdiv(b.shape[1], BN)
    pid = tc.program_id(0)
    pid_m, pid_n = tc.swizzle2d(pid // num_n, pid % num_n, num_m, num_n, GROUP_M)
    _tile(a, b, c, bias, scale, pid_m, pid_n, BM, BN, BK, HAS_BIAS, ACT, TF32, SCALED)


@tc.kernel
def matmul_persistent_kernel(a, b, c, bias, scale, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr,
                             GROUP_M: tc.constexpr, HAS_BIAS: tc.constexpr, ACT: tc.constexpr, TF32: tc.constexpr,
                             SCALED: tc.constexpr):
    # A grid of (at most) one program per SM, each walking the output tiles in grouped order
    # with a stride of the grid size: one launch-time setup per SM instead of per tile.
    num_m = tc.cdiv(a.shape[0], BM)
    num_n = tc.cdiv(b.shape[1], BN)
    for tile in range(tc.program_id(0), num_m * num_n, tc.num_programs(0)):
        pid_m, pid_n = tc.swizzle2d(tile // num_n, tile % num_n, num_m, num_n, GROUP_M)
        _tile(a, b, c, bias, scale, pid_m, pid_n, BM, BN, BK, HAS_BIAS, ACT, TF32, SCALED)


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class MatmulConfig:
    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    persistent: bool = False  # matmul_persistent_kernel on a grid of at most one program per SM
    sm_count: int = 132

    def tiles(self, m: int, n: int) -> int:
        return tc.cdiv(m, self.bm) * tc.cdiv(n, self.bn)

    def grid(self, m: int, n: int) -> Tuple[int]:
        tiles = self.tiles(m, n)
        return (min(tiles, self.sm_count),) if self.persistent else (tiles,)

    @property
    def kernel(self):
        return matmul_persistent_kernel if self.persistent else matmul_kernel


def config_for(m: int, n: int, k: int, dtype, batch: int = 1, sm_count: int = 132,
               tensor_cores: bool = True, arch: str = "sm_80") -> MatmulConfig:
    """The tile configuration for an (m x k) @ (k x n) product of `batch` entries.

    - Tiles: 128 x 128 (8 warps: 64 x 32 of C per warp), or 128 x 256 with 8 warps
      when that still gives programs for at least 90% of the `sm_count` SMs; a dimension of 64 or less gets a tile of next_pow2 of it
      (at least 16) so that small M (decode, M = 1 or 16) wastes no rows. When
      128 x 128 tiles would leave most SMs idle, the tile halves along the
      larger dimension until there are at least `sm_count` programs or it is
      64 x 64.
    - BK: 32 elements of 16-bit types (64 bytes of a row per stage) or 16 of f32
      (tf32); true f32 (no tensor cores) uses 64 x 64 x 16 tiles.
    - Skinny M (a tile of 32 rows or fewer, 16-bit types): BK = 128, for more bytes in flight.
    - Stages: as many as fit in SMEM_BUDGET bytes of operand buffers, 2 to 4.
    - GROUP_M = 8 rows of tiles per group of the program order.
    - sm_90a, tiles wgmma takes (whole warpgroups, 64-column blocks of B): BK = one
      128-byte swizzle row of A per stage row (64 f16/bf16, 32 tf32, 128 f8) and stages
      from SMEM_BUDGET_WGMMA (128 x 256 x 64 bf16: 4 stages, 192 KB).
    - f8 off sm_90a has no tensor-core lowering: the FMA tiles.
    """
    if dtype.bits == 8 and arch != "sm_90a":
        tensor_cores = False
    if not tensor_cores:
        return MatmulConfig(min(64, _fit(m)), min(64, _fit(n)), 16, 4, 2, sm_count=sm_count)
    bk = 32 if dtype.itemsize == 2 else 16
    bm, bn = min(128, _fit(m)), min(128, _fit(n))
    # 128 x 256 while it keeps nine tenths of the SMs busy (2048^2: 128 programs on 132 SMs
    # measured 517 TFLOP/s against 441 for 256 programs of 128 x 128)
    if bm == 128 and n >= 256 and tc.cdiv(m, 128) * tc.cdiv(n, 256) * batch * 10 >= sm_count * 9:
        bn = 256
    while bn < 256 and tc.cdiv(m, bm) * tc.cdiv(n, bn) * batch < sm_count and max(bm, bn) > 64:
        if bn >= bm:
            bn //= 2
        else:
            bm //= 2
    warps = 8 if bm * bn >= 128 * 128 else 4
    budget = SMEM_BUDGET
    wgmma_bk = 128 // dtype.itemsize
    if arch == "sm_90a" and wgmma_shape(bm, bn, wgmma_bk, dtype.itemsize, warps) is not None:
        bk, budget = wgmma_bk, SMEM_BUDGET_WGMMA
    elif bm <= 32 and dtype.itemsize == 2 and k >= 128:
        # skinny M reads B at memory speed: 128-element K steps keep 4 x 20 KB in flight per
        # program (M = 1, 16 on an H200: 1.9-2.2x the 32-element step)
        bk = 128
    stage_bytes = (bm + bn) * bk * dtype.itemsize
    stages = max(2, min(4, budget // stage_bytes))
    return MatmulConfig(bm, bn, bk, warps, stages, sm_count=sm_count)


def _fit(extent: int) -> int:
    return max(16, min(128, next_pow2(max(extent, 1))))


# ----------------------------------------------------------------------------- entry point
def _batch(a, name: str) -> int:
    if a.ndim not in (2, 3):
        raise ValueError(f"{name}: matmul takes 2-D or batched 3-D arrays, got shape {a.shape}")
    return a.shape[0] if a.ndim == 3 else 1


def _entry(a, i: int, name: str):
    """Batch entry `i` of `a` as a 2-D array (a 2-D `a` is shared by every entry)."""
    return a if a.ndim == 2 else as_array(a.obj[i], name)


def matmul(a, b, *, bias=None, activation=None, out_dtype=None, out=None, allow_tf32=False, scale_a=None,
           scale_b=None, tma=True, config=None):
    """act(scale_a * scale_b * (a @ b) + bias) for a of shape (M, K) or (B, M, K) and b of
    shape (K, N) or (B, K, N).

    A 2-D operand beside a 3-D one is shared by every batch entry (each entry is one
    launch). Operands may have any strides; a unit last stride gives 16-byte,
    cp.async-pipelined loads, other layouts (column-major) are read element by element.
    a and b share a dtype: f16, bf16, f32 (f32 multiplies in true f32 unless
    `allow_tf32=True` lets tensor cores round the operands to tf32) or f8e4m3 / f8e5m2
    (tensor cores on sm_90a; the result defaults to bf16). Accumulation is f32;
    `scale_a` and `scale_b` (per-tensor scales: Python numbers or one-element arrays,
    read on the host) multiply the f32 product first (the dequantization of f8 operands).
    On sm_90a, tf32 and f8 operands are fastest with B column-major (b = bt.T of a
    row-major N x K array, as torch._scaled_mm requires): wgmma reads B with K
    contiguous for them, which a row-major B reaches only through registers. `bias` (shape (N,), any float dtype) is added and `activation`
    ("relu", "gelu" (exact, erf), "silu") applied in f32 before the result is cast to
    `out_dtype` (default: a's dtype). `out` receives the result. On sm_90a, tiles that
    wgmma computes are read with TMA where the operands allow it (16-byte aligned rows);
    `tma=False` keeps the cp.async ring (for comparison). `config` (a MatmulConfig) replaces
    the one `config_for` picks.
    """
    A, B = as_array(a, "a"), as_array(b, "b")
    check_float(A, "a", _OPERAND_DTYPES)
    check_float(B, "b", _OPERAND_DTYPES)
    if A.dtype is not B.dtype:
        raise TypeError(f"a and b must have one dtype, got {A.dtype.name} and {B.dtype.name}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    ba, bb = _batch(A, "a"), _batch(B, "b")
    if ba != bb and A.ndim == B.ndim == 3:
        raise ValueError(f"a and b have batch sizes {ba} and {bb}")
    batch = max(ba, bb)
    m, k = A.shape[-2:]
    k2, n = B.shape[-2:]
    if k != k2:
        raise ValueError(f"a has shape {A.shape} and b has shape {B.shape}: inner dimensions {k} and {k2} differ")
    places = {"a": A, "b": B}
    bias_arr = None
    if bias is not None:
        bias_arr = as_array(bias, "bias")
        check_float(bias_arr, "bias")
        if bias_arr.shape != (n,):
            raise ValueError(f"bias has shape {bias_arr.shape}, expected ({n},)")
        places["bias"] = bias_arr
    check_same_place(places)
    out_dt = _out_dtype(out_dtype, tc.bfloat16 if A.dtype.bits == 8 else A.dtype)
    scale = _scale(scale_a, "scale_a") * _scale(scale_b, "scale_b")
    if out_dt not in (tc.float16, tc.bfloat16, tc.float32):
        raise TypeError(f"out_dtype must be f16, bf16 or f32, got {out_dt!r}")
    batched = max(A.ndim, B.ndim) == 3
    O = output(out, A, (batch, m, n) if batched else (m, n), out_dt)
    if m == 0 or n == 0 or batch == 0:
        return O.obj
    tensor_cores = A.dtype is not tc.float32 or allow_tf32
    sm_count, arch = _device_info(A)
    cfg = config_for(m, n, k, A.dtype, batch, sm_count, tensor_cores, arch) if config is None else config
    if not isinstance(cfg, MatmulConfig):
        raise TypeError(f"config must be a MatmulConfig, got {type(cfg).__name__}")
    consts = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, HAS_BIAS=bias_arr is not None,
                  ACT=activation or "none", TF32=bool(allow_tf32),
                  SCALED=scale_a is not None or scale_b is not None)
    for i in range(batch if batched else 1):
        Ai, Bi, Oi = _entry(A, i, "a"), _entry(B, i, "b"), _entry(O, i, "out")
        bias_arg = view(bias_arr, (n,), bias_arr.strides) if bias_arr is not None else view(Oi, (1,), (1,))
        args = [view(Ai, Ai.shape, Ai.strides), view(Bi, Bi.shape, Bi.strides), view(Oi, Oi.shape, Oi.strides),
                bias_arg, scale]  # without a bias, a never-read view of out fills the parameter
        if A.host:
            launch(cfg.kernel, cfg.grid(m, n), args, **consts)  # the interpreter
        else:
            cfg.kernel[cfg.grid(m, n)](*args, num_warps=cfg.num_warps, num_stages=cfg.num_stages, tma=bool(tma),
                                          **consts)
    return O.obj


_OPERAND_DTYPES = (tc.float16, tc.bfloat16, tc.float32, tc.float8e4m3, tc.float8e5m2)


def _scale(x, name: str) -> float:
    """A per-tensor scale as a Python float (1.0 when absent)."""
    if x is None:
        return 1.0
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    size = getattr(x, "size", None)
    numel = x.numel() if callable(getattr(x, "numel", None)) else (size if isinstance(size, int) else None)
    if numel != 1:
        raise TypeError(f"{name} must be a number or a one-element array, got {type(x).__name__}"
                        + (f" of {numel} elements" if numel is not None else ""))
    try:
        return float(x.item() if hasattr(x, "item") else x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a number or a one-element array: {e}") from None


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


def _device_info(a) -> Tuple[int, str]:
    """(SM count, tilec arch) of the device holding `a` (an H100-like default on the host)."""
    if a.host:
        return 132, "sm_80"
    from tilec.runtime.driver import get_device  # noqa: PLC0415
    dev = get_device(a.device)
    return dev.multiprocessors, dev.arch


def signature(m: int, n: int, k: int, dtype, *, out_dtype=None, allow_tf32: bool = False,
              activation=None, bias_dtype=None, batch: int = 1, sm_count: int = 132, arch: str = "sm_80",
              config=None, scaled: bool = False, b_col_major: bool = False):
    """(signature text, MatmulConfig) of the kernel `matmul` launches for contiguous row-major
    (batch x) m x k and k x n operands of `dtype` (b column-major with `b_col_major`, per-tensor
    scales with `scaled`): what `tilec ptx matmul` and the benchmark compile (`config` in place
    of config_for's)."""
    dtype = _out_dtype(dtype, None)
    out = _out_dtype(out_dtype, tc.bfloat16 if dtype.bits == 8 else dtype)
    cfg = config or config_for(m, n, k, dtype, batch, sm_count, dtype is not tc.float32 or allow_tf32, arch)
    bias = "f32" if bias_dtype is None else _out_dtype(bias_dtype, None).name

    def mat(name, d, rows, cols):
        return f"{name}={d}[?,?]:div={_div(rows)}x{_div(cols)}:stride_div={_div(cols)}x1"

    b_sig = mat('b', dtype.name, k, n)
    if b_col_major:
        b_sig = f"b={dtype.name}[?,?]:strides=1x?:div={_div(k)}x{_div(n)}:stride_div=1x{_div(k)}"
    sig = (f"{mat('a', dtype.name, m, k)}, {b_sig}, {mat('c', out.name, m, n)}, "
           f"bias={bias}[?]:div={_div(n)}, scale=f32, BM={cfg.bm}, BN={cfg.bn}, BK={cfg.bk}, GROUP_M={cfg.group_m}, "
           f"HAS_BIAS={bias_dtype is not None}, ACT='{activation or 'none'}', TF32={bool(allow_tf32)}, "
           f"SCALED={bool(scaled)}")
    return sig, cfg


def _div(x: int) -> int:
    return 16 if x % 16 == 0 else 1


SIGNATURES = {
    "matmul_kernel": signature(4096, 4096, 4096, "f16")[0],
    "matmul_kernel_bf16_bias_gelu": signature(1000, 1000, 1000, "bf16", bias_dtype="bf16", activation="gelu")[0],
}
matmul_kernel_bf16_bias_gelu = matmul_kernel
OPTIONS = {"matmul_kernel": {"num_warps": 8, "num_stages": 4}, "matmul_kernel_bf16_bias_gelu": {"num_warps": 4}}
