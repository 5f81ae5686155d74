"""What every stdlib entry point shares: reading array arguments of any kind,
viewing them as rows, allocating and checking outputs, picking tile sizes, and
launching on the GPU or on the interpreter.

Array kinds (`Arr.kind`):

- ``"numpy"``: a numpy array. The op runs on the CPU interpreter. bf16 numpy
  arrays are ml_dtypes' ``bfloat16`` arrays when ml_dtypes is installed.
- ``"bf16host"``: a `BF16Array` (or `F8Array`), float32 numpy storage holding bf16 (f8) values
  (the interpreter's own storage for bf16); for numpy users without ml_dtypes.
- ``"torch"``: a CUDA torch tensor (launched on torch's current stream).
- ``"cupy"``: a CuPy array.
- ``"device"``: a `tc.DeviceArray` or any object with ``__cuda_array_interface__``
  or ``__dlpack__``; outputs for these are DeviceArrays.

Outputs are allocated "like" the first input: same kind and device. Nothing
here copies an input: a layout that cannot be viewed as the kernel needs is a
`ValueError` that says how to fix it.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

import tilec as tc
from tilec import dtypes as _dt
from tilec.dtypes import DType
from tilec.runtime import memory as _memory
from tilec.runtime import zeros as device_zeros
from tilec.runtime.graph import current_stream
from tilec.target import Target

from . import _plan

__all__ = ["DEPENDENT", "FLOAT_DTYPES", "BF16Array", "F8Array", "Arr", "as_array", "check_float", "check_same_place",
           "view", "rows_of", "flat_view", "normalize_dim", "empty_like", "output", "RowConfig", "row_config", "split_row",
           "lanewise_max", "lanewise_sum", "lanewise_sum_of_squares", "store_row_stats", "next_pow2", "launch", "contiguous_strides",
           "capturing", "refuse_read_back"]

FLOAT_DTYPES = (tc.float16, tc.bfloat16, tc.float32)

_HOST_KINDS = ("numpy", "bf16host")


# ----------------------------------------------------------------------------- CUDA graph captures
def capturing(obj=None) -> bool:
    """True while a CUDA graph capture would record this thread's launches: a tc.Graph
    capture, or (for a CUDA torch tensor `obj`) torch's capture on its current stream.
    An op then must not read device memory back to the host (a synchronization)."""
    if current_stream():
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda:
        return bool(torch.cuda.is_current_stream_capturing())
    return False


def refuse_read_back(obj, name: str, op: str, instead: str) -> None:
    """RuntimeError naming `name` when `op` would read `obj` back to the host during a CUDA
    graph capture (the capture would fail with the driver's less helpful error), before
    anything is launched or written."""
    on_device = hasattr(obj, "__cuda_array_interface__") or getattr(obj, "is_cuda", False)
    if on_device and capturing(obj):
        raise RuntimeError(f"{op}: {name} would be read back to the host (a synchronization), which a CUDA "
                           f"graph capture cannot record; {instead}")


# ----------------------------------------------------------------------------- bf16 on the host
class BF16Array:
    """bf16 values on the host for the interpreter: a float32 ndarray (`.values`)
    whose every element is a bf16 number.

    ``BF16Array(a)`` rounds `a` to bf16 (nearest even); ``np.asarray(b)`` gives
    the float32 values back. Pass one wherever an op takes a numpy array to run
    the op in bf16 on the interpreter; its outputs come back as BF16Arrays too.
    """

    __slots__ = ("values",)
    dtype = tc.bfloat16

    def __init__(self, values, _rounded: bool = False):
        if _rounded:
            self.values = values
            return
        from tilec.interpreter.numerics import cast  # noqa: PLC0415
        self.values = np.asarray(cast(np.asarray(values, dtype=np.float64), tc.bfloat16), dtype=np.float32)

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.values.shape

    @property
    def ndim(self) -> int:
        return self.values.ndim

    @property
    def size(self) -> int:
        return self.values.size

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)

    def __repr__(self) -> str:
        return f"BF16Array({self.values!r})"

    def _like(self, values) -> "BF16Array":
        """`values` (already of this type) in an array of this class."""
        return BF16Array(values, _rounded=True)


class F8Array(BF16Array):
    """f8 values (f8e4m3 by default, or f8e5m2) on the host for the interpreter: a float32
    ndarray (`.values`) whose every element is a number of that format; as BF16Array."""

    __slots__ = ("dtype",)

    def __init__(self, values, dtype=tc.float8e4m3, _rounded: bool = False):
        if dtype not in (tc.float8e4m3, tc.float8e5m2):
            raise TypeError(f"F8Array holds f8e4m3 or f8e5m2 values, got {dtype!r}")
        self.dtype = dtype
        if _rounded:
            self.values = values
            return
        from tilec.interpreter.numerics import cast  # noqa: PLC0415
        self.values = np.asarray(cast(np.asarray(values, dtype=np.float64), dtype), dtype=np.float32)

    def __repr__(self) -> str:
        return f"F8Array({self.values!r}, {self.dtype.name})"

    def _like(self, values) -> "F8Array":
        return F8Array(values, self.dtype, _rounded=True)


# ----------------------------------------------------------------------------- reading arguments
@dataclass(frozen=True)
class Arr:
    """One array argument: the user's object and what the kernels need to know about it."""
    obj: Any
    kind: str
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]      # in elements
    dtype: DType
    device: Optional[int]         # None on the host

    @property
    def host(self) -> bool:
        return self.kind in _HOST_KINDS

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def where(self) -> str:
        return "the host (interpreter)" if self.host else f"cuda:{self.device}"


