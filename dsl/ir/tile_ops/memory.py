"""Tensor views, pointers, loads, stores and atomics."""
from __future__ import annotations

from ... import dtypes as dt
from ..core import Op, register_op
from ..types import PointerType, ScalarType, TileType, Type, ViewType, element_type, shape_of, tile, with_element
from .common import EW, PURE, A, _check_shape, _dtype


# ----------------------------------------------------------------------------- views and pointers
@register_op
class ViewDimOp(Op):
    """`x.shape[dim]` or `x.stride(dim)` of a tensor view, in the view's index type."""
    name = "tile.view_dim"
    operands_spec = ("view",)
    attributes = {"dim": A("int"), "kind": A("str")}
    traits = PURE

    def infer_types(self):
        return [ScalarType(self.operands[0].type.index)]

    def verify_op(self):
        v = self.operands[0].type
        if not isinstance(v, ViewType) or not 0 <= self.attrs["dim"] < v.rank:
            raise self.error(f"dim {self.attrs['dim']} out of range for {v}")
        if self.attrs["kind"] not in ("shape", "stride"):
            raise self.error("kind must be shape or stride")


@register_op
class ViewPtrOp(Op):
    """`x.ptr`: the base pointer of a view."""
    name = "tile.view_ptr"
    operands_spec = ("view",)
    traits = PURE

    def infer_types(self):
        return [PointerType(self.operands[0].type.dtype)]


class _ViewAccess(Op):
    """Common checks of tile.load_view / tile.store_view.

    mode "index": the tile starts at element `indices[d] * shape[d]`;
    mode "offset": at element `indices[d]`.
    `squeeze` (canonicalize's view_squeeze): dimensions of the box, each of extent 1, that
    the tile does not have: a (1, BM, D) box of a rank-3 view moves a (BM, D) tile, as
    reshape(load_view) would, but lowers to a rank-2 access (its vectors, its cp.async
    and TMA eligibility) with the unit index folded into the base pointer.
    `order` (load only; canonicalize's load_view_permute): the tile is the (squeezed) box
    permuted as tile.permute would, so `tc.load(k, ...).T` is one load whose pointers
    already run in the transposed order (a K-major dot operand with 16-byte accesses).
    """

    def box_shape(self):
        """The box the access covers, one extent per view dimension (squeezed ones 1)."""
        if isinstance(self, (StoreViewOp, AtomicRMWViewOp)):
            shape = list(self.operands[-1].type.shape)
            for d in sorted(self.attrs.get("squeeze") or []):
                shape.insert(d, 1)
            return shape
        return list(self.attrs["shape"])

    def _check_squeeze(self, shape):
        sq = self.attrs.get("squeeze") or []
        if sorted(set(sq)) != list(sq) or any(not 0 <= d < len(shape) or shape[d] != 1 for d in sq):
            raise self.error(f"squeeze must list distinct dimensions of extent 1 in increasing order, "
                             f"got {list(sq)} for a box of {list(shape)}")

    def _check_indices(self, shape):
        v = self.operands[0].type
        idx = self.group("indices")
        if not isinstance(v, ViewType):
            raise self.error(f"first operand must be a tensor view, got {v}")
        if len(idx) != v.rank or len(shape) != v.rank:
            raise self.error(f"a rank-{v.rank} view needs {v.rank} indices and a rank-{v.rank} shape")
        for i in idx:
            if not isinstance(i.type, ScalarType) or not i.type.dtype.is_int:
                raise self.error(f"indices must be integer scalars, got {i.type}")
        if self.attrs["mode"] not in ("index", "offset"):
            raise self.error("mode must be index or offset")
        _check_shape(self, shape)


