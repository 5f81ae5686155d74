"""Chained dots (attention's S = Q Kᵀ -> softmax -> P V) keep P in registers: the fragment
mapping of register-A wgmma against the PTX ISA's table, the PTX of the chain on sm_90a
(wgmma with A in registers) and sm_80 (mma.sync on the C fragments), row statistics with
quad shuffles, ptxas on the attention probe's configurations, and the interpreter against
numpy. tests/gemm/test_chained_dots_gpu.py runs the chains on a GPU."""
import re

import numpy as np
import pytest

import tilec as tc
from tilec import dtypes as dt
from tilec.compiler import compile_kernel
from tilec.lowering.gpu.layouts import MmaLayout, NumpyOps, registers_match
from tilec.lowering.gpu.wgmma_fragments import register_a_layout, wgmma_instructions
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

from attention_kernels import attn_fwd
from chain_kernels import attention, attention_sig, dot_exp_dot, dot_exp_dot_sig, dot_exp_dot_t


# ----------------------------------------------------------------------------- fragments
def _isa_a(warp, lane, rep_row, k0, word, half):
    """(row, col) of A that element `half` of .b32 register a<word> holds in the k16 step at
    column k0 (PTX ISA, wgmma .m64nNk16 register fragment of A, 16-bit types): warp w % 4 of
    its warpgroup owns rows 16 (w % 4) .. +15; g = lane / 4, t = lane % 4; a0: (g, 2t),
    a1: (g + 8, 2t), a2: (g, 2t + 8), a3: (g + 8, 2t + 8), each with the next column."""
    g, t = lane // 4, lane % 4
    row = rep_row + 16 * warp + g + 8 * (word % 2)
    col = k0 + 2 * t + 8 * (word // 2) + half
    return row, col


@pytest.mark.parametrize("dtype", [dt.float16, dt.bfloat16], ids=str)
@pytest.mark.parametrize("num_warps,m,bn,d", [(4, 64, 64, 64), (8, 128, 64, 128), (4, 128, 128, 64),
                                               (8, 128, 256, 64), (4, 64, 512, 64)])
def test_register_a_fragments_follow_the_isa(dtype, num_warps, m, bn, d):
    """P in the first dot's accumulator layout (m x bn), read as the second dot's A (k = bn):
    every register each wgmma instruction packs holds the element the ISA's table names."""
    s_acc = MmaLayout(3, (num_warps, 1), (16, min(bn, 256)))   # S = Q Kᵀ: m x bn
    o_acc = MmaLayout(3, (num_warps, 1), (16, d))               # O = P V: m x d
    want = register_a_layout(o_acc, dtype.bits)
    assert want is not None and want.k_width == 2
    assert registers_match(s_acc, want, (m, bn))
    instrs = wgmma_instructions(o_acc, m, d, bn, dtype.itemsize, s_acc)
    assert len(instrs) == (m // (16 * num_warps)) * (bn // 16)
    ops = NumpyOps()
    lanes = np.arange(32)
    for warp in range(num_warps):
        coords = s_acc.coords((m, bn), lanes, np.int64(warp), ops)
        for n_ins, ins in enumerate(instrs):
            rep_row, k0 = 16 * num_warps * (n_ins // (bn // 16)), 16 * (n_ins % (bn // 16))
            assert len(ins.a_regs) == 8
            for word in range(4):
                for half in range(2):
                    row, col = coords[ins.a_regs[2 * word + half]]
                    w_row, w_col = _isa_a(warp, lanes, rep_row, k0, word, half)
                    np.testing.assert_array_equal(row, w_row)
                    np.testing.assert_array_equal(col, w_col)


@pytest.mark.parametrize("dtype", [dt.float32, dt.float8e4m3, dt.float8e5m2], ids=str)
def test_register_a_only_for_16_bit(dtype):
    """tf32 and 8-bit A keep shared memory (8-bit would need a quad exchange)."""
    assert register_a_layout(MmaLayout(3, (4, 1), (16, 64)), dtype.bits) is None


def test_register_a_layout_is_not_an_mma_sync_one():
    assert register_a_layout(MmaLayout(2, (4, 1), (16, 8)), 16) is None


# ----------------------------------------------------------------------------- PTX
def _compile(kernel, sig, arch, num_warps, **opts):
    return compile_kernel(kernel, parse_signature(kernel, sig),
                          CompileOptions(arch=arch, num_warps=num_warps, **opts).validated(), use_cache=False)


def _defs(ptx):
    """Register -> the opcodes of the instructions that write it."""
    out = {}
    for line in ptx.splitlines():
        m = re.match(r"\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)\s+(%\w+)\s*,", line)
        if m:
            out.setdefault(m.group(2), []).append(m.group(1))
    return out


def _between_dots(ptx, pattern):
    """The lines from the first tensor-core instruction to the last (the loop of the chain)."""
    lines = ptx.splitlines()
    idx = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    assert idx, pattern
    return lines[idx[0]:idx[-1] + 1]


def _no_converted_values_stored(ptx, region):
    """No st.shared in `region` stores a value that a cvt produced (P is f32 converted to 16 bits;
    the loaded K and V tiles are stored as they came from ld.global)."""
    defs = _defs(ptx)
    for line in region:
        m = re.match(r"\s*st\.shared\S*\s+\[[^\]]*\],\s*\{?\s*(%\w+)", line)
        if m:
            assert not any(d.startswith("cvt") for d in defs.get(m.group(1), [])), line


def _quad_shuffles_only(region):
    """Row statistics of an accumulator: butterflies over the 4 lanes of a quad (1, 2). (The
    warp index each wgmma reads back from lane 0, shfl.sync.idx, is no row statistic.)"""
    shfl = [line for line in region if "shfl" in line and not re.search(r"shfl\.sync\.idx\.b32\s+%\w+, %\w+, 0, 31", line)]
    assert shfl
    for line in shfl:
        assert re.search(r"shfl\.sync\.bfly\.b32\s+%\w+, %\w+, [12], 31, -1;", line), line


def _assembled(ck):
    if not find_ptxas():
        return None
    rep = ck.metadata["ptxas"]
    assert ck.asm["cubin"] and not rep["warnings"], rep
    return rep


_REG_A = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(b?f16)\.\w+ \{[^}]*\}, "
                    r"\{(%r\d+), (%r\d+), (%r\d+), (%r\d+)\}, %rd\d+, p, 1, 1, 1;")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("num_warps,bm,bn,d", [(4, 64, 64, 64), (8, 128, 64, 128)])
def test_attention_p_feeds_wgmma_from_registers(dtype, num_warps, bm, bn, d):
    ck = _compile(attention, attention_sig(dtype, bm, bn, d), "sm_90a", num_warps)
    ptx = ck.asm["ptx"]
    reg_a = _REG_A.findall(ptx)
    assert len(reg_a) == bn // 16 * (bm // (16 * num_warps)), reg_a   # every k16 step of P V
    defs = _defs(ptx)
    for n, kind, *regs in reg_a:
        assert int(n) == d and kind == dtype
        for r in regs:  # packed straight from the f32 accumulator values: no movement
            assert defs[r] == [f"cvt.rn.{dtype}x2.f32"], (r, defs.get(r))
    region = _between_dots(ptx, r"wgmma\.mma_async")
    _no_converted_values_stored(ptx, region)
    _quad_shuffles_only(region)
    _written_before_the_fence(ptx)
    assert "gpu.convert_layout" in ck.asm["gpu"]
    _assembled(ck)


def _written_before_the_fence(ptx):
    """The PTX ISA wants wgmma.fence between the last write of an A register and the wgmma
    that reads it: each packing cvt comes before the fence that precedes its wgmma."""
    lines = ptx.splitlines()
    written = {}
    for i, line in enumerate(lines):
        m = re.match(r"\s*cvt\.rn\.b?f16x2\.f32\s+(%r\d+),", line)
        if m:
            written[m.group(1)] = i
    for i, line in enumerate(lines):
        m = _REG_A.search(line)
        if m:
            fence = max(j for j in range(i) if "wgmma.fence" in lines[j])
            assert all(written[r] < fence for r in m.groups()[2:]), line


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("num_warps,bm", [(4, 64), (8, 128)])
def test_attention_p_feeds_mma_sync_from_registers(dtype, num_warps, bm):
    ck = _compile(attention, attention_sig(dtype, bm, 64, 64), "sm_80", num_warps)
    ptx = ck.asm["ptx"]
    defs = _defs(ptx)
    mmas = re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.\w+\.\w+\.f32\s+\{[^}]*\}, "
                      r"\{(%r\d+), (%r\d+), (%r\d+), (%r\d+)\}", ptx)
    from_p = [regs for regs in mmas if all(defs.get(r) == [f"cvt.rn.{dtype}x2.f32"] for r in regs)]
    # P V: 16 rows a warp, D / 8 column tiles, BN / 16 k-steps, each A word a packed cvt
    assert len(from_p) == (64 // 8) * (64 // 16), len(from_p)
    region = _between_dots(ptx, r"mma\.sync")
    _no_converted_values_stored(ptx, region)
    _quad_shuffles_only(region)
    _assembled(ck)


@pytest.mark.slow
def test_fast_math_exp2_is_ex2_approx():
    ck = _compile(attention, attention_sig("f16", 64, 64, 64), "sm_90a", 4, fast_math=True)
    region = _between_dots(ck.asm["ptx"], r"wgmma\.mma_async")
    assert sum("ex2.approx.ftz.f32" in line for line in region) > 0


PROBE = [("sm_90a", 8, bn, d) for bn in (64, 128) for d in (64, 128)] + [("sm_80", w, 64, 128) for w in (4, 8)]


@pytest.mark.slow   # ptxas on kernels that still spill (their loads): about 15 s each
@pytest.mark.parametrize("arch,num_warps,bn,d", PROBE)
def test_attention_probe_assembles(arch, num_warps, bn, d):
    """The rank-3 attention probe (tests/attention_kernels.py) at BM = 128 (two warpgroups on
    sm_90a) assembles without ptxas warnings (wgmma serialization would be one); spills are
    reported, not asserted."""
    sig = f"q=f16[?,?,?], k=f16[?,?,?], v=f16[?,?,?], o=f16[?,?,?], scale=f32, BM=128, BN={bn}, D={d}"
    ck = _compile(attn_fwd, sig, arch, num_warps)
    if arch == "sm_90a":
        assert len(_REG_A.findall(ck.asm["ptx"])) == bn // 16
    _assembled(ck)


# ----------------------------------------------------------------------------- interpreter
def _softmax_attention(q, k, v, scale):
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("n_q,n_kv,d", [(64, 64, 64), (70, 100, 48), (33, 129, 64)])
def test_attention_on_the_interpreter(n_q, n_kv, d):
    rng = np.random.default_rng(n_q + n_kv)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float16) for n in (n_q, n_kv, n_kv))
    o = np.full((n_q, d), np.nan, np.float16)
    with tc.interpret():
        attention[(tc.cdiv(n_q, 32),)](q, k, v, o, 0.125, BM=32, BN=32, D=64)
    np.testing.assert_allclose(o.astype(np.float64), _softmax_attention(q, k, v, 0.125), atol=2e-2, rtol=0)


