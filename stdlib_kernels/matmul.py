"""matmul(a, b): C = act(A @ B + bias) on tensor cores, for 2-D and batched 3-D inputs.

One program computes a BM x BN tile of C, walking K in steps of BK with tensor-view
loads: tiles overhanging an edge read zeros, so any M, N, K work. When a view's last
stride is 1 and its row stride a multiple of 16 bytes (the launch specializes on the
power of two dividing it), the loads are 16 bytes wide and the compiler turns them into
cp.async copies `num_stages` iterations ahead (pipeline_loads); other layouts
(column-major) are read element by element. Programs are numbered in grouped order
(tc.swizzle2d) so that the ones running together share A rows and B columns in L2. The epilogue (bias,
activation, cast) runs on the accumulator's registers before the only store. A batch
is one launch per entry.

Split-K (`MatmulConfig.split_k > 1`, picked for few output tiles and a long K): program
(tile, s) of matmul_splitk_kernel sums K slice s of its tile into an f32 workspace, then
splitk_reduce_kernel sums the slices in a fixed order (no atomics) and applies the same
epilogue (`_epilogue`) before the store.

The configuration comes from `config_for` (the heuristic is documented there).
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

import tilec as tc
from tilec import dtypes as _dt
from tilec.specialize import stride_divisibility
from tilec.target import Target

from ._common import DEPENDENT, Arr, as_array, check_float, check_same_place, output, refuse_read_back, view
from ._plan import derived, planned
from .launches import Launch, Operands, Temp, execute
from .matmul_config import HOST_GEMM_TARGET, MatmulConfig, config_for
from .schedules import GEMM_TILES, PERSISTENT, SPLIT_K
from .tuning import tuning_for

__all__ = ["matmul", "matmul_kernel", "matmul_splitk_kernel", "splitk_reduce_kernel", "MatmulConfig", "config_for",
           "plan", "signature", "reduce_signature", "ACTIVATIONS", "SIGNATURES", "OPTIONS"]

ACTIVATIONS = (None, "relu", "gelu", "silu")


@tc.func
def _k_loop(a, b, pid_m, pid_n, k_start, k_stop, BM, BN, BK, TF32, SHARED_B=False):
    """A[pid_m, k_start:k_stop] @ B[k_start:k_stop, pid_n] in f32 (k in units of BK);
    SHARED_B: every program of the cluster reads the same B tiles (MatmulConfig.check_cluster)."""
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(k_start, k_stop):
        at = tc.load(a, index=(pid_m, k), shape=(BM, BK))
        bt = tc.load(b, index=(k, pid_n), shape=(BK, BN), multicast=SHARED_B)
        acc = tc.dot(at, bt, acc, allow_tf32=TF32)
    return acc


@tc.func
def _epilogue(acc, bias, scale, pid_n, BN, HAS_BIAS, ACT, SCALED):
    """act(scale * acc + bias[pid_n]) in f32: the one epilogue of both the plain and the split-K path."""
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
    return acc


@tc.func
def _tile(a, b, c, bias, scale, pid_m, pid_n, BM, BN, BK, HAS_BIAS, ACT, TF32, SCALED, SHARED_B):
    """C[pid_m, pid_n] = act(scale * A[pid_m, :] @ B[:, pid_n] + bias[pid_n])."""
    acc = _k_loop(a, b, pid_m, pid_n, 0, tc.cdiv(a.shape[1], BK), BM, BN, BK, TF32, SHARED_B)
    acc = _epilogue(acc, bias, scale, pid_n, BN, HAS_BIAS, ACT, SCALED)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tc.kernel
def matmul_kernel(a, b, c, bias, scale, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr,
                  GROUP_M: tc.constexpr, HAS_BIAS: tc.constexpr, ACT: tc.constexpr, TF32: tc.constexpr,
                  SCALED: tc.constexpr, SHARED_B: tc.constexpr = False):
    num_m = tc.cdiv(a.shape[0], BM)
    num_n = tc.cdiv(b.shape[1], BN)
    pid = tc.program_id(0)
    pid_m, pid_n = tc.swizzle2d(pid // num_n, pid % num_n, num_m, num_n, GROUP_M)
    _tile(a, b, c, bias, scale, pid_m, pid_n, BM, BN, BK, HAS_BIAS, ACT, TF32, SCALED, SHARED_B)


@tc.kernel
def matmul_persistent_kernel(a, b, c, bias, scale, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr,
                             GROUP_M: tc.constexpr, HAS_BIAS: tc.constexpr, ACT: tc.constexpr, TF32: tc.constexpr,
                             SCALED: tc.constexpr, SHARED_B: tc.constexpr = False):
    # A grid of (at most) one program per SM, each walking the output tiles in grouped order
    # with a stride of the grid size: one launch-time setup per SM instead of per tile.
    num_m = tc.cdiv(a.shape[0], BM)
    num_n = tc.cdiv(b.shape[1], BN)
    for tile in range(tc.program_id(0), num_m * num_n, tc.num_programs(0)):
        pid_m, pid_n = tc.swizzle2d(tile // num_n, tile % num_n, num_m, num_n, GROUP_M)
        _tile(a, b, c, bias, scale, pid_m, pid_n, BM, BN, BK, HAS_BIAS, ACT, TF32, SCALED, SHARED_B)


@tc.kernel
def matmul_splitk_kernel(a, b, ws, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr, GROUP_M: tc.constexpr,
                         TF32: tc.constexpr):
    # Program (tile, s) of a (tiles, S) grid sums K slice s (cdiv(steps, S) steps of BK, the
    # last one shorter or empty) of its tile's product into rows s * Mp .. of the f32
    # workspace ws (S * Mp x N, Mp = M rounded up to BM): every slice owns whole tiles, so
    # the tiles overhanging M write padding rows of their own slice, never the next one's.
    # The reduction (a dependent launch) may be placed as soon as every program has started:
    # split-K leaves SMs idle, so its programs wait there for the partials.
    tc.launch_dependents()
    num_m = tc.cdiv(a.shape[0], BM)
    num_n = tc.cdiv(b.shape[1], BN)
    pid = tc.program_id(0)
    s = tc.program_id(1)
    pid_m, pid_n = tc.swizzle2d(pid // num_n, pid % num_n, num_m, num_n, GROUP_M)
    steps = tc.cdiv(a.shape[1], BK)
    per = tc.cdiv(steps, tc.num_programs(1))
    acc = _k_loop(a, b, pid_m, pid_n, s * per, tc.minimum(s * per + per, steps), BM, BN, BK, TF32)
    tc.store(ws, index=(s * num_m + pid_m, pid_n), tile=acc)


@tc.kernel
def splitk_reduce_kernel(ws, c, bias, scale, RM: tc.constexpr, RN: tc.constexpr, SPLITS: tc.constexpr,
                         HAS_BIAS: tc.constexpr, ACT: tc.constexpr, SCALED: tc.constexpr):
    # C tile (pid_m, pid_n) = epilogue(sum of the SPLITS partials in ws); RM divides the
    # partial kernel's BM, so a tile of RM rows lies inside one slice's Mp rows.
    pid_m = tc.program_id(0)
    pid_n = tc.program_id(1)
    slice_tiles = ws.shape[0] // (SPLITS * RM)
    acc = tc.zeros((RM, RN), tc.float32)
    for s in tc.static_range(SPLITS):  # unrolled: every partial's load is in flight at once
        acc += tc.load(ws, index=(s * slice_tiles + pid_m, pid_n), shape=(RM, RN))
    acc = _epilogue(acc, bias, scale, pid_n, RN, HAS_BIAS, ACT, SCALED)
    tc.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


# ----------------------------------------------------------------------------- entry point
def _batch(a, name: str) -> int:
    if a.ndim not in (2, 3):
        raise ValueError(f"{name}: matmul takes 2-D or batched 3-D arrays, got shape {a.shape}")
    return a.shape[0] if a.ndim == 3 else 1


def _entry(a, i: int, name: str):
    """Batch entry `i` of `a` as a 2-D array (a 2-D `a` is shared by every entry)."""
    return a if a.ndim == 2 else as_array(a.obj[i], name)


def _scales(scale_a, scale_b):
    """The launch's scale, scale_a * scale_b as a Python float: read on the host at every
    call (a launch plan replays everything else)."""
    return (_scale(scale_a, "scale_a") * _scale(scale_b, "scale_b"),)


@planned(per_call=_scales)
def matmul(a, b, *, bias=None, activation=None, out_dtype=None, out=None, allow_tf32=False, scale_a=None,
           scale_b=None, tma=True, config=None):
    """act(scale_a * scale_b * (a @ b) + bias) for a of shape (M, K) or (B, M, K) and b of
    shape (K, N) or (B, K, N).

    A 2-D operand beside a 3-D one is shared by every batch entry (each entry is one
    launch). Operands may have any strides; a unit last stride gives 16-byte,
    cp.async-pipelined loads, other layouts (column-major) are read element by element,
    except on sm_90a where a column-major B (w.T of a row-major w, a linear layer's forward)
    and a column-major f16/bf16 A (x.T of a row-major x, the dW = dYᵀ X of its backward) are
    copied as they lie (TMA or 16-byte cp.async) and wgmma reads them K-major / M-major.
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

    A repeated call with arguments of the same layout replays the first call's launches (a
    launch plan, stdlib_kernels/_plan.py): the host time per call drops to what binding the
    launches costs. Batched calls and calls with `config` take the full path every time.
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
    scale = derived(_scales, scale_a, scale_b)[0]
    if out_dt not in (tc.float16, tc.bfloat16, tc.float32):
        raise TypeError(f"out_dtype must be f16, bf16 or f32, got {out_dt!r}")
    batched = max(A.ndim, B.ndim) == 3
    O = output(out, A, (batch, m, n) if batched else (m, n), out_dt)
    if m == 0 or n == 0 or batch == 0:
        return O.obj
    if config is not None:
        if not isinstance(config, MatmulConfig):
            raise TypeError(f"config must be a MatmulConfig, got {type(config).__name__}")
        config.check_cluster(m)
    values = {"scale": scale}
    for i in range(batch if batched else 1):
        Ai, Bi, Oi = _entry(A, i, "a"), _entry(B, i, "b"), _entry(O, i, "out")
        names = _operand_names(i, batched=batched)
        # without a bias, a never-read view of out fills the parameter
        bias_arg = view(bias_arr, (n,), bias_arr.strides) if bias_arr is not None else view(Oi, (1,), (1,))
        values.update(zip(names, (view(Ai, Ai.shape, Ai.strides), view(Bi, Bi.shape, Bi.strides),
                                  view(Oi, Oi.shape, Oi.strides), bias_arg)))
    launches = plan(A, B, O, bias_arr, activation=activation, allow_tf32=allow_tf32,
                    scaled=scale_a is not None or scale_b is not None, tma=tma, config=config, target=_target(A))
    execute(launches, Operands({"a": A}, values))
    return O.obj


