"""Variable-length (packed) sequences for `attention` (flash-attn's varlen API, issue 45).

q is `(total_q, heads, dim)`, k and v `(total_k, kv_heads, dim)`: the sequences of a batch
packed one after another along the first axis (layout "bshd" without the batch dim);
`cu_seqlens_q/k` are int32 `(batch + 1,)` prefix sums, sequence i being rows
[cu[i], cu[i + 1]). Each sequence is attended on its own with every feature of the dense
path (causal bottom-right aligned per sequence, window, softcap, GQA); lse is
`(heads, total_q)` f32, as flash-attn's varlen.

One launch for the forward and three for the backward, whatever the batch, as
flash-attn's varlen kernels: the grid is (blocks of the longest sequence, heads, batch),
and each program reads its sequence's bounds from cu_seqlens on the device
(`attention_varlen_fwd_kernel`, `attention_varlen_bwd_dkdv_kernel`,
`attention_varlen_bwd_dq_kernel`: the dense kernels' bodies with VARLEN set) and ends at
once when its block lies past its sequence's end. `max_seqlen_q/k` (host ints) size the
grid, so with them given nothing is read back from the device (CUDA-graph capturable);
without them they are derived from cu_seqlens on the host, a synchronization for device
arrays. The backward's δ = rowsum(dO ∘ O) is the dense kernel over the packed rows.

The plans (`plan_forward`, `plan_backward`) are pure functions of array descriptions and
a Target; the entry points check the arguments and `execute` them.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

import tilec as tc
from tilec.target import Target

from ._common import Arr, as_array, check_float, check_same_place, output, refuse_read_back, \
    target_of, view
from .attention import HEAD_DIMS, AttentionConfig, _window, attention_varlen_fwd_kernel, check_config, compile_options, \
    config_for, scales
from .attention_bwd import attention_varlen_bwd_dkdv_kernel, attention_varlen_bwd_dq_kernel, bwd_config_for, \
    delta_launch
from .launches import Launch, Operands, execute

__all__ = ["plan_forward", "plan_backward", "attention_varlen", "attention_backward_varlen", "seqlens"]

VARLEN = "varlen"   # the plans' schedule


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------- plans
def plan_forward(q: Arr, k: Arr, v: Arr, batch: int, max_seqlen_q: int, target: Target, *,
                 softcap: bool = False, lse: bool = False, config: Optional[AttentionConfig] = None,
                 max_seqlen_k: Optional[int] = None, causal: bool = False) -> List[Launch]:
    """The forward's launches for packed q `(total_q, heads, d)`, k, v `(total_k, kv_heads, d)`
    of `batch` sequences, the longest query sequence `max_seqlen_q` long: one launch (none
    when there is no query row); a pure function (no launch). `config` replaces config_for's
    tiling, as attention.plan's; `max_seqlen_k` and `causal` choose it (config_for's n_kv)."""
    cfg = (config_for(q.shape[2], v.shape[2], target, varlen=True, n_kv=max_seqlen_k, causal=causal)
           if config is None else check_config(config, q.shape[2], v.shape[2]))
    grid = (_cdiv(max_seqlen_q, cfg.bm), q.shape[1], batch)
    if 0 in grid:
        return []
    return [Launch.of(attention_varlen_fwd_kernel, grid,
                      ("q", "k", "v", "o", "lse", "cu_q", "cu_k", "qk_scale", "cap", "left", "right"),
                      cfg.num_warps, options=compile_options(cfg), schedule=VARLEN,
                      GROUP=q.shape[1] // k.shape[1], SOFTCAP=softcap, LSE=lse,
                      BM=cfg.bm, BN=cfg.bn, DK=cfg.dk, DV=cfg.dv)]


def plan_backward(q: Arr, k: Arr, v: Arr, batch: int, max_seqlen_q: int, max_seqlen_k: int, target: Target, *,
                  softcap: bool = False, dlse: bool = False) -> List[Launch]:
    """The backward's launches (δ over the packed rows, dK/dV per key block of each sequence,
    dQ per query block), three whatever the batch; a pure function (no launch)."""
    total_q, h, d = q.shape
    hk, dv = k.shape[1], v.shape[2]
    cfg = bwd_config_for(d, target, dv, softcap, path="varlen")
    first = delta_launch(1, h, total_q, cfg, dlse, schedule=VARLEN)
    delta, = first.temps
    common = dict(GROUP=h // hk, SOFTCAP=softcap, DK=cfg.dk, DV=cfg.dv)
    ins = ("q", "k", "v", "do", "lse", "delta")
    scalars = ("cu_q", "cu_k", "qk_scale", "cap", "scale", "left", "right")
    stages = {"num_stages": cfg.num_stages}
    plan = [
        first,
        Launch.of(attention_varlen_bwd_dkdv_kernel, (_cdiv(max_seqlen_k, cfg.kv_block), hk, batch),
                  ins + ("dk", "dv") + scalars, cfg.num_warps, options=stages, temps=(delta,), schedule=VARLEN,
                  BM=cfg.q_step, BN=cfg.kv_block, **common),
        Launch.of(attention_varlen_bwd_dq_kernel, (_cdiv(max_seqlen_q, cfg.q_block), h, batch),
                  ins + ("dq",) + scalars, cfg.num_warps, options=stages, temps=(delta,), schedule=VARLEN,
                  BM=cfg.q_block, BN=cfg.kv_step, **common),
    ]
    return [ln for ln in plan if 0 not in ln.grid]


# ----------------------------------------------------------------------------- arguments
def _host_prefix(a: Arr, cu, name: str) -> np.ndarray:
    """cu_seqlens on the host as int64 (a device-to-host copy, a synchronization, for GPU arrays)."""
    if a.host:
        return np.asarray(cu, dtype=np.int64)
    refuse_read_back(cu, name, "attention (varlen)", f"pass max_seqlen_{name[-1]} (a host int)")
    if a.kind == "torch":
        return np.asarray(cu.detach().cpu().numpy(), dtype=np.int64)
    if isinstance(cu, tc.DeviceArray):
        return np.asarray(cu.to_numpy(), dtype=np.int64)
    raise TypeError(f"{name}: pass max_seqlen_{name[-1]} with a {type(cu).__name__} (it is not read back)")


def seqlens(cu_q, cu_k, total_q: int, total_k: int, max_seqlen_q=None, max_seqlen_k=None) -> Tuple[int, int, int]:
    """(batch, max_seqlen_q, max_seqlen_k) of a call, checking cu_seqlens: int32, 1-D, one
    batch for q and k. Host prefix sums are checked in full (from 0, non-decreasing, ending
    at the packed length) and give the maxima; device ones are read back for that only
    where a maximum is not given (a synchronization), else not checked, as flash-attn."""
    arrs = {"cu_seqlens_q": as_array(cu_q, "cu_seqlens_q"), "cu_seqlens_k": as_array(cu_k, "cu_seqlens_k")}
    for name, a in arrs.items():
        if a.dtype is not tc.int32:
            raise TypeError(f"{name}: expected int32 prefix sums, got {a.dtype.name}")
        if a.ndim != 1 or a.shape[0] < 1:
            raise ValueError(f"{name}: expected shape (batch + 1,), got {a.shape}")
    maxima = []
    for (name, a), cu, total, given in zip(arrs.items(), (cu_q, cu_k), (total_q, total_k),
                                           (max_seqlen_q, max_seqlen_k)):
        mname = f"max_seqlen_{name[-1]}"
        if given is not None and (isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < 0):
            raise ValueError(f"{mname}: expected a host int >= the longest sequence, got {given!r}")
        if given is not None and not a.host:
            maxima.append(int(given))
            continue
        host = _host_prefix(a, cu, name)
        if host[0] != 0 or np.any(np.diff(host) < 0):
            raise ValueError(f"{name}: expected non-decreasing prefix sums starting at 0, got {host.tolist()}")
        if host[-1] != total:
            raise ValueError(f"{name}: ends at {int(host[-1])} but the packed array has {total} rows")
        longest = int(np.diff(host).max(initial=0))
        if given is not None and given < longest:
            raise ValueError(f"{mname}: expected a host int >= the longest sequence ({longest}), got {given!r}")
        maxima.append(longest if given is None else int(given))
    nq, nk = arrs["cu_seqlens_q"].shape[0], arrs["cu_seqlens_k"].shape[0]
    if nq != nk:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must have one batch, got {nq - 1} and {nk - 1} sequences")
    return nq - 1, maxima[0], maxima[1]


def _check_rows(a: Arr, name: str) -> None:
    if a.ndim != 3:
        raise ValueError(f"{name}: varlen expects 3 dimensions (total, heads, dim), got shape {a.shape}")
    if a.strides[2] != 1 and a.numel and a.shape[2] > 1:
        raise ValueError(f"{name}: the head dim must be contiguous (stride 1), got strides {a.strides}")


def _packed(named, layout: str, cu_seqlens_q, cu_seqlens_k):
    """The packed `(total, heads, dim)` arrays by name, checked (the forward's and backward's
    common arguments): dtypes, head counts and dims as the dense path's `check_qkv`."""
    if layout != "bshd":
        raise ValueError(f"layout: varlen inputs are packed 'bshd' without the batch dim, got {layout!r}")
    if cu_seqlens_q is None or cu_seqlens_k is None:
        raise ValueError("cu_seqlens_q and cu_seqlens_k: pass both for variable-length sequences")
    arrs = {n: as_array(x, n) for n, x in named.items() if x is not None}
    check_same_place({**arrs, "cu_seqlens_q": as_array(cu_seqlens_q, "cu_seqlens_q"),
                      "cu_seqlens_k": as_array(cu_seqlens_k, "cu_seqlens_k")})
    qa, ka, va = arrs["q"], arrs["k"], arrs["v"]
    for n in ("q", "k", "v", "o", "do"):
        if n in arrs:
            _check_rows(arrs[n], n)
            check_float(arrs[n], n, (tc.float16, tc.bfloat16))
            if arrs[n].dtype is not qa.dtype:
                raise TypeError(f"{n}: expected q's dtype {qa.dtype.name}, got {arrs[n].dtype.name}")
    if ka.shape[:2] != va.shape[:2]:
        raise ValueError(f"k and v must have one total length and head count, got {ka.shape} and {va.shape}")
    if ka.shape[2] != qa.shape[2]:
        raise ValueError(f"k's head dim {ka.shape[2]} differs from q's {qa.shape[2]}")
    if ka.shape[1] == 0 or qa.shape[1] % ka.shape[1]:
        raise ValueError(f"q has {qa.shape[1]} heads, k and v {ka.shape[1]}: the kv heads must divide the query heads")
    if max(qa.shape[2], va.shape[2]) > HEAD_DIMS:
        raise ValueError(f"head dims up to {HEAD_DIMS} are supported, got {qa.shape[2]} and {va.shape[2]}")
    return arrs


