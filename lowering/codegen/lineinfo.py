"""Line tables: LLVM debug locations from the ops' source spans, so that the PTX carries
`.file`/`.loc` and profilers, compute-sanitizer and SASS listings name the user's lines.

Emission kind DebugDirectivesOnly, not LineTablesOnly: NVPTX then writes only the
`.file`/`.loc` directives (what `nvcc -lineinfo` gives). With LineTablesOnly it also writes
DWARF `.debug_info`/`.debug_abbrev` sections, and ptxas changes the code it makes for them
(vector_add's kernel: 40 registers instead of 31 on sm_90a, ptxas 13.0). One DICompileUnit and one DISubprogram (the kernel); a DIFile per Python file, and
ops from another file (an @tc.func imported from elsewhere) are scoped by a
DILexicalBlockFile of the kernel's subprogram naming that file, so their lines are
not attributed to the kernel's file. Debug info does not change the instructions LLVM
selects; tests/codegen/test_lineinfo.py checks that on the examples.
"""
from __future__ import annotations

import os
from typing import Dict, Optional

from llvmlite import ir

from ...ir.core import Location, Op

__all__ = ["LineTables"]


class LineTables:
    def __init__(self, module: ir.Module, fn: ir.Function, func: Op):
        self.module = module
        self._files: Dict[str, object] = {}
        self._scopes: Dict[str, object] = {}
        path = func.loc.file if func.loc.known else "<unknown>"
        self.file = path
        di_file = self._di_file(path)
        cu = module.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_Python"), "file": di_file, "producer": "tilec",
            "isOptimized": True, "runtimeVersion": 0, "emissionKind": ir.DIToken("DebugDirectivesOnly"),
        }, is_distinct=True)
        module.add_named_metadata("llvm.dbg.cu").add(cu)
        sub_type = module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])})
        line = max(func.loc.line, 1)
        self.subprogram = module.add_debug_info("DISubprogram", {
            "name": fn.name, "file": di_file, "line": line, "type": sub_type, "scopeLine": line,
            "spFlags": ir.DIToken("DISPFlagDefinition"), "unit": cu,
        }, is_distinct=True)
        fn.set_metadata("dbg", self.subprogram)
        self._scopes[path] = self.subprogram
        module.add_named_metadata("llvm.module.flags", [ir.Constant(ir.IntType(32), 2), "Debug Info Version",
                                                        ir.Constant(ir.IntType(32), 3)])

    def _di_file(self, path: str):
        hit = self._files.get(path)
        if hit is None:
            hit = self._files[path] = self.module.add_debug_info(
                "DIFile", {"filename": os.path.basename(path), "directory": os.path.dirname(path)})
        return hit

    def _scope(self, path: str):
        hit = self._scopes.get(path)
        if hit is None:
            hit = self._scopes[path] = self.module.add_debug_info("DILexicalBlockFile", {
                "scope": self.subprogram, "file": self._di_file(path), "discriminator": 0})
        return hit

    def location(self, loc: Location) -> Optional[object]:
        """The DILocation of `loc`, or None when the op has no known source position."""
        if not loc.known:
            return None
        return self.module.add_debug_info(
            "DILocation", {"line": loc.line, "column": max(loc.col, 0), "scope": self._scope(loc.file)})
