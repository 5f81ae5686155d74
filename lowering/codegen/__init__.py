"""gpu IR -> LLVM IR with llvmlite: a rule table keyed by op class and one walker.

Public API: `generate(module, options) -> llvmlite.ir.Module`, `rule` (register a
lowering), `CodegenContext` (what a rule sees), `map_elementwise`, `register_map`.
"""
from .context import CodegenContext, ViewValue  # noqa: F401
from .walker import RULES, flatten, generate, lower_block, lower_region, rule, unflatten  # noqa: F401
