"""The verifier: generic structural checks plus each op's own `verify_op`."""
from __future__ import annotations

from ..dtypes import DType
from .core import Block, Module, Op, VerifyError
from .types import TileType, Type

__all__ = ["verify"]

_KIND_CHECK = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "strs": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "ints": lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
    "dtype": lambda v: isinstance(v, DType),
    "type": lambda v: isinstance(v, Type),
    "any": lambda v: True,
}


def _matches_rule(actual: Type, inferred: Type) -> bool:
    """A type rule that cannot know a layout (encoding None) accepts any layout of that tile."""
    if actual == inferred:
        return True
    return (isinstance(actual, TileType) and isinstance(inferred, TileType) and inferred.encoding is None
            and actual.shape == inferred.shape and actual.element == inferred.element)


def _verify_generic(op: Op) -> None:
    spec = op.operands_spec
    fixed = sum(1 for s in spec if not s.endswith(("*", "?")))
    n = len(op.operands)
    if not any(s.endswith(("*", "?")) for s in spec):
        if n != fixed:
            raise op.error(f"expects {fixed} operands, got {n}")
    else:
        if n < fixed:
            raise op.error(f"expects at least {fixed} operands, got {n}")
        sizes = op.group_sizes()
        if sum(sizes) != n or any(s.endswith("?") and k > 1 for s, k in zip(spec, sizes)):
            raise op.error("operand groups do not add up")
    for k, a in op.attributes.items():
        if k not in op.attrs:
            if not a.optional:
                raise op.error(f"missing attribute '{k}'")
            continue
        if not _KIND_CHECK[a.kind](op.attrs[k]):
            raise op.error(f"attribute '{k}' must be of kind {a.kind}, got {op.attrs[k]!r}")
    for k in op.attrs:
        if k not in op.attributes and k != "operand_segments" and not k.startswith("_"):
            raise op.error(f"unknown attribute '{k}'")
    if op.num_results is not None and len(op.results) != op.num_results:
        raise op.error(f"expects {op.num_results} results, got {len(op.results)}")
    if len(op.regions) != op.num_regions:
        raise op.error(f"expects {op.num_regions} regions, got {len(op.regions)}")
    for r in op.regions:
        if len(r.blocks) != 1:
            raise op.error("regions hold exactly one block")
        t = r.block.terminator
        if t is None:
            raise op.error("region does not end in a terminator")
    if op.has_trait("terminator") and op.parent is not None and op.parent.ops[-1] is not op:
        raise op.error("terminator is not the last op of its block")
    inferred = op.infer_types()
    if inferred is not None and not all(map(_matches_rule, [r.type for r in op.results], list(inferred))) \
            or inferred is not None and len(inferred) != len(op.results):
        got = ", ".join(str(r.type) for r in op.results)
        want = ", ".join(str(t) for t in inferred)
        raise op.error(f"result types ({got}) do not match the type rule ({want})")


def _verify_block(b: Block, visible: set) -> None:
    scope = set(visible)
    scope.update(id(a) for a in b.args)
    for op in b.ops:
        for v in op.operands:
            if id(v) not in scope:
                raise op.error(f"operand {v!r} does not dominate this use")
        try:
            _verify_generic(op)
            op.verify_op()
        except VerifyError:
            raise
        except Exception as e:  # a malformed op can make a type rule itself fail
            raise op.error(f"malformed op ({type(e).__name__}: {e})") from None
        for r in op.regions:
            for blk in r.blocks:
                _verify_block(blk, scope)
        scope.update(id(r) for r in op.results)


def verify(m: Module) -> Module:
    """Check the whole module; raise VerifyError naming the op and its location."""
    _verify_block(m.body, set())
    return m
