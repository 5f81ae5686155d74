"""Parse the textual IR back into a Module with the lark grammar in grammar.lark."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError, VisitError

from ..dtypes import DType
from .core import ATTR_REGISTRY, DIALECT_HOMES, Block, Location, Module, Region, UNKNOWN_LOC, VerifyError, lookup_op
from .types import PointerType, ScalarType, TileType, ViewType

__all__ = ["parse", "IRParseError"]


class IRParseError(ValueError):
    """Text that is not valid tilec IR; the message gives line and column."""


class _MarkResults:
    """Post-lexer: a run `%a, %b =` is the result list of the next op, so its VALUE tokens
    become RESULT tokens. This keeps the grammar LALR(1) without line sensitivity."""

    always_accept = ()

    def process(self, stream):
        pending = []  # VALUE, COMMA, VALUE, ... not yet known to be operands or results
        for tok in stream:
            if tok.type == "VALUE" and (not pending or pending[-1].type == "COMMA"):
                pending.append(tok)
                continue
            if tok.type == "COMMA" and pending and pending[-1].type == "VALUE":
                pending.append(tok)
                continue
            if tok.type == "EQUAL" and pending and pending[-1].type == "VALUE":
                # the values after the last non-comma break are this op's results
                start = len(pending) - 1
                while start >= 2 and pending[start - 1].type == "COMMA":
                    start -= 2
                yield from pending[:start]
                for t in pending[start:]:
                    yield Token.new_borrow_pos("RESULT", str(t), t) if t.type == "VALUE" else t
                pending = []
                yield tok
                continue
            yield from pending
            pending = []
            if tok.type == "VALUE":
                pending.append(tok)
            else:
                yield tok
        yield from pending


@lru_cache(maxsize=1)
def _parser() -> Lark:
    text = resources.files(__package__).joinpath("grammar.lark").read_text()
    return Lark(text, parser="lalr", lexer="basic", maybe_placeholders=True, propagate_positions=False,
                postlex=_MarkResults())


@v_args(inline=True)
class _Attrs(Transformer):
    """Turns attribute and type subtrees into Python values and Type objects."""

    def int_attr(self, t): return int(t)
    def float_attr(self, t): return float(t)
    def inf_attr(self): return float("inf")
    def neginf_attr(self): return float("-inf")
    def nan_attr(self): return float("nan")
    def true_attr(self): return True
    def false_attr(self): return False
    def none_attr(self): return None
    def str_attr(self, t): return json.loads(t)
    def list_attr(self, *xs): return [x for x in xs if x is not None] if xs != (None,) else []
    def type_attr(self, t): return t

    def attr_entry(self, name, value):
        return (str(name), value)

    def attr_dict(self, *entries):
        return dict(e for e in entries if e is not None)

    def dialect_attr(self, name, fields):
        cls = ATTR_REGISTRY.get(str(name))
        if cls is None:
            homes = ", ".join(sorted(set(DIALECT_HOMES.values())))
            raise IRParseError(f"unknown attribute #{name} (dialect attributes are registered by importing "
                               f"their dialect: {homes})")
        return cls.from_fields(fields)

    def scalar_type(self, t): return ScalarType(DType.get(str(t)))

    def ptr_type(self, t, space=None):
        return PointerType(DType.get(str(t)), int(space) if space is not None else 1)

    def tile_type(self, dims, elem, enc=None):
        shape = tuple(int(d) for d in str(dims).split("x") if d)
        return TileType(shape, elem, enc)

    def stride(self, t=None):
        return None if t is None else int(t)

    def view_divs(self, *ints):
        half = len(ints) // 2
        return ("divs", tuple(int(x) for x in ints[:half]), tuple(int(x) for x in ints[half:]))

    def view_type(self, dims, dtype, *rest):
        divs = ((), ())
        if rest and isinstance(rest[-1], tuple) and rest[-1][:1] == ("divs",):
            divs = rest[-1][1:]
            rest = rest[:-1]
        *strides, index, align = rest
        rank = int(str(dims).rstrip("x"))
        strides = list(strides)
        try:
            return ViewType(DType.get(str(dtype)), rank, tuple(strides), DType.get(str(index)), int(align), *divs)
        except ValueError as e:
            raise IRParseError(str(e)) from None


class _Builder:
    """Walks the parse tree, creating values, blocks and ops in order."""

    def __init__(self):
        self.values = {}
        self.attrs = _Attrs()
        self.locs = {}  # `#locN` -> Location, from the aliases above the module

    def loc_alias(self, tree) -> None:
        tok, f, line, col = tree.children
        if str(tok) in self.locs:
            raise IRParseError(f"line {tok.line}: location alias {tok} defined twice")
        self.locs[str(tok)] = Location(json.loads(f), int(line), int(col))

    def loc(self, tree) -> Location:
        if len(tree.children) == 1:  # loc(#locN)
            tok = tree.children[0]
            try:
                return self.locs[str(tok)]
            except KeyError:
                raise IRParseError(f"line {tok.line}: use of undefined location alias {tok}") from None
        f, line, col = tree.children
        return Location(json.loads(f), int(line), int(col))

    def value(self, tok: Token):
        try:
            return self.values[str(tok)]
        except KeyError:
            raise IRParseError(f"line {tok.line}: use of undefined value {tok}") from None

    def define(self, tok: Token, v):
        name = str(tok)
        if name in self.values:
            raise IRParseError(f"line {tok.line}: value {name} defined twice")
        self.values[name] = v
        v.name_hint = name[1:] if not name[1:].isdigit() else None

    def module(self, tree) -> Module:
        attrs, ops = {}, []
        for c in tree.children:
            if c.data == "attr_dict":
                attrs = self.attrs.transform(c)
            else:
                ops.append(c)
        m = Module(attrs=attrs)
        for o in ops:
            m.body.append(self.op(o))
        return m

    def op(self, tree):
        results = operands = attrs = regions = types = None
        loc = UNKNOWN_LOC
        name = None
        for c in tree.children:
            if isinstance(c, Token) and c.type == "OPNAME":
                name = c
            elif c is None:
                continue
            elif c.data == "result_list":
                results = c
            elif c.data == "value_list":
                operands = c
            elif c.data == "attr_dict":
                attrs = self.attrs.transform(c)
            elif c.data == "regions":
                regions = c
            elif c.data == "type_list":
                types = [self.attrs.transform(t) for t in c.children]
            elif c.data == "loc":
                loc = self.loc(c)
        try:
            cls = lookup_op(str(name))
        except VerifyError as e:
            raise IRParseError(f"line {name.line}: {e}") from None
        attrs = attrs or {}
        for k, spec in cls.attributes.items():
            if spec.kind == "dtype" and isinstance(attrs.get(k), ScalarType):
                attrs[k] = attrs[k].dtype
        ops = [self.value(t) for t in operands.children] if operands else []
        result_toks = results.children if results else []
        types = types or []
        if len(types) != len(result_toks):
            raise IRParseError(f"line {name.line}: {len(result_toks)} results but {len(types)} types")
        op = cls(ops, types, attrs, (), loc)
        if regions:
            for r in regions.children:
                op.add_region(self.region(r))
        for tok, res in zip(result_toks, op.results):
            self.define(tok, res)
        return op

    def region(self, tree) -> Region:
        reg = Region()
        for b in tree.children:
            reg.add_block(self.block(b))
        return reg

    def block(self, tree) -> Block:
        blk = Block()
        for c in tree.children[1:]:
            if c is None:
                continue
            if c.data == "block_arg":
                tok, ty = c.children
                self.define(tok, blk.add_arg(self.attrs.transform(ty)))
            else:
                blk.append(self.op(c))
        return blk


def parse(text: str) -> Module:
    """Parse IR text (as printed by `print_module`) into a Module."""
    try:
        tree = _parser().parse(text)
        builder = _Builder()
        for alias in tree.children[:-1]:
            builder.loc_alias(alias)
        return builder.module(tree.children[-1])
    except VisitError as e:  # an attribute class rejected its fields
        raise IRParseError(f"invalid IR: {e.orig_exc}") from None
    except LarkError as e:
        raise IRParseError(f"invalid IR: {e}") from None
