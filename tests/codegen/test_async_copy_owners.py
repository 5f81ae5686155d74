"""cp.async copies of a tile that several threads hold (a layout larger than the tile) are
issued by the element's owner only: two threads copying into the same shared bytes is a race
between asynchronous writes (compute-sanitizer racecheck: "invalid memcpy_async
synchronization"; attention_bwd_dkdv_kernel showed it). Checked on the LLVM IR the codegen
emits: every copy sits in a block that the owner test guards (`mask.then`), and a tile no
thread shares keeps its copies unguarded."""
import re

import pytest

import tilec as tc


@tc.kernel
def staged_gemm(a, b, c, BM: tc.constexpr, BN: tc.constexpr, BK: tc.constexpr):
    acc = tc.zeros((BM, BN), tc.float32)
    for k in tc.range(0, tc.cdiv(a.shape[1], BK), num_stages=2):
        acc += tc.dot(tc.load(a, index=(0, k), shape=(BM, BK)), tc.load(b, index=(k, 0), shape=(BK, BN)))
    tc.store(c, index=(0, 0), tile=acc)


SIG = "a=f16[?,?]:stride_div=16x1, b=f16[?,?]:stride_div=16x1, c=f32[?,?], BM={m}, BN={n}, BK={k}"


def _copy_blocks(llvm: str):
    """The label of the basic block of every cp.async copy (not commit/wait) in `llvm`."""
    out, block = [], None
    for line in llvm.splitlines():
        label = re.match(r"^([\w.]+):", line)
        if label:
            block = label.group(1)
        elif "call" in line and re.search(r"@llvm\.nvvm\.cp\.async\.c[ga]\.", line):
            out.append(block)
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_replicated_tiles_are_copied_by_their_owners(arch):
    # 16x16 f16 tiles in 16-byte vectors: 32 vectors for 128 threads, so warps hold copies
    ck = staged_gemm.compile(SIG.format(m=16, n=16, k=16), arch=arch, num_warps=4)
    blocks = _copy_blocks(ck.asm["llvm"])
    assert blocks and all(b is not None and b.startswith("mask.then") for b in blocks), blocks


def test_tiles_no_thread_shares_keep_unguarded_copies():
    ck = staged_gemm.compile(SIG.format(m=64, n=64, k=32), arch="sm_80", num_warps=4)
    blocks = _copy_blocks(ck.asm["llvm"])
    assert blocks and not any(b and b.startswith("mask.then") for b in blocks), blocks
