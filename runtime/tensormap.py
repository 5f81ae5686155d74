"""Tensor maps (CUtensorMap) for the kernels' TMA copies, encoded once per tensor and box.

A kernel that copies a view with TMA takes, after its other parameters, a 128-byte tensor
map per (view, box) (dsl/abi.py "tmap" slots). `tensor_map_writer(slot)` gives the
packer a function that writes the map of one call's array into the parameter buffer:
the map describes the tensor in storage order (innermost dimension first: extents,
strides in bytes; a column-major 2-D tensor as its transpose, so its tiles land transposed;
ranks 3 to 5 with a unit last stride, each dimension as it is),
the box (one 128-byte swizzle row wide), the 128-byte swizzle the buffers use,
and zero fill for elements outside the tensor (the views' padding). Encoding costs a
driver call, so maps are cached by (pointer, shape, strides): a launch on the same
tensors copies 128 cached bytes.

The compiler only takes TMA for views whose specialization guarantees what the driver
requires (16-byte aligned base, a unit stride, the other a multiple of 16 bytes);
a tensor that breaks it anyway gets a ValueError naming the requirement.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Dict, Tuple

from ..abi import ParamSlot

__all__ = ["TMAP_BYTES", "encode_tensor_map", "storage_dims", "tensor_map_writer"]

TMAP_BYTES = 128
_CACHE_LIMIT = 4096  # entries per slot before the cache starts afresh (stale pointers)


def _enums():
    from cuda.bindings import driver as d  # noqa: PLC0415  (imported lazily: no driver needed to import)
    t = d.CUtensorMapDataType
    # f8 has no tensor-map type of its own: TMA moves its bytes as UINT8
    dtypes = {"f16": t.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "bf16": t.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
              "f32": t.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, "f8e4m3": t.CU_TENSOR_MAP_DATA_TYPE_UINT8,
              "f8e5m2": t.CU_TENSOR_MAP_DATA_TYPE_UINT8}
    return d, dtypes


def storage_dims(shape, strides):
    """(rows, columns, row stride) of a 2-D tensor in storage order (strides in elements): a
    column-major tensor (first stride 1, last not) is described as its row-major transpose."""
    rows, cols = (max(1, int(x)) for x in shape)  # an empty tensor is never read: any extent will do
    if int(strides[1]) != 1 and int(strides[0]) == 1:
        return cols, rows, int(strides[1])
    if int(strides[1]) != 1:
        return None
    return rows, cols, int(strides[0])


def _map_dims(shape, strides, elem: int):
    """(extents, strides in bytes of every dimension but the first) of the map, innermost
    dimension first: a 2-D tensor as storage_dims describes it, a higher-rank one with a unit
    last stride as it is; None when neither holds."""
    if len(shape) == 2:
        dims = storage_dims(shape, strides)
        return None if dims is None else ([dims[1], dims[0]], [dims[2] * elem])
    if int(strides[-1]) != 1:
        return None
    # an empty tensor is never read: any extent will do
    return [max(1, int(x)) for x in reversed(shape)], [int(st) * elem for st in reversed(strides[:-1])]


def encode_tensor_map(ptr: int, shape, strides, dtype, box) -> bytes:
    """The 128 bytes of the tiled tensor map of a row- or column-major 2-D tensor, or a
    row-major (last stride 1) one of rank 3 to 5 (strides in elements), `box` in storage
    order."""
    d, dtypes = _enums()
    if dtype.name not in dtypes:
        raise TypeError(f"TMA copies f16, bf16, f32 or f8 tensors here, got {dtype.name}")
    elem = dtype.itemsize
    found = _map_dims(shape, strides, elem)
    if found is None or ptr % 16 or any(st % 16 for st in found[1]):
        raise ValueError(f"a TMA tensor needs a 16-byte aligned base, a unit last stride (or first, for a "
                         f"column-major 2-D tensor) and the other strides multiples of 16 bytes; got pointer "
                         f"{ptr:#x}, strides {tuple(strides)} (elements of {elem} bytes)")
    dims, byte_strides = found
    rank = len(dims)
    err, tmap = d.cuTensorMapEncodeTiled(
        dtypes[dtype.name], rank, ptr, [d.cuuint64_t(n) for n in dims],
        [d.cuuint64_t(max(st, 16)) for st in byte_strides],
        [d.cuuint32_t(n) for n in reversed(box)], [d.cuuint32_t(1)] * rank,
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # NONE fills zeros
    if err != d.CUresult.CUDA_SUCCESS:
        raise ValueError(f"cuTensorMapEncodeTiled failed ({err.name}) for a {'x'.join(map(str, shape))} "
                         f"{dtype.name} tensor with strides {tuple(strides)} (elements) and box {tuple(box)}")
    return ctypes.string_at(tmap.getPtr(), TMAP_BYTES)


def tensor_map_writer(slot: ParamSlot) -> Callable:
    """write(info, address): the map of the array described by `info` (ptr, shape, strides,
    dtype, device) for `slot`'s box, written at `address` (128 bytes)."""
    cache: Dict[Tuple, bytes] = {}
    box, dtype = slot.box, slot.dtype
    memmove = ctypes.memmove

    def write(info, address: int) -> None:
        key = (info[0], tuple(info[1]), tuple(info[2]))
        raw = cache.get(key)
        if raw is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            raw = cache[key] = encode_tensor_map(info[0], info[1], info[2], dtype, box)
        memmove(address, raw, TMAP_BYTES)

    return write
