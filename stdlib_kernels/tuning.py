"""Per-target tuning tables of the row ops (softmax, the norms, cross_entropy).

The numbers a row op's schedule choice reads (where one strategy gives way to another,
the warps and tiles of a strategy) are entries of these frozen dataclasses, one table per
target family, looked up with `row_tuning(target)`. Every field names the section of
docs/benchmarks-archive.md, "Row ops' tuning tables", that holds the measurements behind
it; the code that reads a field says only what it means.

Families: "sm_90" (H100, H200: where every number was measured) and "sm_80", which has no
clusters (the cluster fields are never read there) and takes the sm_90 numbers until
measured on its own hardware.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilec.target import Target

__all__ = ["ClusterTuning", "SoftmaxTuning", "NormTuning", "CrossEntropyTuning", "RowTuning", "TABLES", "row_tuning"]


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
    ln_eight_chunks_programs_per_sm: int = 2  # and floor of programs per SM ("norms: clusters of 8 at 4 warps")
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
    wide_loop_warps: int = 32
    short_loop_block: int = 2048            # split rows and windowed rows ("cross_entropy: loop tiles")
    short_loop_warps: int = 8
    window_loop_max_cols: int = 65536       # 2-byte windowed rows up to this many classes take short steps
    split_rows: int = 1024                  # fewer rows than this: split rows into chunks ("cross_entropy: split rows")


@dataclass(frozen=True)
class RowTuning:
    family: str
    cluster: ClusterTuning = ClusterTuning()
    softmax: SoftmaxTuning = SoftmaxTuning()
    norm: NormTuning = NormTuning()
    cross_entropy: CrossEntropyTuning = CrossEntropyTuning()


TABLES = {
    "sm_90": RowTuning("sm_90"),
    "sm_80": RowTuning("sm_80"),   # not measured on sm_80 hardware: the sm_90 numbers
}


def row_tuning(target: Target) -> RowTuning:
    """The table of `target`'s family (sm_90 and later: "sm_90"; sm_80 to sm_89: "sm_80")."""
    return TABLES["sm_90" if tuple(target.capability) >= (9, 0) else "sm_80"]
