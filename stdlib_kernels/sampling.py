"""sample(logits, ...): one token per row, drawn from softmax(logits / temperature), optionally
restricted to the top k tokens and/or the top-p nucleus.

How a draw is made (no sort of the row): Gumbel-max. token = argmax_i (z_i + g_i) over the
allowed tokens, z = logits / temperature and g_i independent Gumbel(0, 1) noise, is an
exact draw from softmax(z) restricted to those tokens, with no normalization, no
cumulative sum and no second pass over a sorted row. That leaves the filters:
- top_k: the rows' k best logits by `topk` (chunks, then merges of candidates), and the
  draw among those k candidates alone (one tile per row);
- top_p: the nucleus {i : sum of the probabilities strictly greater than p_i < top_p}
  (the smallest set of most likely tokens holding top_p of the mass, tokens tied with its
  least likely one included). It is {i : q_i > lo} for q = exp(z - max z), where lo is
  found by bisection on [0, 1]: each step is one pass over the row summing the q above
  the midpoint and counting the q strictly inside each half, and the search stops as soon
  as no q is left strictly inside (lo, hi) (at most `MAX_STEPS` steps): then every q is
  either <= lo (outside: the mass above it reaches top_p) or >= hi (inside). With top_k
  too, the nucleus is taken among the k candidates (renormalized), as Hugging Face's
  TopK then TopP warpers and vLLM do.
temperature == 0 is greedy: the first index of the row's largest logit (NaN counts as
+inf there); top_k and top_p change nothing then.

The noise stream: token i of row r draws word 0 of Philox4x32-10 (`tc.philox`) under key =
the seed's 64 bits and counter = (i, r, offset low 32 bits, offset high 32 bits). The top
23 bits w of that word give v = (w + 1/2) / 2**23 in (0, 1), E = -log(1 - v) an Exp(1)
variate (its series v + v**2/2 + v**3/3 for v < 1/64, where 1 - v would lose bits) and
g = -log(E). The noise of a token does not depend on the filters, the tiles, the grid or the
device; so the same (logits, seed, offset) give the same tokens, a call with top_k = the
row length gives the token of a call without top_k, and a new `offset` per decoding step
gives fresh draws under one seed.
"""
from __future__ import annotations

import math
from typing import List

import numpy as np

import tilec as tc
from tilec.target import Target

from . import topk as _topk
from ._common import Arr, as_array, check_float, next_pow2, normalize_dim, output, rows_of, target_of, view
from ._plan import derived, planned
from .launches import Launch, Operands, Temp, execute
from .schedules import LOOPED, ONE_TILE, SPLIT
from .topk import NONE, order_key
from .tuning import SamplingTuning, tuning_for

__all__ = ["sample", "argmax", "plan", "MAX_STEPS", "SIGNATURES"]

NEG_INF = float("-inf")
POS_INF = float("inf")
MAX_STEPS = 128          # bisection steps of the nucleus at most (f32 halvings of [0, 1] reach 2**-126 first)
_HALF_ULP23 = 2.0 ** -23
_F32_MAX = float(np.finfo(np.float32).max)


@tc.func
def gumbel(seed_lo, seed_hi, off_lo, off_hi, row, cols):
    """Gumbel(0, 1) noise of tokens `cols` (an i32 tile) of row `row` (the module doc's stream)."""
    c0 = cols.astype(tc.uint32)
    zero = c0 * 0
    w, _w1, _w2, _w3 = tc.philox(seed_lo, seed_hi, c0, zero + row.astype(tc.uint32), zero + off_lo, zero + off_hi)
    v = ((w >> 9).astype(tc.float32) + 0.5) * _HALF_ULP23
    e = tc.where(v < 0.015625, v * (1.0 + v * (0.5 + v * 0.3333333333333333)), -tc.log(1.0 - v))
    return -tc.log(e)


@tc.func
def first_best(best_s, best_i):
    """The lowest index among the lanes holding the largest score (lanes never filled hold NONE)."""
    mx = tc.max(best_s)
    return tc.min(tc.where(best_s == mx, best_i, NONE))


# The noise's words change every call (a decoder's offset every step): compiled for any value,
# not specialized on 1 or on divisibility by 16 (each would compile another variant).
_PER_CALL = ("seed_lo", "seed_hi", "off_lo", "off_hi")


