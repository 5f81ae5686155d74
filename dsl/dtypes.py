"""Element types of tilec and the rules that combine them.

A `DType` is a singleton per name (`tc.float32 is DType.get("f32")`). Promotion
follows numpy for two typed operands and treats Python scalars as *weak*
(they take the tile's type when the kind allows), as Triton and NEP 50 do.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "DType", "promote", "promote_with_python_scalar", "from_numpy", "to_numpy",
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8e4m3", "float8e5m2",
    "ALL_DTYPES",
]


class DType:
    """One element type: a name (`f32`), a kind (`b`, `i`, `u`, `f`) and a bit width."""

    _by_name: dict[str, "DType"] = {}
    __slots__ = ("name", "kind", "bits", "py_name")

    def __init__(self, name: str, kind: str, bits: int, py_name: str):
        self.name, self.kind, self.bits, self.py_name = name, kind, bits, py_name
        DType._by_name[name] = self

    @classmethod
    def get(cls, name: str) -> "DType":
        try:
            return cls._by_name[name]
        except KeyError:
            raise ValueError(f"unknown dtype {name!r}; known: {', '.join(cls._by_name)}") from None

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_signed(self) -> bool:
        return self.kind == "i" or self.kind == "f"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_fp8(self) -> bool:
        return self.kind == "f" and self.bits == 8

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    def __repr__(self) -> str:
        return f"tilec.{self.py_name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (DType.get, (self.name,))

    # numpy interop -----------------------------------------------------------
    @property
    def np(self) -> np.dtype:
        """The numpy dtype that holds values of this type (bf16 and f8 are emulated in f32)."""
        return np.dtype(_NP_STORAGE[self.name])


bool_ = DType("i1", "b", 1, "bool_")
int8 = DType("i8", "i", 8, "int8")
int16 = DType("i16", "i", 16, "int16")
int32 = DType("i32", "i", 32, "int32")
int64 = DType("i64", "i", 64, "int64")
uint8 = DType("u8", "u", 8, "uint8")
uint16 = DType("u16", "u", 16, "uint16")
uint32 = DType("u32", "u", 32, "uint32")
uint64 = DType("u64", "u", 64, "uint64")
float16 = DType("f16", "f", 16, "float16")
bfloat16 = DType("bf16", "f", 16, "bfloat16")
float32 = DType("f32", "f", 32, "float32")
float64 = DType("f64", "f", 64, "float64")
float8e4m3 = DType("f8e4m3", "f", 8, "float8e4m3")
float8e5m2 = DType("f8e5m2", "f", 8, "float8e5m2")

ALL_DTYPES = tuple(DType._by_name.values())

# How the interpreter stores each type in numpy. bf16 and f8 values live in
# f32 arrays, rounded to the narrow type after every operation.
_NP_STORAGE = {
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "float32", "f32": "float32", "f64": "float64",
    "f8e4m3": "float32", "f8e5m2": "float32",
}

_FROM_NUMPY = {
    "bool": bool_, "int8": int8, "int16": int16, "int32": int32, "int64": int64,
    "uint8": uint8, "uint16": uint16, "uint32": uint32, "uint64": uint64,
    "float16": float16, "float32": float32, "float64": float64,
    # names used by ml_dtypes / torch for the narrow float types
    "bfloat16": bfloat16, "float8_e4m3fn": float8e4m3, "float8_e5m2": float8e5m2,
}


def from_numpy(dt) -> DType:
    """The tilec dtype of a numpy dtype (or anything with a numpy-like dtype name)."""
    name = str(getattr(dt, "name", dt)).replace("torch.", "")
    try:
        return _FROM_NUMPY[name]
    except KeyError:
        raise TypeError(f"arrays of dtype {name} are not supported by tilec") from None


def to_numpy(dt: DType) -> np.dtype:
    return dt.np


_FLOAT_RANK = {"f8e5m2": 0, "f8e4m3": 0, "f16": 1, "bf16": 1, "f32": 2, "f64": 3}


def promote(a: DType, b: DType) -> DType:
    """Common type of two typed operands (numpy rules; f16 with bf16 gives f32)."""
    if a is b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float or b.is_float:
        if not a.is_float:
            return b
        if not b.is_float:
            return a
        ra, rb = _FLOAT_RANK[a.name], _FLOAT_RANK[b.name]
        if ra != rb:
            return a if ra > rb else b
        return float32  # two different types of one width: f16/bf16, e4m3/e5m2
    # both integers
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    if s.bits > u.bits:
        return s
    return {8: int16, 16: int32, 32: int64}.get(u.bits, int64)


def python_scalar_dtype(v) -> DType:
    """The type a lone Python scalar gets: bool, i32 (i64 when it needs it), f32."""
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, (int, np.integer)):
        return int32 if -2**31 <= int(v) < 2**31 else int64
    if isinstance(v, (float, np.floating)):
        return float32
    raise TypeError(f"{type(v).__name__} is not a tilec scalar")


def promote_with_python_scalar(t: DType, v) -> DType:
    """Type of `tile op scalar`: the Python scalar is weak and adopts the tile's type
    unless it is of a higher kind (a float with an integer tile gives f32)."""
    if isinstance(v, (bool, np.bool_)):
        return t
    if isinstance(v, (int, np.integer)):
        if t.is_bool:
            return python_scalar_dtype(v)
        return t
    if isinstance(v, (float, np.floating)):
        return t if t.is_float else float32
    raise TypeError(f"{type(v).__name__} is not a tilec scalar")
