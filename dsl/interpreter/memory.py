"""Global memory of one interpreter run: the array arguments, pointers into them, and the
accesses (gathers, scatters, atomics, rectangular view tiles).

Each array argument is a buffer with an id (1, 2, ...). A pointer is an int64
address `id << 44 | element offset` (the element offset may be negative), so
pointer tiles are plain int64 arrays and every shape op works on them
unchanged. A buffer is a flat, strided numpy view over the whole memory span
of the user's array, in units of its elements, so arbitrary (even negative)
strides are addressed exactly as the GPU would: base + sum(index * stride).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .engine import OpFault
from .numerics import rounder

ADDR_SHIFT = 44
_HALF = np.int64(1 << (ADDR_SHIFT - 1))


class Buffer:
    __slots__ = ("flat", "size", "name", "base")

    def __init__(self, flat: np.ndarray, name: str, base: int):
        self.flat, self.size, self.name, self.base = flat, flat.shape[0], name, base


class ViewArg:
    """A tensor view argument: the user's array, its buffer and base address, shape and
    strides in elements."""
    __slots__ = ("arr", "buffer", "addr", "shape", "strides", "dtype", "index")

    def __init__(self, arr, buffer, addr, strides, dtype, index):
        self.arr, self.buffer, self.addr = arr, buffer, addr
        self.shape, self.strides = tuple(arr.shape), strides
        self.dtype, self.index = dtype, index


def _flat_span(arr: np.ndarray):
    """(flat view over the array's memory span, element offset of arr[0, ..., 0], element strides)."""
    item = arr.itemsize
    if any(s % item for s in arr.strides):
        raise ValueError("array strides must be multiples of its item size")
    strides = tuple(s // item for s in arr.strides)
    if arr.size == 0:
        return arr.reshape(-1)[:0], 0, strides
    lo = sum((n - 1) * s for n, s in zip(arr.shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(arr.shape, strides) if s > 0)
    # the lowest-addressed element, as a view, so that as_strided starts there
    first = arr[tuple(slice(n - 1, n) if s < 0 else slice(0, 1) for n, s in zip(arr.shape, strides))]
    # as_strided rebuilds the dtype from its type string, which names some extension types
    # ambiguously (ml_dtypes' float8_e5m2 is "<f1"): go through raw bytes of the same size
    raw = first.view(np.dtype((np.void, item)))
    flat = np.lib.stride_tricks.as_strided(raw, shape=(hi - lo + 1,), strides=(item,),
                                           writeable=arr.flags.writeable).view(arr.dtype)
    return flat, -lo, strides


class Memory:
    def __init__(self):
        self.buffers = [None]  # id 0: the null pointer
        self.lock = None       # a Lock while programs run concurrently (clusters): atomics hold it

    def add_view(self, arr: np.ndarray, name: str, dtype: dt.DType, index: dt.DType) -> ViewArg:
        flat, base, strides = _flat_span(arr)
        bid = len(self.buffers)
        buf = Buffer(flat, name, base)
        self.buffers.append(buf)
        return ViewArg(arr, buf, np.int64((bid << ADDR_SHIFT) + base), strides, dtype, index)

    # pointers ------------------------------------------------------------------
    def _split(self, addr):
        """Buffer ids and element offsets (offsets within +-2**43 of a base go to that buffer)."""
        ids = (addr + _HALF) >> ADDR_SHIFT
        return ids, addr - (ids << ADDR_SHIFT)

    def _buffer(self, bid, what):
        if not 0 < bid < len(self.buffers):
            raise OpFault(f"{what} through a pointer that points into no argument")
        return self.buffers[bid]

    def _groups(self, addr, active, what):
        """Yield (buffer, lane selector or None for all lanes, offsets) per buffer touched,
        checking bounds on the active lanes."""
        ids, offs = self._split(addr)
        act_ids = ids if active is None else ids[active]
        if act_ids.size == 0:
            return
        lo, hi = act_ids.min(), act_ids.max()
        for bid in ([lo] if lo == hi else np.unique(act_ids)):
            buf = self._buffer(int(bid), what)
            sel = active if lo == hi else (ids == bid) if active is None else (ids == bid) & active
            o = offs if sel is None else offs[sel]
            bad = (o < 0) | (o >= buf.size)
            if bad.any():
                first = int(o[bad].flat[0]) if np.ndim(o) else int(o)
                raise OpFault(f"out-of-bounds {what} of argument '{buf.name}': element offset "
                              f"{first - buf.base} from its base pointer is outside its memory "
                              f"({buf.size} elements)")
            yield buf, sel, o

    def load(self, addr, d: dt.DType, mask=None, other=None):
        """Gather through pointers; lanes where `mask` is false give `other`."""
        addr = np.asarray(addr)
        rnd = rounder(d)
        if mask is None:
            out = np.empty(addr.shape, d.np)
        else:
            mask = np.asarray(mask)
            out = np.array(np.broadcast_to(other, addr.shape), dtype=d.np)
        for buf, sel, o in self._groups(addr, mask, "load"):
            vals = buf.flat[o].astype(d.np, copy=False)
            if rnd is not None:
                vals = rnd(vals)
            if sel is None:
                out[...] = vals
            else:
                out[sel] = vals
        return out[()]

    def store(self, addr, vals, mask=None) -> None:
        """Scatter through pointers. Lanes are written in row-major order, so where two
        lanes share an address the last one wins."""
        vals = np.broadcast_to(vals, np.shape(addr)).ravel()
        addr = np.asarray(addr).ravel()
        active = None if mask is None else np.asarray(mask).ravel()
        for buf, sel, o in self._groups(addr, active, "store"):
            buf.flat[o] = vals if sel is None else vals[sel]

    def atomic(self, addr, vals, mask, combine, cmp=None):
        """Atomic read-modify-write, lane by lane in row-major order: each lane reads the
        old value, writes `combine(old, value[, cmp])`, and returns the old value (0 where
        masked off). Lanes with distinct addresses are applied together, in rounds by
        their order of occurrence per address, which is the same as sequential order."""
        if self.lock is not None:
            with self.lock:
                return self._atomic(addr, vals, mask, combine, cmp)
        return self._atomic(addr, vals, mask, combine, cmp)

    def _atomic(self, addr, vals, mask, combine, cmp):
        shape = np.shape(addr)
        addr = np.asarray(addr).ravel()
        vals = np.asarray(vals).ravel()
        cmps = None if cmp is None else np.asarray(cmp).ravel()
        old = np.zeros(addr.shape, vals.dtype)
        active = np.ones(addr.shape, bool) if mask is None else np.asarray(mask).ravel()
        for buf, sel, o in self._groups(addr, active, "atomic"):
            lanes = np.flatnonzero(sel)
            rank = _occurrence_rank(o)
            for r in range(int(rank.max()) + 1 if rank.size else 0):
                pick = rank == r
                ln, off = lanes[pick], o[pick]
                cur = buf.flat[off].astype(vals.dtype, copy=False)
                old[ln] = cur
                new = combine(cur, vals[ln]) if cmps is None else combine(cur, vals[ln], cmps[ln])
                buf.flat[off] = new
        return old.reshape(shape)[()]


def _occurrence_rank(offs: np.ndarray) -> np.ndarray:
    """For each lane, how many earlier lanes have the same offset."""
    n = offs.shape[0]
    order = np.argsort(offs, kind="stable")
    so = offs[order]
    pos = np.arange(n)
    starts = np.ones(n, bool)
    starts[1:] = so[1:] != so[:-1]
    group_start = np.maximum.accumulate(np.where(starts, pos, 0))
    rank = np.empty(n, np.int64)
    rank[order] = pos - group_start
    return rank


# ----------------------------------------------------------------------------- view tiles
def _window(view: ViewArg, starts, shape):
    """(tile slices, array slices) of the in-bounds part of a tile, or None if it is empty."""
    dst, src = [], []
    for s, t, n in zip(starts, shape, view.shape):
        lo, hi = max(s, 0), min(s + t, n)
        if hi <= lo:
            return None
        dst.append(slice(lo - s, hi - s))
        src.append(slice(lo, hi))
    return tuple(dst), tuple(src)


def load_tile(view: ViewArg, starts, shape, padding, d: dt.DType):
    """The tile of `shape` at element `starts`; out-of-bounds elements are `padding`."""
    w = _window(view, starts, shape)
    rnd = rounder(d)
    if w is not None and all(s.stop - s.start == t for s, t in zip(w[0], shape)):
        out = np.array(view.arr[w[1]], dtype=d.np)
    else:
        out = np.full(shape, padding, dtype=d.np)
        if w is not None:
            out[w[0]] = view.arr[w[1]]
    return out if rnd is None else rnd(out)


def store_tile(view: ViewArg, starts, value) -> None:
    """Write the in-bounds part of `value` at element `starts`; the rest is skipped."""
    w = _window(view, starts, value.shape)
    if w is not None:
        view.arr[w[1]] = value[w[0]]
