"""Scalar kernel parameters: the packer writes exactly the bytes of the PTX parameter that
codegen declares, for every scalar a user can pass (Python bool/int/float, numpy scalars)."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import tilec as tc
from tilec.runtime import packing


@tc.kernel
def store_scalar(out, s, out2, t):
    tc.store(out.ptr, s)
    tc.store(out2.ptr, t)


_PTX_BYTES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "f32": 4, "f64": 8, "s8": 1, "s16": 2, "s32": 4,
              "s64": 8, "b8": 1, "b16": 2, "b32": 4, "b64": 8}

# (tilec dtype, a value a user passes, the little-endian bytes the kernel must receive)
CASES = [
    ("i1", True, b"\x01"), ("i1", np.bool_(True), b"\x01"), ("i1", False, b"\x00"),
    ("i8", np.int8(-3), np.int8(-3).tobytes()), ("i16", np.int16(-300), np.int16(-300).tobytes()),
    ("i32", -5, np.int32(-5).tobytes()), ("i32", np.int32(7), np.int32(7).tobytes()),
    ("i64", -(2 ** 40), np.int64(-(2 ** 40)).tobytes()), ("u8", np.uint8(250), b"\xfa"),
    ("u16", np.uint16(65000), np.uint16(65000).tobytes()), ("u32", np.uint32(2 ** 32 - 1), b"\xff" * 4),
    ("u64", np.uint64(2 ** 64 - 1), b"\xff" * 8), ("f16", np.float16(1.5), np.float16(1.5).tobytes()),
    ("bf16", 2.5, b"\x20\x40"), ("f32", 1.25, np.float32(1.25).tobytes()),
    ("f32", np.float32(3.5), np.float32(3.5).tobytes()), ("f64", np.float64(1e300), np.float64(1e300).tobytes()),
]


def _param_bytes(ptx: str, index: int) -> int:
    """Size of the entry's parameter `index` as declared in the PTX."""
    decls = re.findall(r"\.param (?:\.align \d+ )?\.(\w+) \w+_param_(\d+)(?:\[(\d+)\])?", ptx)
    for ty, i, count in decls:
        if int(i) == index:
            return int(count) if count else _PTX_BYTES[ty]
    raise AssertionError(f"no parameter {index} in the PTX")


@pytest.fixture(scope="module")
def compiled_by_dtype():
    import os
    old = os.environ.get("TILEC_SKIP_PTXAS")
    os.environ["TILEC_SKIP_PTXAS"] = "1"
    try:
        return {d: store_scalar.compile(f"out={d}[?], s={d}, out2=i32[?], t=i32", arch="sm_90a")
                for d in sorted({c[0] for c in CASES})}
    finally:
        if old is None:
            del os.environ["TILEC_SKIP_PTXAS"]
        else:
            os.environ["TILEC_SKIP_PTXAS"] = old


@pytest.mark.parametrize("dtype,value,want", CASES, ids=[f"{c[0]}-{type(c[1]).__name__}" for c in CASES])
def test_packed_bytes_match_the_ptx_declaration(compiled_by_dtype, dtype, value, want):
    ck = compiled_by_dtype[dtype]
    slot = next(k for k, s in enumerate(ck.params) if s.kind == "scalar" and s.arg == 1)
    size = _param_bytes(ck.asm["ptx"], slot)
    assert ctypes.sizeof(packing.field_type(ck.params[slot])) == size == len(want)
    pack, addr = packing.build_packer(ck, ["out", "s", "out2", "t"])
    view = (0x1000, (1,), (1,), None, 0)
    pack([None, value, None, -123456], [view, None, view, None])
    arr = (ctypes.c_void_p * len(ck.params)).from_address(addr)
    assert ctypes.string_at(arr[slot], size) == want
    # the parameter after it is intact and at its own address
    t_slot = next(k for k, s in enumerate(ck.params) if s.kind == "scalar" and s.arg == 3)
    assert ctypes.string_at(arr[t_slot], 4) == np.int32(-123456).tobytes()


GPU_CASES = [c for c in CASES if c[0] != "bf16"] + [("i64", 2 ** 40 + 3, None), ("i32", -(2 ** 31), None)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,value,_", GPU_CASES, ids=[f"{c[0]}-{c[1]!r}" for c in GPU_CASES])
def test_kernel_stores_each_scalar_kind(gpu, cache_dir, dtype, value, _):
    np_dtype = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
                "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16,
                "f32": np.float32, "f64": np.float64}[dtype]
    out = tc.from_numpy(np.zeros(1, np_dtype))
    out2 = tc.from_numpy(np.zeros(1, np.int32))
    store_scalar[(1,)](out, value, out2, 987654)
    got = out.to_numpy()[0]
    assert got == np_dtype(value) and got.dtype == np.dtype(np_dtype)
    assert out2.to_numpy()[0] == 987654
