"""gpu IR -> LLVM IR with llvmlite: a rule table keyed by op class and one walker.

Public API: `generate(module) -> llvmlite.ir.Module` (the module as `pipeline.run_pipeline`
left it: its attributes say the target, warps and threads), `rule` (register a
lowering), `CodegenContext` (what a rule sees), `map_elementwise`, `register_map`.
"""
from .context import CodegenContext, ViewValue  # noqa: F401
from .rules_arith import map_elementwise  # noqa: F401
from .rules_shape import register_map  # noqa: F401
from .walker import RULES, flatten, generate, lower_block, lower_region, origin_of, rule, unflatten  # noqa: F401

__all__ = ["CodegenContext", "ViewValue", "RULES", "flatten", "generate", "lower_block", "lower_region", "rule",
           "unflatten", "origin_of", "map_elementwise", "register_map"]
