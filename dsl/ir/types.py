"""Types of tile IR values: scalars, tiles, pointers and tensor views.

Every type is an immutable, hashable value with a textual form that the
printer writes and the lark grammar reads back:

    f32                          scalar
    tile<64x32xbf16>             tile (static power-of-two shape)
    ptr<f32>                     pointer to global memory
    tile<128xptr<f16>>           tile of pointers
    view<2xf32, strides=[?, 1], index=i32, align=16>
                                 tensor view: rank, statically known strides,
                                 index width for offsets, base alignment in bytes
    view<2xf32, strides=[?, 1], index=i32, align=16, div=[1, 16], stride_div=[16, 1]>
                                 ... and per dimension, a power of two dividing the
                                 extent (div) and the stride (stride_div); written
                                 only when one of them is not 1
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from ..dtypes import DType

__all__ = ["Type", "ScalarType", "TileType", "PointerType", "ViewType", "scalar", "tile",
           "element_type", "shape_of", "with_element", "is_pow2", "next_pow2"]


def is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


class Type:
    """Base of all IR types."""

    def __str__(self) -> str:  # pragma: no cover - subclasses define it
        raise NotImplementedError


@dataclass(frozen=True)
class ScalarType(Type):
    dtype: DType

    def __str__(self) -> str:
        return self.dtype.name


@dataclass(frozen=True)
class PointerType(Type):
    pointee: DType
    addrspace: int = 1  # 1: global; the gpu dialect adds 3 (shared)

    def __str__(self) -> str:
        if self.addrspace == 1:
            return f"ptr<{self.pointee.name}>"
        return f"ptr<{self.pointee.name}, {self.addrspace}>"


@dataclass(frozen=True)
class TileType(Type):
    """A tile of `shape` (power-of-two extents) whose elements are scalars or pointers.

    `encoding` is None in the tile dialect; the gpu dialect attaches a layout there.
    """
    shape: Tuple[int, ...]
    element: Type  # ScalarType or PointerType
    encoding: Optional[object] = field(default=None)

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def dtype(self) -> Optional[DType]:
        return self.element.dtype if isinstance(self.element, ScalarType) else None

    def __str__(self) -> str:
        dims = "x".join(str(s) for s in self.shape)
        enc = f", {self.encoding}" if self.encoding is not None else ""
        return f"tile<{dims}x{self.element}{enc}>"


@dataclass(frozen=True)
class ViewType(Type):
    """A strided tensor in global memory: base pointer, shape and strides at run time.

    `strides` holds, per dimension, the stride when it is known at compile time
    (specialized to 1 for a contiguous last dimension) or None. `index` is the
    integer type that offsets into the tensor need (i32 when every element
    offset provably fits in 31 bits, else i64). `align` is the base pointer's
    known alignment in bytes. `shape_div` / `stride_div` hold, per dimension, a
    power of two known to divide the run-time extent / stride (1: nothing known);
    axis analysis uses them to prove that masks and addresses allow vector accesses.
    """
    dtype: DType
    rank: int
    strides: Tuple[Optional[int], ...] = ()
    index: DType = None  # type: ignore[assignment]
    align: int = 1
    shape_div: Tuple[int, ...] = ()
    stride_div: Tuple[int, ...] = ()

    def __post_init__(self):
        from ..dtypes import int64
        if not self.strides:
            object.__setattr__(self, "strides", (None,) * self.rank)
        else:
            object.__setattr__(self, "strides", tuple(self.strides))
        if self.index is None:
            object.__setattr__(self, "index", int64)
        if len(self.strides) != self.rank:
            raise ValueError("view strides must have one entry per dimension")
        for name in ("shape_div", "stride_div"):
            v = tuple(int(x) for x in getattr(self, name)) or (1,) * self.rank
            if len(v) != self.rank or not all(is_pow2(x) for x in v):
                raise ValueError(f"view {name} must be one power of two per dimension, got {list(v)}")
            object.__setattr__(self, name, v)

    def __str__(self) -> str:
        strides = ", ".join("?" if s is None else str(s) for s in self.strides)
        div = ""
        if any(x != 1 for x in self.shape_div + self.stride_div):
            div = (f", div=[{', '.join(map(str, self.shape_div))}], "
                   f"stride_div=[{', '.join(map(str, self.stride_div))}]")
        return (f"view<{self.rank}x{self.dtype.name}, strides=[{strides}], index={self.index.name}, "
                f"align={self.align}{div}>")


def scalar(dtype: DType) -> ScalarType:
    return ScalarType(dtype)


def tile(shape, dtype_or_elem, encoding=None) -> TileType:
    elem = ScalarType(dtype_or_elem) if isinstance(dtype_or_elem, DType) else dtype_or_elem
    return TileType(tuple(shape), elem, encoding)


def element_type(t: Type) -> Type:
    """The element of a tile, or the type itself for scalars and pointers."""
    return t.element if isinstance(t, TileType) else t


def shape_of(t: Type) -> Tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else ()


def with_element(t: Type, elem: Type) -> Type:
    """`t` with its element type replaced (scalar stays scalar, tile stays a tile)."""
    if isinstance(t, TileType):
        return TileType(t.shape, elem, t.encoding)
    return elem
