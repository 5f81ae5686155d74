"""Exceptions users see."""
from __future__ import annotations

import linecache
import os

__all__ = ["CompilationError", "DriverError", "InterpreterError", "SpillWarning", "debug_enabled"]


def debug_enabled() -> bool:
    return os.environ.get("TILEC_DEBUG", "") not in ("", "0")


class CompilationError(Exception):
    """A kernel could not be compiled. Shows file:line:col, the source line and a caret.

    `kernel` names the kernel, `stage` the pass or op that failed (when not the frontend).
    """

    def __init__(self, msg: str, loc=None, kernel: str | None = None, stage: str | None = None):
        self.msg, self.loc, self.kernel, self.stage = msg, loc, kernel, stage
        super().__init__(self._format())

    def _format(self) -> str:
        head = []
        if self.kernel:
            head.append(f"in kernel '{self.kernel}'")
        if self.stage:
            head.append(f"during {self.stage}")
        text = (", ".join(head) + ": " if head else "") + self.msg
        loc = self.loc
        if loc is not None and getattr(loc, "line", 0) > 0:
            src = linecache.getline(loc.file, loc.line).rstrip("\n")
            text = f"{loc.file}:{loc.line}:{loc.col}: {text}"
            if src:
                col = max(loc.col, 1)
                text += f"\n    {src}\n    {' ' * (col - 1)}^"
        return text


class DriverError(RuntimeError):
    """The CUDA driver is missing, has no device, or failed a call."""


class InterpreterError(RuntimeError):
    """A kernel failed while running under the interpreter (e.g. device_assert)."""


class SpillWarning(UserWarning):
    """ptxas kept part of a kernel's values in local memory (spilled registers): the kernel
    compiled and runs correctly, but slower than one that fits. The message names the kernel,
    its registers and the spilled bytes; `compiled.metadata["warnings"]` keeps it."""
