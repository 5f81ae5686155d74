"""tc.load(..., realign=True) on the CPU: the two-block read and shift (codegen/realign.py)
JIT-compiled for the host against numpy for every element size, group width, offset and
mask; the attribute through axis_info; the PTX (two aligned 16-byte loads, no element
loads), ptxas for sm_80 and sm_90a; the interpreter's results; the frontend's errors."""
from __future__ import annotations

import ctypes
import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from llvmlite import ir

import tilec as tc
from tilec.ir import tile_ops as T
from tilec.lowering.codegen.realign import read_blocks, shift_blocks

from err_marker import assert_error_at_marker
from hostjit import _ENGINES, _host
from realign_kernels import shifted_copy, shifted_copy_full, shifted_windows

I8, I64 = ir.IntType(8), ir.IntType(64)


class _HostCtx:
    """What read_blocks / shift_blocks use of the codegen context: a builder and intrinsics."""

    def __init__(self, module, builder):
        self.module, self.builder = module, builder

    def intrinsic(self, name, ret, args):
        fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(ret, [a.type for a in args]),
                                                          name)
        return self.builder.call(fn, list(args))


_GROUPS = {}


def _group_fn(itemsize: int, vec: int, masked: bool, uniform: bool):
    """f(ptr, masks, out, preds): out <- the group at ptr; preds[0:2] <- the blocks' predicates
    (1 where read; an absent predicate reads always)."""
    key = (itemsize, vec, masked, uniform)
    if key in _GROUPS:
        return _GROUPS[key]
    mod = ir.Module(name="realign_host")
    ptr = ir.PointerType()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr] * 4), "group")
    b = ir.IRBuilder(fn.append_basic_block())
    src, masks_p, out_p, preds_p = fn.args
    ety = ir.IntType(8 * itemsize)
    vty = ety if vec == 1 else ir.VectorType(ety, vec)
    masks = None
    if masked:
        masks = [b.trunc(b.load(b.gep(masks_p, [ir.Constant(I64, e)], source_etype=I8), typ=I8), ir.IntType(1))
                 for e in range(vec)]
    seen = []

    def read_block(p, wty, pred):
        slot = b.gep(preds_p, [ir.Constant(I64, len(seen))], source_etype=I8)
        seen.append(pred)
        b.store(ir.Constant(I8, 1) if pred is None else b.zext(pred, I8), slot)
        v = b.load(p, typ=wty)  # the test's buffer is padded: an unwanted block reads junk, not a fault
        return v if pred is None else b.select(pred, v, ir.Constant(wty, None))
    ctx = _HostCtx(mod, b)
    blocks, s = read_blocks(ctx, src, vty, masks, uniform, read_block)
    v = shift_blocks(ctx, blocks, s, vty)
    b.store(v, out_p)
    b.ret_void()
    m = llvm.parse_assembly(str(mod))
    m.verify()
    eng = llvm.create_mcjit_compiler(m, _host())
    eng.finalize_object()
    _ENGINES.append(eng)
    f = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4)(eng.get_function_address("group"))
    _GROUPS[key] = f
    return f


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.sampled_from([(1, 4), (1, 8), (1, 16), (2, 2), (2, 4), (2, 8), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2)]),
       st.data())