@tc.kernel(do_not_specialize=_PER_CALL)
def sample_rows_kernel(x, out, inv_t, top_p, seed_lo, seed_hi, off_lo, off_hi, GREEDY: tc.constexpr,
                       NUCLEUS: tc.constexpr, BLOCK: tc.constexpr):
    # One program per row, walking it in BLOCK tiles: (NUCLEUS) the row's max and sum of
    # exp, the bisection for the nucleus' bound (`_nucleus`); then the draw.
    row = tc.program_id(0)
    n = x.shape[1]
    base = x.ptr + row.astype(tc.int64) * x.stride(0)
    n_tiles = tc.cdiv(n, BLOCK)
    cut = NEG_INF
    if NUCLEUS:
        cut = _nucleus(base, n, n_tiles, inv_t, top_p, BLOCK)
    best_s, best_i = _draw_tiles(base, n, row, 0, n_tiles, cut, inv_t, seed_lo, seed_hi, off_lo, off_hi, GREEDY,
                                 NUCLEUS, BLOCK)
    tc.store(out.ptr + row + tc.arange(0, 1), tc.full((1,), first_best(best_s, best_i), tc.int64))


@tc.kernel(do_not_specialize=_PER_CALL)
def sample_chunk_kernel(x, part_s, part_i, tiles_per_chunk, inv_t, seed_lo, seed_hi, off_lo, off_hi,
                        GREEDY: tc.constexpr, BLOCK: tc.constexpr):
    # Few rows (no nucleus): program (row, c) draws within tiles [c * tiles_per_chunk, ...) of
    # the row and writes its best score and the lowest index holding it to part_s/part_i[row, c]
    # (`sample_merge_kernel` takes the best of those: the row's draw, as one program's).
    row = tc.program_id(0)
    c = tc.program_id(1)
    n = x.shape[1]
    base = x.ptr + row.astype(tc.int64) * x.stride(0)
    k0 = c * tiles_per_chunk
    k1 = tc.minimum(k0 + tiles_per_chunk, tc.cdiv(n, BLOCK))
    best_s, best_i = _draw_tiles(base, n, row, k0, k1, NEG_INF, inv_t, seed_lo, seed_hi, off_lo, off_hi, GREEDY,
                                 False, BLOCK)
    at = row.astype(tc.int64) * part_s.stride(0) + c + tc.arange(0, 1)
    tc.store(part_s.ptr + at, tc.full((1,), tc.max(best_s), tc.float32))
    tc.store(part_i.ptr + at, tc.full((1,), first_best(best_s, best_i), tc.int32))


@tc.kernel
def sample_merge_kernel(part_s, part_i, out, CHUNKS: tc.constexpr):
    # The row's token: the best of its chunks' draws, the lowest index among equal scores.
    row = tc.program_id(0)
    lane = tc.arange(0, CHUNKS)
    ok = lane < part_s.shape[1]
    at = row.astype(tc.int64) * part_s.stride(0) + lane
    s = tc.load(part_s.ptr + at, mask=ok, other=NEG_INF)
    i = tc.load(part_i.ptr + at, mask=ok, other=NONE)
    tc.store(out.ptr + row + tc.arange(0, 1), tc.full((1,), first_best(s, i), tc.int64))


@tc.func
def _draw_tiles(base, n, row, k0, k1, cut, inv_t, seed_lo, seed_hi, off_lo, off_hi, GREEDY: tc.constexpr,
                NUCLEUS: tc.constexpr, BLOCK: tc.constexpr):
    """Lane-wise best scores and their indices over the row tiles [k0, k1): a lane's earlier
    tile wins ties (the lower index); lanes never filled hold (-inf, NONE)."""
    lane = tc.arange(0, BLOCK)
    best_s = tc.full((BLOCK,), NEG_INF, tc.float32)
    best_i = tc.full((BLOCK,), NONE, tc.int32)
    for k in range(k0, k1):
        cols = k * BLOCK + lane
        inside = cols < n
        v = tc.load(base + cols, mask=inside, other=NEG_INF).astype(tc.float32)
        if GREEDY:
            score = order_key(v, True)
        else:
            z = v * inv_t
            score = z + gumbel(seed_lo, seed_hi, off_lo, off_hi, row, cols)
            score = tc.where(score != score, NEG_INF, score)
            if NUCLEUS:
                score = tc.where(v >= cut, score, NEG_INF)
        better = inside & ((score > best_s) | (best_i == NONE))
        best_s = tc.where(better, score, best_s)
        best_i = tc.where(better, cols, best_i)
    return best_s, best_i


