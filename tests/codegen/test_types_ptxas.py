"""Type mapping, and the ptxas report parser/finder."""
import os

from tilec import dtypes as dt
from tilec.ir.types import PointerType, ScalarType, TileType
from tilec.lowering import ptxas
from tilec.lowering.codegen.types import llvm_type

SAMPLE_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers, 2048 bytes smem
ptxas warning : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized
"""


def test_type_mapping():
    want = {"i1": "i1", "i8": "i8", "u8": "i8", "i16": "i16", "u16": "i16", "i32": "i32", "u32": "i32",
            "i64": "i64", "u64": "i64", "f16": "half", "bf16": "bfloat", "f32": "float", "f64": "double",
            "f8e4m3": "i8", "f8e5m2": "i8"}
    assert {d.name: str(llvm_type(ScalarType(d))) for d in dt.ALL_DTYPES} == want
    assert str(llvm_type(TileType((4, 8), ScalarType(dt.bfloat16)))) == "bfloat"  # per element
    assert str(llvm_type(PointerType(dt.float32))) == "ptr addrspace(1)"
    assert str(llvm_type(PointerType(dt.float32, 3))) == "ptr addrspace(3)"


def test_report_parser():
    r = ptxas.parse_report(SAMPLE_LOG)
    assert (r["registers"], r["spill_stores"], r["spill_loads"], r["stack"], r["shared"]) == (96, 8, 12, 16, 2048)
    assert len(r["warnings"]) == 1 and "C7515" in r["warnings"][0]
    assert r["wgmma_serialized"] == ""   # that sample's line names no reason


def test_report_parser_reads_why_ptxas_serialized_the_wgmmas():
    """ptxas 13 says it as an info line, wrapped or not; the reason reaches the report."""
    log = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
           "non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline "
           "stage in the function 'k'\n" + SAMPLE_LOG.split("ptxas warning")[0])
    r = ptxas.parse_report(log)
    assert r["wgmma_serialized"] == ("non wgmma instructions reading accumulator registers of a wgmma between "
                                     "start and end of the pipeline stage")
    assert r["registers"] == 96 and not r["warnings"]


def test_find_ptxas_honours_the_environment(monkeypatch, tmp_path):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    ptxas.find_ptxas.cache_clear()
    try:
        monkeypatch.setenv("TILEC_PTXAS", str(fake))
        assert ptxas.find_ptxas() == str(fake)
        monkeypatch.setenv("TILEC_PTXAS", str(tmp_path / "missing"))
        ptxas.find_ptxas.cache_clear()
        assert ptxas.find_ptxas() is None
    finally:
        monkeypatch.delenv("TILEC_PTXAS", raising=False)
        ptxas.find_ptxas.cache_clear()
    assert ptxas.find_ptxas() and os.access(ptxas.find_ptxas(), os.X_OK)


def test_ptxas_rejection_is_a_compilation_error():
    import pytest
    with pytest.raises(ptxas.PtxasError, match="ptxas rejected the PTX for sm_80"):
        ptxas.assemble(".version 7.0\n.target sm_80\n.address_size 64\nthis is not ptx\n", "sm_80")
