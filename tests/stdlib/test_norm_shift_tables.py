"""layer_norm / rms_norm rows off 32-byte sectors read w and b whole from shifted tables
(`norms._shift_tables`) once x holds SHIFT_TABLE_MIN_BYTES: which kernels launch, the
tables' contents, the values on the interpreter against float64 numpy (nothing written
outside the rows), and the tables' 16-byte loads in the PTX."""
from __future__ import annotations

import collections
import importlib
import re

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels.tuning import TABLES

from launch_spy import spy_launches, retune

norms = importlib.import_module("tilec.stdlib_kernels.norms")
SENTINEL = 7.0


@pytest.fixture
def launched(monkeypatch):
    retune(monkeypatch, "norm", shift_table_min_bytes=8 * 1024 * 2)   # 8 rows of 1024 f16 take them
    return spy_launches(monkeypatch, (norms,), lambda kernel, cluster, c: (kernel.name, c.get("SHIFTED", False)))


def _off_sector(rng, rows, n, dtype):
    # rows but the first start off 32-byte sectors: a view of a wider buffer
    return rowwise_host(rng.standard_normal((rows, n + 3)) * 3 + 1, dtype)[:, :n]


def rowwise_host(values, dtype):
    return values.astype(np.float32 if dtype == "f32" else np.float16)


def _f64(a):
    return np.asarray(np.asarray(a), dtype=np.float64)


def _check_norm(out, x, w, b, rms, dtype):
    """out against layer_norm (eps 1e-5) / rms_norm (eps 1e-6) of x in float64; w, b may be None."""
    x64 = _f64(x)
    if rms:
        want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)
    else:
        want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    if w is not None:
        want = want * _f64(w)
    if b is not None:
        want = want + _f64(b)
    tol = 1e-5 if dtype == "f32" else 4e-3
    np.testing.assert_allclose(_f64(out), want, rtol=tol, atol=tol * (1 + np.abs(want).max()))


@pytest.mark.slow
@pytest.mark.parametrize("dtype, n", [("f32", 1500), ("f16", 1201), ("f16", 2999), ("f16", 1601), ("f32", 1700)])
@pytest.mark.parametrize("rms, params", [(False, "wb"), (False, "w"), (False, "b"), (True, "w")])
def test_shifted_tables_match_numpy(launched, dtype, n, params, rms):
    rng = np.random.default_rng(n)
    x = _off_sector(rng, 9, n, dtype)
    w = rowwise_host(rng.standard_normal(n), dtype) if "w" in params else None
    b = rowwise_host(rng.standard_normal(n), dtype) if "b" in params else None
    buf = rowwise_host(np.full((9, n + 3), SENTINEL), dtype)
    out = buf[:, :n]                          # x's layout: the same leads (`shared_window`)
    if rms:
        got = sk.rms_norm(x, w, eps=1e-6, out=out)
    else:
        got = sk.layer_norm(x, w, b, eps=1e-5, out=out)
    assert got is out
    if dtype == "f32" and rms:    # f32 rms_norm keeps its gathers (`_use_shift_tables`)
        assert launched == [("norm_tile_kernel", False)]
    else:
        assert launched == [("shift_tables_kernel", False), ("norm_tile_kernel", True)]
    _check_norm(out, x, w, b, rms, dtype)
    assert (_f64(buf)[:, n:] == SENTINEL).all()


@pytest.mark.slow
def test_small_arrays_gather_w_and_b(launched):
    x = _off_sector(np.random.default_rng(1), 6, 1201, "f16")     # 14 KB
    sk.layer_norm(x, rowwise_host(np.ones(1201), "f16"), rowwise_host(np.zeros(1201), "f16"))
    assert launched == [("norm_tile_kernel", False)]


