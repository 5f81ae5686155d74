"""Passes over tilec IR: each a named function `pass_(module, *, explicit arguments) -> Module`.

Which run, in which order and with which arguments: `tilec.lowering.pipeline` (PASSES, PHASES).
"""
from .canonicalize import canonicalize
from .cse import cse
from .dce import dce
from .fold import fold

__all__ = ["canonicalize", "fold", "cse", "dce"]
