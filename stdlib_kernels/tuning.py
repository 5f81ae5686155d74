"""Per-target tuning tables of the standard library's plans.

The numbers an op's schedule choice reads (where one strategy gives way to another,
the warps and tiles of a strategy) are entries of these frozen dataclasses, one table per
target family, looked up with `row_tuning(target)` (also `tuning_for`). Every field names
the section of docs/benchmarks-archive.md that holds the measurements behind it ("Row ops'
tuning tables" for softmax, the norms and cross_entropy; "The other ops' tuning tables" for
the elementwise ops, transpose, the reductions and matmul); the code that reads a field
says only what it means.

Families: "sm_90" (H100, H200: where every number was measured) and "sm_80", which has no
clusters (the cluster fields are never read there) and takes the sm_90 numbers until
measured on its own hardware. Where one part of a family measured otherwise than the part
a field was tuned on, PART_OVERRIDES holds that part's values, applied over the family's
table for a device whose name contains the part's (`row_tuning`; the H200's faster memory
moves a few of the row ops' optima). (matmul's numbers for sm_80 were measured where GEMMs of
host arrays plan for it: an H100's SMs with sm_80's mma.sync tiles, the "Before wgmma"
tables.)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Dict, Tuple

from tilec.target import Target

__all__ = ["ClusterTuning", "SoftmaxTuning", "NormTuning", "CrossEntropyTuning", "ElementwiseTuning",
           "TransposeTuning", "EmbeddingTuning", "ReductionTuning", "MatmulTuning", "TopkTuning", "SamplingTuning",
           "AttentionBwdTuning", "DecodeTuning", "MlaDecodeTuning", "RowTuning", "TABLES", "PART_OVERRIDES",
           "table_family", "row_tuning", "tuning_for"]


@dataclass(frozen=True)
class ClusterTuning:
    """The cluster schedules' chunk shapes (`_cluster_rows`, `_norm_chunks`)."""
    cluster_chunk: int = 8192           # elements per program wanted ("clusters: chunk sizes")
    max_softmax_chunk: int = 32768      # softmax's longest chunk ("clusters: chunk sizes")
    max_norm_chunk: int = 16384         # the norms' longest chunk ("clusters: chunk sizes")
    per_thread: int = 32                # elements each thread holds ("clusters: chunk sizes")
    chunk_tile: int = 1024              # chunks as tiles: columns per tile ("clusters: chunks as tiles")
    chunk_tile_warps: int = 4
    min_chunk_tiles: int = 4
    max_chunk_tiles: int = 8
    chunk_tile_registers: int = 64      # the floor of programs per SM these registers allow
    long_chunk_tiles: int = 10          # long 2-byte rows: up to this many tiles ("clusters: long rows as tiles")
    long_chunk_tile: int = 2048         # or tiles of this many columns
    long_chunk_tile_warps: int = 8
    long_chunk_max_tiles: int = 7       # at most this many on rows on 32-byte sectors
    chunk_programs_per_sm: int = 5      # 2-byte chunks at chunk_programs_warps: floor ("clusters: 2-byte chunks' floor")
    chunk_programs_warps: int = 8
    hold_max_c: int = 4                 # 2-byte layer_norm chunks held on this many programs ("norms: held chunks")
    hold_min_programs: int = 5          # or where the held kernel keeps this many per SM


@dataclass(frozen=True)
class SoftmaxTuning:
    split_rows: int = 264         # fewer long rows than this: split each row among programs ("softmax: split rows")
    split_target: int = 1024      # programs wanted when splitting ("softmax: split rows")
    min_chunk_tiles: int = 2      # tiles per split chunk at least ("softmax: split rows")
    cluster_min_waves: int = 2    # clusters from this many programs per SM ("softmax: cluster waves")
    loop_min_chunk: int = 32768   # 2-byte chunks this long run persistent ("softmax: persistent clusters")
    loop_warps: int = 16          # warps of the persistent kernel ("softmax: persistent clusters")
    half_loop_warps: int = 8      # warps of its half chunks ("softmax: fewest persistent programs")
    loop_stages_f32: int = 2      # f32 persistent rows: the next chunk staged ("softmax: staged f32 rows")