def test_group_reads_the_blocks_it_needs_and_shifts_into_place(shape, data):
    itemsize, vec = shape
    nbytes = itemsize * vec
    s = data.draw(st.integers(0, vec - 1)) * itemsize  # an element pointer: s is a multiple of the element
    mode = data.draw(st.sampled_from(["none", "uniform", "varied"]))
    if mode == "uniform":
        wanted = [data.draw(st.booleans())] * vec
    elif mode == "varied":
        wanted = data.draw(st.lists(st.booleans(), min_size=vec, max_size=vec))
    else:
        wanted = [True] * vec
    raw = np.random.default_rng(nbytes * 31 + s).integers(0, 256, 128, dtype=np.uint8)
    base = (-raw.ctypes.data) % 16 + 32  # a 16-byte boundary well inside the buffer
    masks = np.array(wanted, np.uint8)
    out = np.zeros(nbytes, np.uint8)
    preds = np.full(2, 7, np.uint8)
    f = _group_fn(itemsize, vec, mode != "none", mode == "uniform")
    f(raw.ctypes.data + base + s, masks.ctypes.data, out.ctypes.data, preds.ctypes.data)
    want = raw[base + s:base + s + nbytes]
    for e, w in enumerate(wanted):
        if w:
            np.testing.assert_array_equal(out[e * itemsize:(e + 1) * itemsize], want[e * itemsize:(e + 1) * itemsize])
    in_block = [(s + e * itemsize) // nbytes for e in range(vec)]
    if mode == "none":
        assert preds[0] == 1 and preds[1] == (s != 0)
    else:
        # exactly the blocks holding a wanted element's bytes are read
        assert preds.tolist() == [int(any(w and k == blk for w, k in zip(wanted, in_block))) for blk in (0, 1)]


# --------------------------------------------------------------------------- the compiler

def _copy_sig(dtype, realign, block=1024):
    return f"x={dtype}[?], y={dtype}[?], shift=i32, n=i32, REALIGN={realign}, BLOCK={block}"


def test_the_attribute_reaches_axis_info():
    ir_text = str(shifted_copy.ir(shifted_copy.specialization(_copy_sig("bf16", True))))
    assert re.search(r"tile\.load_masked [^\n]*realign = true", ir_text), ir_text
    c = shifted_copy.compile(shifted_copy.specialization(_copy_sig("bf16", True)), arch="sm_90a", num_warps=4)
    assert re.search(r"tile\.load_masked [^\n]*_aligned_vec = 1[^\n]*_vec = 8|"
                     r"tile\.load_masked [^\n]*_vec = 8[^\n]*_aligned_vec = 1", c.asm["gpu"]), c.asm["gpu"]
    plain = shifted_copy.compile(shifted_copy.specialization(_copy_sig("bf16", False)), arch="sm_90a", num_warps=4)
    assert "realign = " not in plain.asm["gpu"] and "_aligned_vec" not in plain.asm["gpu"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype,per_thread", [("bf16", 8), ("f16", 8), ("f32", 4), ("i8", 16), ("f64", 2)])
@pytest.mark.parametrize("kernel", ["masked", "full", "windows"])
def test_realigned_loads_move_aligned_16_byte_blocks(arch, dtype, per_thread, kernel):
    if kernel == "masked":
        k, sig = shifted_copy, _copy_sig(dtype, True)
    elif kernel == "full":
        k, sig = shifted_copy_full, f"x={dtype}[?], y={dtype}[?], shift=i32, REALIGN=True, BLOCK=1024"
    else:
        k, sig = shifted_windows, (f"x={dtype}[?], y={dtype}[?], lead=i32, n=i32, REALIGN=True, GROUP={per_thread}, "
                                   "BLOCK=1024")
    c = k.compile(k.specialization(sig), arch=arch, num_warps=4)
    ptx = c.asm["ptx"]
    loads = re.findall(r"ld\.global\.(\S+)", ptx)
    # two aligned blocks per thread's group of 16 bytes: 1024 elements over 128 threads
    # (i8: one group of 16 per thread, on 64 of them)
    per_thread_elems = max(per_thread, 1024 // 128)
    assert loads == ["v4.b32"] * (2 * per_thread_elems // per_thread), loads
    plain = k.compile(k.specialization(sig.replace("REALIGN=True", "REALIGN=False")), arch=arch, num_warps=4)
    plain_loads = re.findall(r"ld\.global\.(\S+)", plain.asm["ptx"])
    width = {"bf16": 16, "f16": 16, "f32": 32, "i8": 8, "f64": 64}[dtype]
    assert plain_loads and set(plain_loads) == {f"b{width}"}, plain_loads  # element by element
    assert c.metadata["ptxas"]["spill_stores"] == 0


def test_a_proven_alignment_needs_no_realign():
    # shift divisible by 16 elements: the load is aligned as it stands, one block per group
    sig = "x=bf16[?], y=bf16[?], shift=i32:16, n=i32, REALIGN=True, BLOCK=1024"
    c = shifted_copy.compile(shifted_copy.specialization(sig), arch="sm_90a", num_warps=4)
    assert re.findall(r"ld\.global\.(\S+)", c.asm["ptx"]) == ["v4.b32"]
    assert "prmt" not in c.asm["ptx"]


def test_a_staged_copy_of_a_realigned_load_moves_what_alignment_proves():
    from tilec.lowering.passes.axis_info import copy_vec
    op = T.LoadMaskedOp.__new__(T.LoadMaskedOp)
    op.attrs = {"realign": True, "_vec": 8, "_aligned_vec": 2}
    assert copy_vec(op) == 2
    op.attrs["_mask_vec"] = 1
    assert copy_vec(op) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64])
@pytest.mark.parametrize("realign", [True, False])
def test_the_interpreter_reads_the_same_values(dtype, realign):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(3000) * 50).astype(dtype)
    for shift, n in ((0, 2000), (1, 2047), (7, 2048), (13, 1)):
        y = np.zeros(2048, dtype)
        with tc.interpret():
            shifted_copy[(2,)](x, y, shift, n, REALIGN=realign, BLOCK=1024)
        np.testing.assert_array_equal(y[:n], x[shift:shift + n])
        assert (y[n:] == 0).all()
    y = np.zeros(2048, dtype)
    with tc.interpret():
        shifted_copy_full[(2,)](x, y, 5, REALIGN=realign, BLOCK=1024)
    np.testing.assert_array_equal(y, x[5:5 + 2048])


@tc.kernel
def realigned_view_kernel(x, out):
    t = tc.load(x, index=(0,), shape=(16,), realign=True)  # ERR
    tc.store(out, index=(0,), tile=t)


@tc.kernel
def runtime_realign_kernel(x, out, r):
    t = tc.load(x.ptr + tc.arange(0, 16), realign=r)  # ERR
    tc.store(out, index=(0,), tile=t)


@tc.kernel
def non_bool_realign_kernel(x, out):
    t = tc.load(x.ptr + tc.arange(0, 16), realign=2)  # ERR
    tc.store(out, index=(0,), tile=t)


@pytest.mark.parametrize("kernel,sig,fragment", [
    (realigned_view_kernel, "x=f32[?], out=f32[?]", "realign= is for pointer loads"),
    (runtime_realign_kernel, "x=f32[?], out=f32[?], r=i32", "realign must be a compile-time constant"),
    (non_bool_realign_kernel, "x=f32[?], out=f32[?]", "realign must be True or False, got 2"),
])
def test_bad_realign_names_the_line(kernel, sig, fragment):
    assert_error_at_marker(kernel, sig, fragment)
