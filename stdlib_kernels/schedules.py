"""The row strategies, by name, with their eligibility and cost rules.

A row op (softmax, log_softmax, layer_norm, rms_norm, cross_entropy) reduces each row of
its last dimension to a few statistics and, for most, writes the row back normalized. How
a row is spread over programs is one of these schedules; the op's `plan` asks, in its
order, which one applies to its shapes on its Target and emits that schedule's launches
(each Launch carries the schedule's name):

- ONE_TILE: a row of up to MAX_SINGLE_TILE elements in one program's registers, short rows
  packed several to a program (`_common.row_config`), a row just past a power of two held
  as three quarter tiles (`_common.split_row`). Eligible: the row (with its window's lead)
  fits one tile. Read once.
- CLUSTER: sm_90+, rows of up to 8 chunks: the C programs of a thread-block cluster hold a
  chunk each and exchange their statistics (`_cluster_rows`). Eligible: `cluster_rows`
  finds a chunk shape (and, for softmax, the rows make at least `cluster_min_waves`
  programs per SM). Cost: the chunk shape that idles the fewest lanes
  (`_cluster_rows.split_chunks`), on the fewest programs (`fewer_programs`).
- PERSISTENT_CLUSTER: CLUSTER's kernel walking rows on as many clusters as the device holds
  at once, the next row loading during this one's exchange. Eligible: per op (softmax:
  `softmax_persistent_candidates`; norms: chunks filling the row exactly). Cost: among the
  candidates, the one whose grid holds the most programs (`most_resident`: the probe's
  answer, the driver's count of resident clusters).
- CHUNK_TILES: the norms' clusters for rows off 32-byte sectors or not filled by
  power-of-two chunks: each program's chunk as tiles of the row's aligned window
  (`_norm_chunks`, `norm_chunk_tiles_eligible`).
- LOOPED: one program per row reading the row twice (statistics, then the output); the
  norms' rows whose flight fits in L2 on one program per SM (`_common.long_row_launch`).
- SPLIT: fewer rows than fill the GPU: each row split into chunks among programs, a
  second (dependent) launch combining them (`split_chunks_count`).

The other ops' plans name their launches' strategies too:

- FLAT_TILES / ROW_TILES (the elementwise ops, dropout, rope): a contiguous array as one
  flat row in tiles of `flat_tile_elems`, else (BR, BC) tiles of its rows
  (`_rows.tile_config`).
- TILES (transpose): one (BM, BN) tile per program.
- GATHER (embedding): one (rows of ids, columns) tile of gathered rows per program; its
  backward, one (embedding row, column tile) per program adding that id's gradient rows.
- ONE_TILE, LOOPED, WINDOWS (sum/max along the last dimension, cumsum): a row in one tile,
  looped over tiles, or 2-byte rows off 32-byte sectors looped over small aligned windows.
- STRIPS (sum/max along another dimension; softmax_dim): column strips walking the
  reduced dimension; SPLIT there is strips whose rows are split among programs (f32
  partials merged by a dependent STRIPS launch); WINDOW_CLASSES: reduced rows off sectors
  read by classes of rows through aligned windows (`reductions.inner_window`).
- CANDIDATES, MERGE (topk, and sample's top-k): each chunk of a row selects its k best
  candidates, then levels of merges select among them until one program per row is left.
- GEMM_TILES, PERSISTENT, SPLIT_K (matmul): one output tile per program; at most one
  program per SM walking the tiles; K split into slices summed by a dependent reduction.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import tilec as tc

from .tuning import CrossEntropyTuning, NormTuning, SoftmaxTuning

__all__ = ["ONE_TILE", "CLUSTER", "PERSISTENT_CLUSTER", "CHUNK_TILES", "LOOPED", "SPLIT", "FLAT_TILES", "ROW_TILES",
           "TILES", "GATHER", "WINDOWS", "CANDIDATES", "MERGE", "STRIPS", "WINDOW_CLASSES", "GEMM_TILES", "PERSISTENT",
           "SPLIT_K", "most_resident",
           "split_chunks_count", "softmax_clusters_eligible", "softmax_persistent_candidates",
           "norm_chunk_tiles_eligible", "cross_entropy_split"]

ONE_TILE = "one_tile"
CLUSTER = "cluster"
PERSISTENT_CLUSTER = "persistent_cluster"
CHUNK_TILES = "chunk_tiles"
LOOPED = "looped"
SPLIT = "split"
FLAT_TILES = "flat_tiles"
ROW_TILES = "row_tiles"
TILES = "tiles"
GATHER = "gather"
WINDOWS = "windows"
STRIPS = "strips"
WINDOW_CLASSES = "window_classes"
GEMM_TILES = "gemm_tiles"
PERSISTENT = "persistent"
SPLIT_K = "split_k"
CANDIDATES = "candidates"
MERGE = "merge"


def most_resident(candidates: Sequence, grid_of: Callable) -> Optional[Tuple]:
    """PERSISTENT_CLUSTER's cost rule: of `candidates`, (grid, candidate) whose persistent grid
    (`grid_of(candidate)`, None when the device cannot tell) holds the most programs; ties go
    to the first. None when no candidate has a grid."""
    best = None
    for cand in candidates:
        grid = grid_of(cand)
        if grid is not None and (best is None or grid[0] > best[0][0]):
            best = (grid, cand)
    return best


def split_chunks_count(n_rows: int, n_tiles: int, t: SoftmaxTuning) -> Tuple[int, int]:
    """SPLIT's eligibility for softmax: (chunks, tiles per chunk) of rows of `n_tiles` tiles,
    about `split_target` programs in all, each chunk at least `min_chunk_tiles` tiles and
    holding one real tile at least; chunks < 2 (not eligible) from `split_rows` rows."""
    chunks = min(tc.cdiv(t.split_target, n_rows), n_tiles // t.min_chunk_tiles) if n_rows < t.split_rows else 1
    if chunks < 2:
        return chunks, n_tiles
    per = tc.cdiv(n_tiles, chunks)
    return tc.cdiv(n_tiles, per), per


def softmax_clusters_eligible(cl, n_rows: int, sm_count: int, t: SoftmaxTuning) -> bool:
    """CLUSTER's eligibility for softmax: a chunk shape exists and the rows make at least
    `cluster_min_waves` programs per SM (fewer rows take SPLIT)."""
    return cl is not None and n_rows * cl.c >= t.cluster_min_waves * sm_count


def softmax_persistent_candidates(cl, n_cols: int, itemsize: int, window: int, t: SoftmaxTuning,
                                  cluster_rows_cls) -> List[Tuple]:
    """PERSISTENT_CLUSTER's candidates for softmax rows of `n_cols` (with the window's padding)
    on clusters `cl`, as (ClusterRows, further constexprs): chunks held as tiles never; 2-byte
    rows on 32-byte sectors past 2 * loop_min_chunk in chunks of loop_min_chunk at loop_warps
    or of half that at half_loop_warps, other 2-byte rows whose chunks reach loop_min_chunk in
    those chunks, on at most 8 programs; f32 rows of exactly C full chunks of loop_min_chunk,
    the next chunk staged in shared memory (STAGES, EVEN: no padding)."""
    if cl.tiles > 1:
        return []
    if itemsize == 2:
        if not window and n_cols > 2 * t.loop_min_chunk:
            sizes = ((t.loop_min_chunk, t.loop_warps), (t.loop_min_chunk // 2, t.half_loop_warps))
        elif cl.block >= t.loop_min_chunk and cl.tiles == 1:
            sizes = ((t.loop_min_chunk, t.loop_warps),)
        else:
            return []
        return [(cluster_rows_cls(tc.cdiv(n_cols, b), b, w), {}) for b, w in sizes if tc.cdiv(n_cols, b) <= 8]
    if cl.block >= t.loop_min_chunk and cl.tiles == 1 and n_cols == cl.c * cl.block:   # (so no window)
        return [(cl, dict(STAGES=t.loop_stages_f32, EVEN=True))]
    return []


def norm_chunk_tiles_eligible(rms: bool, itemsize: int, chunks, row_bytes: int, t: NormTuning) -> bool:
    """CHUNK_TILES' eligibility for the norms' rows that clusters take but C power-of-two
    chunks do not fill (or off 32-byte sectors): 2-byte rows always; f32 rows on at most
    `f32_chunk_tiles_max_c` programs, and f32 layer_norm rows not 16 bytes apart
    (`row_bytes`), whose staged copies move 4 bytes; the rest keep PERSISTENT_CLUSTER."""
    if itemsize == 2:
        return True
    return chunks.c <= t.f32_chunk_tiles_max_c or (not rms and row_bytes % 16 != 0)


def cross_entropy_split(n_rows: int, n_steps: int, t: CrossEntropyTuning) -> Tuple[int, int]:
    """SPLIT's eligibility for cross_entropy: (chunks per row, steps per chunk) for rows of
    `n_steps` steps, about `split_rows` programs in all; 1 chunk (LOOPED) from `split_rows` rows."""
    chunks = 1 if n_rows >= t.split_rows else min(n_steps, tc.cdiv(t.split_rows, n_rows))
    per = tc.cdiv(n_steps, chunks)
    return tc.cdiv(n_steps, per), per
