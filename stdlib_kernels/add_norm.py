"""add_rms_norm: the residual add and rms_norm of a pre-norm transformer block in one pass,

    h = x + residual          (new_residual, rounded to residual's dtype)
    y = h * rstd * weight     (rstd = 1 / sqrt(mean(h^2) + eps) over the last dimension),

and its backward. The forward reads x and residual once and writes h and y, where separate
ops would write h, then read it again. y normalizes h as stored (rounded), which is what the
backward reads back, so the two agree as `add` followed by `rms_norm` would.

A row of up to 16384 elements is one tile (short rows packed, `_common.row_config`). A longer
row is looped twice over 4096-column tiles: the sum of squares (h written on the way), then y
from x + residual read again (not from h: another thread of the program may have written it,
and nothing orders that write before this read).

Backward, with g = dy * weight and hhat = h * rstd: dh = rstd * (g - hhat * mean(g * hhat)) +
dnew_residual, which is the gradient of both x and residual (one array); dweight = the sum over
rows of dy * hhat, from per-program partials added in a fixed order by a second launch
(`backward.norm_bwd_reduce_kernel`), as rms_norm's backward: deterministic, no atomics. Rows of
up to 8192 elements are one tile per row step; longer rows get their mean(g * hhat) from
`backward.norm_bwd_stats_kernel` first, then programs (p, j) write column tile j of dh.
"""
from __future__ import annotations

import math
from typing import List, Optional

import tilec as tc
from tilec.target import Target

from ._common import (Arr, as_array, check_float, check_same_place, next_pow2, output, row_config, rows_of,
                      target_of, view)
from ._plan import derived, planned
from .backward import (NORM_BWD_MAX_SINGLE, _norm_dx, _param, _row_stats, _stat, _stat_view, _weight, _xhat,
                       norm_bwd_reduce_kernel, norm_bwd_stats_kernel)
from .launches import Launch, Operands, Temp, execute
from .norms import _eps_scalar
from .schedules import LOOPED, ONE_TILE
from .tuning import row_tuning

__all__ = ["add_rms_norm", "add_rms_norm_backward", "plan", "backward_plan"]


@tc.func
def _sum_row(x, r, h, row, k, ROWS: tc.constexpr, BLOCK: tc.constexpr):
    # tile (row, k) of h = x + r, stored rounded to h's dtype; that rounded value in f32
    s = tc.load(x, index=(row, k), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32) + \
        tc.load(r, index=(row, k), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32)
    hs = s.astype(h.dtype)
    return hs, hs.astype(tc.float32)


@tc.kernel
def add_rms_norm_tile_kernel(x, r, w, y, h, rstd_out, eps, HAS_W: tc.constexpr, STATS: tc.constexpr,
                             ROWS: tc.constexpr, BLOCK: tc.constexpr):
    # ROWS rows of up to BLOCK elements per program, read once (padded lanes are 0: no sum)
    pid = tc.program_id(0)
    hs, t = _sum_row(x, r, h, pid, 0, ROWS, BLOCK)
    tc.store(h, index=(pid, 0), tile=hs)
    rstd = tc.rsqrt(tc.sum(t * t, axis=1, keep_dims=True) / x.shape[1] + eps)
    tc.store(y, index=(pid, 0), tile=(t * rstd * _weight(w, 0, BLOCK, HAS_W)).astype(y.dtype))
    if STATS:
        tc.store(rstd_out, index=(pid,), tile=tc.reshape(rstd, (ROWS,)))


@tc.kernel
def add_rms_norm_loop_kernel(x, r, w, y, h, rstd_out, eps, HAS_W: tc.constexpr, STATS: tc.constexpr,
                             BLOCK: tc.constexpr):
    # One program per long row: h and the sum of squares, then y (x and r read twice, module doc)
    row = tc.program_id(0)
    n_k = tc.cdiv(x.shape[1], BLOCK)
    acc = tc.zeros((1, BLOCK), tc.float32)
    for k in range(n_k):
        hs, t = _sum_row(x, r, h, row, k, 1, BLOCK)
        tc.store(h, index=(row, k), tile=hs)
        acc += t * t
    rstd = tc.rsqrt(tc.sum(acc) / x.shape[1] + eps)
    for k in range(n_k):
        _, t = _sum_row(x, r, h, row, k, 1, BLOCK)
        tc.store(y, index=(row, k), tile=(t * rstd * _weight(w, k, BLOCK, HAS_W)).astype(y.dtype))
    if STATS:
        tc.store(rstd_out, index=(row,), tile=tc.full((1,), rstd, tc.float32))