@dataclass(frozen=True)
class NormTuning:
    f32_chunk_tiles_max_c: int = 5          # f32 chunk tiles on at most this many programs ("norms: chunk tiles")
    ln_stages: int = 2                      # f32 layer_norm persistent rows staged ("norms: staged rows")
    ln_chunk_2byte: int = 8192              # 2-byte layer_norm chunk ("norms: 2-byte layer_norm clusters")
    ln_stages_2byte: int = 3                # its rows staged ("norms: 2-byte layer_norm clusters")
    ln_eight_chunks_warps: int = 4          # its clusters of 8: warps ("norms: clusters of 8 at 4 warps")
    ln_eight_chunks_programs_per_sm: int = 2  # and floor of programs per SM ("norms: clusters of 8 at 4 warps";
                                              # H100; the H200 takes 3: PART_OVERRIDES)
    halve_min_block: int = 2048             # one-program rows in halves from this tile ("norms: half tiles")
    shift_table_min_bytes: int = 16 << 20   # windowed rows read w and b from shifted tables ("norms: shift tables")
    shift_table_block: int = 1024           # lanes per program of the table launch ("norms: shift tables")
    # backward (backward.py; not yet measured: Liger's one program per SM, doubled for latency)
    bwd_programs_per_sm: int = 2            # row programs per SM, each with its (cols,) dw/db partials
    bwd_reduce_cols: int = 256              # columns per program of the partials' reduction
    bwd_reduce_tile: int = 4096             # partials (rows x cols) per step of that reduction


@dataclass(frozen=True)
class CrossEntropyTuning:
    max_reduce_block: int = 8192            # the mean/sum's tile ("cross_entropy: the mean")
    reduce_per_thread: int = 16             # its elements per thread ("cross_entropy: the mean")
    loop_block: int = 4096                  # f32 rows on sectors, long 2-byte windowed rows ("cross_entropy: loop tiles")
    loop_warps: int = 16
    wide_loop_block: int = 8192             # 2-byte rows on sectors ("cross_entropy: loop tiles")
    wide_loop_warps: int = 32               # (H100; the H200 takes 4096 at 16: PART_OVERRIDES)
    short_loop_block: int = 2048            # split rows and windowed rows ("cross_entropy: loop tiles")
    short_loop_warps: int = 8
    window_loop_max_cols: int = 65536       # 2-byte windowed rows up to this many classes take short steps
    split_rows: int = 1024                  # fewer rows than this: split rows into chunks ("cross_entropy: split rows")


@dataclass(frozen=True)
class ElementwiseTuning:
    """The elementwise ops' (gelu, swiglu, add, mul, rope, dropout and their backwards) tiles (`_rows.tile_config`)."""
    tile_elems: int = 4096        # elements per program of rows ("elementwise: tiles")
    per_thread: int = 16          # their elements per thread ("elementwise: tiles")
    flat_tile_elems: int = 1024   # one flat row (a contiguous array): elements per program ("elementwise: flat tiles")
    flat_per_thread: int = 8      # and per thread ("elementwise: flat tiles")
    max_warps: int = 8            # ("elementwise: tiles")
    rope_half_tile_elems: int = 2048   # rope's half-split tiles: each of two halves ("elementwise: tiles")


@dataclass(frozen=True)
class TransposeTuning:
    """transpose's tiles (rows, cols) by element size, and its warps."""
    tile_1byte: Tuple[int, int] = (128, 128)   # ("transpose: tiles")
    tile_2byte: Tuple[int, int] = (128, 128)   # ("transpose: tiles")
    tile_4byte: Tuple[int, int] = (64, 128)    # ("transpose: tiles")
    tile_8byte: Tuple[int, int] = (64, 64)     # ("transpose: tiles")
    min_tile: int = 16                          # smallest tile extent (small matrices)
    elems_per_warp: int = 1024                  # one warp per this many tile elements, 1..max_warps
    max_warps: int = 8

    def tile(self, itemsize: int) -> Tuple[int, int]:
        return {1: self.tile_1byte, 2: self.tile_2byte, 4: self.tile_4byte, 8: self.tile_8byte}[itemsize]


@dataclass(frozen=True)
class EmbeddingTuning:
    """embedding's gather tiles (rows of ids, columns of the embedding): not measured yet, the
    elementwise ops' tile size and warps ("elementwise: tiles")."""
    tile_elems: int = 4096        # elements per program
    max_cols: int = 1024          # widest column tile; longer rows take several programs
    num_warps: int = 4
    # the backward's segment sums (one program per embedding row and column tile): rows of
    # gradient gathered per step, widest column tile, warps (not measured yet)
    bwd_tile_elems: int = 4096
    bwd_max_cols: int = 512
    bwd_num_warps: int = 4