def _heads_view(a: Arr):
    """(1, heads, total, dim) of a packed (total, heads, dim) array: the dense kernels' view."""
    (t, h, d), (s0, s1, s2) = a.shape, a.strides
    return view(a, (1, h, t, d), (0, s1, s0, s2))


def _rows_view(a: Arr):
    """(1, heads, total) of a (heads, total) f32 array (lse, dlse, δ)."""
    return view(a, (1,) + a.shape, (0,) + a.strides)


def _cu_view(cu, name: str):
    a = as_array(cu, name)
    return view(a, a.shape, a.strides)


def _check_lse(a: Arr, name: str, shape) -> None:
    if a.shape != shape:
        raise ValueError(f"{name}: expected (heads, total_q) = {shape}, got {a.shape}")
    if a.dtype is not tc.float32:
        raise TypeError(f"{name}: expected float32, got {a.dtype.name}")


# ----------------------------------------------------------------------------- entry points
def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     causal: bool, scale, window, softcap, layout: str, return_lse: bool, out):
    """The varlen path of `attention`."""
    arrs = _packed({"q": q, "k": k, "v": v}, layout, cu_seqlens_q, cu_seqlens_k)
    qa, ka, va = arrs["q"], arrs["k"], arrs["v"]
    batch, mq, mk = seqlens(cu_seqlens_q, cu_seqlens_k, qa.shape[0], ka.shape[0], max_seqlen_q, max_seqlen_k)
    left, right = _window(causal, window)
    qk_scale, cap, _ = scales(scale, softcap, qa.shape[2])
    h, total_q = qa.shape[1], qa.shape[0]
    oa = output(out, qa, (total_q, h, va.shape[2]), qa.dtype)
    _check_rows(oa, "out")
    lse = output(None, qa, (h, total_q), tc.float32, "lse") if return_lse else None
    # LSE=False compiles the store away; the kernel still takes an f32 view there
    lse_arr = lse if lse is not None else output(None, qa, (1, 1), tc.float32, "lse")
    plan = plan_forward(qa, ka, va, batch, mq, target_of(qa), softcap=softcap is not None, lse=return_lse,
                        max_seqlen_k=mk, causal=causal)
    execute(plan, Operands(arrs, {
        "q": _heads_view(qa), "k": _heads_view(ka), "v": _heads_view(va), "o": _heads_view(oa),
        "lse": _rows_view(lse_arr), "cu_q": _cu_view(cu_seqlens_q, "cu_seqlens_q"),
        "cu_k": _cu_view(cu_seqlens_k, "cu_seqlens_k"),
        "qk_scale": qk_scale, "cap": cap, "left": left, "right": right}))
    return (oa.obj, lse.obj) if return_lse else oa.obj


