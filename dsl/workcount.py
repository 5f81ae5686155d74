"""Compiler-counted work: the bytes, tensor-core and CUDA-core FLOPs a kernel's programs do.

`count_work(module)` reads the tile IR the frontend produced (before any pass: what the
user wrote, each load once, so cp.async/TMA staging is never counted twice) and returns a
JSON-able description, symbolic in the launch's shapes and scalars (constexprs are
already constants there). `evaluate(work, env, grid)` turns it into totals over a grid.

Per op, a term:
- loads and stores of views: tile elements x dtype size, per view dimension clipped to
  the view's extent (the bounds mask): an index that is a function of program ids is
  evaluated per program, one that is a loop's induction variable (`range(0, n)` in index
  mode, `range(0, n, BLOCK)` in offset mode) sums the whole run of the loop; any other
  index counts min(tile, view extent) per access (an upper bound: `exact` is False).
- loads and stores through pointer tiles (`tc.load(ptrs, mask)`): tile elements x dtype
  size (masked: an upper bound); atomics read and write.
- `tc.dot`: 2*M*N*K, tensor-core FLOPs of the operand dtype (f16, bf16, tf32, f8, i8) or
  CUDA-core FLOPs (f32 without allow_tf32, f64).
- float elementwise ops, reductions and scans: one FLOP per element (fma two).
Loops multiply their bodies by their trip counts (evaluated per program: a trip count
may depend on program_id); a `while` loop, or a `for` whose bounds tilec cannot express,
counts its body once and says so in `notes`; both branches of an `if` are counted.

Expressions are nested lists: ["c", 3], ["arg", "n"], ["dim", "x", 0], ["stride", "x", 0],
["pid", axis], ["grid", axis], ["loop", id] and [op, a, b] for op in add, sub, mul,
floordiv, mod, min, max. Evaluation is vectorized over the program ids with numpy.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .ir import Module, ScalarType, TileType, ViewType, PointerType

__all__ = ["count_work", "evaluate", "WORK_VERSION", "Totals"]

WORK_VERSION = 1
_BINARY = {"tile.add": "add", "tile.sub": "sub", "tile.mul": "mul", "tile.floordiv": "floordiv",
           "tile.mod": "mod", "tile.minimum": "min", "tile.maximum": "max"}
# float ops that are not one FLOP per element: fma is a multiply and an add
_FLOPS_PER = {"tile.fma": 2}
_NOT_FLOPS = {"tile.cast", "tile.bitcast", "tile.select", "tile.splat", "tile.broadcast", "tile.expand_dims",
              "tile.reshape", "tile.permute", "tile.cat", "tile.constant"}
_TENSOR_DTYPES = {"f16": "f16", "bf16": "bf16", "f8e4m3": "f8", "f8e5m2": "f8", "i8": "i8"}


# ----------------------------------------------------------------------------- analysis
def count_work(module: Module) -> Dict[str, Any]:
    """The symbolic work of the module's kernel (see the module doc), JSON-able."""
    func = module.func()
    block = func.regions[0].block
    names = list(func.attrs.get("arg_names", [])) or [f"a{i}" for i in range(len(block.args))]
    c = _Counter()
    for arg, name in zip(block.args, names):
        if isinstance(arg.type, ViewType):
            c.views[arg] = name
        elif isinstance(arg.type, ScalarType) and arg.type.dtype.is_int:
            c.expr[arg] = ["arg", name]
    c.walk_block(block, [])
    return {"version": WORK_VERSION, "terms": c.terms, "loops": c.loops, "notes": c.notes}