@dataclass(frozen=True)
class ReductionTuning:
    """sum, max and cumsum (reductions.py); the inner-dimension numbers also serve softmax_dim."""
    strip_columns: int = 128      # the aligned sum/max over a non-last dimension ("reductions: column strips")
    strip_tile_bytes: int = 8192  # ("reductions: column strips")
    strip_programs: int = 1024    # ("reductions: column strips")
    min_tiles_per_split: int = 4  # split programs walk at least this many tiles ("reductions: column strips")
    inner_tile: int = 4096        # windowed inner kernel and merges: tile elements ("reductions: inner strips")
    max_strip: int = 256          # widest strip, 4-byte types ("reductions: inner strips")
    max_strip_2byte: int = 512    # 2-byte types ("reductions: inner strips")
    split_target: int = 1024      # programs wanted ("reductions: split strips")
    split_target_2byte: int = 512  # ("reductions: split strips")
    tiles_per_split: int = 16     # row tiles per program at most, where rows spare ("reductions: split strips")
    tiles_per_split_2byte: int = 32  # ("reductions: split strips")
    max_scan_tile: int = 4096     # cumsum: longest row scanned in one tile ("reductions: cumsum")
    min_window_inner: int = 128   # reduced rows off sectors through windows from this many columns ("reductions: windows")
    window_loop_tile: int = 512   # 2-byte rows off sectors: windows of this many, from that many columns ("reductions: windows")
    window_loop_warps: int = 2    # ("reductions: windows")
    window_pair_bytes: int = 2048  # rows of at most this many bytes two to a program ("reductions: window pairs")


@dataclass(frozen=True)
class MatmulTuning:
    """matmul's configuration heuristic (matmul_config.config_for)."""
    smem_budget: int = 160 * 1024        # operand buffers, mma.sync tiles (sm_80: 164 KB per CTA; "matmul: stages")
    smem_budget_wgmma: int = 200 * 1024  # wgmma tiles (sm_90a: 227 KB per CTA; "matmul: stages")
    wide_tile_sm_share: Tuple[int, int] = (9, 10)   # 128 x 256 while this share of SMs stays busy ("matmul: tiles")
    ws_min_waves: int = 8                # tf32 warp specialization from this many programs per SM ("matmul: warp specialization")
    min_slice_k: int = 1024              # split-K: each K slice at least this long ("matmul: split-K")
    min_split_k: int = 4096              # split-K: K at least this long, twice for skinny M ("matmul: split-K")
    max_split_k: int = 16                # split-K: at most this many slices ("matmul: split-K")
    long_k_split: int = 16384            # split-K of 128 x 256 tiles rather than smaller tiles from this K on ("matmul: split-K")
    reduce_tile: int = 2048              # elements per program of the split-K reduction ("matmul: split-K")
    skinny_bk: int = 128                 # skinny-M 2-byte tiles' K step ("matmul: skinny M")


@dataclass(frozen=True)
class TopkTuning:
    """topk's selection levels (topk.levels; not yet measured: one warp per 512 entries as
    the row ops' tiles, chunks of the looped row tile)."""
    chunk: int = 4096             # columns per program of the first level
    merge_block: int = 4096       # candidates per program of a merge level
    per_thread: int = 16          # entries per thread of a selection tile
    max_warps: int = 8
    max_k: int = 1024             # the largest k (a KP-lane candidate tile per program)


@dataclass(frozen=True)
class SamplingTuning:
    """sample's row walk (sampling.plan; not yet measured: the looped row ops' tile)."""
    block: int = 4096             # columns per step of a row
    warps: int = 8
    split_rows: int = 264         # fewer rows than this (no nucleus): rows split into chunks (as softmax's)
    split_target: int = 1024      # programs wanted when splitting
    min_chunk_tiles: int = 2      # tiles per chunk at least