@register_op
class LoadViewOp(_ViewAccess):
    name = "tile.load_view"
    operands_spec = ("view", "indices*")
    # multicast: a promise that every program of the launch's cluster loads this same tile
    # here (sm_90a: TMA fetches it from L2 once for the cluster; elsewhere an ordinary load)
    # evict: the L2 eviction priority of the lines read, "first" or "last" (EVICT_POLICIES;
    # absent: the default)
    attributes = {"shape": A("ints"), "padding": A("any", True, 0), "mode": A("str", True, "index"),
                  "multicast": A("bool", True), "evict": A("str", True), "squeeze": A("ints", True),
                  "order": A("ints", True)}
    traits = frozenset({"reads"})

    def tile_shape(self):
        """The box's extents without the squeezed dimensions, in `order` (checked first: the
        type rule reads them)."""
        shape = list(self.attrs["shape"])
        self._check_squeeze(shape)
        sq = self.attrs.get("squeeze") or []
        kept = [n for d, n in enumerate(shape) if d not in sq]
        order = self.attrs.get("order")
        if order is not None and sorted(order) != list(range(len(kept))):
            raise self.error(f"order must permute the tile's {len(kept)} dimensions, got {list(order)}")
        return [kept[i] for i in (order or range(len(kept)))]

    def infer_types(self):
        return [tile(self.tile_shape(), self.operands[0].type.dtype)]

    def verify_op(self):
        self._check_indices(self.attrs["shape"])
        self.tile_shape()
        _check_evict(self)


@register_op
class StoreViewOp(_ViewAccess):
    name = "tile.store_view"
    operands_spec = ("view", "indices*", "value")
    attributes = {"mode": A("str", True, "index"), "squeeze": A("ints", True)}
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        val = self.operands[-1].type
        if not isinstance(val, TileType):
            raise self.error(f"stored value must be a tile, got {val}")
        if val.dtype is not self.operands[0].type.dtype:
            raise self.error(f"stored tile is {val.dtype}, the view holds {self.operands[0].type.dtype}")
        sq = self.attrs.get("squeeze") or []
        if any(not 0 <= d <= val.rank + i for i, d in enumerate(sorted(sq))):
            raise self.error(f"squeeze {list(sq)} does not fit a rank-{self.operands[0].type.rank} view")
        box = self.box_shape()
        self._check_indices(box)
        self._check_squeeze(box)


@register_op
class AtomicRMWViewOp(_ViewAccess):
    """tile.atomic_rmw on the tile of a view at `indices` (tc.atomic_add(view, t, index=...)):
    the in-bounds elements are updated and their old values returned (0 elsewhere), as the
    pointer form with the view's bounds as its mask, which lower_views makes of it. Kept as a
    view access until then so that passes see the tile's place (a TMA reduction qualifies)."""
    name = "tile.atomic_rmw_view"
    operands_spec = ("view", "indices*", "value")
    attributes = {"kind": A("str"), "sem": A("str", True, "acq_rel"), "scope": A("str", True, "gpu"),
                  "mode": A("str", True, "index"), "squeeze": A("ints", True)}
    traits = frozenset({"reads", "writes"})

    def infer_types(self):
        return [self.operands[-1].type]

    def verify_op(self):
        if self.attrs["kind"] not in ATOMIC_KINDS:
            raise self.error(f"kind must be one of {ATOMIC_KINDS}")
        val = self.operands[-1].type
        if not isinstance(val, TileType):
            raise self.error(f"the value must be a tile, got {val}")
        if val.dtype is not self.operands[0].type.dtype:
            raise self.error(f"the value is {val.dtype}, the view holds {self.operands[0].type.dtype}")
        box = self.box_shape()
        self._check_indices(box)
        self._check_squeeze(box)


@register_op
class AddPtrOp(Op):
    """Pointer (or pointer tile) plus an element offset of the same shape."""
    name = "tile.addptr"
    operands_spec = ("ptr", "offset")
    traits = EW

    def infer_types(self):
        return [self.operands[0].type]

    def verify_op(self):
        p, o = self.operands[0].type, self.operands[1].type
        if not isinstance(element_type(p), PointerType):
            raise self.error(f"first operand must be a pointer, got {p}")
        if shape_of(p) != shape_of(o) or not (_dtype(o) and _dtype(o).is_int):
            raise self.error(f"offset must be an integer of shape {list(shape_of(p))}, got {o}")