def _operand_names(i: int, *, batched: bool):
    """The operand names of batch entry i's (a, b, out, bias): "a", "b", "out", "bias" unbatched."""
    return ("a", "b", "out", "bias") if not batched else (f"a[{i}]", f"b[{i}]", f"out[{i}]", f"bias[{i}]")


def plan(a: Arr, b: Arr, out: Arr, bias: Optional[Arr], *, activation, allow_tf32: bool, scaled: bool, tma: bool,
         config: Optional[MatmulConfig], target: Target) -> List[Launch]:
    """The launches of matmul of descriptions `a` (M, K) or (B, M, K) and `b` (K, N) or (B, K, N)
    into `out`, with `bias` (N,) or None, on `target` (`config` in place of config_for's).

    One launch per batch entry (GEMM_TILES, or PERSISTENT), or two (SPLIT_K: the partial
    products into the f32 Temp "ws", shared by the entries, then their dependent reduction and
    epilogue). Operands (`_operand_names`): "a", "b", "out", "bias" (a never-read view of out
    without a bias), "a[i]", ... per entry when batched; "scale", the f32 product of the scales."""
    batched = max(a.ndim, b.ndim) == 3
    batch = out.shape[0] if batched else 1
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if m == 0 or n == 0 or batch == 0:
        return []
    tensor_cores = a.dtype is not tc.float32 or allow_tf32
    cfg = config_for(m, n, k, a.dtype, batch, target, tensor_cores=tensor_cores) if config is None else config
    consts = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, HAS_BIAS=bias is not None,
                  ACT=activation or "none", TF32=bool(allow_tf32), SCALED=bool(scaled), SHARED_B=cfg.cluster > 1)
    ring = _ring_options(cfg, tma)
    split = cfg.splits(k) if cfg.split_k > 1 else 1
    launches = []
    if split > 1:
        ws = Temp("ws", (split * tc.cdiv(m, cfg.bm) * cfg.bm, n), tc.float32, like="a")
        part = {key: consts[key] for key in ("BM", "BN", "BK", "GROUP_M", "TF32")}
        rm, rn, warps = cfg.reduce_tile(m, n, split, t=tuning_for(target).matmul)
        red = dict(RM=rm, RN=rn, SPLITS=split, HAS_BIAS=consts["HAS_BIAS"], ACT=consts["ACT"], SCALED=consts["SCALED"])
    for i in range(batch if batched else 1):   # one workspace serves every entry: launches run in order
        a_i, b_i, out_i, bias_i = _operand_names(i, batched=batched)
        if split > 1:
            launches += [Launch.of(matmul_splitk_kernel, (cfg.tiles(m, n), split), (a_i, b_i, "ws"), cfg.num_warps,
                                   options=ring, temps=(ws,), schedule=SPLIT_K, fast_math=False, **part),
                         Launch.of(splitk_reduce_kernel, (tc.cdiv(m, rm), tc.cdiv(n, rn)), ("ws", out_i, bias_i, "scale"),
                                   warps, options=DEPENDENT, temps=(ws,), schedule=SPLIT_K, fast_math=False, **red)]
            continue
        kernel = matmul_persistent_kernel if cfg.persistent else matmul_kernel
        launches.append(Launch.of(kernel, cfg.grid(m, n), (a_i, b_i, out_i, bias_i, "scale"), cfg.num_warps,
                                  cluster=cfg.cluster, options=ring, schedule=PERSISTENT if cfg.persistent else GEMM_TILES,
                                  fast_math=False, **consts))
    return launches


