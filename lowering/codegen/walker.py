"""The rule table and the one walker that drives codegen.

    @rule(tile_ops.AddOp)
    def _add(ctx, op): ...

A rule reads its operands with `ctx.get`/`ctx.elems` and binds its results with
`ctx.set`. The walker visits the ops of a block in order; ops with regions
(for/while/if) lower their regions through `lower_region`. Any exception in a
rule becomes a `CompilationError` naming the kernel, the op and its location.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from llvmlite import ir

from ...abi import param_slots
from ..gpu.tma_ops import tma_params
from ...errors import CompilationError
from ...ir.core import Block, Module, Op
from ...ir.types import ViewType
from ...target import Target
from .context import CodegenContext, ViewValue
from .lineinfo import LineTables
from .types import global_ptr, llvm_scalar

__all__ = ["rule", "RULES", "lower_block", "lower_region", "generate", "flatten", "unflatten", "origin_of"]

RULES: Dict[type, Callable[[CodegenContext, Op], None]] = {}


def rule(*op_classes):
    """Register the decorated function as the lowering of `op_classes`."""
    def deco(fn):
        for cls in op_classes:
            if cls in RULES and RULES[cls] is not fn:
                raise ValueError(f"two codegen rules for {cls.name}")
            RULES[cls] = fn
        return fn
    return deco


def _find_rule(op: Op):
    # Exact class first: some ops subclass others (store_masked < store) but lower differently.
    fn = RULES.get(type(op))
    if fn is None:
        raise ValueError(f"no codegen rule for '{op.name}' (a lowering pass should have removed it)")
    return fn


def lower_op(ctx: CodegenContext, op: Op) -> None:
    # the op's source line on every instruction it emits (an op without one keeps the line
    # before it); an op with regions gets its own back after its inner ops (a loop's branches)
    outer_line = ctx.builder.debug_metadata
    if ctx.lines is not None:
        here = ctx.lines.location(op.loc)
        if here is not None:
            ctx.builder.debug_metadata = here
    outer, ctx.builder.op = ctx.builder.op, op  # ops with regions lower their inner ops here
    try:
        _find_rule(op)(ctx, op)
    except CompilationError:
        raise
    except Exception as e:  # any failure inside a rule is reported against the user's op
        raise CompilationError(f"cannot lower '{op.name}': {e}", loc=op.loc,
                               kernel=ctx.kernel_name, stage=f"codegen of {op.name}") from e
    finally:
        ctx.builder.op = outer
        ctx.builder.debug_metadata = outer_line


def origin_of(llmod: ir.Module, message: str) -> Optional[Op]:
    """The op whose lowering emitted an instruction that LLVM's `message` quotes (parse and
    verifier errors both print the offending instruction on a line of its own), or None."""
    quoted = {ln.strip() for ln in message.splitlines() if ln.strip()}
    for fn in llmod.functions:
        for block in fn.blocks:
            for instr in block.instructions:
                op = getattr(instr, "tilec_op", None)
                if op is not None and str(instr).strip() in quoted:
                    return op
    return None


def lower_block(ctx: CodegenContext, block: Block) -> Optional[Op]:
    """Lower every op of `block` except its terminator, which is returned."""
    for op in block.ops:
        if op.has_trait("terminator"):
            return op
        lower_op(ctx, op)
    return None


def lower_region(ctx: CodegenContext, block: Block, args: List[object]) -> Optional[Op]:
    """Bind `args` to the block's arguments, lower its ops, return its terminator."""
    for a, v in zip(block.args, args):
        ctx.set(a, v)
    return lower_block(ctx, block)


def flatten(vals: List[object]) -> List[ir.Value]:
    """Values (scalars or element lists) as one flat list, e.g. for phis."""
    out: List[ir.Value] = []
    for v in vals:
        if isinstance(v, list):
            out.extend(v)
        else:
            out.append(v)
    return out


def unflatten(flat: List[ir.Value], like: List[object]) -> List[object]:
    """Regroup `flat` into the structure of `like`."""
    out, i = [], 0
    for v in like:
        if isinstance(v, list):
            out.append(flat[i:i + len(v)])
            i += len(v)
        else:
            out.append(flat[i])
            i += 1
    return out


_TMAP = ir.ArrayType(ir.IntType(8), 128)  # a CUtensorMap, passed by value


def _param_type(s):
    if s.kind == "tmap":
        return _TMAP.as_pointer()
    return global_ptr() if s.kind == "ptr" else llvm_scalar(s.dtype)


def _kernel_function(module: ir.Module, name: str, arg_types, tmaps=(), grid: bool = False) -> tuple:
    slots = param_slots(arg_types, tmaps, grid)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_param_type(s) for s in slots]), name)
    fn.calling_convention = "ptx_kernel"
    for k, (a, s) in enumerate(zip(fn.args, slots)):
        a.name = s.name
        if s.kind == "tmap":  # .param .align 64 .b8 [128], read in place (grid constant: see _annotate)
            a.add_attribute("byval")
            a.attributes.align = 64
    return fn, slots