def plan(x: Arr, has_w: bool, stats: bool, target: Target) -> List[Launch]:
    """The launch of add_rms_norm over `x`'s rows (a description; residual, y and h share its
    shape), on `target`. Operands: "x", "r", "y", "h" (rows as 2-D views), "w" (1-D, or a
    stand-in), "rstd" (1-D f32, or a stand-in), "eps" (an f32 scalar). ONE_TILE for rows of up
    to 16384 elements (`row_config`; 32 elements per thread in big 2-byte tiles, as rms_norm),
    else LOOPED, one program per row."""
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    if n_cols == 0 or n_rows == 0:
        return []
    cfg = row_config(n_cols, n_rows, big_tile_per_thread=32 if x.dtype.itemsize == 2 else 16)
    args = ("x", "r", "w", "y", "h", "rstd", "eps")
    flags = dict(HAS_W=has_w, STATS=bool(stats), BLOCK=cfg.block)
    if cfg.single:
        return [Launch.of(add_rms_norm_tile_kernel, cfg.grid(n_rows), args, cfg.num_warps, schedule=ONE_TILE,
                          ROWS=cfg.rows, **flags)]
    return [Launch.of(add_rms_norm_loop_kernel, (n_rows,), args, cfg.num_warps, schedule=LOOPED, **flags)]


def _same_shape(a: Arr, name: str, x: Arr, op: str) -> None:
    if a.shape != x.shape:
        raise ValueError(f"{op}: {name} has shape {a.shape}, expected x's {x.shape}")


@planned(per_call=_eps_scalar)
def add_rms_norm(x, residual, weight=None, eps: float = 1e-6, return_stats: bool = False, out=None,
                 residual_out=None):
    """add_rms_norm(x, residual, weight=None, eps=1e-6, return_stats=False, out=None, residual_out=None)
    -> (y, new_residual), or (y, new_residual, rstd).

    new_residual = x + residual (in residual's dtype), y = rms_norm(new_residual, weight, eps)
    (in x's dtype, or written to `out`), in one pass over the rows of the last dimension (module
    doc). x and residual: same shape, f16, bf16 or f32 each (last stride 1, leading dimensions
    flattenable); weight: 1-D of the last dimension's length or None. rstd: f32 of
    x.shape[:-1] (what `add_rms_norm_backward` takes). Math in f32. `residual_out`: where
    new_residual is written (x's shape, residual's dtype; not residual itself), else a new array.
    """
    op = "add_rms_norm"
    a, ra = as_array(x, "x"), as_array(residual, "residual")
    check_float(a, "x")
    check_float(ra, "residual")
    if a.ndim == 0:
        raise ValueError(f"{op}: x must have at least 1 dimension")
    _same_shape(ra, "residual", a, op)
    n = a.shape[-1]
    wa = _param(weight, "weight", n, op)
    check_same_place({"x": a, "residual": ra, **({"weight": wa} if wa is not None else {})})
    (eps32,) = derived(_eps_scalar, eps)
    o = output(out, a, a.shape, a.dtype)
    h = output(residual_out, a, a.shape, ra.dtype, "residual_out")
    rstd = output(None, a, a.shape[:-1], tc.float32) if return_stats else None
    xv, n_rows, _ = rows_of(a, "x")
    values = {"x": xv, "r": rows_of(ra, "residual")[0], "y": rows_of(o, "out")[0], "h": rows_of(h, "out")[0],
              "w": view(wa, (n,), wa.strides) if wa is not None else xv,
              "rstd": view(rstd, (n_rows,), (1,)) if rstd is not None else xv, "eps": eps32}
    execute(plan(a, wa is not None, bool(return_stats), target_of(a)), Operands({"x": a}, values))
    return (o.obj, h.obj, rstd.obj) if return_stats else (o.obj, h.obj)


