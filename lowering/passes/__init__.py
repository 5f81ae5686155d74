"""Passes over tilec IR: each a named function `pass_(module, **options) -> Module`.

The order they run in is `tilec.lowering.pipeline.PIPELINE`.
"""
from .canonicalize import canonicalize
from .cse import cse
from .dce import dce
from .fold import fold

__all__ = ["canonicalize", "fold", "cse", "dce"]
