"""The IR core: values, operations, blocks, regions, modules.

An op is a small declarative class:

    @register_op
    class AddOp(Op):
        name = "tile.add"
        operands = ("lhs", "rhs")          # "*" suffix: variadic, "?": optional
        attributes = {}                     # name -> AttrSpec
        traits = {"pure", "elementwise", "commutative"}
        def infer_types(self):              # the type rule
            return [self.operands[0].type]
        def verify_op(self): ...            # extra checks; raise VerifyError

Every op is printed and parsed through one generic syntax (printer.py,
grammar.lark), so adding an op needs no printer or parser code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

from .types import Type

__all__ = [
    "Location", "Value", "OpResult", "BlockArgument", "Op", "Block", "Region", "Module",
    "AttrSpec", "VerifyError", "register_op", "register_attr", "ATTR_REGISTRY", "normalize_attr", "OP_REGISTRY", "lookup_op", "ir_equal",
    "Builder", "UNKNOWN_LOC", "defined_inside",
]


class VerifyError(Exception):
    """Ill-formed IR. The message names the op and its source location."""


@dataclass(frozen=True)
class Location:
    file: str = "<unknown>"
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    @property
    def known(self) -> bool:
        return self.line > 0


UNKNOWN_LOC = Location()


class Value:
    """An SSA value: an op result or a block argument."""

    __slots__ = ("type", "name_hint", "uses")

    def __init__(self, type: Type, name_hint: Optional[str] = None):
        self.type = type
        self.name_hint = name_hint
        self.uses: List[Tuple["Op", int]] = []

    def replace_all_uses_with(self, new: "Value") -> None:
        for op, idx in list(self.uses):
            op.set_operand(idx, new)

    @property
    def owner(self):
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name_hint or ''}: {self.type}>"


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: "Op", index: int):
        super().__init__(type)
        self.op, self.index = op, index

    @property
    def owner(self):
        return self.op


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: "Block", index: int, name_hint=None):
        super().__init__(type, name_hint)
        self.block, self.index = block, index

    @property
    def owner(self):
        return self.block


@dataclass(frozen=True)
class AttrSpec:
    """What an attribute holds: kind is one of int, float, bool, str, ints, dtype, type, any."""
    kind: str
    optional: bool = False
    default: Any = None


OP_REGISTRY: Dict[str, type] = {}

# Dialect attributes (layouts, ...): classes with `attr_name`, `fields()` -> dict and
# `from_fields(dict)`; written `#name{k = v, ...}` in the textual IR.
ATTR_REGISTRY: Dict[str, type] = {}


def register_attr(cls):
    ATTR_REGISTRY[cls.attr_name] = cls
    return cls


def normalize_attr(v):
    """Attributes hold lists, never tuples, so that printed-and-parsed IR compares equal."""
    if isinstance(v, tuple):
        return [normalize_attr(x) for x in v]
    if isinstance(v, list):
        return [normalize_attr(x) for x in v]
    return v


def register_op(cls):
    if cls.name in OP_REGISTRY and OP_REGISTRY[cls.name] is not cls:
        raise ValueError(f"op {cls.name} registered twice")
    OP_REGISTRY[cls.name] = cls
    return cls


# Dialects defined above tilec.ir register their ops and attributes when their module is
# imported (the gpu dialect: tilec.lowering.gpu); the IR core never imports them itself.
DIALECT_HOMES = {"gpu": "tilec.lowering.gpu"}


def unregistered_hint(dialect: str) -> str:
    """What to import for a dialect whose ops are not registered ('' when none is known)."""
    home = DIALECT_HOMES.get(dialect)
    return f" (the {dialect} dialect is registered by importing {home})" if home else ""


def lookup_op(name: str):
    try:
        return OP_REGISTRY[name]
    except KeyError:
        raise VerifyError(f"unknown op '{name}'{unregistered_hint(name.split('.', 1)[0])}") from None


class Op:
    """Base class of every operation."""

    name: ClassVar[str] = "<abstract>"
    operands_spec: ClassVar[Tuple[str, ...]] = ()
    attributes: ClassVar[Dict[str, AttrSpec]] = {}
    num_results: ClassVar[Optional[int]] = 1  # None: variadic
    num_regions: ClassVar[int] = 0
    traits: ClassVar[frozenset] = frozenset()

    def __init__(self, operands: Sequence[Value] = (), result_types: Sequence[Type] = (),
                 attrs: Optional[Dict[str, Any]] = None, regions: Sequence["Region"] = (),
                 loc: Location = UNKNOWN_LOC):
        self.operands: List[Value] = []
        for v in operands:
            self._append_operand(v)
        self.results: List[OpResult] = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attrs: Dict[str, Any] = {k: normalize_attr(v) for k, v in (attrs or {}).items()}
        for k, spec in self.attributes.items():
            if k not in self.attrs and spec.optional and spec.default is not None:
                self.attrs[k] = spec.default
        self.regions: List[Region] = []
        for r in regions:
            self.add_region(r)
        self.loc = loc
        self.parent: Optional[Block] = None

    # construction --------------------------------------------------------------
    @classmethod
    def build(cls, *operands: Value, loc: Location = UNKNOWN_LOC, regions=(), result_types=None, **attrs):
        """Make the op, inferring result types from the type rule unless given."""
        op = cls(operands, (), attrs, regions, loc)
        types = result_types if result_types is not None else op.infer_types()
        if types is None:
            raise VerifyError(f"{cls.name} needs explicit result types")
        op.results = [OpResult(t, op, i) for i, t in enumerate(types)]
        return op

    def infer_types(self) -> Optional[List[Type]]:
        """The type rule: result types from operands and attributes (None: not inferable).
        Ops declared with `num_results = 0` have none."""
        return [] if self.num_results == 0 else None

    def verify_op(self) -> None:
        """Op-specific checks beyond the generic ones; raise `self.error(...)`."""

    # operands ------------------------------------------------------------------
    def _append_operand(self, v: Value) -> None:
        if not isinstance(v, Value):
            raise TypeError(f"{self.name}: operand {v!r} is not an IR value")
        v.uses.append((self, len(self.operands)))
        self.operands.append(v)

    def set_operand(self, idx: int, v: Value) -> None:
        old = self.operands[idx]
        old.uses.remove((self, idx))
        self.operands[idx] = v
        v.uses.append((self, idx))

    def drop_operands(self) -> None:
        for i, v in enumerate(self.operands):
            v.uses.remove((self, i))
        self.operands = []

    def add_region(self, r: "Region") -> "Region":
        r.parent = self
        self.regions.append(r)
        return r

    def group_sizes(self) -> List[int]:
        """Sizes of the operand groups of `operands_spec`."""
        spec = self.operands_spec
        n = len(self.operands)
        var = [i for i, s in enumerate(spec) if s.endswith(("*", "?"))]
        if not var:
            return [1] * len(spec)
        if len(var) == 1:
            sizes = [1] * len(spec)
            sizes[var[0]] = n - (len(spec) - 1)
            return sizes
        seg = self.attrs.get("operand_segments")
        if seg is None:
            raise VerifyError(f"{self.name} has several variable operand groups and needs operand_segments")
        return list(seg)

    def group(self, name: str) -> List[Value]:
        """The operands of the group called `name` (without its */? suffix)."""
        start = 0
        for s, size in zip(self.operands_spec, self.group_sizes()):
            if s.rstrip("*?") == name:
                return self.operands[start:start + size]
            start += size
        raise KeyError(f"{self.name} has no operand group {name!r}")

    def operand(self, name: str) -> Optional[Value]:
        g = self.group(name)
        return g[0] if g else None

    # results -------------------------------------------------------------------
    @property
    def result(self) -> OpResult:
        if len(self.results) != 1:
            raise VerifyError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    def has_trait(self, t: str) -> bool:
        return t in self.traits

    # structure -----------------------------------------------------------------
    def walk(self) -> Iterator["Op"]:
        """This op and every op nested in its regions, in pre-order."""
        yield self
        for r in self.regions:
            for b in r.blocks:
                for o in list(b.ops):
                    yield from o.walk()

    def erase(self) -> None:
        assert self.parent is not None
        for r in self.results:
            if r.uses:
                raise VerifyError(f"cannot erase {self.name}: its result is still used")
        for o in list(self.walk()):
            o.drop_operands()
        self.parent.ops.remove(self)
        self.parent = None

    def parent_op(self) -> Optional["Op"]:
        if self.parent is None or self.parent.parent is None:
            return None
        return self.parent.parent.parent

    def error(self, msg: str) -> VerifyError:
        where = f" at {self.loc}" if self.loc.known else ""
        err = VerifyError(f"'{self.name}'{where}: {msg}")
        err.loc = self.loc  # lets the pass pipeline point CompilationError at the source line
        return err

    def __repr__(self) -> str:
        from .printer import print_op
        return print_op(self)


class Block:
    def __init__(self, arg_types: Sequence[Type] = (), arg_names: Sequence[Optional[str]] = ()):
        names = list(arg_names) + [None] * (len(arg_types) - len(arg_names))
        self.args: List[BlockArgument] = [BlockArgument(t, self, i, n) for i, (t, n) in enumerate(zip(arg_types, names))]
        self.ops: List[Op] = []
        self.parent: Optional[Region] = None

    def add_arg(self, t: Type, name: Optional[str] = None) -> BlockArgument:
        a = BlockArgument(t, self, len(self.args), name)
        self.args.append(a)
        return a

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    def insert(self, idx: int, op: Op) -> Op:
        op.parent = self
        self.ops.insert(idx, op)
        return op

    @property
    def terminator(self) -> Optional[Op]:
        return self.ops[-1] if self.ops and self.ops[-1].has_trait("terminator") else None


class Region:
    def __init__(self, blocks: Sequence[Block] = ()):
        self.blocks: List[Block] = []
        self.parent: Optional[Op] = None
        for b in blocks:
            self.add_block(b)

    def add_block(self, b: Block) -> Block:
        b.parent = self
        self.blocks.append(b)
        return b

    @property
    def block(self) -> Block:
        return self.blocks[0]


class Module:
    """A list of top-level ops (functions), plus module attributes."""

    def __init__(self, ops: Sequence[Op] = (), attrs: Optional[Dict[str, Any]] = None):
        self.body = Block()
        self.attrs = dict(attrs or {})
        for o in ops:
            self.body.append(o)

    @property
    def ops(self) -> List[Op]:
        return self.body.ops

    def walk(self) -> Iterator[Op]:
        for o in list(self.body.ops):
            yield from o.walk()

    def func(self, name: Optional[str] = None) -> Op:
        funcs = [o for o in self.ops if o.name.endswith(".func")]
        if name is None:
            if len(funcs) != 1:
                raise KeyError("module holds several functions: name one")
            return funcs[0]
        for f in funcs:
            if f.attrs.get("sym_name") == name:
                return f
        raise KeyError(name)

    def __str__(self) -> str:
        from .printer import print_module
        return print_module(self)

    def __eq__(self, other) -> bool:
        return isinstance(other, Module) and ir_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


def defined_inside(v: Value, op: Op) -> bool:
    """Whether `v` is defined within `op`'s regions (by an op nested in them, or as an
    argument of one of their blocks)."""
    owner = v.owner
    blk = owner.parent if isinstance(owner, Op) else owner
    while blk is not None:
        parent_op = blk.parent.parent if blk.parent is not None else None
        if parent_op is op:
            return True
        if parent_op is None:
            return False
        blk = parent_op.parent
    return False


def _same_attr(a, b) -> bool:
    """Attribute equality where NaN equals NaN (a NaN constant must survive a round trip)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_attr(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_attr(x, y) for x, y in zip(a, b))
    return a == b


