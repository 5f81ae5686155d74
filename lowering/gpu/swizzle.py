"""Bank-conflict-free scratch layouts for layout conversions through shared memory.

Shared memory has 32 banks of 4 bytes; the accesses of one warp instruction to
different 4-byte words of one bank are serialized (one "wavefront" each; the
same word is a broadcast). A conversion writes every register of the source
layout (one instruction per register) and reads every register of the
destination layout. With a row-major scratch one of the two sides usually runs
down a column (a transpose: every lane in the same bank).

Each thread moves `smem_vector` consecutive registers per access (up to 16
bytes). `bank_wavefronts` counts, by simulating every warp and access of both
sides, the wavefronts a shared layout costs beyond the conflict-free minimum;
`conversion_layout` tries the plain layout, then XOR swizzles (layouts.py's
#shared: in row r, `vec`-element chunk c goes to c ^ ((r / per_phase) % max_phase))
and returns the first with the fewest extra wavefronts.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence, Tuple

import numpy as np

from .layouts import DistributedLayout, NumpyOps, SharedLayout

__all__ = ["bank_wavefronts", "conversion_layout", "access_wavefronts", "smem_vector"]

_BANKS = 32


def _coords(layout: DistributedLayout, shape: Tuple[int, ...]):
    """Per dimension, an int64 array (registers, 32 lanes, warps) of coordinates."""
    nw = layout.num_warps
    lane = np.arange(32)[:, None]
    warp = np.arange(nw)[None, :]
    per_reg = layout.coords(shape, lane, warp, NumpyOps())
    return [np.stack([np.broadcast_to(np.asarray(cs[d], dtype=np.int64), (32, nw)) for cs in per_reg])
            for d in range(len(shape))]


def smem_vector(layout: DistributedLayout, shape: Sequence[int], elem_bytes: int, smem: SharedLayout) -> int:
    """Elements one shared access of a thread moves: consecutive registers running along the
    buffer's contiguous dimension, at most 16 bytes, kept together by the swizzle."""
    c = smem.order[0]
    run = 0
    for b in layout.bases(tuple(shape)).reg:
        if b != tuple((1 << run) if d == c else 0 for d in range(len(shape))):
            break
        run += 1
    v = min(1 << run, max(1, 16 // elem_bytes))
    if smem.max_phase > 1:
        v = min(v, smem.vec)
    return v


def access_wavefronts(byte_addr: np.ndarray, access_bytes: int = 4) -> Tuple[int, int]:
    """(wavefronts, minimum) of warp accesses: `byte_addr` is (instructions, 32 lanes, warps), each
    lane moving `access_bytes` (8- and 16-byte accesses are served a half / quarter warp at a
    time, as the hardware does)."""
    nwords = max(1, access_bytes // 4)
    phase = 32 // nwords
    words = (byte_addr // 4).transpose(0, 2, 1).reshape(-1, phase)
    words = (words[:, :, None] + np.arange(nwords)[None, None, :]).reshape(words.shape[0], -1)
    words = np.sort(words, axis=1)
    distinct = np.ones_like(words, dtype=bool)
    distinct[:, 1:] = words[:, 1:] != words[:, :-1]
    group = np.repeat(np.arange(words.shape[0]), words.shape[1])[distinct.ravel()]
    bank = (words.ravel()[distinct.ravel()] % _BANKS)
    counts = np.bincount(group * _BANKS + bank, minlength=words.shape[0] * _BANKS).reshape(-1, _BANKS)
    return int(counts.max(axis=1).sum()), words.shape[0]


def bank_wavefronts(src: DistributedLayout, dst: DistributedLayout, shape: Sequence[int], elem_bytes: int,
                    smem: SharedLayout) -> Tuple[int, int]:
    """Extra wavefronts (beyond one per instruction) of the store of `src` and the load of `dst`
    through `smem`: (store, load)."""
    shape = tuple(shape)
    out = []
    for lay in (src, dst):
        v = smem_vector(lay, shape, elem_bytes, smem)
        coords = [c[::v] for c in _coords(lay, shape)]  # the first register of each vector
        off = np.broadcast_to(np.asarray(smem.offset(shape, coords, NumpyOps()), dtype=np.int64), coords[0].shape)
        waves, minimum = access_wavefronts(off * elem_bytes, v * elem_bytes)
        out.append(waves - minimum)
    return out[0], out[1]


def _candidates(shape, elem_bytes):
    rank = len(shape)
    order = tuple(range(rank - 1, -1, -1))
    yield SharedLayout(1, 1, 1, order)
    if rank < 2:
        return
    ncol = shape[order[0]]
    for vec in (1, 2, 4, 8):
        if vec * elem_bytes > 16 or vec > ncol:
            continue
        # a phase per group of rows that fills the 128 bytes of the banks once
        for per_phase in (1, 2, 4, 8):
            for max_phase in (2, 4, 8, 16, 32):
                if max_phase * vec <= ncol:
                    yield SharedLayout(vec, per_phase, max_phase, order)


@lru_cache(maxsize=1024)
def conversion_layout(src: DistributedLayout, dst: DistributedLayout, shape: Tuple[int, ...],
                      elem_bytes: int) -> SharedLayout:
    """The scratch layout of a conversion src -> dst: fewest extra wavefronts, simplest first."""
    best, best_cost = None, None
    for cand in _candidates(shape, elem_bytes):
        cost = sum(bank_wavefronts(src, dst, shape, elem_bytes, cand))
        if best_cost is None or cost < best_cost:
            best, best_cost = cand, cost
            if cost == 0:
                break
    return best
