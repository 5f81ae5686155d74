"""tilec's version: the installed distribution's, else the source tree's."""
from __future__ import annotations

try:
    from importlib.metadata import PackageNotFoundError, version as _pkg_version
    try:
        __version__ = _pkg_version("tilec")
    except PackageNotFoundError:
        __version__ = "0.1.0"
except ImportError:  # pragma: no cover
    __version__ = "0.1.0"

__all__ = ["__version__"]