@dataclass(frozen=True)
class AttentionFwdTuning:
    """attention's forward tilings (attention.config_for), each (BM query rows, BN keys per
    step, warps); every sm_90a one assembles with no spills, and each is the fastest spill-free
    candidate of bench/attention_configs.py where timed (docs/benchmarks.md, "Forward tilings
    per head dim"). Tile head dims up to 128: both dots wgmma over two warpgroups. 256-wide
    values (a 128 x 256 f32 accumulator over two warpgroups, 241 registers): both dots wgmma
    too, with a ring of 2 stages (3 slots of 64 x 256 K and V do not fit beside Q; 1.94x the
    64-row tiling of QKᵀ on mma.sync before). 192/128 (MLA prefill): as up to 128. The varlen kernel above 128 (rows not tile-aligned, so no TMA, and more shared memory:
    64 x 64 at DV 256 asks 320 KiB) and targets without wgmma take mma.sync blocks."""
    narrow: Tuple[int, int, int] = (128, 64, 8)        # tile head dims up to 128
    # tile head dim 128 with wgmma over few keys (causal up to short_keys_causal, else up to
    # short_keys): 64 rows over one warpgroup, two programs per SM, so one's prologue and
    # epilogue run under the other's loop (docs/benchmarks.md, "Short sequences"; grouped
    # heads measured too)
    short: Tuple[int, int, int] = (64, 64, 4)
    short_keys: int = 1024
    short_keys_causal: int = 4096
    # tile head dim 128 on targets with setmaxnreg (sm_90a), dense calls: a producer warpgroup
    # fills the K/V ring and the two consumer warpgroups take 128 keys per step (their 232
    # registers hold it); causal calls over up to specialized_short_keys_causal keys keep the
    # short tiling (docs/benchmarks.md, "Warp-specialized forward")
    specialized: Tuple[int, int, int] = (128, 128, 8)
    specialized_short_keys_causal: int = 1024
    # tile head dims up to 64 with wgmma: a floor of programs per SM (two: 128 registers, no
    # spill; measured in docs/benchmarks.md, "Forward tilings per head dim")
    narrow_64_programs_per_sm: int = 2
    wide_v: Tuple[int, int, int] = (128, 64, 8)        # value head dim 256
    wide_v_stages: int = 2                              # its key/value ring (cp.async)
    wide_qk: Tuple[int, int, int] = (128, 64, 8)       # q/k head dim above 128, values up to 128
    varlen_wide_v: Tuple[int, int, int] = (64, 16, 8)
    varlen_wide_qk: Tuple[int, int, int] = (64, 32, 8)
    mma_wide: Tuple[int, int, int] = (64, 32, 8)       # no wgmma, above 128 (64 x 64 spill on sm_80)
    # causal masks: programs walk sections of (batch, head) pairs heaviest block first, as many
    # pairs per section as keep their K and V (or Q and dO) within this many bytes of L2
    # (attention.heavy_first_section; forward and backward; "attention: heaviest-first order")
    section_l2_bytes: int = 24 << 20
    heavy_first_gqa: bool = False   # ... the forward with grouped-query heads too (measured slower there)


@dataclass(frozen=True)
class AttentionBwdTuning:
    """attention_backward's tilings (attention_bwd._tiling): (kv_block, q_step) of the dK/dV
    kernel (keys owned, query rows per step) and (q_block, kv_step) of the dQ kernel (query
    rows owned, keys per step); each the largest ptxas assembles without spills. The wgmma
    blocks are sm_90's ("Attention backward on wgmma (2026-11-28)"): two warpgroups of 64
    owned rows, steps of 64. The head dims (padded to a power of two) that take them, per
    path: the dense and varlen kernels up to 128 (the varlen dK/dV kernel keeps another
    sequence's rows out in _probs' mask: a `where` on their lse and δ rows spilled 20-40
    bytes at 128); the mods kernels (score_mod, block lists) up to 128, except the dK/dV
    kernel of "mods_heavy" calls (mods that gather from mod arrays per score, or block
    lists walked once per query head of a GQA group: 36-508 bytes spilled at 128), only up
    to 64, the mma.sync tiles above. softcap's dK/dV kernels take them up to
    wgmma_max_head_dim_softcap_dkdv (128: with dP' = dP - dP·t² they assemble with no spill;
    dP · (1 - t²) spilled 8 bytes at 128)."""
    # dQ inside the dK/dV kernel (attention_bwd_dkdv_dq_kernel: five products for seven, dQ added
    # into f32 by TMA reductions whose scratch reads are awaited a round later) at these tile
    # head dims on wgmma targets, dense calls without softcap or deterministic=True: faster than
    # two kernels at 128 only (docs/benchmarks-archive.md, "The stdlib backward, twenty-sixth
    # session's table -> twenty-ninth session's")
    fused_dq_head_dims: Tuple[int, ...] = (128,)
    # ... with grouped query heads under a causal mask only for groups of up to this many
    # (larger groups were slower than two kernels: docs/benchmarks-archive.md, "dQ inside the
    # dK/dV kernel with grouped query heads")
    fused_dq_max_group_causal: int = 4
    wgmma_dkdv: Tuple[int, int] = (128, 64)
    wgmma_dq: Tuple[int, int] = (128, 64)
    # head dims up to wgmma_small_max_head_dim, dense and varlen kernels: one warpgroup owns 64
    # rows and steps by 64, (kv_block, q_step, q_block, kv_step, warps): smaller programs, more
    # per SM (dK/dV 2, dQ 3; no spill); measured in docs/benchmarks-archive.md, "Backward
    # tilings and forms, twenty-second session"
    wgmma_small: Tuple[int, int, int, int, int] = (64, 64, 64, 64, 4)
    # ... and the dense dK/dV kernel there held to this many programs per SM (168 registers, no
    # spill; timed in docs/benchmarks-archive.md, "The stdlib backward, twenty-sixth session's
    # table -> twenty-ninth session's")
    wgmma_small_dkdv_programs: int = 3
    wgmma_small_max_head_dim: int = 64
    wgmma_max_head_dim: int = 128
    wgmma_max_head_dim_mods_heavy_dkdv: int = 64
    wgmma_max_head_dim_softcap_dkdv: int = 128
    mma_64: Tuple[int, int, int, int] = (64, 16, 64, 32)     # head dims up to 64: (kv_block, q_step, q_block, kv_step)
    mma_128: Tuple[int, int, int, int] = (32, 32, 64, 32)    # up to 128
    # GQA: the dK/dV kernel splits a kv head's query heads over programs (f32 partials, then
    # summed) while it has fewer programs than this per SM (attention_bwd.gqa_split; "attention:
    # heaviest-first order")
    gqa_split_waves: int = 2


