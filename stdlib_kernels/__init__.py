"""tilec's standard library of kernels, written in the tilec DSL, each with a plain
Python entry point (see docs/stdlib.md).

The entry points take torch CUDA tensors, CuPy arrays, `tc.DeviceArray`s or
any DLPack / __cuda_array_interface__ array (run on the GPU), or numpy arrays
(run on the CPU interpreter; bf16 as `BF16Array` or ml_dtypes arrays).
"""
from ._common import BF16Array, F8Array
from .attention import attention
from .attention_bwd import attention_backward
from .cross_entropy import cross_entropy
from .dropout import dropout
from .elementwise import add, gelu, mul, rope, silu_and_mul, swiglu
from .matmul import matmul
from .norms import layer_norm, rms_norm
from .reductions import cumsum, max, sum  # noqa: A004 - the ops' names
from .softmax import log_softmax, softmax
from .transpose import transpose

__all__ = ["BF16Array", "F8Array", "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy", "sum", "max",
           "cumsum", "matmul", "gelu", "silu_and_mul", "swiglu", "add", "mul", "rope", "dropout", "transpose",
           "attention", "attention_backward"]
