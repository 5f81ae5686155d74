"""Dots whose B is the transpose of a row-major tile (`x @ w.T`, attention's `q @ k.T`): B runs
along K, so on sm_90a its buffer is K-major and wgmma takes N below 64 per warp column
(m64n16k16, m64n32k16). The PTX tests (test_wgmma_ptx.py) and the GPU tests
(test_wgmma_narrow_gpu.py) compile and run these."""
import tilec as tc


@tc.kernel
def dot_nt(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    """C = A Bᵀ (a: M x K, b: N x K, both rows contiguous) by BM x BN blocks, K in BK steps
    (the loop's loads go through the cp.async ring, B into a K-major buffer)."""
    m = tc.program_id(0)
    n = tc.program_id(1)
    acc = tc.zeros((BM, BN), tc.float32)
    for kk in range(tc.cdiv(a.shape[1], BK)):
        at = tc.load(a, index=(m, kk), shape=(BM, BK), padding=0.0)
        bt = tc.load(b, index=(n, kk), shape=(BN, BK), padding=0.0)
        acc = tc.dot(at, bt.T, acc)
    tc.store(c, index=(m, n), tile=acc)


@tc.kernel
def dot_nt_once(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    """C = A Bᵀ with all of K (at most BK) in one tile: no loop, one store of each operand;
    the product is scaled and shifted so that a wrong fragment cannot hide in a zero."""
    m = tc.program_id(0)
    n = tc.program_id(1)
    at = tc.load(a, index=(m, 0), shape=(BM, BK), padding=0.0)
    bt = tc.load(b, index=(n, 0), shape=(BN, BK), padding=0.0)
    tc.store(c, index=(m, n), tile=tc.dot(at, bt.T) * 0.5 + 1.0)


def nt_sig(dtype: str, bm: int, bn: int, bk: int) -> str:
    return (f"a={dtype}[?,?]:stride_div=16x1, b={dtype}[?,?]:stride_div=16x1, c=f32[?,?]:stride_div=16x1, "
            f"BM={bm}, BN={bn}, BK={bk}")
