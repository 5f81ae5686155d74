"""Chained dots (a dot's result, through elementwise math, is the A operand of the next dot),
written as a user would: the tests of register-A wgmma and of mma.sync chains compile and
run these."""
import tilec as tc


@tc.kernel
def dot_exp_dot(x, w, v, o, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    """O = exp(X W - 1) V for one BN-wide block of W's columns (V's rows): no loop, no row
    statistics; P goes from the first accumulator to the second dot's A."""
    m = tc.program_id(0)
    xt = tc.load(x, index=(m, 0), shape=(BM, D), padding=0.0)
    wt = tc.load(w, index=(0, 0), shape=(D, BN), padding=0.0)
    vt = tc.load(v, index=(0, 0), shape=(BN, D), padding=0.0)
    p = tc.exp(tc.dot(xt, wt) - 1.0)
    out = tc.dot(p.astype(x.dtype), vt)
    tc.store(o, index=(m, 0), tile=out.astype(o.dtype))


@tc.kernel
def dot_exp_dot_t(x, w, v, o, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    """O = exp(X W - 1)ᵀ V for one BM-row block of X (V's rows): the transpose of the first
    accumulator is the second dot's A (dV = Pᵀ dO of a backward written with S = Q Kᵀ)."""
    n = tc.program_id(0)
    xt = tc.load(x, index=(0, 0), shape=(BM, D), padding=0.0)
    wt = tc.load(w, index=(0, n), shape=(D, BN), padding=0.0)
    vt = tc.load(v, index=(0, 0), shape=(BM, D), padding=0.0)
    p = tc.exp(tc.dot(xt, wt) - 1.0)
    out = tc.dot(p.astype(x.dtype).T, vt)
    tc.store(o, index=(n, 0), tile=out.astype(o.dtype))


@tc.kernel
def attention(q, k, v, o, scale, BM: tc.constexpr, BN: tc.constexpr, D: tc.constexpr):
    """Flash-attention forward of one head (q, k, v, o: tokens x head dim), online softmax
    over BN-key blocks; any number of tokens and any head dim up to D."""
    mblk = tc.program_id(0)
    n_kv = k.shape[0]
    qt = tc.load(q, index=(mblk, 0), shape=(BM, D), padding=0.0)
    m_i = tc.full((BM,), float("-inf"), tc.float32)
    l_i = tc.zeros((BM,), tc.float32)
    acc = tc.zeros((BM, D), tc.float32)
    qk_scale = scale * 1.4426950408889634
    for j in range(tc.cdiv(n_kv, BN)):
        kt = tc.load(k, index=(j, 0), shape=(BN, D), padding=0.0)
        vt = tc.load(v, index=(j, 0), shape=(BN, D), padding=0.0)
        s = tc.dot(qt, kt.T) * qk_scale
        cols = j * BN + tc.arange(0, BN)
        s = tc.where(cols[None, :] < n_kv, s, float("-inf"))
        m_new = tc.maximum(m_i, tc.max(s, axis=1))
        p = tc.exp2(s - m_new[:, None])
        alpha = tc.exp2(m_i - m_new)
        l_i = l_i * alpha + tc.sum(p, axis=1)
        acc = tc.dot(p.astype(q.dtype), vt, acc * alpha[:, None])
        m_i = m_new
    out = acc / l_i[:, None]
    tc.store(o, index=(mblk, 0), tile=out.astype(o.dtype))


def attention_sig(dtype: str, bm: int, bn: int, d: int) -> str:
    return f"q={dtype}[?,?], k={dtype}[?,?], v={dtype}[?,?], o={dtype}[?,?], scale=f32, BM={bm}, BN={bn}, D={d}"


def dot_exp_dot_sig(dtype: str, bm: int, bn: int, d: int) -> str:
    return f"x={dtype}[?,?], w={dtype}[?,?], v={dtype}[?,?], o=f32[?,?], BM={bm}, BN={bn}, D={d}"