@pytest.mark.parametrize("transposed", [False, True], ids=["p", "p_transposed"])
def test_dot_exp_dot_on_the_interpreter(transposed):
    """exp(X W - 1) V, and with the transposed accumulator as the second A: exp(X W - 1)ᵀ V."""
    m, n = (20, 50) if transposed else (40, 30)
    rng = np.random.default_rng(6 if transposed else 5)
    x = (rng.standard_normal((m, 16)) / 4).astype(np.float16)
    w = (rng.standard_normal((16, n)) / 4).astype(np.float16)
    v = rng.standard_normal((m if transposed else n, 16)).astype(np.float16)
    o = np.full((n if transposed else m, 16), np.nan, np.float32)
    with tc.interpret():
        (dot_exp_dot_t if transposed else dot_exp_dot)[(2,)](x, w, v, o, BM=32, BN=32, D=16)
    p = np.exp(x.astype(np.float64) @ w.astype(np.float64) - 1.0).astype(np.float16).astype(np.float64)
    want = (p.T if transposed else p) @ v.astype(np.float64)
    np.testing.assert_allclose(o, want, atol=2e-3, rtol=1e-3)


@pytest.mark.slow
def test_transposed_accumulator_goes_to_an_m_major_a_as_it_lies():
    """P.T as wgmma's A: P stays in the accumulator's registers (no layout conversion through
    shared memory) and is stored 4 bytes at a time into an M-major buffer."""
    sig = dot_exp_dot_sig("f16", 64, 64, 64).replace("[?,?]", "[?,?]:stride_div=16x1")   # 16-byte loads
    ck = _compile(dot_exp_dot_t, sig, "sm_90a", 4, remarks=True)
    texts = [str(r) for r in ck.remarks]
    assert any("A from shared memory (M-major)" in t for t in texts), texts
    assert not any("layout conversion" in t for t in texts), texts
    ptx = ck.asm["ptx"]
    assert "st.shared.b16" not in ptx and "st.shared.b32" in ptx
    _assembled(ck)


