"""Argument packers: built once per prepared launch, run on every call.

A packer is a small generated function that writes each PTX parameter
(`compiled.params`, from dsl/abi.param_slots) into one field of a ctypes
structure allocated once. cuLaunchKernel receives the address of a prebuilt
array that points at those fields, so a call costs one field store per
parameter and no tuples or per-call type conversion.

Each field has exactly the size and alignment of the PTX parameter that codegen
declares for it (i1 and i8/u8 `.u8`, i16/u16 `.u16`, f16/bf16 `.b8[2]`, ...):
the driver copies that many bytes from each address. Python and numpy bools,
ints and floats of every width are accepted; ctypes wraps integers to the width.
"""
from __future__ import annotations

import ctypes
from typing import List

import numpy as np

from ..abi import ParamSlot
from ..compiled import CompiledKernel
from .tensormap import TMAP_BYTES, tensor_map_writer

__all__ = ["build_packer", "build_address_writer", "field_type"]


def _f16_bits(v) -> int:
    return int(np.asarray(v, dtype=np.float16).view(np.uint16))


def _bf16_bits(v) -> int:
    bits = int(np.asarray(v, dtype=np.float32).view(np.uint32))
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _f8_bits(name):
    def conv(v) -> int:
        try:
            import ml_dtypes  # noqa: PLC0415
        except ImportError:
            raise TypeError(f"passing an {name} scalar needs ml_dtypes installed") from None
        t = {"f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}[name]
        return int(np.asarray(v, dtype=np.float32).astype(t).view(np.uint8))
    return conv


_CONVERT = {"f16": _f16_bits, "bf16": _bf16_bits, "f8e4m3": _f8_bits("f8e4m3"), "f8e5m2": _f8_bits("f8e5m2")}


# c_bool stores any truth value (a numpy bool has no __index__) as one byte 0/1.
_FIELD = {"i1": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
          "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32,
          "u64": ctypes.c_uint64, "f16": ctypes.c_uint16, "bf16": ctypes.c_uint16, "f8e4m3": ctypes.c_uint8,
          "f8e5m2": ctypes.c_uint8, "f32": ctypes.c_float, "f64": ctypes.c_double}


def field_type(slot: ParamSlot):
    """The ctypes type that holds one parameter: the size of its PTX declaration."""
    if slot.kind == "ptr":
        return ctypes.c_uint64
    if slot.kind == "tmap":
        return ctypes.c_uint8 * TMAP_BYTES
    name = slot.dtype.name if slot.dtype is not None else "i64"
    if name not in _FIELD:
        raise TypeError(f"no kernel-parameter encoding for {name}")
    return _FIELD[name]


def _param_index(compiled: CompiledKernel, params: List[str]) -> List[int]:
    """Kernel-parameter index of each run-time argument of the compiled entry."""
    if not compiled.arg_names:  # a hand-built CompiledKernel: run-time args are the parameters
        return list(range(len(params)))
    where = {n: i for i, n in enumerate(params)}
    missing = [n for n in compiled.arg_names if n not in where]
    if missing:
        raise ValueError(f"kernel '{compiled.name}' was compiled with arguments {missing} that the "
                         f"Python function does not have")
    return [where[n] for n in compiled.arg_names]


def build_packer(compiled: CompiledKernel, params: List[str]):
    """(pack(vals, infos, grid=None), address of the kernelParams array) for `compiled`.

    `vals` are the call's arguments in parameter order; `infos[i]` is
    (ptr, shape, strides_in_elements, dtype, device) for array parameters; `grid` is
    the requested (gx, gy, gz) that a persistent kernel takes in its "grid" slots.
    """
    slots = compiled.params
    pidx = _param_index(compiled, params)
    Buffer = _buffer_type(compiled)
    buf = Buffer()
    base = ctypes.addressof(buf)
    addrs = (ctypes.c_void_p * max(len(slots), 1))(
        *[base + getattr(Buffer, f"f{k}").offset for k in range(len(slots))])

    lines = ["def pack(vals, infos, grid=None):"]
    env = {"buf": buf}
    for k, s in enumerate(slots):
        if s.kind == "grid":  # the requested grid's extent along s.dim (persistent kernels)
            lines.append(f"    buf.f{k} = grid[{s.dim}]")
            continue
        i = pidx[s.arg]
        if s.kind == "ptr":
            lines.append(f"    buf.f{k} = infos[{i}][0]")
        elif s.kind == "shape":
            lines.append(f"    buf.f{k} = infos[{i}][1][{s.dim}]")
        elif s.kind == "stride":
            lines.append(f"    buf.f{k} = infos[{i}][2][{s.dim}]")
        elif s.kind == "tmap":  # encoded by the driver, cached per tensor (runtime/tensormap.py)
            env[f"tmap{k}"] = tensor_map_writer(s)
            lines.append(f"    tmap{k}(infos[{i}], {base + getattr(Buffer, f'f{k}').offset})")
        else:
            lines.append(_scalar_line(k, s, f"vals[{i}]", env))
    pack = _define("pack", lines, env, f"packer for {compiled.name}")
    pack.buffer, pack.addresses = buf, addrs  # keep both alive with the function
    return pack, (ctypes.addressof(addrs) if slots else 0)


def _buffer_type(compiled: CompiledKernel):
    """The ctypes Structure of `compiled`'s parameter buffer: field f{k} holds slot k."""
    return type(f"Params_{compiled.name}", (ctypes.Structure,),
                {"_fields_": [(f"f{k}", field_type(s)) for k, s in enumerate(compiled.params)]})


def _scalar_line(k: int, slot: ParamSlot, value: str, env: dict) -> str:
    """The generated line storing scalar `value` (an expression) in slot k, converted if its type asks."""
    if slot.dtype is not None and slot.dtype.name in _CONVERT:
        env[f"conv{k}"] = _CONVERT[slot.dtype.name]
        return f"    buf.f{k} = conv{k}({value})"
    return f"    buf.f{k} = {value}"


def _define(name: str, lines: List[str], env: dict, what: str):
    """The function that `lines` (its def line first) define, compiled in `env`; its text as .source."""
    if len(lines) == 1:
        lines.append("    pass")
    code = "\n".join(lines)
    exec(compile(code, f"<tilec {what}>", "exec"), env)  # noqa: S102 - generated by this module
    fn = env[name]
    fn.source = code
    return fn


def build_address_writer(compiled: CompiledKernel, params: List[str], array_positions, scalar_positions,
                         array_rest):
    """For a parameter buffer that `build_packer`'s pack has filled once (a launch plan's, whose
    shapes, strides and grid never change): write(buf, pointers, scalars) stores only what
    depends on the addresses and scalars: the pointer slots (`pointers` in `array_positions`
    order), the TMA descriptors (encoded from the address and the array's fixed (shape,
    strides, dtype, device) in `array_rest`, cached as the packer's are) and the scalar slots
    (`scalars` in `scalar_positions` order)."""
    slots = compiled.params
    pidx = _param_index(compiled, params)
    arrays = {p: j for j, p in enumerate(array_positions)}
    scalars = {p: j for j, p in enumerate(scalar_positions)}
    layout = _buffer_type(compiled)   # where each slot lies in the packer's buffers
    lines = ["def write(buf, p, s):"]
    env = {"addressof": ctypes.addressof}
    for k, s in enumerate(slots):
        if s.kind in ("shape", "stride", "grid"):
            continue
        i = pidx[s.arg]
        if s.kind == "ptr":
            lines.append(f"    buf.f{k} = p[{arrays[i]}]")
        elif s.kind == "tmap":
            j = arrays[i]
            env[f"tmap{k}"], env[f"rest{k}"] = tensor_map_writer(s), tuple(array_rest[j])
            lines.append(f"    tmap{k}((p[{j}],) + rest{k}, addressof(buf) + {getattr(layout, f'f{k}').offset})")
        else:
            lines.append(_scalar_line(k, s, f"s[{scalars[i]}]", env))
    return _define("write", lines, env, f"address writer for {compiled.name}")
