"""A loop that adds a wgmma product into one f32 tile of the output per step: relaxed (TMA
reduction on sm_90a) or acq_rel (atomics), for tests/gemm/test_tma_reduce*.py."""
import tilec as tc


@tc.kernel
def add_products(a, b, o, RELAXED: tc.constexpr, BM: tc.constexpr, BN: tc.constexpr, K: tc.constexpr):
    """o[row block r] += 2 · A_j B over the row blocks j of A with j % R == r (R = o's row
    blocks), by every program: the programs' additions meet in the same tiles."""
    bt = tc.load(b, index=(0, 0), shape=(K, BN), padding=0.0)
    blocks = tc.cdiv(o.shape[0], BM)
    for j in range(tc.cdiv(a.shape[0], BM)):
        acc = tc.dot(tc.load(a, index=(j, 0), shape=(BM, K), padding=0.0), bt) * 2.0
        if RELAXED:
            tc.atomic_add(o, acc, index=(j % blocks, 0), sem="relaxed")
        else:
            tc.atomic_add(o, acc, index=(j % blocks, 0))


def signature(relaxed: bool) -> str:
    return ("a=f16[?,?]:stride_div=16x1, b=f16[?,?]:stride_div=16x1, o=f32[?,?]:stride_div=16x1, "
            f"RELAXED={relaxed}, BM=64, BN=64, K=64")