def _module_of(x) -> str:
    return type(x).__module__.partition(".")[0]


def as_array(x, name: str) -> Arr:
    """Classify `x` (see the module doc); TypeError naming `name` when it is not an array."""
    if isinstance(x, BF16Array):
        v = x.values
        return Arr(x, "bf16host", v.shape, _np_strides(v), x.dtype, None)
    if isinstance(x, np.ndarray):
        try:
            d = _dt.from_numpy(x.dtype)
        except TypeError:
            raise TypeError(f"{name}: numpy arrays of dtype {x.dtype} are not supported") from None
        return Arr(x, "numpy", x.shape, _np_strides(x), d, None)
    mod = _module_of(x)
    if mod == "torch" and not x.is_cuda:
        raise TypeError(f"{name}: a torch tensor on {x.device}; pass a CUDA tensor, or x.numpy() to run on "
                        "the CPU interpreter")
    from tilec.runtime.interop import array_info  # noqa: PLC0415
    info = array_info(x) if mod != "numpy" else None
    if info is None:
        raise TypeError(f"{name}: expected an array (numpy, torch, CuPy, tc.DeviceArray, DLPack or "
                        f"__cuda_array_interface__), got {type(x).__name__}")
    _ptr, shape, strides, d, dev = info
    kind = mod if mod in ("torch", "cupy") else "device"
    return Arr(x, kind, tuple(shape), tuple(strides), d, int(dev))


def _np_strides(a: np.ndarray) -> Tuple[int, ...]:
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise ValueError(f"array strides {a.strides} are not multiples of the element size {item}")
    return tuple(s // item for s in a.strides)


def check_float(a: Arr, name: str, allowed: Sequence[DType] = FLOAT_DTYPES) -> None:
    """TypeError unless `a` has one of the `allowed` dtypes."""
    if a.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"{name}: dtype {a.dtype.name} is not supported (expected one of {names})")


def check_same_place(arrays: Dict[str, Arr]) -> None:
    """TypeError unless every array is on the host, or every one is on one GPU."""
    items = list(arrays.items())
    first_name, first = items[0]
    for name, a in items[1:]:
        if a.host != first.host or a.device != first.device:
            raise TypeError(f"{name} is on {a.where()} but {first_name} is on {first.where()}; "
                            "pass all arrays of one call on the same device")


