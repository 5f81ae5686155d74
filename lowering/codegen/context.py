"""State of one kernel's lowering: the llvmlite builder, SSA value map, thread ids.

Value representation (the contract every rule follows):
- a scalar IR value is one llvmlite value;
- a distributed tile is a Python list of llvmlite values, one per register
  element of the calling thread, in the order of its layout's `coords`;
- a tensor view is a `ViewValue` (base pointer, extents, strides).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from llvmlite import ir

from ...dtypes import DType
from ...ir.core import Value
from ...ir.types import ScalarType, TileType, Type
from ...target import Target
from .indexing import IndexOps, as_i32
from .types import I32, const, llvm_type

__all__ = ["CodegenContext", "OpTaggingBuilder", "ViewValue"]


class OpTaggingBuilder(ir.IRBuilder):
    """An IRBuilder that tags each instruction with the op being lowered (`op`, set by the
    walker), so that a module LLVM rejects can be traced to the op and its source line."""
    op = None

    def _insert(self, instr):
        instr.tilec_op = self.op
        super()._insert(instr)


@dataclass
class ViewValue:
    ptr: ir.Value
    shape: List[ir.Value]
    strides: List[ir.Value]


class CodegenContext:
    def __init__(self, module: ir.Module, func: ir.Function, kernel_name: str, target: Target,
                 num_warps: int, cluster: int = 1, fast_math: bool = False):
        self.module = module
        self.func = func
        self.kernel_name = kernel_name
        self.target = target        # rules test its features (has_dependent_launch, ...), never the arch
        self.num_warps = num_warps
        self.cluster = cluster
        self.fast_math = fast_math
        self.values: Dict[int, object] = {}
        self._coords_cache: Dict[Tuple[object, Tuple[int, ...]], list] = {}
        self._decl_cache: Dict[str, ir.Function] = {}
        self._strings: Dict[str, ir.GlobalVariable] = {}
        self.memo: Dict[str, dict] = {}  # per-kernel caches of rules (e.g. register maps)
        self.lines = None  # codegen/lineinfo.LineTables when line tables are on (options.lineinfo)
        self.narrow_invariants = False  # generate(narrow_invariants=): see rules_arith._invariant_widening
        self.initcheck = False  # options.initcheck: loads stop at their view's end (codegen/bounded.py)
        # Inside gpu.warp_specialize: the thread that issues single-thread ops (TMA, expect),
        # and the (named barrier, thread count) a block barrier becomes (None: every thread).
        self.leader_tid = 0
        self.named_barrier = None
        # The prologue block computes thread ids and layout coordinates once, so that
        # every later block is dominated by them; it branches to `body` at the end.
        self.prologue = func.append_basic_block("prologue")
        body = func.append_basic_block("entry")
        self.builder = OpTaggingBuilder(self.prologue)
        self.tid = self.special_reg("tid.x")
        self.lane = self.builder.and_(self.tid, ir.Constant(I32, 31), name="lane")
        self.warp = self.builder.lshr(self.tid, ir.Constant(I32, 5), name="warp")
        self._prologue_br = self.builder.branch(body)
        self.builder.position_at_end(body)
        self.ops = IndexOps(self.builder)

    def warp_uniform(self) -> ir.Value:
        """The warp index read back from lane 0 (shfl.sync.idx), here: ptxas then knows it is
        the same across the warp, so what is derived from it (wgmma descriptors) stays in
        uniform registers rather than being moved there (R2UR) before every use. Emitted at
        each use, not once in the prologue: held across the loops, it made the dK/dV kernels
        at head dim 128 spill (4-68 bytes)."""
        args = [ir.Constant(I32, -1), self.warp, ir.Constant(I32, 0), ir.Constant(I32, 31)]
        return self.intrinsic("llvm.nvvm.shfl.sync.idx.i32", I32, args, "warp_uniform")

    # values ---------------------------------------------------------------------
    def get(self, v: Value):
        try:
            return self.values[id(v)]
        except KeyError:
            raise ValueError(f"value {v!r} is used before it is defined") from None

    def set(self, v: Value, x) -> None:
        if isinstance(v.type, TileType) and not isinstance(x, list):
            raise TypeError(f"a tile value must be a list of elements, got {x!r}")
        self.values[id(v)] = x

    def elems(self, v: Value) -> list:
        """The thread's elements of a tile, or a one-element list for a scalar."""
        x = self.get(v)
        return x if isinstance(x, list) else [x]

    def set_elems(self, v: Value, xs: list) -> None:
        """Store a result computed element by element (a scalar takes the only element)."""
        self.set(v, list(xs) if isinstance(v.type, TileType) else xs[0])

    # layouts --------------------------------------------------------------------
    @staticmethod
    def layout_of(t: Type):
        if not isinstance(t, TileType):
            return None
        if t.encoding is None:
            raise ValueError(f"tile type {t} has no layout (the layout passes must run before codegen)")
        return t.encoding

    def num_elems(self, t: Type) -> int:
        if not isinstance(t, TileType):
            return 1
        return int(self.layout_of(t).elems_per_thread(t.shape))

    def coords(self, t: TileType) -> List[Tuple[ir.Value, ...]]:
        """Per register element, the i32 coordinates it holds (computed in the prologue)."""
        layout = self.layout_of(t)
        key = (layout, t.shape)
        hit = self._coords_cache.get(key)
        if hit is None:
            with self.in_prologue():
                raw = layout.coords(t.shape, self.lane, self.warp, self.ops)
                hit = [tuple(as_i32(c) for c in cs) for cs in raw]
            self._coords_cache[key] = hit
        return hit

    def ownership(self, t: Type):
        """(Replication, i1 "this thread owns its elements" or None when every thread does)
        for a value of type `t` (a scalar is held by every thread); computed in the prologue."""
        from .replication import owner_flag, replication, scalar_replication
        if isinstance(t, TileType):
            layout = self.layout_of(t)
            key = ("owner", layout, t.shape)
            rep = replication(layout, tuple(t.shape))
        else:
            key = ("owner", None, self.num_warps)
            rep = scalar_replication(self.num_warps)
        if not rep.threads_replicated:
            return rep, None
        hit = self._coords_cache.get(key)
        if hit is None:
            with self.in_prologue():
                flag = as_i32(owner_flag(rep, self.lane, self.warp, self.ops))
                hit = self.builder.icmp_unsigned("==", flag, ir.Constant(I32, 0), name="owner")
            self._coords_cache[key] = hit
        return rep, hit

    # constants and types ----------------------------------------------------------
    def const(self, d: DType, value) -> ir.Constant:
        return const(d, value)

    def i32(self, v: int) -> ir.Constant:
        return ir.Constant(I32, v)

    @staticmethod
    def ltype(t: Type) -> ir.Type:
        return llvm_type(t)

    @staticmethod
    def dtype(t: Type) -> Optional[DType]:
        e = t.element if isinstance(t, TileType) else t
        return e.dtype if isinstance(e, ScalarType) else None

    # declarations -----------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: Sequence[ir.Type], varargs=False) -> ir.Function:
        fn = self._decl_cache.get(name)
        if fn is None:
            fn = self.module.globals.get(name)
            if fn is None:
                fn = ir.Function(self.module, ir.FunctionType(ret, list(args), var_arg=varargs), name)
            self._decl_cache[name] = fn
        return fn

    def intrinsic(self, name: str, ret: ir.Type, args: Sequence[ir.Value], name_hint: str = ""):
        """Call an LLVM/NVVM intrinsic, declaring it on first use."""
        fn = self.declare(name, ret, [a.type for a in args])
        return self.builder.call(fn, list(args), name=name_hint)

    def special_reg(self, reg: str) -> ir.Value:
        """An NVVM special register, e.g. "tid.x", "ctaid.y", "nctaid.z"."""
        return self.intrinsic(f"llvm.nvvm.read.ptx.sreg.{reg}", I32, [])

    def inline_asm(self, ret: ir.Type, asm: str, constraints: str, args: Sequence[ir.Value],
                   side_effect: bool = True, name: str = ""):
        fty = ir.FunctionType(ret, [a.type for a in args])
        return self.builder.asm(fty, asm, constraints, list(args), side_effect, name=name)

    def global_string(self, text: str) -> ir.Value:
        """A NUL-terminated constant string in global memory; returns a generic pointer."""
        g = self._strings.get(text)
        if g is None:
            data = bytearray(text.encode("utf8")) + b"\0"
            ty = ir.ArrayType(ir.IntType(8), len(data))
            g = ir.GlobalVariable(self.module, ty, name=f"__tilec_str{len(self._strings)}", addrspace=1)
            g.global_constant = True
            g.linkage = "internal"
            g.initializer = ir.Constant(ty, data)
            self._strings[text] = g
        return self.builder.addrspacecast(g, ir.PointerType())

    def shared_base(self) -> ir.Value:
        """The dynamic shared memory of the kernel, `ptr addrspace(3)`."""
        g = self.module.globals.get("__tilec_smem")
        if g is None:
            ty = ir.ArrayType(ir.IntType(8), 0)
            g = ir.GlobalVariable(self.module, ty, name="__tilec_smem", addrspace=3)
            g.linkage = "external"
            g.align = 1024
        return g

    def kernel_variable(self, ty: ir.Type, init: ir.Constant) -> ir.Value:
        """A variable of the kernel set to `init` once, in the prologue (an alloca that LLVM
        keeps in registers): state an op carries from one execution to the next."""
        with self.in_prologue():
            var = self.builder.alloca(ty)
            self.builder.store(init, var)
        return var

    @contextmanager
    def in_prologue(self, before: Optional[ir.Instruction] = None):
        """Emit at the end of the prologue (before `before`, an instruction there, if given),
        then go back to the end of the current block."""
        here = self.builder.block
        self.builder.position_before(before if before is not None else self._prologue_br)
        try:
            yield self.builder
        finally:
            self.builder.position_at_end(here)

    def new_block(self, name: str) -> ir.Block:
        return self.func.append_basic_block(name)