@tc.func
def _nucleus(base, n, n_tiles, inv_t, top_p, BLOCK: tc.constexpr):
    """The nucleus as a bound on the logits: it is {x >= cut} (the module doc's {q > lo} for
    q = exp(z - max z)). Each step keeps, beside its sums, the least logit of q > lo and of
    q > mid, so that the draw compares logits only and never recomputes a q (whose rounding
    could differ where the compiler contracts the arithmetic otherwise)."""
    lane = tc.arange(0, BLOCK)
    m_lane = tc.full((BLOCK,), NEG_INF, tc.float32)
    for k in range(n_tiles):
        cols = k * BLOCK + lane
        m_lane = tc.maximum(m_lane, tc.load(base + cols, mask=cols < n, other=NEG_INF).astype(tc.float32))
    m = tc.max(m_lane) * inv_t   # x * inv_t is monotone (inv_t > 0): the max of z exactly
    s_lane = tc.zeros((BLOCK,), tc.float32)
    for k in range(n_tiles):
        v = _row_tile(base, k * BLOCK + lane, n)
        s_lane += _q(v, inv_t, m)
    target = top_p * tc.sum(s_lane)
    lo = 0.0
    hi = 1.0
    cut = NEG_INF
    left = 1
    steps = 0
    while (left > 0) & (steps < MAX_STEPS):
        mid = lo + (hi - lo) * 0.5
        mass = tc.zeros((BLOCK,), tc.float32)
        below = tc.zeros((BLOCK,), tc.int32)
        above = tc.zeros((BLOCK,), tc.int32)
        least_lo = tc.full((BLOCK,), POS_INF, tc.float32)
        least_mid = tc.full((BLOCK,), POS_INF, tc.float32)
        for k in range(n_tiles):
            v = _row_tile(base, k * BLOCK + lane, n)
            q = _q(v, inv_t, m)
            mass += tc.where(q > mid, q, 0.0)
            below += ((q > lo) & (q < mid)).astype(tc.int32)
            above += ((q > mid) & (q < hi)).astype(tc.int32)
            least_lo = tc.minimum(least_lo, tc.where(q > lo, v, POS_INF))
            least_mid = tc.minimum(least_mid, tc.where(q > mid, v, POS_INF))
        down = tc.sum(mass) < target     # the mass above mid is short of top_p: the bound is below mid
        hi = tc.where(down, mid, hi)
        lo = tc.where(down, lo, mid)
        left = tc.where(down, tc.sum(below), tc.sum(above))
        cut = tc.where(down, tc.min(least_lo), tc.min(least_mid))
        steps += 1
    return cut


@tc.func
def _row_tile(base, cols, n):
    # the row's logits at `cols` as f32; -inf past the row (q = 0 there)
    return tc.load(base + cols, mask=cols < n, other=NEG_INF).astype(tc.float32)


@tc.func
def _q(v, inv_t, m):
    # exp(z - m) of logits v: 0 for -inf
    return tc.exp(v * inv_t - m)


@tc.kernel(do_not_specialize=_PER_CALL)
def sample_candidates_kernel(values, indices, out, k, inv_t, top_p, seed_lo, seed_hi, off_lo, off_hi,
                             NUCLEUS: tc.constexpr, KP: tc.constexpr):
    # One program per row: the draw among its k candidates (values, indices: topk's
    # output), held in one tile; the nucleus by the same bisection as the rows' (one tile).
    row = tc.program_id(0)
    lane = tc.arange(0, KP)
    ok = lane < k
    row64 = row.astype(tc.int64)
    v = tc.load(values.ptr + row64 * values.stride(0) + lane, mask=ok, other=NEG_INF).astype(tc.float32)
    tok = tc.load(indices.ptr + row64 * indices.stride(0) + lane, mask=ok, other=0).astype(tc.int32)
    z = v * inv_t
    score = z + gumbel(seed_lo, seed_hi, off_lo, off_hi, row, tok)
    score = tc.where(ok & (score == score), score, NEG_INF)
    if NUCLEUS:
        m = tc.max(z)
        q = tc.exp(z - m)   # 0 on the padding lanes (-inf)
        target = top_p * tc.sum(q)
        lo = 0.0
        hi = 1.0
        left = 1
        steps = 0
        while (left > 0) & (steps < MAX_STEPS):
            mid = lo + (hi - lo) * 0.5
            down = tc.sum(tc.where(q > mid, q, 0.0)) < target
            below = tc.sum(((q > lo) & (q < mid)).astype(tc.int32))
            above = tc.sum(((q > mid) & (q < hi)).astype(tc.int32))
            hi = tc.where(down, mid, hi)
            lo = tc.where(down, lo, mid)
            left = tc.where(down, below, above)
            steps += 1
        score = tc.where(q > lo, score, NEG_INF)
    # the lowest token among the best scores (all -inf: the first candidate, the largest logit)
    best = first_best(score, tc.where(ok, tok, NONE))
    tc.store(out.ptr + row + tc.arange(0, 1), tc.full((1,), best, tc.int64))