class _Counter:
    def __init__(self):
        self.expr: Dict[Any, Any] = {}      # scalar Value -> expression (absent: unknown)
        self.views: Dict[Any, str] = {}     # view Value -> argument name
        self.loop_of: Dict[Any, int] = {}   # induction variable -> loop id
        self.terms: List[dict] = []
        self.loops: List[dict] = []
        self.notes: List[str] = []

    def walk_block(self, block, loops: List[int]) -> None:
        for op in block.ops:
            self.visit(op, loops)

    def visit(self, op, loops: List[int]) -> None:
        name = op.name
        if name == "tile.for":
            self.visit_for(op, loops)
            return
        if name == "tile.while":
            self.notes.append(f"{_where(op)}: a while loop's trip count is unknown: its body is counted once")
            for r in op.regions:
                self.walk_block(r.block, loops)
            return
        if name == "tile.if":
            before = len(self.terms)
            for r in op.regions:
                self.walk_block(r.block, loops)
            if len(self.terms) > before:
                self.notes.append(f"{_where(op)}: the work of both branches of an if is counted (an upper bound)")
            return
        self.scalar(op)
        if name in ("tile.load_view", "tile.store_view"):
            self.view_access(op, loops)
        elif name in ("tile.load", "tile.load_masked", "tile.store", "tile.store_masked",
                      "tile.atomic_rmw", "tile.atomic_cas"):
            self.pointer_access(op, loops)
        elif name == "tile.dot":
            self.dot(op, loops)
        else:
            self.flops(op, loops)

    # scalars: what loop bounds and tile indices are made of
    def scalar(self, op) -> None:
        if len(op.results) != 1 or not isinstance(op.results[0].type, ScalarType):
            return
        res, name = op.results[0], op.name
        if not res.type.dtype.is_int:
            return
        if name == "tile.constant":
            v = op.attrs.get("value")
            if isinstance(v, (int, bool, np.integer)):
                self.expr[res] = ["c", int(v)]
        elif name == "tile.view_dim" and op.operands[0] in self.views:
            self.expr[res] = [op.attrs["kind"], self.views[op.operands[0]], op.attrs["dim"]]
        elif name == "tile.program_id":
            self.expr[res] = ["pid", op.attrs["axis"]]
        elif name == "tile.num_programs":
            self.expr[res] = ["grid", op.attrs["axis"]]
        elif name in _BINARY:
            a, b = (self.expr.get(v) for v in op.operands)
            if a is not None and b is not None:
                self.expr[res] = [_BINARY[name], a, b]
        elif name == "tile.cast":
            a = self.expr.get(op.operands[0])
            if a is not None:
                self.expr[res] = a

    def visit_for(self, op, loops: List[int]) -> None:
        lb, ub, step = (self.expr.get(v) for v in op.operands[:3])
        lid = len(self.loops)
        known = lb is not None and ub is not None and step is not None
        trips = ["cdiv_pos", ["sub", ub, lb], step] if known else None
        if trips is not None and _mentions(trips, "loop"):
            trips = None   # a bound that moves with an outer loop: not expressed
        if trips is None:
            self.notes.append(f"{_where(op)}: a loop whose trip count tilec cannot express: its body is counted once")
        self.loops.append({"trips": trips, "lb": lb, "step": step, "where": _where(op)})
        iv = op.regions[0].block.args[0]
        self.loop_of[iv] = lid
        self.expr[iv] = ["loop", lid]
        self.walk_block(op.regions[0].block, loops + [lid])

    def view_access(self, op, loops) -> None:
        view = op.operands[0]
        name = self.views.get(view)
        store = op.name == "tile.store_view"
        vt = view.type
        box = op.box_shape()
        mode = op.attrs.get("mode", "index")
        axes = []
        for d, (idx, extent) in enumerate(zip(op.group("indices"), box)):
            axes.append({"T": int(extent), "idx": self.expr.get(idx), "loop": self.loop_of.get(idx)})
        self.terms.append({"kind": "store" if store else "load", "dtype": vt.dtype.name,
                           "size": vt.dtype.itemsize, "numel": int(np.prod(box)), "loops": list(loops),
                           "view": name, "mode": mode, "axes": axes, "where": _where(op)})

    def pointer_access(self, op, loops) -> None:
        t = op.operands[0].type
        elem = t.element if isinstance(t, TileType) else t
        if not isinstance(elem, PointerType):
            return
        numel = t.numel if isinstance(t, TileType) else 1
        kind = {"tile.load": "load", "tile.load_masked": "load", "tile.store": "store",
                "tile.store_masked": "store"}.get(op.name, "atomic")
        term = {"kind": kind, "dtype": elem.pointee.name, "size": elem.pointee.itemsize,
                "numel": numel, "loops": list(loops), "exact": op.name in ("tile.load", "tile.store"),
                "where": _where(op)}
        view = self.base_view(op.operands[0])
        if view is not None:
            term["base"] = view
        self.terms.append(term)

    def base_view(self, value, depth: int = 0):
        """The view whose `.ptr` a pointer tile is computed from (through addptr, splat and
        shape ops), or None."""
        op = getattr(value, "op", None)
        if op is None or depth > 32:
            return None
        if op.name == "tile.view_ptr":
            return self.views.get(op.operands[0])
        if op.name in ("tile.addptr", "tile.splat", "tile.broadcast", "tile.expand_dims", "tile.reshape",
                       "tile.permute"):
            return self.base_view(op.operands[0], depth + 1)
        return None

    def dot(self, op, loops) -> None:
        a, b, acc = (v.type for v in op.operands)
        m, k = a.shape
        n = b.shape[1]
        dtype = a.dtype.name
        if dtype in _TENSOR_DTYPES:
            kind, key = "tc", _TENSOR_DTYPES[dtype]
        elif dtype == "f32" and op.attrs.get("allow_tf32"):
            kind, key = "tc", "tf32"
        else:
            kind, key = "cuda", dtype
        self.terms.append({"kind": kind, "dtype": key, "size": 2, "numel": m * n * k, "loops": list(loops),
                           "where": _where(op)})

    def flops(self, op, loops) -> None:
        if op.name in _NOT_FLOPS or not op.operands or op.name.startswith("tile.view"):
            return
        x = op.operands[0].type
        if op.name in ("tile.reduce", "tile.scan", "tile.reduce_generic"):
            if not isinstance(x, TileType) or x.dtype is None or not x.dtype.is_float:
                return
            per = 1
            if op.name == "tile.reduce_generic":
                per = max(1, sum(1 for o in op.regions[0].block.ops if o.name not in ("tile.yield",)
                                 and o.results and _is_float(o.results[0].type)))
            self.terms.append({"kind": "cuda", "dtype": x.dtype.name, "size": per, "numel": x.numel,
                               "loops": list(loops), "where": _where(op)})
            return
        if not op.results or op.regions:
            return
        t = op.results[0].type
        float_op = _is_float(t) or (op.name == "tile.cmp" and _is_float(x))
        if not float_op:
            return
        dtype = (t if _is_float(t) else x)
        dname = (dtype.dtype.name if isinstance(dtype, (TileType, ScalarType)) else "f32")
        numel = t.numel if isinstance(t, TileType) else 1
        self.terms.append({"kind": "cuda", "dtype": dname, "size": _FLOPS_PER.get(op.name, 1), "numel": numel,
                           "loops": list(loops), "where": _where(op)})


