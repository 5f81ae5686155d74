"""The `tile` dialect: hardware-agnostic ops on scalars, tiles, pointers and views.

Conventions every pass, the interpreter and codegen rely on:
- Elementwise ops take operands of one identical type (scalar, or tile of one
  shape); the frontend inserts `tile.splat`/`tile.broadcast`/`tile.cast` first.
- `//` and `%` have Python (floor) semantics; `/` is defined for floats only.
- Shapes are static powers of two.
"""
from __future__ import annotations

from typing import List

from .common import EW, PURE, TERM, A  # noqa: F401
from .structure import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .memory import *  # noqa: F401,F403
from .elementwise import CMP_PREDICATES  # noqa: F401
from .shape import REDUCE_KINDS, SCAN_KINDS  # noqa: F401
from .memory import ATOMIC_KINDS  # noqa: F401


def op_classes() -> List[type]:
    """Every tile dialect op class, for documentation and tests."""
    from ..core import OP_REGISTRY
    return [c for n, c in OP_REGISTRY.items() if n.startswith("tile.")]