SIGNATURES = {
    "sample_rows_kernel": "x=bf16[?,?], out=i64[?], inv_t=f32, top_p=f32, seed_lo=u32, seed_hi=u32, off_lo=u32, "
                          "off_hi=u32, GREEDY=False, NUCLEUS=True, BLOCK=4096",
    "sample_candidates_kernel": "values=bf16[?,?], indices=i64[?,?], out=i64[?], k=i32, inv_t=f32, top_p=f32, "
                                "seed_lo=u32, seed_hi=u32, off_lo=u32, off_hi=u32, NUCLEUS=True, KP=64",
    "sample_chunk_kernel": "x=bf16[?,?], part_s=f32[?,?], part_i=i32[?,?], tiles_per_chunk=i32, inv_t=f32, "
                           "seed_lo=u32, seed_hi=u32, off_lo=u32, off_hi=u32, GREEDY=False, BLOCK=4096",
    "sample_merge_kernel": "part_s=f32[?,?], part_i=i32[?,?], out=i64[?], CHUNKS=256",
}
# The options the plan launches SIGNATURES with (tests/test_ptxas.py).
OPTIONS = {"sample_rows_kernel": {"num_warps": 8, "fast_math": True},
           "sample_candidates_kernel": {"num_warps": 1, "fast_math": True},
           "sample_chunk_kernel": {"num_warps": 8, "fast_math": True},
           "sample_merge_kernel": {"num_warps": 1, "fast_math": True}}
EXTRA_SIGNATURES = [
    ("sample_rows_kernel", "x=f32[?,?], out=i64[?], inv_t=f32, top_p=f32, seed_lo=u32, seed_hi=u32, off_lo=u32, "
                           "off_hi=u32, GREEDY=True, NUCLEUS=False, BLOCK=4096"),
    ("sample_rows_kernel", "x=f16[?,?], out=i64[?], inv_t=f32, top_p=f32, seed_lo=u32, seed_hi=u32, off_lo=u32, "
                           "off_hi=u32, GREEDY=False, NUCLEUS=False, BLOCK=128"),
    ("sample_candidates_kernel", "values=f32[?,?], indices=i64[?,?], out=i64[?], k=i32, inv_t=f32, top_p=f32, "
                                 "seed_lo=u32, seed_hi=u32, off_lo=u32, off_hi=u32, NUCLEUS=False, KP=1024"),
    ("sample_chunk_kernel", "x=f32[?,?], part_s=f32[?,?], part_i=i32[?,?], tiles_per_chunk=i32, inv_t=f32, "
                            "seed_lo=u32, seed_hi=u32, off_lo=u32, off_hi=u32, GREEDY=True, BLOCK=4096"),
    ("sample_merge_kernel", "part_s=f32[?,?], part_i=i32[?,?], out=i64[?], CHUNKS=2"),
]


