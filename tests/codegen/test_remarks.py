"""Compiler remarks: each is produced by a small kernel that triggers it, and names the line
of this file the decision is about (tilec.remarks; docs/inspecting.md).

The pass remarks need no ptxas (TILEC_SKIP_PTXAS=1 keeps those compiles short); spills and
occupancy come from ptxas's report."""
import inspect
import time
import warnings

import pytest

import tilec as tc
from tilec.lowering.target import find_ptxas
from tilec.remarks import LARGE_TILE_REGISTERS, Remark

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
HERE = __file__


@tc.kernel
def gemm(a, b, c, K, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    acc = tc.zeros((BM, BN), tc.float32)
    for k in range(0, tc.cdiv(K, BK)):  # @loop
        x = tc.load(a, index=(tc.program_id(0), k), shape=(BM, BK), padding=0.0)  # @load_a
        y = tc.load(b, index=(k, tc.program_id(1)), shape=(BK, BN), padding=0.0)
        acc = tc.dot(x, y, acc)  # @dot
    tc.store(c, index=(tc.program_id(0), tc.program_id(1)), tile=acc)


@tc.kernel
def chained(q, k, v, o):
    s = tc.dot(tc.load(q, index=(0, 0), shape=(64, 64), padding=0.0),  # @first
               tc.load(k, index=(0, 0), shape=(64, 64), padding=0.0))
    t = tc.dot(s.astype(tc.float16), tc.load(v, index=(0, 0), shape=(64, 64), padding=0.0))  # @second
    tc.store(o, index=(0, 0), tile=t)


@tc.kernel
def two_loops(x, y, out, n, BLOCK: tc.constexpr):
    acc = tc.zeros((BLOCK,), tc.float32)
    for i in range(n):  # @plain
        acc += tc.load(x, index=(i,), shape=(BLOCK,), padding=0.0)  # @plain_load
    for i in tc.range(n, num_stages=3):  # @staged
        acc += tc.load(y, index=(i,), shape=(BLOCK,), padding=0.0)
    tc.store(out, index=(tc.program_id(0),), tile=acc)


@tc.kernel
def add_transposed(x, y, z):
    a = tc.load(x, index=(0, 0), shape=(64, 64), padding=0.0)
    b = tc.load(y, index=(0, 0), shape=(64, 64), padding=0.0)
    tc.store(z, index=(0, 0), tile=a + b.T)  # @convert


@tc.kernel
def hold_tile(x, y, n, BLOCK: tc.constexpr):  # @def_hold
    # at BLOCK = 64 on one warp two 64x64 f32 tiles live across the loop: 256 values a thread
    t = tc.load(x, index=(0, 0), shape=(BLOCK, BLOCK), padding=0.0)
    acc = tc.zeros((BLOCK, BLOCK), tc.float32)
    for _ in range(n):
        acc = acc * t + t
    tc.store(y, index=(0, 0), tile=acc)


@tc.kernel
def huge_tile(x, y, B: tc.constexpr):
    t = tc.load(x, index=(0, 0), shape=(B, B), padding=0.0)  # @huge
    tc.store(y, index=(0, 0), tile=t * 2.0)


def line(marker: str) -> int:
    """The line of this file that carries `# @marker`."""
    lines, _ = inspect.findsource(inspect.getmodule(line))
    found = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(f"# @{marker}")]
    assert len(found) == 1, marker
    return found[0]


def of_kind(compiled, kind):
    return [r for r in compiled.remarks if r.kind == kind]


ALIGNED = ":stride_div=16x1"   # 16-byte rows: the loads can be cp.async / TMA copies
GEMM = "a=bf16[?,?]{s}, b=bf16[?,?]{s}, c=f32[?,?], K=i32, BM=128, BN=128, BK={bk}"


@pytest.fixture
def no_ptxas(monkeypatch):
    monkeypatch.setenv("TILEC_SKIP_PTXAS", "1")


