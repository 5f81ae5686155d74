"""The gpu dialect: distributed and shared-memory layouts, and the ops that use them."""
from .layouts import *  # noqa: F401,F403
from . import ops  # noqa: F401  (registers the gpu dialect)
from .ops import *  # noqa: F401,F403
from . import mma_ops  # noqa: F401,E402  (registers the tensor-core ops)
from . import wgmma_ops  # noqa: F401,E402  (registers the wgmma ops)
from . import ws_ops  # noqa: F401,E402  (registers gpu.warp_specialize)