# ----------------------------------------------------------------------------- views
def contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """Row-major strides in elements."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


def view(a: Arr, shape: Sequence[int], strides: Sequence[int]):
    """The kernel argument viewing `a`'s memory with `shape` and `strides` (elements), no copy.

    Strides may be 0 (broadcasting). numpy -> ndarray, bf16host -> BF16Array,
    torch -> tensor (so the launch uses torch's stream), others -> DeviceArray.
    """
    shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
    v = _view(a, shape, strides)
    if _plan.recording() is not None:
        _plan.register_view(a.obj, v, shape, strides)
    return v


def _view(a: Arr, shape, strides):
    if a.kind in _HOST_KINDS:
        base = a.obj.values if a.kind == "bf16host" else a.obj
        v = np.lib.stride_tricks.as_strided(base, shape, tuple(s * base.itemsize for s in strides))
        return a.obj._like(v) if a.kind == "bf16host" else v
    if a.kind == "torch":
        # the tensor itself: as_strided costs microseconds per call (an Arr re-described with
        # other dimensions, `reduced_layout`'s, has another rank than its tensor)
        if shape == a.shape and strides == a.strides and a.obj.dim() == len(shape):
            return a.obj
        return a.obj.as_strided(shape, strides)
    from tilec.runtime.interop import array_info  # noqa: PLC0415
    ptr = array_info(a.obj)[0]
    isz = a.dtype.itemsize
    return tc.DeviceArray(ptr, shape, tuple(s * isz for s in strides), a.dtype, a.device, owner=a.obj)


def normalize_dim(dim: int, ndim: int, name: str = "dim") -> int:
    """`dim` in [0, ndim), accepting negatives as Python does; IndexError otherwise."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__}")
    if not -ndim <= dim < ndim:
        raise IndexError(f"{name}={dim} is out of range for an array of {ndim} dimensions")
    return int(dim) % ndim


def last_dim_rows(x, dim: int, out, op: str):
    """The shared start of an op along the last dimension whose output is shaped like x:
    (input, output, input rows, output rows, n_rows, n_cols) after checking that x is a
    float array of at least one dimension and that `dim` names its last dimension."""
    a = as_array(x, "x")
    check_float(a, "x")
    if a.ndim == 0:
        raise ValueError(f"{op}: x must have at least 1 dimension")
    if normalize_dim(dim, a.ndim) != a.ndim - 1:
        raise ValueError(f"{op}: only the last dimension is supported (dim=-1), got dim={dim} for shape "
                         f"{a.shape}; move that dimension last first (e.g. x.transpose(...) and a contiguous copy)")
    o = output(out, a, a.shape, a.dtype)
    xv, n_rows, n_cols = rows_of(a, "x")
    ov, _, _ = rows_of(o, "out")
    return a, o, xv, ov, n_rows, n_cols


def flat_group(shape, strides, name):
    """(size, stride) of dimensions flattened into one, or ValueError when they cannot be.

    A group of size 1 gets stride 0: its index is always 0, and a stride the launch
    sees as divisible by 16 keeps the kernel's accesses 16-byte vectors (a stride of 1
    would make every row start possibly unaligned, hence scalar loads).
    """
    dims = [(s, st) for s, st in zip(shape, strides) if s != 1]
    size = 1
    for s, _ in dims:
        size *= s
    if size == 1:
        return 1, 0
    if size == 0 or not dims:
        return size, 1
    for (s0, st0), (s1, st1) in zip(dims, dims[1:]):
        if st0 != st1 * s1:
            raise ValueError(f"{name}: dimensions of sizes {tuple(shape)} with strides {tuple(strides)} "
                             "(elements) cannot be flattened without a copy; pass a contiguous copy")
    return size, dims[-1][1]


def slab_view(a: Arr, dim: int, name: str):
    """(view, (outer, n, inner), strides): `a` seen as (outer, n, inner), `dim` (of size n)
    in the middle, the dimensions before and after it each flattened (`flat_group`)."""
    outer, s_outer = flat_group(a.shape[:dim], a.strides[:dim], name)
    inner, s_inner = flat_group(a.shape[dim + 1:], a.strides[dim + 1:], name)
    shape, strides = (outer, a.shape[dim], inner), (s_outer, a.strides[dim], s_inner)
    return view(a, shape, strides), shape, strides


