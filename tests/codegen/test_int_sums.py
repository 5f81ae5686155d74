"""Integer sums, products and scans narrower than 32 bits are computed in i32 / u32 on the
GPU (the frontend widens the operand, docs/language.md "Reductions and scans"): through
the whole compiler and ptxas for sm_80 and sm_90a, with no 16-bit adds left in the PTX."""
import pytest

import tilec as tc
from tilec.compiler import compile_kernel
from tilec.options import CompileOptions
from tilec.specialize import parse_signature

ARCHS = ["sm_80", "sm_90a"]
ACC = {"i8": "i32", "i16": "i32", "u8": "u32", "u16": "u32", "i1": "i32"}


@tc.kernel
def int_sums(x, rows, total, scans, prods, BM: tc.constexpr, BN: tc.constexpr):
    t = tc.load(x, index=(0, 0), shape=(BM, BN))
    tc.store(rows, index=(0,), tile=tc.sum(t, axis=1))
    tc.store(total, index=(0,), tile=tc.full((1,), tc.sum(t), total.dtype))
    tc.store(scans, index=(0, 0), tile=tc.cumsum(t, axis=0))
    tc.store(prods, index=(0,), tile=tc.prod(t, axis=0))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("src", sorted(ACC))
def test_narrow_integer_sums_accumulate_in_32_bits(src, arch):
    acc = ACC[src]
    sig = f"x={src}[?,?], rows={acc}[?], total={acc}[?], scans={acc}[?,?], prods={acc}[?], BM=16, BN=64"
    ck = compile_kernel(int_sums, parse_signature(int_sums, sig), CompileOptions(arch=arch), use_cache=False)
    assert ck.asm["cubin"], "ptxas produced no cubin"
    report = ck.metadata["ptxas"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0 and not report["warnings"], report
    # (the stores into views of the accumulation type already require these result types)
    tile_ir = str(int_sums.ir(parse_signature(int_sums, sig)))
    assert f'{{axis = 1, kind = "sum"}} : tile<16x{acc}>' in tile_ir
    assert f'{{axis = 0, kind = "sum", reverse = false}} : tile<16x64x{acc}>' in tile_ir
    ptx = ck.asm["ptx"]
    assert "add.s32" in ptx
    assert "add.s16" not in ptx and "add.u16" not in ptx  # i8/i16 adds were 16-bit before widening
