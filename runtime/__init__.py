"""tilec's runtime: CUDA driver, devices, streams, memory, interop, launch, compile cache.

Importing this package never loads the CUDA driver; the first call that needs
the GPU does (see driver.py).
"""
from ..errors import DriverError
from .driver import current_device, device_count, get_device, is_available, set_device
from .memory import DeviceArray, OutOfMemoryError, empty, from_numpy, zeros
from .dlpack import from_dlpack
from .replay import LaunchPlan, launch_plan
from .stream import Event, Stream, synchronize
from .graph import Graph

__all__ = ["DriverError", "OutOfMemoryError", "DeviceArray", "empty", "zeros", "from_numpy", "from_dlpack",
           "Stream", "Event", "synchronize", "set_device", "current_device", "device_count", "get_device",
           "gpu_available", "device_name", "is_available", "LaunchPlan", "launch_plan", "Graph"]


def gpu_available() -> bool:
    """True when a CUDA driver and a device are present (loads the driver)."""
    return is_available()


def device_name(device=None) -> str:
    """The name of `device` (default: the current one), e.g. 'NVIDIA H100 80GB HBM3'."""
    return get_device(device).name
