"""Elementwise ops: gelu, silu_and_mul / swiglu, add / mul with broadcasting, and rope.

Every op reads f16, bf16 or f32, computes in f32 and writes its input's dtype.
Arrays are seen as (rows, cols) (see _rows.py): a contiguous tensor is one long
row, anything else its rows of the last dimension with a row stride, so strided
rows work and a non-unit last stride is a ValueError. Tiles are (BR, BC) with
the heuristic of `_rows.tile_config`; accesses are 16 bytes wide when the row
length and the row strides are multiples of 16 elements.
"""
from __future__ import annotations

import math
from typing import List

import numpy as np

import tilec as tc
from tilec import dtypes as _dt
from tilec.target import Target

from ._common import Arr, as_array, check_float, check_same_place, normalize_dim, output, row_stride, target_of, view
from ._plan import planned
from ._rows import program, row_view, rows_form, rows_layout, slice_last, sliced, tile_config, tile_origin, wide
from .launches import Launch, Operands, execute
from .schedules import ROW_TILES
from .tuning import tuning_for

__all__ = ["gelu", "silu_and_mul", "swiglu", "add", "mul", "rope", "plan_gelu", "plan_gated", "plan_binary",
           "plan_rope", "SIGNATURES"]


# ----------------------------------------------------------------------------- shared device helpers
@tc.func
def tile_index(n_rows, n_cols, BR: tc.constexpr, BC: tc.constexpr, WIDE: tc.constexpr, FLAT: tc.constexpr):
    """This program's (rows, cols, mask) of a (BR, BC) tiling of n_rows x n_cols, row-major
    over tiles; i64 indices when WIDE; FLAT: n_rows is 1 (`_rows.tile_origin`)."""
    rows, col0 = tile_origin(program(WIDE), n_cols, BR, BC, FLAT)
    cols = col0 + tc.arange(0, BC)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    return rows, cols, mask


# log2 of the normal tail Phi(-a) on a in [0, 8]: a degree-7 fit (weighted least squares
# towards minimax on Chebyshev nodes). 2**P(a) is within a relative 3.5e-5 of Phi(-a) there
# (4% of an f16 ulp, 0.5% of a bf16 ulp); the leading coefficient is negative and P has no
# turning point past 8, so 2**P(a) falls to 0 for larger a, where a Phi(-a) < 5e-15.
_LOG2_PHI_TAIL = (-1.0000430345535278, -1.1506099700927734, -0.4599567949771881, -0.052635397762060165,
                  0.007944582961499691, -0.0008072489290498197, 4.820333924726583e-05, -1.2624598184629576e-06)


@tc.func
def normal_tail(a):
    """Phi(-a) for a >= 0 (the standard normal's lower tail) as 2**P(a): seven fmas and
    one ex2, relative error below 3.5e-5 (see _LOG2_PHI_TAIL)."""
    c = _LOG2_PHI_TAIL
    p = c[7] * a + c[6]
    p = p * a + c[5]
    p = p * a + c[4]
    p = p * a + c[3]
    p = p * a + c[2]
    p = p * a + c[1]
    p = p * a + c[0]
    return tc.exp2(p)


