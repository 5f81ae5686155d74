"""The whole pass pipeline on example kernels: gpu IR round-trips, reductions are simulated
stage by stage, and misuse of the gpu dialect gives clear errors."""
import numpy as np
import pytest

from tilec.ir import VerifyError, parse, print_module, verify
from tilec.lowering.gpu.layouts import BlockedLayout, LinearLayout, MmaLayout, NumpyOps, SliceLayout
from tilec.lowering.gpu.stages import axis_bits, stage_result, warps_to_registers
from tilec.lowering.pipeline import run_pipeline
from tilec.options import CompileOptions

from example_modules import load_example


def _example_module(name, kernel):
    mod = load_example(name)
    from tilec.frontend import lower_to_ir
    k = getattr(mod, kernel)
    return lower_to_ir(k, k.specialization(mod.SIGNATURES[kernel]))


@pytest.mark.parametrize("name,kernel", [("fused_softmax", "softmax_kernel"), ("layer_norm", "layer_norm_kernel"),
                                         ("matmul", "matmul_kernel")])
def test_gpu_ir_round_trips(name, kernel):
    m = run_pipeline(_example_module(name, kernel), CompileOptions(num_warps=4, arch="sm_90a"), verify_each=True)
    text = print_module(m)
    assert "tile.reduce " not in text and "tile.load_view" not in text
    assert parse(text) == m
    assert m.attrs["shared"] == m.func().attrs["_shared_bytes"]


def _simulate(layout, shape, axis, x):
    """Run the reduction stages of stages.py on per-thread registers with numpy; return, for
    every (lane, warp, register) of the result, (coordinates, value)."""
    nw = layout.num_warps
    lane = np.arange(32)[:, None]
    warp = np.arange(nw)[None, :]
    ops = NumpyOps()
    regs = [x[tuple(np.broadcast_to(c, (32, nw)) for c in cs)] for cs in layout.coords(shape, lane, warp, ops)]
    cur_layout, cur_shape = layout, tuple(shape)
    reg_i, lane_i, warp_i = axis_bits(layout.bases(shape), axis)
    if reg_i:  # in-thread: sum registers that differ only in axis bits
        keep = [k for k in range(len(layout.bases(shape).reg)) if k not in reg_i]
        out = {}
        for r, v in enumerate(regs):
            j = sum(((r >> k) & 1) << i for i, k in enumerate(keep))
            out[j] = out.get(j, 0) + v
        regs = [out[j] for j in range(len(out))]
        cur_shape, b = stage_result(cur_layout, cur_shape, axis, "thread")
        cur_layout = LinearLayout.of(b)
    if lane_i:  # butterflies over the lane bits along the axis
        for k in lane_i:
            regs = [v + v[np.arange(32) ^ (1 << k), :] for v in regs]
        cur_shape, b = stage_result(cur_layout, cur_shape, axis, "lanes")
        cur_layout = LinearLayout.of(b)
    if warp_i:  # shared memory: store by coordinates, reload in the warps-to-registers layout
        buf = np.full(cur_shape, np.nan)
        for cs, v in zip(cur_layout.coords(cur_shape, lane, warp, ops), regs):
            buf[tuple(np.broadcast_to(c, (32, nw)) for c in cs)] = v
        loaded = warps_to_registers(cur_layout, cur_shape, axis)
        regs = [buf[tuple(np.broadcast_to(c, (32, nw)) for c in cs)]
                for cs in loaded.coords(cur_shape, lane, warp, ops)]
        rb = loaded.bases(cur_shape)
        keep = [k for k in range(len(rb.reg)) if k not in axis_bits(rb, axis)[0]]
        out = {}
        for r, v in enumerate(regs):
            j = sum(((r >> k) & 1) << i for i, k in enumerate(keep))
            out[j] = out.get(j, 0) + v
        regs = [out[j] for j in range(len(out))]
        cur_shape, b = stage_result(loaded, cur_shape, axis, "thread")
        cur_layout = LinearLayout.of(b)
    return cur_layout, cur_shape, regs