def _ring_options(cfg: MatmulConfig, tma) -> dict:
    """The compile options of a GPU launch of the K-loop kernels (the interpreter ignores them)."""
    return dict(num_stages=cfg.num_stages, tma=bool(tma), warp_specialize=cfg.warp_specialize)


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
    refuse_read_back(x, name, "matmul", "pass the scale as a Python float")
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


def _target(a) -> Target:
    """The Target GEMMs of `a` plan for: its device's, HOST_GEMM_TARGET on the host."""
    return HOST_GEMM_TARGET if a.host else Target.for_device(a.device)


def signature(m: int, n: int, k: int, dtype, *, out_dtype=None, allow_tf32: bool = False,
              activation=None, bias_dtype=None, batch: int = 1, target=HOST_GEMM_TARGET,
              config=None, scaled: bool = False, b_col_major: bool = False, a_col_major: bool = False):
    """(signature text, MatmulConfig) of the kernel `matmul` launches for contiguous row-major
    (batch x) m x k and k x n operands of `dtype` (a column-major with `a_col_major`, the x.T
    of a row-major k x m x; b column-major with `b_col_major`, per-tensor
    scales with `scaled`): what `tilec ptx matmul` and the benchmark compile (`config` in place
    of config_for's), planned for `target` (a Target or an arch; default HOST_GEMM_TARGET,
    sm_80 on 132 SMs). For a split-K configuration that is `matmul_splitk_kernel` (the
    partial products, `cfg.kernel`); `reduce_signature` gives the reduction that follows."""
    dtype = _out_dtype(dtype, None)
    out = _out_dtype(out_dtype, tc.bfloat16 if dtype.bits == 8 else dtype)
    cfg = config or config_for(m, n, k, dtype, batch, Target.of(target), tensor_cores=dtype is not tc.float32 or allow_tf32)
    if cfg.split_k > 1 and cfg.splits(k) == 1:
        cfg = replace(cfg, split_k=1)  # what matmul launches when K has too few steps to cut
    bias = "f32" if bias_dtype is None else _out_dtype(bias_dtype, None).name
    b_sig = _mat('b', dtype.name, k, n)
    if b_col_major:
        b_sig = f"b={dtype.name}[?,?]:strides=1x?:div={_div(k)}x{_div(n)}:stride_div=1x{stride_divisibility(k)}"
    a_sig = _mat('a', dtype.name, m, k)
    if a_col_major:
        a_sig = f"a={dtype.name}[?,?]:strides=1x?:div={_div(m)}x{_div(k)}:stride_div=1x{stride_divisibility(m)}"
    tiles = f"BM={cfg.bm}, BN={cfg.bn}, BK={cfg.bk}, GROUP_M={cfg.group_m}"
    if cfg.split_k > 1:
        ws = _mat("ws", "f32", cfg.splits(k) * tc.cdiv(m, cfg.bm) * cfg.bm, n)
        return f"{a_sig}, {b_sig}, {ws}, {tiles}, TF32={bool(allow_tf32)}", cfg
    sig = (f"{a_sig}, {b_sig}, {_mat('c', out.name, m, n)}, "
           f"bias={bias}[?]:div={_div(n)}, scale=f32, {tiles}, "
           f"HAS_BIAS={bias_dtype is not None}, ACT='{activation or 'none'}', TF32={bool(allow_tf32)}, "
           f"SCALED={bool(scaled)}" + (", SHARED_B=True" if cfg.cluster > 1 else ""))
    return sig, cfg