def test_bk32_dot_on_sm90a_is_mma_sync_and_says_why_not_wgmma(no_ptxas):
    compiled = gemm.compile(GEMM.format(s=ALIGNED, bk=32), arch="sm_90a", num_warps=4)
    (dot,) = of_kind(compiled, "dot")
    assert (dot.file, dot.line) == (HERE, line("dot"))
    assert "lowered to mma.sync m16n8k16" in dot.message
    assert "not wgmma: wgmma needs K a multiple of 64 for 2-byte operands" in dot.message and "BK=32" in dot.message
    (loop,) = of_kind(compiled, "loop")
    assert loop.line == line("loop") and "cp.async ring of 3 stages" in loop.message


def test_bk64_dot_on_sm90a_is_wgmma_in_a_tma_ring(no_ptxas):
    compiled = gemm.compile(GEMM.format(s=ALIGNED, bk=64), arch="sm_90a", num_warps=4)
    (dot,) = of_kind(compiled, "dot")
    assert dot.line == line("dot") and "lowered to wgmma m64n128k16" in dot.message
    assert "A from shared memory" in dot.message and "not wgmma" not in dot.message
    (loop,) = of_kind(compiled, "loop")
    assert loop.line == line("loop") and "TMA ring of 3 stages" in loop.message


def test_column_major_a_on_sm90a_is_read_m_major(no_ptxas):
    sig = "a=bf16[?,?]:strides=1x?:stride_div=1x16, b=bf16[?,?]:stride_div=16x1, c=f32[?,?], K=i32, BM=128, BN=128, BK=64"
    compiled = gemm.compile(sig, arch="sm_90a", num_warps=4)
    (dot,) = of_kind(compiled, "dot")
    assert "lowered to wgmma" in dot.message and "A from shared memory (M-major)" in dot.message
    (loop,) = of_kind(compiled, "loop")
    assert "TMA ring of 3 stages" in loop.message


@pytest.mark.parametrize("arch, first, second", [
    ("sm_90a", "wgmma m64n64k16 (4 warps along M, 1 along N), A from shared memory", "A from registers"),
    ("sm_80", "mma.sync m16n8k16, A and B through shared memory", "mma.sync m16n8k16, A in registers"),
])
def test_a_chained_dot_takes_a_from_registers(no_ptxas, arch, first, second):
    compiled = chained.compile("q=f16[?,?], k=f16[?,?], v=f16[?,?], o=f32[?,?]", arch=arch)
    a, b = of_kind(compiled, "dot")
    assert a.line == line("first") and first in a.message
    assert b.line == line("second") and second in b.message


def test_sm80_has_no_better_instruction_to_name(no_ptxas):
    (dot,) = of_kind(gemm.compile(GEMM.format(s=ALIGNED, bk=32), arch="sm_80"), "dot")
    assert "mma.sync" in dot.message and "not wgmma" not in dot.message


def test_f32_dot_without_tf32_is_fma_and_says_why(no_ptxas):
    compiled = gemm.compile("a=f32[?,?], b=f32[?,?], c=f32[?,?], K=i32, BM=32, BN=32, BK=16", arch="sm_80")
    (dot,) = of_kind(compiled, "dot")
    assert dot.line == line("dot") and "FMA" in dot.message and "allow_tf32=True" in dot.message


def test_unaligned_dot_operands_are_not_pipelined_and_the_load_is_named(no_ptxas):
    # a view whose stride nothing is known of: 2-byte accesses, which cp.async cannot copy
    compiled = gemm.compile(GEMM.format(s=":strided", bk=32), arch="sm_80")
    (loop,) = of_kind(compiled, "loop")
    assert loop.line == line("loop")
    assert f"loaded at line {line('load_a')} is not pipelined" in loop.message
    assert "bytes per access" in loop.message


def test_plain_range_loop_is_unstaged_and_tc_range_is_staged(no_ptxas):
    compiled = two_loops.compile("x=f32[?], y=f32[?], out=f32[?], n=i32, BLOCK=512", arch="sm_80")
    plain, staged = of_kind(compiled, "loop")
    assert plain.line == line("plain")
    assert f"loads at line {line('plain_load')} not pipelined" in plain.message
    assert "plain `range`" in plain.message and "tc.range(..., num_stages=S)" in plain.message
    assert staged.line == line("staged") and "pipelined: " in staged.message and "3 stages" in staged.message


