"""A kernel specialized for 32-bit element offsets is never used for an array whose offsets
need 64 bits. The rule is `specialize.array_signature` (offsets fit in 31 bits: every extent
below 2**31 and the farthest element, sum((extent - 1) * |stride|), below 2**31); the
launcher keys its prepared launches on that signature, the compile cache on the
Specialization made from it, and an i64 view makes every offset of a view access 64-bit
(index_width) and its extents and strides 64-bit kernel parameters. Checked on the CPU with
array descriptions that are never dereferenced (no memory past 2**31 is needed);
tests/stdlib/test_large_tensors_gpu.py runs such tensors."""
from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

import tilec as tc
from tilec import dtypes as dt
from tilec.compiler import cache_key
from tilec.options import CompileOptions
from tilec.runtime.memory import DeviceArray
from tilec.specialize import ArrayInfo, array_signature, view_type_for, view_type_of

from test_launch_memo import Harness

BIG = 2 ** 31 + 3 * 4096            # elements of the GPU tests' tensors


def info(shape, strides, dtype=dt.float16, ptr=0x7F0000000000):
    return ArrayInfo(ptr, tuple(shape), tuple(strides), dtype, 0)


@pytest.mark.parametrize("shape, strides, index", [
    ((2 ** 31 - 1,), (1,), dt.int32),                    # last offset 2**31 - 2
    ((2 ** 31,), (1,), dt.int64),                        # last offset 2**31 - 1, but the extent itself does not fit
    ((BIG,), (1,), dt.int64),
    ((2 ** 19 - 1, 4096), (4096, 1), dt.int32),          # 2**31 - 4096 elements
    ((BIG // 4096, 4096), (4096, 1), dt.int64),          # 2**31 + 12288 elements as rows
    ((2 ** 19 + 3, 2048), (4096, 1), dt.int64),          # 2**30 elements, but rows 4096 apart: reach past 2**31
    ((3, 16), (2 ** 30, 1), dt.int64),                   # three rows, the last 2**31 elements in
    ((3, 16), (2 ** 30 - 8, 1), dt.int32),               # reach 2**31 - 1: still fits
    ((2, 16), (-(2 ** 31), 1), dt.int64),                # a negative stride counts by its size
    ((1, 16), (2 ** 40, 1), dt.int32),                   # a unit extent's stride is never multiplied
    ((2 ** 31, 4), (0, 1), dt.int64),                    # a broadcast extent past 2**31 (stride 0)
    ((4096, 2 ** 19 + 3), (1, 4096), dt.int64),          # column-major
])
def test_the_index_type_follows_the_farthest_offset(shape, strides, index):
    assert view_type_for(info(shape, strides)).index is index
    assert view_type_of(array_signature(info(shape, strides))).index is index


def big_and_small_device_arrays():
    """Two f32 DeviceArray descriptions alike in everything the signature reads but the
    offset width: extents divisible by 16 (or not) alike, unit last stride, same alignment."""
    small = DeviceArray(0x10000, (2 ** 20 + 16,), (4,), dt.float32, 0)
    big = DeviceArray(0x10000, (2 ** 31 + 16,), (4,), dt.float32, 0)
    s, b = array_signature(small._info), array_signature(big._info)  # noqa: SLF001
    assert s[:4] == b[:4] and s[5:] == b[5:] and s[4] != b[4]         # only the width differs
    return small, big


class WidthHarness(Harness):
    """Harness whose prepared launches are packed for the view type of their own key."""

    def prepare(self, state, key, vals, opt_items, device):
        from tilec.abi import param_slots
        from tilec.compiled import CompiledKernel
        from tilec.ir.types import ScalarType
        from tilec.runtime import launcher
        from tilec.runtime.packing import build_packer
        view = view_type_of(key[1])
        ck = CompiledKernel("k", {"ptx": ""}, {"num_warps": 1, "shared": 0},
                            param_slots([view, ScalarType(dt.int32)]), ["x", "n"])
        p = launcher.PreparedLaunch.__new__(launcher.PreparedLaunch)
        p.compiled, p.loaded, p.device, p.name = ck, None, device, "k"
        p.function, p.threads, p.shared = f"fn{len(self.prepares)}:{view.index.name}", 32, 0
        p.persistent, p.cluster, p.dependent = 0, 1, None
        p.param_names = list(state.params)
        p.pool = [build_packer(ck, p.param_names)]
        state.table[key] = p
        self.prepares.append(key)
        return p


def test_the_launcher_never_reuses_an_i32_launch_for_an_array_that_needs_i64(monkeypatch):
    run = WidthHarness(monkeypatch)
    small, big = big_and_small_device_arrays()
    for x in (small, big, small, big, small):
        run(x, 5)
    assert [fn for fn, _ptr, _n in run.launches] == ["fn0:i32", "fn1:i64", "fn0:i32", "fn1:i64", "fn0:i32"]
    assert len(run.prepares) == 2


def test_torch_tensors_take_the_same_rule(monkeypatch):
    from test_launch_memo import FakeTensor
    run = WidthHarness(monkeypatch)
    for t in (FakeTensor(0x10000, (2 ** 20 + 16,)), FakeTensor(0x10000, (2 ** 31 + 16,)),
              FakeTensor(0x10000, (2 ** 20 + 16,))):
        run(t, 5)
    assert [fn for fn, _ptr, _n in run.launches] == ["fn0:i32", "fn1:i64", "fn0:i32"]


@pytest.fixture(scope="module")
def view_copy(tmp_path_factory):
    """A view-load kernel (kernels must live in a file: the frontend reads their source)."""
    path = tmp_path_factory.mktemp("kernels") / "i64_kernels.py"
    path.write_text(textwrap.dedent('''
        import tilec as tc

        @tc.kernel
        def view_copy(x, out, BM: tc.constexpr, BN: tc.constexpr):
            i, j = tc.program_id(0), tc.program_id(1)
            tc.store(out, index=(i, j), tile=tc.load(x, index=(i, j), shape=(BM, BN)))
    '''))
    import importlib.util
    spec = importlib.util.spec_from_file_location("i64_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.view_copy


def _fake(shape, strides):
    """A numpy array of `shape` and `strides` (elements) over one element: described, never read."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float16), shape, tuple(s * 2 for s in strides))


def test_the_compile_cache_and_the_code_differ_for_i64_offsets(view_copy):
    small = _fake((2 ** 19 - 1, 4096), (4096, 1))
    big = _fake((2 ** 19 + 3, 4096), (4096, 1))
    s_spec, b_spec = view_copy.specialization(small, small, BM=2, BN=64), view_copy.specialization(big, big, BM=2, BN=64)
    assert ":i64" not in str(s_spec) and str(s_spec).startswith("x=f16[?,?]:div=1x16")
    assert str(b_spec) == str(s_spec).replace("[?,?]:", "[?,?]:i64:")
    options = CompileOptions(arch="sm_90a").validated()
    assert cache_key(view_copy, s_spec, options) != cache_key(view_copy, b_spec, options)

    narrow = view_copy.compile(s_spec, arch="sm_90a")
    wide = view_copy.compile(b_spec, arch="sm_90a")
    assert narrow is not wide
    # extents and strides arrive as 64-bit parameters, and the row offset is a 64-bit product
    params = lambda ptx: re.findall(r"\.param \.(u\d\d)(?: \.ptr)? ?\S*? ?\S* ?view_copy_param_\d+", ptx)  # noqa: E731
    assert params(narrow.asm["ptx"]).count("u32") == 6 and params(wide.asm["ptx"]).count("u32") == 0
    assert "mul.lo.s64" in wide.asm["ptx"] and "mul.lo.s64" not in narrow.asm["ptx"]
    assert [s.dtype for s in wide.params if s.kind != "ptr"] == [dt.int64] * 6
