"""Specialization: what one call of a kernel looks like to the compiler.

`specialize(kernel, args, kwargs)` turns a call's arguments into a frozen,
hashable `Specialization` (per parameter: a constexpr value, a tensor-view type,
or a scalar type with its divisibility) plus the run-time arguments in the
kernel's entry-block order. Arrays are recognized through adapters
(`register_array_adapter`); numpy is built in, the runtime registers GPU arrays.

`signature_of(arg)` is the one rule for what of a run-time argument the generated
code depends on: the specialization derives its ParamSpecs from it, the launcher
keys its prepared launches on it, and the stdlib's launch plans on its scalar part.
Equal signatures mean equal ParamSpecs by construction (`view_type_of(signature)`).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from . import dtypes as dt
from .dtypes import DType
from .language import Func, constexpr
from .ir.types import ScalarType, Type, ViewType
from .options import unknown_keyword

__all__ = ["ArrayInfo", "ParamSpec", "Specialization", "register_array_adapter", "array_info", "specialize",
           "stride_divisibility", "parse_signature", "view_type_for", "view_type_of", "scalar_spec",
           "signature_of", "array_signature", "int_signature", "HOST"]

HOST = -1  # ArrayInfo.device of host (numpy) memory


class ArrayInfo(NamedTuple):
    """The one description of an array argument, whatever its library (numpy, DeviceArray,
    torch, CuPy, DLPack): what specialization, packing and launch plans read of it. The
    launcher's torch fast path builds the same 5-tuple without the NamedTuple wrapper."""
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]   # in elements
    dtype: DType
    device: int                # CUDA device ordinal; HOST (-1) for host memory


# (predicate, to_info); checked in order, the most recently registered first
_ADAPTERS: List[Tuple[Callable[[Any], bool], Callable[[Any], ArrayInfo]]] = []


def register_array_adapter(predicate: Callable[[Any], bool], to_info: Callable[[Any], ArrayInfo]) -> None:
    """Teach tilec an array type: `predicate(obj)` says whether `to_info(obj)` applies."""
    _ADAPTERS.insert(0, (predicate, to_info))