@pytest.mark.slow
def test_dot_exp_dot_compiles_to_register_a():
    ck = _compile(dot_exp_dot, dot_exp_dot_sig("f16", 64, 64, 64), "sm_90a", 4)
    assert len(_REG_A.findall(ck.asm["ptx"])) == 4
    _assembled(ck)


# ----------------------------------------------------------------------------- verifier
_M3 = "#mma{version = 3, warps_per_cta = [4, 1], instr_shape = [16, 64]}"
_WGMMA_IR = """module attributes {num_warps = 4} {
  tile.func {sym_name = "k", arg_names = []} (
    {
      ^bb0():
        %b = gpu.alloc {shape = [64, 64], layout = #shared{vec = 8, per_phase = 1, max_phase = 8, order = [1, 0], swizzle_bytes = 128}, offset = -1} : ptr<f16, 3>
        %p = tile.constant {value = 1.0} : tile<64x64xELEM, LAYOUT>
        %z = tile.constant {value = 0.0} : tile<64x64xf32, M3>
        %d = gpu.wgmma %p, %b, %z : tile<64x64xf32, M3>
        tile.return
    }
  )
}"""


def _wgmma_module(elem, layout):
    from tilec.ir import parse, verify
    return verify(parse(_WGMMA_IR.replace("ELEM", elem).replace("LAYOUT", layout).replace("M3", _M3)))


