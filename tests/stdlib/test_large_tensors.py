"""CPU side of the tensors past 2**31 elements (test_large_tensors_gpu.py runs them): each
op of the GPU tests, called on array descriptions of 2**31 + 3 * 4096 f16 elements that are
never read (`launch_spy.huge`), plans launches whose every array reaching past 2**31 is an
i64 view, whose pointer kernels take their 64-bit path (WIDE), and which compile and
assemble for sm_90a: what the GPU tests launch, checked before a GPU sees it."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as S
from tilec.specialize import array_info
from tilec.stdlib_kernels import _common

from launch_spy import huge

COLS = 4096
ROWS = 2 ** 31 // COLS + 3
F16 = np.float16


def _x():
    return huge((ROWS, COLS), F16)


OPS = {
    "softmax": lambda: S.softmax(_x(), out=_x()),
    "layer_norm": lambda: S.layer_norm(_x(), np.ones(COLS, F16), np.ones(COLS, F16), out=_x()),
    "rms_norm": lambda: S.rms_norm(_x(), np.ones(COLS, F16), out=_x()),
    "cross_entropy": lambda: S.cross_entropy(_x(), np.zeros(ROWS, np.int64), reduction="none"),
    "gelu": lambda: S.gelu(_x(), out=_x()),
    "silu_and_mul": lambda: S.silu_and_mul(_x(), out=huge((ROWS, COLS // 2), F16)),
    "dropout": lambda: S.dropout(_x(), 0.25, seed=5, out=_x()),
    "sum over rows": lambda: S.sum(_x(), -1),
    "max over rows": lambda: S.amax(_x(), -1),
    "sum over dim 0": lambda: S.sum(_x(), 0),
    "max over dim 0": lambda: S.amax(_x(), 0),
    "cumsum": lambda: S.cumsum(_x(), out=_x()),
    "transpose": lambda: S.transpose(_x(), out=huge((COLS, ROWS), F16)),
}


def planned_launches(monkeypatch, op):
    """The launches `op` makes, recorded instead of run: (kernel, grid, args, options, constexprs)."""
    real, seen = _common.launch, []

    def record(kernel, grid, args, num_warps=4, fast_math=True, cluster=1, options=None, **constexprs):
        opts = dict(options or {}, num_warps=num_warps, fast_math=fast_math)
        if cluster > 1:
            opts["cluster"] = cluster
        seen.append((kernel, tuple(grid), list(args), opts, constexprs))

    for name, mod in list(sys.modules.items()):
        if name.startswith("tilec.stdlib_kernels") and getattr(mod, "launch", None) is real:
            monkeypatch.setattr(mod, "launch", record)
    OPS[op]()
    assert seen, f"{op} launched nothing"
    return seen


def _reach(a) -> int:
    i = array_info(a)
    return sum((n - 1) * abs(s) for n, s in zip(i.shape, i.strides) if n > 1)


@pytest.mark.parametrize("op", OPS)
def test_launches_past_2_31_take_64_bit_offsets(monkeypatch, op):
    for kernel, grid, args, _opts, constexprs in planned_launches(monkeypatch, op):
        spec = kernel.specialization(*args, **constexprs)
        runtime_names = [n for n in kernel.param_names if n not in kernel.constexprs]
        for name, a in zip(runtime_names, args):     # the stdlib passes run-time arguments in order
            p = spec[name]
            if p.kind == "view":
                wide = _reach(a) >= 2 ** 31 or max(array_info(a).shape) >= 2 ** 31
                assert (p.type.index is tc.int64) == wide, (kernel.name, p.name, str(p.type))
        if "WIDE" in constexprs:    # kernels that build pointers from program ids (`_rows.program`)
            assert constexprs["WIDE"] is True, kernel.name
        assert all(0 < g for g in grid)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_those_launches_compile_and_assemble(monkeypatch, op):
    from tilec.lowering import ptxas
    for kernel, _grid, args, opts, constexprs in planned_launches(monkeypatch, op):
        compiled = kernel.compile(*args, arch="sm_90a", **opts, **constexprs)
        assert compiled.asm["ptx"]
        if ptxas.find_ptxas() is not None:
            assert "cubin" in compiled.asm, kernel.name
