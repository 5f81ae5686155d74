"""Backward passes of the elementwise ops: gelu, swiglu / silu_and_mul, rope, dropout.

    gelu (exact):  dx = dy * (Phi(x) + x phi(x))           Phi, phi: the normal cdf, pdf
    gelu (tanh):   dx = dy * (0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 c x^2)),
                   th = tanh(k (x + c x^3)), k = sqrt(2 / pi), c = 0.044715
    swiglu:        d up = dy * silu(gate), d gate = dy * up * s (1 + gate (1 - s)), s = sigmoid(gate)
    rope:          the rotation by minus the angles (rope's kernels with INVERSE)
    dropout:       dropout of dy with the forward's (p, seed): the same Philox mask, regenerated

Same conventions as the forwards (elementwise.py): f16, bf16, f32 in, f32 math, arrays
seen as (rows, cols) (`_rows.rows_form`: a contiguous array is one flat row), tiles of
`_rows.tile_config`. The gradients have dy's dtype.
"""
from __future__ import annotations

from typing import List

import tilec as tc
from tilec.target import Target

from ._common import Arr, output, target_of
from ._plan import planned
from ._rows import rows_layout, slice_last, tile_config, wide
from .dropout import _dropout_scalars, apply_mask
from .elementwise import _inputs, row_operands, rotate, tile_index
from .launches import Launch, execute
from .tuning import tuning_for

__all__ = ["gelu_backward", "swiglu_backward", "silu_and_mul_backward", "rope_backward", "dropout_backward",
           "plan_gelu_backward", "plan_swiglu_backward"]

SQRT_2_OVER_PI = 0.7978845608028654
INV_SQRT_2PI = 0.3989422804014327


@tc.func
def _sigmoid(a):
    # from exp, not tc.sigmoid: under fast_math that is tanh.approx (relative error ~2^-11),
    # too coarse for f32 gradients; ex2.approx is within ~2^-22
    return 1.0 / (1.0 + tc.exp(-a))


@tc.func
def gelu_grad_f32(x, APPROX: tc.constexpr):
    """d gelu / dx at x (f32)."""
    if APPROX == "tanh":
        # with q = sigmoid(2u) = (1 + th) / 2 and 1 - q = e q (e = exp(-2u)): 1 - th^2 = 4 q (1 - q),
        # no cancellation in either tail (tanh itself is, under fast_math, tanh.approx: see
        # `_sigmoid`); |u| <= 40 keeps e finite and changes no f32 result
        k = SQRT_2_OVER_PI
        u = tc.minimum(tc.maximum(k * (x + 0.044715 * x * x * x), -40.0), 40.0)
        e = tc.exp(-2.0 * u)
        q = 1.0 / (1.0 + e)
        return q + 2.0 * x * q * (e * q) * k * (1.0 + 3.0 * 0.044715 * x * x)
    # Phi(x) = erfc(-x / sqrt 2) / 2 by the forward's erfc fit (relative error < 1.2e-7, and
    # relative accuracy in the far negative tail); phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    z = tc.abs(x) * 0.7071067811865476
    t = 1.0 / (1.0 + 0.5 * z)
    p = t * (-0.82215223 + t * 0.17087277) + 1.48851587
    p = t * (t * (p * t - 1.13520398) + 0.27886807) - 0.18628806
    p = t * (t * (t * (p * t + 0.09678418) + 0.37409196) + 1.00002368) - 1.26551223
    half_erfc = 0.5 * t * tc.exp(p - z * z)
    cdf = tc.where(x >= 0.0, 1.0 - half_erfc, half_erfc)
    return cdf + x * tc.exp(-0.5 * x * x) * INV_SQRT_2PI