@pytest.mark.parametrize("layout", [_M3, f"#dot_op{{op_idx = 0, parent = {_M3}, k_width = 2}}"])
def test_wgmma_register_a_verifies(layout):
    _wgmma_module("f16", layout)


@pytest.mark.parametrize("elem,layout,message", [
    ("f16", "#blocked{size_per_thread = [1, 8], threads_per_warp = [4, 8], warps_per_cta = [4, 1], order = [1, 0]}",
     "a register A operand must be in #dot_op"),
    ("f16", "#mma{version = 2, warps_per_cta = [2, 2], instr_shape = [16, 8]}", "a register A operand must be in"),
    ("f8e4m3", _M3, "16-bit"),
])
def test_wgmma_register_a_rejects(elem, layout, message):
    from tilec.ir.core import VerifyError
    with pytest.raises(VerifyError, match=re.escape(message)):
        _wgmma_module(elem, layout)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_row_statistics_stay_in_the_accumulator_slice(arch):
    """The running max and sum that the loop carries keep the slice of the accumulator's
    layout even though the lse store after the loop would anchor them blocked: no layout
    conversion through shared memory inside the key loops."""
    from example_modules import load_example
    mod = load_example("flash_attention")
    ck = _compile(mod.attention_fwd, mod.SIGNATURES["attention_fwd"], arch, 8, fast_math=True)
    gpu = ck.asm["gpu"]
    loops = gpu.split("tile.for")[1:]
    assert len(loops) == 2
    for body in loops:
        body = body[:body.index("tile.yield")]
        assert "_smem_sync" not in body and "slice{dim = 1, parent = #mma" in body