def _numpy_info(a: np.ndarray) -> ArrayInfo:
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise TypeError(f"array strides {a.strides} are not multiples of the element size {item}")
    return ArrayInfo(a.__array_interface__["data"][0], tuple(a.shape), tuple(s // item for s in a.strides),
                     dt.from_numpy(a.dtype), HOST)


def array_info(obj) -> Optional[ArrayInfo]:
    """The ArrayInfo of an array argument, or None when `obj` is not an array."""
    for pred, to_info in _ADAPTERS:
        if pred(obj):
            return to_info(obj)
    if isinstance(obj, np.ndarray):
        return _numpy_info(obj)
    return None


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter of a specialization.

    kind: "view" (type is a ViewType), "scalar" (type is a ScalarType), "constexpr"
    (value), or "one" (an int argument equal to 1: `type` is still its ScalarType, and the
    frontend makes it a constant 1 of that type, so the value folds but the type is the
    argument's, as for any other value).
    """
    name: str
    kind: str
    type: Optional[Type] = None
    value: Any = None
    divisible_by_16: bool = False

    @property
    def is_runtime(self) -> bool:
        return self.kind in ("view", "scalar")

    def text(self) -> str:
        if self.kind == "constexpr":
            v = self.value
            return f"tc.{v.py_name}" if isinstance(v, DType) else repr(v)
        if self.kind == "one":
            return "1" if self.type.dtype is dt.int32 else f"1:{self.type.dtype.name}"
        if self.kind == "scalar":
            return self.type.dtype.name + (":16" if self.divisible_by_16 else "")
        t: ViewType = self.type
        text = f"{t.dtype.name}[{','.join('?' * t.rank)}]"
        default = (None,) * (t.rank - 1) + (1,)
        if t.strides != default:
            text += ":strided" if all(s is None for s in t.strides) else \
                ":strides=" + "x".join("?" if s is None else str(s) for s in t.strides)
        if t.index is dt.int64:
            text += ":i64"
        if t.align != 16:
            text += f":align={t.align}"
        if any(x != 1 for x in t.shape_div):
            text += ":div=" + "x".join(map(str, t.shape_div))
        if any(x != 1 for x in t.stride_div):
            text += ":stride_div=" + "x".join(map(str, t.stride_div))
        return text


@dataclass(frozen=True)
class Specialization:
    """Everything about one call that the generated code depends on; the compile-cache key
    together with the source hash, options and arch. `str(spec)` is its signature text."""
    params: Tuple[ParamSpec, ...]

    @property
    def runtime_params(self) -> List[ParamSpec]:
        return [p for p in self.params if p.is_runtime]

    @property
    def arg_names(self) -> List[str]:
        return [p.name for p in self.runtime_params]

    @property
    def arg_types(self) -> List[Type]:
        return [p.type for p in self.runtime_params]

    @property
    def constexprs(self) -> dict:
        return {p.name: p.value for p in self.params if not p.is_runtime}

    def __getitem__(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __str__(self) -> str:
        return ", ".join(f"{p.name}={p.text()}" for p in self.params)


# ----------------------------------------------------------------------------- from arguments
def stride_divisibility(stride: int) -> int:
    """The largest power of two up to 16 that divides `stride` (16 for 0): what a launch
    specializes a run-time stride on. Not just 16 or 1 as for extents: an f32 row stride of
    20008 elements (divisible by 8) keeps rows 32-byte aligned, so their accesses stay
    16 bytes wide (f32 layer_norm 4096x20008 on clusters took 4-byte copies, 51% of copy),
    and a bf16 row stride of 1000 (16 bytes times 125) can feed TMA."""
    return min(stride & -stride, 16) if stride else 16


_OFFSET_LIMIT = 2 ** 31
_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31 - 1


def array_signature(info) -> Tuple:
    """What the generated code depends on of an array (an ArrayInfo or the same 5-tuple),
    plus its device: (dtype, rank, ptr & 15, unit last stride, offsets fit in 31 bits,
    device, per extent divisible by 16 then per stride its `stride_divisibility`,
    unit stride of dim -2 instead). `view_type_of` turns it into the ViewType."""
    ptr, shape, strides, dtype, device = info
    reach = 0
    small = True
    for s, st in zip(shape, strides):
        if s > 1:
            reach += (s - 1) * (st if st >= 0 else -st)
            small = small and s < _OFFSET_LIMIT
    # a unit last stride (or a last extent of 1) is static; else a unit stride of dim -2
    # (a column-major matrix: vector loads and TMA along dim -2)
    last_unit = bool(strides) and (strides[-1] == 1 or shape[-1] == 1)
    col_unit = not last_unit and len(strides) >= 2 and strides[-2] == 1
    divs = tuple(s & 15 == 0 for s in shape) + tuple(stride_divisibility(st) for st in strides)
    return (dtype, len(shape), ptr & 15, last_unit, small and reach < _OFFSET_LIMIT, device, divs, col_unit)


def view_type_of(sig: Tuple) -> ViewType:
    """The ViewType of an array with signature `sig` (`array_signature`)."""
    dtype, rank, low_bits, last_unit, small, _device, divs, col_unit = sig
    strides = [None] * rank
    if last_unit:
        strides[-1] = 1
    elif col_unit:
        strides[-2] = 1
    item = dtype.itemsize  # a power of two up to 8: the low four pointer bits decide
    align = 16 if low_bits == 0 else (item if low_bits % item == 0 else 1)
    # extents divisible by 16, like int arguments: masks then stay uniform over 16-byte
    # vectors. Run-time strides by the largest power of two up to 16 (`stride_divisibility`).
    shape_div = tuple(16 if d else 1 for d in divs[:rank])
    stride_div = tuple(divs[rank + i] if st is None else 1 for i, st in enumerate(strides))
    return ViewType(dtype, rank, tuple(strides), dt.int32 if small else dt.int64, align, shape_div, stride_div)


def view_type_for(info: ArrayInfo, name: str = "array") -> ViewType:
    if len(info.shape) == 0:
        raise TypeError(f"parameter '{name}': 0-d arrays are not supported; pass a Python scalar instead")
    return view_type_of(array_signature(info))


def int_signature(v: int) -> Tuple:
    """What the generated code depends on of an int argument: equal to 1, divisible by 16,
    within 32 bits (its type: i32, else i64)."""
    return ("int", v == 1, v & 15 == 0, _I32_MIN <= v <= _I32_MAX)


def signature_of(v, read_array=None):
    """(signature, ArrayInfo or None) of one run-time argument: `array_signature` of an
    array, `int_signature` of a Python int, (type, int signature) of another integer,
    the type of a bool or float; (None, None) for anything else. `read_array` reads
    arrays (default `array_info`, which takes host numpy arrays; the launcher passes its
    GPU reader, which refuses them)."""
    t = type(v)
    if t is int:
        return int_signature(v), None
    if t is float:
        return float, None
    info = (read_array or array_info)(v)
    if info is not None:
        return array_signature(info), info
    if isinstance(v, (bool, np.bool_)):
        return bool, None
    if isinstance(v, (int, np.integer)):  # numpy integers, IntEnum
        return (t, int_signature(int(v))), None
    if isinstance(v, (float, np.floating)) or (hasattr(v, "dtype") and getattr(v, "shape", None) == ()):
        return t, None
    return None, None


def scalar_spec(name: str, v, specialize_value: bool = True) -> ParamSpec:
    """The ParamSpec of a scalar argument, or TypeError naming the parameter."""
    if isinstance(v, (bool, np.bool_)):
        return ParamSpec(name, "scalar", ScalarType(dt.bool_))
    if isinstance(v, (int, np.integer)):
        d = dt.from_numpy(v.dtype) if isinstance(v, np.integer) else None
        iv = int(v)
        _, one, div16, in_i32 = int_signature(iv)
        if d is None:
            if not -2 ** 63 <= iv < 2 ** 63:
                raise TypeError(f"parameter '{name}': the int {iv} does not fit in 64 bits")
            d = dt.int32 if in_i32 else dt.int64
        if one and specialize_value:
            return ParamSpec(name, "one", ScalarType(d), 1)
        return ParamSpec(name, "scalar", ScalarType(d), divisible_by_16=specialize_value and div16)
    if isinstance(v, np.floating):
        return ParamSpec(name, "scalar", ScalarType(dt.from_numpy(v.dtype)))
    if isinstance(v, float):
        return ParamSpec(name, "scalar", ScalarType(dt.float32))
    raise TypeError(f"parameter '{name}' got a {type(v).__name__}; kernel arguments are arrays or Python "
                    "ints/floats/bools (mark compile-time parameters `name: tc.constexpr`)")


def _check_constexpr(name, v):
    if isinstance(v, constexpr):
        v = v.value
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, tuple):
        return tuple(_check_constexpr(name, x) for x in v)
    if v is None or isinstance(v, (bool, int, float, str, DType, Func)):
        return v
    if callable(v):   # a plain function: kernels inline only @tc.funcs
        raise TypeError(f"parameter '{name}' is a tc.constexpr and got the plain Python function "
                        f"{getattr(v, '__name__', v)!r}: decorate it with @tc.func to pass it to a kernel")
    raise TypeError(f"parameter '{name}' is a tc.constexpr and needs a Python int, float, bool, str, tuple, "
                    f"tilec dtype or @tc.func, got a {type(v).__name__}")


def specialize(kernel, args, kwargs):
    """(Specialization, run-time arguments in entry-block order) for a call `kernel(*args, **kwargs)`."""
    bound = kernel.bind_args(args, kwargs)
    params, runtime = [], []
    for name in kernel.param_names:
        v = bound[name]
        if name in kernel.constexprs:
            params.append(ParamSpec(name, "constexpr", value=_check_constexpr(name, v)))
            continue
        info = array_info(v)
        if info is not None:
            params.append(ParamSpec(name, "view", view_type_for(info, name)))
            runtime.append(v)
            continue
        p = scalar_spec(name, v, name not in kernel.do_not_specialize)
        params.append(p)
        if p.is_runtime:
            runtime.append(v)
    return Specialization(tuple(params)), runtime


# ----------------------------------------------------------------------------- from text
_DTYPE_ALIASES = {"bool": "i1", **{d.py_name: d.name for d in dt.ALL_DTYPES}}


def _dtype_named(s: str) -> Optional[DType]:
    s = _DTYPE_ALIASES.get(s, s)
    try:
        return DType.get(s)
    except ValueError:
        return None


def _split_top(text: str) -> List[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


_VIEW_RE = re.compile(r"^([A-Za-z0-9_]+)\[([?,\s]*)\]((?::[^:]+)*)$")
_SCALAR_RE = re.compile(r"^([A-Za-z0-9_]+)(?::(16|1))?$")


def _parse_view(name, m) -> ViewType:
    d = _dtype_named(m.group(1))
    if d is None:
        raise ValueError(f"{name}: unknown dtype {m.group(1)!r}")
    rank = m.group(2).count("?")
    if rank == 0:
        raise ValueError(f"{name}: a view needs at least one dimension, as in f32[?]")
    strides, index, align = (None,) * (rank - 1) + (1,), dt.int32, 16
    divs = {"div": (1,) * rank, "stride_div": (1,) * rank}
    for opt in filter(None, m.group(3).split(":")):
        if opt == "strided":
            strides = (None,) * rank
        elif opt in ("i64", "i32"):
            index = DType.get(opt)
        elif opt.startswith("align="):
            align = int(opt[6:])
        elif opt.startswith("strides="):
            parts = opt[8:].split("x")
            if len(parts) != rank:
                raise ValueError(f"{name}: strides= needs {rank} entries")
            strides = tuple(None if p == "?" else int(p) for p in parts)
        elif opt.split("=")[0] in divs and "=" in opt:
            key, val = opt.split("=", 1)
            parts = val.split("x")
            if len(parts) != rank or not all(p.isdigit() and int(p) > 0 and int(p) & (int(p) - 1) == 0
                                             for p in parts):
                raise ValueError(f"{name}: {key}= needs {rank} powers of two, as in {key}={'x'.join(['16'] * rank)}")
            divs[key] = tuple(int(p) for p in parts)
        else:
            raise ValueError(f"{name}: unknown view option {opt!r} (use :strided, :i64, :align=N, :div=AxB, "
                             ":stride_div=AxB)")
    return ViewType(d, rank, strides, index, align, divs["div"], divs["stride_div"])


def _parse_constexpr(name, rhs):
    for prefix in ("tc.", "tilec."):
        if rhs.startswith(prefix) and _dtype_named(rhs[len(prefix):]):
            return _dtype_named(rhs[len(prefix):])
    if _dtype_named(rhs) is not None:
        return _dtype_named(rhs)
    try:
        return ast.literal_eval(rhs)
    except (ValueError, SyntaxError):
        raise ValueError(f"{name} is a tc.constexpr: give a Python literal (1024, 0.5, True, 'relu', (1, 2)) or "
                         f"a dtype (f16, tc.float16), got {rhs!r}") from None


def parse_signature(kernel, text: str, constexprs: Optional[Dict[str, Any]] = None) -> Specialization:
    """A Specialization from signature text, one `name=type` per kernel parameter:

        x=f32[?]            a rank-1 view of f32 (last stride 1, i32 offsets, 16-byte aligned base)
        y=f16[?,?]          a rank-2 view; one ? per dimension
        y=f16[?,?]:strided  no stride known statically (also :strides=?x1)
        y=f32[?,?]:i64      64-bit element offsets (tensors with 2**31 elements or more)
        y=f32[?]:align=4    base pointer aligned to 4 bytes only
        y=f32[?,?]:div=1x16 extents known divisible by 1 and 16 (a launch specializes every
                            extent on divisibility by 16; default: 1)
        y=f32[?,?]:stride_div=16x1  run-time strides known divisible by 16 and 1 (powers of
                            two; a launch specializes on `stride_divisibility`, up to 16)
        n=i32               a scalar (i1/bool, i8..i64, u8..u64, f16, bf16, f32, f64)
        n=i32:16            an int scalar known to be divisible by 16
        n=1                 an int parameter specialized to the constant 1 (an i32)
        n=1:i64             the same for a numpy integer of another type (here np.int64(1))
        BLOCK=1024          a tc.constexpr parameter: a Python literal, or a dtype (f16, tc.float16)

    Entries may also be given positionally, in parameter order. Example:
    'x=f32[?], y=f32[?], out=f32[?], n=i32, BLOCK=1024'

    `constexprs` gives constexpr parameters as Python values instead (what
    `kernel.compile('x=f32[?], ...', BLOCK=1024)` passes); a keyword that is not a
    constexpr parameter of the kernel is a TypeError naming it.
    """
    if not isinstance(text, str):
        raise TypeError("the signature must be a string like 'x=f32[?], n=i32, BLOCK=1024'")
    given = {}
    for i, entry in enumerate(_split_top(text)):
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)$", entry)
        if m:
            name, rhs = m.group(1), m.group(2).strip()
        else:
            if i >= len(kernel.param_names):
                raise ValueError(f"signature entry {entry!r}: the kernel has only {len(kernel.param_names)} parameters")
            name, rhs = kernel.param_names[i], entry
        if name not in kernel.param_names:
            raise ValueError(f"kernel '{kernel.name}' has no parameter '{name}' (parameters: "
                             f"{', '.join(kernel.param_names)})")
        if name in given:
            raise ValueError(f"parameter '{name}' is given twice")
        given[name] = rhs
    extra = {}
    for name, value in (constexprs or {}).items():
        if name not in kernel.param_names:
            raise unknown_keyword(kernel.name, name, kernel.param_names)
        if name not in kernel.constexprs:
            raise TypeError(f"kernel '{kernel.name}': '{name}' is a run-time parameter; give its type in the "
                            f"signature text (e.g. '{name}=f32[?]' or '{name}=i32')")
        if name in given:
            raise ValueError(f"parameter '{name}' is given twice (in the signature and as a keyword)")
        extra[name] = value
    params = []
    for name in kernel.param_names:
        if name in extra:
            params.append(ParamSpec(name, "constexpr", value=_check_constexpr(name, extra[name])))
            continue
        if name not in given:
            default = kernel.signature.parameters[name].default
            if name in kernel.constexprs and default is not kernel.signature.empty:
                params.append(ParamSpec(name, "constexpr", value=_check_constexpr(name, default)))
                continue
            raise ValueError(f"the signature does not give parameter '{name}'")
        rhs = given[name]
        if name in kernel.constexprs:
            params.append(ParamSpec(name, "constexpr", value=_check_constexpr(name, _parse_constexpr(name, rhs))))
            continue
        vm = _VIEW_RE.match(rhs)
        if vm:
            params.append(ParamSpec(name, "view", _parse_view(name, vm)))
            continue
        one = re.match(r"^1(?::([A-Za-z0-9_]+))?$", rhs)
        if one:
            d = _dtype_named(one.group(1)) if one.group(1) else dt.int32
            if d is None or not d.is_int:
                raise ValueError(f"parameter '{name}': 1:<type> needs an integer type such as i64, got {rhs!r}")
            params.append(ParamSpec(name, "one", ScalarType(d), 1))
            continue
        sm = _SCALAR_RE.match(rhs)
        d = _dtype_named(sm.group(1)) if sm else None
        if d is None:
            raise ValueError(f"parameter '{name}': expected a type such as f32[?], f16[?,?]:strided, i32 or i32:16, "
                             f"got {rhs!r}")
        div = sm.group(2) == "16"
        if div and not d.is_int:
            raise ValueError(f"parameter '{name}': only integer scalars can be marked divisible by 16")
        params.append(ParamSpec(name, "scalar", ScalarType(d), divisible_by_16=div))
    return Specialization(tuple(params))
