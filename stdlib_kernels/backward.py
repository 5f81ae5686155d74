"""Backward passes of the row ops: softmax, log_softmax, layer_norm, rms_norm.

softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy), both
from the forward's output y, over the last dimension. A row of up to 16384 elements
is one tile (short rows packed several to a program, `_common.row_config`) and is
read once; a longer row is read twice (the row's sum, then dx), and a few long rows
are split among programs (per-chunk sums, then a launch that adds a row's chunk sums
and writes its chunk), as the forward's SPLIT.

The norms, from the forward's statistics (`return_stats=True`: mean and rstd per
row), with xhat = (x - mean) * rstd and g = dy * weight:

    layer_norm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    rms_norm:   dx = rstd * (g - xhat * mean(g * xhat))          (xhat = x * rstd)
    dweight = sum over rows of dy * xhat, dbias = sum over rows of dy.

dweight and dbias are reduced without atomics: each program of the row kernel walks
row steps pid, pid + P, ... and keeps its share of the column sums (f32) in registers,
written to a (P, cols) partial array; a last kernel adds the P partials of each column
in a fixed order. So the result is deterministic (bit-identical run to run). Rows of up
to 8192 elements are one tile per step (read once); longer rows first get their two
sums from one program per row, then programs (p, j) write column tile j of dx for rows
p, p + P, ... and keep that tile's column sums. All math is f32.
"""
from __future__ import annotations

import math
from typing import List, Optional

import tilec as tc
from tilec.target import Target

from ._common import (Arr, as_array, check_float, check_same_place, next_pow2, output, row_config, rows_of,
                      target_of, view)
from ._plan import planned
from .launches import Launch, Operands, Temp, execute
from .schedules import LOOPED, ONE_TILE, SPLIT, split_chunks_count
from .tuning import row_tuning

__all__ = ["softmax_backward", "log_softmax_backward", "layer_norm_backward", "rms_norm_backward",
           "softmax_backward_plan", "norm_backward_plan"]


# ----------------------------------------------------------------------------- softmax
@tc.func
def _softmax_dx(g, t, s, LOG: tc.constexpr):
    # dx from dy (g), y (t) and the row's sum s (of dy * y, or of dy for log_softmax)
    if LOG:
        return g - tc.exp(t) * s
    return t * (g - s)


@tc.func
def _row_pair(dy, y, row, k, ROWS: tc.constexpr, BLOCK: tc.constexpr):
    # tile (row, k) of dy and y in f32, 0 outside the rows: padded lanes add nothing to a sum
    g = tc.load(dy, index=(row, k), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32)
    t = tc.load(y, index=(row, k), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32)
    return g, t


@tc.func
def _term(g, t, LOG: tc.constexpr):
    # what the row's sum adds up
    if LOG:
        return g
    return g * t


@tc.kernel
def softmax_bwd_tile_kernel(dy, y, dx, LOG: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr):
    # ROWS rows of up to BLOCK elements per program, read once.
    pid = tc.program_id(0)
    g, t = _row_pair(dy, y, pid, 0, ROWS, BLOCK)
    s = tc.sum(_term(g, t, LOG), axis=1, keep_dims=True)
    tc.store(dx, index=(pid, 0), tile=_softmax_dx(g, t, s, LOG).astype(dx.dtype))


@tc.func
def _lane_sum(dy, y, row, k0, n_k, LOG: tc.constexpr, BLOCK: tc.constexpr):
    # the row's sum over tiles [k0, k0 + n_k), lane-wise first (one cross-thread reduction)
    acc = tc.zeros((1, BLOCK), tc.float32)
    for k in range(k0, k0 + n_k):
        g, t = _row_pair(dy, y, row, k, 1, BLOCK)
        acc += _term(g, t, LOG)
    return tc.sum(acc)


@tc.func
def _write_dx(dy, y, dx, row, k0, n_k, s, LOG: tc.constexpr, BLOCK: tc.constexpr):
    for k in range(k0, k0 + n_k):
        g, t = _row_pair(dy, y, row, k, 1, BLOCK)
        tc.store(dx, index=(row, k), tile=_softmax_dx(g, t, s, LOG).astype(dx.dtype))


