"""block_mask(mask_mod, B, H, Q_LEN, KV_LEN): which blocks of the score matrix a mask_mod keeps.

FlexAttention's block mask (issue 45). `mask_mod(b, h, q_idx, kv_idx) -> bool` is a user
`@tc.func` (True: query q_idx of head h of batch b sees key kv_idx); the score matrix of
each (b, h) is cut into blocks of Q_BLOCK query rows by KV_BLOCK keys, and every block is

    none (0)     mask_mod keeps no position in it: attention skips the block;
    partial (1)  some: attention calls mask_mod on the block;
    full (2)     all (and no key past KV_LEN): attention skips calling mask_mod.

Positions past Q_LEN or KV_LEN do not count (a block holding keys past KV_LEN is at most
partial, its tile still needs the bounds mask). The classes are computed once, by a tilec
kernel (the interpreter for host arrays, else the GPU): `block_mask_kernel` evaluates
mask_mod on each block's tile, `block_lists_kernel` turns each row of classes into the
lists the attention kernels walk, as FlexAttention's BlockMask: per (b, h, query block)
the count and indices of its partial and of its full key blocks, and the same per key
block over query blocks (the backward's dK/dV orientation). The mask is reusable across
calls of the same shapes; `attention` checks them.

The indices mask_mod gets are i32 tiles broadcast to the block's shape (b, h: i32
scalars), clamped to [0, Q_LEN) and [0, KV_LEN): a mod that reads a tensor at them
(a document id per position) never reads past its end. Tensors such a mod reads come
through `mod_args` (up to two arrays), passed to it after the indices:
`mask_mod(b, h, q_idx, kv_idx, *mod_args[:n])`, n its parameters past kv_idx.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

import tilec as tc

from ._common import Arr, as_array, check_same_place, empty_like, launch, next_pow2, output, view

__all__ = ["BlockMask", "block_mask", "block_mask_kernel", "block_lists_kernel", "call_mask_mod", "call_score_mod",
           "check_mod", "mod_arrays", "mod_aux", "MAX_MOD_ARGS", "NONE", "PARTIAL", "FULL"]

NONE, PARTIAL, FULL = 0, 1, 2
MAX_MOD_ARGS = 2
MASK_SUB = 32     # keys block_mask_kernel evaluates at once
MIN_BLOCK = 64    # the attention kernels' query and key tiles (<= 64 but for the forward's 128 rows) divide it


@tc.func
def call_mask_mod(MASK_MOD: tc.constexpr, b, h, q_idx, kv_idx, aux0, aux1, N_AUX: tc.constexpr):
    """MASK_MOD(b, h, q_idx, kv_idx, *the N_AUX mod arguments)."""
    if N_AUX == 0:
        keep = MASK_MOD(b, h, q_idx, kv_idx)
    elif N_AUX == 1:
        keep = MASK_MOD(b, h, q_idx, kv_idx, aux0)
    else:
        keep = MASK_MOD(b, h, q_idx, kv_idx, aux0, aux1)
    return keep


@tc.func
def call_score_mod(SCORE_MOD: tc.constexpr, score, b, h, q_idx, kv_idx, aux0, aux1, N_AUX: tc.constexpr):
    """SCORE_MOD(score, b, h, q_idx, kv_idx, *the N_AUX mod arguments) (a tile, or a constant:
    a derivative of 1.0)."""
    if N_AUX == 0:
        s = SCORE_MOD(score, b, h, q_idx, kv_idx)
    elif N_AUX == 1:
        s = SCORE_MOD(score, b, h, q_idx, kv_idx, aux0)
    else:
        s = SCORE_MOD(score, b, h, q_idx, kv_idx, aux0, aux1)
    return s


@tc.kernel
def block_mask_kernel(cls, aux0, aux1, n_q, n_kv, MASK_MOD: tc.constexpr, N_AUX: tc.constexpr,
                      QB: tc.constexpr, KB: tc.constexpr, SUB: tc.constexpr):
    """cls[b, h, qb, j]: the class of key block j for query block qb (program (qb, h, b)),
    each block counted SUB keys at a time (a whole 128 x 128 block of i32 indices spills)."""
    qb = tc.program_id(0)
    h = tc.program_id(1)
    b = tc.program_id(2)
    rows = qb * QB + tc.arange(0, QB)
    q_idx = tc.broadcast_to(tc.minimum(rows, n_q - 1)[:, None], (QB, SUB))
    n_rows = tc.minimum(n_q - qb * QB, QB)
    for j in range(0, tc.cdiv(n_kv, KB)):
        count = 0
        for r in range(0, KB // SUB):
            cols = j * KB + r * SUB + tc.arange(0, SUB)
            kv_idx = tc.broadcast_to(tc.minimum(cols, n_kv - 1)[None, :], (QB, SUB))
            keep = (call_mask_mod(MASK_MOD, b, h, q_idx, kv_idx, aux0, aux1, N_AUX)
                    & (rows < n_q)[:, None] & (cols < n_kv)[None, :])
            count += tc.sum(tc.sum(keep.astype(tc.int32), axis=1), axis=0)
        # a block of keys past n_kv keeps fewer than n_rows * KB: never full
        c = (count > 0).astype(tc.int32) + (count == n_rows * KB).astype(tc.int32)
        tc.store(cls, index=(b, h, qb, j), tile=tc.full((1, 1, 1, 1), c, tc.int32))


@tc.func
def _compact(c, num, idx, b, h, r, WANT: tc.constexpr, NC: tc.constexpr):
    # the columns of class WANT in row c, in order, to idx[b, h, r, :count]; count to num[b, h, r]
    hit = (c == WANT).astype(tc.int32)
    pos = tc.cumsum(hit, axis=0) - hit
    base = (idx.ptr + b.astype(tc.int64) * idx.stride(0) + h.astype(tc.int64) * idx.stride(1)
            + r.astype(tc.int64) * idx.stride(2))
    tc.store(base + pos * idx.stride(3), tc.arange(0, NC), mask=hit > 0)
    tc.store(num, index=(b, h, r), tile=tc.full((1, 1, 1), tc.sum(hit, axis=0), tc.int32))


@tc.kernel
def block_lists_kernel(cls, num, idx, full_num, full_idx, full_run, NC: tc.constexpr):
    """Row r of cls (b, h, rows, cols) as lists: its partial columns (num, idx), its full
    ones (full_num, full_idx) and how many of those lead as consecutive columns (full_run:
    the attention kernels walk that run with affine indices, which the compiler pipelines
    like the dense kernels' loops). Program (r, h, b)."""
    r = tc.program_id(0)
    h = tc.program_id(1)
    b = tc.program_id(2)
    c = tc.reshape(tc.load(cls, index=(b, h, r, 0), shape=(1, 1, 1, NC), padding=0), (NC,))
    _compact(c, num, idx, b, h, r, PARTIAL, NC)
    _compact(c, full_num, full_idx, b, h, r, FULL, NC)
    # full column k is in the leading run when as many full columns precede it as columns
    # lie between the first full one and it
    cols = tc.arange(0, NC)
    hit = (c == FULL).astype(tc.int32)
    first = tc.min(tc.where(hit > 0, cols, NC), axis=0)
    before = tc.cumsum(hit, axis=0) - hit
    run = tc.sum(tc.where((hit > 0) & (cols - first == before), 1, 0), axis=0)
    tc.store(full_run, index=(b, h, r), tile=tc.full((1, 1, 1), run, tc.int32))


@dataclass(frozen=True)
class BlockMask:
    """A mask_mod's blocks for one (B, H, Q_LEN, KV_LEN) (module doc). The arrays are of
    the place the mask was computed on (numpy on the host, else the device's kind):
    classes (B, H, q blocks, kv blocks) i32 of NONE / PARTIAL / FULL; per query block the
    partial key blocks kv_num (B, H, q blocks), kv_idx (B, H, q blocks, kv blocks) (the
    first kv_num of each row are meaningful) and the full ones full_kv_num, full_kv_idx,
    of which the first full_kv_run are consecutive blocks; per key block the query
    blocks, q_num, q_idx, full_q_num, full_q_idx, full_q_run."""
    mask_mod: Any
    B: Optional[int]    # None: the mask does not depend on b (one row of blocks serves every batch)
    H: Optional[int]    # None: nor on h
    Q_LEN: int
    KV_LEN: int
    Q_BLOCK: int
    KV_BLOCK: int
    mod_args: Tuple[Any, ...]
    classes: Any
    kv_num: Any
    kv_idx: Any
    full_kv_num: Any
    full_kv_idx: Any
    full_kv_run: Any
    q_num: Any
    q_idx: Any
    full_q_num: Any
    full_q_idx: Any
    full_q_run: Any

    @property
    def shape(self) -> Tuple[int, int, int, int]:
        return (self.B, self.H, self.Q_LEN, self.KV_LEN)

    def sparsity(self) -> float:
        """The fraction of blocks skipped (class none)."""
        c = _host(self.classes)
        return float((c == NONE).mean()) if c.size else 0.0

    def check(self, mask_mod, batch: int, heads: int, n_q: int, n_kv: int) -> None:
        """ValueError unless this mask serves a call of these shapes (and this mask_mod, when given)."""
        b_ = batch if self.B is None else self.B
        h_ = heads if self.H is None else self.H
        if (b_, h_, self.Q_LEN, self.KV_LEN) != (batch, heads, n_q, n_kv):
            raise ValueError(f"block_mask: computed for (B, H, Q_LEN, KV_LEN) = {self.shape}, but the call has "
                             f"{(batch, heads, n_q, n_kv)}")
        if mask_mod is not None and mask_mod is not self.mask_mod:
            raise ValueError(f"block_mask: computed for mask_mod {self.mask_mod!r}, but the call passes {mask_mod!r}")


def _host(a) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "cpu"):
        return a.detach().cpu().numpy()
    return np.asarray(tc.to_numpy(a) if hasattr(tc, "to_numpy") else a)