def reduce_signature(m: int, n: int, k: int, cfg: MatmulConfig, out_dtype, *, activation=None, bias_dtype=None,
                     scaled: bool = False):
    """(signature text, num_warps, grid) of the splitk_reduce_kernel launch that follows
    `cfg`'s partial products for an m x n x k product with `out_dtype` results."""
    out = _out_dtype(out_dtype, None)
    split = cfg.splits(k)
    rm, rn, warps = cfg.reduce_tile(m, n, split)
    bias = "f32" if bias_dtype is None else _out_dtype(bias_dtype, None).name
    sig = (f"{_mat('ws', 'f32', split * tc.cdiv(m, cfg.bm) * cfg.bm, n)}, {_mat('c', out.name, m, n)}, "
           f"bias={bias}[?]:div={_div(n)}, scale=f32, RM={rm}, RN={rn}, SPLITS={split}, "
           f"HAS_BIAS={bias_dtype is not None}, ACT='{activation or 'none'}', SCALED={bool(scaled)}")
    return sig, warps, (tc.cdiv(m, rm), tc.cdiv(n, rn))


def _mat(name: str, d: str, rows: int, cols: int) -> str:
    return f"{name}={d}[?,?]:div={_div(rows)}x{_div(cols)}:stride_div={stride_divisibility(cols)}x1"


