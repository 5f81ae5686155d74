"""The frontend: a kernel's Python AST to tile IR (`lower_to_ir`).

One handler per AST node type (expressions.py, statements.py, control.py),
the tc.* builtins (builtins_*.py), an explicit `Context` (context.py), and
typing rules (semantic.py).
"""
from __future__ import annotations

from ..errors import CompilationError, debug_enabled
from ..ir import tile_ops as T
from ..ir.core import Block, Module, Region, VerifyError
from ..ir.verifier import verify
from . import builtins_math, builtins_memory, builtins_reduce  # noqa: F401  (register the tc.* handlers)
from . import semantic as S
from .context import Context, FunctionSource
from .statements import lower_function_body
from .values import TensorValue, ViewValue

__all__ = ["lower_to_ir"]


def lower_to_ir(kernel, spec) -> Module:
    """The verified tile IR of `kernel` for the Specialization `spec`: one tile.func whose
    entry-block arguments are the run-time parameters, in parameter order."""
    source = FunctionSource.of(kernel.fn)
    ctx = Context(kernel.name, source)
    runtime = spec.runtime_params
    entry = Block([p.type for p in runtime], [p.name for p in runtime])
    args = iter(entry.args)
    try:
        ctx.builder.at_end(entry)
        for p in spec.params:
            if p.kind == "view":
                ctx.scope[p.name] = ViewValue(next(args))
            elif p.kind == "scalar":
                ctx.scope[p.name] = TensorValue(next(args))
            elif p.kind == "one":
                # the value is specialized, the type is not: a typed constant (not a weak Python
                # int) promotes like the argument would, and the passes still fold the 1 away
                ctx.scope[p.name] = S.constant(ctx, p.value, p.type.dtype)
            else:
                ctx.scope[p.name] = p.value
        lower_function_body(ctx, source.tree)
        ctx.builder.insert(T.ReturnOp.build(loc=ctx.loc))
        fn = T.FuncOp.build(regions=[Region([entry])], result_types=[], loc=ctx.source.loc(source.tree),
                            sym_name=kernel.name, arg_names=[p.name for p in runtime],
                            arg_divisibility=[16 if p.divisible_by_16 else 1 for p in runtime])
        module = Module([fn])
        verify(module)
    except CompilationError:
        raise
    except VerifyError as e:
        if debug_enabled():
            raise
        raise CompilationError(f"internal compiler error: the frontend produced invalid IR: {e}", ctx.loc,
                               kernel=kernel.name) from None
    except RecursionError:
        raise CompilationError("the kernel is too deeply nested to compile", ctx.loc, kernel=kernel.name) from None
    except Exception as e:
        if debug_enabled():
            raise
        raise CompilationError(f"internal compiler error ({type(e).__name__}: {e}); set TILEC_DEBUG=1 for the "
                               "compiler traceback", ctx.failure_loc or ctx.loc, kernel=kernel.name) from None
    return module