# ----------------------------------------------------------------------------- backward
@tc.func
def _dres(dres, row, k, ROWS: tc.constexpr, BLOCK: tc.constexpr, HAS_DRES: tc.constexpr):
    if HAS_DRES:
        return tc.load(dres, index=(row, k), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32)
    return 0.0


@tc.kernel
def add_rms_norm_bwd_tile_kernel(dy, dres, h, w, rstd_in, dx, dw_part, HAS_W: tc.constexpr,
                                 HAS_DRES: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr):
    # rms_norm_backward's tile kernel (`backward.norm_bwd_tile_kernel`) plus dres: program pid
    # takes row steps pid, pid + P, ... and keeps its share of dw, stored as row pid of dw_part.
    pid = tc.program_id(0)
    inv_n = 1.0 / h.shape[1]
    wt = _weight(w, 0, BLOCK, HAS_W)
    acc_w = tc.zeros((1, BLOCK), tc.float32)
    for r in range(pid, tc.cdiv(h.shape[0], ROWS), tc.num_programs(0)):
        _, rstd = _row_stats(rstd_in, rstd_in, r, ROWS, True)
        hhat = _xhat(h, 0.0, rstd, r, 0, ROWS, BLOCK, True)
        g = tc.load(dy, index=(r, 0), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32)
        d = _norm_dx(g, hhat, g * wt, inv_n, rstd, True) + _dres(dres, r, 0, ROWS, BLOCK, HAS_DRES)
        tc.store(dx, index=(r, 0), tile=d.astype(dx.dtype))
        if HAS_W:
            acc_w += tc.sum(g * hhat, axis=0, keep_dims=True)
    if HAS_W:
        tc.store(dw_part, index=(pid, 0), tile=acc_w)


@tc.kernel
def add_rms_norm_bwd_cols_kernel(dy, dres, h, w, rstd_in, c1_in, dx, dw_part, HAS_W: tc.constexpr,
                                 HAS_DRES: tc.constexpr, BLOCK: tc.constexpr):
    # Long rows, pass 2 (c1 = mean(g * hhat) per row from `norm_bwd_stats_kernel`): program (p, j)
    # writes column tile j of dx for rows p, p + P, ... and keeps that tile's dw share at (p, j).
    p = tc.program_id(0)
    j = tc.program_id(1)
    wt = _weight(w, j, BLOCK, HAS_W)
    acc_w = tc.zeros((1, BLOCK), tc.float32)
    for r in range(p, h.shape[0], tc.num_programs(0)):
        c1, rstd = _row_stats(c1_in, rstd_in, r, 1, False)
        hhat = _xhat(h, 0.0, rstd, r, j, 1, BLOCK, True)
        g = tc.load(dy, index=(r, j), shape=(1, BLOCK), padding=0.0).astype(tc.float32)
        d = (g * wt - hhat * c1) * rstd + _dres(dres, r, j, 1, BLOCK, HAS_DRES)
        tc.store(dx, index=(r, j), tile=d.astype(dx.dtype))
        if HAS_W:
            acc_w += g * hhat
    if HAS_W:
        tc.store(dw_part, index=(p, j), tile=acc_w)


