"""tc.load(..., eviction_policy=...) on the CPU: the attribute in the IR (and through
lower_views), `ld.global.L2::cache_hint` with one `createpolicy` in the PTX for each load width,
masked loads predicated in straight-line PTX, ptxas for sm_80 and sm_90a, the interpreter's
results unchanged, and the frontend's errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilec as tc

from err_marker import assert_error_at_marker
from eviction_kernels import hinted_gather, hinted_row_sums

POLICIES = ["evict_first", "evict_last"]


def _sums_sig(dtype, policy, block=1024):
    return f"x={dtype}[?,?]:div=1x16:stride_div=16x1, out=f32[?], POLICY={policy!r}, BLOCK={block}"


def test_the_attribute_reaches_the_ir_and_survives_lower_views():
    spec = hinted_row_sums.specialization(_sums_sig("f32", "evict_first"))
    assert re.search(r'tile\.load_view [^\n]*evict = "first"', str(hinted_row_sums.ir(spec)))
    gpu = hinted_row_sums.compile(spec, arch="sm_90a", num_warps=4).asm["gpu"]
    assert re.search(r'tile\.load_masked [^\n]*evict = "first"', gpu), gpu
    plain = hinted_row_sums.compile(hinted_row_sums.specialization(_sums_sig("f32", None)), arch="sm_90a",
                                    num_warps=4)
    assert "evict = " not in plain.asm["gpu"] and "cache_hint" not in plain.asm["ptx"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "f64"])
@pytest.mark.parametrize("policy", POLICIES)
def test_view_loads_carry_the_hint_and_assemble(arch, dtype, policy):
    c = hinted_row_sums.compile(hinted_row_sums.specialization(_sums_sig(dtype, policy)), arch=arch,
                                num_warps=4)
    ptx = c.asm["ptx"]
    assert ptx.count(f"createpolicy.fractional.L2::{policy}.b64") == 1, "one policy, shared by the loads"
    loads = re.findall(r"(@%p\d+ )?ld\.global\.L2::cache_hint\.(\S+) ", ptx)
    assert loads and all(p and w == "v4.b32" for p, w in loads), loads  # predicated 16-byte vectors
    assert not re.search(r"ld\.global\.(v\d\.)?b\d+ ", ptx), "every x load is hinted"
    assert float(c.metadata["ptx_version"]) >= 7.4
    ptxas = c.metadata.get("ptxas")
    assert ptxas is not None, "ptxas was not found: install the test extra (nvidia-cuda-nvcc) or put ptxas on PATH"
    assert ptxas["spill_stores"] == 0 and ptxas["spill_loads"] == 0


@pytest.mark.parametrize("dtype,width", [("f32", "b32"), ("f16", "b16"), ("i8", "b8"), ("i64", "v2.b32")])
def test_pointer_loads_of_every_width(dtype, width):
    # the masked load moves aligned 16-byte groups (its mask, offs < n, may end inside
    # one); the broadcast load (offs * 0) one element of each width
    sig = f"x={dtype}[?], y={dtype}[?], n=i32, POLICY='evict_first', BLOCK=256"
    c = hinted_gather.compile(hinted_gather.specialization(sig), arch="sm_90a", num_warps=2)
    hinted = [ln.strip() for ln in c.asm["ptx"].splitlines() if "ld.global.L2::cache_hint" in ln]
    masked = [ln for ln in hinted if re.search(r"@%p\d+ ld\.global\.L2::cache_hint\.v4\.b32 ", ln)]
    plain = [ln for ln in hinted if ln.startswith(f"ld.global.L2::cache_hint.{width} ")]
    assert masked and plain and len(masked) + len(plain) == len(hinted), hinted
    assert all(ln.startswith("mov.b") for ln in masked), masked   # `other` first, then the predicated load
    assert c.metadata["ptxas"]["spill_stores"] == 0


@pytest.mark.parametrize("policy", POLICIES + [None, "evict_normal"])
def test_the_interpreter_ignores_the_hint(policy):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3000)).astype(np.float32)
    out = np.zeros(5, np.float32)
    with tc.interpret():
        hinted_row_sums[(5,)](x, out, POLICY=policy, BLOCK=1024)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-4)
    xi = np.arange(300, dtype=np.int32)
    y = np.zeros_like(xi)
    with tc.interpret():
        hinted_gather[(2,)](xi, y, 300, POLICY=policy, BLOCK=256)
    np.testing.assert_array_equal(y, xi + xi[0])


@tc.kernel
def bad_policy_kernel(x, out):
    t = tc.load(x, index=(0,), shape=(16,), eviction_policy="evict_soon")  # ERR
    tc.store(out, index=(0,), tile=t)


@tc.kernel
def runtime_policy_kernel(x, out, p):
    t = tc.load(x.ptr + tc.arange(0, 16), eviction_policy=p)  # ERR
    tc.store(out, index=(0,), tile=t)


@pytest.mark.parametrize("kernel,sig,fragment", [
    (bad_policy_kernel, "x=f32[?], out=f32[?]", "eviction_policy must be one of None, 'evict_normal', "
                                                "'evict_first', 'evict_last', got 'evict_soon'"),
    (runtime_policy_kernel, "x=f32[?], out=f32[?], p=i32", "eviction_policy must be a compile-time constant"),
])
def test_bad_policies_name_the_line(kernel, sig, fragment):
    assert_error_at_marker(kernel, sig, fragment)