@tc.func
def gelu_f32(x, APPROX: tc.constexpr, NARROW: tc.constexpr):
    if APPROX == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return 0.5 * x * (1.0 + tc.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    if NARROW:
        # A 2-byte result needs Phi(x) = (1 + erf(x / sqrt 2)) / 2 to about 1e-4 only: the
        # tail fit costs half the instructions of the erfc below, which keeps f16/bf16
        # memory-bound. Phi(x) = 1 - Phi(-x) for x >= 0; relative accuracy in both tails.
        q = normal_tail(tc.abs(x))
        return x * tc.where(x >= 0.0, 1.0 - q, q)
    # 1 + erf(x / sqrt 2) = erfc(-x / sqrt 2), from erfc of z = abs(x) / sqrt 2 by the
    # Chebyshev fit of Press et al. ("erfcc", relative error < 1.2e-7 for z >= 0): one
    # exp and one reciprocal, a quarter of the library erf's work, and relative accuracy
    # in the far negative tail where 1 + erf cancels.
    z = tc.abs(x) * 0.7071067811865476
    t = 1.0 / (1.0 + 0.5 * z)
    p = t * (-0.82215223 + t * 0.17087277) + 1.48851587
    p = t * (t * (p * t - 1.13520398) + 0.27886807) - 0.18628806
    p = t * (t * (t * (p * t + 0.09678418) + 0.37409196) + 1.00002368) - 1.26551223
    erfc = t * tc.exp(p - z * z)
    return 0.5 * x * tc.where(x >= 0.0, 2.0 - erfc, erfc)


# ----------------------------------------------------------------------------- kernels
@tc.kernel
def gelu_kernel(x, out, n_rows, n_cols, sx, so, APPROX: tc.constexpr, BR: tc.constexpr, BC: tc.constexpr,
                WIDE: tc.constexpr, NARROW: tc.constexpr = False, FLAT: tc.constexpr = False):
    rows, cols, mask = tile_index(n_rows, n_cols, BR, BC, WIDE, FLAT)
    t = tc.load(x.ptr + rows[:, None] * sx + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    tc.store(out.ptr + rows[:, None] * so + cols[None, :], gelu_f32(t, APPROX, NARROW).astype(out.dtype), mask=mask)


@tc.kernel
def silu_mul_kernel(g, u, out, n_rows, n_cols, sg, su, so, BR: tc.constexpr, BC: tc.constexpr,
                    WIDE: tc.constexpr, FLAT: tc.constexpr = False):
    rows, cols, mask = tile_index(n_rows, n_cols, BR, BC, WIDE, FLAT)
    a = tc.load(g.ptr + rows[:, None] * sg + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    b = tc.load(u.ptr + rows[:, None] * su + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    tc.store(out.ptr + rows[:, None] * so + cols[None, :], (a * tc.sigmoid(a) * b).astype(out.dtype), mask=mask)


@tc.kernel
def binary_kernel(a, b, out, n_batch, n_rows, n_cols, sab, sar, sac, sbb, sbr, sbc, sob, sor,
                  OP: tc.constexpr, BR: tc.constexpr, BC: tc.constexpr, WIDE: tc.constexpr,
                  FLAT: tc.constexpr = False):
    # A (batch, rows, cols) iteration space; a stride of 0 broadcasts an operand. The
    # batch index is the slowest part of the program id, one batch entry per program.
    # FLAT: one batch entry of one row (same-shape contiguous operands).
    pid = program(WIDE)
    if FLAT:
        bi = 0
        rest = pid
    else:
        per_batch = tc.cdiv(n_rows, BR) * tc.cdiv(n_cols, BC)
        bi = pid // per_batch
        rest = pid % per_batch
    rows, col0 = tile_origin(rest, n_cols, BR, BC, FLAT)
    cols = col0 + tc.arange(0, BC)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tc.load(a.ptr + bi * sab + rows[:, None] * sar + cols[None, :] * sac, mask=mask, other=0.0)
    y = tc.load(b.ptr + bi * sbb + rows[:, None] * sbr + cols[None, :] * sbc, mask=mask, other=0.0)
    x = x.astype(tc.float32)
    y = y.astype(tc.float32)
    if OP == "add":
        r = x + y
    else:
        r = x * y
    tc.store(out.ptr + bi * sob + rows[:, None] * sor + cols[None, :], r.astype(out.dtype), mask=mask)


@tc.kernel
def rope_half_kernel(x1, x2, cos, sin, o1, o2, n_rows, half, sx, sc, so, inner, seq,
                     BR: tc.constexpr, BH: tc.constexpr, WIDE: tc.constexpr, INVERSE: tc.constexpr = False):
    # Half-split layout: x = [x1 | x2]; o1 = x1 cos - x2 sin, o2 = x2 cos + x1 sin.
    # x1/x2 (and o1/o2) point at the two halves of each row, so each load is contiguous.
    # INVERSE: the rotation by minus the angle (sin negated), rope's backward.
    rows, cols, mask = tile_index(n_rows, half, BR, BH, WIDE, False)
    pos = (rows // inner) % seq
    c = tc.load(cos.ptr + pos[:, None] * sc + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    s = tc.load(sin.ptr + pos[:, None] * sc + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    if INVERSE:
        s = -s
    a = tc.load(x1.ptr + rows[:, None] * sx + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    b = tc.load(x2.ptr + rows[:, None] * sx + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    tc.store(o1.ptr + rows[:, None] * so + cols[None, :], (a * c - b * s).astype(o1.dtype), mask=mask)
    tc.store(o2.ptr + rows[:, None] * so + cols[None, :], (b * c + a * s).astype(o2.dtype), mask=mask)


@tc.kernel
def rope_interleaved_kernel(x, cos, sin, out, n_rows, dim, sx, sc, so, inner, seq,
                            BR: tc.constexpr, BD: tc.constexpr, WIDE: tc.constexpr, INVERSE: tc.constexpr = False):
    # Interleaved layout: pairs (x[2j], x[2j+1]) rotate by angle j. The row tile is read
    # whole (contiguous), split into pairs by a reshape to (BR, BD/2, 2), and written whole.
    rows, cols, mask = tile_index(n_rows, dim, BR, BD, WIDE, False)
    pid = tc.program_id(0)
    j = (pid % tc.cdiv(dim, BD)) * (BD // 2) + tc.arange(0, BD // 2)
    t = tc.load(x.ptr + rows[:, None] * sx + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    pairs = tc.reshape(t, (BR, BD // 2, 2))
    lane = tc.arange(0, 2)[None, None, :]
    even = tc.sum(tc.where(lane == 0, pairs, 0.0), axis=2)
    odd = tc.sum(tc.where(lane == 1, pairs, 0.0), axis=2)
    pos = (rows // inner) % seq
    cmask = (rows < n_rows)[:, None] & (j < dim // 2)[None, :]
    c = tc.load(cos.ptr + pos[:, None] * sc + j[None, :], mask=cmask, other=0.0).astype(tc.float32)
    s = tc.load(sin.ptr + pos[:, None] * sc + j[None, :], mask=cmask, other=0.0).astype(tc.float32)
    if INVERSE:
        s = -s
    out_even = even * c - odd * s
    out_odd = odd * c + even * s
    r = tc.where(lane == 0, out_even[:, :, None], out_odd[:, :, None])
    tc.store(out.ptr + rows[:, None] * so + cols[None, :], tc.reshape(r, (BR, BD)).astype(out.dtype), mask=mask)


_ROW_ARGS = "n_rows=i32, n_cols=i32:16"
SIGNATURES = {
    "gelu_kernel": "x=f16[?,?], out=f16[?,?], n_rows=1, n_cols=i32:16, sx=i32:16, so=i32:16, APPROX='none', BR=1, "
                   "BC=1024, WIDE=False, NARROW=True, FLAT=True",
    "silu_mul_kernel": f"g=bf16[?,?], u=bf16[?,?], out=bf16[?,?], {_ROW_ARGS}, sg=i32:16, su=i32:16, so=i32:16, "
                       "BR=2, BC=2048, WIDE=False",
    "binary_kernel": "a=f32[?,?,?], b=f32[?,?,?], out=f32[?,?,?], n_batch=i32, n_rows=i32, n_cols=i32:16, sab=i32:16, "
                     "sar=i32:16, sac=1, sbb=i32:16, sbr=i32:16, sbc=1, sob=i32:16, sor=i32:16, OP='add', BR=4, BC=1024, "
                     "WIDE=False",
    "binary_kernel_flat": "a=bf16[?,?,?], b=bf16[?,?,?], out=bf16[?,?,?], n_batch=1, n_rows=1, n_cols=i32:16, "
                          "sab=i32:16, sar=i32:16, sac=1, sbb=i32:16, sbr=i32:16, sbc=1, sob=i32:16, sor=i32:16, "
                          "OP='mul', BR=1, BC=1024, WIDE=False, FLAT=True",
    "rope_half_kernel": "x1=f16[?,?], x2=f16[?,?], cos=f32[?,?], sin=f32[?,?], o1=f16[?,?], o2=f16[?,?], n_rows=i32, "
                        "half=i32:16, sx=i32:16, sc=i32:16, so=i32:16, inner=i32, seq=i32, BR=64, BH=64, WIDE=False",
    "rope_interleaved_kernel": "x=bf16[?,?], cos=f32[?,?], sin=f32[?,?], out=bf16[?,?], n_rows=i32, dim=i32:16, "
                               "sx=i32:16, sc=i32:16, so=i32:16, inner=i32, seq=i32, BR=32, BD=128, WIDE=False",
}
# The options the entry points launch SIGNATURES with (`_rows.tile_config`; tests/test_ptxas.py).
OPTIONS = {name: {"num_warps": 4 if name in ("gelu_kernel", "binary_kernel_flat") else 8, "fast_math": True}
           for name in SIGNATURES}
# The one binary kernel, compiled as a broadcast and as a flat launch.
binary_kernel_flat = binary_kernel


# ----------------------------------------------------------------------------- plans
# Each plan is a pure function of the arrays' descriptions (`launches.spec`) and a Target; its
# operands are the arrays' rows as `_rows.rows_form` views them, under the names given.
def plan_gelu(x: Arr, out: Arr, approximate: str, target: Target) -> List[Launch]:
    """gelu of `x` into `out`: one launch, FLAT_TILES or ROW_TILES. Operands "x", "out"."""
    n_rows, n_cols, (sx, so) = rows_layout([x, out], ["x", "out"])
    cfg = tile_config(n_rows, n_cols, t=tuning_for(target).elementwise)
    return [Launch.of(gelu_kernel, cfg.grid(n_rows, n_cols), ("x", "out", n_rows, n_cols, sx, so), cfg.num_warps,
                      schedule=cfg.schedule, APPROX=approximate, BR=cfg.rows, BC=cfg.cols,
                      WIDE=wide(n_rows * sx, n_rows * so, n_rows * n_cols), NARROW=out.dtype.itemsize == 2,
                      FLAT=cfg.flat)]


def plan_gated(gate: Arr, up: Arr, out: Arr, target: Target) -> List[Launch]:
    """silu(gate) * up into `out` (swiglu; silu_and_mul's halves): operands "gate", "up", "out"."""
    n_rows, n_cols, (sg, su, so) = rows_layout([gate, up, out], ["gate", "up", "out"])
    cfg = tile_config(n_rows, n_cols, t=tuning_for(target).elementwise)
    return [Launch.of(silu_mul_kernel, cfg.grid(n_rows, n_cols), ("gate", "up", "out", n_rows, n_cols, sg, su, so),
                      cfg.num_warps, schedule=cfg.schedule, BR=cfg.rows, BC=cfg.cols,
                      WIDE=wide(n_rows * sg, n_rows * su, n_rows * so, n_rows * n_cols), FLAT=cfg.flat)]


def plan_binary(op: str, a: Arr, b: Arr, out: Arr, target: Target) -> List[Launch]:
    """a `op` b ("add" or "mul") broadcast into `out`: operands "a", "b", "out" viewed as
    (batch, rows, cols) by `binary_layout`."""
    (n_batch, n_rows, n_cols), sa, sb, so = binary_layout(op, a, b, out)
    cfg = tile_config(n_rows, n_cols, t=tuning_for(target).elementwise)
    sizes = (n_batch, n_rows, n_cols)
    extent = [abs(st) * (n - 1) for s in (sa, sb, so) for st, n in zip(s, sizes)]
    flat = cfg.flat and n_batch == 1
    return [Launch.of(binary_kernel, cfg.grid(n_rows, n_cols, n_batch),
                      ("a", "b", "out", n_batch, n_rows, n_cols, sa[0], sa[1], sa[2], sb[0], sb[1], sb[2], so[0], so[1]),
                      cfg.num_warps, schedule=cfg.schedule if flat else ROW_TILES, OP=op, BR=cfg.rows, BC=cfg.cols,
                      WIDE=wide(sum(extent[:3]), sum(extent[3:6]), sum(extent[6:]), n_batch * n_rows * n_cols),
                      FLAT=flat)]


def plan_rope(x: Arr, cos: Arr, sin: Arr, out: Arr, *, interleaved: bool, seq_dim: int, inverse: bool,
              target: Target) -> List[Launch]:
    """rope of `x` (seq_dim normalized) into `out`; `inverse`: by minus the angles. Operands:
    half-split "x1", "x2", "o1", "o2" (x's and out's halves), interleaved "x", "out"; "cos",
    "sin"; each as its rows (`_rows.row_view`)."""
    t = tuning_for(target).elementwise
    dim, seq = x.shape[-1], x.shape[seq_dim]
    half = dim // 2
    n_rows = math.prod(x.shape[:-1])
    inner = math.prod(x.shape[seq_dim + 1:-1])
    sc = row_stride(cos, "cos")
    if not interleaved:
        sx, so = row_stride(sliced(x, 0, half), "x"), row_stride(sliced(out, 0, half), "out")
        cfg = tile_config(n_rows, half, tile_elems=t.rope_half_tile_elems, t=t)
        return [Launch.of(rope_half_kernel, cfg.grid(n_rows, half),
                          ("x1", "x2", "cos", "sin", "o1", "o2", n_rows, half, sx, sc, so, inner, seq),
                          cfg.num_warps, schedule=ROW_TILES, BR=cfg.rows, BH=cfg.cols,
                          WIDE=wide(n_rows * sx, n_rows * so, seq * sc), INVERSE=inverse)]
    sx, so = row_stride(x, "x"), row_stride(out, "out")
    cfg = tile_config(n_rows, dim, t=t)
    return [Launch.of(rope_interleaved_kernel, cfg.grid(n_rows, dim),
                      ("x", "cos", "sin", "out", n_rows, dim, sx, sc, so, inner, seq), cfg.num_warps,
                      schedule=ROW_TILES, BR=cfg.rows, BD=max(cfg.cols, 2), WIDE=wide(n_rows * sx, n_rows * so, seq * sc),
                      INVERSE=inverse)]


# ----------------------------------------------------------------------------- entry points
def _inputs(named, allowed=None):
    arrs = {name: as_array(x, name) for name, x in named.items()}
    for name, a in arrs.items():
        check_float(a, name, allowed) if allowed else check_float(a, name)
    check_same_place(arrs)
    return list(arrs.values())


def row_operands(arrays, names) -> Operands:
    """The Operands of a rows plan: each array's rows (`_rows.rows_form`) under its name."""
    _, _, rows = rows_form(arrays, names)
    return Operands({names[0]: arrays[0]}, {name: r.arg for name, r in zip(names, rows)})


@planned
def gelu(x, approximate: str = "none", out=None):
    """GELU of `x`: 0.5 x (1 + erf(x / sqrt 2)), or with approximate="tanh" the tanh form.

    f16, bf16, f32; any shape; computed in f32. Tiles of about 4096 elements
    (`_rows.tile_config`: whole rows when short, 16 elements per thread); a
    contiguous array is one flat row in tiles of 1024 at 4 warps.
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    a, = _inputs({"x": x})
    o = output(out, a, a.shape, a.dtype)
    execute(plan_gelu(a, o, approximate, target_of(a)), row_operands([a, o], ["x", "out"]))
    return o.obj


def _gated(ga, ua, out, like):
    o = output(out, like, ga.shape, like.dtype)
    execute(plan_gated(ga, ua, o, target_of(like)), row_operands([ga, ua, o], ["gate", "up", "out"]))
    return o.obj


@planned
def swiglu(gate, up, out=None):
    """silu(gate) * up, elementwise (gate and up of one shape and dtype).

    f16, bf16, f32; computed in f32; the tile heuristic of `gelu`.
    """
    ga, ua = _inputs({"gate": gate, "up": up})
    if ga.shape != ua.shape or ga.dtype is not ua.dtype:
        raise ValueError(f"gate and up must have one shape and dtype, got {ga.shape} {ga.dtype.name} and "
                         f"{ua.shape} {ua.dtype.name}")
    return _gated(ga, ua, out, ga)


@planned
def silu_and_mul(x, out=None):
    """silu(x[..., :d]) * x[..., d:] for x of last dimension 2d: the fused gated MLP
    activation. Returns (..., d). The two halves are read in place (no copy)."""
    a, = _inputs({"x": x})
    if a.ndim == 0 or a.shape[-1] % 2:
        raise ValueError(f"x: the last dimension must be even (gate and up halves), got shape {a.shape}")
    d = a.shape[-1] // 2
    return _gated(slice_last(a, 0, d), slice_last(a, d, 2 * d), out, a)


# ----------------------------------------------------------------------------- add / mul
def _broadcast_strides(a, shape):
    pad = len(shape) - a.ndim
    sizes = (1,) * pad + tuple(a.shape)
    strides = (0,) * pad + tuple(a.strides)
    return [0 if n == 1 and m != 1 else st for n, m, st in zip(sizes, shape, strides)]


def _collapse(shape, stride_lists):
    """Drop extents of 1 and merge neighbouring dimensions that every operand steps
    through as one: (shape, strides per operand) of the smallest rank."""
    keep = [d for d, n in enumerate(shape) if n != 1]
    dims = [[shape[d], [st[d] for st in stride_lists]] for d in keep]
    merged = []
    for n, sts in dims:
        if merged and all(p == s * n for p, s in zip(merged[-1][1], sts)):
            merged[-1] = [merged[-1][0] * n, sts]
        else:
            merged.append([n, sts])
    return [m[0] for m in merged], [[m[1][i] for m in merged] for i in range(len(stride_lists))]


def binary_layout(op: str, a: Arr, b: Arr, out: Arr):
    """((batch, rows, cols), a's, b's and out's strides over them): the broadcast of a and b into
    out with the dimensions every operand steps through as one merged; ValueError when more
    than 3 remain or out's last stride is not 1."""
    sizes, (sa, sb, so) = _collapse(out.shape, [_broadcast_strides(a, out.shape), _broadcast_strides(b, out.shape),
                                                list(out.strides)])
    if len(sizes) > 3:
        raise ValueError(f"{op}: the broadcast of shapes {a.shape} and {b.shape} (with these strides) needs "
                         f"{len(sizes)} dimensions after merging, at most 3 are supported; pass contiguous "
                         "or expanded copies")
    if sizes and so[-1] != 1:
        raise ValueError(f"{op}: out must be contiguous along its last dimension, got strides {out.strides}")
    pad = 3 - len(sizes)
    return tuple([1] * pad + sizes), *([0] * pad + s for s in (sa, sb, so))


def _binary(op, a, b, out):
    aa, ba = _inputs({"a": a, "b": b})
    try:
        shape = tuple(np.broadcast_shapes(aa.shape, ba.shape))
    except ValueError:  # numpy's message calls them "arg 0" and "arg 1"
        raise ValueError(f"{op}: a has shape {aa.shape} and b has shape {ba.shape}, which do not broadcast "
                         "together (numpy's rules: trailing dimensions equal or 1)") from None
    o = output(out, aa, shape, _dt.promote(aa.dtype, ba.dtype))
    sizes, sa, sb, so = binary_layout(op, aa, ba, o)
    operands = Operands({"a": aa}, {"a": view(aa, sizes, sa), "b": view(ba, sizes, sb), "out": view(o, sizes, so)})
    execute(plan_binary(op, aa, ba, o, target_of(aa)), operands)
    return o.obj


@planned
def add(a, b, out=None):
    """a + b with numpy broadcasting (f16, bf16, f32; the result has the promoted dtype).

    The broadcast is done by stride-0 reads, never by copies: after merging the
    dimensions that every operand steps through as one, at most 3 may remain
    (batch, rows, cols). Tile heuristic of `gelu` over (rows, cols), one batch
    entry per program.
    """
    return _binary("add", a, b, out)


@planned
def mul(a, b, out=None):
    """a * b with numpy broadcasting; see `add`."""
    return _binary("mul", a, b, out)


# ----------------------------------------------------------------------------- rope
@planned
def rope(x, cos, sin, *, interleaved: bool = False, seq_dim=None, out=None):
    """Rotary position embedding of x (..., S, ..., D) by cos/sin of shape (S, D/2).

    Half-split layout (default, GPT-NeoX / Llama): x = [x1 | x2] along the last
    dimension, out = [x1 cos - x2 sin | x2 cos + x1 sin]. interleaved=True
    (GPT-J): pairs (x[2j], x[2j+1]) rotate by cos[:, j], sin[:, j].
    seq_dim is the position dimension of x: by default -3 for x of rank >= 3
    ((batch, seq, heads, dim)) and -2 for rank 2 ((seq, dim)); pass -2 for
    (batch, heads, seq, dim). x f16/bf16/f32, cos/sin any of those (computed in
    f32). Tiles: (rows, D/2) halves of about 2048 elements each, or (rows, D)
    tiles of about 4096 for the interleaved layout.
    """
    return rotate(x, cos, sin, interleaved=interleaved, seq_dim=seq_dim, out=out, inverse=False)


def rotate(x, cos, sin, *, interleaved: bool, seq_dim, out, inverse: bool):
    """`rope`'s body; `inverse`: rotate by minus the angles (rope's backward)."""
    xa, ca, sa = _inputs({"x": x, "cos": cos, "sin": sin})
    if xa.ndim < 2 or xa.shape[-1] % 2:
        raise ValueError(f"x: expected rank >= 2 with an even last dimension, got shape {xa.shape}")
    sd = normalize_dim((-3 if xa.ndim >= 3 else -2) if seq_dim is None else seq_dim, xa.ndim, "seq_dim")
    if sd == xa.ndim - 1:
        raise ValueError("seq_dim must not be the last (rotated) dimension")
    dim, seq = xa.shape[-1], xa.shape[sd]
    half = dim // 2
    for name, t in (("cos", ca), ("sin", sa)):
        if t.shape != (seq, half):
            raise ValueError(f"{name}: expected shape {(seq, half)} (positions, dim / 2), got {t.shape}")
    if ca.strides != sa.strides:
        raise ValueError(f"cos and sin must have the same strides, got {ca.strides} and {sa.strides}")
    o = output(out, xa, xa.shape, xa.dtype)
    values = {"cos": row_view(ca, "cos").arg, "sin": row_view(sa, "sin").arg}
    if not interleaved:
        values.update(x1=row_view(slice_last(xa, 0, half), "x").arg, x2=row_view(slice_last(xa, half, dim), "x").arg,
                      o1=row_view(slice_last(o, 0, half), "out").arg, o2=row_view(slice_last(o, half, dim), "out").arg)
    else:
        values.update(x=row_view(xa, "x").arg, out=row_view(o, "out").arg)
    launches = plan_rope(xa, ca, sa, o, interleaved=interleaved, seq_dim=sd, inverse=inverse, target=target_of(xa))
    execute(launches, Operands({"x": xa}, values))
    return o.obj