def backward_plan(h: Arr, has_w: bool, has_dres: bool, target: Target) -> List[Launch]:
    """The launches of add_rms_norm's backward over `h`'s rows (new_residual, a description; dy,
    dres and dx share its shape), on `target`. Operands: "dy", "dres", "h", "dx" (rows as 2-D
    views; "dres" a stand-in without one), "w" (1-D, or a stand-in), "rstd" (1-D f32), "dw"
    (1-D, or a stand-in). Schedules and programs as rms_norm's backward
    (`backward.norm_backward_plan`): ONE_TILE for rows of up to NORM_BWD_MAX_SINGLE elements
    on at most `bwd_programs_per_sm` programs per SM, else LOOPED (a per-row launch for
    mean(g * hhat), then (row groups, column tiles)); then the partials' reduction for dw."""
    n_cols, n_rows = h.shape[-1], math.prod(h.shape[:-1])
    if n_cols == 0:
        return []
    t = row_tuning(target).norm
    cfg = row_config(n_cols, n_rows, max_single=NORM_BWD_MAX_SINGLE)
    flags = dict(HAS_W=has_w, HAS_DRES=has_dres)
    launches, temps = [], []
    if cfg.single:
        steps = tc.cdiv(n_rows, cfg.rows) if n_rows else 0
        grid = (max(1, min(steps, t.bwd_programs_per_sm * target.sm_count)),)
        cols = cfg.block
        kernel, args, schedule, consts = add_rms_norm_bwd_tile_kernel, ("dy", "dres", "h", "w", "rstd"), ONE_TILE, \
            dict(ROWS=cfg.rows, BLOCK=cfg.block)
    else:
        n_k = tc.cdiv(n_cols, cfg.block)
        c1 = Temp("c1", (max(n_rows, 1),), tc.float32, like="h")
        temps.append(c1)
        if n_rows:
            # (mean_in and c2_out are stand-ins: rms_norm's form reads and writes neither)
            launches.append(Launch.of(norm_bwd_stats_kernel, (n_rows,), ("dy", "h", "w", "rstd", "rstd", "c1", "c1"),
                                      cfg.num_warps, temps=(c1,), schedule=LOOPED, RMS=True, HAS_W=has_w,
                                      BLOCK=cfg.block))
        grid = (max(1, min(n_rows, tc.cdiv(t.bwd_programs_per_sm * target.sm_count, n_k))), n_k)
        cols = n_k * cfg.block
        kernel, args, schedule, consts = add_rms_norm_bwd_cols_kernel, ("dy", "dres", "h", "w", "rstd", "c1"), \
            LOOPED, dict(BLOCK=cfg.block)
    part = "dw_part" if has_w else "dx"   # a stand-in the kernel never touches
    if has_w:
        temps.append(Temp("dw_part", (grid[0], cols), tc.float32, like="h"))
    launches.append(Launch.of(kernel, grid, (*args, "dx", part), cfg.num_warps, temps=tuple(temps),
                              schedule=schedule, **flags, **consts))
    if has_w:
        bc = min(next_pow2(n_cols), t.bwd_reduce_cols)
        bp = min(next_pow2(grid[0]), max(t.bwd_reduce_tile // bc, 1))
        launches.append(Launch.of(norm_bwd_reduce_kernel, (tc.cdiv(n_cols, bc),), ("dw_part", "dw_part", "dw", "dw"),
                                  max(1, min(bp * bc // 512, 8)), schedule="reduce", HAS_W=True, DB=False, BP=bp,
                                  BC=bc))
    return launches


@planned
def add_rms_norm_backward(dy, dresidual, residual_out, weight, rstd, out=None):
    """add_rms_norm_backward(dy, dresidual, residual_out, weight, rstd, out=None) -> (dx, dweight).

    The gradients of (y, new_residual) = add_rms_norm(x, residual, weight) given dy (y's
    gradient) and dresidual (new_residual's, or None), from the forward's new_residual
    (`residual_out`) and rstd (`return_stats=True`). dx is the gradient of x and of residual
    alike (one array, in dy's dtype, or written to `out`); dweight (weight's dtype; None when
    weight is) is reduced without atomics, deterministically (module doc). f32 math.
    """
    op = "add_rms_norm_backward"
    ha, ga = as_array(residual_out, "residual_out"), as_array(dy, "dy")
    check_float(ha, "residual_out")
    check_float(ga, "dy")
    if ha.ndim == 0:
        raise ValueError(f"{op}: residual_out must have at least 1 dimension")
    if ga.shape != ha.shape:
        raise ValueError(f"{op}: dy has shape {ga.shape}, expected residual_out's {ha.shape}")
    da = None
    if dresidual is not None:
        da = as_array(dresidual, "dresidual")
        check_float(da, "dresidual")
        if da.shape != ha.shape:
            raise ValueError(f"{op}: dresidual has shape {da.shape}, expected residual_out's {ha.shape}")
    n = ha.shape[-1]
    wa = _param(weight, "weight", n, op)
    ra = _stat(rstd, "rstd", ha.shape[:-1], op)
    named = {"residual_out": ha, "dy": ga, "rstd": ra}
    named.update({k: v for k, v in (("dresidual", da), ("weight", wa)) if v is not None})
    check_same_place(named)
    o = output(out, ha, ha.shape, ga.dtype)
    dw = output(None, ha, (n,), wa.dtype) if wa is not None else None
    hv, n_rows, _ = rows_of(ha, "residual_out")
    gv = rows_of(ga, "dy")[0]
    values = {"dy": gv, "h": hv, "dx": rows_of(o, "out")[0],
              "dres": rows_of(da, "dresidual")[0] if da is not None else gv,
              "w": view(wa, (n,), wa.strides) if wa is not None else hv, "rstd": _stat_view(ra, n_rows),
              "dw": view(dw, (n,), (1,)) if dw is not None else hv}
    execute(backward_plan(ha, wa is not None, da is not None, target_of(ha)), Operands({"h": ha}, values))
    return o.obj, (dw.obj if dw is not None else None)


# ----------------------------------------------------------------------------- PTX check
_BT = "dy={d}[?,?], dres={d}[?,?], h={d}[?,?], w={d}[?], rstd_in=f32[?], dx={d}[?,?], dw_part=f32[?,?]"
_BC = "dy={d}[?,?], dres={d}[?,?], h={d}[?,?], w={d}[?], rstd_in=f32[?], c1_in=f32[?], dx={d}[?,?], dw_part=f32[?,?]"
SIGNATURES = {
    "add_rms_norm_tile_kernel": "x=bf16[?,?], r=bf16[?,?], w=bf16[?], y=bf16[?,?], h=bf16[?,?], rstd_out=f32[?], "
                                "eps=f32, HAS_W=True, STATS=True, ROWS=1, BLOCK=4096",
    "add_rms_norm_loop_kernel": "x=bf16[?,?], r=bf16[?,?], w=bf16[?], y=bf16[?,?], h=bf16[?,?], rstd_out=f32[?], "
                                "eps=f32, HAS_W=True, STATS=True, BLOCK=4096",
    "add_rms_norm_bwd_tile_kernel": _BT.format(d="bf16") + ", HAS_W=True, HAS_DRES=True, ROWS=1, BLOCK=4096",
    "add_rms_norm_bwd_cols_kernel": _BC.format(d="bf16") + ", HAS_W=True, HAS_DRES=True, BLOCK=4096",
}
OPTIONS = {"add_rms_norm_tile_kernel": {"num_warps": 8, "fast_math": True},
           "add_rms_norm_loop_kernel": {"num_warps": 8, "fast_math": True},
           "add_rms_norm_bwd_tile_kernel": {"num_warps": 8, "fast_math": True},
           "add_rms_norm_bwd_cols_kernel": {"num_warps": 8, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("add_rms_norm_tile_kernel", "x=bf16[?,?], r=f32[?,?], w=f32[?], y=bf16[?,?], h=f32[?,?], rstd_out=f32[?], "
                                 "eps=f32, HAS_W=True, STATS=False, ROWS=1, BLOCK=16384"),
    ("add_rms_norm_tile_kernel", "x=f32[?,?], r=f32[?,?], w=f32[?], y=f32[?,?], h=f32[?,?], rstd_out=f32[?], "
                                 "eps=f32, HAS_W=True, STATS=True, ROWS=1, BLOCK=16384"),
    ("add_rms_norm_tile_kernel", "x=f16[?,?], r=f16[?,?], w=f16[?], y=f16[?,?], h=f16[?,?], rstd_out=f32[?], "
                                 "eps=f32, HAS_W=False, STATS=True, ROWS=64, BLOCK=32"),
    ("add_rms_norm_bwd_tile_kernel", _BT.format(d="bf16") + ", HAS_W=True, HAS_DRES=True, ROWS=1, BLOCK=8192"),
    ("add_rms_norm_bwd_tile_kernel", _BT.format(d="f32") + ", HAS_W=True, HAS_DRES=False, ROWS=2, BLOCK=1024"),
    ("add_rms_norm_bwd_cols_kernel", _BC.format(d="f32") + ", HAS_W=False, HAS_DRES=True, BLOCK=4096"),
]