def test_layout_conversion_through_shared_memory(no_ptxas):
    compiled = add_transposed.compile("x=f32[?,?], y=f32[?,?], z=f32[?,?]", arch="sm_80")
    (conv,) = of_kind(compiled, "layout")
    assert conv.line == line("convert")
    assert "64x64 f32 tile through shared memory (16384 bytes" in conv.message


@needs_ptxas
def test_spilling_tile_remarks_its_spills_and_occupancy():
    sig = "x=f32[?,?], y=f32[?,?], n=i32, BLOCK=64"
    with pytest.warns(tc.SpillWarning):   # spills stay warnings too
        compiled = hold_tile.compile(sig, arch="sm_80", num_warps=1)
    report = compiled.metadata["ptxas"]
    (spill,) = of_kind(compiled, "spill")
    assert (spill.file, spill.line) == (HERE, line("def_hold"))
    assert f"{report['spill_stores']} bytes stored, {report['spill_loads']} bytes loaded" in spill.message
    (occ,) = of_kind(compiled, "occupancy")
    assert f"{report['registers']} registers per thread" in occ.message and "32 threads per SM of sm_80" in occ.message


@needs_ptxas
def test_a_tile_that_fits_has_no_spill_remark():
    with warnings.catch_warnings():
        warnings.simplefilter("error", tc.SpillWarning)
        compiled = hold_tile.compile("x=f32[?,?], y=f32[?,?], n=i32, BLOCK=16", arch="sm_80", num_warps=4)
    assert not of_kind(compiled, "spill")
    (occ,) = of_kind(compiled, "occupancy")
    n = int(occ.message.split()[0])
    assert 1 <= n <= 16 and "limited by" in occ.message


def test_oversized_tile_is_refused_fast_naming_its_line():
    t0 = time.perf_counter()
    with pytest.raises(tc.CompilationError) as err:
        huge_tile.compile("x=f32[?,?], y=f32[?,?], B=1024", arch="sm_80", num_warps=4)
    assert time.perf_counter() - t0 < 1.0
    e = err.value
    assert e.loc.line == line("huge") and e.loc.file == HERE
    assert "1024x1024 f32 tile takes about 8192 registers per thread over 128 threads" in e.msg
    assert "num_warps" in e.msg and "smaller tile" in e.msg and "allow_large_tiles=True" in e.msg


def test_the_refusal_counts_threads_and_can_be_overridden(monkeypatch):
    # 256 x 256 f32 is 2048 registers a thread on one warp (refused), 256 on eight warps
    sig = "x=f32[?,?], y=f32[?,?], B=256"
    with pytest.raises(tc.CompilationError, match="2048 registers per thread"):
        huge_tile.compile(sig, arch="sm_80", num_warps=1)
    assert 256 <= LARGE_TILE_REGISTERS

    # allowed: the compile goes on to the passes (stopped there: LLVM would take minutes)
    import tilec.lowering.pipeline as pipeline

    def stop(*args, **kwargs):
        raise RuntimeError("reached the passes")
    monkeypatch.setattr(pipeline, "run_pipeline", stop)
    with pytest.raises(tc.CompilationError, match="reached the passes"):
        huge_tile.compile(sig, arch="sm_80", num_warps=1, allow_large_tiles=True)


def test_remarks_print_format_and_env(no_ptxas, monkeypatch, capsys):
    r = Remark("dot", "tc.dot lowered to FMA", "k.py", 12, 5)
    assert str(r) == "k.py:12:5: remark[dot]: tc.dot lowered to FMA"
    monkeypatch.setenv("TILEC_REMARKS", "1")
    sig = "x=f32[?], y=f32[?], out=f32[?], n=i32, BLOCK=256"
    first = two_loops.compile(sig, arch="sm_80")
    err = capsys.readouterr().err
    assert f"{HERE}:{line('plain')}:5: remark[loop]: loads at line {line('plain_load')} not pipelined" in err
    # a cached kernel keeps its remarks, and prints them again
    again = two_loops.compile(sig, arch="sm_80")
    assert again.remarks == first.remarks
    assert "remark[loop]" in capsys.readouterr().err