@pytest.mark.parametrize("layout,shape,axis", [
    (BlockedLayout([1, 4], [1, 32], [2, 2], [1, 0]), (4, 256), 1),
    (BlockedLayout([1, 4], [1, 32], [2, 2], [1, 0]), (4, 256), 0),
    (BlockedLayout([2, 1], [8, 4], [1, 4], [0, 1]), (32, 16), 0),
    (BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0]), (2, 8), 0),     # copies in lanes and warps
    (BlockedLayout([1, 8], [2, 16], [8, 1], [1, 0]), (64, 64), 1),
    (MmaLayout(2, [2, 2], [16, 8]), (64, 32), 1),
    (MmaLayout(3, [4, 1], [16, 64]), (64, 64), 0),
])
def test_reduction_stages_sum_every_element_once(layout, shape, axis):
    rng = np.random.default_rng(0)
    x = rng.integers(-1000, 1000, size=shape).astype(np.float64)
    want = x.sum(axis=axis)
    final_layout, final_shape, regs = _simulate(layout, shape, axis, x)
    assert final_shape[axis] == 1
    # every thread's register holds the full sum of the row its coordinates name
    lane = np.arange(32)[:, None]
    warp = np.arange(layout.num_warps)[None, :]
    for cs, v in zip(final_layout.coords(final_shape, lane, warp, NumpyOps()), regs):
        idx = [np.broadcast_to(c, v.shape) for i, c in enumerate(cs) if i != axis]
        np.testing.assert_array_equal(v, want[tuple(idx)] if idx else np.broadcast_to(want, v.shape))
    # and the result is where the slice layout of the input says it is
    if len(shape) == 2:
        sl = SliceLayout(axis, layout)
        sub = tuple(s for i, s in enumerate(shape) if i != axis)
        dropped = tuple(tuple(b[:axis] + b[axis + 1:] for b in g) for g in final_layout.bases(final_shape))
        assert dropped == tuple(sl.bases(sub))


def _module(body: str, args: str = "") -> str:
    """A one-function module; `args` is one "%name: type" block argument or empty."""
    names = f'"{args.split(":")[0].strip()[1:]}"' if args else ""
    return ('module {\n  tile.func {sym_name = "k", arg_names = [' + names + ']} (\n    {\n'
            f'    ^bb0({args}):\n{body}\n      tile.return\n    }}\n  )\n}}\n')


B4 = "#blocked{size_per_thread = [4], threads_per_warp = [32], warps_per_cta = [4], order = [0]}"


@pytest.mark.parametrize("body,args,message", [
    ("      %y = gpu.convert_layout %x : tile<64xf16, " + B4 + ">", f"%x: tile<128xf16, {B4}>",
     "shape or element type differ"),
    ("      %y = gpu.convert_layout %x : tile<128xf16>", f"%x: tile<128xf16, {B4}>", "register layout"),
    ('      %s = gpu.alloc {shape = [4, 4], layout = #shared{order = [0]}} : ptr<f32, 3>', "",
     "rank 1"),
    ('      %s = gpu.alloc {shape = [4], layout = #shared{order = [0]}} : ptr<f32>', "", "shared-memory pointer"),
    ("      %y = gpu.shuffle %x {kind = \"rotate\", offset = 1} : f32", "%x: f32", "kind must be one of"),
    ("      gpu.barrier {id = 16}", "", "barrier id"),
])
def test_gpu_dialect_errors_are_clear(body, args, message):
    with pytest.raises(VerifyError, match=message):
        verify(parse(_module(body, args)))


def test_stage_with_wrong_result_layout_is_rejected():
    body = ("      %y = gpu.reduce_thread %x {axis = 0} (\n        {\n        ^bb0(%a: f32, %b: f32):\n"
            "          %c = tile.add %a, %b : f32\n          tile.yield %c\n        }\n"
            f"      ) : tile<32xf32, {B4}>")
    with pytest.raises(VerifyError, match="does not place the partials"):
        verify(parse(_module(body, f"%x: tile<128xf32, {B4}>")))


def test_too_much_shared_memory_names_the_kernel():
    from tilec.errors import CompilationError
    from tilec.lowering.pipeline import run_passes
    text = _module('      %s = gpu.alloc {shape = [64, 1024], layout = #shared{}} : ptr<f32, 3>')
    with pytest.raises(CompilationError, match="in kernel 'k'.*262144 bytes"):
        run_passes(parse(text), ["allocate_shared"], CompileOptions(arch="sm_90a"))
