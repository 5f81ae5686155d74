"""Compiler-counted work (tilec.workcount) and the report (tilec.roofline) against values
computed by hand from the kernels' source."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import tilec as tc
from tilec.limits import KNOWN, limits_for
from tilec.roofline import Bound, env_of
from tilec.workcount import count_work, evaluate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

from fused_softmax import softmax_kernel  # noqa: E402
from matmul import matmul_kernel  # noqa: E402
from vector_add import add_kernel  # noqa: E402


def cdiv(a, b):
    return -(-a // b)


def compiled(kernel, sig):
    return kernel.compile(sig)


# ----------------------------------------------------------------------------- vector add
@pytest.mark.parametrize("n", [4096, 5000, 1000, 1])
def test_vector_add_moves_12_bytes_per_f32_element(n):
    c = compiled(add_kernel, "x=f32[?], y=f32[?], out=f32[?], BLOCK=1024")
    x = np.zeros(n, np.float32)
    r = c.report(x, x, x, grid=cdiv(n, 1024))
    assert r.bytes == 12 * n                       # clipped to the views' extent: the tail is masked
    assert r.dram_bytes == 12 * n
    assert (r.bytes_read, r.bytes_written) == (8 * n, 4 * n)
    assert r.bytes_upper == 12 * 1024 * cdiv(n, 1024)   # every tile whole
    assert r.exact
    assert r.cuda_flops == 1024 * cdiv(n, 1024)     # one add per element of each tile
    assert r.tc_flops == {}
    assert r.grid == (cdiv(n, 1024), 1, 1)


def test_vector_add_with_fewer_programs_than_tiles_counts_only_what_they_touch():
    c = compiled(add_kernel, "x=f32[?], y=f32[?], out=f32[?], BLOCK=1024")
    x = np.zeros(10_000, np.float32)
    assert c.report(x, x, x, grid=3).bytes == 12 * 3 * 1024


# ----------------------------------------------------------------------------- GEMM
@pytest.mark.parametrize("mnk", [(128, 192, 256), (200, 300, 130), (64, 64, 64)])
def test_gemm_flops_and_tile_bytes(mnk):
    m, n, k = mnk
    c = compiled(matmul_kernel, "a=f16[?,?], b=f16[?,?], c=f16[?,?], BM=64, BN=64, BK=64, GROUP_M=4")
    a, b, out = np.zeros((m, k), np.float16), np.zeros((k, n), np.float16), np.zeros((m, n), np.float16)
    tm, tn, tk = cdiv(m, 64), cdiv(n, 64), cdiv(k, 64)
    r = c.report(a, b, out, grid=tm * tn)
    # each program: one 64x64x64 dot per K step
    assert r.tc_flops == {"f16": 2 * 64 * 64 * 64 * tm * tn * tk}
    if m % 64 == n % 64 == k % 64 == 0:
        assert r.tc_flops["f16"] == 2 * m * n * k
    # A's tiles are read once per K step by each of the tn programs of a row of C, B's by tm
    assert r.bytes_read == 2 * (m * k * tn + k * n * tm)
    assert r.bytes_written == 2 * m * n
    assert r.exact
    assert r.bytes_upper == 2 * 64 * 64 * (2 * tm * tn * tk + tm * tn)
    assert r.cuda_flops == 0
    # the roofline's bytes: each operand once (re-reads of a tile are L2's business)
    assert (r.unique_read, r.unique_written) == (2 * (m * k + k * n), 2 * m * n)
    assert r.dram_bytes == 2 * (m * k + k * n + m * n)


def test_gemm_f32_without_tf32_counts_cuda_core_flops():
    @tc.kernel
    def dot32(a, b, c, TF32: tc.constexpr):
        acc = tc.dot(tc.load(a, index=(0, 0), shape=(32, 16)), tc.load(b, index=(0, 0), shape=(16, 32)),
                     allow_tf32=TF32)
        tc.store(c, index=(0, 0), tile=acc)

    x = np.zeros((32, 16), np.float32), np.zeros((16, 32), np.float32), np.zeros((32, 32), np.float32)
    plain = compiled(dot32, "a=f32[?,?], b=f32[?,?], c=f32[?,?], TF32=False").report(*x, grid=1)
    tf32 = compiled(dot32, "a=f32[?,?], b=f32[?,?], c=f32[?,?], TF32=True").report(*x, grid=1)
    assert plain.tc_flops == {} and plain.cuda_flops == 2 * 32 * 32 * 16
    assert tf32.tc_flops == {"tf32": 2 * 32 * 32 * 16} and tf32.cuda_flops == 0


# ----------------------------------------------------------------------------- softmax
@pytest.mark.parametrize("rows,cols", [(4, 1000), (3, 1024), (5, 3000), (2, 2049)])
def test_softmax_row_kernel(rows, cols):
    c = compiled(softmax_kernel, "x=f32[?,?], out=f32[?,?], BLOCK=1024")
    x = np.zeros((rows, cols), np.float32)
    r = c.report(x, x, grid=rows)
    # the source reads each row twice (statistics, then normalize) and writes it once
    assert r.bytes_read == rows * 2 * cols * 4
    assert r.bytes_written == rows * cols * 4
    assert r.dram_bytes == rows * cols * 4 * 2     # the second read of a row is no compulsory traffic
    assert r.exact
    t = cdiv(cols, 1024)
    # per row, by the source: first tile max, sub, exp, sum (4 per element); each further tile
    # of pass 1: max, sub, exp, sum (4 per element) and 5 scalar ops; inv_s = 1 / s; each
    # tile of pass 2: sub, exp, mul (3 per element)
    per_row = 4 * 1024 + (t - 1) * (4 * 1024 + 5) + 1 + t * 3 * 1024
    assert r.cuda_flops == rows * per_row


# ----------------------------------------------------------------------------- masks, loops
@tc.kernel
def masked_scale(x, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    v = tc.load(x.ptr + offs, mask=offs < n, other=0.0)
    tc.store(out.ptr + offs, v * 2.0, mask=offs < n)


def test_masked_pointer_tail_is_an_upper_bound():
    c = compiled(masked_scale, "x=f32[?], out=f32[?], n=i32, BLOCK=256")
    n = 1000
    x = np.zeros(n, np.float32)
    r = c.report(x, x, n, grid=cdiv(n, 256))
    assert r.bytes == 8 * 256 * 4               # whole tiles: the mask is not the view's bounds
    assert r.dram_bytes == 8 * n                # x.ptr and out.ptr: at most each view once
    assert not r.exact
    assert "upper bound" in str(r)
    assert r.cuda_flops == 256 * 4


@tc.kernel
def triangle(x, out, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    acc = tc.zeros((BLOCK,), tc.float32)
    for k in range(pid + 1):                    # program p reads p + 1 tiles
        acc += tc.load(x, index=(k,), shape=(BLOCK,))
    tc.store(out, index=(pid,), tile=acc)


def test_trip_count_that_depends_on_program_id_is_summed_over_programs():
    c = compiled(triangle, "x=f32[?], out=f32[?], BLOCK=128")
    x = np.zeros(128 * 8, np.float32)
    r = c.report(x, x, grid=8)
    assert r.bytes_read == 4 * 128 * sum(p + 1 for p in range(8))
    assert r.unique_read == 4 * 128 * 8
    assert r.bytes_written == 4 * 128 * 8
    assert r.cuda_flops == 128 * sum(p + 1 for p in range(8))


@tc.kernel
def halving(x, out, n, BLOCK: tc.constexpr):
    t = tc.load(x, index=(0,), shape=(BLOCK,))
    m = n
    while m > 1:
        t = t * 0.5
        m = m // 2
    tc.store(out, index=(0,), tile=t)


def test_while_loop_is_counted_once_and_said():
    c = compiled(halving, "x=f32[?], out=f32[?], n=i32, BLOCK=64")
    x = np.zeros(64, np.float32)
    r = c.report(x, x, 16, grid=1)
    assert r.cuda_flops == 64
    assert not r.exact
    assert any("while loop" in note for note in r.notes)


# ----------------------------------------------------------------------------- the report
def test_report_arguments_by_name_and_errors():
    c = compiled(add_kernel, "x=f32[?], y=f32[?], out=f32[?], BLOCK=1024")
    x = np.zeros(2048, np.float32)
    assert c.report(x, y=x, out=x, grid=(2,)).bytes == 12 * 2048
    with pytest.raises(TypeError, match="3 run-time argument"):
        c.report(x, x, grid=2)
    with pytest.raises(TypeError, match="no run-time argument 'z'"):
        c.report(x, x, z=x, grid=2)
    with pytest.raises(ValueError, match="grid must be"):
        c.report(x, x, x, grid=(1, 2, 3, 4))
    with pytest.raises(ValueError, match="grid must be"):
        c.report(x, x, x, grid=-1)
    with pytest.raises(TypeError, match="argument 'y'"):
        c.report(x, "no", x, grid=2)


def test_report_str_and_roofline_on_the_compiled_arch_part():
    c = compiled(add_kernel, "x=f32[?], y=f32[?], out=f32[?], BLOCK=1024")
    n = 1 << 20
    x = np.zeros(n, np.float32)
    r = c.report(x, x, x, grid=n // 1024)
    b = r.bound
    assert b.device == KNOWN["H100 SXM"].part and b.limit == "memory" and b.bandwidth_source == "datasheet"
    assert b.memory_s == pytest.approx(12 * n / 3.35e12)
    r200 = c.report(x, x, x, grid=n // 1024, target="NVIDIA H200")
    assert r200.bound.memory_s == pytest.approx(12 * n / 4.8e12)
    text = str(r)
    assert "12.6 MB in tiles" in text and "memory-bound" in text and "add_kernel" in text
    assert r.intensity == pytest.approx(n / (12 * n))


def test_counts_come_from_the_tile_ir_when_the_metadata_lacks_them():
    c = compiled(matmul_kernel, "a=f16[?,?], b=f16[?,?], c=f16[?,?], BM=64, BN=64, BK=64, GROUP_M=4")
    a, b, o = np.zeros((200, 130), np.float16), np.zeros((130, 300), np.float16), np.zeros((200, 300), np.float16)
    want = c.report(a, b, o, grid=20)
    from tilec.compiled import CompiledKernel
    old = CompiledKernel(c.name, c.asm, {k: v for k, v in c.metadata.items() if k != "work"}, c.params, c.arg_names)
    got = old.report(a, b, o, grid=20)
    assert (got.bytes, got.tc_flops) == (want.bytes, want.tc_flops)


def test_work_is_json_and_survives_the_cache():
    c = compiled(softmax_kernel, "x=f32[?,?], out=f32[?,?], BLOCK=512")
    work = c.metadata["work"]
    assert json.loads(json.dumps(work)) == work
    env = env_of(["x", "out"], [np.zeros((3, 700), np.float32)] * 2)
    assert evaluate(work, env, (3, 1, 1))["bytes_written"] == 3 * 700 * 4


def test_count_work_sees_the_ir_before_staging():
    # the frontend IR has one load per tc.load: pipelining adds cp.async/TMA copies later
    spec = matmul_kernel.specialization("a=f16[?,?], b=f16[?,?], c=f16[?,?], BM=64, BN=64, BK=64, GROUP_M=4")
    work = count_work(matmul_kernel.ir(spec))
    assert [t["kind"] for t in work["terms"]] == ["load", "load", "tc", "store"]


# ----------------------------------------------------------------------------- device limits
def test_limits_by_device_name():
    assert limits_for("NVIDIA H100 80GB HBM3").bandwidth == 3.35e12
    assert limits_for("NVIDIA H100 PCIe").bandwidth == 2.0e12
    assert limits_for("NVIDIA H200").bandwidth == 4.8e12
    assert limits_for("NVIDIA A100-SXM4-80GB").tensor["bf16"] == 312e12
    assert limits_for("NVIDIA A100-SXM4-40GB").bandwidth == 1.555e12
    assert limits_for("H100 SXM").tensor["f8"] == pytest.approx(1978.9e12)
    assert limits_for("Tesla T4") is None
    with pytest.raises(TypeError, match="device"):
        limits_for(90)


def test_bound_is_the_larger_of_memory_and_compute_time():
    h = KNOWN["H200"]
    b = Bound.of(4.8e9, {"bf16": int(989.4e12)}, 0, h)     # 1 ms of memory, 1 s of compute
    assert b.limit == "compute" and b.seconds == pytest.approx(1.0)
    b = Bound.of(4.8e12, {"bf16": 1}, int(66.9e9), h, bandwidth=2.4e12)
    assert b.limit == "memory" and b.seconds == pytest.approx(2.0) and b.bandwidth_source == "measured"
    a = Bound.of(0, {"f8": 10 ** 12}, 0, KNOWN["A100 SXM"])
    assert a.missing_peak == ("f8",) and a.compute_s == 0