def _is_float(t) -> bool:
    dtype = getattr(t, "dtype", None)
    return dtype is not None and dtype.is_float


def _where(op) -> str:
    loc = op.loc
    if loc is None or not loc.known:
        return "?"
    return f"{str(loc.file).rsplit('/', 1)[-1]}:{loc.line}"


def _mentions(expr, tag: str) -> bool:
    if not isinstance(expr, list):
        return False
    return expr[0] == tag or any(_mentions(e, tag) for e in expr[1:])


# ----------------------------------------------------------------------------- evaluation
class Totals(dict):
    """Evaluated totals over a grid: bytes_read, bytes_written (every tile access, clipped to
    the views), bytes_upper (every tile whole), unique_read, unique_written (each view's bytes
    once per direction at most: the DRAM traffic a perfect cache leaves), tc_flops (by dtype),
    cuda_flops, exact, notes."""


class _Unknown(Exception):
    pass


def _ev(expr, env: Dict[str, Any], pids: Sequence[np.ndarray], grid: Tuple[int, int, int]):
    """The value of `expr` (an int or a numpy array over the program ids); _Unknown when it
    names something the environment lacks (a loop variable, an unknown argument)."""
    if expr is None:
        raise _Unknown
    tag = expr[0]
    if tag == "c":
        return expr[1]
    if tag == "arg":
        if expr[1] not in env:
            raise _Unknown
        return int(env[expr[1]])
    if tag in ("shape", "stride"):
        key = (tag, expr[1], expr[2])
        if key not in env:
            raise _Unknown
        return int(env[key])
    if tag == "pid":
        return pids[expr[1]]
    if tag == "grid":
        return grid[expr[1]]
    if tag == "loop":
        raise _Unknown
    a, b = _ev(expr[1], env, pids, grid), _ev(expr[2], env, pids, grid)
    if tag == "add":
        return a + b
    if tag == "sub":
        return a - b
    if tag == "mul":
        return a * b
    if tag in ("floordiv", "mod", "cdiv_pos"):
        safe = np.where(np.asarray(b) == 0, 1, b)
        if tag == "floordiv":
            return np.where(np.asarray(b) == 0, 0, np.floor_divide(a, safe))
        if tag == "mod":
            return np.where(np.asarray(b) == 0, 0, np.mod(a, safe))
        # a loop's trip count: ceil(span / step), none for an empty range
        return np.maximum(0, np.where(np.asarray(b) == 0, 0, -np.floor_divide(-np.asarray(a), safe)))
    if tag == "min":
        return np.minimum(a, b)
    if tag == "max":
        return np.maximum(a, b)
    raise _Unknown


def _grid_sum(x, grid) -> int:
    """The sum over every program of `x` (an int or an array broadcast over program ids)."""
    x = np.asarray(x, dtype=np.int64)
    if x.ndim == 0:
        return int(x) * grid[0] * grid[1] * grid[2]
    scale = 1
    for a in range(3):
        if x.shape[a] == 1:
            scale *= grid[a]
    return int(x.sum()) * scale