@pytest.mark.parametrize("nbytes, itemsize, rms, params, want", [
    (16 << 20, 2, False, ("weight", "bias"), True),
    ((16 << 20) - 1, 2, False, ("weight", "bias"), False),  # under SHIFT_TABLE_MIN_BYTES
    (64 << 20, 4, False, ("bias",), True),                  # f32 layer_norm gains
    (64 << 20, 4, True, ("weight",), False),                # f32 rms_norm lost (H100)
    (64 << 20, 2, True, ("weight",), True),
    (64 << 20, 2, False, (), False),                        # nothing to gather
])
def test_when_the_tables_are_made(nbytes, itemsize, rms, params, want):
    assert norms.SHIFT_TABLE_MIN_BYTES == 16 << 20
    table = TABLES["sm_90"].norm
    assert norms._use_shift_tables(nbytes, itemsize, rms, "weight" in params or None, "bias" in params or None,
                                   table) is want


@pytest.mark.parametrize("has_w, has_b", [(True, True), (True, False), (False, True)])
def test_shift_table_rows_are_the_parameters_shifted(has_w, has_b):
    w, b = np.arange(1, 38, dtype=np.float32), -np.arange(1, 38, dtype=np.float32)
    wtab, btab = np.full((8, 64), SENTINEL, np.float32), np.full((8, 64), SENTINEL, np.float32)
    with tc.interpret():
        norms.shift_tables_kernel[(8, 2)](w, b, wtab, btab, HAS_W=has_w, HAS_B=has_b, BLOCK=32)
    for p, tab, made in ((w, wtab, has_w), (b, btab, has_b)):
        if not made:
            assert (tab == SENTINEL).all()
            continue
        for lead in range(8):
            want = np.zeros(64, np.float32)
            want[lead:lead + 37] = p
            np.testing.assert_array_equal(tab[lead], want)


@pytest.mark.slow
def test_shifted_tables_load_16_bytes_at_a_time():
    sig = [s for k, s in norms.EXTRA_SIGNATURES if "SHIFTED=True" in s][0]
    ptx = norms.norm_tile_kernel.compile(sig, num_warps=16, arch="sm_90a", fast_math=True).asm["ptx"]
    loads = collections.Counter(m.group(0) for m in re.finditer(r"\bld\.global[.\w:]*", ptx))
    # x, w and b: 16 bf16 per thread each, as two 16-byte loads; nothing gathered
    assert loads == {"ld.global.v4.b32": 6}, loads


def test_row_kernel_is_a_dependent_launch_of_the_tables(monkeypatch):
    retune(monkeypatch, "norm", shift_table_min_bytes=0)
    seen = spy_launches(monkeypatch, (norms,), lambda kernel, cluster, c: (kernel.name, c.get("options")))
    x = _off_sector(np.random.default_rng(2), 9, 1201, "f16")
    out = rowwise_host(np.zeros((9, 1204)), "f16")[:, :1201]   # x's leads (`shared_window`)
    sk.layer_norm(x, rowwise_host(np.ones(1201), "f16"), None, out=out)
    assert seen == [("shift_tables_kernel", None), ("norm_tile_kernel", {"dependent_launch": True})]


@pytest.mark.slow
def test_rows_read_x_before_waiting_for_the_tables():
    sig = [s for k, s in norms.EXTRA_SIGNATURES if "SHIFTED=True" in s][0]
    ptx = norms.norm_tile_kernel.compile(sig, num_warps=16, arch="sm_90a", fast_math=True,
                                         dependent_launch=True).asm["ptx"]
    loads = [m.start() for m in re.finditer(r"\bld\.global", ptx)]
    waits = [m.start() for m in re.finditer(r"griddepcontrol\.wait", ptx)]
    assert len(waits) == 1
    # two 16-byte loads of x before the wait, the four of w and b after it
    assert sum(p < waits[0] for p in loads) == 2 and sum(p > waits[0] for p in loads) == 4
    tables = norms.shift_tables_kernel.compile(norms.SIGNATURES["shift_tables_kernel"], num_warps=2,
                                               arch="sm_90a").asm["ptx"]
    assert tables.index("griddepcontrol.launch_dependents") < tables.index("ld.global")


