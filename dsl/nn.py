"""tilec.nn: drop-in torch.nn.Modules on tilec's ops (the code is tilec.stdlib_kernels.nn).
Needs PyTorch; `import tilec` never imports this module (`tilec.nn` imports it on first use)."""
from tilec.stdlib_kernels.nn import (Attention, LayerNorm, LinearCrossEntropyLoss, RMSNorm,  # noqa: F401
                                     RotaryEmbedding, SwiGLUMLP)

__all__ = ["RMSNorm", "LayerNorm", "RotaryEmbedding", "SwiGLUMLP", "Attention", "LinearCrossEntropyLoss"]
