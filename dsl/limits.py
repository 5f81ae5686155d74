"""Peak throughput and memory bandwidth per GPU: the roofline's ceilings.

Datasheet numbers (not measured), dense (without 2:4 sparsity), at boost clock:
- H100 SXM5 80GB: NVIDIA H100 Tensor Core GPU datasheet (2023): FP16/BF16 tensor 989.4
  TFLOP/s, TF32 494.7, FP8 1978.9, INT8 1978.9 TOP/s, FP32 66.9, FP64 33.5 (tensor 66.9);
  HBM3 3.35 TB/s. (The datasheet prints the sparse figures, twice these, with an asterisk.)
- H100 PCIe 80GB: same datasheet: FP16/BF16 756.5, TF32 378, FP8 1513, INT8 1513, FP32
  51.2, FP64 25.6; HBM2e 2.0 TB/s.
- H200 SXM 141GB: NVIDIA H200 datasheet (2024): the H100 SXM's compute (989.4 / 494.7 /
  1978.9, FP32 66.9, FP64 33.5); HBM3e 4.8 TB/s.
- A100 SXM4 80GB: NVIDIA A100 datasheet (2021): FP16/BF16 312, TF32 156, INT8 624, FP32
  19.5, FP64 9.7 (tensor 19.5), no FP8; HBM2e 2039 GB/s (the 40GB part: 1555 GB/s).
Memory-bound kernels reach about 90% of these bandwidths at best; the measured copy
bandwidth (tilec.runtime.profile.copy_bandwidth) is the honest ceiling where a GPU is at hand.

This module imports nothing of tilec's (the base layer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

__all__ = ["DeviceLimits", "limits_for", "KNOWN"]


@dataclass(frozen=True)
class DeviceLimits:
    part: str                            # the datasheet's part name
    bandwidth: float                     # HBM bytes per second (datasheet)
    tensor: Dict[str, float] = field(default_factory=dict)   # dense tensor-core FLOP/s by operand dtype
    cuda: Dict[str, float] = field(default_factory=dict)     # CUDA-core FLOP/s by dtype (f32, f64)
    source: str = "datasheet"

    def tensor_peak(self, dtype: str) -> Optional[float]:
        return self.tensor.get(dtype)

    def cuda_peak(self, dtype: str = "f32") -> float:
        # f16/bf16 elementwise math runs in f32 in tilec's lowering
        return self.cuda.get(dtype, self.cuda["f32"])


_T = 1e12
KNOWN: Dict[str, DeviceLimits] = {
    "H100 SXM": DeviceLimits("H100 SXM5 80GB", 3.35e12,
                             {"f16": 989.4 * _T, "bf16": 989.4 * _T, "tf32": 494.7 * _T, "f8": 1978.9 * _T,
                              "i8": 1978.9 * _T},
                             {"f32": 66.9 * _T, "f64": 33.5 * _T}),
    "H100 PCIe": DeviceLimits("H100 PCIe 80GB", 2.0e12,
                              {"f16": 756.5 * _T, "bf16": 756.5 * _T, "tf32": 378.0 * _T, "f8": 1513.0 * _T,
                               "i8": 1513.0 * _T},
                              {"f32": 51.2 * _T, "f64": 25.6 * _T}),
    "H200": DeviceLimits("H200 SXM 141GB", 4.8e12,
                         {"f16": 989.4 * _T, "bf16": 989.4 * _T, "tf32": 494.7 * _T, "f8": 1978.9 * _T,
                          "i8": 1978.9 * _T},
                         {"f32": 66.9 * _T, "f64": 33.5 * _T}),
    "A100 SXM": DeviceLimits("A100 SXM4 80GB", 2.039e12,
                             {"f16": 312.0 * _T, "bf16": 312.0 * _T, "tf32": 156.0 * _T, "i8": 624.0 * _T},
                             {"f32": 19.5 * _T, "f64": 9.7 * _T}),
    "A100 40GB": DeviceLimits("A100 SXM4 40GB", 1.555e12,
                              {"f16": 312.0 * _T, "bf16": 312.0 * _T, "tf32": 156.0 * _T, "i8": 624.0 * _T},
                              {"f32": 19.5 * _T, "f64": 9.7 * _T}),
}


def limits_for(device: str) -> Optional[DeviceLimits]:
    """The datasheet limits of a device by the name the driver gives it ("NVIDIA H100 80GB
    HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB") or a Target's nominal part ("H100 SXM");
    None for a part not in the table."""
    if not isinstance(device, str):
        raise TypeError(f"device must be a device name (str), got {type(device).__name__}")
    name = device.upper()
    if "H200" in name:
        return KNOWN["H200"]
    if "H100" in name:
        return KNOWN["H100 PCIe" if "PCIE" in name else "H100 SXM"]
    if "A100" in name:
        return KNOWN["A100 40GB" if "40GB" in name else "A100 SXM"]
    return None