def evaluate(work: Dict[str, Any], env: Dict[Any, Any], grid: Tuple[int, int, int]) -> Totals:
    """Totals of `work` over `grid` programs. `env`: scalar arguments by name, and
    ("shape", view, d) / ("stride", view, d) keys for the views' extents and strides."""
    gx, gy, gz = (int(g) for g in grid)
    grid = (gx, gy, gz)
    pids = [np.arange(gx, dtype=np.int64).reshape(gx, 1, 1), np.arange(gy, dtype=np.int64).reshape(1, gy, 1),
            np.arange(gz, dtype=np.int64).reshape(1, 1, gz)]
    notes = list(work.get("notes", []))
    exact = not notes
    trips = []
    for lp in work["loops"]:
        try:
            trips.append(_ev(lp["trips"], env, pids, grid))
        except _Unknown:
            trips.append(1)
            exact = False
    out = Totals(bytes_read=0, bytes_written=0, bytes_upper=0, tc_flops={}, cuda_flops=0, exact=exact, notes=notes,
                 unique_read=0, unique_written=0)
    per_view: Dict[Tuple[str, str], int] = {}   # (view, "r"/"w") -> counted bytes
    for t in work["terms"]:
        mult = 1
        for lid in t["loops"]:
            mult = mult * trips[lid]
        if t["kind"] in ("tc", "cuda"):
            n = _grid_sum(mult * (t["numel"] * t["size"]), grid)
            if t["kind"] == "tc":
                out["tc_flops"][t["dtype"]] = out["tc_flops"].get(t["dtype"], 0) + n
            else:
                out["cuda_flops"] += n
            continue
        upper = _grid_sum(mult * (t["numel"] * t["size"]), grid)
        if "axes" in t:
            n, ok = _view_bytes(t, env, pids, grid, work["loops"], trips)
        else:
            n, ok = upper, t.get("exact", False)
        out["exact"] = out["exact"] and ok
        view = t.get("view") or t.get("base")
        for rw, kinds in (("r", ("load", "atomic")), ("w", ("store", "atomic"))):
            if t["kind"] in kinds:
                out["bytes_read" if rw == "r" else "bytes_written"] += n
                per_view[(view, rw)] = per_view.get((view, rw), 0) + n
        out["bytes_upper"] += upper * (2 if t["kind"] == "atomic" else 1)
    # compulsory traffic: a view's bytes reach DRAM at most once per direction, however often
    # its tiles are read (the rest hits L2 or shared memory at best): the roofline's bytes
    for (view, rw), n in per_view.items():
        size = _view_bytes_total(view, env, work) if view is not None else None
        key = "unique_read" if rw == "r" else "unique_written"
        out[key] += n if size is None else min(n, size)
    return out


def _view_bytes_total(view: str, env, work) -> Optional[int]:
    """Bytes of the elements of view `view` (its extents' product), None when unknown."""
    size = None
    for t in work["terms"]:
        if t.get("view") == view or t.get("base") == view:
            size = t["size"]
            break
    n, d = 1, 0
    while ("shape", view, d) in env:
        n *= int(env[("shape", view, d)])
        d += 1
    return None if size is None or d == 0 else n * size


def _view_bytes(t, env, pids, grid, loops, trips) -> Tuple[int, bool]:
    """Bytes of one view access over the grid, clipped to the view's extent; whether exact."""
    consumed, exact = set(), True
    factor = t["size"]
    for d, ax in enumerate(t["axes"]):
        T = ax["T"]
        try:
            D = _ev(["shape", t["view"], d], env, pids, grid)
        except _Unknown:
            D, exact = T, False
        lid = ax["loop"]
        if lid is not None and lid in t["loops"] and lid not in consumed and _runs_tiles(loops[lid], t["mode"], T):
            lp = loops[lid]
            try:
                lb = _ev(lp["lb"], env, pids, grid)
                start = lb * T if t["mode"] == "index" else lb
                factor = factor * np.clip(D - start, 0, trips[lid] * T)
                consumed.add(lid)
                continue
            except _Unknown:
                pass
        try:
            idx = _ev(ax["idx"], env, pids, grid)
            start = idx * T if t["mode"] == "index" else idx
            factor = factor * np.clip(D - start, 0, T)
        except _Unknown:
            factor = factor * np.minimum(T, D)
            exact = False
    for lid in t["loops"]:
        if lid not in consumed:
            factor = factor * trips[lid]
    return _grid_sum(factor, grid), exact


def _runs_tiles(loop, mode: str, T: int) -> bool:
    """Whether a loop's induction variable, used as an index, visits consecutive tiles:
    step 1 in index mode, step T (the tile's extent) in offset mode."""
    return loop["step"] == ["c", 1 if mode == "index" else T]
