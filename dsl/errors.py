"""Exceptions users see."""
from __future__ import annotations

import linecache
import os

__all__ = ["CompilationError", "DriverError", "InterpreterError", "SpillWarning", "WgmmaSerializedWarning",
           "debug_enabled"]


def debug_enabled() -> bool:
    return os.environ.get("TILEC_DEBUG", "") not in ("", "0")


class CompilationError(Exception):
    """A kernel could not be compiled. Shows file:line:col, the source line and a caret.

    `kernel` names the kernel, `stage` the pass or op that failed (when not the frontend).
    `call_sites` are the calls of the `@tc.func`s the error sits in, innermost first: the
    error's line alone does not say which of a helper's callers passed what it rejects.
    """

    def __init__(self, msg: str, loc=None, kernel: str | None = None, stage: str | None = None):
        self.msg, self.loc, self.kernel, self.stage = msg, loc, kernel, stage
        self.call_sites: list = []
        super().__init__(self._format())

    def add_call_site(self, loc, callee: str) -> None:
        """Note that this error happened inside `callee`, called at `loc` (frontend inlining)."""
        self.call_sites.append((loc, callee))
        self.args = (self._format(),)

    def _format(self) -> str:
        head = []
        if self.kernel:
            head.append(f"in kernel '{self.kernel}'")
        if self.stage:
            head.append(f"during {self.stage}")
        text = (", ".join(head) + ": " if head else "") + self.msg
        loc = self.loc
        if loc is not None and getattr(loc, "line", 0) > 0:
            text = f"{loc.file}:{loc.line}:{loc.col}: {text}" + _caret(loc)
        for site, callee in self.call_sites:
            if site is not None and getattr(site, "line", 0) > 0:
                text += f"\n  in @tc.func '{callee}' called from {site.file}:{site.line}:{site.col}" + _caret(site)
        return text


def _caret(loc) -> str:
    """The source line of `loc` and a caret under its column ('' when the file is not readable)."""
    src = linecache.getline(loc.file, loc.line).rstrip("\n")
    if not src:
        return ""
    return f"\n    {src}\n    {' ' * (max(loc.col, 1) - 1)}^"


class DriverError(RuntimeError):
    """The CUDA driver is missing, has no device, or failed a call.

    After a GPU fault (illegal address, trap, ...) `context_lost` is True and, on the error
    that first reports the fault, `launch` describes the launch it is attributed to (kernel,
    grid, arguments' shapes); docs/runtime.md, "Errors"."""

    context_lost = False
    launch = None


class InterpreterError(RuntimeError):
    """A kernel failed while running under the interpreter (e.g. device_assert)."""


class SpillWarning(UserWarning):
    """ptxas kept part of a kernel's values in local memory (spilled registers): the kernel
    compiled and runs correctly, but slower than one that fits. The message names the kernel,
    its registers and the spilled bytes; `compiled.metadata["warnings"]` keeps it."""


class WgmmaSerializedWarning(UserWarning):
    """ptxas made every wgmma of a kernel wait for the one before (its C7514/C7515 infos):
    correct, but no wgmma overlaps anything. The message names the kernel and ptxas's reason;
    `compiled.metadata["warnings"]` keeps it, `metadata["ptxas"]["wgmma_serialized"]` the reason."""
