"""add_rms_norm and its backward on the interpreter against float64 numpy (odd shapes, packed,
single-tile and looped rows, mixed dtypes), the backward against finite differences of the
forward, the plans on descriptions, argument errors, and the PTX of the extra signatures."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import BF16Array
from tilec.stdlib_kernels._common import row_config
from tilec.stdlib_kernels.launches import spec
from tilec.target import Target

AN = importlib.import_module("tilec.stdlib_kernels.add_norm")
B = importlib.import_module("tilec.stdlib_kernels.backward")
TARGETS = {arch: Target.from_arch(arch) for arch in ("sm_80", "sm_90a")}
EPS = 1e-6


def f64(a) -> np.ndarray:
    return np.asarray(np.asarray(a), dtype=np.float64)


def _forward_ref(x, r, w, eps=EPS, h_dtype=None):
    """(y, h, rstd) in float64, h rounded to `h_dtype` first (the kernel normalizes h as stored)."""
    h = f64(x) + f64(r)
    if h_dtype is not None:
        h = f64(h_dtype(h))
    rstd = 1.0 / np.sqrt((h * h).mean(-1, keepdims=True) + eps)
    y = h * rstd * (1.0 if w is None else f64(w))
    return y, h, rstd[..., 0]


def _backward_ref(dy, dres, h, w, rstd):
    rstd = rstd[..., None]
    hhat = h * rstd
    g = dy * (1.0 if w is None else w)
    dx = rstd * (g - hhat * (g * hhat).mean(-1, keepdims=True))
    if dres is not None:
        dx = dx + dres
    dw = (dy * hhat).reshape(-1, h.shape[-1]).sum(0)
    return dx, dw


# (shape, where the forward / backward run): packed rows, one tile, 16384 < looped; 8192 < the
# backward's column tiles
SHAPES = [(3, 5, 37), (7, 1000), (2, 9000), (2, 17000), (1, 1), (0, 8)]


@pytest.mark.parametrize("shape", SHAPES)
def test_add_rms_norm_matches_float64_f32(shape):
    rng = np.random.default_rng(1)
    x, r = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32) * 3
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    y, h, rstd = sk.add_rms_norm(x, r, w, EPS, return_stats=True)
    want_y, want_h, want_rstd = _forward_ref(x, r, w, h_dtype=np.float32)
    assert y.shape == h.shape == shape and rstd.shape == shape[:-1] and rstd.dtype == np.float32
    np.testing.assert_array_equal(h, (x + r))        # the rounded sum, exactly
    np.testing.assert_allclose(y, want_y, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(rstd, want_rstd, rtol=2e-6)


@pytest.mark.parametrize("x_dt,r_dt", [("bf16", "bf16"), ("f16", "f16"), ("bf16", "f32")])
@pytest.mark.parametrize("shape", [(5, 77), (3, 9000)])
def test_add_rms_norm_2byte_and_mixed(rowwise, x_dt, r_dt, shape):
    rng = np.random.default_rng(2)
    x, r = rowwise.host(rng.standard_normal(shape), x_dt), rowwise.host(rng.standard_normal(shape), r_dt)
    w = rowwise.host(rng.standard_normal(shape[-1]), x_dt)
    y, h = sk.add_rms_norm(x, r, w)
    rounder = {"bf16": lambda v: BF16Array(v), "f16": lambda v: np.float16(v), "f32": lambda v: np.float32(v)}[r_dt]
    want_y, want_h, _ = _forward_ref(x, r, w, h_dtype=rounder)
    assert type(h) is type(r)                      # new_residual in residual's dtype, y in x's
    assert type(y) is type(x)
    np.testing.assert_array_equal(f64(h), want_h)  # f32 sum rounded once: what numpy's rounding gives
    rowwise.close(y, want_y, x_dt, scale=4)


def test_add_rms_norm_without_weight_and_into_out():
    rng = np.random.default_rng(3)
    x, r = rng.standard_normal((4, 50)).astype(np.float32), rng.standard_normal((4, 50)).astype(np.float32)
    out = np.full((4, 50), np.nan, np.float32)
    y, h = sk.add_rms_norm(x, r, None, 1e-3, out=out)
    assert y is out
    np.testing.assert_allclose(y, _forward_ref(x, r, None, 1e-3)[0], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("has_w,has_dres", [(True, True), (True, False), (False, True)])
def test_add_rms_norm_backward_matches_float64(shape, has_w, has_dres):
    rng = np.random.default_rng(4)
    x, r = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[-1]).astype(np.float32) if has_w else None
    _, h, rstd = sk.add_rms_norm(x, r, w, EPS, return_stats=True)
    dy = rng.standard_normal(shape).astype(np.float32)
    dres = rng.standard_normal(shape).astype(np.float32) if has_dres else None
    dx, dw = sk.add_rms_norm_backward(dy, dres, h, w, rstd)
    want_dx, want_dw = _backward_ref(f64(dy), None if dres is None else f64(dres), f64(h),
                                     None if w is None else f64(w), f64(rstd))
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
    if has_w:
        np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-4 * max(1, np.sqrt(h.size // max(shape[-1], 1))))
    else:
        assert dw is None


def test_add_rms_norm_backward_against_finite_differences():
    # the analytic formula itself checked: central differences of L = sum(dy*y) + sum(dres*h) in float64
    rng = np.random.default_rng(5)
    shape = (3, 11)
    x, r, w = rng.standard_normal(shape), rng.standard_normal(shape), rng.standard_normal(11)
    dy, dres = rng.standard_normal(shape), rng.standard_normal(shape)

    def loss(x_, r_, w_):
        y, h, _ = _forward_ref(x_, r_, w_)
        return (dy * y).sum() + (dres * h).sum()

    dx, dw = sk.add_rms_norm_backward(dy.astype(np.float32), dres.astype(np.float32),
                                      (x + r).astype(np.float32), w.astype(np.float32),
                                      _forward_ref(x, r, w)[2].astype(np.float32))
    step = 1e-6
    for idx in [(0, 0), (1, 5), (2, 10)]:
        e = np.zeros(shape)
        e[idx] = step
        num_x = (loss(x + e, r, w) - loss(x - e, r, w)) / (2 * step)
        num_r = (loss(x, r + e, w) - loss(x, r - e, w)) / (2 * step)
        assert abs(dx[idx] - num_x) < 1e-4 and abs(dx[idx] - num_r) < 1e-4
    for j in (0, 7):
        e = np.zeros(11)
        e[j] = step
        assert abs(dw[j] - (loss(x, r, w + e) - loss(x, r, w - e)) / (2 * step)) < 1e-4


def test_add_rms_norm_backward_is_deterministic_bf16(rowwise):
    rng = np.random.default_rng(6)
    shape = (300, 64)
    x, r = rowwise.host(rng.standard_normal(shape), "bf16"), rowwise.host(rng.standard_normal(shape), "bf16")
    w = rowwise.host(rng.standard_normal(64), "bf16")
    _, h, rstd = sk.add_rms_norm(x, r, w, return_stats=True)
    dy = rowwise.host(rng.standard_normal(shape), "bf16")
    dx1, dw1 = sk.add_rms_norm_backward(dy, None, h, w, rstd)
    dx2, dw2 = sk.add_rms_norm_backward(dy, None, h, w, rstd)
    np.testing.assert_array_equal(f64(dw1), f64(dw2))
    want_dx, want_dw = _backward_ref(f64(dy), None, f64(h), f64(w), f64(rstd))
    rowwise.close(dx1, want_dx, "bf16", scale=4)
    rowwise.close(dw1, want_dw, "bf16", scale=max(1.0, float(np.abs(want_dw).max())))


def test_add_rms_norm_argument_errors():
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="residual has shape"):
        sk.add_rms_norm(x, np.ones((2, 7), np.float32))
    with pytest.raises(TypeError, match="residual"):
        sk.add_rms_norm(x, np.ones((2, 8), np.int32))
    with pytest.raises(ValueError, match="weight has shape"):
        sk.add_rms_norm(x, x, np.ones(7, np.float32))
    with pytest.raises(TypeError, match="eps must be a non-negative number"):
        sk.add_rms_norm(x, x, None, "1e-6")
    with pytest.raises(ValueError, match="eps must be a non-negative number"):
        sk.add_rms_norm(x, x, None, -1.0)
    with pytest.raises(ValueError, match="x must have at least 1 dimension"):
        sk.add_rms_norm(np.ones((), np.float32), np.ones((), np.float32))
    with pytest.raises(TypeError, match="out has dtype"):
        sk.add_rms_norm(x, x, out=np.empty((2, 8), np.float16))
    rstd = np.ones(2, np.float32)
    with pytest.raises(ValueError, match="dy has shape"):
        sk.add_rms_norm_backward(np.ones((2, 7), np.float32), None, x, None, rstd)
    with pytest.raises(ValueError, match="dresidual has shape"):
        sk.add_rms_norm_backward(x, np.ones((1, 8), np.float32), x, None, rstd)
    with pytest.raises(TypeError, match="rstd has dtype"):
        sk.add_rms_norm_backward(x, None, x, None, rstd.astype(np.float64))
    with pytest.raises(ValueError, match="rstd has shape"):
        sk.add_rms_norm_backward(x, None, x, None, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="dresidual"):
        sk.add_rms_norm_backward(x, x.astype(np.int32), x, None, rstd)


# ----------------------------------------------------------------------------- plans
@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_forward_plan_schedules(arch):
    t = TARGETS[arch]
    (one,) = AN.plan(spec((4096, 4096), tc.bfloat16), True, True, t)
    assert one.kernel is AN.add_rms_norm_tile_kernel and one.schedule == "one_tile"
    assert one.consts == {"HAS_W": True, "STATS": True, "BLOCK": 4096, "ROWS": 1} and one.grid == (4096,)
    assert one.num_warps == 8
    (packed,) = AN.plan(spec((100, 37), tc.float32), False, False, t)
    assert packed.consts["ROWS"] == 32 and packed.consts["BLOCK"] == 64 and packed.grid == (4,)
    (big,) = AN.plan(spec((8, 16384), tc.bfloat16), True, False, t)
    assert big.consts["BLOCK"] == 16384 and big.num_warps == 16      # 32 elements per thread
    (loop,) = AN.plan(spec((8, 20000), tc.float32), True, True, t)
    assert loop.kernel is AN.add_rms_norm_loop_kernel and loop.schedule == "looped" and loop.grid == (8,)
    assert AN.plan(spec((0, 8), tc.float32), True, True, t) == [] == AN.plan(spec((8, 0), tc.float32), True, True, t)


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_backward_plan_schedules(arch):
    t = TARGETS[arch]
    nt = AN.row_tuning(t).norm
    tile, red = AN.backward_plan(spec((16384, 4096), tc.bfloat16), True, True, t)
    assert tile.kernel is AN.add_rms_norm_bwd_tile_kernel and tile.grid == (nt.bwd_programs_per_sm * t.sm_count,)
    assert tile.consts == {"HAS_W": True, "HAS_DRES": True, "ROWS": 1, "BLOCK": 4096}
    assert [tp.shape for tp in tile.temps] == [(tile.grid[0], 4096)]
    assert red.kernel is B.norm_bwd_reduce_kernel and red.consts["HAS_W"] and not red.consts["DB"]
    # without a weight: no partials and no reduction
    (only,) = AN.backward_plan(spec((10, 64), tc.float32), False, False, t)
    assert only.temps == () and only.grid == (1,) and only.consts["ROWS"] == 16   # never more rows than there are
    stats, cols, red = AN.backward_plan(spec((6, 9000), tc.float32), True, False, t)
    assert stats.kernel is B.norm_bwd_stats_kernel and stats.consts["RMS"] and stats.grid == (6,)
    assert cols.kernel is AN.add_rms_norm_bwd_cols_kernel and cols.grid == (6, 3) and cols.schedule == "looped"
    assert red.grid == (-(-9000 // nt.bwd_reduce_cols),)


# ----------------------------------------------------------------------------- PTX
def _warps(kernel, consts, itemsize):
    if kernel == "add_rms_norm_tile_kernel":
        return row_config(consts["BLOCK"], consts["ROWS"], big_tile_per_thread=32 if itemsize == 2 else 16).num_warps
    if kernel == "add_rms_norm_bwd_tile_kernel":
        return row_config(consts["BLOCK"], consts["ROWS"], max_single=B.NORM_BWD_MAX_SINGLE).num_warps
    return 8   # the looped kernels: 4096-column tiles


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel,sig", AN.EXTRA_SIGNATURES, ids=[f"{k}[{s[-30:]}]" for k, s in AN.EXTRA_SIGNATURES])
def test_extra_signatures_assemble_without_spills(kernel, sig, arch):
    from tilec.compiler import compile_kernel
    from tilec.options import CompileOptions
    from tilec.specialize import parse_signature
    k = getattr(AN, kernel)
    spec_ = parse_signature(k, sig)
    itemsize = 2 if ("bf16" in sig.split(",")[0] or "f16" in sig.split(",")[0]) else 4
    compiled = compile_kernel(k, spec_, CompileOptions(arch=arch, num_warps=_warps(kernel, spec_.constexprs, itemsize),
                                                       fast_math=True), use_cache=False)
    report = compiled.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report


def test_options_are_the_plans_warp_counts():
    from tilec.specialize import parse_signature
    for kernel, sig in AN.SIGNATURES.items():
        consts = parse_signature(getattr(AN, kernel), sig).constexprs
        assert AN.OPTIONS[kernel]["num_warps"] == _warps(kernel, consts, 2)