@tc.kernel
def gelu_bwd_kernel(dy, x, dx, n_rows, n_cols, sdy, sx, sdx, APPROX: tc.constexpr, BR: tc.constexpr,
                    BC: tc.constexpr, WIDE: tc.constexpr, FLAT: tc.constexpr = False):
    rows, cols, mask = tile_index(n_rows, n_cols, BR, BC, WIDE, FLAT)
    g = tc.load(dy.ptr + rows[:, None] * sdy + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    t = tc.load(x.ptr + rows[:, None] * sx + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    tc.store(dx.ptr + rows[:, None] * sdx + cols[None, :], (g * gelu_grad_f32(t, APPROX)).astype(dx.dtype),
             mask=mask)


@tc.kernel
def swiglu_bwd_kernel(dy, g, u, dg, du, n_rows, n_cols, sdy, sg, su, sdg, sdu, BR: tc.constexpr, BC: tc.constexpr,
                      WIDE: tc.constexpr, FLAT: tc.constexpr = False):
    rows, cols, mask = tile_index(n_rows, n_cols, BR, BC, WIDE, FLAT)
    d = tc.load(dy.ptr + rows[:, None] * sdy + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    a = tc.load(g.ptr + rows[:, None] * sg + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    b = tc.load(u.ptr + rows[:, None] * su + cols[None, :], mask=mask, other=0.0).astype(tc.float32)
    s = _sigmoid(a)
    tc.store(du.ptr + rows[:, None] * sdu + cols[None, :], (d * a * s).astype(du.dtype), mask=mask)
    tc.store(dg.ptr + rows[:, None] * sdg + cols[None, :], (d * b * s * (1.0 + a * (1.0 - s))).astype(dg.dtype),
             mask=mask)


_ARGS = "n_rows=i32, n_cols=i32:16"
SIGNATURES = {
    "gelu_bwd_kernel": "dy=bf16[?,?], x=bf16[?,?], dx=bf16[?,?], n_rows=1, n_cols=i32:16, sdy=i32:16, sx=i32:16, "
                       "sdx=i32:16, APPROX='none', BR=1, BC=1024, WIDE=False, FLAT=True",
    "gelu_bwd_kernel_tanh": f"dy=f32[?,?], x=f32[?,?], dx=f32[?,?], {_ARGS}, sdy=i32:16, sx=i32:16, sdx=i32:16, "
                            "APPROX='tanh', BR=4, BC=1024, WIDE=False",
    "swiglu_bwd_kernel": f"dy=bf16[?,?], g=bf16[?,?], u=bf16[?,?], dg=bf16[?,?], du=bf16[?,?], {_ARGS}, "
                         "sdy=i32:16, sg=i32:16, su=i32:16, sdg=i32:16, sdu=i32:16, BR=2, BC=2048, WIDE=False",
}
OPTIONS = {"gelu_bwd_kernel": {"num_warps": 4, "fast_math": True},
           "gelu_bwd_kernel_tanh": {"num_warps": 8, "fast_math": True},
           "swiglu_bwd_kernel": {"num_warps": 8, "fast_math": True}}
gelu_bwd_kernel_tanh = gelu_bwd_kernel   # the one kernel, compiled for each form


def plan_gelu_backward(dy: Arr, x: Arr, out: Arr, approximate: str, target: Target) -> List[Launch]:
    """dx = dy * gelu'(x) into `out`: operands "dy", "x", "out" as their rows (`_rows.rows_form`)."""
    n_rows, n_cols, (sdy, sx, so) = rows_layout([dy, x, out], ["dy", "x", "out"])
    cfg = tile_config(n_rows, n_cols, t=tuning_for(target).elementwise)
    return [Launch.of(gelu_bwd_kernel, cfg.grid(n_rows, n_cols), ("dy", "x", "out", n_rows, n_cols, sdy, sx, so),
                      cfg.num_warps, schedule=cfg.schedule, APPROX=approximate, BR=cfg.rows, BC=cfg.cols,
                      WIDE=wide(n_rows * sdy, n_rows * sx, n_rows * so, n_rows * n_cols), FLAT=cfg.flat)]


_SWIGLU_GRADS = ("dy", "gate", "up", "dgate", "dup")


def plan_swiglu_backward(dy: Arr, gate: Arr, up: Arr, dgate: Arr, dup: Arr, target: Target) -> List[Launch]:
    """The gradients of silu(gate) * up into `dgate`, `dup`: operands "dy", "gate", "up", "dgate",
    "dup" as their rows."""
    n_rows, n_cols, strides = rows_layout([dy, gate, up, dgate, dup], _SWIGLU_GRADS)
    cfg = tile_config(n_rows, n_cols, t=tuning_for(target).elementwise)
    return [Launch.of(swiglu_bwd_kernel, cfg.grid(n_rows, n_cols), _SWIGLU_GRADS + (n_rows, n_cols) + strides,
                      cfg.num_warps, schedule=cfg.schedule, BR=cfg.rows, BC=cfg.cols,
                      WIDE=wide(*(n_rows * st for st in strides), n_rows * n_cols), FLAT=cfg.flat)]


def _same(named, op):
    arrs = _inputs(named)
    first = arrs[0]
    for (name, _), a in zip(list(named.items())[1:], arrs[1:]):
        if a.shape != first.shape:
            raise ValueError(f"{op}: {name} has shape {a.shape}, expected {first.shape} (the shape of "
                             f"{next(iter(named))})")
    return arrs


@planned
def gelu_backward(dy, x, approximate: str = "none", out=None):
    """gelu_backward(dy, x, approximate="none", out=None) -> dx = dy * gelu'(x).

    x: gelu's input; approximate as the forward's ("none": the erf form, "tanh"). dy and
    x of one shape, f16/bf16/f32; dx in dy's dtype (or `out`, which may be dy).
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    ga, xa = _same({"dy": dy, "x": x}, "gelu_backward")
    o = output(out, ga, ga.shape, ga.dtype)
    execute(plan_gelu_backward(ga, xa, o, approximate, target_of(ga)), row_operands([ga, xa, o], ["dy", "x", "out"]))
    return o.obj


def _swiglu_grads(da, ga, ua, dg, du):
    arrays = [da, ga, ua, dg, du]
    execute(plan_swiglu_backward(*arrays, target_of(da)), row_operands(arrays, _SWIGLU_GRADS))


@planned
def swiglu_backward(dy, gate, up, dgate=None, dup=None):
    """swiglu_backward(dy, gate, up, dgate=None, dup=None) -> (dgate, dup) of out = silu(gate) * up.

    dy, gate, up of one shape (f16/bf16/f32); the gradients in dy's dtype, written to
    `dgate` / `dup` where given (which may be gate / up themselves)."""
    da, ga, ua = _same({"dy": dy, "gate": gate, "up": up}, "swiglu_backward")
    dg = output(dgate, da, da.shape, da.dtype, "dgate")
    du = output(dup, da, da.shape, da.dtype, "dup")
    _swiglu_grads(da, ga, ua, dg, du)
    return dg.obj, du.obj


@planned
def silu_and_mul_backward(dy, x, out=None):
    """silu_and_mul_backward(dy, x, out=None) -> dx of out = silu(x[..., :d]) * x[..., d:].

    x: the forward's input (..., 2d), dy: (..., d); dx (..., 2d) in dy's dtype holds
    [d gate | d up] (or is written to `out`, which may be x itself)."""
    da, xa = _inputs({"dy": dy, "x": x})
    if xa.ndim == 0 or xa.shape[-1] % 2:
        raise ValueError(f"x: the last dimension must be even (gate and up halves), got shape {xa.shape}")
    d = xa.shape[-1] // 2
    if da.shape != xa.shape[:-1] + (d,):
        raise ValueError(f"silu_and_mul_backward: dy has shape {da.shape}, expected {xa.shape[:-1] + (d,)}")
    o = output(out, da, xa.shape, da.dtype)
    _swiglu_grads(da, slice_last(xa, 0, d), slice_last(xa, d, 2 * d), slice_last(o, 0, d), slice_last(o, d, 2 * d))
    return o.obj


@planned
def rope_backward(dy, cos, sin, *, interleaved: bool = False, seq_dim=None, out=None):
    """rope_backward(dy, cos, sin, *, interleaved=False, seq_dim=None, out=None) -> dx.

    The gradient of rope(x, cos, sin, ...) given dy: rope is a rotation of each pair by
    its angle, so dx is dy rotated by minus the angle (sin negated in the kernel). The
    arguments as `rope`'s (the same cos, sin, layout and seq_dim); dx in dy's dtype."""
    return rotate(dy, cos, sin, interleaved=interleaved, seq_dim=seq_dim, out=out, inverse=True)


@planned(per_call=_dropout_scalars)
def dropout_backward(dy, p: float, seed: int, out=None):
    """dropout_backward(dy, p, seed, out=None) -> dx = dy * mask / (1 - p).

    With the forward's p and seed the mask is the forward's, regenerated from
    (seed, element index) by Philox (dropout.py; it depends on nothing else), never
    stored: this is dropout(dy, p, seed). dy: f16/bf16/f32, any shape; dx in its dtype."""
    return apply_mask(dy, p, seed, out)
