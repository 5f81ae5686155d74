"""layer_norm and rms_norm forward over the last dimension, with the statistics a
backward pass needs (mean and 1/std per row) on request.

A row that fits in one tile (up to 16384 elements) is read once: the mean and
the variance of the centred values come from registers. On sm_90+ a row of up
to 131072 elements (f32 for layer_norm) is shared by the programs of a thread-block cluster and is
read once too (`_cluster_rows`: chunk means and M2 combined with Chan's
formula). Otherwise a longer row is read
twice (from memory once when the rows in flight fit in L2, see
`_common.long_row_launch`): a first pass accumulates, per lane, sums of x - K and (x - K)^2 where K
is the row's first element (shifting by a sample of the data keeps
E[d^2] - E[d]^2 from cancelling catastrophically when the mean is large next
to the spread), then a second pass normalizes. Statistics are f32.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import replace
from typing import List, Optional

import numpy as np

import tilec as tc
from tilec.target import Target

from . import _cluster_rows, _norm_chunks  # their kernels need sm_90: not in this module's SIGNATURES
from ._cluster_rows import affine, scale_shift
from ._common import (DEPENDENT, MAX_SINGLE_TILE, Arr, RowConfig, as_array, check_float, check_same_place, lanewise_sum,
                      flat_group, lanewise_sum_of_squares, long_row_launch, output, row_config, row_stride, rows_of, target_of,
                      split_row, store_row_stats, view)
from ._norm_chunks import lane_params, lanes_of
from ._plan import derived, planned
from .launches import Launch, Operands, StaticProbe, Temp, execute, probe_for
from .schedules import (CHUNK_TILES, CLUSTER, LOOPED, ONE_TILE, PERSISTENT_CLUSTER, most_resident,
                        norm_chunk_tiles_eligible)
from .tuning import TABLES, NormTuning, row_tuning
from ._window import row_windows, single_row_window, store_row_tile, window_span, window_start, window_tile

__all__ = ["layer_norm", "rms_norm", "plan"]

# The sm_90 table's numbers under their old names (tests, docs): plans read `row_tuning(target)`.
_T = TABLES["sm_90"].norm
F32_CHUNK_TILES_MAX_C, LN_STAGES, LN_CHUNK_2BYTE, LN_STAGES_2BYTE = _T.f32_chunk_tiles_max_c, _T.ln_stages, \
    _T.ln_chunk_2byte, _T.ln_stages_2byte
LN_EIGHT_CHUNKS_WARPS, LN_EIGHT_CHUNKS_PROGRAMS_PER_SM = _T.ln_eight_chunks_warps, _T.ln_eight_chunks_programs_per_sm
HALVE_MIN_BLOCK, SHIFT_TABLE_MIN_BYTES, SHIFT_TABLE_BLOCK = _T.halve_min_block, _T.shift_table_min_bytes, \
    _T.shift_table_block


@tc.kernel
def norm_tile_kernel(x, w, b, y, mean_out, rstd_out, eps, RMS: tc.constexpr, HAS_W: tc.constexpr,
                     HAS_B: tc.constexpr, STATS: tc.constexpr, ROWS: tc.constexpr, BLOCK: tc.constexpr,
                     TILES: tc.constexpr = 1, WINDOW: tc.constexpr = 0, SHIFTED: tc.constexpr = False,
                     REALIGN: tc.constexpr = False):
    # TILES: a row (ROWS = 1) held as that many BLOCK-wide tiles (`norm_tiles`).
    # WINDOW (ROWS = 1): rows off 32-byte sectors, x and y read and written in aligned windows
    # (_window.py); lane j of tile k then holds column k * BLOCK + j - lead, where w and b are
    # gathered (they are small and stay in L1), or, SHIFTED, read whole from row `lead` of
    # their (WINDOW, TILES * BLOCK) tables (`shift_tables_kernel`). REALIGN: y's windows
    # and leads, x's row realigned into them (`_window.row_windows`).
    pid = tc.program_id(0)
    n = x.shape[1]
    lead = 0
    if WINDOW:
        base, lead = window_start(x, pid, WINDOW, REALIGN, y)
    ts = ()
    for k in tc.static_range(TILES):
        if WINDOW:
            t, _ = window_tile(x, base, lead, x.shape[1], k, 0.0, BLOCK, True, REALIGN)
        else:
            t = tc.load(x, index=(pid, k), shape=(ROWS, BLOCK))
        ts = ts + (t.astype(tc.float32),)
    if RMS:
        ds = ts  # zero padding adds nothing to the sum of squares
    else:
        mean = tc.sum(lanewise_sum(ts), axis=1, keep_dims=True) / n
        # Padded columns would add mean^2 each to the variance: mask them.
        ds = ()
        for k in tc.static_range(TILES):
            _, inside = lanes_of(x, k, lead, WINDOW, BLOCK)
            ds = ds + (tc.where(inside, ts[k] - mean, 0.0),)
    rstd = tc.rsqrt(tc.sum(lanewise_sum_of_squares(ds), axis=1, keep_dims=True) / n + eps)
    if SHIFTED:
        # A dependent launch of the tables' kernel: x was read while it ran.
        tc.grid_dependency_wait()
    for k in tc.static_range(TILES):
        cols, inside = lanes_of(x, k, lead, WINDOW, BLOCK)
        wt, bt = lane_params(w, b, k, cols, inside, lead, HAS_W, HAS_B, WINDOW, SHIFTED, BLOCK)
        out = scale_shift(ds[k] * rstd, wt, bt, HAS_W, HAS_B)
        store_row_tile(y, pid, k, out.astype(y.dtype), WINDOW, BLOCK, ROWS)
    if STATS:
        if not RMS:
            tc.store(mean_out, index=(pid,), tile=tc.reshape(mean, (ROWS,)))
        tc.store(rstd_out, index=(pid,), tile=tc.reshape(rstd, (ROWS,)))


@tc.kernel
def shift_tables_kernel(w, b, wtab, btab, HAS_W: tc.constexpr, HAS_B: tc.constexpr, BLOCK: tc.constexpr):
    # Row L of each table (WINDOW, P) is its parameter shifted right by L lanes, zero outside
    # it: what lane j of a row whose window starts L elements before it multiplies or adds
    # (`norm_tile_kernel`, SHIFTED). One launch makes both tables; the row kernel (a
    # dependent launch) may start reading x as soon as every program here has started.
    tc.launch_dependents()
    shift = tc.program_id(0)
    lanes = tc.program_id(1) * BLOCK + tc.arange(0, BLOCK)
    if HAS_W:
        _shift_row(w, wtab, shift, lanes)
    if HAS_B:
        _shift_row(b, btab, shift, lanes)


@tc.func
def _shift_row(p, tab, shift, lanes):
    cols = lanes - shift
    v = tc.load(p.ptr + cols * p.stride(0), mask=cols.astype(tc.uint32) < p.shape[0].astype(tc.uint32), other=0.0)
    tc.store(tab.ptr + shift * tab.stride(0) + lanes, v, mask=lanes < tab.shape[1])


@tc.kernel
def norm_loop_kernel(x, w, b, y, mean_out, rstd_out, eps, RMS: tc.constexpr, HAS_W: tc.constexpr,
                     HAS_B: tc.constexpr, STATS: tc.constexpr, BLOCK: tc.constexpr):
    # Rows pid, pid + grid, ...: with a grid of a few programs per SM the rows in
    # flight fit in L2, so pass 2 reads what pass 1 left there (`_long_row_programs`).
    n = x.shape[1]
    n_tiles = tc.cdiv(n, BLOCK)
    cols = tc.arange(0, BLOCK)[None, :]
    for row in range(tc.program_id(0), x.shape[0], tc.num_programs(0)):
        # Pass 1: lane-wise sums of the shifted values and of their squares.
        shift = 0.0
        if not RMS:
            shift = tc.sum(tc.load(x, offset=(row, 0), shape=(1, 1)).astype(tc.float32))
        s1 = tc.zeros((1, BLOCK), tc.float32)
        s2 = tc.zeros((1, BLOCK), tc.float32)
        for k in range(n_tiles):
            t = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
            d = tc.where(k * BLOCK + cols < n, t - shift, 0.0)
            s1 += d
            s2 += d * d
        mean_d = tc.sum(s1) / n
        if RMS:
            mean_d = 0.0
        var = tc.maximum(tc.sum(s2) / n - mean_d * mean_d, 0.0)
        rstd = tc.rsqrt(var + eps)
        mean = mean_d + shift

        # Pass 2: normalize, scale and shift; x - mean as (x - shift) - mean_d, so a large mean
        # next to a small spread keeps its digits (not through mean rounded to f32).
        for k in range(n_tiles):
            t = tc.load(x, index=(row, k), shape=(1, BLOCK)).astype(tc.float32)
            out = affine((t - shift - mean_d) * rstd, w, b, k, HAS_W, HAS_B, BLOCK)
            tc.store(y, index=(row, k), tile=out.astype(y.dtype))
        store_row_stats(mean_out, rstd_out, row, mean, rstd, RMS, STATS)


_LN = "RMS=False, HAS_W=True, HAS_B=True, STATS=True"
SIGNATURES = {
    "norm_tile_kernel": f"x=f16[?,?], w=f16[?], b=f16[?], y=f16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                        f"eps=f32, {_LN}, ROWS=2, BLOCK=1024",
    "norm_loop_kernel": f"x=bf16[?,?], w=bf16[?], b=bf16[?], y=bf16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                        f"eps=f32, {_LN}, BLOCK=4096",
    "shift_tables_kernel": "w=bf16[?], b=bf16[?], wtab=bf16[?,?], btab=bf16[?,?], HAS_W=True, HAS_B=True, BLOCK=1024",
}
# The options the entry points launch SIGNATURES with (tile elements / 512 warps; tests/test_ptxas.py).
OPTIONS = {"norm_tile_kernel": {"num_warps": 4, "fast_math": True}, "norm_loop_kernel": {"num_warps": 8, "fast_math": True},
           "shift_tables_kernel": {"num_warps": 2, "fast_math": True}}
_RMS = "RMS=True, HAS_W=True, HAS_B=False, STATS=True"
EXTRA_SIGNATURES = [
    ("norm_tile_kernel", f"x=f32[?,?], w=f32[?], b=f32[?,?], y=f32[?,?], mean_out=f32[?,?], rstd_out=f32[?], "
                         f"eps=f32, {_RMS}, ROWS=64, BLOCK=32"),
    ("norm_tile_kernel", f"x=bf16[?,?], w=f32[?], b=f32[?], y=bf16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_LN}, ROWS=1, BLOCK=16384"),
    ("norm_loop_kernel", f"x=f16[?,?], w=f16[?], b=f16[?,?], y=f16[?,?], mean_out=f32[?,?], rstd_out=f32[?], "
                         f"eps=f32, {_RMS}, BLOCK=4096"),
    # rows as three quarter tiles; rows off 32-byte sectors through windows
    ("norm_tile_kernel", f"x=bf16[?,?], w=bf16[?], b=f32[?], y=bf16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_LN}, ROWS=1, BLOCK=2048, TILES=3, WINDOW=16"),
    ("norm_tile_kernel", f"x=f32[?,?], w=f32[?], b=f32[?], y=f32[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_RMS}, ROWS=1, BLOCK=4096, TILES=3"),
    # w and b from shifted tables (`_shift_tables`)
    ("norm_tile_kernel", f"x=bf16[?,?], w=bf16[?,?]:stride_div=16x1, b=bf16[?,?]:stride_div=16x1, y=bf16[?,?], "
                         f"mean_out=f32[?], rstd_out=f32[?], eps=f32, {_LN}, ROWS=1, BLOCK=8192, WINDOW=16, "
                         "SHIFTED=True"),
    # x's rows read in y's windows (`_window.row_windows`: realigned loads)
    ("norm_tile_kernel", f"x=f16[?,?], w=f16[?], b=f16[?], y=f16[?,?], mean_out=f32[?], rstd_out=f32[?], "
                         f"eps=f32, {_LN}, ROWS=1, BLOCK=2048, TILES=3, WINDOW=16, REALIGN=True"),
    ("norm_tile_kernel", f"x=bf16[?,?], w=bf16[?,?]:stride_div=16x1, b=bf16[?,?]:stride_div=16x1, y=bf16[?,?], "
                         f"mean_out=f32[?], rstd_out=f32[?], eps=f32, {_LN}, ROWS=1, BLOCK=8192, WINDOW=16, "
                         "SHIFTED=True, REALIGN=True"),
]


def _eps_scalar(eps):
    """eps as the launch scalar: a value a launch plan fills in per call (`_plan.planned`)."""
    if not isinstance(eps, (int, float, np.floating, np.integer)) or isinstance(eps, bool):
        raise TypeError(f"eps must be a non-negative number, got a {type(eps).__name__}: {eps!r}")
    if not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return (np.float32(eps),)


def plan(x: Arr, out: Arr, weight: Optional[Arr], bias: Optional[Arr], rms: bool, stats: bool, target: Target,
         probe=None) -> List[Launch]:
    """The launches of layer_norm (rms_norm if `rms`) of `x`'s rows of its last dimension into
    `out`'s, with `weight` and `bias` (descriptions, or None where the norm has none) and the
    statistics if `stats`, on `target`; `probe` answers what depends on the compiled kernels
    (default: `StaticProbe(target)`). Operands: "x", "out" (rows as 2-D views), "w", "b" (1-D,
    or stand-ins where absent), "mean", "rstd" (1-D f32, or stand-ins), "eps" (an f32 scalar).
    The schedules, in order: ONE_TILE, CHUNK_TILES, PERSISTENT_CLUSTER or CLUSTER, LOOPED
    (schedules.py; see `layer_norm`'s docstring for the shapes)."""
    probe = probe or StaticProbe(target)
    t = row_tuning(target).norm
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    if n_cols == 0:
        return []
    isz = x.dtype.itemsize
    # 32 elements per thread in big tiles for 2-byte rows and for rms_norm (f32 layer_norm, whose
    # two dependent reductions hold more registers, takes 16)
    per_thread = 32 if isz == 2 or rms else 16
    cfg = row_config(n_cols, n_rows, big_tile_per_thread=per_thread)
    # Single rows off 32-byte sectors are read and written in aligned windows, the tiles sized for
    # the row plus up to 32 bytes before it (_window.py; packed rows are not). An out at other
    # offsets than x's: its windows, x realigned into them (`row_windows`).
    window, realign = row_windows(x, out) if cfg.single and cfg.rows == 1 else (0, False)
    cfg, window = single_row_window(cfg, n_cols, n_rows, window, big_tile_per_thread=per_thread)
    realign = realign and bool(window)
    flags = dict(RMS=rms, HAS_W=weight is not None, HAS_B=bias is not None, STATS=bool(stats), BLOCK=cfg.block)
    args = ("x", "w", "b", "out", "mean", "rstd", "eps")
    # 2-byte layer_norm rows on clusters need every chunk full (EVEN: no masks; with them the
    # kernel spills at 16 warps): ragged rows and rows off 32-byte sectors run as CHUNK_TILES
    two_byte_ln = not rms and isz == 2
    ct = row_tuning(target).cluster
    cl = None if cfg.single else _cluster_rows.norm_cluster_rows(
        n_cols, target.capability, t.ln_chunk_2byte if two_byte_ln else ct.max_norm_chunk, t=ct)
    even = cl is not None and n_cols == cl.c * cl.block
    chunks = None
    # An out at other offsets than x's: its windows, x realigned into them, but for f32
    # (`row_windows`' tiled)
    tiled_window, tiled_realign = row_windows(x, out, ragged=True, tiled=True) if cl is not None else (0, False)
    if cl is not None and (tiled_window or not even):
        tiled = _norm_chunks.chunk_tiles(n_cols, target.capability, isz, tiled_window, ties_to_tiles=two_byte_ln,
                                         t=ct)
        row_bytes = row_stride(x, "x") * isz if n_rows > 1 else 0
        if tiled is not None and norm_chunk_tiles_eligible(rms, isz, tiled, row_bytes, t):
            chunks, window, realign = tiled, tiled_window, tiled_realign
    if chunks is None and two_byte_ln and not even:
        cl = None
    # w and b from shifted tables for rows read through windows (single tiles, chunk tiles)
    shifted = bool(window) and _use_shift_tables(n_rows * n_cols * isz, isz, rms, weight, bias, t)
    if cfg.single:
        cfg = norm_tiles(cfg, n_cols, window, halve_window=shifted and not rms and (
            isz == 2 or cfg.block >= MAX_SINGLE_TILE), min_block=t.halve_min_block)
        flags["BLOCK"] = cfg.block
        launches, options = [], None
        if shifted:
            launches, args = _shift_tables(weight, bias, args, window, cfg.tiles * cfg.block, t)
            flags["SHIFTED"] = True
            options = DEPENDENT
        return launches + [Launch.of(norm_tile_kernel, cfg.grid(n_rows), args, cfg.num_warps, options=options,
                                     temps=_tables_of(launches), schedule=ONE_TILE, ROWS=cfg.rows,
                                     TILES=cfg.tiles, WINDOW=window, REALIGN=realign, **flags)]
    if chunks is not None:
        # one row per cluster, chunks as tiles of the row's window
        options = _cluster_rows.chunk_options(chunks, isz, target)
        launches = []
        if shifted:
            launches, args = _shift_tables(weight, bias, args, window, chunks.c * chunks.tiles * chunks.block, t)
            options = dict(options, **DEPENDENT)
        flags.update(C=chunks.c, BLOCK=chunks.block, TILES=chunks.tiles, WINDOW=window, SHIFTED=shifted,
                     REALIGN=realign)

        def chunk_launch(**more):
            return Launch.of(_norm_chunks.norm_chunks_kernel, chunks.grid(n_rows), args, chunks.num_warps,
                             cluster=chunks.c, options=options, temps=_tables_of(launches), schedule=CHUNK_TILES,
                             **flags, **more)
        if _norm_chunks.one_pass_chunk(rms, isz, chunks):
            flags["ONE_PASS"] = True
            flags["REREAD"] = _norm_chunks.reread_chunk(probe, chunk_launch, chunks, ct)
        elif not rms:   # (measured on layer_norm)
            flags["EARLY"] = _norm_chunks.params_early(probe, chunk_launch)
        return launches + [chunk_launch()]
    if cl is not None:
        # one read of the row: a cluster of programs shares it; persistent clusters hold w and b,
        # the next row in flight during this one's exchange (rms_norm: in registers; layer_norm:
        # staged in shared memory)
        flags.update(C=cl.c, BLOCK=cl.block, EVEN=even)
        stages = 1 if rms else t.ln_stages_2byte if two_byte_ln else t.ln_stages
        loop_cl, options = persistent_norm_rows(cl, two_byte_ln, t)
        loop = Launch.of(_cluster_rows.norm_cluster_loop_kernel, (0,), args, loop_cl.num_warps, cluster=loop_cl.c,
                         options=options, schedule=PERSISTENT_CLUSTER, STAGES=stages, **flags)
        best = most_resident([loop], lambda ln: _persistent_grid(probe, ln, loop_cl, n_rows))
        if best is not None:
            return [replace(loop, grid=best[0])]
        return [Launch.of(_cluster_rows.norm_cluster_kernel, cl.grid(n_rows), args, cl.num_warps, cluster=cl.c,
                          schedule=CLUSTER, **flags)]
    # rms_norm keeps one program per row (one per SM measured slower); layer_norm's rows whose
    # flight fits in L2 run on one program per SM (`long_row_launch`)
    programs, block, warps = (n_rows, None, None) if rms else long_row_launch(n_rows, n_cols, isz, target)
    flags["BLOCK"] = block or cfg.block
    return [Launch.of(norm_loop_kernel, (programs,), args, warps or cfg.num_warps, schedule=LOOPED, **flags)]


def _persistent_grid(probe, ln: Launch, cl, n_rows: int):
    """The grid of the persistent launch `ln` on `cl`: as many clusters as are resident, at most
    one per row; None when the probe cannot tell."""
    resident = probe.resident_clusters(ln)
    return None if resident is None else (min(n_rows, resident) * cl.c,)


def _merged(a: Arr, k: int, name: str) -> Arr:
    """`a` with its last k dimensions described as one (`flat_group`: ValueError when they do
    not flatten without a copy); `a` itself for k = 1."""
    if k == 1:
        return a
    cut = a.ndim - k
    size, stride = flat_group(a.shape[cut:], a.strides[cut:], name)
    return replace(a, shape=a.shape[:cut] + (size,), strides=a.strides[:cut] + (stride,))


def _norm(x, weight, bias, eps, return_stats, out, rms: bool, op: str, n_norm: int = 1):
    # n_norm: how many trailing dimensions the statistics run over (layer_norm's normalized_shape)
    full = as_array(x, "x")
    check_float(full, "x")
    if full.ndim == 0:
        raise ValueError(f"{op}: x must have at least 1 dimension")
    a = _merged(full, n_norm, "x")
    n = a.shape[-1]
    norm_shape = full.shape[full.ndim - n_norm:]
    named = {"x": a}
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            pa = as_array(p, name)
            check_float(pa, name)
            if pa.shape != norm_shape:
                what = "the last dimension of x" if n_norm == 1 else "normalized_shape"
                raise ValueError(f"{op}: {name} has shape {pa.shape}, expected {norm_shape} ({what})")
            named[name] = _merged(pa, n_norm, name) if pa.ndim else pa
    check_same_place(named)
    (eps32,) = derived(_eps_scalar, eps)
    o = _merged(output(out, full, full.shape, full.dtype), n_norm, "out")
    stats_shape = a.shape[:-1]
    mean = output(None, a, stats_shape, tc.float32) if return_stats and not rms else None
    rstd = output(None, a, stats_shape, tc.float32) if return_stats else None

    xv, n_rows, n_cols = rows_of(a, "x")
    yv, _, _ = rows_of(o, "out")
    # Parameters a specialization does not use get x's view: their branch is compiled away.
    wa, ba = named.get("weight"), named.get("bias")
    wv = view(wa, (n,), wa.strides) if wa is not None else xv
    bv = view(ba, (n,), ba.strides) if ba is not None else xv
    mv = view(mean, (n_rows,), (1,)) if mean is not None else xv
    rv = view(rstd, (n_rows,), (1,)) if rstd is not None else xv
    target = target_of(a)
    operands = Operands({"x": a, "w": wa, "b": ba},
                        {"x": xv, "w": wv, "b": bv, "out": yv, "mean": mv, "rstd": rv, "eps": eps32})
    execute(plan(a, o, wa, ba, rms, bool(return_stats), target, probe_for(operands, a, target)), operands)
    if not return_stats:
        return o.obj
    return (o.obj, rstd.obj) if rms else (o.obj, mean.obj, rstd.obj)


def _is_shape(v) -> bool:
    """Whether `v` is a normalized_shape (an int or a sequence of ints: tuple, list,
    torch.Size), not an array or None (the earlier form's weight)."""
    def is_int(i):
        return isinstance(i, (int, np.integer)) and not isinstance(i, bool)
    return is_int(v) or (isinstance(v, (tuple, list)) and all(is_int(i) for i in v))


def norm_dims(shape, normalized_shape) -> int:
    """How many trailing dimensions of x's `shape` `normalized_shape` names; ValueError unless
    it is that shape's tail (as torch.nn.functional.layer_norm)."""
    ns = (int(normalized_shape),) if not isinstance(normalized_shape, (tuple, list)) else tuple(
        int(i) for i in normalized_shape)
    shape = tuple(shape)
    if not ns or len(ns) > len(shape) or shape[len(shape) - len(ns):] != ns:
        raise ValueError(f"layer_norm: normalized_shape {ns} must be the last dimensions of x's shape {shape} "
                         "(at least one)")
    return len(ns)


def _use_shift_tables(nbytes: int, itemsize: int, rms: bool, weight, bias, t: NormTuning) -> bool:
    """Whether windowed rows read w and b from shifted tables (`shift_table_min_bytes` of x)."""
    has_params = weight is not None or bias is not None
    return has_params and nbytes >= t.shift_table_min_bytes and (itemsize == 2 or not rms)


def _tables_of(launches) -> tuple:
    """The shifted tables a row launch reads (the Temps of the tables' launch): declared on the
    row launch too, so a probe can compile it before the tables' launch has made them."""
    return tuple(tp for ln in launches for tp in ln.temps)


def _shift_tables(weight, bias, args, window: int, lanes: int, t: NormTuning):
    """(launches, the row kernel's `args`): the launch making w and b into (window, lanes) tables
    whose row L is the parameter shifted right by L lanes, zero outside it (`shift_tables_kernel`),
    and the row kernel's args with the tables for w and b; a parameter the norm does not have
    keeps its operand (a stand-in the kernel never reads)."""
    x, w, b, *rest = args
    tabs, temps = [], []
    for name, p in (("w", weight), ("b", bias)):
        if p is not None:
            temps.append(Temp(name + "_table", (window, lanes), p.dtype, like=name))
            tabs.append(name + "_table")
        else:
            tabs.append(name)
    block = min(lanes, t.shift_table_block)
    ln = Launch.of(shift_tables_kernel, (window, tc.cdiv(lanes, block)), (w, b, *tabs), builtins.max(block // 512, 1),
                   temps=temps, schedule="shift_tables", HAS_W=weight is not None, HAS_B=bias is not None,
                   BLOCK=block)
    return [ln], (x, *tabs, *rest)


def use_chunk_tiles(rms: bool, itemsize: int, chunks: _cluster_rows.ClusterRows, row_bytes: int) -> bool:
    """`schedules.norm_chunk_tiles_eligible` on the sm_90 table (tests)."""
    return norm_chunk_tiles_eligible(rms, itemsize, chunks, row_bytes, TABLES["sm_90"].norm)


def persistent_norm_rows(cl: _cluster_rows.ClusterRows, two_byte_ln: bool, t: Optional[NormTuning] = None):
    """(cl, compile options) of the persistent cluster kernel: 2-byte layer_norm rows in 8
    chunks of `ln_chunk_2byte` at `ln_eight_chunks_warps` with a floor of
    `ln_eight_chunks_programs_per_sm` programs per SM; anything else as `cl`, no options."""
    t = t or TABLES["sm_90"].norm
    if two_byte_ln and cl.c == 8 and cl.block == t.ln_chunk_2byte:
        return replace(cl, num_warps=t.ln_eight_chunks_warps), {"min_programs_per_sm": t.ln_eight_chunks_programs_per_sm}
    return cl, {}


def norm_tiles(cfg: RowConfig, n_cols: int, window: int, halve_window: bool = False,
               min_block: Optional[int] = None) -> RowConfig:
    """How a single-tile norm row is held: as `split_row`'s three quarter tiles when it fills
    at most 3/4 of its tile (counting its window's lead); else, unwindowed or `halve_window`,
    as 2 tiles of half of a tile of `min_block` lanes or more (`halve_min_block`; 4 quarters
    of MAX_SINGLE_TILE lanes)."""
    min_block = TABLES["sm_90"].norm.halve_min_block if min_block is None else min_block
    split = split_row(cfg, window_span(n_cols, window))
    if split.tiles > 1 or (window and not halve_window) or not cfg.single or cfg.rows != 1 or \
            cfg.block < min_block:
        return split
    tiles = 4 if cfg.block >= MAX_SINGLE_TILE else 2
    return replace(cfg, block=cfg.block // tiles, tiles=tiles)


def layer_norm(x, normalized_shape=None, weight=None, bias=None, eps: float = 1e-5, return_stats: bool = False,
               out=None):
    """layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, return_stats=False,
    out=None) -> y, or (y, mean, rstd); torch.nn.functional.layer_norm's signature.

    y = (x - mean) * rstd * weight + bias over the trailing dimensions that
    `normalized_shape` names (an int or a tuple: x.shape's tail, else
    ValueError), flattened into one row (they must flatten without a copy,
    with stride 1 at the end), with rstd = 1 / sqrt(var + eps) (biased
    variance, as torch). weight and bias: of shape normalized_shape, any of
    the three float dtypes, or None. x: f16, bf16 or f32, any leading batch
    shape (leading dimensions flattenable, else ValueError). y has x's dtype
    (or is written to `out`); mean and rstd are f32 arrays of x's leading
    shape (x.shape without normalized_shape). Computes in f32.

    The earlier form layer_norm(x, weight=None, bias=None, eps=1e-5, ...),
    over the last dimension, still works: a second argument that is an array
    or None is the weight (then a third is the bias and a fourth, a number,
    eps).

    Block size: as softmax (`_common.row_config`): rows up to 16384 elements
    are one tile (read once), longer rows loop over 4096-column tiles (read
    twice, statistics from shifted sums). Tiles of 8192+ elements take 32
    elements per thread for f16/bf16 (16 for f32); rms_norm always 32 there.
    A row of one program that fills at most 3/4 of its tile is held as three
    tiles of a quarter of it, 24 elements per thread (`_common.split_row`: 5120
    columns take 3 x 2048 lanes); one that fills more, in a tile of 2048 lanes
    or more, as two tiles of half of it (four quarters at 16384 lanes), which
    takes fewer registers (`norm_tiles`). Such single rows that start off a 32-byte
    sector (4097 bf16 columns) are read and written through aligned windows
    (`_window.py`) when `out`'s rows sit at the same offsets, w and b read from
    their shifted copies made by one small launch first (from 16 MB of x, f16/bf16
    and f32 layer_norm: `_shift_tables`) or else gathered at each lane's column;
    packed rows (up to 1024 columns) are not.

    On sm_90+ (the interpreter counts as an H100/H200) rows of 16385 to 131072
    elements run on thread-block clusters instead, whatever the number of rows:
    C = 2, 4 or 8 programs per row, the smallest whose chunks hold at most 16384
    elements (2-byte layer_norm: 8192, LN_CHUNK_2BYTE); 32 elements per thread
    (`_cluster_rows.norm_cluster_rows`). Each program keeps its chunk in
    registers and exchanges the chunk's mean and centred sum of squares
    (rms_norm: sum of squares) with the others of its cluster
    (tc.cluster_gather), which it combines with Chan's formula: one read of the
    row. Rows on 32-byte sectors that C chunks fill exactly (32768, 65536,
    131072) run on persistent clusters (as many as are resident), w and b
    held, the next row in flight during the exchange (rms_norm: in registers;
    layer_norm: staged in shared memory, LN_STAGES, for 2-byte rows the next
    two, LN_STAGES_2BYTE). Rows off 32-byte sectors, of a length off 16
    elements or that the chunks do not fill run one row per cluster, each
    program's chunk held as 4 to 8 tiles of 1024 columns of the row's aligned
    window (`_norm_chunks`, `use_chunk_tiles`; rows past 65536 columns up to
    10 such tiles or 7 of 2048; f32 rows on more than F32_CHUNK_TILES_MAX_C
    programs keep the persistent kernel where its copies move 16 bytes).
    2-byte chunks of several tiles take their statistics in one pass and are
    held across the exchange or, on clusters of more than 4 programs where
    holding them would leave fewer than 5 programs per SM, read again from L2
    after it (`_norm_chunks.reread_chunk`); f32 chunks load w and b before the
    exchange where that costs no program per SM (`params_early`). Both choices
    compile the kernel's two forms once per shape and ask the driver how many
    programs per SM each fits (no timing).
    """
    if _is_shape(normalized_shape):
        n_norm = norm_dims(as_array(x, "x").shape, normalized_shape)
    else:   # the earlier form: (x, weight, bias, eps, ...) shifted one place along
        if bias is not None and (isinstance(bias, bool) or not isinstance(bias, (int, float, np.floating))):
            raise TypeError(f"layer_norm: normalized_shape must be an int or a tuple of ints, got "
                            f"{type(normalized_shape).__name__}; with a weight array second (the earlier form), "
                            "the fourth argument is eps, a number")
        if bias is not None:
            eps = bias
        weight, bias, n_norm = normalized_shape, weight, 1
    return _layer_norm(x, weight, bias, eps, return_stats, out, n_norm)


def _layer_norm(x, weight, bias, eps: float = 1e-5, return_stats: bool = False, out=None, n_norm: int = 1):
    """layer_norm over the last `n_norm` dimensions of x (`layer_norm` checked them)."""
    return _norm(x, weight, bias, eps, return_stats, out, False, "layer_norm", n_norm)


# The planned entry under the op's name (what tc.profile labels its launches with); `plan_count`
# of the public function counts its plans.
_layer_norm.__name__ = "layer_norm"
_layer_norm = planned(per_call=_eps_scalar)(_layer_norm)
layer_norm.__wrapped_entry__ = _layer_norm.__wrapped_entry__


@planned(per_call=_eps_scalar)
def rms_norm(x, weight=None, eps: float = 1e-6, return_stats: bool = False, out=None):
    """rms_norm(x, weight, eps=1e-6, return_stats=False, out=None) -> y, or (y, rstd).

    y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) over the last
    dimension. Same dtypes, limits and block-size heuristic as `layer_norm`;
    rstd is f32 of x.shape[:-1]. Long rows of every dtype run on clusters
    (see `layer_norm`).
    """
    return _norm(x, weight, None, eps, return_stats, out, True, "rms_norm")
