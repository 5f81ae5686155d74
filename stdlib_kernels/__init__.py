"""tilec's standard library of kernels, written in the tilec DSL, each with a plain
Python entry point (see docs/stdlib.md).

The entry points take torch CUDA tensors, CuPy arrays, `tc.DeviceArray`s or
any DLPack / __cuda_array_interface__ array (run on the GPU), or numpy arrays
(run on the CPU interpreter; bf16 as `BF16Array` or ml_dtypes arrays).
"""
from ._common import BF16Array, F8Array
from .attention import attention
from .attention_bwd import attention_backward
from .attention_mask import BlockMask, block_mask
from .attention_decode import attention_decode
from .backward import layer_norm_backward, log_softmax_backward, rms_norm_backward, softmax_backward
from .cross_entropy import cross_entropy
from .dropout import dropout
from .add_norm import add_rms_norm, add_rms_norm_backward
from .embedding import embedding, embedding_backward
from .elementwise import add, gelu, mul, rope, silu_and_mul, swiglu
from .linear_cross_entropy import linear_cross_entropy
from .elementwise_backward import (dropout_backward, gelu_backward, rope_backward, silu_and_mul_backward,
                                   swiglu_backward)
from .matmul import matmul
from .mla_decode import mla_decode
from .norms import layer_norm, rms_norm
from .reductions import amax, sum  # noqa: A004 - the ops' names
from .reductions_dim import amin, argmax, argmin, cumsum, max, min  # noqa: A004
from .sampling import sample
from .softmax import log_softmax, softmax
from .topk import topk
from .transpose import transpose

__all__ = ["BF16Array", "F8Array", "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy", "sum", "max",
           "amax", "min", "amin", "argmax", "argmin", "cumsum", "matmul", "gelu", "silu_and_mul", "swiglu", "add", "mul",
           "rope", "dropout", "transpose", "attention", "attention_backward", "block_mask", "BlockMask",
           "attention_decode", "mla_decode", "softmax_backward",           "log_softmax_backward", "layer_norm_backward", "rms_norm_backward", "gelu_backward", "swiglu_backward",
           "silu_and_mul_backward", "rope_backward", "dropout_backward", "linear_cross_entropy", "embedding",
           "embedding_backward", "add_rms_norm", "add_rms_norm_backward", "topk", "sample"]