@dataclass(frozen=True)
class DecodeTuning:
    """attention_decode's split-KV and tile numbers (attention_decode.split_count, config_for;
    docs/benchmarks.md "Decode attention": the split sweep behind split_waves)."""
    split_min_programs: float = 1.0   # split only while the programs are fewer than this many per SM
    split_waves: int = 2              # splits for as many programs per SM as this (rounded down)
    min_split_tiles: int = 4          # each split reads at least this many tiles of keys
    max_splits: int = 128
    keys_per_step: int = 64           # BN ("Decode attention": the --bn sweep; H200)


@dataclass(frozen=True)
class MlaDecodeTuning:
    """mla_decode's split numbers (mla_decode.split_count; docs/benchmarks.md "MLA decode")."""
    max_splits: int = 32
    min_steps_per_split: int = 4      # a split reads at least this many steps: fewer make the merge dominate


@dataclass(frozen=True)
class RowTuning:
    family: str
    cluster: ClusterTuning = ClusterTuning()
    softmax: SoftmaxTuning = SoftmaxTuning()
    norm: NormTuning = NormTuning()
    cross_entropy: CrossEntropyTuning = CrossEntropyTuning()
    elementwise: ElementwiseTuning = ElementwiseTuning()
    transpose: TransposeTuning = TransposeTuning()
    embedding: EmbeddingTuning = EmbeddingTuning()
    reduction: ReductionTuning = ReductionTuning()
    matmul: MatmulTuning = MatmulTuning()
    topk: TopkTuning = TopkTuning()
    sampling: SamplingTuning = SamplingTuning()
    attention_fwd: AttentionFwdTuning = AttentionFwdTuning()
    attention_bwd: AttentionBwdTuning = AttentionBwdTuning()
    decode: DecodeTuning = DecodeTuning()
    mla_decode: MlaDecodeTuning = MlaDecodeTuning()


TABLES = {
    "sm_90": RowTuning("sm_90"),
    "sm_80": RowTuning("sm_80"),   # not measured on sm_80 hardware: the sm_90 numbers
}

# {family: {part: {section: {field: value}}}}: a part's own values where it measured otherwise
# than the part the family's field was tuned on (docs/benchmarks-archive.md, "Redesign
# no-regression checks and the H200 part table").
PART_OVERRIDES: Dict[str, Dict[str, Dict[str, Dict[str, object]]]] = {
    "sm_90": {
        "H200": {
            "norm": {"ln_eight_chunks_programs_per_sm": 3},   # 168 registers, 3 programs per SM
            "cross_entropy": {"wide_loop_block": 4096, "wide_loop_warps": 16},
        },
    },
}


def table_family(target: Target) -> str:
    """The key of `target`'s family table in TABLES: "sm_90" from sm_90 on, else "sm_80"."""
    return "sm_90" if tuple(target.capability) >= (9, 0) else "sm_80"


def row_tuning(target: Target) -> RowTuning:
    """The table of `target`: its family's (TABLES, read at each call, so a swapped table
    applies), with the PART_OVERRIDES of the part its device name names."""
    family = table_family(target)
    table = TABLES[family]
    part = next((p for p in PART_OVERRIDES.get(family, {}) if p in target.device), None)
    return table if part is None else _with_part(table, family, part)


@lru_cache(maxsize=16)
def _with_part(table: RowTuning, family: str, part: str) -> RowTuning:
    sections = PART_OVERRIDES[family][part]
    return replace(table, **{name: replace(getattr(table, name), **fields) for name, fields in sections.items()})


tuning_for = row_tuning   # (the name for ops that are not row ops)
