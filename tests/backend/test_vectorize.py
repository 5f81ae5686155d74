"""16-byte global accesses: views specialized on divisibility (extents by 16, like int
arguments; strides by the power of two up to 16 dividing them) give masked loads and stores that axis analysis proves uniform over
4 f32 / 8 f16 elements; the runtime's signature key follows the same rule."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tilec.options import CompileOptions
from tilec.specialize import ArrayInfo, view_type_for
from tilec import dtypes as dt

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))


def _examples():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import fused_softmax, layer_norm, vector_add  # noqa: E401
    finally:
        sys.path.remove(str(EXAMPLES))
    return vector_add, fused_softmax, layer_norm


def _accesses(ptx):
    return set(re.findall(r"\b((?:ld|st)\.global(?:\.nc)?(?:\.v\d)?\.b\d+)", ptx))


def _row_view(dtype, rows, cols, stride):
    return view_type_for(ArrayInfo(0x1000, (rows, cols), (stride, 1), dtype, "cpu"))


def test_view_specialization_marks_extents_and_strides_divisible_by_16():
    t = _row_view(dt.float32, 10, 4096, 4096)
    assert t.shape_div == (1, 16) and t.stride_div == (16, 1)
    t = _row_view(dt.float32, 32, 1000, 1000)
    assert t.shape_div == (16, 1) and t.stride_div == (8, 1)


@pytest.mark.parametrize("stride,div", [(20001, 1), (20002, 2), (1000, 8), (20008, 8), (4100, 4), (4096, 16),
                                        (48, 16), (0, 16), (-24, 8)])
def test_strides_specialize_on_the_power_of_two_dividing_them(stride, div):
    from tilec.specialize import array_signature as _array_sig
    from tilec.specialize import stride_divisibility
    assert stride_divisibility(stride) == div
    assert _row_view(dt.float32, 4, 9, stride).stride_div == (div, 1)
    # the launcher's key tells every class apart, as the view type does
    key = _array_sig((0x1000, (4, 9), (stride, 1), dt.float32, 0))[6]
    assert key[2:] == (div, 1)


@pytest.mark.slow
def test_rows_32_bytes_apart_get_16_byte_accesses():
    # f32 rows 20008 elements apart (8 | 20008): every row starts on a 32-byte boundary,
    # which a specialization on 16 alone did not prove (scalar accesses)
    from tilec.compiler import compile_kernel
    _, fused_softmax, _ = _examples()
    k = fused_softmax.softmax_kernel
    for div, vector in ((8, "v4.b32"), (4, "v4.b32"), (2, "v2.b32"), (1, "b32")):
        sig = f"x=f32[?,?]:div=1x16:stride_div={div}x1, out=f32[?,?]:div=1x16:stride_div={div}x1, BLOCK=1024"
        acc = _accesses(compile_kernel(k, k.specialization(sig), CompileOptions(arch="sm_90a")).asm["ptx"])
        assert {a for a in acc if a.startswith("st.")} == {f"st.global.{vector}"}, (div, acc)


def test_signature_text_round_trips_divisibility():
    vector_add, fused_softmax, _ = _examples()
    k = fused_softmax.softmax_kernel
    spec = k.specialization("x=f32[?,?]:div=1x16:stride_div=16x1, out=f32[?,?], BLOCK=1024")
    assert spec["x"].type.shape_div == (1, 16) and spec["x"].type.stride_div == (16, 1)
    assert k.specialization(str(spec)) == spec
    with pytest.raises(ValueError, match="powers of two"):
        k.specialization("x=f32[?,?]:div=3x16, out=f32[?,?], BLOCK=1024")


def test_launcher_key_tells_divisible_extents_apart():
    from tilec.specialize import array_signature as _array_sig
    a = _array_sig((0x1000, (4, 1024), (1024, 1), dt.float32, 0))
    b = _array_sig((0x1000, (4, 1000), (1000, 1), dt.float32, 0))
    assert a != b and a[5] == b[5] == 0  # the device stays at index 5


@pytest.mark.slow
@pytest.mark.parametrize("which,kernel,sig,vector", [
    (0, "add_kernel", "x=f32[?]:div=16, y=f32[?]:div=16, out=f32[?]:div=16, BLOCK=1024", "v4.b32"),
    (0, "add_kernel_ptr", "x=f32[?], y=f32[?], out=f32[?], n=i32:16, BLOCK=1024", "v4.b32"),
    (1, "softmax_kernel", "x=f32[?,?]:div=1x16:stride_div=16x1, out=f32[?,?]:div=1x16:stride_div=16x1, "
                          "BLOCK=1024", "v4.b32"),
    (2, "layer_norm_kernel", "x=f16[?,?]:div=1x16:stride_div=16x1, w=f16[?]:div=16, b=f16[?]:div=16, "
                             "y=f16[?,?]:div=1x16:stride_div=16x1, mean_out=f32[?], rstd_out=f32[?], eps=f32, "
                             "BLOCK=1024", "v4.b32"),
])
def test_examples_get_16_byte_accesses(which, kernel, sig, vector):
    from tilec.compiler import compile_kernel
    k = getattr(_examples()[which], kernel)
    for arch in ("sm_80", "sm_90a"):
        ck = compile_kernel(k, k.specialization(sig), CompileOptions(arch=arch))
        acc = _accesses(ck.asm["ptx"])
        assert f"ld.global.{vector}" in acc or f"ld.global.nc.{vector}" in acc, acc
        assert f"st.global.{vector}" in acc, acc
        # no narrower access to the tiles (layer_norm's per-row mean/rstd are single f32 stores)
        assert not {a for a in acc if a.startswith("ld.")} - {f"ld.global.{vector}", f"ld.global.nc.{vector}"}, acc
        assert ck.metadata["ptxas"]["spill_stores"] == 0


def test_unknown_extent_moves_whole_groups():
    # The mask (offs < n, n of unknown divisibility) may end inside a 16-byte group: loads
    # still move whole aligned groups (selecting per element), stores move whole groups
    # where every element is wanted and single elements at the edge.
    from tilec.compiler import compile_kernel
    k = _examples()[0].add_kernel
    ck = compile_kernel(k, k.specialization("x=f32[?], y=f32[?], out=f32[?], BLOCK=1024"), CompileOptions())
    assert _accesses(ck.asm["ptx"]) == {"ld.global.v4.b32", "st.global.v4.b32", "st.global.b32"}


def test_unaligned_base_stays_scalar():
    from tilec.compiler import compile_kernel
    k = _examples()[0].add_kernel_ptr
    ck = compile_kernel(k, k.specialization("x=f32[?]:align=4, y=f32[?], out=f32[?], n=i32, BLOCK=1024"),
                        CompileOptions())
    assert "ld.global.b32" in _accesses(ck.asm["ptx"])


def test_numpy_launch_specializes_on_divisibility():
    from tilec.specialize import specialize
    k = _examples()[0].add_kernel
    x = np.zeros(4096, np.float32)
    spec, _ = specialize(k, (x, x, x), {"BLOCK": 1024})
    assert spec["x"].type.shape_div == (16,)
    spec, _ = specialize(k, (x[:4001], x, x), {"BLOCK": 1024})
    assert spec["x"].type.shape_div == (1,)
