"""Scans: the stage algorithm of lowering/gpu/scan.py run on numpy per-thread registers (the
same code codegen runs on llvmlite values), against the interpreter's semantics; the
lowering pass's stages; and kernels with scans compiled to PTX."""
import numpy as np
import pytest

import tilec as tc
from tilec.ir import parse, print_module
from tilec.lowering.gpu.layouts import BlockedLayout, LinearLayout, MmaLayout, NumpyOps, SliceLayout
from tilec.lowering.gpu.scan import scan_lanes, scan_segments, scan_thread, scan_warps, warps_buffer_shape
from tilec.options import CompileOptions

_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class NumpyEngine:
    """Values are (32 lanes, num_warps) arrays: one entry per thread."""

    def __init__(self, kind, num_warps, buf_size):
        self.fn = _COMBINE[kind]
        self.lane = np.broadcast_to(np.arange(32)[:, None], (32, num_warps))
        self.ops = NumpyOps()
        self.buf = np.full(buf_size, np.nan)
        self.barriers = 0

    def combine(self, a, b): return self.fn(a, b)
    def select(self, c, a, b): return np.where(c, a, b)
    def lane_bit(self, k): return (self.lane >> k) & 1 == 1
    def shuffle_xor(self, v, m): return v[self.lane[:, 0] ^ m, :]
    def ult(self, a, b): return np.asarray(a) < np.asarray(b)
    def barrier(self): self.barriers += 1

    def store(self, off, v):
        off, v = np.broadcast_arrays(off, v)
        self.buf[off] = v  # copies write one value to one slot

    def load(self, off):
        return self.buf[np.broadcast_to(off, self.lane.shape)]


def _reference(x, axis, kind, reverse):
    """What the interpreter computes (dsl/interpreter/rules_tile.py)."""
    acc = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate, "min": np.minimum.accumulate}[kind]
    if reverse:
        return np.flip(acc(np.flip(x, axis), axis=axis), axis)
    return acc(x, axis=axis)


def simulate_scan(layout, shape, axis, x, kind="sum", reverse=False):
    nw = layout.num_warps
    lane = np.arange(32)[:, None]
    warp = np.arange(nw)[None, :]
    ops = NumpyOps()
    coords = [tuple(np.broadcast_to(c, (32, nw)) for c in cs) for cs in layout.coords(shape, lane, warp, ops)]
    prefix = [x[c] for c in coords]
    total = list(prefix)
    bases = layout.bases(shape)
    for seg in scan_segments(layout, shape, axis):
        if seg.kind == "thread":
            prefix, total = scan_thread(NumpyEngine(kind, nw, 1), prefix, total, seg.index, reverse)
        elif seg.kind == "lanes":
            prefix, total = scan_lanes(NumpyEngine(kind, nw, 1), prefix, total, seg.index, reverse)
        else:
            eng = NumpyEngine(kind, nw, int(np.prod(warps_buffer_shape(shape, axis, seg))))
            prefix, total = scan_warps(eng, prefix, total, coords, bases.reg, shape, axis, seg, reverse)
            assert eng.barriers == 1
    return coords, prefix


LAYOUTS = [
    (BlockedLayout([4], [32], [4], [0]), (1024,), 0),                  # reps above the warps
    (BlockedLayout([1], [32], [4], [0]), (64,), 0),                    # lanes wrap: copies
    (BlockedLayout([2], [32], [2], [0]), (128,), 0),
    (BlockedLayout([1, 4], [1, 32], [2, 2], [1, 0]), (4, 256), 1),
    (BlockedLayout([1, 4], [1, 32], [2, 2], [1, 0]), (4, 256), 0),     # rows: reg + warp bits
    (BlockedLayout([1, 1], [8, 4], [4, 1], [1, 0]), (256, 4), 0),
    (BlockedLayout([2, 1], [8, 4], [1, 4], [0, 1]), (32, 16), 1),
    (SliceLayout(1, BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])), (32,), 0),
    (MmaLayout(2, [2, 2], [16, 8]), (64, 32), 1),
    (MmaLayout(2, [2, 2], [16, 8]), (64, 32), 0),
    # a lane bit above a warp bit: lanes, warps, lanes again
    (LinearLayout([[1]], [[2], [4], [16], [32], [64]], [[8]]), (128,), 0),
]