def check_mod(fn, name: str) -> None:
    """TypeError unless `fn` is None or a @tc.func."""
    if fn is not None and not isinstance(fn, tc.Func):
        what = "plain Python function" if callable(fn) else type(fn).__name__
        raise TypeError(f"{name}: expected a @tc.func, got a {what} ({fn!r}); decorate it with @tc.func")


def mod_arrays(mod_args, like: Optional[Arr] = None):
    """(Arrs of mod_args, N_AUX): at most MAX_MOD_ARGS arrays, on `like`'s place when given."""
    if not isinstance(mod_args, (tuple, list)):
        raise TypeError(f"mod_args: expected a tuple of arrays, got {type(mod_args).__name__}")
    if len(mod_args) > MAX_MOD_ARGS:
        raise ValueError(f"mod_args: at most {MAX_MOD_ARGS} arrays, got {len(mod_args)}")
    arrs = [as_array(a, f"mod_args[{i}]") for i, a in enumerate(mod_args)]
    if like is not None and arrs:
        check_same_place({"q": like, **{f"mod_args[{i}]": a for i, a in enumerate(arrs)}})
    return arrs, len(arrs)


def mod_aux(fn, fixed: int, given: int, name: str) -> int:
    """How many of the call's `given` mod arrays `fn` takes: its parameters past the `fixed`
    ones (score, b, h, q_idx, kv_idx: 5; a mask_mod's: 4); ValueError when it wants more
    or fewer than the mods allow."""
    if fn is None:
        return 0
    params = list(fn.signature.parameters.values())
    extra = len(params) - fixed
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params) or extra < 0 or extra > given:
        args = "score, b, h, q_idx, kv_idx" if fixed == 5 else "b, h, q_idx, kv_idx"
        raise ValueError(f"{name}: expected the parameters ({args}) and then up to len(mod_args) = {given} arrays, "
                         f"got {fn.fn.__name__}{fn.signature}")
    return extra