def rows_of(a: Arr, name: str):
    """(kernel argument, n_rows, n_cols): `a` seen as a 2-D array of rows of its last
    dimension, leading dimensions flattened into rows without a copy.

    Needs the last stride to be 1 (for a last dimension longer than 1) and the
    leading dimensions to be collapsible into one row stride; otherwise a
    ValueError suggesting a contiguous copy.
    """
    if a.ndim == 0:
        raise ValueError(f"{name}: a 0-d array has no rows; pass an array of at least 1 dimension")
    n_cols = a.shape[-1]
    n_rows = math.prod(a.shape[:-1])
    if n_rows == 0 or n_cols == 0:  # nothing will be read: any strides do
        return view(a, (n_rows, n_cols), (max(n_cols, 1), 1)), n_rows, n_cols
    return view(a, (n_rows, n_cols), (row_stride(a, name), 1)), n_rows, n_cols


def row_stride(a: Arr, name: str) -> int:
    """The one stride (elements) that steps through `a`'s rows of its last dimension,
    leading dimensions flattened; ValueError when the last dimension is not contiguous
    or the rows do not flatten."""
    if a.shape[-1] > 1 and a.strides[-1] != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got strides {a.strides} "
                         f"(elements) for shape {a.shape}; pass a contiguous copy "
                         "(np.ascontiguousarray / .contiguous())")
    lead = [(s, st) for s, st in zip(a.shape[:-1], a.strides[:-1]) if s != 1]
    for (_s0, st0), (s1, st1) in zip(lead, lead[1:]):
        if st0 != st1 * s1:
            raise ValueError(f"{name}: the leading dimensions of shape {a.shape} with strides {a.strides} "
                             "(elements) cannot be flattened into rows without a copy; pass a contiguous copy "
                             "(np.ascontiguousarray / .contiguous())")
    return lead[-1][1] if lead else max(a.shape[-1], 1)


def flat_view(a: Arr, name: str):
    """`a` as a 1-D kernel argument of all its elements in row-major order, no copy;
    ValueError when its strides do not allow that."""
    dims = [(s, st) for s, st in zip(a.shape, a.strides) if s != 1]
    if a.numel == 0 or not dims:
        return view(a, (a.numel,), (1,))
    for (s0, st0), (s1, st1) in zip(dims, dims[1:]):
        if st0 != st1 * s1:
            raise ValueError(f"{name}: shape {a.shape} with strides {a.strides} (elements) cannot be flattened "
                             "without a copy; pass a contiguous copy (np.ascontiguousarray / .contiguous())")
    return view(a, (a.numel,), (dims[-1][1],))


# ----------------------------------------------------------------------------- outputs
_TORCH_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i32": "int32",
                "i64": "int64", "i8": "int8", "u8": "uint8", "i16": "int16", "i1": "bool"}


def _like_maker(torch, shape, tdtype, zero: bool, same: bool):
    """How a launch plan's replay makes a torch output from the argument it was made like:
    `empty_like` where the argument is a contiguous array of the output's shape and dtype,
    else `new_empty`: both cheaper per call than `torch.empty(shape, dtype=, device=)`
    (docs/stdlib.md, "Host path", has the timings)."""
    if same:
        return torch.zeros_like if zero else torch.empty_like
    return (lambda x: x.new_zeros(shape, dtype=tdtype)) if zero else (lambda x: x.new_empty(shape, dtype=tdtype))