def attention_backward_varlen(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                              causal: bool, scale, window, softcap, layout: str, dq, dk, dv, dlse):
    """The varlen path of `attention_backward`: lse and dlse are `(heads, total_q)` f32, the
    rest packed as the forward's."""
    arrs = _packed({"do": do, "q": q, "k": k, "v": v, "o": o}, layout, cu_seqlens_q, cu_seqlens_k)
    qa, ka, va = arrs["q"], arrs["k"], arrs["v"]
    h, total_q = qa.shape[1], qa.shape[0]
    o_shape = (total_q, h, va.shape[2])
    for n in ("do", "o"):
        if arrs[n].shape != o_shape:
            raise ValueError(f"{n}: expected the forward output's shape {o_shape}, got {arrs[n].shape}")
    rows = {}
    for n, x in (("lse", lse), ("dlse", dlse)):
        if x is not None:
            rows[n] = as_array(x, n)
            _check_lse(rows[n], n, (h, total_q))
    if "lse" not in rows:
        raise ValueError("lse: the forward's log-sum-exp (return_lse=True) is required")
    check_same_place({"q": qa, **rows})
    batch, mq, mk = seqlens(cu_seqlens_q, cu_seqlens_k, total_q, ka.shape[0], max_seqlen_q, max_seqlen_k)
    left, right = _window(causal, window)
    qk_scale, cap, scale_ = scales(scale, softcap, qa.shape[2])
    grads = [output(g, a, a.shape, qa.dtype, n) for g, a, n in ((dq, qa, "dq"), (dk, ka, "dk"), (dv, va, "dv"))]
    for n, g in zip(("dq", "dk", "dv"), grads):
        _check_rows(g, n)
    plan = plan_backward(qa, ka, va, batch, mq, mk, target_of(qa), softcap=softcap is not None,
                         dlse=dlse is not None)
    values = {n: _heads_view(arrs[n]) for n in ("q", "k", "v", "o", "do")}
    values.update({n: _rows_view(a) for n, a in rows.items()})
    values.update({"dq": _heads_view(grads[0]), "dk": _heads_view(grads[1]), "dv": _heads_view(grads[2]),
                   "cu_q": _cu_view(cu_seqlens_q, "cu_seqlens_q"),
                   "cu_k": _cu_view(cu_seqlens_k, "cu_seqlens_k"),
                   "qk_scale": qk_scale, "cap": cap, "scale": scale_, "left": left, "right": right})
    execute(plan, Operands(arrs, values))
    return tuple(g.obj for g in grads)


