"""Boolean tiles through shared memory: a layout conversion of an i1 tile (the masks of a
pointer-tile GEMM, `(rm < M)[:, None] & (kk < K)[None, :]`) stores and loads one byte per
element. LLVM packs a <N x i1> vector into N bits, so a vectorized i1 access would write or
read bits where the other side of the conversion addresses bytes: wrong masks on the GPU."""
import importlib
import re

import pytest

from tilec.frontend import lower_to_ir
from tilec.lowering.codegen import generate
from tilec.lowering.pipeline import run_pipeline
from tilec.options import CompileOptions

from gemm_kernels import matmul_ptr

ALIGNED = "a={t}[?,?]:div=16x16, b={t}[?,?]:div=16x16, c={t}[?,?]:div=16x16, " \
          "M=i32:16, N=i32:16, K=i32:16, sa=i32:16, sb=i32:16, sc=i32:16"
ODD = "a={t}[?,?], b={t}[?,?], c={t}[?,?], M=i32, N=i32, K=i32, sa=i32, sb=i32, sc=i32"

_SHARED_ACCESS = re.compile(r"(?:store|load) (<\d+ x i\d+>|i\d+)[ ,][^\n]*addrspace\(3\)")


def _llvm(sig):
    spec = matmul_ptr.specialization(sig)
    opts = CompileOptions(arch="sm_90a", num_warps=4, num_stages=3).validated()
    return str(generate(run_pipeline(lower_to_ir(matmul_ptr, spec), opts)))


@pytest.mark.parametrize("shape", [ALIGNED, ODD])
@pytest.mark.parametrize("bm,bn,bk", [(64, 64, 32), (64, 64, 16)])
def test_masks_cross_shared_memory_a_byte_per_element(shape, bm, bn, bk, monkeypatch):
    # assign_layouts would compute these masks again in the layout their loads need (they come
    # from aranges): converted, as a mask that cannot be recomputed is
    monkeypatch.setattr(importlib.import_module("tilec.lowering.passes.layouts"), "_RECOMPUTE_LIMIT", 0)
    t = "f32" if bk == 16 else "f16"
    ll = _llvm(shape.format(t=t) + f", BM={bm}, BN={bn}, BK={bk}, TF32={bk == 16}")
    accessed = set(_SHARED_ACCESS.findall(ll))
    assert not [a for a in accessed if re.fullmatch(r"<\d+ x i1>|i1", a)], accessed
    # the masks do go through shared memory here (as bytes), so the check above is not vacuous
    assert "zext i1" in ll and ("i8" in accessed or any(re.fullmatch(r"<\d+ x i8>", a) for a in accessed))