def aux_views(arrs, like: Arr):
    """The two aux kernel arguments: the mod arrays as they are (n-D views), a 1-element
    dummy of `like`'s place for each one missing (the kernel never reads it)."""
    out = [view(a, a.shape, a.strides) for a in arrs]
    while len(out) < MAX_MOD_ARGS:
        d = output(None, like, (1,), tc.int32, "aux")
        out.append(view(d, d.shape, d.strides))
    return out


def _block_sizes(BLOCK) -> Tuple[int, int]:
    sizes = (BLOCK, BLOCK) if isinstance(BLOCK, int) and not isinstance(BLOCK, bool) else BLOCK
    try:
        qb, kb = (int(s) for s in sizes)
    except (TypeError, ValueError):
        raise TypeError(f"BLOCK: expected an int or a (q, kv) pair of ints, got {BLOCK!r}") from None
    for s in (qb, kb):
        if s < MIN_BLOCK or s & (s - 1):
            raise ValueError(f"BLOCK: block sizes must be powers of two >= {MIN_BLOCK}, got {BLOCK!r}")
    return qb, kb


def _place(device, arrs) -> Arr:
    """An Arr whose place new arrays take: `device` (torch's), else the first mod array's, else the host."""
    if device is not None:
        torch = sys.modules.get("torch")
        if torch is None:
            import torch  # noqa: PLC0415 - a device= argument means torch is in use
        return as_array(torch.empty(1, dtype=torch.int32, device=device), "device")
    if arrs:
        return arrs[0]
    return as_array(np.empty(1, np.int32), "device")