# ----------------------------------------------------------------------------- PTX checks
# What a launch on contiguous packed tensors of odd total lengths specializes to, by operand
_V4 = "[?,?,?,?]:stride_div=16x16x16x1"
_ARG_TYPES = {"lse": "f32[?,?,?]:stride_div=16x1x1", "dlse": "f32[?,?,?]:stride_div=16x1x1",
              "delta": "f32[?,?,?]:stride_div=16x1x1", "cu_q": "i32[?]", "cu_k": "i32[?]", "qk_scale": "f32",
              "cap": "f32", "scale": "f32", "left": "i32", "right": "i32"}


def signature(launch: Launch, dtype: str = "f16") -> str:
    """The signature text of one of the plans' launches (positional: operand names differ
    from the kernels' parameter names), for tests/test_ptxas-style compiles."""
    types = [_ARG_TYPES.get(a, dtype + _V4) for a in launch.args]
    return ", ".join(types + [f"{k}={v}" for k, v in launch.constexprs])


def _shipped() -> List[Tuple[str, Launch, str]]:
    """(arch, launch, dtype) of the plans at the head dims and features the dense PTX checks cover
    (the forward at 64: at 128 the dense forward spills too, docs/benchmarks.md)."""
    from .launches import spec  # noqa: PLC0415
    out = []
    for arch in ("sm_80", "sm_90a"):
        target = Target.from_arch(arch)
        for d, dv, h, hk, dtype, softcap in ((64, 64, 4, 2, "f16", False), (64, 64, 2, 2, "bf16", True),
                                             (128, 128, 8, 2, "bf16", False), (128, 128, 4, 4, "f16", True),
                                             (256, 256, 2, 1, "f16", True),
                                             (192, 128, 2, 2, "bf16", False)):
            q, k, v = (spec((1001, n, x), tc.float16) for n, x in ((h, d), (hk, d), (hk, dv)))
            if max(d, dv) <= 64:
                out += [(arch, ln, dtype) for ln in plan_forward(q, k, v, 3, 500, target, softcap=softcap, lse=True)]
            out += [(arch, ln, dtype) for ln in plan_backward(q, k, v, 3, 500, 400, target, softcap=softcap)]
    return out


SHIPPED = _shipped()
# tests/test_ptxas.py (sm_80 and sm_90a): the new kernels as an A100 plans them at head dim 64, f16, two
# query heads per kv head (the first of each in SHIPPED's sm_80 entries: the mma.sync tiling, which sm_90a
# takes with softcap; sm_90a's wgmma blocks spill 4 bytes on sm_80, which never runs them)
SIGNATURES = {}
for _arch, _ln, _dt in SHIPPED:
    if _arch == "sm_80" and _ln.name.startswith("attention_varlen"):
        SIGNATURES.setdefault(_ln.name, signature(_ln, _dt))
del _arch, _ln, _dt
# (the δ kernel is attention_bwd's; tests/stdlib/test_attention_varlen.py assembles SHIPPED whole)
EXTRA_SIGNATURES = list(dict.fromkeys((ln.name, signature(ln, dt)) for _, ln, dt in SHIPPED
                                      if ln.name.startswith("attention_varlen")))
OPTIONS = {"attention_varlen_fwd_kernel": {"num_warps": 8, "fast_math": True},
           "attention_varlen_bwd_dkdv_kernel": {"num_warps": 8, "fast_math": True},
           "attention_varlen_bwd_dq_kernel": {"num_warps": 8, "fast_math": True}}