def _pointee(t: Type):
    e = element_type(t)
    return e.pointee if isinstance(e, PointerType) else None


EVICT_POLICIES = ("first", "last")


def _check_evict(op):
    if op.attrs.get("evict") not in (None,) + EVICT_POLICIES:
        raise op.error(f"evict must be one of {EVICT_POLICIES}, got {op.attrs['evict']!r}")


@register_op
class LoadOp(Op):
    name = "tile.load"
    operands_spec = ("ptr",)
    # evict: as on tile.load_view; realign: pointers contiguous along a dimension from an
    # address that may be off the vector boundary (tc.load(realign=True), codegen/realign.py)
    attributes = {"evict": A("str", True), "realign": A("bool", True)}
    traits = frozenset({"reads"})

    def infer_types(self):
        return [with_element(self.operands[0].type, ScalarType(_pointee(self.operands[0].type)))]

    def verify_op(self):
        _check_evict(self)


@register_op
class LoadMaskedOp(Op):
    """Load where `mask`; elsewhere the result is `other`."""
    name = "tile.load_masked"
    operands_spec = ("ptr", "mask", "other")
    attributes = {"evict": A("str", True), "realign": A("bool", True)}   # as on tile.load
    traits = frozenset({"reads"})

    def infer_types(self):
        return [with_element(self.operands[0].type, ScalarType(_pointee(self.operands[0].type)))]

    def verify_op(self):
        _check_evict(self)
        p, m, o = (v.type for v in self.operands)
        if shape_of(m) != shape_of(p) or _dtype(m) is not dt.bool_:
            raise self.error(f"mask must be i1 of shape {list(shape_of(p))}, got {m}")
        if o != self.results[0].type:
            raise self.error(f"other must be {self.results[0].type}, got {o}")


@register_op
class StoreOp(Op):
    name = "tile.store"
    operands_spec = ("ptr", "value")
    num_results = 0
    traits = frozenset({"writes"})

    def verify_op(self):
        p, v = self.operands[0].type, self.operands[1].type
        if shape_of(p) != shape_of(v) or _pointee(p) is not _dtype(v):
            raise self.error(f"cannot store {v} through {p}")


@register_op
class StoreMaskedOp(StoreOp):
    name = "tile.store_masked"
    operands_spec = ("ptr", "value", "mask")


ATOMIC_KINDS = ("add", "max", "min", "xchg", "and", "or", "xor")


@register_op
class AtomicRMWOp(Op):
    """Atomic read-modify-write where `mask`; returns the old values (`other` is 0 elsewhere)."""
    name = "tile.atomic_rmw"
    operands_spec = ("ptr", "value", "mask")
    attributes = {"kind": A("str"), "sem": A("str", True, "acq_rel"), "scope": A("str", True, "gpu")}
    traits = frozenset({"reads", "writes"})

    def infer_types(self):
        return [self.operands[1].type]

    def verify_op(self):
        if self.attrs["kind"] not in ATOMIC_KINDS:
            raise self.error(f"kind must be one of {ATOMIC_KINDS}")
        p, v = self.operands[0].type, self.operands[1].type
        if shape_of(p) != shape_of(v) or _pointee(p) is not _dtype(v):
            raise self.error(f"value {v} does not match pointer {p}")


@register_op
class AtomicCASOp(Op):
    """Compare-and-swap where `mask`: store `value` where the old value equals `cmp`."""
    name = "tile.atomic_cas"
    operands_spec = ("ptr", "cmp", "value", "mask")
    attributes = {"sem": A("str", True, "acq_rel"), "scope": A("str", True, "gpu")}
    traits = frozenset({"reads", "writes"})

    def infer_types(self):
        return [self.operands[2].type]