def candidates_warps(kp: int) -> int:
    """Warps of the candidates' draw: one per 512 candidates, 1..8."""
    return max(1, min(kp // 512, 8))


def plan(x: Arr, target: Target, *, greedy: bool, top_k: int = 0, nucleus: bool = False) -> List[Launch]:
    """The launches of sample over `x`'s rows (operand "x", its rows as a 2-D view) into
    "out" (n_rows,), int64, with the launch scalars "inv_t", "top_p", "seed_lo", "seed_hi",
    "off_lo", "off_hi" (`_draw_scalars`). Greedy, or no top_k: LOOPED (one program per row,
    `sample_rows_kernel`), or for few rows and no nucleus SPLIT (`split_chunks`: chunks'
    draws into Temps "part_s", "part_i", then `sample_merge_kernel`). top_k: topk's launches into Temps "cand_values" / "cand_indices"
    (n_rows, top_k), then ONE_TILE (`sample_candidates_kernel`)."""
    t = tuning_for(target).sampling
    n_cols, n_rows = x.shape[-1], math.prod(x.shape[:-1])
    if n_rows == 0:
        return []
    scalars = ("inv_t", "top_p", "seed_lo", "seed_hi", "off_lo", "off_hi")
    if greedy or not top_k:
        block = min(next_pow2(n_cols), t.block)
        warps = max(1, min(block // 512, t.warps))
        nucleus = bool(nucleus) and not greedy
        chunks, per = split_chunks(n_rows, tc.cdiv(n_cols, block), t)
        if chunks > 1 and not nucleus:
            return _split_plan(n_rows, chunks, per, block, warps, bool(greedy))
        return [Launch.of(sample_rows_kernel, (n_rows,), ("x", "out") + scalars, warps, schedule=LOOPED,
                          GREEDY=bool(greedy), NUCLEUS=nucleus, BLOCK=block)]
    vals = Temp("cand_values", (n_rows, top_k), x.dtype)
    idx = Temp("cand_indices", (n_rows, top_k), tc.int64)
    first = _topk.plan(x, top_k, True, target, values=vals.name, indices=idx.name)
    # the first launch that names the candidates allocates them
    first = [_with_temps(ln, (vals, idx)) if i == 0 else ln for i, ln in enumerate(first)]
    kp = next_pow2(top_k)
    return first + [Launch.of(sample_candidates_kernel, (n_rows,), (vals.name, idx.name, "out", top_k) + scalars,
                              candidates_warps(kp), schedule=ONE_TILE, NUCLEUS=bool(nucleus), KP=kp)]


def split_chunks(n_rows: int, n_tiles: int, t: SamplingTuning):
    """(chunks per row, tiles per chunk) of a draw over rows of `n_tiles` tiles: fewer rows
    than `split_rows` are split into chunks until about `split_target` programs run, each
    chunk at least `min_chunk_tiles` tiles; 1 chunk otherwise."""
    if n_rows >= t.split_rows:
        return 1, n_tiles
    chunks = max(1, min(tc.cdiv(t.split_target, n_rows), n_tiles // t.min_chunk_tiles))
    per = tc.cdiv(n_tiles, chunks)
    return tc.cdiv(n_tiles, per), per


def _split_plan(n_rows: int, chunks: int, per: int, block: int, warps: int, greedy: bool) -> List[Launch]:
    # SPLIT: chunks' draws into f32/i32 temps, then a program per row takes their best
    part_s = Temp("part_s", (n_rows, chunks), tc.float32)
    part_i = Temp("part_i", (n_rows, chunks), tc.int32)
    return [Launch.of(sample_chunk_kernel, (n_rows, chunks),
                      ("x", part_s.name, part_i.name, per, "inv_t", "seed_lo", "seed_hi", "off_lo", "off_hi"), warps,
                      temps=(part_s, part_i), schedule=SPLIT, GREEDY=greedy, BLOCK=block),
            Launch.of(sample_merge_kernel, (n_rows,), (part_s.name, part_i.name, "out"),
                      merge_warps(next_pow2(chunks)), schedule=SPLIT, CHUNKS=next_pow2(chunks))]


def merge_warps(chunks: int) -> int:
    """Warps of the chunks' merge: one per 1024 chunks, 1..4."""
    return max(1, min(chunks // 1024, 4))


def _with_temps(ln: Launch, temps) -> Launch:
    from dataclasses import replace  # noqa: PLC0415
    return replace(ln, temps=tuple(temps) + ln.temps)


def _u32_pair(v: int):
    v &= 2 ** 64 - 1
    return np.uint32(v & 0xFFFFFFFF), np.uint32(v >> 32)


def _int64(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if not -2 ** 63 <= v < 2 ** 64:
        raise ValueError(f"{name} must fit in 64 bits, got {v}")
    return v


def _draw_scalars(temperature, top_p, seed, offset):
    """The launch scalars of a draw (1 / temperature, top_p, the seed's and offset's 32-bit
    words): all that these arguments decide besides greedy-or-not and the nucleus' presence,
    so a launch plan fills them in per call (`_plan.planned(per_call=)`)."""
    t = float(temperature)
    inv_t = np.float32(1.0 / t) if t > 0 and 1.0 / t <= _F32_MAX else np.float32(1.0)   # else greedy
    p = np.float32(1.0 if top_p is None else top_p)
    seed_lo, seed_hi = _u32_pair(_int64(seed, "seed"))
    off_lo, off_hi = _u32_pair(_int64(offset, "offset"))
    return inv_t, p, seed_lo, seed_hi, off_lo, off_hi


def _number(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a float, got {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


def sample(logits, *, temperature: float = 1.0, top_k=None, top_p=None, seed: int, offset: int = 0, out=None):
    """sample(logits, *, temperature=1.0, top_k=None, top_p=None, seed, offset=0, out=None) -> int64 tokens.

    logits: f16, bf16 or f32 of shape (..., vocab) (last stride 1, leading dimensions
    flattenable); returns one token per row, shape logits.shape[:-1]. temperature >= 0 (0:
    greedy, the first index of the largest logit); top_k: None or 1 <= top_k <= min(vocab,
    1024); top_p: None or 0 < top_p <= 1 (1: no nucleus). seed, offset: 64-bit ints picking
    the noise (the module doc gives the stream; equal arguments give equal tokens). Logits
    are finite or -inf; a row of only -inf gives token 0. out: None or an int64 array of
    shape logits.shape[:-1] to write the tokens into (torch.multinomial's out=; checked
    before anything runs: ValueError/TypeError naming out).
    """
    a = as_array(logits, "logits")
    check_float(a, "logits")
    if a.ndim == 0:
        raise ValueError("sample: logits must have at least 1 dimension")
    n_cols = a.shape[-1]
    if n_cols == 0:
        raise ValueError("sample: logits has no tokens (its last dimension is 0)")
    temperature = _number(temperature, "temperature")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    k = 0
    if top_k is not None:
        k = _topk.check_k(top_k, n_cols, "top_k")
        if k == 0:
            raise ValueError("top_k must be at least 1 (or None)")
    if top_p is not None:
        top_p = _number(top_p, "top_p")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    _draw_scalars(temperature, top_p, seed, offset)   # seed and offset checked before anything runs
    # a temperature whose inverse overflows f32 (below ~3e-39) scales every logit to +-inf: greedy
    greedy = temperature == 0.0 or 1.0 / temperature > _F32_MAX
    nucleus = top_p is not None and top_p < 1.0 and not greedy
    if out is not None:   # checked here too: a bad out never reaches a launch
        output(out, a, a.shape[:-1], tc.int64, "out")
    return _draw(logits, 0 if greedy else k, greedy, nucleus, temperature, top_p, seed, offset, False, out)


def argmax(x, dim: int = -1, keepdim: bool = False):
    """argmax(x, dim=-1, keepdim=False) -> int64 indices of the largest value of each row of
    the last dimension (only dim=-1): the first one where several are equal; NaN counts as
    +inf (torch returns the first NaN: the two differ only where a +inf comes before it).
    `sample`'s greedy draw (one program per row, or chunks merged for few long rows)."""
    a = as_array(x, "x")
    check_float(a, "x")
    if a.ndim == 0:
        raise ValueError("argmax: x must have at least 1 dimension")
    if normalize_dim(dim, a.ndim) != a.ndim - 1:
        raise ValueError(f"argmax: only the last dimension is supported (dim=-1), got dim={dim} for shape {a.shape}")
    if not isinstance(keepdim, (bool, np.bool_)):
        raise TypeError(f"keepdim must be a bool, got {type(keepdim).__name__}")
    if a.shape[-1] == 0:
        raise ValueError("argmax: the last dimension is empty")
    return _draw(x, 0, True, False, 0.0, None, 0, 0, bool(keepdim))


@planned(per_call=_draw_scalars)
def _draw(logits, top_k: int, greedy: bool, nucleus: bool, temperature, top_p, seed, offset, keepdim=False,
          out=None):
    a = as_array(logits, "logits")
    scalars = derived(_draw_scalars, temperature, top_p, seed, offset)
    o = output(out, a, a.shape[:-1] + ((1,) if keepdim else ()), tc.int64)
    xv, n_rows, _ = rows_of(a, "logits")
    ov = view(o, (n_rows,), (1,))
    values = dict(zip(("inv_t", "top_p", "seed_lo", "seed_hi", "off_lo", "off_hi"), scalars))
    values.update(x=xv, out=ov)
    execute(plan(a, target_of(a), greedy=greedy, top_k=top_k, nucleus=nucleus), Operands({"x": a}, values))
    return o.obj
