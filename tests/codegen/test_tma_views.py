"""TMA copies of views of rank 3 to 5 (the attention kernels' K and V tiles): which views
qualify, the tensor map the runtime encodes for them (against a recording stand-in for the
driver call), and the copies codegen emits."""
from __future__ import annotations

import importlib
import re

import pytest

from tilec import dtypes as dt
from tilec.ir.types import ViewType
from tilec.lowering.passes.tma_loads import tma_view_ok
from tilec.runtime import tensormap


def _view(rank, strides, stride_div, dtype=dt.float16, align=16):
    return ViewType(dtype, rank, strides, dt.int32, align=align, stride_div=stride_div)


def test_views_of_rank_3_to_5_qualify_with_a_unit_last_stride_and_16_byte_others():
    assert tma_view_ok(_view(3, (None, None, 1), (16, 16, 1)))
    assert tma_view_ok(_view(4, (None, None, None, 1), (16, 16, 16, 1)))
    assert tma_view_ok(_view(4, (None, 64, None, 1), (16, 1, 16, 1)))           # a known stride of 128 bytes
    assert tma_view_ok(_view(5, (None,) * 4 + (1,), (8,) * 4 + (1,), dt.float32))  # 32-byte strides
    assert not tma_view_ok(_view(3, (None, None, 1), (16, 4, 1)))                # 8-byte rows
    assert not tma_view_ok(_view(3, (None, 1, None), (16, 1, 16)))               # no unit last stride
    assert not tma_view_ok(_view(3, (None, None, 1), (16, 16, 1), align=8))
    assert not tma_view_ok(_view(6, (None,) * 5 + (1,), (16,) * 5 + (1,)))       # TMA maps stop at rank 5


class _Recorder:
    """The part of cuda.bindings.driver that encode_tensor_map calls, recording its arguments."""

    class CUresult:
        CUDA_SUCCESS = 0

    class _Enum:
        def __getattr__(self, name):
            return name

    CUtensorMapInterleave = CUtensorMapSwizzle = CUtensorMapL2promotion = CUtensorMapFloatOOBfill = _Enum()

    class _Map:
        def getPtr(self):
            import ctypes
            buf = ctypes.create_string_buffer(b"\x07" * 128, 128)
            _Recorder.keep = buf
            return ctypes.addressof(buf)

    def __init__(self):
        self.calls = []

    @staticmethod
    def cuuint64_t(x):
        return ("u64", int(x))

    @staticmethod
    def cuuint32_t(x):
        return ("u32", int(x))

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(args)
        return 0, self._Map()


@pytest.fixture
def recorder(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(tensormap, "_enums", lambda: (rec, {"f16": "F16", "bf16": "BF16", "f32": "F32"}))
    return rec


def test_a_rank_4_map_runs_innermost_first(recorder):
    # (batch, seq, heads, d) = (2, 300, 4, 64) stored bshd, read as its (b, h, s, d) view
    shape, strides = (2, 4, 300, 64), (300 * 4 * 64, 64, 4 * 64, 1)
    raw = tensormap.encode_tensor_map(0x10000, shape, strides, dt.float16, (1, 1, 64, 64))
    assert len(raw) == tensormap.TMAP_BYTES
    (call,) = recorder.calls
    dtype, rank, ptr, dims, byte_strides, box, elem_strides = call[:7]
    assert (dtype, rank, ptr) == ("F16", 4, 0x10000)
    assert [v for _, v in dims] == [64, 300, 4, 2]
    assert [v for _, v in byte_strides] == [4 * 64 * 2, 64 * 2, 300 * 4 * 64 * 2]   # seq, heads, batch
    assert [v for _, v in box] == [64, 64, 1, 1]
    assert [v for _, v in elem_strides] == [1, 1, 1, 1]
    assert call[8] == "CU_TENSOR_MAP_SWIZZLE_128B" and call[10] == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"


def test_a_column_major_2d_map_runs_over_its_storage(recorder):
    # a K x N column-major B (storage N x K, K contiguous), as the GEMM's K-major B reads it
    tensormap.encode_tensor_map(0x10000, (4096, 1024), (1, 4096), dt.float16, (64, 64))
    (call,) = recorder.calls
    assert call[1] == 2 and [v for _, v in call[3]] == [4096, 1024] and [v for _, v in call[4]] == [8192]
    assert [v for _, v in call[5]] == [64, 64]


def test_a_rank_3_map_of_an_empty_tensor_keeps_positive_extents(recorder):
    tensormap.encode_tensor_map(0x10000, (3, 0, 128), (0, 128, 1), dt.bfloat16, (1, 64, 64))
    (call,) = recorder.calls
    assert [v for _, v in call[3]] == [128, 1, 3] and all(v >= 16 for _, v in call[4])


@pytest.mark.parametrize("ptr,strides", [(0x10008, (4096, 64, 1)), (0x10000, (4096, 60, 1)),
                                         (0x10000, (4096, 1, 64))])
def test_a_map_the_driver_would_refuse_is_a_value_error_naming_the_requirement(recorder, ptr, strides):
    with pytest.raises(ValueError, match="16-byte aligned base, a unit last stride"):
        tensormap.encode_tensor_map(ptr, (2, 64, 64), strides, dt.float16, (1, 64, 64))
    assert not recorder.calls


def test_the_stdlib_forward_copies_k_and_v_with_4d_boxes():
    A = importlib.import_module("tilec.stdlib_kernels.attention")
    ck = A.attention_fwd_kernel.compile(A.SIGNATURES["attention_fwd_kernel"], arch="sm_90a", num_warps=8,
                                        fast_math=True)
    gpu_ir = ck.asm["gpu"]
    loads = re.findall(r"gpu.tma_load .*\{box = \[1, 1, 64, 64\](, transposed = true)?\}", gpu_ir)
    assert set(loads) == {"", ", transposed = true"}        # v as it lies, k turned over
    copies = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes "
                        r"\[%r\d+\], \[%rd\d+, \{(%r\d+, ){3}%r\d+\}\], \[%r\d+\];", ck.asm["ptx"])
    assert copies and {c[0] for c in copies} == {"4"}
    assert "cp.async.cg.shared.global" not in ck.asm["ptx"]   # q is loaded once, before the loop


