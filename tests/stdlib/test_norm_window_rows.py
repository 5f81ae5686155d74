"""layer_norm / rms_norm rows off 32-byte sectors (`norms._window_rows`): each program
gathers w and b once and walks rows that share one lead, its grid a multiple of the window
once the rows outnumber the resident programs. The grid rule, the values on the
interpreter against float64 numpy with programs walking several rows (nothing written
outside the rows), and the PTX: w and b gathered before the row loop, x read in 16 bytes."""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

import tilec.stdlib_kernels as sk

from launch_spy import spy_launches

norms = importlib.import_module("tilec.stdlib_kernels.norms")
common = importlib.import_module("tilec.stdlib_kernels._common")
SENTINEL = 7.0


@pytest.fixture
def grids(monkeypatch):
    # 20 programs fit at once: rows past them are walked by programs of the same lead
    monkeypatch.setattr(norms, "resident_programs", lambda *a, **k: 20)
    return spy_launches(monkeypatch, (norms,), lambda kernel, cluster, c: (kernel.name, c.get("WINDOW", 0)))


def _host(values, dtype):
    return values.astype(np.float32 if dtype == "f32" else np.float16)


def _f64(a):
    return np.asarray(np.asarray(a), dtype=np.float64)


def _off_sector(rng, rows, n, dtype, pitch=3):
    # rows but the first start off 32-byte sectors: a view of a wider buffer
    return _host(rng.standard_normal((rows, n + pitch)) * 3 + 1, dtype)[:, :n]


@pytest.mark.parametrize("n_rows, window, want", [(20, 16, 20), (7, 16, 7), (21, 16, 16), (200, 16, 16),
                                                  (200, 8, 16), (21, 8, 16), (17, 32, 17)])
def test_programs_walk_rows_of_one_lead(monkeypatch, n_rows, window, want):
    monkeypatch.setattr(norms, "resident_programs", lambda *a, **k: 20)
    cfg = common.RowConfig(block=2048, rows=1, num_warps=4, single=True)
    assert norms.window_row_programs(None, (), cfg, window, n_rows, {}) == want


def test_resident_programs_on_the_interpreter():
    a = common.as_array(np.zeros((4, 4), np.float32), "x")
    assert common.resident_programs(a, norms.norm_tile_kernel, (), 4) == common.HOST_SM_COUNT * common.HOST_PROGRAMS_PER_SM


@pytest.mark.parametrize("dtype, n, pitch", [("f32", 1500, 3), ("f16", 1201, 3), ("f16", 2999, 5), ("f16", 4097, 1)])
@pytest.mark.parametrize("rms, params", [(False, "wb"), (False, "w"), (False, "b"), (False, ""), (True, "w")])
def test_window_rows_match_numpy(grids, dtype, n, pitch, params, rms):
    rng = np.random.default_rng(n + pitch)
    rows = 45                                 # 16 programs walk 2-3 rows each
    x = _off_sector(rng, rows, n, dtype, pitch)
    w = _host(rng.standard_normal(n), dtype) if "w" in params else None
    b = _host(rng.standard_normal(n), dtype) if "b" in params else None
    buf = _host(np.full((rows, n + pitch), SENTINEL), dtype)
    out = buf[:, :n]                          # x's layout: the same leads (`shared_window`)
    if rms:
        got, rstd = sk.rms_norm(x, w, eps=1e-6, out=out, return_stats=True)
    else:
        got, mean, rstd = sk.layer_norm(x, w, b, eps=1e-5, out=out, return_stats=True)
    assert got is out
    window = 8 if dtype == "f32" else 16
    assert grids == [("norm_tile_kernel", window)]
    x64 = _f64(x)
    mu = 0.0 if rms else x64.mean(-1, keepdims=True)
    var = (x64 * x64).mean(-1, keepdims=True) + 1e-6 if rms else x64.var(-1, keepdims=True) + 1e-5
    want = (x64 - mu) / np.sqrt(var)
    if w is not None:
        want = want * _f64(w)
    if b is not None:
        want = want + _f64(b)
    tol = 1e-5 if dtype == "f32" else 4e-3
    np.testing.assert_allclose(_f64(out), want, rtol=tol, atol=tol * (1 + np.abs(want).max()))
    np.testing.assert_allclose(_f64(rstd), 1 / np.sqrt(var[:, 0]), rtol=1e-4)
    if not rms:
        np.testing.assert_allclose(_f64(mean), x64.mean(-1), rtol=1e-5, atol=1e-5)
    assert (_f64(buf)[:, n:] == SENTINEL).all()


def test_window_rows_gather_w_and_b_once():
    sig = [s for k, s in norms.EXTRA_SIGNATURES if "BLOCK=16384, WINDOW=16" in s][0]
    ptx = norms.norm_tile_kernel.compile(sig, num_warps=16, arch="sm_90a", fast_math=True).asm["ptx"]
    body = ptx[ptx.index(".entry"):]
    loop = re.search(r"\n\$L__BB0_\d+:", body)   # the first label: the head of the row loop
    assert loop is not None
    before, inside = body[:loop.start()], body[loop.start():]
    # w and b: 32 gathered 2-byte loads each per thread, all before the loop
    assert len(re.findall(r"\bld\.global[.\w:]*\.(?:b16|u16)\b", before)) == 64
    assert not re.findall(r"\bld\.global[.\w:]*\.(?:b16|u16)\b", inside)
    # x in the loop: 32 bf16 per thread as four 16-byte loads
    assert len(re.findall(r"\bld\.global[.\w:]*\.v4\.b32\b", inside)) == 4