@pytest.mark.parametrize("layout,shape,axis", LAYOUTS)
@pytest.mark.parametrize("kind,reverse", [("sum", False), ("sum", True), ("max", False), ("min", True),
                                          ("prod", False)])
def test_scan_stages_match_the_interpreter(layout, shape, axis, kind, reverse):
    rng = np.random.default_rng(1)
    if kind == "prod":
        x = rng.choice([-1.0, 1.0, 2.0], size=shape)  # exact products
    else:
        x = rng.integers(-1000, 1000, size=shape).astype(np.float64)  # exact sums in any order
    want = _reference(x, axis, kind, reverse)
    coords, prefix = simulate_scan(layout, tuple(shape), axis, x, kind, reverse)
    for c, v in zip(coords, prefix):
        np.testing.assert_array_equal(v, want[c])


def test_segments_follow_the_axis_bits():
    segs = scan_segments(BlockedLayout([4], [32], [4], [0]), (1024,), 0)
    assert [(s.kind, s.bits) for s in segs] == [("thread", (0, 1)), ("lanes", (2, 3, 4, 5, 6)),
                                                ("warps", (7, 8)), ("thread", (9,))]
    assert segs[2].index == (0, 1) and segs[3].index == (2,)


def _scan_module(axis, shape, reverse="false", kind="sum", dtype="f32"):
    s = "x".join(map(str, shape))
    return f"""module {{
  tile.func {{sym_name = "k", arg_names = ["x"]}} (
    {{
      ^bb0(%x: tile<{s}x{dtype}>):
        %y = tile.scan %x {{axis = {axis}, kind = "{kind}", reverse = {reverse}}} : tile<{s}x{dtype}>
        tile.return
    }}
  )
}}
"""


def test_lowered_scan_round_trips_and_keeps_the_layout():
    from tilec.lowering.pipeline import run_passes
    m = run_passes(parse(_scan_module(0, (1024,), "true")), ["assign_layouts", "lower_scans", "allocate_shared"],
                   CompileOptions(num_warps=4), verify_each=True)
    text = print_module(m)
    assert "tile.scan" not in text
    assert [ln.split("=")[1].split()[0] for ln in text.splitlines() if "gpu.scan_" in ln] == \
        ["gpu.scan_lanes", "gpu.scan_warps", "gpu.scan_thread"]  # 1 element per thread, 8 repetitions
    assert "reverse = true" in text
    assert parse(text) == m
    assert m.attrs["shared"] == 4 * 32  # one f32 total per warp block: 1024 / 32 lanes


def test_half_sum_scans_in_f32():
    from tilec.lowering.pipeline import run_passes
    m = run_passes(parse(_scan_module(0, (128,), dtype="f16")), ["assign_layouts", "lower_scans"],
                   CompileOptions(num_warps=1), verify_each=True)
    text = print_module(m)
    assert 'tile.cast %x {to = f32}' in text and "{to = f16}" in text


@tc.kernel
def _cumsum_rows(x, out, BLOCK: tc.constexpr):
    row = tc.program_id(0)
    t = tc.load(x, index=(row, 0), shape=(1, BLOCK))
    tc.store(out, index=(row, 0), tile=tc.cumsum(t, axis=1))


@tc.kernel
def _cumprod_cols(x, out, BLOCK: tc.constexpr):
    col = tc.program_id(0)
    t = tc.load(x, index=(0, col), shape=(BLOCK, 4))
    tc.store(out, index=(0, col), tile=tc.cumprod(t, axis=0, reverse=True))


@pytest.mark.parametrize("kernel,sig", [(_cumsum_rows, "x=f32[?,?], out=f32[?,?], BLOCK=1024"),
                                        (_cumsum_rows, "x=bf16[?,?], out=bf16[?,?], BLOCK=256"),
                                        (_cumprod_cols, "x=i32[?,?], out=i32[?,?], BLOCK=128")])
def test_scan_kernels_compile_and_assemble(kernel, sig):
    from tilec.compiler import compile_kernel
    for arch in ("sm_80", "sm_90a"):
        ck = compile_kernel(kernel, kernel.specialization(sig), CompileOptions(arch=arch))
        assert "gpu.scan_lanes" in ck.asm["gpu"] and "tile.scan" not in ck.asm["gpu"]
        assert "shfl.sync.bfly" in ck.asm["ptx"]
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0