def _ring_of_a_chain() -> str:
    """The chain of tests/golden/pipeline_loads/tma_ring_of_a_chain.ir after its passes, printed."""
    from pathlib import Path

    from tilec.ir import parse, print_module
    from tilec.lowering.pipeline import run_passes
    from tilec.options import CompileOptions
    text = (Path(__file__).resolve().parent.parent / "golden" / "pipeline_loads" / "tma_ring_of_a_chain.ir").read_text()
    names = ["tma_loads", "lower_views", "axis_info", "assign_layouts", "accelerate_dot", "share_staged_operands",
             "pipeline_loads"]
    return print_module(run_passes(parse(text), names, CompileOptions(num_warps=4, num_stages=3, arch="sm_90a")))


@pytest.mark.parametrize("old,new,message", [
    ("{box = [1, 64, 64]}", "{box = [64, 64]}", "box [64, 64] must be 2 leading entries"),
    ("{box = [1, 64, 64]}", "{box = [2, 64, 64]}", "box [2, 64, 64] must be 2 leading entries, one of them 64"),
    ("{box = [1, 64, 64], transposed = true}", "{box = [1, 64, 64]}", "contiguous dimension"),
])
def test_the_verifier_checks_a_rank_3_copy(old, new, message):
    from tilec.ir import parse, verify
    from tilec.ir.core import VerifyError
    text = _ring_of_a_chain()
    verify(parse(text))
    with pytest.raises(VerifyError, match=re.escape(message)):
        verify(parse(text.replace(old, new, 1)))


def test_the_verifier_wants_one_index_per_dimension():
    from tilec.ir import parse, verify
    from tilec.ir.core import VerifyError
    text = _ring_of_a_chain()
    bad = re.sub(r"(gpu.tma_load %\d+, %\d+, %\d+, %v, )%z, ", r"\1", text, count=1)
    assert bad != text
    with pytest.raises(VerifyError, match="expected 3 indices"):
        verify(parse(bad))


def test_the_stdlib_forward_stores_its_output_tile_with_a_4d_box():
    # the (1, 1, BM, DV) tile of o goes out through shared memory and TMA; lse (not a dot's
    # result) keeps its plain stores
    A = importlib.import_module("tilec.stdlib_kernels.attention")
    ck = A.attention_fwd_kernel.compile(A.SIGNATURES["attention_fwd_kernel"], arch="sm_90a", num_warps=8,
                                        fast_math=True)
    assert re.findall(r"gpu.tma_store %o, (?:%\w+, ){4}%\w+ \{box = \[1, 1, 128, 64\]", ck.asm["gpu"])
    stores = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.global\.shared::cta\.bulk_group "
                        r"\[%rd\d+, \{(?:%r\d+, ){3}%r\d+\}\], \[%r\d+\];", ck.asm["ptx"])
    assert stores == ["4"]                                   # DV 64: one 128-byte box column
    assert "st.global.v" not in ck.asm["ptx"] and "st.global.b16" not in ck.asm["ptx"]


def test_the_example_forward_stores_its_output_tile_with_a_3d_box():
    from example_modules import load_example
    ex = load_example("flash_attention")
    sig = ex.SIGNATURES["attention_fwd"].replace("D=64", "D=128")
    ck = ex.attention_fwd.compile(sig, arch="sm_90a", **ex.OPTIONS["attention_fwd"])
    stores = re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared::cta\.bulk_group "
                        r"\[%rd\d+, \{(%r\d+), (%r\d+), (%r\d+)\}\], \[%r\d+\];", ck.asm["ptx"])
    assert len(stores) == 2                                  # D 128: two box columns,
    assert stores[0][1:] == stores[1][1:] and stores[0][0] != stores[1][0]   # the same rows and head
    assert ck.metadata["ptxas"]["spill_stores"] == 0


@pytest.mark.parametrize("old,new,message", [
    ("{box = [1, 64, 64]}", "{box = [64, 64]}", "box [64, 64] must be 2 leading entries"),
    ("%o, %z, %m, %zero, %out", "%o, %z, %m, %out", "expected 3 indices"),
])
def test_the_verifier_checks_a_rank_3_store(old, new, message):
    from pathlib import Path

    from tilec.ir import parse, print_module, verify
    from tilec.ir.core import VerifyError
    from tilec.lowering.pipeline import run_passes
    from tilec.options import CompileOptions
    text = (Path(__file__).resolve().parent.parent / "golden" / "tma_stores" / "rank3_output_tile.ir").read_text()
    text = print_module(run_passes(parse(text), ["tma_stores"], CompileOptions(num_warps=4, num_stages=3, arch="sm_90a")))
    verify(parse(text))
    assert old in text
    with pytest.raises(VerifyError, match=re.escape(message)):
        verify(parse(text.replace(old, new, 1)))