def empty_like(a: Arr, shape: Sequence[int], dtype: DType, zero: bool = False) -> Arr:
    """A new contiguous array of `shape` and `dtype`, of `a`'s kind and on `a`'s device (of
    zeros if `zero`)."""
    shape = tuple(int(s) for s in shape)
    if a.kind in _HOST_KINDS:
        if dtype is tc.bfloat16 and not (a.kind == "numpy" and a.dtype is tc.bfloat16):
            return as_array(BF16Array((np.zeros if zero else np.empty)(shape, np.float32), _rounded=True), "out")
        np_dtype = a.obj.dtype if dtype is a.dtype and a.kind == "numpy" else dtype.np
        return as_array((np.zeros if zero else np.empty)(shape, np_dtype), "out")
    if a.kind == "torch":
        torch = sys.modules["torch"]
        tdtype, tdevice = getattr(torch, _TORCH_NAMES[dtype.name]), a.obj.device
        new = torch.zeros if zero else torch.empty
        t = new(shape, dtype=tdtype, device=tdevice)
        if _plan.recording() is not None:
            _plan.register_alloc(t, lambda: new(shape, dtype=tdtype, device=tdevice), a.obj, _like_maker(
                torch, shape, tdtype, zero, shape == a.shape and dtype is a.dtype
                and tuple(a.strides) == contiguous_strides(shape)))
        return as_array(t, "out")
    if a.kind == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(a.device):
            return as_array((cupy.zeros if zero else cupy.empty)(shape, dtype=dtype.np), "out")
    new = device_zeros if zero else tc.empty
    d = new(shape, dtype, device=a.device)
    if _plan.recording() is not None:
        device = a.device
        _plan.register_alloc(d, (lambda: new(shape, dtype, device=device)) if zero else
                             _memory.empty_maker(shape, dtype, device))
    return as_array(d, "out")


def output(out, like: Arr, shape: Sequence[int], dtype: DType, name: str = "out") -> Arr:
    """`out` checked against the expected shape, dtype and place; a new array when it is None."""
    shape = tuple(int(s) for s in shape)
    if out is None:
        return empty_like(like, shape, dtype)
    o = as_array(out, name)
    if o.shape != shape:
        raise ValueError(f"{name} has shape {o.shape}, expected {shape}")
    if o.dtype is not dtype:
        raise TypeError(f"{name} has dtype {o.dtype.name}, expected {dtype.name}")
    if o.host != like.host or o.device != like.device:
        raise TypeError(f"{name} is on {o.where()} but the input is on {like.where()}")
    return o


def out_pair(out, op: str):
    """(values, indices) of an `out=` that torch takes as a pair (topk, max(dim)): None, or a
    tuple/list of two arrays; anything else a TypeError naming out."""
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{op}: out must be a (values, indices) pair of arrays, got {type(out).__name__}")
    return out[0], out[1]


# ----------------------------------------------------------------------------- tile sizes
MAX_SINGLE_TILE = 16384   # longest row held in registers at once (32 f32 values per thread at 16 warps)
LOOP_TILE = 4096          # tile of the looped path for longer rows
MIN_TILE_ELEMS = 2048     # short rows: pack rows into one program until a tile has this many elements


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


@dataclass(frozen=True)
class RowConfig:
    """How a row-wise kernel is launched: tiles of (rows, block) elements."""
    block: int        # columns per tile (a power of two)
    rows: int         # rows per program (a power of two; 1 on the looped path)
    num_warps: int
    single: bool      # the whole row fits in one tile
    tiles: int = 1    # tiles of `block` columns holding one row (`split_row`)

    def grid(self, n_rows: int) -> Tuple[int]:
        return (tc.cdiv(n_rows, self.rows),)


