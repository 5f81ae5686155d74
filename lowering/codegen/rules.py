"""Imports every module that registers codegen rules (importing is registering)."""
from __future__ import annotations

import importlib.util

from . import rules_arith, rules_control, rules_debug, rules_math, rules_memory, rules_shape  # noqa: F401

# The gpu dialect's rules live beside these; they exist once the gpu dialect does.
if importlib.util.find_spec(__package__ + ".rules_gpu") is not None:
    from . import rules_gpu  # noqa: F401

# Tensor cores (mma.sync, ldmatrix, cp.async).
from . import rules_mma  # noqa: F401,E402
from . import rules_wgmma  # noqa: F401,E402  (wgmma, sm_90a)
from . import rules_cluster  # noqa: F401,E402  (thread-block clusters, sm_90+)
from . import rules_dependent_launch  # noqa: F401,E402  (programmatic dependent launch, sm_90+)
