"""Hand-written PTX kernels in tilec's calling convention (dsl/abi.py), wrapped in
CompiledKernel objects, so the runtime is tested on its own, independent of codegen."""
from __future__ import annotations

from tilec.abi import param_slots
from tilec.compiled import CompiledKernel
from tilec.dtypes import float32, int32
from tilec.ir.types import ScalarType, ViewType

# out[i] = x[i] + alpha * y[i] for i < n; each array a rank-1 view with unit stride and
# i32 index, so each is (ptr, shape0); alpha an f32 scalar.
AXPY_PTX = r"""
.version 7.8
.target sm_80
.address_size 64

.visible .entry axpy(
    .param .u64 x, .param .u32 xn,
    .param .u64 y, .param .u32 yn,
    .param .u64 o, .param .u32 on,
    .param .f32 alpha)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<5>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u64 %rd3, [o];
    ld.param.u32 %r1, [on];
    ld.param.f32 %f1, [alpha];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p, %r5, %r1;
    @%p bra DONE;
    mul.wide.s32 %rd4, %r5, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f2, [%rd5];
    ld.global.f32 %f3, [%rd6];
    fma.rn.f32 %f4, %f1, %f3, %f2;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}
"""

# Writes one int32 far outside any allocation: an illegal-address fault.
OOB_PTX = r"""
.version 7.8
.target sm_80
.address_size 64

.visible .entry oob_write(.param .u64 o, .param .u32 on)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r1;
    ld.param.u64 %rd1, [o];
    add.s64 %rd2, %rd1, 1099511627776;
    mov.u32 %r1, 7;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""

# Does nothing: the launch-overhead floor.
EMPTY_PTX = r"""
.version 7.8
.target sm_80
.address_size 64

.visible .entry empty(.param .u64 o, .param .u32 on)
{
    ret;
}
"""

# Uses 64 KB of dynamic shared memory: needs the >48 KB opt-in.
BIGSMEM_PTX = r"""
.version 7.8
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 smem[];

.visible .entry bigsmem(.param .u64 o, .param .u32 on)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<4>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, smem;
    add.u32 %r3, %r2, 65532;
    st.shared.u32 [%r3], %r1;
    bar.sync 0;
    ld.shared.u32 %r1, [%r3];
    ld.param.u64 %rd1, [o];
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


def _view(dtype=float32):
    return ViewType(dtype, 1, strides=(1,), index=int32, align=16)


def axpy() -> CompiledKernel:
    types = [_view(), _view(), _view(), ScalarType(float32)]
    return CompiledKernel("axpy", {"ptx": AXPY_PTX}, {"num_warps": 4, "shared": 0, "arch": "sm_80"},
                          param_slots(types), ["x", "y", "out", "alpha"])


def one_view_kernel(name: str, ptx: str, shared: int = 0, dtype=float32) -> CompiledKernel:
    return CompiledKernel(name, {"ptx": ptx}, {"num_warps": 1, "shared": shared, "arch": "sm_80"},
                          param_slots([_view(dtype)]), ["out"])