def row_config(n_cols: int, n_rows: int = 1, max_single: int = MAX_SINGLE_TILE,
               loop_tile: int = LOOP_TILE, big_tile_per_thread: int = 16) -> RowConfig:
    """The row heuristic shared by the row-wise ops.

    - A row of up to `max_single` elements is one tile of next_pow2(n_cols)
      columns (read once, kept in registers); longer rows loop over tiles of
      `loop_tile` columns.
    - Short rows are packed: a program takes next_pow2 rows until its tile
      holds MIN_TILE_ELEMS elements (never more rows than there are), so tiny
      rows do not leave most threads idle.
    - num_warps = tile elements / 512 (16 elements per thread), clamped to
      1..16; tiles of 8192 elements or more take `big_tile_per_thread`
      elements per thread instead (32 for 2-byte rows: four 16-byte loads per
      thread, and at 16 warps the register file held only two programs per
      SM; measured on an H200, bf16 8192-wide layer_norm 3040 -> 3794 GB/s,
      softmax 3850 -> 3998).
    """
    block = next_pow2(max(n_cols, 1))
    single = block <= max_single
    if not single:
        block = loop_tile
    rows = 1
    if single:
        rows = min(max(MIN_TILE_ELEMS // block, 1), next_pow2(max(n_rows, 1)))
    per_thread = big_tile_per_thread if block * rows >= 8192 else 16
    num_warps = min(max(block * rows // (32 * per_thread), 1), 16)
    return RowConfig(block, rows, num_warps, single)


# Rows held as three tiles of a quarter of their power of two: elements per thread (H200, % of copy, one
# tile -> three: layer_norm 16384x5120 bf16 70 -> 92, 32768x3072 bf16 80 -> 99, 8192x12288 f32 75 -> 98;
# softmax 16384x4097 bf16 62 -> 68 at 24, 77 at 48 per thread: rows read through windows want 48)
SPLIT_PER_THREAD = 24
SPLIT_PER_THREAD_WINDOW = 48


@tc.func
def lanewise_max(ts):
    """The lane-wise max of a tuple of same-shape tiles (a row held as several tiles, `split_row`):
    combined before the one cross-thread reduction."""
    m = ts[0]
    for k in tc.static_range(1, len(ts)):
        m = tc.maximum(m, ts[k])
    return m


@tc.func
def lanewise_sum(ts):
    """The lane-wise sum of a tuple of same-shape tiles (as `lanewise_max`)."""
    s = ts[0]
    for k in tc.static_range(1, len(ts)):
        s = s + ts[k]
    return s


@tc.func
def lanewise_sum_of_squares(ts):
    """The lane-wise sum of the squares of a tuple of same-shape tiles."""
    sq = ts[0] * ts[0]
    for k in tc.static_range(1, len(ts)):
        sq = sq + ts[k] * ts[k]
    return sq


@tc.func
def store_row_stats(mean_out, rstd_out, row, mean, rstd, RMS: tc.constexpr, STATS: tc.constexpr):
    """Row `row`'s mean (not for rms_norm) and rstd into the norms' f32 statistics, if STATS."""
    if STATS:
        if not RMS:
            tc.store(mean_out, index=(row,), tile=tc.full((1,), mean, tc.float32))
        tc.store(rstd_out, index=(row,), tile=tc.full((1,), rstd, tc.float32))


def split_row(cfg: RowConfig, n_cols: int, per_thread: int = SPLIT_PER_THREAD) -> RowConfig:
    """`cfg` with a single row that fills at most 3/4 of its tile held as three tiles of a
    quarter of it instead (TILES = 3: 4097 columns take 3 x 2048 lanes, not 8192), at
    `per_thread` elements per thread; other configs as they are. Kernels that take TILES
    combine the tiles lane-wise before each reduction, so the row still costs one
    cross-thread reduction per statistic."""
    if not cfg.single or cfg.rows != 1 or 4 * n_cols > 3 * cfg.block:
        return cfg
    quarter = cfg.block // 4
    return RowConfig(quarter, 1, min(max(3 * quarter // (32 * per_thread), 1), 16), True, tiles=3)


HOST_TARGET = Target.from_arch("sm_90a")  # host arrays: the interpreter takes the paths an H100 would


def target_of(a: Arr) -> Target:
    """The Target of `a`'s device (HOST_TARGET for host arrays)."""
    return HOST_TARGET if a.host else Target.for_device(a.device)


def l2_row_budget(target: Target) -> int:
    """Bytes of rows a looped kernel may have in flight and still find pass 1's data in L2
    for pass 2: about half the L2, the rest holding the outputs being written (H100/H200:
    24 MB of 50)."""
    return target.l2_bytes * 12 // 25


def long_row_launch(n_rows: int, n_cols: int, itemsize: int, target: Target):
    """(programs, block, num_warps) of a looped two-pass row kernel whose programs walk
    rows pid, pid + programs, ... (block and num_warps None: `row_config`'s).

    With one program per row every row is in flight at once (8 programs per SM), so
    at 65536 bf16 columns 128 MB stream between a row's two passes and pass 2 reads
    memory again: 3 row-lengths of traffic, at most 2/3 of copy. When one row per
    SM of `target` fits in `l2_row_budget`, one program per SM with tiles of 32 KB (16 warps, four
    16-byte loads per thread per tile, enough bytes in flight for one program to
    keep its SM's share of bandwidth) leaves ~17 MB between the passes, and pass 2
    hits L2. Longer rows keep one program per row.
    """
    sms = target.sm_count
    if n_cols * itemsize * sms > l2_row_budget(target):
        return n_rows, None, None
    block = 16384 if itemsize == 2 else 8192
    return min(n_rows, sms), block, 16


# ----------------------------------------------------------------------------- launching
# The options of a launch that only follows another launch of the same op (a merge of its
# partials): on sm_90+ it is launched while that one ends and waits for its results at its
# start (or at its tc.grid_dependency_wait), hiding the launch's latency (H100, a
# single-program mean after 4096 row programs: 1.4 of 4 us).
DEPENDENT = {"dependent_launch": True}


def launch(kernel, grid, args: Sequence, num_warps: int = 4, fast_math: bool = True, cluster: int = 1,
           options: Optional[dict] = None, **constexprs) -> None:
    """Run `kernel` on `grid` with `args` (views from `view`/`rows_of`, scalars).

    Host arguments (numpy arrays, BF16Arrays) run on the interpreter, the rest on
    the GPU with `num_warps`. An empty grid launches nothing. `cluster` > 1: in
    thread-block clusters of that many programs (sm_90+). `options`: further compile
    options of the GPU launch (num_stages, tma, warp_specialize).

    GPU launches use `fast_math` by default: exp, log and rsqrt become the
    hardware approximations (ex2/lg2/rsqrt.approx, relative error about 2^-22
    plus 2^-24 per unit of abs(x) for exp) and a division by a row statistic a
    reciprocal. The accurate library exp alone costs ~20 instructions per
    element, which makes f16/bf16 softmax-like ops compute-bound; the
    approximations stay far inside f16/bf16 rounding and the f32 tolerances.
    """
    if any(g == 0 for g in grid):
        return
    if any(isinstance(v, (np.ndarray, BF16Array)) for v in args):
        _interpret(kernel, grid, args, constexprs, cluster)
    else:
        opts = dict(options or {})
        if cluster > 1:
            opts["cluster"] = cluster
        kernel[tuple(grid)](*args, num_warps=num_warps, fast_math=fast_math, **opts, **constexprs)
        if _plan.recording() is not None:
            _plan.record_launch(kernel, grid, args, dict(opts, num_warps=num_warps, fast_math=fast_math, **constexprs))


def _interpret(kernel, grid, args, constexprs, cluster: int = 1) -> None:
    """The interpreter run of one launch; BF16Array views become bf16 views of their f32 storage."""
    from tilec.interpreter import run  # noqa: PLC0415
    from tilec.kernel import normalize_grid  # noqa: PLC0415
    from tilec.specialize import Specialization, specialize  # noqa: PLC0415
    plain = [v.values if isinstance(v, BF16Array) else v for v in args]
    spec, runtime = specialize(kernel, plain, constexprs)
    low_params = {p: v.dtype for p, v in zip(kernel.param_names, args) if isinstance(v, BF16Array)}
    if low_params:
        spec = Specialization(tuple(
            replace(p, type=replace(p.type, dtype=low_params[p.name])) if p.name in low_params else p
            for p in spec.params))
    run(kernel.ir(spec), runtime, normalize_grid(tuple(grid), {}), cluster=cluster)