@pytest.mark.parametrize("dtype, n, rms, tiles", [
    ("f16", 1601, False, 2),     # layer_norm with tables: halves, as rows on sectors
    ("f16", 1601, True, 1),      # rms_norm keeps one tile
    ("f32", 1700, False, 1),     # f32 halves only at MAX_SINGLE_TILE lanes
    ("f16", 1201, False, 3),     # within 3/4 of the tile: quarters either way
])
def test_layer_norm_with_tables_holds_rows_as_halves(monkeypatch, dtype, n, rms, tiles):
    retune(monkeypatch, "norm", shift_table_min_bytes=0)
    seen = spy_launches(monkeypatch, (norms,), lambda kernel, cluster, c: (kernel.name, c.get("TILES")))
    x = _off_sector(np.random.default_rng(n), 9, n, dtype)
    out = rowwise_host(np.zeros((9, n + 3)), dtype)[:, :n]
    w = rowwise_host(np.ones(n), dtype)
    sk.rms_norm(x, w, out=out) if rms else sk.layer_norm(x, w, None, out=out)
    assert seen[-1] == ("norm_tile_kernel", tiles)


@pytest.mark.slow
@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("dtype, n", [("f32", 1500), ("f16", 1201), ("f16", 4095), ("f32", 12001)])
@pytest.mark.parametrize("rms", [False, True])
def test_rows_read_in_the_outputs_windows(monkeypatch, tables, dtype, n, rms):
    # x: rows of a buffer 11 elements wider from its column 3; out: rows 5 elements apart from
    # its length (sentinels between): x's rows are read in out's windows (REALIGN), whose
    # leads place w and b (gathered, or rows of the shifted tables)
    retune(monkeypatch, "norm", shift_table_min_bytes=0 if tables else 1 << 40)
    seen = spy_launches(monkeypatch, (norms,), lambda kernel, cluster, c: (kernel.name, c.get("WINDOW", 0),
                                                                          c.get("REALIGN", False)))
    rng = np.random.default_rng(n + rms)
    x = rowwise_host(rng.standard_normal((9, n + 11)) * 3 + 1, dtype)[:, 3:3 + n]
    w = rowwise_host(rng.standard_normal(n), dtype)
    b = rowwise_host(rng.standard_normal(n), dtype)
    buf = rowwise_host(np.full((9, n + 5), SENTINEL), dtype)
    out = buf[:, :n]
    got = sk.rms_norm(x, w, eps=1e-6, out=out) if rms else sk.layer_norm(x, w, b, eps=1e-5, out=out)
    assert got is out
    window = 32 // x.dtype.itemsize
    assert seen[-1] == ("norm_tile_kernel", window, True), seen
    assert (seen[0][0] == "shift_tables_kernel") == (tables and not (rms and dtype == "f32")), seen
    _check_norm(out, x, w, None if rms else b, rms, dtype)
    assert (_f64(buf)[:, n:] == SENTINEL).all()


@pytest.mark.slow
@pytest.mark.parametrize("dtype, n, width", [("f16", 20001, 20016), ("f16", 50257, 50304), ("f32", 20001, 20016)])
@pytest.mark.parametrize("rms", [False, True])
def test_long_rows_read_in_the_outputs_windows(monkeypatch, dtype, n, width, rms):
    # rows past one tile on clusters (chunk tiles): 2-byte rows realigned into out's windows,
    # f32 rows by column tiles (their element stores coalesce; realigned they lost)
    seen = spy_launches(monkeypatch, (norms,), lambda kernel, cluster, c: (kernel.name, c.get("WINDOW", 0),
                                                                          c.get("REALIGN", False)))
    rng = np.random.default_rng(n + rms)
    x = rowwise_host(rng.standard_normal((3, width)) * 3 + 100, dtype)[:, 1:1 + n]
    w = rowwise_host(rng.standard_normal(n), dtype)
    b = rowwise_host(rng.standard_normal(n), dtype)
    out = sk.rms_norm(x, w, eps=1e-6) if rms else sk.layer_norm(x, w, b, eps=1e-5)
    want_window = 0 if dtype == "f32" else 16
    assert seen == [("norm_chunks_kernel", want_window, dtype != "f32")], seen
    _check_norm(out, x, w, None if rms else b, rms, dtype)
