"""The plans of the elementwise ops, rope, dropout, transpose, sum/max/cumsum and matmul, called
directly on array descriptions (`launches.spec`) and Targets, no array and no GPU: which kernels,
grids, warps, clusters, constexprs, compile options and literal launch scalars a shape gets on
sm_80 and sm_90a. GOLDEN pins the launches the entry points made for these boundary shapes
before their choices became plans (recorded from that code with its `launch` stubbed; the
elementwise ops and reductions read no target then, matmul planned for the given Target); the
other tests check the schedules, that plans read the per-target tables, and their errors."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import tilec as tc
from tilec import dtypes as _dt
from tilec.stdlib_kernels import schedules
from tilec.stdlib_kernels._rows import sliced
from tilec.stdlib_kernels.launches import spec
from tilec.target import Target

from launch_spy import retune

E = importlib.import_module("tilec.stdlib_kernels.elementwise")
EB = importlib.import_module("tilec.stdlib_kernels.elementwise_backward")
DO = importlib.import_module("tilec.stdlib_kernels.dropout")
TR = importlib.import_module("tilec.stdlib_kernels.transpose")
RD = importlib.import_module("tilec.stdlib_kernels.reductions")
MM = importlib.import_module("tilec.stdlib_kernels.matmul")

DTYPES = {"f32": tc.float32, "f16": tc.float16, "bf16": tc.bfloat16, "f8": tc.float8e4m3, "i8": tc.int8,
          "i32": tc.int32, "u8": tc.uint8, "f64": tc.float64, "i64": tc.int64}
TARGETS = {arch: Target.from_arch(arch) for arch in ("sm_80", "sm_90a")}


def _x(shape, dtype, pad=0):
    """A description of `shape` whose rows of the last dimension are `pad` elements apart (contiguous at 0)."""
    if not pad:
        return spec(shape, DTYPES[dtype])
    strides, acc = [1], shape[-1] + pad
    for s in reversed(shape[:-1]):
        strides.insert(0, acc)
        acc *= s
    return spec(shape, DTYPES[dtype], strides)


def _plan(case, target):
    """The launches of GOLDEN's `case` (an op and its arguments) on `target`; outputs contiguous."""
    op = case[0]
    if op == "matmul":
        _, m, n, k, dt, batch, *variant = case
        d = DTYPES[dt]
        a = spec((batch, m, k) if batch else (m, k), d)
        b = spec((k, n), d, (1, k)) if variant == ["bcol"] else spec((k, n), d)
        bias = spec((n,), tc.float32) if variant == ["bias_gelu"] else None
        out_dt = tc.float32 if bias is not None else tc.bfloat16 if d.bits == 8 else d
        out = spec((batch, m, n) if batch else (m, n), out_dt)
        return MM.plan(a, b, out, bias, activation={"bias_gelu": "gelu", "scaled_silu": "silu"}.get(*variant, None)
                       if variant else None, allow_tf32=variant == ["tf32"], scaled=variant == ["scaled_silu"],
                       tma=variant != ["scaled_silu"], config=None, target=target)
    if op in ("rope", "rope_bwd"):
        _, shape, sd, dt, interleaved, pad = case
        x = _x(shape, dt, pad)
        seq_dim = (sd if sd is not None else -3 if len(shape) >= 3 else -2) % len(shape)
        cs = spec((shape[seq_dim], shape[-1] // 2), tc.float32)
        return E.plan_rope(x, cs, cs, spec(shape, x.dtype), interleaved=interleaved, seq_dim=seq_dim,
                           inverse=op == "rope_bwd", target=target)
    shape, dt = case[1], case[2]
    x = _x(shape, dt, case[3] if len(case) > 3 else 0)
    out = spec(shape, x.dtype)
    if op in ("gelu", "gelu_tanh"):
        return E.plan_gelu(x, out, "tanh" if op == "gelu_tanh" else "none", target)
    if op == "gelu_bwd":
        return EB.plan_gelu_backward(x, x, out, "none", target)
    if op == "swiglu":
        return E.plan_gated(x, x, out, target)
    if op == "swiglu_bwd":
        return EB.plan_swiglu_backward(x, x, x, out, spec(shape, x.dtype), target)
    if op == "silu_and_mul":
        h = shape[-1] // 2
        return E.plan_gated(sliced(x, 0, h), sliced(x, h, 2 * h), spec(shape[:-1] + (h,), x.dtype), target)
    if op in ("add_row", "mul_col", "add_same"):
        other = {"add_row": spec(shape[-1:], x.dtype), "mul_col": spec(shape[:-1] + (1,), tc.float32),
                 "add_same": x}[op]
        a, b = (other, x) if op == "mul_col" else (x, other)
        return E.plan_binary(op[:3], a, b, spec(shape, _dt.promote(a.dtype, b.dtype)), target)
    if op == "dropout":
        return DO.plan(x, out, target)
    if op == "transpose":
        return TR.plan(x, spec(shape[::-1], x.dtype), target)
    if op == "cumsum":
        return RD.plan_cumsum(x, out, target)
    dim = case[4]
    return RD.plan(x, spec(shape[:dim] + shape[dim + 1:], x.dtype), dim, is_max=op == "max", target=target)


def _records(launches):
    return [(ln.name, ln.grid, ln.num_warps, ln.cluster, ln.fast_math, dict(ln.constexprs), dict(ln.options),
             tuple(a for a in ln.args if not isinstance(a, str))) for ln in launches]


# (arch, case, the launches as _records gives them)
GOLDEN = [
    ('sm_80', ('gelu', (1,), 'f32', 0), [('gelu_kernel', (1,), 1, 1, True, {'APPROX': 'none', 'BC': 1, 'BR': 1, 'FLAT': True, 'NARROW': False, 'WIDE': False}, {}, (1, 1, 1, 1))]),
    ('sm_80', ('gelu', (4096,), 'f32', 0), [('gelu_kernel', (4,), 4, 1, True, {'APPROX': 'none', 'BC': 1024, 'BR': 1, 'FLAT': True, 'NARROW': False, 'WIDE': False}, {}, (1, 4096, 4096, 4096))]),
    ('sm_80', ('gelu', (17, 1000), 'f32', 3), [('gelu_kernel', (5,), 8, 1, True, {'APPROX': 'none', 'BC': 1024, 'BR': 4, 'FLAT': False, 'NARROW': False, 'WIDE': False}, {}, (17, 1000, 1003, 1000))]),
    ('sm_80', ('gelu_tanh', (70000, 40000), 'f16', 16), [('gelu_kernel', (700000,), 8, 1, True, {'APPROX': 'tanh', 'BC': 4096, 'BR': 1, 'FLAT': False, 'NARROW': True, 'WIDE': True}, {}, (70000, 40000, 40016, 40000))]),
    ('sm_80', ('gelu_bwd', (33, 17), 'bf16', 3), [('gelu_bwd_kernel', (1,), 4, 1, True, {'APPROX': 'none', 'BC': 32, 'BR': 64, 'FLAT': False, 'WIDE': False}, {}, (33, 17, 20, 20, 17))]),
    ('sm_80', ('swiglu', (64, 4096), 'bf16', 16), [('silu_mul_kernel', (64,), 8, 1, True, {'BC': 4096, 'BR': 1, 'FLAT': False, 'WIDE': False}, {}, (64, 4096, 4112, 4112, 4096))]),
    ('sm_80', ('swiglu_bwd', (1000, 1), 'f32', 0), [('swiglu_bwd_kernel', (1,), 4, 1, True, {'BC': 1024, 'BR': 1, 'FLAT': True, 'WIDE': False}, {}, (1, 1000, 1000, 1000, 1000, 1000, 1000))]),
    ('sm_80', ('silu_and_mul', (16, 2048), 'f16', 0), [('silu_mul_kernel', (4,), 8, 1, True, {'BC': 1024, 'BR': 4, 'FLAT': False, 'WIDE': False}, {}, (16, 1024, 2048, 2048, 1024))]),
    ('sm_80', ('add_row', (17, 1000), 'f16', 0), [('binary_kernel', (5,), 8, 1, True, {'BC': 1024, 'BR': 4, 'FLAT': False, 'OP': 'add', 'WIDE': False}, {}, (1, 17, 1000, 0, 1000, 1, 0, 0, 1, 0, 1000))]),
    ('sm_80', ('mul_col', (5, 3, 100), 'f32', 3), [('binary_kernel', (1,), 4, 1, True, {'BC': 128, 'BR': 16, 'FLAT': False, 'OP': 'mul', 'WIDE': False}, {}, (1, 15, 100, 0, 1, 0, 0, 103, 1, 0, 100))]),
    ('sm_80', ('add_same', (3, 70000, 11000), 'bf16', 0), [('binary_kernel', (2255860,), 4, 1, True, {'BC': 1024, 'BR': 1, 'FLAT': True, 'OP': 'add', 'WIDE': True}, {}, (1, 1, 2310000000, 0, 0, 1, 0, 0, 1, 0, 0))]),
    ('sm_80', ('dropout', (1048576,), 'f16', 0, 0.1, 3), [('dropout_kernel', (1024,), 4, 1, True, {'BC': 1024, 'BR': 1, 'FLAT': True, 'GROUPED': True, 'WIDE': False}, {}, (1, 1048576, 1048576, 1048576))]),
    ('sm_80', ('dropout', (33, 17), 'bf16', 3, 0.5, 9223372036854775813), [('dropout_kernel', (1,), 4, 1, True, {'BC': 32, 'BR': 64, 'FLAT': False, 'GROUPED': False, 'WIDE': False}, {}, (33, 17, 20, 17))]),
    ('sm_80', ('dropout', (8192, 8192), 'f32', 16, 0.1, 3), [('dropout_kernel', (16384,), 8, 1, True, {'BC': 4096, 'BR': 1, 'FLAT': False, 'GROUPED': True, 'WIDE': False}, {}, (8192, 8192, 8208, 8192))]),
    ('sm_80', ('transpose', (1000, 1), 'f32', 0), [('transpose_kernel', (16,), 1, 1, True, {'BM': 64, 'BN': 16, 'WIDE': False}, {}, (1000, 1, 1, 1000))]),
    ('sm_80', ('transpose', (1000, 7), 'i32'), [('transpose_kernel', (16,), 1, 1, True, {'BM': 64, 'BN': 16, 'WIDE': False}, {}, (1000, 7, 7, 1000))]),
    ('sm_80', ('transpose', (4096, 4096), 'u8'), [('transpose_kernel', (1024,), 8, 1, True, {'BM': 128, 'BN': 128, 'WIDE': False}, {}, (4096, 4096, 4096, 4096))]),
    ('sm_80', ('transpose', (16, 1), 'i8'), [('transpose_kernel', (1,), 1, 1, True, {'BM': 16, 'BN': 16, 'WIDE': False}, {}, (16, 1, 1, 16))]),
    ('sm_80', ('transpose', (8192, 8192), 'f16', 16), [('transpose_kernel', (4096,), 8, 1, True, {'BM': 128, 'BN': 128, 'WIDE': False}, {}, (8192, 8192, 8208, 8192))]),
    ('sm_80', ('transpose', (70000, 40000), 'f16', 0), [('transpose_kernel', (171211,), 8, 1, True, {'BM': 128, 'BN': 128, 'WIDE': True}, {}, (70000, 40000, 40000, 70000))]),
    ('sm_80', ('transpose', (3, 5), 'f64'), [('transpose_kernel', (1,), 1, 1, True, {'BM': 16, 'BN': 16, 'WIDE': False}, {}, (3, 5, 5, 3))]),
    ('sm_80', ('rope', (2, 16, 4, 64), None, 'f16', False, 0), [('rope_half_kernel', (2,), 4, 1, True, {'BH': 32, 'BR': 64, 'INVERSE': False, 'WIDE': False}, {}, (128, 32, 64, 32, 64, 4, 16))]),
    ('sm_80', ('rope', (37, 128), None, 'bf16', True, 8), [('rope_interleaved_kernel', (2,), 8, 1, True, {'BD': 128, 'BR': 32, 'INVERSE': False, 'WIDE': False}, {}, (37, 128, 136, 64, 128, 1, 37))]),
    ('sm_80', ('rope', (2, 4, 16, 64), -2, 'f32', False, 8), [('rope_half_kernel', (2,), 4, 1, True, {'BH': 32, 'BR': 64, 'INVERSE': False, 'WIDE': False}, {}, (128, 32, 72, 32, 64, 1, 16))]),
    ('sm_80', ('rope_bwd', (1, 70000, 300, 128), None, 'bf16', True, 0), [('rope_interleaved_kernel', (656250,), 8, 1, True, {'BD': 128, 'BR': 32, 'INVERSE': True, 'WIDE': True}, {}, (21000000, 128, 128, 64, 128, 300, 70000))]),
    ('sm_80', ('sum', (17, 1000), 'f32', 0, 1), [('reduce_rows_kernel', (9,), 4, 1, True, {'BLOCK': 1024, 'MAX': False, 'ROWS': 2, 'WINDOW': 0}, {}, ())]),
    ('sm_80', ('sum', (100, 16385), 'f32', 0, 1), [('reduce_rows_kernel', (100,), 8, 1, True, {'BLOCK': 4096, 'MAX': False, 'ROWS': 1, 'WINDOW': 8}, {}, ())]),
    ('sm_80', ('max', (4096, 4097), 'bf16', 0, 1), [('reduce_rows_kernel', (4096,), 2, 1, True, {'BLOCK': 512, 'MAX': True, 'ROWS': 1, 'WINDOW': 16}, {}, ())]),
    ('sm_80', ('sum', (131072, 513), 'bf16', 0, 1), [('reduce_rows_kernel', (65536,), 2, 1, True, {'BLOCK': 512, 'MAX': False, 'ROWS': 2, 'WINDOW': 16}, {}, ())]),
    ('sm_80', ('sum', (5000, 70), 'f32', 0, 0), [('reduce_inner_kernel', (1, 1, 63), 4, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {}, (5,)), ('reduce_inner_kernel', (1, 1, 1), 8, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 32, 'MAX': False, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (2,))]),
    ('sm_80', ('sum', (16384, 8192), 'f32', 0, 0), [('reduce_inner_kernel', (1, 64, 16), 4, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {}, (64,)), ('reduce_inner_kernel', (1, 32, 1), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (1,))]),
    ('sm_80', ('sum', (4, 40000000), 'f32', 0, 0), [('reduce_inner_kernel', (312500, 1, 1), 1, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 4, 'MAX': False, 'STRIPS_FIRST': True}, {}, (1,))]),
    ('sm_80', ('max', (16384, 5000), 'bf16', 0, 0), [('reduce_inner_window_kernel', (1, 10, 48), 8, 1, True, {'BLOCK_I': 512, 'BLOCK_R': 16, 'MAX': True, 'STRIPS_FIRST': False, 'WINDOW': 16}, {}, (22,)), ('reduce_inner_kernel', (1, 20, 1), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 16, 'MAX': True, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (3,))]),
    ('sm_80', ('max', (8192, 16384), 'bf16', 0, 0), [('reduce_inner_kernel', (1, 128, 8), 4, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 32, 'MAX': True, 'STRIPS_FIRST': False}, {}, (32,)), ('reduce_inner_kernel', (1, 64, 1), 4, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 8, 'MAX': True, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (1,))]),
    ('sm_80', ('sum', (300, 1, 200), 'f16', 3, 0), [('reduce_inner_window_kernel', (1, 1, 16), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 32, 'MAX': False, 'STRIPS_FIRST': False, 'WINDOW': 16}, {}, (1,)), ('reduce_inner_kernel', (1, 1, 1), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (1,))]),
    ('sm_80', ('sum', (8192, 1), 'f32', 0, 1), [('reduce_rows_kernel', (4,), 4, 1, True, {'BLOCK': 1, 'MAX': False, 'ROWS': 2048, 'WINDOW': 0}, {}, ())]),
    ('sm_80', ('cumsum', (17, 1000), 'f32', 0), [('cumsum_kernel', (9,), 4, 1, True, {'BLOCK': 1024, 'REALIGN': False, 'ROWS': 2, 'WINDOW': 8}, {}, ())]),
    ('sm_80', ('cumsum', (32768, 3000), 'bf16', 0), [('cumsum_kernel', (32768,), 8, 1, True, {'BLOCK': 4096, 'REALIGN': False, 'ROWS': 1, 'WINDOW': 16}, {}, ())]),
    ('sm_80', ('cumsum', (100, 16385), 'f32', 3), [('cumsum_kernel', (100,), 8, 1, True, {'BLOCK': 4096, 'REALIGN': True, 'ROWS': 1, 'WINDOW': 8}, {}, ())]),
    ('sm_80', ('matmul', 128, 4096, 14336, 'bf16', 0), [('matmul_splitk_kernel', (32, 3), 8, 1, False, {'BK': 32, 'BM': 128, 'BN': 128, 'GROUP_M': 8, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ()), ('splitk_reduce_kernel', (8, 32), 4, 1, False, {'ACT': 'none', 'HAS_BIAS': False, 'RM': 16, 'RN': 128, 'SCALED': False, 'SPLITS': 3}, {'dependent_launch': True}, ())]),
    ('sm_80', ('matmul', 4096, 4096, 4096, 'f16', 0), [('matmul_kernel', (512,), 8, 1, False, {'ACT': 'none', 'BK': 32, 'BM': 128, 'BN': 256, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 1, 4096, 4096, 'f16', 0), [('matmul_kernel', (64,), 4, 1, False, {'ACT': 'none', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 8192, 8192, 8192, 'f32', 0, 'tf32'), [('matmul_kernel', (2048,), 8, 1, False, {'ACT': 'none', 'BK': 16, 'BM': 128, 'BN': 256, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': True}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 64, 64, 64, 'bf16', 3), [('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 32, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ()), ('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 32, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ()), ('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 32, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 37, 29, 200, 'f32', 0), [('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 16, 'BM': 64, 'BN': 32, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 2, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 1000, 1000, 1000, 'f8', 0), [('matmul_kernel', (256,), 4, 1, False, {'ACT': 'none', 'BK': 16, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 2, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 300, 5000, 64, 'bf16', 0, 'bias_gelu'), [('matmul_kernel', (120,), 8, 1, False, {'ACT': 'gelu', 'BK': 32, 'BM': 128, 'BN': 128, 'GROUP_M': 8, 'HAS_BIAS': True, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 16, 4096, 14336, 'f16', 3, 'scaled_silu'), [('matmul_kernel', (64,), 4, 1, False, {'ACT': 'silu', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': True, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': False, 'warp_specialize': False}, ()), ('matmul_kernel', (64,), 4, 1, False, {'ACT': 'silu', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': True, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': False, 'warp_specialize': False}, ()), ('matmul_kernel', (64,), 4, 1, False, {'ACT': 'silu', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': True, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': False, 'warp_specialize': False}, ())]),
    ('sm_80', ('matmul', 2048, 2048, 2048, 'f8', 0, 'bcol'), [('matmul_kernel', (1024,), 4, 1, False, {'ACT': 'none', 'BK': 16, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 2, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_90a', ('gelu', (1,), 'f32', 0), [('gelu_kernel', (1,), 1, 1, True, {'APPROX': 'none', 'BC': 1, 'BR': 1, 'FLAT': True, 'NARROW': False, 'WIDE': False}, {}, (1, 1, 1, 1))]),
    ('sm_90a', ('gelu', (4096,), 'f32', 0), [('gelu_kernel', (4,), 4, 1, True, {'APPROX': 'none', 'BC': 1024, 'BR': 1, 'FLAT': True, 'NARROW': False, 'WIDE': False}, {}, (1, 4096, 4096, 4096))]),
    ('sm_90a', ('gelu', (17, 1000), 'f32', 3), [('gelu_kernel', (5,), 8, 1, True, {'APPROX': 'none', 'BC': 1024, 'BR': 4, 'FLAT': False, 'NARROW': False, 'WIDE': False}, {}, (17, 1000, 1003, 1000))]),
    ('sm_90a', ('gelu_tanh', (70000, 40000), 'f16', 16), [('gelu_kernel', (700000,), 8, 1, True, {'APPROX': 'tanh', 'BC': 4096, 'BR': 1, 'FLAT': False, 'NARROW': True, 'WIDE': True}, {}, (70000, 40000, 40016, 40000))]),
    ('sm_90a', ('gelu_bwd', (33, 17), 'bf16', 3), [('gelu_bwd_kernel', (1,), 4, 1, True, {'APPROX': 'none', 'BC': 32, 'BR': 64, 'FLAT': False, 'WIDE': False}, {}, (33, 17, 20, 20, 17))]),
    ('sm_90a', ('swiglu', (64, 4096), 'bf16', 16), [('silu_mul_kernel', (64,), 8, 1, True, {'BC': 4096, 'BR': 1, 'FLAT': False, 'WIDE': False}, {}, (64, 4096, 4112, 4112, 4096))]),
    ('sm_90a', ('swiglu_bwd', (1000, 1), 'f32', 0), [('swiglu_bwd_kernel', (1,), 4, 1, True, {'BC': 1024, 'BR': 1, 'FLAT': True, 'WIDE': False}, {}, (1, 1000, 1000, 1000, 1000, 1000, 1000))]),
    ('sm_90a', ('silu_and_mul', (16, 2048), 'f16', 0), [('silu_mul_kernel', (4,), 8, 1, True, {'BC': 1024, 'BR': 4, 'FLAT': False, 'WIDE': False}, {}, (16, 1024, 2048, 2048, 1024))]),
    ('sm_90a', ('add_row', (17, 1000), 'f16', 0), [('binary_kernel', (5,), 8, 1, True, {'BC': 1024, 'BR': 4, 'FLAT': False, 'OP': 'add', 'WIDE': False}, {}, (1, 17, 1000, 0, 1000, 1, 0, 0, 1, 0, 1000))]),
    ('sm_90a', ('mul_col', (5, 3, 100), 'f32', 3), [('binary_kernel', (1,), 4, 1, True, {'BC': 128, 'BR': 16, 'FLAT': False, 'OP': 'mul', 'WIDE': False}, {}, (1, 15, 100, 0, 1, 0, 0, 103, 1, 0, 100))]),
    ('sm_90a', ('add_same', (3, 70000, 11000), 'bf16', 0), [('binary_kernel', (2255860,), 4, 1, True, {'BC': 1024, 'BR': 1, 'FLAT': True, 'OP': 'add', 'WIDE': True}, {}, (1, 1, 2310000000, 0, 0, 1, 0, 0, 1, 0, 0))]),
    ('sm_90a', ('dropout', (1048576,), 'f16', 0, 0.1, 3), [('dropout_kernel', (1024,), 4, 1, True, {'BC': 1024, 'BR': 1, 'FLAT': True, 'GROUPED': True, 'WIDE': False}, {}, (1, 1048576, 1048576, 1048576))]),
    ('sm_90a', ('dropout', (33, 17), 'bf16', 3, 0.5, 9223372036854775813), [('dropout_kernel', (1,), 4, 1, True, {'BC': 32, 'BR': 64, 'FLAT': False, 'GROUPED': False, 'WIDE': False}, {}, (33, 17, 20, 17))]),
    ('sm_90a', ('dropout', (8192, 8192), 'f32', 16, 0.1, 3), [('dropout_kernel', (16384,), 8, 1, True, {'BC': 4096, 'BR': 1, 'FLAT': False, 'GROUPED': True, 'WIDE': False}, {}, (8192, 8192, 8208, 8192))]),
    ('sm_90a', ('transpose', (1000, 1), 'f32', 0), [('transpose_kernel', (16,), 1, 1, True, {'BM': 64, 'BN': 16, 'WIDE': False}, {}, (1000, 1, 1, 1000))]),
    ('sm_90a', ('transpose', (1000, 7), 'i32'), [('transpose_kernel', (16,), 1, 1, True, {'BM': 64, 'BN': 16, 'WIDE': False}, {}, (1000, 7, 7, 1000))]),
    ('sm_90a', ('transpose', (4096, 4096), 'u8'), [('transpose_kernel', (1024,), 8, 1, True, {'BM': 128, 'BN': 128, 'WIDE': False}, {}, (4096, 4096, 4096, 4096))]),
    ('sm_90a', ('transpose', (16, 1), 'i8'), [('transpose_kernel', (1,), 1, 1, True, {'BM': 16, 'BN': 16, 'WIDE': False}, {}, (16, 1, 1, 16))]),
    ('sm_90a', ('transpose', (8192, 8192), 'f16', 16), [('transpose_kernel', (4096,), 8, 1, True, {'BM': 128, 'BN': 128, 'WIDE': False}, {}, (8192, 8192, 8208, 8192))]),
    ('sm_90a', ('transpose', (70000, 40000), 'f16', 0), [('transpose_kernel', (171211,), 8, 1, True, {'BM': 128, 'BN': 128, 'WIDE': True}, {}, (70000, 40000, 40000, 70000))]),
    ('sm_90a', ('transpose', (3, 5), 'f64'), [('transpose_kernel', (1,), 1, 1, True, {'BM': 16, 'BN': 16, 'WIDE': False}, {}, (3, 5, 5, 3))]),
    ('sm_90a', ('rope', (2, 16, 4, 64), None, 'f16', False, 0), [('rope_half_kernel', (2,), 4, 1, True, {'BH': 32, 'BR': 64, 'INVERSE': False, 'WIDE': False}, {}, (128, 32, 64, 32, 64, 4, 16))]),
    ('sm_90a', ('rope', (37, 128), None, 'bf16', True, 8), [('rope_interleaved_kernel', (2,), 8, 1, True, {'BD': 128, 'BR': 32, 'INVERSE': False, 'WIDE': False}, {}, (37, 128, 136, 64, 128, 1, 37))]),
    ('sm_90a', ('rope', (2, 4, 16, 64), -2, 'f32', False, 8), [('rope_half_kernel', (2,), 4, 1, True, {'BH': 32, 'BR': 64, 'INVERSE': False, 'WIDE': False}, {}, (128, 32, 72, 32, 64, 1, 16))]),
    ('sm_90a', ('rope_bwd', (1, 70000, 300, 128), None, 'bf16', True, 0), [('rope_interleaved_kernel', (656250,), 8, 1, True, {'BD': 128, 'BR': 32, 'INVERSE': True, 'WIDE': True}, {}, (21000000, 128, 128, 64, 128, 300, 70000))]),
    ('sm_90a', ('sum', (17, 1000), 'f32', 0, 1), [('reduce_rows_kernel', (9,), 4, 1, True, {'BLOCK': 1024, 'MAX': False, 'ROWS': 2, 'WINDOW': 0}, {}, ())]),
    ('sm_90a', ('sum', (100, 16385), 'f32', 0, 1), [('reduce_rows_kernel', (100,), 8, 1, True, {'BLOCK': 4096, 'MAX': False, 'ROWS': 1, 'WINDOW': 8}, {}, ())]),
    ('sm_90a', ('max', (4096, 4097), 'bf16', 0, 1), [('reduce_rows_kernel', (4096,), 2, 1, True, {'BLOCK': 512, 'MAX': True, 'ROWS': 1, 'WINDOW': 16}, {}, ())]),
    ('sm_90a', ('sum', (131072, 513), 'bf16', 0, 1), [('reduce_rows_kernel', (65536,), 2, 1, True, {'BLOCK': 512, 'MAX': False, 'ROWS': 2, 'WINDOW': 16}, {}, ())]),
    ('sm_90a', ('sum', (5000, 70), 'f32', 0, 0), [('reduce_inner_kernel', (1, 1, 63), 4, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {}, (5,)), ('reduce_inner_kernel', (1, 1, 1), 8, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 32, 'MAX': False, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (2,))]),
    ('sm_90a', ('sum', (16384, 8192), 'f32', 0, 0), [('reduce_inner_kernel', (1, 64, 16), 4, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {}, (64,)), ('reduce_inner_kernel', (1, 32, 1), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (1,))]),
    ('sm_90a', ('sum', (4, 40000000), 'f32', 0, 0), [('reduce_inner_kernel', (312500, 1, 1), 1, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 4, 'MAX': False, 'STRIPS_FIRST': True}, {}, (1,))]),
    ('sm_90a', ('max', (16384, 5000), 'bf16', 0, 0), [('reduce_inner_window_kernel', (1, 10, 48), 8, 1, True, {'BLOCK_I': 512, 'BLOCK_R': 16, 'MAX': True, 'STRIPS_FIRST': False, 'WINDOW': 16}, {}, (22,)), ('reduce_inner_kernel', (1, 20, 1), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 16, 'MAX': True, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (3,))]),
    ('sm_90a', ('max', (8192, 16384), 'bf16', 0, 0), [('reduce_inner_kernel', (1, 128, 8), 4, 1, True, {'BLOCK_I': 128, 'BLOCK_R': 32, 'MAX': True, 'STRIPS_FIRST': False}, {}, (32,)), ('reduce_inner_kernel', (1, 64, 1), 4, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 8, 'MAX': True, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (1,))]),
    ('sm_90a', ('sum', (300, 1, 200), 'f16', 3, 0), [('reduce_inner_window_kernel', (1, 1, 16), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 32, 'MAX': False, 'STRIPS_FIRST': False, 'WINDOW': 16}, {}, (1,)), ('reduce_inner_kernel', (1, 1, 1), 8, 1, True, {'BLOCK_I': 256, 'BLOCK_R': 16, 'MAX': False, 'STRIPS_FIRST': False}, {'dependent_launch': True}, (1,))]),
    ('sm_90a', ('sum', (8192, 1), 'f32', 0, 1), [('reduce_rows_kernel', (4,), 4, 1, True, {'BLOCK': 1, 'MAX': False, 'ROWS': 2048, 'WINDOW': 0}, {}, ())]),
    ('sm_90a', ('cumsum', (17, 1000), 'f32', 0), [('cumsum_kernel', (9,), 4, 1, True, {'BLOCK': 1024, 'REALIGN': False, 'ROWS': 2, 'WINDOW': 8}, {}, ())]),
    ('sm_90a', ('cumsum', (32768, 3000), 'bf16', 0), [('cumsum_kernel', (32768,), 8, 1, True, {'BLOCK': 4096, 'REALIGN': False, 'ROWS': 1, 'WINDOW': 16}, {}, ())]),
    ('sm_90a', ('cumsum', (100, 16385), 'f32', 3), [('cumsum_kernel', (100,), 8, 1, True, {'BLOCK': 4096, 'REALIGN': True, 'ROWS': 1, 'WINDOW': 8}, {}, ())]),
    ('sm_90a', ('matmul', 128, 4096, 14336, 'bf16', 0), [('matmul_splitk_kernel', (32, 4), 8, 1, False, {'BK': 64, 'BM': 128, 'BN': 128, 'GROUP_M': 8, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ()), ('splitk_reduce_kernel', (8, 32), 4, 1, False, {'ACT': 'none', 'HAS_BIAS': False, 'RM': 16, 'RN': 128, 'SCALED': False, 'SPLITS': 4}, {'dependent_launch': True}, ())]),
    ('sm_90a', ('matmul', 4096, 4096, 4096, 'f16', 0), [('matmul_kernel', (512,), 8, 1, False, {'ACT': 'none', 'BK': 64, 'BM': 128, 'BN': 256, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_90a', ('matmul', 1, 4096, 4096, 'f16', 0), [('matmul_kernel', (64,), 4, 1, False, {'ACT': 'none', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_90a', ('matmul', 8192, 8192, 8192, 'f32', 0, 'tf32'), [('matmul_kernel', (2048,), 8, 1, False, {'ACT': 'none', 'BK': 32, 'BM': 128, 'BN': 256, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': True}, {'num_stages': 4, 'tma': True, 'warp_specialize': True}, ())]),
    ('sm_90a', ('matmul', 64, 64, 64, 'bf16', 3), [('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 64, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ()), ('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 64, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ()), ('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 64, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_90a', ('matmul', 37, 29, 200, 'f32', 0), [('matmul_kernel', (1,), 4, 1, False, {'ACT': 'none', 'BK': 16, 'BM': 64, 'BN': 32, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 2, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_90a', ('matmul', 1000, 1000, 1000, 'f8', 0), [('matmul_kernel', (256,), 4, 1, False, {'ACT': 'none', 'BK': 128, 'BM': 64, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_90a', ('matmul', 300, 5000, 64, 'bf16', 0, 'bias_gelu'), [('matmul_kernel', (237,), 4, 1, False, {'ACT': 'gelu', 'BK': 64, 'BM': 128, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': True, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
    ('sm_90a', ('matmul', 16, 4096, 14336, 'f16', 3, 'scaled_silu'), [('matmul_kernel', (64,), 4, 1, False, {'ACT': 'silu', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': True, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': False, 'warp_specialize': False}, ()), ('matmul_kernel', (64,), 4, 1, False, {'ACT': 'silu', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': True, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': False, 'warp_specialize': False}, ()), ('matmul_kernel', (64,), 4, 1, False, {'ACT': 'silu', 'BK': 128, 'BM': 16, 'BN': 64, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': True, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': False, 'warp_specialize': False}, ())]),
    ('sm_90a', ('matmul', 2048, 2048, 2048, 'f8', 0, 'bcol'), [('matmul_kernel', (128,), 8, 1, False, {'ACT': 'none', 'BK': 128, 'BM': 128, 'BN': 256, 'GROUP_M': 8, 'HAS_BIAS': False, 'SCALED': False, 'SHARED_B': False, 'TF32': False}, {'num_stages': 4, 'tma': True, 'warp_specialize': False}, ())]),
]


@pytest.mark.parametrize("arch, case, want", GOLDEN, ids=[f"{g[0]}-{'-'.join(map(str, g[1]))}" for g in GOLDEN])
def test_boundary_shapes_plan_as_before(arch, case, want):
    assert _records(_plan(case, TARGETS[arch])) == want


def test_plans_name_their_schedules():
    t = TARGETS["sm_90a"]
    assert [ln.schedule for ln in _plan(("gelu", (4096,), "f32"), t)] == [schedules.FLAT_TILES]
    assert [ln.schedule for ln in _plan(("gelu", (17, 1000), "f32", 3), t)] == [schedules.ROW_TILES]
    assert [ln.schedule for ln in _plan(("add_row", (17, 1000), "f16"), t)] == [schedules.ROW_TILES]
    assert [ln.schedule for ln in _plan(("transpose", (1000, 7), "i32"), t)] == [schedules.TILES]
    assert [ln.schedule for ln in _plan(("sum", (17, 1000), "f32", 0, 1), t)] == [schedules.ONE_TILE]
    assert [ln.schedule for ln in _plan(("sum", (100, 16385), "f32", 0, 1), t)] == [schedules.LOOPED]
    assert [ln.schedule for ln in _plan(("max", (4096, 4097), "bf16", 0, 1), t)] == [schedules.WINDOWS]
    assert [ln.schedule for ln in _plan(("sum", (4, 40_000_000), "f32", 0, 0), t)] == [schedules.STRIPS]
    assert [ln.schedule for ln in _plan(("sum", (5000, 70), "f32", 0, 0), t)] == [schedules.SPLIT] * 2
    assert [ln.schedule for ln in _plan(("max", (16384, 5000), "bf16", 0, 0), t)] == [schedules.WINDOW_CLASSES,
                                                                                      schedules.SPLIT]
    assert [ln.schedule for ln in _plan(("cumsum", (100, 16385), "f32", 3), t)] == [schedules.LOOPED]
    assert [ln.schedule for ln in _plan(("matmul", 4096, 4096, 4096, "f16", 0), t)] == [schedules.GEMM_TILES]
    assert [ln.schedule for ln in _plan(("matmul", 128, 4096, 14336, "bf16", 0), t)] == [schedules.SPLIT_K] * 2


def test_partials_and_workspaces_are_temps_of_the_plan():
    t = TARGETS["sm_90a"]
    stats, merge = _plan(("sum", (5000, 70), "f32", 0, 0), t)
    (part,) = stats.temps
    assert stats.args[:2] == ("x", part.name) and merge.args[:2] == (part.name, "out")
    assert part.dtype is tc.float32 and part.view[0] == (1, stats.grid[2], 70)   # (outer, splits, inner)
    partial, red = _plan(("matmul", 128, 4096, 14336, "bf16", 0), t)
    assert partial.temps == red.temps and partial.temps[0].shape == (4 * 128, 4096)   # 4 slices of M = 128 rows
    assert dict(red.options) == {"dependent_launch": True}
    assert _plan(("matmul", 64, 64, 64, "bf16", 3), t)[2].args[:3] == ("a[2]", "b[2]", "out[2]")   # per batch entry


def test_plans_read_the_targets_tables(monkeypatch):
    t = TARGETS["sm_80"]
    (before,) = _plan(("gelu", (17, 1000), "f32", 3), t)
    retune(monkeypatch, "elementwise", tile_elems=2048)
    (after,) = _plan(("gelu", (17, 1000), "f32", 3), t)
    assert (before.consts["BR"], after.consts["BR"]) == (4, 2) and after.grid == (9,)
    retune(monkeypatch, "transpose", tile_4byte=(32, 32))
    assert _plan(("transpose", (1000, 7), "i32"), t)[0].consts["BM"] == 32
    assert [ln.schedule for ln in _plan(("sum", (1024, 131072), "f32", 0, 0), t)] == [schedules.STRIPS]   # 1024 strips
    retune(monkeypatch, "reduction", strip_programs=4096)   # more programs wanted: R split among them
    assert [ln.schedule for ln in _plan(("sum", (1024, 131072), "f32", 0, 0), t)] == [schedules.SPLIT] * 2
    MM.config_for.cache_clear()
    try:
        retune(monkeypatch, "matmul", min_split_k=1 << 20)   # no K that long: no split-K
        assert [ln.schedule for ln in _plan(("matmul", 128, 4096, 14336, "bf16", 0), t)] == [schedules.GEMM_TILES]
    finally:
        MM.config_for.cache_clear()


def test_sm80_and_sm90a_tables_agree_where_sm80_was_not_measured():
    from tilec.stdlib_kernels.tuning import TABLES  # noqa: PLC0415
    for op in ("elementwise", "transpose", "reduction", "matmul"):
        assert getattr(TABLES["sm_80"], op) == getattr(TABLES["sm_90"], op), op


def test_plans_reject_layouts_they_cannot_view():
    t = TARGETS["sm_90a"]
    with pytest.raises(ValueError, match="add: the broadcast .* needs 4 dimensions"):
        E.plan_binary("add", spec((2, 3, 4, 5), tc.float32, (1000, 100, 10, 1)), spec((5,), tc.float32),
                      spec((2, 3, 4, 5), tc.float32), t)
    with pytest.raises(ValueError, match="x: the last dimension must be contiguous"):
        E.plan_gelu(spec((4, 6), tc.float16, (12, 2)), spec((4, 6), tc.float16), "none", t)
    with pytest.raises(ValueError, match="slabs x 1 column strips x 1 splits do not fit a grid"):
        RD.plan(spec((2 ** 31, 2, 1), tc.float32), spec((2 ** 31, 1), tc.float32), 1, is_max=False, target=t)


def test_empty_shapes_plan_nothing_or_empty_grids():
    t = TARGETS["sm_90a"]
    assert RD.plan(spec((0, 5), tc.float32), spec((0,), tc.float32), 1, is_max=False, target=t) == []
    assert RD.plan_cumsum(spec((3, 0), tc.float32), spec((3, 0), tc.float32), t) == []
    assert MM.plan(spec((0, 8), tc.float16), spec((8, 4), tc.float16), spec((0, 4), tc.float16), None, activation=None,
                   allow_tf32=False, scaled=False, tma=True, config=None, target=t) == []
    (ln,) = E.plan_gelu(spec((0, 7), tc.float32), spec((0, 7), tc.float32), "none", t)
    assert math.prod(ln.grid) == 0    # (`execute` launches no empty grid)



def test_padded_scratch_is_zeroed_in_sanitizer_mode(monkeypatch):
    # sum over dim 0 of a 2-byte (3, 1001) splits R into f32 partials whose rows are padded
    # to 32 bytes: the merge's 16-byte groups read the gaps (masked), which initcheck would
    # report as uninitialized unless the sanitizer mode zeroes them
    from tilec.stdlib_kernels._common import as_array
    from tilec.stdlib_kernels.launches import Operands
    monkeypatch.setenv("TILEC_INITCHECK", "1")
    x = np.ones((3, 1001), np.float16)
    launches = RD.plan(spec(x.shape, tc.float16), spec((1001,), tc.float16), 0, is_max=False,
                       target=TARGETS["sm_90a"])
    temp = next(t for ln in launches for t in ln.temps)
    assert temp.view is not None and temp.view[0][-1] < temp.shape[-1], temp
    v = Operands({"x": as_array(x, "x")}, {}).get(temp)
    whole = np.lib.stride_tricks.as_strided(v, shape=temp.shape, strides=v.strides)   # the gaps included
    assert np.all(whole == 0), whole
