"""Run by hand (and by test_gpu): a kernel that writes out of bounds.

    python tests/runtime/fault_demo.py
    compute-sanitizer --tool memcheck python tests/runtime/fault_demo.py

Prints the DriverError tilec raises (naming the kernel and saying the context is
unusable), then the error a later allocation gets; exits 0 either way.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tilec.runtime as rt  # noqa: E402
from tilec.dtypes import int32  # noqa: E402
from tilec.runtime import launcher  # noqa: E402
from ptx_kernels import OOB_PTX, one_view_kernel  # noqa: E402

kernel = one_view_kernel("oob_write", OOB_PTX, dtype=int32)
out = rt.zeros(1, int32)
try:
    launcher.launch_compiled(kernel, (1,), out)
    rt.synchronize()
    print("NO FAULT")
except rt.DriverError as e:
    print("CAUGHT", e)
try:
    rt.zeros(4)
    print("AFTER no error")
except rt.DriverError as e:
    print("AFTER", e)