def block_mask(mask_mod, B: Optional[int], H: Optional[int], Q_LEN: int, KV_LEN: int, BLOCK=128, mod_args=(),
               device=None) -> BlockMask:
    """The BlockMask of `mask_mod` (a @tc.func) for B batches, H query heads and Q_LEN x
    KV_LEN scores (B or H None, as FlexAttention's: the mask does not depend on it, is
    computed at 0 and serves any batch / head count), in blocks of BLOCK (an int, or (q, kv);
    powers of two >= 64). Computed where the arrays live: on `device` (a torch device),
    else where mod_args are, else on the host (the interpreter: keep host masks small)."""
    if mask_mod is None:
        raise TypeError("mask_mod: expected a @tc.func, got None")
    check_mod(mask_mod, "mask_mod")
    for name, n in (("B", B), ("H", H), ("Q_LEN", Q_LEN), ("KV_LEN", KV_LEN)):
        if n is None and name in ("B", "H"):
            continue
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise ValueError(f"{name}: expected a non-negative int{' or None' if name in 'BH' else ''}, got {n!r}")
    given_b, given_h = (None if n is None else int(n) for n in (B, H))
    B, H, Q_LEN, KV_LEN = (1 if n is None else int(n) for n in (B, H, Q_LEN, KV_LEN))
    qb, kb = _block_sizes(BLOCK)
    arrs, _ = mod_arrays(mod_args)
    n_aux = mod_aux(mask_mod, 4, len(arrs), "mask_mod")
    if arrs:
        check_same_place({f"mod_args[{i}]": a for i, a in enumerate(arrs)})
    like = _place(device, arrs)
    if arrs and (like.host != arrs[0].host or like.device != arrs[0].device):
        raise TypeError(f"device: {device!r}, but mod_args[0] is on {arrs[0].where()}")
    nqb, nkb = -(-Q_LEN // qb), -(-KV_LEN // kb)

    def new(shape):   # zeros: the lists' unused tails read as block 0, not garbage
        return empty_like(like, shape, tc.int32, zero=True)

    def arg(a: Arr, transposed: bool = False):
        if transposed:   # (B, H, rows, cols) seen as (B, H, cols, rows)
            s = a.strides
            return view(a, a.shape[:2] + (a.shape[3], a.shape[2]), s[:2] + (s[3], s[2]))
        return view(a, a.shape, a.strides)

    cls = new((B, H, nqb, nkb))
    lists = {}
    if B * H * nqb * nkb:
        launch(block_mask_kernel, (nqb, H, B), [arg(cls), *aux_views(arrs, like), Q_LEN, KV_LEN],
               num_warps=8, MASK_MOD=mask_mod, N_AUX=n_aux, QB=qb, KB=kb, SUB=min(kb, MASK_SUB))
    for key, rows, cols, transposed in (("kv", nqb, nkb, False), ("q", nkb, nqb, True)):
        num, idx, full_num, full_idx, full_run = (new((B, H, rows)), new((B, H, rows, cols)), new((B, H, rows)),
                                                  new((B, H, rows, cols)), new((B, H, rows)))
        if B * H * rows * cols:
            launch(block_lists_kernel, (rows, H, B),
                   [arg(cls, transposed), arg(num), arg(idx), arg(full_num), arg(full_idx), arg(full_run)],
                   num_warps=4, NC=max(next_pow2(cols), 16))
        lists[key] = (num.obj, idx.obj, full_num.obj, full_idx.obj, full_run.obj)
    return BlockMask(mask_mod, given_b, given_h, Q_LEN, KV_LEN, qb, kb, tuple(mod_args), cls.obj,
                     *lists["kv"], *lists["q"])
