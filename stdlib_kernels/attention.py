"""attention(q, k, v, ...): softmax(q kᵀ · scale) v, flash-style (no seq × seq matrix in memory).

One program computes BM query rows of one (batch, head) and streams that head's keys
and values BN at a time with the online softmax of `examples/flash_attention.py`:
running row max and sum in base 2, the accumulator rescaled when the max rises.
Everything the kernel needs to know about the layout is in the strides:

- `layout="bshd"` (flash-attn's `(batch, seq, heads, dim)`) or `"bhsd"` (SDPA's
  `(batch, heads, seq, dim)`); the entry point hands the kernel a `(batch, heads,
  seq, dim)` view of either, no copies. Any strides with a unit last dimension.
- Grouped-query / multi-query attention: k and v may have fewer heads than q (a
  divisor); query head h reads key/value head h // (heads / kv_heads).
- Any head dim: the tile's dim is the next power of two, and the loads' zero padding
  makes the extra columns add nothing (k's and v's head dims may differ).

Masking is one rule with two run-time bounds: query row i (aligned bottom-right when
seq_q != seq_k, as flash-attn: offset = seq_k - seq_q) sees key j when
i + offset - left <= j <= i + offset + right. `causal` is right = 0; `window=(left,
right)` sets both (-1 for unbounded). The key blocks that every row of a tile sees
whole run without a mask; only the blocks on the band's edges are masked. A row that
sees no key at all (possible with windows, or causal with seq_q > seq_k) gets zeros
and lse = -inf, as flash-attn.

`softcap` (Gemma-2) caps scores as softcap · tanh(score / softcap) before the
softmax. `return_lse=True` also returns the natural log-sum-exp per row, f32,
`(batch, heads, seq_q)`.

The gradients are `attention_backward` (attention_bwd.py), from the forward's out and lse.
Packed variable-length sequences (cu_seqlens, attention_varlen.py) run the same program body,
`_fwd_tile` with VARLEN set, in `attention_varlen_fwd_kernel`.
User `score_mod` / `mask_mod` functions and block masks (FlexAttention's semantics) take
their own kernels: attention_mods.py, attention_mask.py.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import List, Optional, Tuple

import tilec as tc
from tilec.target import Target

from ._common import Arr, as_array, check_float, check_same_place, next_pow2, output, target_of, view
from ._plan import named, planned
from .launches import Launch, Operands, execute
from .tuning import tuning_for

__all__ = ["attention", "attention_fwd_kernel", "attention_varlen_fwd_kernel", "AttentionConfig", "config_for",
           "program_block", "section_grid", "heavy_first_section", "kv_pair_bytes",
           "check_config", "plan", "forward_outputs", "forward_operands", "SIGNATURES"]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
UNBOUNDED = 1 << 30   # a window side with no limit (sequences are shorter than 2^30)
HEAD_DIMS = 256       # the largest head dim a tile holds


@tc.func
def softmax_step(s, m_i, l_i, scale=1.0):
    """One block of base-2 scores `s` · `scale` (-inf where masked; `scale` > 0) through the
    online softmax: (the running row max and sum, P, alpha: the factor that rescales what was
    accumulated before). The scale multiplies each row's max and goes into exp2's argument as
    an fma, not a multiply per score."""
    m_new = tc.maximum(m_i, tc.max(s, axis=1) * scale)
    # A row that has seen no key yet keeps m = -inf: subtract 0 instead, so exp2 gives 0, not NaN.
    m_use = tc.where(m_new == float("-inf"), 0.0, m_new)
    p = tc.exp2(s * scale - m_use[:, None])
    alpha = tc.exp2(m_i - m_use)
    return m_new, l_i * alpha + tc.sum(p, axis=1), p, alpha


@tc.func
def online_softmax(s, vt, m_i, l_i, acc, scale=1.0):
    """softmax_step, then the accumulator rescaled and advanced by P V. Shared by the attention
    forward and the decode kernels."""
    m_new, l_new, p, alpha = softmax_step(s, m_i, l_i, scale)
    return m_new, l_new, tc.dot(p.astype(vt.dtype), vt, acc * alpha[:, None])


@tc.func
def band_blocks(lo, hi, whole_lo, whole_hi, B: tc.constexpr):
    """(first, inner_lo, inner_hi, last): the blocks of B positions a tile walks, given the
    positions some of its rows see, [lo, hi), and those every row sees, [whole_lo, whole_hi):
    blocks [first, inner_lo) and [inner_hi, last) need the mask, [inner_lo, inner_hi) not."""
    first = lo // B
    last = tc.maximum(tc.cdiv(hi, B), first)
    inner_lo = tc.minimum(tc.maximum(tc.cdiv(whole_lo, B), first), last)
    inner_hi = tc.minimum(tc.maximum(whole_hi // B, inner_lo), last)
    return first, inner_lo, inner_hi, last


@tc.func
def _block(qt, k, v, b, hk, j, m_i, l_i, acc, qk_scale, cap, q0, off, left, right, n_kv, k_start,
           MASKED: tc.constexpr, SOFTCAP: tc.constexpr, VARLEN: tc.constexpr,
           BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    if VARLEN:   # keys of the packed sequence from k_start; those past its end are masked below
        kt = tc.reshape(tc.load(k, offset=(b, hk, k_start + j * BN, 0), shape=(1, 1, BN, DK), padding=0.0), (BN, DK))
        vt = tc.reshape(tc.load(v, offset=(b, hk, k_start + j * BN, 0), shape=(1, 1, BN, DV), padding=0.0), (BN, DV))
        if MASKED:   # values past the sequence are another's: zeros, as padding (0 · inf would be NaN)
            vt = tc.where((j * BN + tc.arange(0, BN) < n_kv)[:, None], vt, 0.0)
    else:
        kt = tc.reshape(tc.load(k, index=(b, hk, j, 0), shape=(1, 1, BN, DK), padding=0.0), (BN, DK))
        vt = tc.reshape(tc.load(v, index=(b, hk, j, 0), shape=(1, 1, BN, DV), padding=0.0), (BN, DV))
    s = tc.dot(qt, kt.T)
    if SOFTCAP:   # cap · tanh(score / cap), in base 2: cap and log2(e) fold into qk_scale
        s = tc.tanh(s * cap)
    if MASKED:
        cols = j * BN + tc.arange(0, BN)
        rows = q0 + off + tc.arange(0, BM)
        keep = ((cols[None, :] < n_kv) & (cols[None, :] >= rows[:, None] - left)
                & (cols[None, :] <= rows[:, None] + right))
        s = tc.where(keep, s, float("-inf"))
    return online_softmax(s, vt, m_i, l_i, acc, qk_scale)


@tc.func
def _fwd_tile(q, k, v, o, lse, b, h, mblk, q_start, n_q, k_start, n_kv, qk_scale, cap, left, right,
              GROUP: tc.constexpr, SOFTCAP: tc.constexpr, LSE: tc.constexpr, VARLEN: tc.constexpr,
              BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    """Query rows [mblk·BM, mblk·BM + BM) of head h of one sequence of n_q queries and n_kv
    keys: batch b of the dense views, or (VARLEN) the packed rows from q_start and k_start of
    (1, heads, total, dim) views, b = 0, whose rows past the sequence are masked or not stored."""
    hk = h // GROUP
    q0 = mblk * BM
    off = n_kv - n_q          # bottom-right alignment
    if VARLEN:
        qt = tc.reshape(tc.load(q, offset=(b, h, q_start + q0, 0), shape=(1, 1, BM, DK), padding=0.0), (BM, DK))
    else:
        qt = tc.reshape(tc.load(q, index=(b, h, mblk, 0), shape=(1, 1, BM, DK), padding=0.0), (BM, DK))

    m_i = tc.full((BM,), float("-inf"), tc.float32)
    l_i = tc.zeros((BM,), tc.float32)
    acc = tc.zeros((BM, DV), tc.float32)

    # Keys any row of the tile sees: [lo, hi); keys every row sees: [whole_lo, whole_hi].
    lo = tc.maximum(q0 + off - left, 0)
    hi = tc.minimum(q0 + BM - 1 + off + right + 1, n_kv)
    whole_lo = tc.maximum(q0 + BM - 1 + off - left, 0)
    whole_hi = tc.minimum(q0 + off + right + 1, n_kv)
    first, inner_lo, inner_hi, last = band_blocks(lo, hi, whole_lo, whole_hi, BN)
    for j in range(first, inner_lo):
        m_i, l_i, acc = _block(qt, k, v, b, hk, j, m_i, l_i, acc, qk_scale, cap, q0, off, left, right, n_kv,
                               k_start, True, SOFTCAP, VARLEN, BM, BN, DK, DV)
    for j in range(inner_lo, inner_hi):
        m_i, l_i, acc = _block(qt, k, v, b, hk, j, m_i, l_i, acc, qk_scale, cap, q0, off, left, right, n_kv,
                               k_start, False, SOFTCAP, VARLEN, BM, BN, DK, DV)
    for j in range(inner_hi, last):
        m_i, l_i, acc = _block(qt, k, v, b, hk, j, m_i, l_i, acc, qk_scale, cap, q0, off, left, right, n_kv,
                               k_start, True, SOFTCAP, VARLEN, BM, BN, DK, DV)

    seen = l_i > 0.0
    out = acc / tc.where(seen, l_i, 1.0)[:, None]
    if VARLEN:   # the tile's rows past the sequence belong to the next one: not stored
        rows = tc.arange(0, BM)
        ok = q0 + rows < n_q
        packed = (q_start + q0 + rows).astype(tc.int64)
        cols = tc.arange(0, DV)
        tc.store(o.ptr + h * o.stride(1) + packed[:, None] * o.stride(2) + cols[None, :], out.astype(o.dtype),
                 mask=ok[:, None] & (cols < o.shape[3])[None, :])
        if LSE:
            row_lse = tc.where(seen, (m_i + tc.log2(l_i)) * LN2, float("-inf"))
            tc.store(lse.ptr + h * lse.stride(1) + packed * lse.stride(2), row_lse, mask=ok)
    else:
        tc.store(o, index=(b, h, mblk, 0), tile=tc.reshape(out.astype(o.dtype), (1, 1, BM, DV)))
        if LSE:
            row_lse = tc.where(seen, (m_i + tc.log2(l_i)) * LN2, float("-inf"))
            tc.store(lse, index=(b, h, mblk), tile=tc.reshape(row_lse, (1, 1, BM)))


@tc.func
def program_block(heads, HEAVY_LAST: tc.constexpr, SECTION: tc.constexpr):
    """(block, head, batch) of this program. SECTION = 0: a (blocks, heads, batch) grid, its
    program ids. SECTION > 0 (causal masks, whose blocks' work grows along one axis): a
    (SECTION, blocks, sections) grid (`section_grid`) over the (batch, head) pairs of `heads`
    heads, SECTION pairs per section (SECTION divides the pairs: no program idles, and no
    branch around the kernel's body, which costs registers). Launched in order, the programs
    take a section's pairs at their heaviest block (the last with HEAVY_LAST, else the
    first), then the next lighter, and so on: the last to start are the shortest, so the SMs
    finish together (longest-first scheduling), while a section's K and V stay in L2."""
    if SECTION == 0:
        return tc.program_id(0), tc.program_id(1), tc.program_id(2)
    pair = tc.program_id(2) * SECTION + tc.program_id(0)
    block = tc.num_programs(1) - 1 - tc.program_id(1) if HEAVY_LAST else tc.program_id(1)
    return block, pair % heads, pair // heads


def section_grid(blocks: int, heads: int, batch: int, section: int) -> Tuple[int, int, int]:
    """The launch grid of program_block's order (`section` 0: the plain (blocks, heads, batch))."""
    if section == 0:
        return blocks, heads, batch
    assert (heads * batch) % section == 0, (heads, batch, section)
    return section, blocks, heads * batch // section


def kv_pair_bytes(x: "QKV") -> int:
    """The bytes of K and V one (batch, query head) pair reads (its share where the query heads
    of a group read the same kv head): heavy_first_section's `pair_bytes` of the forward and dQ."""
    return -(-x.n_kv * (x.d + x.dv) * x.q.dtype.itemsize // (x.heads // x.kv_heads))


def heavy_first_section(pairs: int, pair_bytes: int, target: Target) -> int:
    """program_block's SECTION for a causal launch of `pairs` (batch, head) pairs whose
    programs each read `pair_bytes` of K and V (the pair's share where heads share them): the
    most pairs that divide `pairs` and fit `AttentionFwdTuning.section_l2_bytes`, at least 1.
    A pure function."""
    budget = tuning_for(target).attention_fwd.section_l2_bytes
    cap = max(1, min(pairs, budget // max(pair_bytes, 1)))
    return max(d for d in range(1, cap + 1) if pairs % d == 0)


@tc.kernel
def attention_fwd_kernel(q, k, v, o, lse, qk_scale, cap, left, right,
                         GROUP: tc.constexpr, SOFTCAP: tc.constexpr, LSE: tc.constexpr,
                         BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr,
                         SECTION: tc.constexpr = 0):
    mblk, h, b = program_block(q.shape[1], True, SECTION)
    _fwd_tile(q, k, v, o, lse, b, h, mblk, 0, q.shape[2], 0, k.shape[2], qk_scale, cap, left, right,
              GROUP, SOFTCAP, LSE, False, BM, BN, DK, DV)


@tc.func
def seq_bounds(cu, b):
    """(start, length) of sequence b from the int32 prefix sums `cu` (varlen's cu_seqlens)."""
    start = tc.load(cu.ptr + b * cu.stride(0))
    return start, tc.load(cu.ptr + (b + 1) * cu.stride(0)) - start


@tc.func
def tile_bounds(cu_own, cu_other, blk, B: tc.constexpr):
    """(own start, own length, other start, other length) of sequence program_id(2), for the
    program owning tile blk (B rows) of the own side (cu_own's: query rows, or keys for dK/dV).
    The grid covers the longest sequence: a tile past this one's end gets an empty other side,
    so it walks no block and stores nothing (no early return: under one, the loops' shared
    buffers all count as live at once, and at head dim 128 the later loops' rings no longer fit)."""
    b = tc.program_id(2)
    own_start, n_own = seq_bounds(cu_own, b)
    other_start, n_other = seq_bounds(cu_other, b)
    return own_start, n_own, other_start, tc.where(blk * B >= n_own, 0, n_other)


@tc.kernel
def attention_varlen_fwd_kernel(q, k, v, o, lse, cu_q, cu_k, qk_scale, cap, left, right,
                                GROUP: tc.constexpr, SOFTCAP: tc.constexpr, LSE: tc.constexpr,
                                BM: tc.constexpr, BN: tc.constexpr, DK: tc.constexpr, DV: tc.constexpr):
    """The forward over packed sequences (attention_varlen.py): program (mblk, h, b) reads
    sequence b's bounds from the int32 prefix sums cu_q, cu_k on the device; q, k, v, o are
    (1, heads, total, dim) views, lse (1, heads, total_q)."""
    mblk = tc.program_id(0)
    h = tc.program_id(1)
    q_start, n_q, k_start, n_kv = tile_bounds(cu_q, cu_k, mblk, BM)
    _fwd_tile(q, k, v, o, lse, 0, h, mblk, q_start, n_q, k_start, n_kv, qk_scale, cap, left, right,
              GROUP, SOFTCAP, LSE, True, BM, BN, DK, DV)


_V4 = "[?,?,?,?]:stride_div=16x16x16x1"   # what a launch on (b, s, h, d) tensors specializes to
_ARG_TYPES = {"lse": "f32[?,?,?]:stride_div=16x16x1", "qk_scale": "f32", "cap": "f32", "left": "i32", "right": "i32"}


def signature(launch: Launch, dtype: str = "f16") -> str:
    """The signature text of `plan`'s launch (q, k, v, o of `dtype` as a launch on contiguous
    (b, s, h, d) tensors specializes them), for ptxas checks of the configurations it ships."""
    return ", ".join([_ARG_TYPES.get(a, dtype + _V4) for a in launch.args]
                     + [f"{k}={v}" for k, v in launch.constexprs])


def describe(batch: int, heads: int, kv_heads: int, n_q: int, n_kv: int, d: int, dv: int,
             dtype=tc.float16) -> QKV:
    """The QKV `plan` takes, of contiguous (batch, heads, seq, dim) GPU arrays that do not exist
    (descriptions: plan tests, ptxas checks)."""
    from .launches import spec  # noqa: PLC0415

    q, k, v = (spec((batch, h_, n, dd), dtype) for h_, n, dd in ((heads, n_q, d), (kv_heads, n_kv, d),
                                                                 (kv_heads, n_kv, dv)))
    return QKV(q, k, v, batch, heads, kv_heads, n_q, n_kv, d, dv, q.strides, k.strides, v.strides)


# D = 64 (tests/test_ptxas.py: sm_80 and sm_90a); the wider tiles: EXTRA_SIGNATURES below
SIGNATURES = {
    "attention_fwd_kernel": f"q=f16{_V4}, k=f16{_V4}, v=f16{_V4}, o=f16{_V4}, lse=f32[?,?,?]:stride_div=16x16x1, "
                            "qk_scale=f32, cap=f32, left=i32, right=i32, GROUP=1, SOFTCAP=False, LSE=True, "
                            "BM=128, BN=64, DK=64, DV=64",
}
OPTIONS = {"attention_fwd_kernel": {"num_warps": 8, "fast_math": True}}


@dataclass(frozen=True)
class AttentionConfig:
    """How one attention call is tiled: query rows and keys per step, tile head dims, warps,
    the stages of the key/value ring (compile option num_stages), a floor of programs per
    SM (compile option min_programs_per_sm; 0: ptxas's choice of registers), and whether a
    producer warpgroup fills the ring (compile option warp_specialize; sm_90a)."""
    bm: int
    bn: int
    dk: int       # q/k head dim of the tile (a power of two >= the tensors')
    dv: int
    num_warps: int
    num_stages: int = 3
    programs_per_sm: int = 0
    warp_specialize: bool = False


def config_for(head_dim: int, head_dim_v: int, target: Target, varlen: bool = False,
               n_kv: Optional[int] = None, causal: bool = False, specialize: bool = True) -> AttentionConfig:
    """The tiling for these head dims on `target` (`varlen`: of attention_varlen_fwd_kernel); a
    pure function (no launch). `n_kv`: the keys each query block walks at most (None: many),
    which at tile head dim 128 picks the short tiling (AttentionFwdTuning.short), with and
    without grouped heads (both measured). At tile head dim 128 on targets with setmaxnreg the
    dense forward is warp-specialized (AttentionFwdTuning.specialized), except causal calls
    over few keys (`specialize=False`: a kernel not measured so, the mods kernels').
    Each sm_90a configuration assembles with no spills (tests/stdlib/test_attention_configs.py);
    the dense forward's candidates per head dim and their timings: bench/attention_configs.py,
    docs/benchmarks.md."""
    t = tuning_for(target).attention_fwd
    dk, dv = max(next_pow2(head_dim), 16), max(next_pow2(head_dim_v), 16)
    stages = AttentionConfig.num_stages
    if max(dk, dv) == 128 and target.has_wgmma and target.has_setmaxnreg and specialize and not varlen \
            and not (causal and n_kv is not None and n_kv <= t.specialized_short_keys_causal):
        bm, bn, warps = t.specialized
        return AttentionConfig(bm, bn, dk, dv, warps, num_stages=stages, warp_specialize=True)
    if max(dk, dv) <= 128:
        blocks = t.narrow
        if max(dk, dv) == 128 and target.has_wgmma and n_kv is not None \
                and n_kv <= (t.short_keys_causal if causal else t.short_keys):
            blocks = t.short
    elif not target.has_wgmma:
        blocks = t.mma_wide
    elif varlen:
        blocks = t.varlen_wide_v if dv > 128 else t.varlen_wide_qk
    elif dv > 128:
        blocks, stages = t.wide_v, t.wide_v_stages
    else:
        blocks = t.wide_qk
    bm, bn, warps = blocks
    floor = t.narrow_64_programs_per_sm if max(dk, dv) <= 64 and target.has_wgmma else 0
    return AttentionConfig(bm, bn, dk, dv, warps, num_stages=stages, programs_per_sm=floor)


def check_config(config, head_dim: int, head_dim_v: int) -> AttentionConfig:
    """`config` (a `plan(config=)` override) checked against the call's head dims."""
    if not isinstance(config, AttentionConfig):
        raise TypeError(f"config: expected an AttentionConfig, got {type(config).__name__}")
    for name in ("bm", "bn", "dk", "dv"):
        n = getattr(config, name)
        if isinstance(n, bool) or not isinstance(n, int) or n < 16 or n & (n - 1):
            raise ValueError(f"config.{name}: expected a power of two >= 16, got {n!r}")
    if config.dk < head_dim or config.dv < head_dim_v:
        raise ValueError(f"config: tile head dims (dk={config.dk}, dv={config.dv}) must hold the tensors' "
                         f"({head_dim}, {head_dim_v})")
    if config.num_warps not in (1, 2, 4, 8, 16, 32) or config.num_stages not in range(1, 9):
        raise ValueError(f"config: expected num_warps a power of two from 1 to 32 and num_stages from 1 to 8, "
                         f"got {config.num_warps}, {config.num_stages}")
    n = config.programs_per_sm
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"config.programs_per_sm: expected an int >= 0 (0: no floor), got {n!r}")
    return config


def plan(x: "QKV", target: Target, *, softcap: bool = False, lse: bool = False, causal: bool = False,
         config: Optional[AttentionConfig] = None) -> List[Launch]:
    """The dense forward's launch for the checked q, k, v `x` (check_qkv): one launch, none when
    there is no query row; a pure function (no launch). `config` replaces config_for's tiling
    (bench/attention_configs.py times candidates through it); it must hold the head dims.
    `causal`: the programs run heaviest first (program_block's sections)."""
    cfg = (config_for(x.d, x.dv, target, n_kv=x.n_kv, causal=causal)
           if config is None else check_config(config, x.d, x.dv))
    grid = (-(-x.n_q // cfg.bm), x.heads, x.batch)
    if 0 in grid:
        return []
    group = x.heads // x.kv_heads
    order = {}
    if causal and grid[0] > 1 and (group == 1 or tuning_for(target).attention_fwd.heavy_first_gqa):
        order["SECTION"] = heavy_first_section(x.heads * x.batch, kv_pair_bytes(x), target)
        grid = section_grid(grid[0], x.heads, x.batch, order["SECTION"])
    return [Launch.of(attention_fwd_kernel, grid, ("q", "k", "v", "o", "lse", "qk_scale", "cap", "left", "right"),
                      cfg.num_warps, options=compile_options(cfg), schedule="dense",
                      GROUP=group, SOFTCAP=softcap, LSE=lse,
                      BM=cfg.bm, BN=cfg.bn, DK=cfg.dk, DV=cfg.dv, **order)]


def compile_options(cfg: AttentionConfig) -> dict:
    """The launch's compile options from its tiling (the floor only where one is asked)."""
    floor = {"min_programs_per_sm": cfg.programs_per_sm} if cfg.programs_per_sm else {}
    ws = {"warp_specialize": True} if cfg.warp_specialize else {}
    return {"num_stages": cfg.num_stages, **floor, **ws}


def _window(causal: bool, window) -> Tuple[int, int]:
    left, right = UNBOUNDED, UNBOUNDED
    if window is not None:
        try:
            wl, wr = (int(x) for x in window)
        except (TypeError, ValueError):
            raise TypeError(f"window: expected (left, right) integers, -1 for unbounded, got {window!r}") from None
        if wl < -1 or wr < -1:
            raise ValueError(f"window: sides must be >= 0, or -1 for unbounded, got {window!r}")
        left = UNBOUNDED if wl == -1 else wl
        right = UNBOUNDED if wr == -1 else wr
    if causal:
        right = min(right, 0)
    return left, right


def _as_bhsd(a, layout: str):
    """(shape, strides) of `a` seen as (batch, heads, seq, dim)."""
    b_, x1, x2, d = a.shape
    s0, s1, s2, s3 = a.strides
    if layout == "bshd":
        return (b_, x2, x1, d), (s0, s2, s1, s3)
    return (b_, x1, x2, d), (s0, s1, s2, s3)


@dataclass(frozen=True)
class QKV:
    """q, k, v checked, as (batch, heads, seq, dim) shapes and strides (`_as_bhsd`)."""
    q: Arr
    k: Arr
    v: Arr
    batch: int
    heads: int
    kv_heads: int
    n_q: int
    n_kv: int
    d: int          # q's and k's head dim
    dv: int         # v's
    q_strides: Tuple[int, ...]
    k_strides: Tuple[int, ...]
    v_strides: Tuple[int, ...]

    def views(self):
        """The kernel arguments q, k, v as (batch, heads, seq, dim) views."""
        return (view(self.q, (self.batch, self.heads, self.n_q, self.d), self.q_strides),
                view(self.k, (self.batch, self.kv_heads, self.n_kv, self.d), self.k_strides),
                view(self.v, (self.batch, self.kv_heads, self.n_kv, self.dv), self.v_strides))


def check_layout(layout: str) -> None:
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"layout: expected 'bshd' (batch, seq, heads, dim) or 'bhsd' (batch, heads, seq, dim), "
                         f"got {layout!r}")


def check_4d(a: Arr, name: str, layout: str) -> None:
    """ValueError unless `a` is 4-D with a contiguous head dim."""
    if a.ndim != 4:
        raise ValueError(f"{name}: expected 4 dimensions ({layout}), got shape {a.shape}")
    if a.strides[3] != 1 and a.numel and a.shape[3] > 1:
        raise ValueError(f"{name}: the head dim must be contiguous (stride 1), got strides {a.strides}")


def check_qkv(q, k, v, layout: str, extra=()) -> Tuple[QKV, dict]:
    """The forward's and backward's shared checks of q, k, v (and of `extra`: more
    (name, array) pairs of the same call, which must be on the same device)."""
    check_layout(layout)
    arrs = {name: as_array(x, name) for name, x in (("q", q), ("k", k), ("v", v)) + tuple(extra)
            if x is not None}
    check_same_place(arrs)
    qa, ka, va = arrs["q"], arrs["k"], arrs["v"]
    for name in ("q", "k", "v"):
        check_float(arrs[name], name, (tc.float16, tc.bfloat16))
        check_4d(arrs[name], name, layout)
    if ka.dtype is not qa.dtype or va.dtype is not qa.dtype:
        raise TypeError(f"q, k and v must have one dtype, got {qa.dtype.name}, {ka.dtype.name}, {va.dtype.name}")
    (b_, h, n_q, d), qs = _as_bhsd(qa, layout)
    (bk, hk, n_kv, dk_), ks = _as_bhsd(ka, layout)
    (bv, hv, n_v, dv), vs = _as_bhsd(va, layout)
    if (bk, hk, n_kv) != (bv, hv, n_v) or bk != b_:
        raise ValueError(f"k and v must agree with q on batch and with each other on heads and seq: "
                         f"q {qa.shape}, k {ka.shape}, v {va.shape} ({layout})")
    if dk_ != d:
        raise ValueError(f"k's head dim {dk_} differs from q's {d}")
    if hk == 0 or h % hk:
        raise ValueError(f"q has {h} heads, k and v {hk}: the kv heads must divide the query heads")
    if max(d, dv) > HEAD_DIMS:
        raise ValueError(f"head dims up to {HEAD_DIMS} are supported, got {d} and {dv}")
    return QKV(qa, ka, va, b_, h, hk, n_q, n_kv, d, dv, qs, ks, vs), arrs


def scales(scale: Optional[float], softcap: Optional[float], d: int) -> Tuple[float, float, float]:
    """(qk_scale, cap, scale) of the kernels: the base-2 factor of the scores, tanh's factor
    under softcap (0 without), and the softmax scale itself (default 1 / sqrt(d))."""
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < scale < math.inf:
        # the kernels scale each row's max rather than every score (online_softmax)
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if softcap is None:
        return float(scale) * LOG2E, 0.0, float(scale)
    if not softcap > 0:
        raise ValueError(f"softcap must be positive, got {softcap}")
    # softcap · tanh(score / softcap), score = q·k · scale: tanh of q·k · cap, then · softcap in base 2
    return float(softcap) * LOG2E, float(scale) / float(softcap), float(scale)


def has_mods(score_mod, mask_mod, block_mask, mod_args, score_mod_grad=None) -> bool:
    """Whether a call takes the mods path; TypeError for a mod that is not a @tc.func."""
    no_args = isinstance(mod_args, (tuple, list)) and len(mod_args) == 0
    if score_mod is None and mask_mod is None and block_mask is None and score_mod_grad is None and no_args:
        return False   # the dense calls' path: nothing imported or checked
    from .attention_mask import check_mod  # noqa: PLC0415
    for fn, name in ((score_mod, "score_mod"), (mask_mod, "mask_mod"), (score_mod_grad, "score_mod_grad")):
        check_mod(fn, name)
    if not no_args and score_mod is None and mask_mod is None and block_mask is None:
        raise ValueError("mod_args: given without a score_mod, mask_mod or block_mask to read them")
    return score_mod is not None or mask_mod is not None or block_mask is not None or score_mod_grad is not None


def output_shape(x: QKV, layout: str) -> Tuple[int, int, int, int]:
    """The shape of `out`: q's, with v's head dim."""
    return (x.batch, x.n_q, x.heads, x.dv) if layout == "bshd" else (x.batch, x.heads, x.n_q, x.dv)


@named
def attention(q, k, v, *, causal: bool = False, scale: Optional[float] = None, window=None,
              softcap: Optional[float] = None, layout: str = "bshd", return_lse: bool = False, out=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
              score_mod=None, mask_mod=None, block_mask=None, mod_args=()):
    """softmax(q kᵀ · scale) v per (batch, head), with optional causal / sliding-window masks,
    grouped-query heads and score capping; see the module doc. Returns `out`, or
    `(out, lse)` with `return_lse=True`. The gradients: `attention_backward`
    (stdlib_kernels/attention_bwd.py). With `cu_seqlens_q/k`: packed variable-length
    sequences (stdlib_kernels/attention_varlen.py). `score_mod`, `mask_mod` (@tc.funcs),
    `block_mask` (`block_mask(...)`) and `mod_args` (arrays the mods read): FlexAttention's
    semantics (stdlib_kernels/attention_mods.py)."""
    mods = has_mods(score_mod, mask_mod, block_mask, mod_args)
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        if mods:
            raise ValueError("score_mod / mask_mod / block_mask: not supported with cu_seqlens (variable length)")
        from .attention_varlen import attention_varlen  # noqa: PLC0415
        return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                causal=causal, scale=scale, window=window, softcap=softcap, layout=layout,
                                return_lse=return_lse, out=out)
    if not mods:
        return _attention_dense(q, k, v, causal, scale, window, softcap, layout, return_lse, out)
    x, _ = check_qkv(q, k, v, layout)
    from .attention_mods import attention_mods  # noqa: PLC0415
    return attention_mods(x, layout, scale, out, return_lse, score_mod, mask_mod, block_mask, mod_args,
                          causal=causal, window=window, softcap=softcap)


# The dense forward is a function of the arrays' layouts and the arguments' values only: a
# repeated call replays the first one's launch (a launch plan, _plan.py). The varlen and mods
# paths read device data or functions: the general path.
@planned(label="attention")
def _attention_dense(q, k, v, causal, scale, window, softcap, layout, return_lse, out):
    x, _ = check_qkv(q, k, v, layout)
    oa, lse = forward_outputs(x, layout, out, return_lse)
    execute(plan(x, target_of(x.q), softcap=softcap is not None, lse=lse is not None, causal=causal),
            forward_operands(x, layout, oa, lse, causal=causal, window=window, scale=scale, softcap=softcap))
    return (oa.obj, lse.obj) if return_lse else oa.obj



def forward_outputs(x: QKV, layout: str, out=None, return_lse: bool = False):
    """(out, lse or None) of a dense forward, allocated where q lives (`out` checked when given)."""
    oa = output(out, x.q, output_shape(x, layout), x.q.dtype)
    lse = output(None, x.q, (x.batch, x.heads, x.n_q), tc.float32, "lse") if return_lse else None
    return oa, lse


def forward_operands(x: QKV, layout: str, oa: Arr, lse: Optional[Arr], *, causal: bool = False, window=None,
                     scale: Optional[float] = None, softcap: Optional[float] = None) -> Operands:
    """What `plan`'s launch names: (batch, heads, seq, dim) views of q, k, v and `oa`, lse's (an
    f32 stand-in when None: LSE=False compiles its store away) and the launch scalars."""
    left, right = _window(causal, window)
    qk_scale, cap, _ = scales(scale, softcap, x.d)
    o_bhsd, os_ = _as_bhsd(oa, layout)
    lse_arr = lse if lse is not None else output(None, x.q, (1, 1, 1), tc.float32, "lse")
    qv, kv, vv = x.views()
    return Operands({"q": x.q}, {"q": qv, "k": kv, "v": vv, "o": view(oa, o_bhsd, os_),
                                 "lse": view(lse_arr, lse_arr.shape, lse_arr.strides), "qk_scale": qk_scale,
                                 "cap": cap, "left": left, "right": right})


# bench/ptx_snapshot.py (sm_80 and sm_90a, at OPTIONS' 8 warps): the sm_90a plans of the wider tiles,
# bf16, softcap, grouped heads; tests/stdlib/test_attention_configs.py assembles each without spills
EXTRA_SIGNATURES = [("attention_fwd_kernel", signature(ln, "bf16"))
                    for d, dv in ((128, 128), (256, 256), (192, 128))
                    for ln in plan(describe(2, 4, 2, 1000, 2000, d, dv), Target.from_arch("sm_90a"), softcap=True,
                                   lse=True)]
# causal launches at their heaviest-first order (program_block's sections)
EXTRA_SIGNATURES += [("attention_fwd_kernel", signature(ln, "bf16"))
                     for d in (64, 128)
                     for ln in plan(describe(1, 16, 16, 8192, 8192, d, d), Target.from_arch("sm_90a"), lse=True,
                                    causal=True)]
