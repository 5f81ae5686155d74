"""tilec's IR: core classes, the tile dialect, printer, parser and verifier."""
from .core import *  # noqa: F401,F403
from .types import *  # noqa: F401,F403
from . import tile_ops  # noqa: F401  (registers the tile dialect)
from .printer import print_module, print_op  # noqa: F401
from .parser import parse, IRParseError  # noqa: F401
from .verifier import verify  # noqa: F401