@tc.kernel
def softmax_bwd_loop_kernel(dy, y, dx, LOG: tc.constexpr, BLOCK: tc.constexpr):
    # One program per long row: the row's sum, then dx (the row read twice).
    row = tc.program_id(0)
    n_k = tc.cdiv(dy.shape[1], BLOCK)
    _write_dx(dy, y, dx, row, 0, n_k, _lane_sum(dy, y, row, 0, n_k, LOG, BLOCK), LOG, BLOCK)


@tc.kernel
def softmax_bwd_partial_kernel(dy, y, s_part, tiles_per_chunk, LOG: tc.constexpr, BLOCK: tc.constexpr):
    # Split rows, pass 1: program (row, c) writes its chunk's sum.
    row = tc.program_id(0)
    c = tc.program_id(1)
    s = _lane_sum(dy, y, row, c * tiles_per_chunk, tiles_per_chunk, LOG, BLOCK)
    tc.store(s_part, index=(row, c), tile=tc.full((1, 1), s, tc.float32))


@tc.kernel
def softmax_bwd_finish_kernel(dy, y, dx, s_part, tiles_per_chunk, LOG: tc.constexpr, CHUNKS: tc.constexpr,
                              BLOCK: tc.constexpr):
    # Split rows, pass 2: each program adds its row's chunk sums (in chunk order: every
    # program of a row gets the same sum) and writes its own chunk.
    row = tc.program_id(0)
    c = tc.program_id(1)
    s = tc.sum(tc.load(s_part, index=(row, 0), shape=(1, CHUNKS), padding=0.0))
    _write_dx(dy, y, dx, row, c * tiles_per_chunk, tiles_per_chunk, s, LOG, BLOCK)


def softmax_backward_plan(y: Arr, log: bool, target: Target) -> List[Launch]:
    """The launches of softmax's (log_softmax's if `log`) backward over `y`'s rows of its last
    dimension (a description; dy and dx share its shape), on `target`. Operands: "dy", "y", "dx"
    (rows as 2-D views). ONE_TILE for rows of up to 16384 elements (`row_config`), else SPLIT
    when the rows are too few to fill the GPU (`split_chunks_count`, softmax's table), else LOOPED."""
    n_cols, n_rows = y.shape[-1], math.prod(y.shape[:-1])
    if n_cols == 0 or n_rows == 0:
        return []
    # two f32 tiles live per row (dy and y): 16 elements per thread of each
    cfg = row_config(n_cols, n_rows)
    args = ("dy", "y", "dx")
    if cfg.single:
        return [Launch.of(softmax_bwd_tile_kernel, cfg.grid(n_rows), args, cfg.num_warps, schedule=ONE_TILE,
                          LOG=log, ROWS=cfg.rows, BLOCK=cfg.block)]
    n_tiles = tc.cdiv(n_cols, cfg.block)
    chunks, per = split_chunks_count(n_rows, n_tiles, row_tuning(target).softmax)
    if chunks < 2:
        return [Launch.of(softmax_bwd_loop_kernel, (n_rows,), args, cfg.num_warps, schedule=LOOPED, LOG=log,
                          BLOCK=cfg.block)]
    part = Temp("s_part", (n_rows, chunks), tc.float32, like="y")
    return [Launch.of(softmax_bwd_partial_kernel, (n_rows, chunks), ("dy", "y", "s_part", per), cfg.num_warps,
                      temps=(part,), schedule=SPLIT, LOG=log, BLOCK=cfg.block),
            Launch.of(softmax_bwd_finish_kernel, (n_rows, chunks), ("dy", "y", "dx", "s_part", per), cfg.num_warps,
                      schedule=SPLIT, LOG=log, CHUNKS=next_pow2(chunks), BLOCK=cfg.block)]


def _softmax_backward(dy, y, out, log: bool, op: str):
    ya, ga = as_array(y, "y"), as_array(dy, "dy")
    check_float(ya, "y")
    check_float(ga, "dy")
    check_same_place({"y": ya, "dy": ga})
    if ya.ndim == 0:
        raise ValueError(f"{op}: y must have at least 1 dimension")
    if ga.shape != ya.shape:
        raise ValueError(f"{op}: dy has shape {ga.shape}, expected y's {ya.shape}")
    o = output(out, ya, ya.shape, ga.dtype)
    values = {"dy": rows_of(ga, "dy")[0], "y": rows_of(ya, "y")[0], "dx": rows_of(o, "out")[0]}
    execute(softmax_backward_plan(ya, log, target_of(ya)), Operands({"y": ya}, values))
    return o.obj