def ir_equal(a: Module, b: Module, compare_locs: bool = True) -> bool:
    """Structural equality: same ops, attributes, types, locations and use-def graph."""
    if a.attrs != b.attrs:
        return False
    vmap: Dict[int, Value] = {}

    def same_block(x: Block, y: Block) -> bool:
        if len(x.args) != len(y.args) or len(x.ops) != len(y.ops):
            return False
        for p, q in zip(x.args, y.args):
            if p.type != q.type:
                return False
            vmap[id(p)] = q
        return all(same_op(o, p) for o, p in zip(x.ops, y.ops))

    def same_op(x: Op, y: Op) -> bool:
        if x.name != y.name or not _same_attr(x.attrs, y.attrs) or len(x.operands) != len(y.operands):
            return False
        if compare_locs and x.loc != y.loc:
            return False
        for p, q in zip(x.operands, y.operands):
            if vmap.get(id(p)) is not q:
                return False
        if [r.type for r in x.results] != [r.type for r in y.results]:
            return False
        for p, q in zip(x.results, y.results):
            vmap[id(p)] = q
        if len(x.regions) != len(y.regions):
            return False
        for r, s in zip(x.regions, y.regions):
            if len(r.blocks) != len(s.blocks):
                return False
            if not all(same_block(p, q) for p, q in zip(r.blocks, s.blocks)):
                return False
        return True

    return same_block(a.body, b.body)


class Builder:
    """Creates ops at an insertion point (the end of a block, or before an index)."""

    def __init__(self, block: Optional[Block] = None, index: Optional[int] = None):
        self.block = block
        self.index = index
        self.loc: Location = UNKNOWN_LOC

    def at_end(self, block: Block) -> "Builder":
        self.block, self.index = block, None
        return self

    def before(self, op: Op) -> "Builder":
        self.block = op.parent
        self.index = op.parent.ops.index(op)
        return self

    def insert(self, op: Op) -> Op:
        if self.block is None:
            raise RuntimeError("builder has no insertion point")
        if self.index is None:
            self.block.append(op)
        else:
            self.block.insert(self.index, op)
            self.index += 1
        return op

    def create(self, cls, *operands: Value, loc: Optional[Location] = None, **kw) -> Op:
        return self.insert(cls.build(*operands, loc=loc or self.loc, **kw))

    def value(self, cls, *operands: Value, **kw) -> Value:
        """Create a single-result op and return its result."""
        return self.create(cls, *operands, **kw).result