def _div(x: int) -> int:
    return 16 if x % 16 == 0 else 1


_SPLIT_SIG, _SPLIT_CFG = signature(128, 4096, 14336, "bf16", target="sm_90a")   # M = 128 against a 14336 x 4096 weight
_REDUCE_SIG, _REDUCE_WARPS, _ = reduce_signature(128, 4096, 14336, _SPLIT_CFG, "bf16", activation="silu",
                                                 bias_dtype="bf16")
SIGNATURES = {
    "matmul_kernel": signature(4096, 4096, 4096, "f16")[0],
    "matmul_kernel_bf16_bias_gelu": signature(1000, 1000, 1000, "bf16", bias_dtype="bf16", activation="gelu")[0],
    "matmul_splitk_kernel": _SPLIT_SIG,
    "splitk_reduce_kernel": _REDUCE_SIG,
}
matmul_kernel_bf16_bias_gelu = matmul_kernel
OPTIONS = {"matmul_kernel": {"num_warps": 8, "num_stages": 4}, "matmul_kernel_bf16_bias_gelu": {"num_warps": 4},
           "matmul_splitk_kernel": {"num_warps": _SPLIT_CFG.num_warps, "num_stages": _SPLIT_CFG.num_stages},
           "splitk_reduce_kernel": {"num_warps": _REDUCE_WARPS}}