@planned
def softmax_backward(dy, y, out=None):
    """softmax_backward(dy, y, out=None) -> dx = y * (dy - sum(dy * y)) over the last dimension.

    y: softmax's output (f16, bf16 or f32), dy: the gradient of y (same shape, any of
    those dtypes). Returns dx in dy's dtype (or writes `out`, which may be dy itself).
    Computed in f32. Rows: last stride 1, leading dimensions flattenable (else ValueError).
    """
    return _softmax_backward(dy, y, out, False, "softmax_backward")


@planned
def log_softmax_backward(dy, y, out=None):
    """log_softmax_backward(dy, y, out=None) -> dx = dy - exp(y) * sum(dy) over the last dimension.

    y: log_softmax's output; otherwise as `softmax_backward`.
    """
    return _softmax_backward(dy, y, out, True, "log_softmax_backward")


# ----------------------------------------------------------------------------- layer_norm, rms_norm
@tc.func
def _norm_dx(g, xhat, dyw, inv_n, rstd, RMS: tc.constexpr):
    # dx of rows whose padded lanes have g = dyw = 0 (so they add nothing to the sums)
    c1 = tc.sum(dyw * xhat, axis=1, keep_dims=True) * inv_n
    d = dyw - xhat * c1
    if not RMS:
        d = d - tc.sum(dyw, axis=1, keep_dims=True) * inv_n
    return d * rstd


@tc.func
def _xhat(x, mean, rstd, row, k, ROWS: tc.constexpr, BLOCK: tc.constexpr, RMS: tc.constexpr):
    t = tc.load(x, index=(row, k), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32)
    if not RMS:
        t = t - mean
    return t * rstd


@tc.func
def _row_stats(mean_in, rstd_in, row, ROWS: tc.constexpr, RMS: tc.constexpr):
    # (mean, rstd) of rows row * ROWS ..., as (ROWS, 1); rows past the end get 0
    rstd = tc.reshape(tc.load(rstd_in, index=(row,), shape=(ROWS,), padding=0.0), (ROWS, 1))
    mean = 0.0
    if not RMS:
        mean = tc.reshape(tc.load(mean_in, index=(row,), shape=(ROWS,), padding=0.0), (ROWS, 1))
    return mean, rstd


@tc.func
def _weight(w, k, BLOCK: tc.constexpr, HAS_W: tc.constexpr):
    if HAS_W:
        return tc.reshape(tc.load(w, index=(k,), shape=(BLOCK,), padding=0.0).astype(tc.float32), (1, BLOCK))
    return 1.0


@tc.kernel
def norm_bwd_tile_kernel(dy, x, w, mean_in, rstd_in, dx, dw_part, db_part, RMS: tc.constexpr,
                         HAS_W: tc.constexpr, DB: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr):
    # Rows of up to BLOCK elements, ROWS to a step; program pid takes steps pid, pid + P, ...
    # and keeps its share of dw (and db) in registers, stored as row pid of the partials.
    pid = tc.program_id(0)
    n = x.shape[1]
    inv_n = 1.0 / n
    wt = _weight(w, 0, BLOCK, HAS_W)
    acc_w = tc.zeros((1, BLOCK), tc.float32)
    acc_b = tc.zeros((1, BLOCK), tc.float32)
    for r in range(pid, tc.cdiv(x.shape[0], ROWS), tc.num_programs(0)):
        mean, rstd = _row_stats(mean_in, rstd_in, r, ROWS, RMS)
        xhat = _xhat(x, mean, rstd, r, 0, ROWS, BLOCK, RMS)
        g = tc.load(dy, index=(r, 0), shape=(ROWS, BLOCK), padding=0.0).astype(tc.float32)
        tc.store(dx, index=(r, 0), tile=_norm_dx(g, xhat, g * wt, inv_n, rstd, RMS).astype(dx.dtype))
        if HAS_W:
            acc_w += tc.sum(g * xhat, axis=0, keep_dims=True)
        if DB:
            acc_b += tc.sum(g, axis=0, keep_dims=True)
    if HAS_W:
        tc.store(dw_part, index=(pid, 0), tile=acc_w)
    if DB:
        tc.store(db_part, index=(pid, 0), tile=acc_b)