def _bind_params(ctx: CodegenContext, entry: Block, slots) -> None:
    # a grid slot's `arg` is the entry-block argument make_persistent added for it, so it
    # binds like a scalar argument below
    by_arg: Dict[int, list] = {}
    for a, s in zip(ctx.func.args, slots):
        by_arg.setdefault(s.arg, []).append((s, a))
    for i, barg in enumerate(entry.args):
        t = barg.type
        got = by_arg[i]
        if isinstance(t, ViewType):
            ptr = got[0][1]
            shape = [a for s, a in got if s.kind == "shape"]
            dyn = {s.dim: a for s, a in got if s.kind == "stride"}
            strides = [dyn[d] if st is None else ctx.const(t.index, st) for d, st in enumerate(t.strides)]
            ctx.set(barg, ViewValue(ptr, shape, strides))
        else:
            ctx.set(barg, got[0][1])
    ctx.memo["tmap"] = {(s.arg, s.box): a for a, s in zip(ctx.func.args, slots) if s.kind == "tmap"}


def _annotate(module: ir.Module, fn: ir.Function, threads: int, slots=(), setmaxnreg: bool = False,
              cluster: int = 1, min_programs: int = 0) -> None:
    # Launch bound: lets ptxas budget registers for exactly this many threads.
    ann = module.add_named_metadata("nvvm.annotations")
    ann.add(module.add_metadata([fn, "maxntidx", ir.Constant(ir.IntType(32), threads)]))
    if cluster > 1:  # .reqnctapercluster: a plain launch then runs clusters of this shape
        for axis, n in zip("xyz", (cluster, 1, 1)):
            ann.add(module.add_metadata([fn, f"cluster_dim_{axis}", ir.Constant(ir.IntType(32), n)]))
    # .minnctapersm: ptxas honours setmaxnreg only with a minimum of one CTA per SM declared;
    # min_programs_per_sm asks ptxas to fit that many (it then budgets registers for them)
    min_ctas = max(min_programs, 1 if setmaxnreg else 0)
    if min_ctas:
        ann.add(module.add_metadata([fn, "minctasm", ir.Constant(ir.IntType(32), min_ctas)]))
    # Tensor maps are read where the driver put them: without grid_constant LLVM copies a
    # byval parameter to local memory, and TMA would read the copy's (wrong) address.
    tmaps = [ir.Constant(ir.IntType(32), k + 1) for k, s in enumerate(slots) if s.kind == "tmap"]
    if tmaps:
        ann.add(module.add_metadata([fn, "grid_constant", module.add_metadata(tmaps)]))


def generate(module: Module, triple: str = "nvptx64-nvidia-cuda", data_layout: str = "",
             narrow_invariants: bool = False) -> ir.Module:
    """Lower a gpu-IR module holding one kernel to an llvmlite module. Everything besides the
    IR comes from the module's attributes, which `pipeline.stamp` wrote (target, num_warps,
    num_threads, cluster, min_programs_per_sm, fast_math, debug, lineinfo: line tables
    unless it is False). `narrow_invariants`:
    16-bit floats a loop widens but does not define stay 16-bit through the loop
    (rules_arith._invariant_widening; compiler._assemble tries it under a floor that spills)."""
    from . import rules  # noqa: F401  (registers every rule)

    func = module.func()
    name = func.attrs["sym_name"]
    attrs = module.attrs
    if "target" not in attrs:
        raise CompilationError("the module has no target: codegen takes the pipeline's output "
                               "(run_pipeline stamps it)", kernel=name, stage="codegen")
    num_warps = int(attrs["num_warps"])
    llmod = ir.Module(name=name)
    llmod.triple = triple
    if data_layout:
        llmod.data_layout = data_layout
    entry = func.regions[0].block
    arg_types = [a.type for a in entry.args]
    persistent = bool(module.attrs.get("persistent"))
    if persistent:  # make_persistent appended the requested grid's extents: they are grid slots
        arg_types = arg_types[:-3]
    try:
        fn, slots = _kernel_function(llmod, name, arg_types, tma_params(module), persistent)
    except TypeError as e:
        raise CompilationError(str(e), loc=func.loc, kernel=name, stage="codegen") from e
    ctx = CodegenContext(llmod, fn, name, Target.from_arch(attrs["target"]), num_warps,
                         cluster=int(attrs["cluster"]), fast_math=bool(attrs["fast_math"]))
    ctx.narrow_invariants = narrow_invariants
    ctx.initcheck = bool(attrs.get("initcheck"))
    if attrs.get("lineinfo", True) or attrs["debug"]:  # pipeline.stamp writes lineinfo=False only when off
        ctx.lines = LineTables(llmod, fn, func)
    _bind_params(ctx, entry, slots)
    term = lower_block(ctx, entry)
    if term is not None and term.operands:
        raise CompilationError("a kernel cannot return values", loc=term.loc, kernel=name, stage="codegen")
    ctx.builder.ret_void()
    threads = int(attrs["num_threads"])  # warp_specialize adds a producer
    _annotate(llmod, fn, threads, slots, setmaxnreg=threads != 32 * num_warps,
              cluster=int(attrs["cluster"]), min_programs=int(attrs["min_programs_per_sm"]))
    return llmod
