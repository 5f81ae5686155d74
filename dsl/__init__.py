"""tilec: a Python DSL for tile-level GPU kernels that compiles to PTX.

    import tilec as tc

    @tc.kernel
    def add(x, y, out, n, BLOCK: tc.constexpr):
        offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
        mask = offs < n
        tc.store(out.ptr + offs, tc.load(x.ptr + offs, mask=mask) + tc.load(y.ptr + offs, mask=mask), mask=mask)
"""
from __future__ import annotations

from .version import __version__  # noqa: F401
from .dtypes import (  # noqa: F401
    DType, bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, float8e4m3, float8e5m2,
)
from .errors import CompilationError, DriverError, InterpreterError, SpillWarning, WgmmaSerializedWarning  # noqa: F401
from .options import CompileOptions  # noqa: F401
from .target import Target  # noqa: F401
from .kernel import Kernel, Func, kernel, func  # noqa: F401
from .language import (  # noqa: F401
    constexpr, static_range, range, interpret,
    program_id, num_programs, cluster_rank, cluster_sync, cluster_gather, barrier, cdiv, arange, zeros, full,
    grid_dependency_wait, launch_dependents,
    load, store, atomic_add, atomic_max, atomic_min, atomic_xchg, atomic_cas,
    dot, where, minimum, maximum, fma, clamp,
    exp, exp2, log, log2, sqrt, rsqrt, sin, cos, tanh, sigmoid, erf, floor, ceil, abs,
    broadcast_to, reshape, permute, trans, expand_dims, cat,
    sum, max, min, argmax, argmin, prod, cumsum, cumprod, reduce,
    device_print, device_assert, static_assert,
    swizzle2d,
)
from .random import philox, rand, rand4x, randint, randint4x  # noqa: F401
from . import dtypes  # noqa: F401,E402
from .specialize import Specialization  # noqa: F401,E402
from .autotune import Config, autotune  # noqa: F401,E402
# Host-side runtime (importing it does not load the CUDA driver). `tc.zeros` stays the
# in-kernel tile op; device arrays of zeros are `tilec.runtime.zeros`.
from .runtime import (  # noqa: F401,E402
    DeviceArray, Event, Graph, OutOfMemoryError, Stream, current_device, empty, from_dlpack, from_numpy,
    set_device, synchronize,
)
from .runtime.profile import profile  # noqa: F401,E402


def __getattr__(name):
    # tilec.nn and tilec.integrations need PyTorch: imported on first use, never by `import tilec`
    if name in ("nn", "integrations"):
        import importlib  # noqa: PLC0415
        return importlib.import_module(f"tilec.{name}")
    raise AttributeError(f"module 'tilec' has no attribute {name!r}")