@tc.kernel
def norm_bwd_stats_kernel(dy, x, w, mean_in, rstd_in, c1_out, c2_out, RMS: tc.constexpr, HAS_W: tc.constexpr,
                          BLOCK: tc.constexpr):
    # Long rows, pass 1, one program per row: c1 = mean(g * xhat) and c2 = mean(g) (layer_norm).
    row = tc.program_id(0)
    n = x.shape[1]
    mean, rstd = _row_stats(mean_in, rstd_in, row, 1, RMS)
    s1 = tc.zeros((1, BLOCK), tc.float32)
    s2 = tc.zeros((1, BLOCK), tc.float32)
    for k in range(tc.cdiv(n, BLOCK)):
        xhat = _xhat(x, mean, rstd, row, k, 1, BLOCK, RMS)
        dyw = tc.load(dy, index=(row, k), shape=(1, BLOCK), padding=0.0).astype(tc.float32) * _weight(w, k, BLOCK,
                                                                                                     HAS_W)
        s1 += dyw * xhat
        s2 += dyw
    tc.store(c1_out, index=(row,), tile=tc.full((1,), tc.sum(s1) / n, tc.float32))
    if not RMS:
        tc.store(c2_out, index=(row,), tile=tc.full((1,), tc.sum(s2) / n, tc.float32))


@tc.kernel
def norm_bwd_cols_kernel(dy, x, w, mean_in, rstd_in, c1_in, c2_in, dx, dw_part, db_part, RMS: tc.constexpr,
                         HAS_W: tc.constexpr, DB: tc.constexpr, BLOCK: tc.constexpr):
    # Long rows, pass 2: program (p, j) writes column tile j of dx for rows p, p + P, ... and
    # keeps their share of dw (db) for that tile in registers, stored at (p, j) of the partials.
    p = tc.program_id(0)
    j = tc.program_id(1)
    wt = _weight(w, j, BLOCK, HAS_W)
    acc_w = tc.zeros((1, BLOCK), tc.float32)
    acc_b = tc.zeros((1, BLOCK), tc.float32)
    for r in range(p, x.shape[0], tc.num_programs(0)):
        mean, rstd = _row_stats(mean_in, rstd_in, r, 1, RMS)
        xhat = _xhat(x, mean, rstd, r, j, 1, BLOCK, RMS)
        g = tc.load(dy, index=(r, j), shape=(1, BLOCK), padding=0.0).astype(tc.float32)
        c2, c1 = _row_stats(c2_in, c1_in, r, 1, RMS)   # read as a (mean, rstd) pair: c2 = 0 for rms_norm
        tc.store(dx, index=(r, j), tile=((g * wt - xhat * c1 - c2) * rstd).astype(dx.dtype))
        if HAS_W:
            acc_w += g * xhat
        if DB:
            acc_b += g
    if HAS_W:
        tc.store(dw_part, index=(p, j), tile=acc_w)
    if DB:
        tc.store(db_part, index=(p, j), tile=acc_b)


@tc.kernel
def norm_bwd_reduce_kernel(dw_part, db_part, dw, db, HAS_W: tc.constexpr, DB: tc.constexpr, BP: tc.constexpr,
                           BC: tc.constexpr):
    # dw (db) column block j: the partials' rows added BP at a time, in order (deterministic).
    j = tc.program_id(0)
    n_p = tc.cdiv(dw_part.shape[0], BP)
    if HAS_W:
        acc = tc.zeros((BP, BC), tc.float32)
        for p in range(n_p):
            acc += tc.load(dw_part, index=(p, j), shape=(BP, BC), padding=0.0)
        tc.store(dw, index=(j,), tile=tc.sum(acc, axis=0).astype(dw.dtype))
    if DB:
        acc_b = tc.zeros((BP, BC), tc.float32)
        for p in range(n_p):
            acc_b += tc.load(db_part, index=(p, j), shape=(BP, BC), padding=0.0)
        tc.store(db, index=(j,), tile=tc.sum(acc_b, axis=0).astype(db.dtype))


NORM_BWD_MAX_SINGLE = 8192


