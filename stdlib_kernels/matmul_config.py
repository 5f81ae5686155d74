"""The stdlib GEMM's launch configuration: MatmulConfig and the shape heuristic config_for."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional, Tuple

import tilec as tc
from tilec.target import Target

from ..lowering.gpu.wgmma_fragments import wgmma_shape
from ._common import next_pow2
from .tuning import TABLES, MatmulTuning, tuning_for

__all__ = ["HOST_GEMM_TARGET", "MAX_SPLIT_K", "MIN_SLICE_K", "MIN_SPLIT_K", "SMEM_BUDGET", "SMEM_BUDGET_WGMMA",
           "MatmulConfig", "config_for"]

# The sm_90 table's numbers under their old names (tests, docs): config_for reads `tuning_for(target)`.
_T = TABLES["sm_90"].matmul
SMEM_BUDGET, SMEM_BUDGET_WGMMA, WS_MIN_WAVES = _T.smem_budget, _T.smem_budget_wgmma, _T.ws_min_waves
MIN_SLICE_K, MIN_SPLIT_K, MAX_SPLIT_K, REDUCE_TILE = _T.min_slice_k, _T.min_split_k, _T.max_split_k, _T.reduce_tile
# What GEMMs of host arrays (the interpreter) and `signature()` plan for by default: sm_80's
# features (mma.sync-shaped tiles) with an H100's SM count (its split-K and tile choices).
HOST_GEMM_TARGET = replace(Target.from_arch("sm_80"), sm_count=Target.from_arch("sm_90a").sm_count)


@dataclass(frozen=True)
class MatmulConfig:
    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    persistent: bool = False  # matmul_persistent_kernel on a grid of at most one program per SM
    sm_count: int = 132
    split_k: int = 1          # K slices: matmul_splitk_kernel's partials, summed by splitk_reduce_kernel
    warp_specialize: bool = False  # sm_90a, TMA ring: a producer warpgroup issues the copies
    cluster: int = 1          # sm_90+: programs per cluster; with warp_specialize they share B tiles (multicast)

    def __post_init__(self):
        if not isinstance(self.split_k, int) or isinstance(self.split_k, bool) or self.split_k < 1:
            raise ValueError(f"split_k must be an int >= 1, got {self.split_k!r}")
        if self.split_k > 1 and self.persistent:
            raise ValueError("split_k > 1 and persistent=True cannot be combined")
        if self.cluster not in (1, 2) or (self.cluster > 1 and (self.split_k > 1 or self.group_m % 2)):
            raise ValueError(f"cluster must be 1 or 2 (2: without split-K, with an even group_m), got "
                             f"cluster={self.cluster!r}, split_k={self.split_k}, group_m={self.group_m}")

    def check_cluster(self, m: int) -> None:
        """Programs 2c and 2c + 1 (one cluster) get the same column of tiles, which their shared B
        loads promise, when the rows of tiles are even in number (so is every group's)."""
        if self.cluster > 1 and tc.cdiv(m, self.bm) % 2:
            raise ValueError(f"cluster={self.cluster} needs an even number of {self.bm}-row tiles, "
                             f"M = {m} gives {tc.cdiv(m, self.bm)}")

    def tiles(self, m: int, n: int) -> int:
        return tc.cdiv(m, self.bm) * tc.cdiv(n, self.bn)

    def splits(self, k: int) -> int:
        """The number of K slices a launch uses: split_k, less any that would be empty (each
        slice is cdiv(steps, split_k) steps of BK, so the last one may be shorter)."""
        steps = max(tc.cdiv(k, self.bk), 1)
        return tc.cdiv(steps, tc.cdiv(steps, self.split_k))

    def grid(self, m: int, n: int, k: Optional[int] = None) -> Tuple[int, ...]:
        tiles = self.tiles(m, n)
        if self.split_k > 1:
            return (tiles, self.split_k if k is None else self.splits(k))
        if self.persistent:
            return (max(min(tiles, self.sm_count) // self.cluster * self.cluster, self.cluster),)
        return (tiles,)

    def reduce_tile(self, m: int, n: int, splits: int, *, t: Optional[MatmulTuning] = None) -> Tuple[int, int, int]:
        """(rows, columns, warps) of a splitk_reduce_kernel program summing `splits` partials:
        128 columns wide, up to `t.reduce_tile` elements and fewer as the partials grow in number
        (its loads are all in flight at once: at most 64 values per thread at 4 warps), never
        more rows than M needs nor than BM (so that a tile never crosses from one slice's rows
        into the next)."""
        cols = min(128, next_pow2(n))
        rows = min(next_pow2(m), self.bm, _pow2_floor(max(1, min((t or _T).reduce_tile, 8192 // splits) // cols)))
        return rows, cols, max(1, min(4, rows * cols // 256))

    @property
    def kernel(self):
        """The kernel that computes the products (for split-K the partial sums; the reduction
        that follows is `matmul.splitk_reduce_kernel`)."""
        # the kernels' module imports this one
        from .matmul import matmul_kernel, matmul_persistent_kernel, matmul_splitk_kernel  # noqa: PLC0415
        if self.split_k > 1:
            return matmul_splitk_kernel
        return matmul_persistent_kernel if self.persistent else matmul_kernel


@lru_cache(maxsize=1024)   # it runs on every call: 10 us uncached, a third of a decode GEMM's time
def config_for(m: int, n: int, k: int, dtype, batch: int = 1, target=HOST_GEMM_TARGET, *,
               tensor_cores: bool = True, allow_split_k: bool = True) -> MatmulConfig:
    """The tile configuration for an (m x k) @ (k x n) product of `batch` entries on `target`
    (a Target or an arch: its `sm_count` SMs, its wgmma and f8 tensor cores). The numbers
    (in capitals below: their sm_90 values' old names) are the fields of the target's
    `tuning.MatmulTuning` table, whose measurements docs/benchmarks-archive.md keeps ("The
    other ops' tuning tables").

    - Tiles: 128 x 128 (8 warps: 64 x 32 of C per warp), or 128 x 256 with 8 warps
      when that still gives programs for at least `wide_tile_sm_share` (90%) of the `sm_count` SMs; a dimension of 64 or less gets a tile of next_pow2 of it
      (at least 16) so that small M (decode, M = 1 or 16) wastes no rows. When
      128 x 128 tiles would leave most SMs idle, the tile halves along the
      larger dimension until there are at least `sm_count` programs or it is
      64 x 64.
    - Split-K: when those 128-row (or skinny-M) tiles give programs for at most half the
      SMs (tiles * batch * 2 <= sm_count) and K is at least MIN_SPLIT_K (2 * MIN_SPLIT_K
      for skinny M), K is cut into split_k slices instead of halving the tile: split_k =
      sm_count // (tiles * batch) (2 * sm_count for skinny-M tiles, which are memory-bound
      and fit two per SM), at most MAX_SPLIT_K and at most K // MIN_SLICE_K. Skinny-M tiles
      still halve N to 64 first (the tile measured best for them). The f32 partials go
      through a workspace to a second kernel that sums them and applies the epilogue ("matmul:
      split-K": where the second launch costs more than the idle SMs). With K of at least
      `long_k_split` and 128 x 128 tiles too few for the SMs, 128 x 256 tiles are split the same
      way instead of being halved (a long K keeps the reduction's cost small beside the
      products). `allow_split_k=False` gives the choice without split-K (for comparison).
    - BK: 32 elements of 16-bit types (64 bytes of a row per stage) or 16 of f32
      (tf32); true f32 (no tensor cores) uses 64 x 64 x 16 tiles.
    - Skinny M (a tile of 32 rows or fewer, 16-bit types): BK = `skinny_bk` (128), for more bytes
      in flight ("matmul: skinny M").
    - Stages: as many as fit in SMEM_BUDGET bytes of operand buffers, 2 to 4.
    - GROUP_M = 8 rows of tiles per group of the program order.
    - wgmma targets (sm_90a), tiles wgmma takes (whole warpgroups, 64-column blocks of B): BK = one
      128-byte swizzle row of A per stage row (64 f16/bf16, 32 tf32, 128 f8) and stages
      from SMEM_BUDGET_WGMMA (128 x 256 x 64 bf16: 4 stages, 192 KB).
    - f8 without f8 tensor cores (`target.has_f8_mma`: wgmma): the small tiles of the FMA configuration (64 x 64 x 16), chosen when f8
      had no other lowering there; its dots now run on mma.sync as f16 widened from f8
      (accelerate_dot), with these tiles not yet tuned for that on a GPU.
    - Warp specialization (wgmma targets, 128 x 256 wgmma tiles, a TMA ring): for tf32 when there
      are at least WS_MIN_WAVES programs per SM; not for the 16-bit and f8 types, whose result
      leaves through shared memory and TMA ("matmul: warp specialization").
    """
    target = Target.of(target)
    t = tuning_for(target).matmul
    sm_count = target.sm_count
    if dtype.bits == 8 and not target.has_f8_mma:
        tensor_cores = False
    if not tensor_cores:
        return MatmulConfig(min(64, _fit(m)), min(64, _fit(n)), 16, 4, 2, sm_count=sm_count)
    bm, bn = min(128, _fit(m)), min(128, _fit(n))
    # 128 x 256 while it keeps `wide_tile_sm_share` of the SMs busy
    busy, of = t.wide_tile_sm_share
    if bm == 128 and n >= 256 and tc.cdiv(m, 128) * tc.cdiv(n, 256) * batch * of >= sm_count * busy:
        bn = 256
    skinny = bm <= 32 and dtype.itemsize == 2
    split_bn = min(bn, 64) if skinny else bn
    split = _split_k(tc.cdiv(m, bm) * tc.cdiv(n, split_bn) * batch, k, sm_count, skinny=skinny, t=t) \
        if allow_split_k else 1
    if split > 1:
        bn = split_bn
    elif allow_split_k and bm == 128 and n >= 256 and k >= t.long_k_split and \
            tc.cdiv(m, bm) * tc.cdiv(n, bn) * batch < sm_count:
        # too few tiles to fill the SMs and a long K: K slices of wide tiles beat narrower
        # tiles ("matmul: split-K")
        wide = _split_k(tc.cdiv(m, bm) * tc.cdiv(n, 256) * batch, k, sm_count, skinny=False, t=t)
        if wide > 1:
            bn, split = 256, wide
    while split == 1 and bn < 256 and tc.cdiv(m, bm) * tc.cdiv(n, bn) * batch < sm_count and max(bm, bn) > 64:
        if bn >= bm:
            bn //= 2
        else:
            bm //= 2
    warps = 8 if bm * bn >= 128 * 128 else 4
    bk = _bk(bm, bn, k, dtype, wgmma=target.has_wgmma, t=t)
    wgmma = target.has_wgmma and wgmma_shape(bm, bn, bk, dtype.itemsize, warps) is not None
    stage_bytes = (bm + bn) * bk * dtype.itemsize
    stages = max(2, min(4, (t.smem_budget_wgmma if wgmma else t.smem_budget) // stage_bytes))
    ws = wgmma and dtype.itemsize == 4 and (bm, bn) == (128, 256) and split == 1 and \
        tc.cdiv(m, bm) * tc.cdiv(n, bn) * batch >= t.ws_min_waves * sm_count
    return MatmulConfig(bm, bn, bk, warps, stages, sm_count=sm_count, split_k=split, warp_specialize=ws)


def _bk(bm: int, bn: int, k: int, dtype, *, wgmma: bool, t: MatmulTuning) -> int:
    """BK of a bm x bn tile (see config_for; `wgmma`: the target has it)."""
    warps = 8 if bm * bn >= 128 * 128 else 4
    wgmma_bk = 128 // dtype.itemsize
    if wgmma and wgmma_shape(bm, bn, wgmma_bk, dtype.itemsize, warps) is not None:
        return wgmma_bk
    if bm <= 32 and dtype.itemsize == 2 and k >= t.skinny_bk:
        # skinny M reads B at memory speed: long K steps keep more bytes in flight per program
        return t.skinny_bk
    return 32 if dtype.itemsize == 2 else 16


def _split_k(tiles: int, k: int, sm_count: int, *, skinny: bool, t: MatmulTuning) -> int:
    """split_k for `tiles` programs walking K (1: no split; see config_for)."""
    if tiles * 2 > sm_count or k < (2 if skinny else 1) * t.min_split_k:
        return 1
    target = (2 if skinny else 1) * sm_count
    split = min(target // tiles, t.max_split_k, k // t.min_slice_k)
    return split if split >= 2 else 1


def _pow2_floor(x: int) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


def _fit(extent: int) -> int:
    return max(16, min(128, next_pow2(max(extent, 1))))
