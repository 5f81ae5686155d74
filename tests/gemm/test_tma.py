"""TMA feeding wgmma (sm_90a): where each box lands, the passes' output, the PTX, ptxas.

The numpy model of a 2-D tiled TMA copy with the 128-byte swizzle (box rows of 128 bytes,
16-byte chunk c of row r stored at chunk c ^ (r % 8), elements outside the tensor zero)
must place every element where the wgmma operand layout (wgmma_fragments.operand_offset
plus the address-bit swizzle that test_wgmma.py checks against the descriptors) expects it.
"""
import importlib
import re

import numpy as np
import pytest

from tilec.abi import param_slots
from tilec.compiler import compile_kernel
from tilec.ir.types import ViewType
from tilec.lowering.gpu.wgmma_fragments import b_k_major, operand_offset
from tilec.lowering.passes.tma_loads import tma_view_ok
from tilec.runtime.tensormap import storage_dims
from tilec.lowering.target import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import ArrayInfo, parse_signature, view_type_for
from tilec import dtypes as dt

from gemm_kernels import matmul

mm = importlib.import_module("tilec.stdlib_kernels.matmul")


def _tma_box_copy(tensor, row0, col0, box, smem, dst):
    """A 2-D tiled TMA copy with the 128-byte swizzle into the byte array `smem` at `dst`."""
    rows, width = box
    eb = tensor.itemsize
    for r in range(rows):
        for c in range(width):
            gr, gc = row0 + r, col0 + c
            inside = 0 <= gr < tensor.shape[0] and 0 <= gc < tensor.shape[1]
            v = tensor[gr, gc] if inside else tensor.dtype.type(0)
            byte = r * 128 + c * eb
            chunk, within = divmod(byte % 128, 16)
            addr = dst + (byte // 128) * 128 + ((chunk ^ (r % 8)) * 16) + within
            smem[addr:addr + eb] = np.frombuffer(np.array([v]).tobytes(), np.uint8)


def _wgmma_read(smem, op_idx, shape, eb, dtype):
    """The tile as wgmma's layout holds it: operand_offset, then the 128-byte address swizzle."""
    out = np.zeros(shape, dtype)
    for r in range(shape[0]):
        for c in range(shape[1]):
            if op_idx == 1 and b_k_major(eb):   # tf32/f8: B^T stored as A is, any k within a row
                off = operand_offset(0, (shape[1], shape[0]), eb, c, r)
                off ^= ((off >> 7) & 7) << 4
                out[r, c] = np.frombuffer(bytes(smem[off:off + eb]), dtype)[0]
                continue
            off = operand_offset(op_idx, shape, eb, r, c) if op_idx == 0 or c % (128 // eb) == 0 else \
                operand_offset(op_idx, shape, eb, r, c - c % (128 // eb)) + (c % (128 // eb)) * eb
            off ^= ((off >> 7) & 7) << 4
            out[r, c] = np.frombuffer(bytes(smem[off:off + eb]), dtype)[0]
    return out


@pytest.mark.parametrize("op_idx,tile", [(0, (128, 64)), (1, (64, 256)), (1, (64, 128))])
def test_tma_boxes_land_where_wgmma_reads(op_idx, tile):
    """Boxes one swizzle row wide, one per 64-column block at block * rows * 128 bytes
    (rules_tma), give the layout the descriptors describe; an edge tile reads zeros."""
    rng = np.random.default_rng(0)
    rows, cols = tile
    tensor = rng.standard_normal((rows * 2 - 24, cols * 2 - 40)).astype(np.float16)
    for ti, tj in [(0, 0), (1, 1)]:  # an inner tile, then one overhanging both edges
        smem = np.zeros(rows * cols * 2, np.uint8)
        for blk in range(cols // 64):
            _tma_box_copy(tensor, ti * rows, tj * cols + blk * 64, (rows, 64), smem, blk * rows * 128)
        want = np.zeros(tile, np.float16)
        part = tensor[ti * rows:(ti + 1) * rows, tj * cols:(tj + 1) * cols]
        want[:part.shape[0], :part.shape[1]] = part
        np.testing.assert_array_equal(_wgmma_read(smem, op_idx, tile, 2, np.float16), want)


def _random(rng, shape, dtype):
    if dtype == np.uint8:   # f8: TMA moves bytes; any bit pattern will do
        return rng.integers(1, 256, shape).astype(np.uint8)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype,op_idx,tile", [
    (np.float32, 0, (128, 32)), (np.float32, 1, (32, 256)), (np.float32, 1, (64, 128)),
    (np.uint8, 0, (64, 128)), (np.uint8, 1, (128, 256)), (np.uint8, 1, (256, 64))])
def test_tma_boxes_land_where_wgmma_reads_tf32_f8(dtype, op_idx, tile):
    """tf32 (4-byte) and f8 (1-byte) operands: A row-major, B column-major (storage N x K,
    K contiguous). B's boxes run over the storage, [BN rows, 128 bytes of K], one per
    128-byte K block at block * BN * 128 bytes: the tile lands transposed, K-major, which
    is the only B layout tf32/f8 wgmma reads; edge tiles read zeros."""
    rng = np.random.default_rng(1)
    eb = np.dtype(dtype).itemsize
    width = 128 // eb
    rows, cols = tile
    for ti, tj in [(0, 0), (1, 1)]:
        if op_idx == 0:
            tensor = _random(rng, (rows * 2 - 24, cols * 2 - width // 2), dtype)   # M x K
            logical = tensor
        else:
            storage = _random(rng, (cols * 2 - 40, rows * 2 - width // 2), dtype)  # N x K
            tensor, logical = storage, storage.T                                   # B = storage^T
        smem = np.zeros(rows * cols * eb, np.uint8)
        if op_idx == 0:
            for blk in range(cols // width):
                _tma_box_copy(tensor, ti * rows, tj * cols + blk * width, (rows, width), smem, blk * rows * 128)
        else:   # tile (ti along K, tj along N): storage rows tj * BN, columns ti * BK
            for blk in range(rows // width):
                _tma_box_copy(tensor, tj * cols, ti * rows + blk * width, (cols, width), smem, blk * cols * 128)
        want = np.zeros(tile, dtype)
        part = logical[ti * rows:(ti + 1) * rows, tj * cols:(tj + 1) * cols]
        want[:part.shape[0], :part.shape[1]] = part
        np.testing.assert_array_equal(_wgmma_read(smem, op_idx, tile, eb, dtype), want)


def test_storage_dims_describe_column_major_as_its_transpose():
    assert storage_dims((4096, 1024), (1024, 1)) == (4096, 1024, 1024)       # row-major
    assert storage_dims((4096, 1024), (1, 4096)) == (1024, 4096, 4096)       # column-major K x N
    assert storage_dims((0, 8), (8, 1)) == (1, 8, 8)                          # empty: any extent
    assert storage_dims((64, 64), (128, 2)) is None                           # no unit stride


def test_column_major_arrays_specialize_with_a_unit_first_stride():
    """What lets the tf32/f8 ring form: B = bt.T (K x N, strides (1, K)) is a view with
    strides [1, ?] and a row stride divisible by 16, which TMA (and 16-byte cp.async) take."""
    colmajor = view_type_for(ArrayInfo(0x10000, (4096, 1024), (1, 4096), dt.float32, "cuda:0"))
    assert colmajor.strides == (1, None) and colmajor.stride_div == (1, 16) and tma_view_ok(colmajor)
    rowmajor = view_type_for(ArrayInfo(0x10000, (4096, 1024), (1024, 1), dt.float32, "cuda:0"))
    assert rowmajor.strides == (None, 1)
    strided = view_type_for(ArrayInfo(0x10000, (64, 64), (128, 2), dt.float32, "cuda:0"))
    assert strided.strides == (None, None) and not tma_view_ok(strided)


def test_view_eligibility():
    ok = ViewType(dt.bfloat16, 2, (None, 1), dt.int32, align=16, stride_div=(16, 1))
    assert tma_view_ok(ok)
    assert not tma_view_ok(ViewType(dt.bfloat16, 2, (None, 1), dt.int32, align=16, stride_div=(4, 1)))  # 8-byte rows
    assert not tma_view_ok(ViewType(dt.bfloat16, 2, (None, 1), dt.int32, align=4, stride_div=(16, 1)))
    assert not tma_view_ok(ViewType(dt.bfloat16, 2, (1, None), dt.int32, align=16))   # column stride unknown
    assert tma_view_ok(ViewType(dt.bfloat16, 2, (1, None), dt.int32, align=16, stride_div=(1, 16)))
    assert tma_view_ok(ViewType(dt.float32, 2, (None, 1), dt.int32, align=16, stride_div=(16, 1)))
    assert tma_view_ok(ViewType(dt.float8e4m3, 2, (1, None), dt.int32, align=16, stride_div=(1, 16)))
    assert not tma_view_ok(ViewType(dt.float8e5m2, 2, (1, None), dt.int32, align=16, stride_div=(1, 8)))  # 8 B
    assert not tma_view_ok(ViewType(dt.float32, 2, (None, None), dt.int32, align=16, stride_div=(16, 16)))
    assert not tma_view_ok(ViewType(dt.float64, 2, (None, 1), dt.int32, align=16, stride_div=(16, 1)))


def test_tensor_map_slots_come_last():
    v = ViewType(dt.float16, 2, (None, 1), dt.int32, align=16, stride_div=(16, 1))
    slots = param_slots([v, v], [(0, (128, 64)), (1, (64, 64))])
    assert [s.kind for s in slots[-2:]] == ["tmap", "tmap"] and slots[-1].box == (64, 64)
    assert slots[-2].name == "a0_tmap128x64"
    with pytest.raises(TypeError, match="tensor map"):
        param_slots([v, v], [(1, (64,))])   # a 1-D box for a 2-D view


def _compile(kernel, sig, **opts):
    return compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch="sm_90a", **opts).validated(),
                          use_cache=False)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_stdlib_gemm_ring_is_tma(dtype):
    sig, cfg = mm.signature(4096, 4096, 4096, dtype, target="sm_90a")
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    gpu, ptx = ck.asm["gpu"], ck.asm["ptx"]
    body = gpu[gpu.index("tile.for"):gpu.index("tile.yield")]
    names = [re.match(r"\s*(?:%\S+ = )?(\S+)", ln).group(1) for ln in body.splitlines()[1:] if ln.strip()]
    assert [n for n in names if n.startswith("gpu.")] == [
        "gpu.mbarrier_wait", "gpu.wgmma", "gpu.wgmma_wait", "gpu.barrier", "gpu.mbarrier_expect",
        "gpu.tma_load", "gpu.tma_load"]
    assert "gpu.tma_origin" not in gpu and "gpu.async_copy" not in gpu
    # A: one 128x64 box; B: four 64x64 boxes; prologue (3 iterations: S - 1 ahead) and body
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 20
    assert ptx.count("mbarrier.init.shared::cta.b64") == 4
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx and "cp.async.cg" not in ptx
    assert ".param .align 64 .b8 matmul_kernel_param_15[128]" in ptx and "cvta.param" in ptx
    # A, B and the epilogue's C (tma_stores): one 128 x 64 box per column block of the tile
    assert [(s.kind, s.arg, s.box) for s in ck.params[-3:]] == [
        ("tmap", 0, (128, 64)), ("tmap", 1, (64, 64)), ("tmap", 2, (128, 64))]
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 4
    assert "st.global" not in ptx
    if find_ptxas():
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == rep["spill_loads"] == 0 and not rep["warnings"], rep


@pytest.mark.slow
@pytest.mark.parametrize("sig,opts", [
    # a row stride not known to be a multiple of 16 bytes: the driver could not encode a map
    ("a=bf16[?,?]:div=16x16:stride_div=4x1, b=bf16[?,?]:div=16x16:stride_div=16x1, c=bf16[?,?], "
     "BM=128, BN=128, BK=64, TF32=False", {"num_warps": 4, "num_stages": 4}),
    ("a=bf16[?,?]:div=16x16:stride_div=16x1, b=bf16[?,?]:div=16x16:stride_div=16x1, c=bf16[?,?], "
     "BM=128, BN=128, BK=64, TF32=False", {"num_warps": 4, "num_stages": 4, "tma": False}),
    ("a=bf16[?,?]:div=16x16:stride_div=16x1, b=bf16[?,?]:div=16x16:stride_div=16x1, c=bf16[?,?], "
     "BM=128, BN=128, BK=64, TF32=False", {"num_warps": 4, "num_stages": 2}),   # no wgmma in flight
])
def test_other_rings_keep_cp_async(sig, opts):
    ck = _compile(matmul, sig, **opts)
    assert "cp.async.bulk.tensor" not in ck.asm["ptx"] and "cp.async.cg" in ck.asm["ptx"]
    assert not any(s.kind == "tmap" for s in ck.params)


@pytest.mark.slow
def test_test_kernel_gets_tma_too():
    ck = _compile(matmul, "a=f16[?,?]:div=16x16:stride_div=16x1, b=f16[?,?]:div=16x16:stride_div=16x1, "
                          "c=f16[?,?], BM=128, BN=128, BK=64, TF32=False", num_warps=4, num_stages=4)
    assert ck.asm["ptx"].count("cp.async.bulk.tensor.2d") == 3 * 4   # (A + two B boxes) x (3 prologue + body)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,box_b,copies", [
    # BK = 32 tf32 / 128 f8 is one swizzle row of K: A one 128 x BK box, B one 256 x BK box;
    # (A + B) x (3 prologue + body)
    ("f32", (256, 32), 2 * 4), ("f8e4m3", (256, 128), 2 * 4), ("f8e5m2", (256, 128), 2 * 4)])
def test_stdlib_tf32_f8_ring_is_tma_with_column_major_b(dtype, box_b, copies):
    sig, cfg = mm.signature(4096, 4096, 4096, dtype, target="sm_90a", allow_tf32=dtype == "f32",
                            scaled=dtype != "f32", b_col_major=True)
    assert "b=" + dtype + "[?,?]:strides=1x?" in sig
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    gpu, ptx = ck.asm["gpu"], ck.asm["ptx"]
    body = gpu[gpu.index("tile.for"):gpu.index("tile.yield")]
    assert "gpu.tma_load" in body and "gpu.async_copy" not in gpu and "gpu.local_store" not in body
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster") == copies and "cp.async.cg" not in ptx
    loads = [("tmap", 0, (cfg.bm, box_b[1])), ("tmap", 1, box_b)]
    # the result leaves through TMA: bf16 (f8's) in 4 boxes of 128 x 64; tf32's f32 in 8 of
    # 128 x 32, two rounds of 4 through a 64 KB scratch
    width = 32 if dtype == "f32" else 64
    assert [(s.kind, s.arg, s.box) for s in ck.params[-3:]] == loads + [("tmap", 2, (cfg.bm, width))]
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 256 // width
    assert ptx.count("cp.async.bulk.wait_group.read 0") == (2 if dtype == "f32" else 1) and "st.global" not in ptx
    assert ck.metadata["shared"] <= 200 * 1024   # the scratch is no more than the dead ring
    if find_ptxas():
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == rep["spill_loads"] == 0 and not rep["warnings"], rep


@pytest.mark.slow
def test_row_major_b_of_tf32_is_not_copied_by_tma():
    """A row-major B would have to be transposed into tf32's K-major buffer: a 2-D TMA
    copy cannot (nor can cp.async), so the ring does not form and no copy is TMA."""
    sig, cfg = mm.signature(4096, 4096, 4096, "f32", target="sm_90a", allow_tf32=True)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    assert not any(s.kind == "tmap" and s.arg in (0, 1) for s in ck.params)
    assert "cp.async.bulk.tensor.2d.shared::cluster" not in ck.asm["ptx"] and "wgmma.mma_async" in ck.asm["ptx"]


@pytest.mark.parametrize("dtype,shape", [(np.float16, (128, 256)), (np.float32, (64, 64)), (np.float16, (8, 64))])
def test_tma_store_scratch_is_what_the_boxes_read(dtype, shape):
    """Every element a gpu.tma_store writes into its scratch (SharedLayout.for_swizzle(128))
    sits where the box of its column block reads it: block b at b * rows * 128 bytes, row r
    at r * 128, its 16-byte chunk XOR (r % 8) (the tensor map's 128-byte swizzle)."""
    from tilec.lowering.gpu.layouts import NumpyOps, SharedLayout
    eb = np.dtype(dtype).itemsize
    rows, cols = shape
    width = 128 // eb
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    got = SharedLayout.for_swizzle(128, eb).offset(shape, (r, c), NumpyOps()) * eb
    byte = (c % width) * eb
    want = (c // width) * rows * 128 + r * 128 + (((byte // 16) ^ (r % 8)) * 16) + byte % 16
    assert np.array_equal(got, want)


@pytest.mark.slow
def test_persistent_tma_off_or_sanitizer_mode_keeps_plain_epilogue_stores():
    sig, cfg = mm.signature(4096, 4096, 4096, "bf16", target="sm_90a")
    for opts in ({"persistent": True}, {"tma": False}, {"initcheck": True}):
        ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **opts)
        ptx = ck.asm["ptx"]
        assert "bulk_group" not in ptx and "st.global" in ptx, opts


@pytest.mark.parametrize("tile", [(128, 64), (64, 64), (256, 64)])
def test_tma_boxes_of_a_column_major_a_land_where_m_major_wgmma_reads(tile):
    """A 16-bit A of a column-major view (storage K x M, M contiguous): boxes of [BK rows, 64
    of M] over the storage, one per 64-row block of M at block * BK * 128 bytes (rules_tma),
    give the M-major operand layout (imm-trans-a = 1) the descriptors describe; an edge tile
    reads zeros."""
    rng = np.random.default_rng(2)
    rows, cols = tile                                             # BM x BK
    storage = rng.standard_normal((cols * 2 - 40, rows * 2 - 24)).astype(np.float16)   # K x M
    logical = storage.T                                           # A = storage^T, M x K
    for ti, tj in [(0, 0), (1, 1)]:
        smem = np.zeros(rows * cols * 2, np.uint8)
        for blk in range(rows // 64):   # tile (ti along M, tj along K): storage rows tj * BK, columns ti * BM
            _tma_box_copy(storage, tj * cols, ti * rows + blk * 64, (cols, 64), smem, blk * cols * 128)
        got = np.zeros(tile, np.float16)
        for r in range(rows):
            for c in range(cols):
                off = operand_offset(0, tile, 2, r - r % 64, c, False) + (r % 64) * 2
                off ^= ((off >> 7) & 7) << 4
                got[r, c] = np.frombuffer(bytes(smem[off:off + 2]), np.float16)[0]
        want = np.zeros(tile, np.float16)
        part = logical[ti * rows:(ti + 1) * rows, tj * cols:(tj + 1) * cols]
        want[:part.shape[0], :part.shape[1]] = part
        np.testing.assert_array_equal(got, want)


_WGMMA_TRANS = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.b?f16\.b?f16 \{[^}]*\}, \S+, \S+, "
                          r"p, 1, 1, (\d), (\d);")


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m,n,k", [(2000, 1040, 264), (128256, 2048, 1024)])
def test_stdlib_gemm_column_major_a_is_tma_and_m_major(dtype, m, n, k):
    """matmul(x.T, y) (A column-major, M contiguous) on sm_90a: A's tiles come by TMA over
    the storage (boxes of [BK, 64 of M]) into an M-major buffer that wgmma reads with
    imm-trans-a = 1; no cp.async and no element-wise loads of A; ptxas clean."""
    sig, cfg = mm.signature(m, n, k, dtype, target="sm_90a", a_col_major=True)
    assert sig.startswith(f"a={dtype}[?,?]:strides=1x?")
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    gpu, ptx = ck.asm["gpu"], ck.asm["ptx"]
    assert [(s.arg, s.box) for s in ck.params if s.kind == "tmap"][:2] == [(0, (cfg.bk, 64)), (1, (cfg.bk, 64))]
    # (A's BM / 64 boxes + B's BN / 64) x (S - 1 prologue copies + the body's)
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster") == (cfg.bm + cfg.bn) // 64 * cfg.num_stages
    assert "cp.async.cg" not in ptx and "gpu.local_store" not in gpu[gpu.index("tile.for"):gpu.index("tile.yield")]
    trans = _WGMMA_TRANS.findall(ptx)
    assert trans and set(trans) == {("1", "1")}, set(trans)    # trans-a = 1 (M-major), trans-b = 1 (N-major)
    assert "order = [1, 2, 0]" in gpu.split("gpu.alloc", 1)[1].split("\n")[0]   # A (first): M contiguous
    if find_ptxas():
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == rep["spill_loads"] == 0 and not rep["warnings"], rep


def test_stdlib_gemm_column_major_a_without_tma_copies_16_bytes_along_m():
    """tma=False: the same M-major buffer is filled by 16-byte cp.async along M."""
    sig, cfg = mm.signature(2000, 1040, 264, "bf16", target="sm_90a", a_col_major=True)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages, tma=False)
    gpu, ptx = ck.asm["gpu"], ck.asm["ptx"]
    assert "cp.async.bulk.tensor.2d.shared::cluster" not in ptx and "cp.async.cg.shared.global" in ptx
    a_buf = gpu.split("gpu.alloc", 1)[1].split("\n")[0]     # A's buffer, allocated first
    assert f"shape = [{cfg.num_stages}, {cfg.bm}, {cfg.bk}]" in a_buf and "order = [1, 2, 0]" in a_buf
    a_copies = [ln for ln in gpu.splitlines() if "gpu.async_copy %0," in ln]
    assert a_copies and all("vec = 8" in ln for ln in a_copies)   # 8 bf16 = 16 bytes along M
    assert "gpu.local_store" not in gpu and set(_WGMMA_TRANS.findall(ptx)) == {("1", "1")}


_BULK_COPY = re.compile(r"cp\.async\.bulk\.tensor\.2d\S* \[%r\d+\], \[(%rd\d+), \{(%r\d+), (%r\d+)\}\]")


@pytest.mark.parametrize("m,n,k", [(1000, 520, 264), (2000, 1040, 264)])
def test_column_major_a_boxes_are_addressed_over_the_storage(m, n, k):
    """A column-major A's map runs over the storage (K x M): its copies address (m0, k0), M
    innermost, for square 64 x 64 tiles too (the shapes' comparison once left those at
    (k0, m0): wrong products on an H200). The first copies of the prologue are at k0 = 0, so
    every map's outer coordinate there is the constant 0 and A's inner one is not."""
    sig, cfg = mm.signature(m, n, k, "bf16", target="sm_90a", a_col_major=True)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    ptx = ck.asm["ptx"]
    trans = _WGMMA_TRANS.findall(ptx)
    assert trans and set(trans) == {("1", "1")}
    zeros = set(re.findall(r"mov\.b32 \t?(%r\d+), 0;", ptx))
    first = {}
    for tmap, inner, outer in _BULK_COPY.findall(ptx):
        first.setdefault(tmap, (inner, outer))
    a_map, b_map = sorted(first, key=lambda r: int(r[3:]))[:2]
    assert first[a_map][1] in zeros and first[a_map][0] not in zeros, first
    assert first[b_map][0] not in zeros, first    # B (K x N, row-major): (n0, k0)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m,n,k", [(4096, 128256, 2048), (1000, 520, 264)])
def test_column_major_16_bit_b_is_tma_into_its_k_major_buffer(dtype, m, n, k):
    """x @ w.T of a row-major w (a linear layer, the logits of linear_cross_entropy): B's
    storage is N x K, K contiguous, which accelerate_dot keeps K-major (trans-b = 0); TMA
    copies it as it lies, boxes of [BN, 64 of K], as it does tf32/f8's K-major B."""
    sig, cfg = mm.signature(m, n, k, dtype, target="sm_90a", b_col_major=True)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    gpu, ptx = ck.asm["gpu"], ck.asm["ptx"]
    assert [(s.arg, s.box) for s in ck.params if s.kind == "tmap"][:2] == [(0, (cfg.bm, 64)), (1, (cfg.bn, 64))]
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster") == 2 * cfg.num_stages and "cp.async.cg" not in ptx
    body = gpu[gpu.index("tile.for"):gpu.index("tile.yield")]
    assert "gpu.local_store" not in body
    trans = _WGMMA_TRANS.findall(ptx)
    assert trans and set(trans) == {("0", "0")}, set(trans)   # K-major A and B
    if find_ptxas():
        rep = ck.metadata["ptxas"]
        assert rep["spill_stores"] == rep["spill_loads"] == 0 and not rep["warnings"], rep


@pytest.mark.parametrize("a_col_major,trans_a", [(False, "0"), (True, "1")])
def test_only_a_column_major_a_sets_trans_a(a_col_major, trans_a):
    sig, cfg = mm.signature(4096, 4096, 4096, "bf16", target="sm_90a", a_col_major=a_col_major)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    assert set(_WGMMA_TRANS.findall(ck.asm["ptx"])) == {(trans_a, "1")}


def test_misaligned_column_major_a_stays_k_major():
    """M = 1001: A's columns are not 16-byte aligned, so neither TMA nor 16-byte cp.async can
    copy it as it lies; it goes through registers into the K-major buffer as before."""
    sig, cfg = mm.signature(1001, 130, 72, "f16", target="sm_90a", a_col_major=True)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    assert not any(s.kind == "tmap" and s.arg == 0 for s in ck.params)
    assert set(_WGMMA_TRANS.findall(ck.asm["ptx"])) == {("0", "1")}


def test_a_buffer_that_does_not_lie_as_its_view_gets_no_tma(monkeypatch):
    """tma_loads marks a column-major 16-bit A expecting accelerate_dot's M-major buffer;
    were the buffer K-major (here forced), pipeline_loads leaves the group to plain stores
    rather than a TMA copy that cannot transpose (gpu.tma_load's verifier would refuse it)."""
    ad = importlib.import_module("tilec.lowering.passes.accelerate_dot")
    monkeypatch.setattr(ad, "_a_k_major", lambda a: None)
    sig, cfg = mm.signature(1000, 520, 264, "bf16", target="sm_90a", a_col_major=True)
    ck = _compile(mm.matmul_kernel, sig, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    assert not any(s.kind == "tmap" and s.arg in (0, 1) for s in ck.params)
    assert "cp.async.bulk.tensor.2d.shared::cluster" not in ck.asm["ptx"]
    assert set(_WGMMA_TRANS.findall(ck.asm["ptx"])) == {("0", "1")}
