"""warp_specialize on the CPU: the pass's output form, the PTX (setmaxnreg, the launch
bound, named barriers), and the kernels it leaves alone."""
import importlib
import re

import pytest

from tilec.compiler import compile_kernel
from tilec.frontend import lower_to_ir
from tilec.lowering.gpu.ws_ops import WarpSpecializeOp
from tilec.lowering.pipeline import run_pipeline
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

from ws_kernels import ws_matmul, ws_matmul_rowmax

SIG = "a={t}[?,?]:div=16x16:stride_div=16x1, b={t}[?,?]:div=16x16:stride_div=16x1, " \
      "c={t}[?,?]:div=16x16:stride_div=16x1, BM={bm}, BN={bn}, BK={bk}"


def _spec(t="bf16", bm=128, bn=128, bk=64):
    return parse_signature(ws_matmul, SIG.format(t=t, bm=bm, bn=bn, bk=bk))


def _opts(**kw):
    base = dict(num_warps=8, num_stages=4, arch="sm_90a", warp_specialize=True)
    return CompileOptions(**{**base, **kw}).validated()


def _split(module):
    return [op for op in module.walk() if isinstance(op, WarpSpecializeOp)]


def test_ring_moves_to_a_producer_warpgroup():
    module = run_pipeline(lower_to_ir(ws_matmul, _spec()), _opts(), stop_after="warp_specialize")
    (split,) = _split(module)
    assert module.attrs["num_threads"] == 32 * (8 + 4) and module.attrs["num_warps"] == 8
    producer, consumer = (r.block for r in split.regions)
    names = [op.name for op in producer.walk()] if hasattr(producer, "walk") else \
        [o.name for op in producer.ops for o in op.walk()]
    assert names.count("gpu.tma_load") == 2 and "gpu.wgmma" not in names
    cons = [o.name for op in consumer.ops for o in op.walk()]
    assert "gpu.tma_load" not in cons and "gpu.mbarrier_arrive" in cons and "gpu.wgmma" in cons
    assert "gpu.barrier" not in cons  # the consumers no longer stop at a block barrier per step
    assert split.attrs["producer_regs"] * 128 + split.attrs["consumer_regs"] * 256 <= 65536


@pytest.mark.slow
@pytest.mark.parametrize("t,bn,warps", [("bf16", 256, 8), ("f16", 128, 4), ("f16", 128, 8)])
def test_ptx_sets_register_budgets(t, bn, warps):
    ck = compile_kernel(ws_matmul, _spec(t, 128, bn), _opts(num_warps=warps), use_cache=False)
    ptx = ck.asm["ptx"]
    # num_warps is the user's; the CTA also runs the producer warpgroup
    assert ck.metadata["warp_specialized"] and ck.metadata["num_warps"] == warps
    assert ck.metadata["num_threads"] == ck.num_threads == 32 * (warps + 4)
    assert f".maxntid {32 * (warps + 4)}" in ptx and ".minnctapersm 1" in ptx
    assert len(re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32", ptx)) == 1
    assert len(re.findall(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)) == 1
    assert "mbarrier.arrive.shared::cta.b64" in ptx and "cp.async.bulk.tensor" in ptx
    rep = ck.metadata.get("ptxas")
    if rep is not None:
        assert rep["spill_stores"] == 0 and not rep["warnings"], rep


@pytest.mark.slow
def test_consumer_barriers_are_named():
    # a reduction across warps in the epilogue: its barriers count the consumer threads only
    sig = SIG.format(t="f16", bm=128, bn=128, bk=64) + ", rowmax=f32[?,?]:div=16x16:stride_div=16x1"
    ck = compile_kernel(ws_matmul_rowmax, parse_signature(ws_matmul_rowmax, sig), _opts(), use_cache=False)
    ptx = ck.asm["ptx"]
    assert ck.metadata["warp_specialized"]
    assert re.search(r"bar\.sync\s+1, 256;", ptx)
    assert not re.search(r"bar(rier)?\.sync(\.aligned)?\s+0;", ptx[ptx.index("setmaxnreg.inc"):])


@pytest.mark.parametrize("opts", [dict(warp_specialize=False), dict(arch="sm_80"), dict(num_stages=2)])
def test_left_alone(opts):
    module = run_pipeline(lower_to_ir(ws_matmul, _spec()), _opts(**opts), stop_after="warp_specialize")
    assert not _split(module) and module.attrs["num_threads"] == 32 * module.attrs["num_warps"]


@pytest.mark.slow
def test_stdlib_gemm_config_specializes():
    mm = importlib.import_module("tilec.stdlib_kernels.matmul")
    sig, cfg = mm.signature(4096, 4096, 4096, "bf16", target="sm_90a")
    kernel = mm.matmul_kernel
    ck = compile_kernel(kernel, parse_signature(kernel, sig),
                        _opts(num_warps=cfg.num_warps, num_stages=cfg.num_stages), use_cache=False)
    assert ck.metadata["warp_specialized"]
    rep = ck.metadata.get("ptxas")
    if rep is not None:
        assert rep["spill_stores"] == 0 and not rep["warnings"], rep


@pytest.mark.slow
def test_stdlib_heuristic_and_cli():
    mm = importlib.import_module("tilec.stdlib_kernels.matmul")
    bf16 = mm.tc.bfloat16
    # tf32 from 8 programs per SM; 16-bit results leave through TMA stores, plain rings lead there
    assert mm.config_for(8192, 8192, 8192, mm.tc.float32, target="sm_90a").warp_specialize
    assert not mm.config_for(4096, 4096, 4096, mm.tc.float32, target="sm_90a").warp_specialize
    assert not mm.config_for(8192, 8192, 8192, bf16, target="sm_90a").warp_specialize
    assert not mm.config_for(8192, 8192, 8192, bf16, target="sm_80").warp_specialize
    from tilec.cli import main
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ptx", "matmul", "--dtype", "bf16", "--shape", "8192,8192,8192", "--arch", "sm_90a"]) == 0
    # what config_for picks: the plain ring, its result stored through TMA
    assert "setmaxnreg" not in out.getvalue() and "cp.async.bulk.tensor.2d.global.shared::cta" in out.getvalue()