def norm_backward_plan(x: Arr, rms: bool, has_w: bool, has_b: bool, target: Target) -> List[Launch]:
    """The launches of layer_norm's (rms_norm's if `rms`) backward over `x`'s rows (a
    description; dy and dx share its shape), on `target`, with dweight if `has_w` and dbias if
    `has_b`. Operands: "dy", "x", "dx" (rows as 2-D views), "w", "mean", "rstd" (1-D, or
    stand-ins where absent), "dw", "db" (1-D outputs, or stand-ins). ONE_TILE for rows of up
    to NORM_BWD_MAX_SINGLE (8192) elements (packed as `row_config`) on at most
    `bwd_programs_per_sm` programs per SM, each walking row steps; else LOOPED: a launch of
    one program per row for its two sums, then one on (row groups, column tiles). Then (with
    dweight or dbias) one launch adding the programs' partial column sums."""
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    if n_cols == 0:
        return []
    t = row_tuning(target).norm
    # four f32 tiles live per row step (x, dy, the two partial sums) and w: single tiles up to
    # 8192 elements at 16 per thread (16384 at 32 spilled)
    cfg = row_config(n_cols, n_rows, max_single=NORM_BWD_MAX_SINGLE)
    flags = dict(RMS=rms, HAS_W=has_w, DB=has_b)
    args = ("dy", "x", "w", "mean", "rstd")
    launches = []
    if cfg.single:
        steps = tc.cdiv(n_rows, cfg.rows) if n_rows else 0
        grid = (max(1, min(steps, t.bwd_programs_per_sm * target.sm_count)),)
        cols = cfg.block
        kernel, schedule, consts = norm_bwd_tile_kernel, ONE_TILE, dict(ROWS=cfg.rows, BLOCK=cfg.block)
    else:
        # pass 1 per row (c1, c2), pass 2 on (row groups, column tiles): about
        # `bwd_programs_per_sm` programs per SM, each column tile's partials in registers
        n_k = tc.cdiv(n_cols, cfg.block)
        stats = tuple(Temp(name, (max(n_rows, 1),), tc.float32, like="x") for name in ("c1", "c2"))
        if n_rows:
            launches.append(Launch.of(norm_bwd_stats_kernel, (n_rows,), (*args, "c1", "c2"), cfg.num_warps,
                                      temps=stats, schedule=LOOPED, RMS=rms, HAS_W=has_w, BLOCK=cfg.block))
        grid = (max(1, min(n_rows, tc.cdiv(t.bwd_programs_per_sm * target.sm_count, n_k))), n_k)
        cols = n_k * cfg.block
        args = (*args, "c1", "c2")
        kernel, schedule, consts = norm_bwd_cols_kernel, LOOPED, dict(BLOCK=cfg.block)
    temps, parts = [], []
    for name, wanted in (("dw_part", has_w), ("db_part", has_b)):
        if wanted:
            temps.append(Temp(name, (grid[0], cols), tc.float32, like="x"))
        parts.append(name if wanted else "dx")   # a stand-in the kernel never touches
    extra = () if cfg.single else stats
    launches.append(Launch.of(kernel, grid, (*args, "dx", *parts), cfg.num_warps, temps=(*extra, *temps),
                              schedule=schedule, **flags, **consts))
    if temps:
        bc = min(next_pow2(n_cols), t.bwd_reduce_cols)
        bp = min(next_pow2(grid[0]), max(t.bwd_reduce_tile // bc, 1))
        launches.append(Launch.of(norm_bwd_reduce_kernel, (tc.cdiv(n_cols, bc),),
                                  (*parts, "dw" if has_w else "dx", "db" if has_b else "dx"),
                                  max(1, min(bp * bc // 512, 8)), schedule="reduce", HAS_W=has_w, DB=has_b, BP=bp,
                                  BC=bc))
    return launches


def _param(p, name: str, n: int, op: str) -> Optional[Arr]:
    if p is None:
        return None
    pa = as_array(p, name)
    check_float(pa, name)
    if pa.shape != (n,):
        raise ValueError(f"{op}: {name} has shape {pa.shape}, expected ({n},) (the last dimension of x)")
    return pa


def _stat(s, name: str, shape, op: str) -> Arr:
    sa = as_array(s, name)
    if sa.dtype is not tc.float32:
        raise TypeError(f"{op}: {name} has dtype {sa.dtype.name}, expected f32 (the forward's return_stats=True)")
    if sa.shape != tuple(shape):
        raise ValueError(f"{op}: {name} has shape {sa.shape}, expected {tuple(shape)} (x.shape[:-1])")
    return sa


def _norm_backward(dy, x, weight, bias, mean, rstd, out, rms: bool, op: str):
    a, ga = as_array(x, "x"), as_array(dy, "dy")
    check_float(a, "x")
    check_float(ga, "dy")
    if a.ndim == 0:
        raise ValueError(f"{op}: x must have at least 1 dimension")
    if ga.shape != a.shape:
        raise ValueError(f"{op}: dy has shape {ga.shape}, expected x's {a.shape}")
    n = a.shape[-1]
    wa, ba = _param(weight, "weight", n, op), _param(bias, "bias", n, op)
    ra = _stat(rstd, "rstd", a.shape[:-1], op)
    ma = None if rms else _stat(mean, "mean", a.shape[:-1], op)
    named = {"x": a, "dy": ga, "rstd": ra}
    named.update({k: v for k, v in (("weight", wa), ("bias", ba), ("mean", ma)) if v is not None})
    check_same_place(named)
    o = output(out, a, a.shape, ga.dtype)
    dw = output(None, a, (n,), wa.dtype) if wa is not None else None
    db = output(None, a, (n,), ba.dtype) if ba is not None else None
    xv, n_rows, _ = rows_of(a, "x")
    values = {"dy": rows_of(ga, "dy")[0], "x": xv, "dx": rows_of(o, "out")[0],
              "w": view(wa, (n,), wa.strides) if wa is not None else xv,
              "rstd": _stat_view(ra, n_rows), "mean": _stat_view(ma, n_rows) if ma is not None else xv,
              "dw": view(dw, (n,), (1,)) if dw is not None else xv,
              "db": view(db, (n,), (1,)) if db is not None else xv}
    execute(norm_backward_plan(a, rms, wa is not None, ba is not None, target_of(a)), Operands({"x": a}, values))
    return o.obj, (dw.obj if dw is not None else None), (db.obj if db is not None else None)


def _stat_view(s: Arr, n_rows: int):
    """A per-row statistic as 1-D of n_rows (its dimensions must flatten to one stride)."""
    dims = [(sz, st) for sz, st in zip(s.shape, s.strides) if sz != 1]
    for (_s0, st0), (s1, st1) in zip(dims, dims[1:]):
        if st0 != st1 * s1:
            raise ValueError(f"the statistic of shape {s.shape} with strides {s.strides} does not flatten; "
                             "pass a contiguous copy")
    return view(s, (n_rows,), (dims[-1][1] if dims else 1,))


@planned
def layer_norm_backward(dy, x, weight, mean, rstd, bias=None, out=None):
    """layer_norm_backward(dy, x, weight, mean, rstd, bias=None, out=None) -> (dx, dweight, dbias).

    The gradients of y = layer_norm(x, weight, bias) given dy (y's gradient), from the
    forward's statistics (`layer_norm(..., return_stats=True)`: mean and rstd, f32 of
    x.shape[:-1]; eps is in rstd). weight: the forward's weight or None (then dweight is
    None); bias: the forward's bias or None, read for its dtype only (dbias, summed over
    rows, in bias's dtype; None without one). dx has dy's dtype (or is written to `out`).
    x, dy: f16, bf16 or f32 (last stride 1, leading dimensions flattenable). f32 math;
    dweight and dbias are reduced without atomics, deterministically (module doc).
    """
    return _norm_backward(dy, x, weight, bias, mean, rstd, out, False, "layer_norm_backward")


@planned
def rms_norm_backward(dy, x, weight, rstd, out=None):
    """rms_norm_backward(dy, x, weight, rstd, out=None) -> (dx, dweight).

    The gradients of y = rms_norm(x, weight) from the forward's rstd
    (`rms_norm(..., return_stats=True)`); dweight is None when weight is. Otherwise as
    `layer_norm_backward`.
    """
    dx, dw, _ = _norm_backward(dy, x, weight, None, None, rstd, out, True, "rms_norm_backward")
    return dx, dw


# ----------------------------------------------------------------------------- PTX check
_NB = "dy={d}[?,?], x={d}[?,?], w={d}[?], mean_in=f32[?], rstd_in=f32[?], dx={d}[?,?], dw_part=f32[?,?], " \
      "db_part=f32[?,?]"
SIGNATURES = {
    "softmax_bwd_tile_kernel": "dy=bf16[?,?], y=bf16[?,?], dx=bf16[?,?], LOG=False, ROWS=1, BLOCK=16384",
    "softmax_bwd_loop_kernel": "dy=f16[?,?], y=f16[?,?], dx=f16[?,?], LOG=True, BLOCK=4096",
    "softmax_bwd_partial_kernel": "dy=f32[?,?], y=f32[?,?], s_part=f32[?,?], tiles_per_chunk=i32, LOG=False, "
                                  "BLOCK=4096",
    "softmax_bwd_finish_kernel": "dy=bf16[?,?], y=bf16[?,?], dx=bf16[?,?], s_part=f32[?,?], tiles_per_chunk=i32, "
                                 "LOG=True, CHUNKS=32, BLOCK=4096",
    "norm_bwd_tile_kernel": _NB.format(d="bf16") + ", RMS=False, HAS_W=True, DB=True, ROWS=1, BLOCK=8192",
    "norm_bwd_stats_kernel": "dy=bf16[?,?], x=bf16[?,?], w=bf16[?], mean_in=f32[?], rstd_in=f32[?], c1_out=f32[?], "
                             "c2_out=f32[?], RMS=False, HAS_W=True, BLOCK=4096",
    "norm_bwd_cols_kernel": "dy=bf16[?,?], x=bf16[?,?], w=bf16[?], mean_in=f32[?], rstd_in=f32[?], c1_in=f32[?], "
                            "c2_in=f32[?], dx=bf16[?,?], dw_part=f32[?,?], db_part=f32[?,?], RMS=False, HAS_W=True, "
                            "DB=True, BLOCK=4096",
    "norm_bwd_reduce_kernel": "dw_part=f32[?,?], db_part=f32[?,?], dw=bf16[?], db=f32[?], HAS_W=True, DB=True, "
                              "BP=16, BC=256",
}
OPTIONS = {"softmax_bwd_tile_kernel": {"num_warps": 16, "fast_math": True},
           "softmax_bwd_loop_kernel": {"num_warps": 8, "fast_math": True},
           "softmax_bwd_partial_kernel": {"num_warps": 8, "fast_math": True},
           "softmax_bwd_finish_kernel": {"num_warps": 8, "fast_math": True},
           "norm_bwd_tile_kernel": {"num_warps": 16, "fast_math": True},
           "norm_bwd_stats_kernel": {"num_warps": 8, "fast_math": True},
           "norm_bwd_cols_kernel": {"num_warps": 8, "fast_math": True},
           "norm_bwd_reduce_kernel": {"num_warps": 8, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("softmax_bwd_tile_kernel", "dy=f32[?,?], y=f32[?,?], dx=f32[?,?], LOG=True, ROWS=64, BLOCK=32"),
    ("softmax_bwd_tile_kernel", "dy=f16[?,?], y=f32[?,?], dx=f16[?,?], LOG=False, ROWS=2, BLOCK=1024"),
    ("softmax_bwd_loop_kernel", "dy=f32[?,?], y=f32[?,?], dx=f32[?,?], LOG=False, BLOCK=4096"),
    ("norm_bwd_tile_kernel", _NB.format(d="f32") + ", RMS=True, HAS_W=True, DB=False, ROWS=1, BLOCK=8192"),
    ("norm_bwd_tile_kernel", _NB.format(d="f16") + ", RMS=False, HAS_W=False, DB=False, ROWS=64, BLOCK=32"),
    ("norm_bwd_tile_kernel", _NB.format(d="f32") + ", RMS=False, HAS_W=True, DB=True, ROWS=2, BLOCK=1024"),
    ("norm_bwd_stats_kernel", "dy=f32[?,?], x=f32[?,?], w=f32[?], mean_in=f32[?], rstd_in=f32[?], c1_out=f32[?], "
                              "c2_out=f32[?], RMS=True, HAS_W=True, BLOCK=4096"),
    ("norm_bwd_cols_kernel", "dy=f16[?,?], x=f16[?,?], w=f32[?], mean_in=f32[?], rstd_in=f32[?], c1_in=f32[?], "
                             "c2_in=f32[?], dx=f16[?,?], dw_part=f32[?,?], db_part=f32[?,?], RMS=True, HAS_W=True, "
                             "DB=False, BLOCK=4096"),
    ("norm_bwd_reduce_kernel", "dw_part=f32[?,?], db_part=f32[?,?], dw=f32[?], db=f32[?], HAS_W=True, DB=False, "
                               "BP=64, BC=32"),
]
