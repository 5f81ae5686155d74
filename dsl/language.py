"""The language users write inside `@tc.kernel` and `@tc.func` functions.

These Python objects only name the operations: the frontend (tilec.frontend)
recognizes them in a kernel's source and emits tile IR. Called from ordinary
Python code they raise a RuntimeError saying where they can be used.
Each builtin's Python signature is the one the frontend checks calls against.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import types

__all__ = [
    "constexpr", "static_range", "range", "interpret", "interpreting", "is_builtin",
    "program_id", "num_programs", "cluster_rank", "cluster_sync", "cluster_gather", "barrier",
    "grid_dependency_wait", "launch_dependents", "cdiv", "arange", "zeros", "full",
    "load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas",
    "dot", "where", "minimum", "maximum", "fma", "exp", "exp2", "log", "log2", "sqrt", "rsqrt",
    "sin", "cos", "tanh", "sigmoid", "erf", "floor", "ceil", "abs", "clamp",
    "broadcast_to", "reshape", "permute", "trans", "expand_dims", "cat",
    "sum", "max", "min", "argmax", "argmin", "prod", "cumsum", "cumprod", "reduce",
    "device_print", "device_assert", "static_assert",
]


class constexpr:
    """Marks a kernel parameter as a compile-time constant (`BLOCK: tc.constexpr`).

    A module-level `X = tc.constexpr(128)` is also read as the constant 128.
    """

    def __init__(self, value):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"

    def __eq__(self, other):
        return isinstance(other, constexpr) and self.value == other.value

    def __hash__(self):
        return hash(("constexpr", self.value))


class Func:
    """A device helper (`@tc.func`), inlined at every call site inside kernels."""

    def __init__(self, fn):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tc.func decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"@tc.func '{self.name}' can only be called inside a @tc.kernel or @tc.func")

    def __repr__(self) -> str:
        return f"<tilec func {self.name}>"


_BUILTIN_ATTR = "__tilec_builtin__"


def is_builtin(obj) -> bool:
    return getattr(obj, _BUILTIN_ATTR, False)


def builtin(fn):
    """Make `fn` a language builtin: its signature is checked by the frontend,
    and calling it outside a kernel raises a clear error."""

    @functools.wraps(fn)
    def outside(*args, **kwargs):
        host = getattr(outside, "__tilec_host__", None)
        if host is not None:
            return host(*args, **kwargs)
        raise RuntimeError(f"tc.{fn.__name__} can only be used inside a @tc.kernel or @tc.func")

    setattr(outside, _BUILTIN_ATTR, True)
    return outside


# ----------------------------------------------------------------------------- interpreter mode
class _InterpretState(threading.local):
    depth = 0  # a class default: reading it in a new thread raises no AttributeError (slow)


_state = _InterpretState()


def interpreting() -> bool:
    """True inside `with tc.interpret():` (the environment variable is checked by the kernel)."""
    return _state.depth > 0


@contextlib.contextmanager
def interpret():
    """Run every kernel launched inside this block on the numpy interpreter."""
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1


# ----------------------------------------------------------------------------- grid and iteration
@builtin
def static_range(start, end=None, step=1):
    """`for i in tc.static_range(...)`: a loop over constexpr bounds, unrolled at compile time."""


@builtin
def range(start, end=None, step=1, num_stages=None):  # noqa: A001 (tc.range, as Python's)
    """`for i in tc.range(...)`: a run-time loop, as `range`; `num_stages=S` (a constexpr, 2 to 8)
    asks that the body's loads be issued S - 1 iterations ahead through shared memory."""


@builtin
def program_id(axis=0):
    """The index of this program along grid axis 0, 1 or 2 (an i32 scalar)."""


@builtin
def num_programs(axis=0):
    """The grid's extent along axis 0, 1 or 2 (an i32 scalar)."""


@builtin
def cluster_rank():
    """This program's rank in its cluster, 0 .. cluster - 1 (an i32 scalar).

    With the `cluster=N` launch option (sm_90+), programs N * c .. N * c + N - 1 along grid
    axis 0 form cluster c and run at the same time; the rank is program_id(0) % N (0 with
    no cluster)."""


@builtin
def cluster_sync():
    """Wait until every program of the cluster reaches this point; memory written before it
    by any of them is visible to all of them after it. Every program of the cluster must
    reach each cluster_sync the same number of times. Without clusters it synchronizes the
    program's own threads only."""


@builtin
def cluster_gather(value, size, padding=None):
    """Every program of the cluster contributes the scalar `value` (f32 or i32); each gets back
    a tile holding every program's value, by rank. `value` may be a tuple of scalars: then a
    tuple of such tiles comes back, from one exchange. `size` is the launch's `cluster` (a
    constexpr, 1 to 8). Tiles have a power-of-two length, so for a cluster of 3, 5, 6 or 7
    the tile has the next power of two's entries and those past `size` hold `padding` (a
    constexpr number per value, required then: -inf before a max, 0 before a sum). Every
    program must reach it the same number of times; it hands over the values only: memory
    written before it is not made visible to the other programs (that is cluster_sync's
    job). On the GPU the values travel through the programs' shared memory (distributed
    shared memory, sm_90+), not global memory: one short exchange where a partial result
    written to global memory, a cluster_sync and a load would each wait on the L2."""


@builtin
def barrier():
    """Wait until every thread of this program reaches this point (`bar.sync`); memory the
    program's threads wrote before it is visible to all of them after it. Every thread
    of the program must reach it the same number of times, so it may not sit under a
    condition that differs within the program (a condition on scalars is uniform).

    With an atomic after it, it orders a program's stores before its announcement to
    other programs: a tile stored by many threads, `tc.barrier()`, then one
    `tc.atomic_add` (acq_rel, gpu scope) on a counter. The program that sees the last
    count reads every program's stores (docs/language.md, "The last program")."""


@builtin
def grid_dependency_wait():
    """Wait until the kernel launched before this one in the stream has finished and its
    memory writes are visible (`griddepcontrol.wait`, sm_90+).

    Only a kernel compiled with `dependent_launch=True` may start before the kernel ahead
    of it has finished; such a kernel must not read what that kernel writes, nor write
    what it reads or writes, before this call. Work before it (address arithmetic, loads
    of inputs the kernel ahead does not write) overlaps that kernel's end. A kernel compiled
    with `dependent_launch=True` that never calls it waits at its start. Without
    `dependent_launch`, and before sm_90, it does nothing."""


@builtin
def launch_dependents():
    """Let the next kernel of the stream, when it was compiled with `dependent_launch=True`,
    start before this one ends (`griddepcontrol.launch_dependents`, sm_90+): it is launched
    once every program of this kernel has called this or ended. It changes no ordering of
    memory: the next kernel still sees this one's writes only after its
    `tc.grid_dependency_wait()`. Before sm_90 it does nothing."""


@builtin
def cdiv(a, b):
    """Ceiling division `(a + b - 1) // b` of integers."""


def _host_cdiv(a, b):
    # Grids are computed on the host (`kernel[(tc.cdiv(n, BLOCK),)]`), so this one builtin
    # also works outside kernels, on Python ints.
    return -(-a // b)


cdiv.__tilec_host__ = _host_cdiv


# ----------------------------------------------------------------------------- tile construction
@builtin
def arange(start, end):
    """The i32 tile `[start, start + 1, ..., end - 1]`; `end - start` must be a power of two."""


@builtin
def zeros(shape, dtype=None):
    """A tile of `shape` (a constexpr tuple) filled with zeros of `dtype` (default f32)."""


@builtin
def full(shape, value, dtype=None):
    """A tile of `shape` filled with `value` (a scalar) converted to `dtype`."""


# ----------------------------------------------------------------------------- memory
@builtin
def load(pointer, mask=None, other=None, *, index=None, offset=None, shape=None, padding=None, multicast=False,
         eviction_policy=None, realign=False):
    """Read memory.

    View form: `tc.load(view, index=(i, j), shape=(BM, BN), padding=0.0)` reads the
    tile starting at element `index * shape` (`offset=` gives element offsets);
    out-of-bounds elements read `padding`. `multicast=True` (a constexpr) promises that
    every program of the cluster (the `cluster` option) loads this same tile at this
    point, as often as the others: on sm_90a a warp-specialized TMA ring then fetches it
    from L2 once and writes it into every program's shared memory (each program issues a
    share of the copies); elsewhere it is an ordinary load. The interpreter checks the
    promise.
    Pointer form: `tc.load(ptrs, mask=m, other=0.0)` gathers one element per pointer;
    masked-off elements read `other`.
    `eviction_policy` (a constexpr, either form): "evict_first" for data read once (the
    lines it brings into L2 go first, before other data there), "evict_last" for data
    read again soon, "evict_normal" or None for the default. A hint: on sm_80 and newer
    register loads carry it; copies a staged loop makes of the load (cp.async, TMA) and
    older GPUs use the default.
    `realign=True` (a constexpr, pointer form): the pointers run contiguous along a
    dimension from an address the compiler cannot prove aligned (a row read at another
    array's offsets). Each thread's group of up to 16 bytes is then read as the two aligned
    blocks around it and shifted into place at run time, instead of element by element;
    only blocks holding a wanted element are read. The values are the same either way.
    """


@builtin
def store(pointer, value=None, mask=None, *, index=None, offset=None, tile=None):
    """Write memory.

    View form: `tc.store(view, index=(i, j), tile=t)`; out-of-bounds elements are skipped,
    and `t` must have the view's dtype (use `t.astype(view.dtype)`).
    Pointer form: `tc.store(ptrs, value, mask=m)`.
    """


def _atomic_doc(kind):
    return (f"Atomic {kind} on a pointer tile (`tc.atomic_{kind}(ptrs, value, mask=m)`) or a view "
            f"(`tc.atomic_{kind}(view, value, index=(i, j), mask=m)`); returns the old values.")


@builtin
def atomic_add(pointer, value, mask=None, *, index=None, offset=None, sem="acq_rel", scope="gpu"):
    pass


@builtin
def atomic_max(pointer, value, mask=None, *, index=None, offset=None, sem="acq_rel", scope="gpu"):
    pass


@builtin
def atomic_min(pointer, value, mask=None, *, index=None, offset=None, sem="acq_rel", scope="gpu"):
    pass


@builtin
def atomic_xchg(pointer, value, mask=None, *, index=None, offset=None, sem="acq_rel", scope="gpu"):
    pass


for _k in ("add", "max", "min", "xchg"):
    globals()[f"atomic_{_k}"].__doc__ = _atomic_doc(_k)


@builtin
def atomic_cas(pointer, cmp, value, mask=None, *, index=None, offset=None, sem="acq_rel", scope="gpu"):
    """Compare-and-swap: where the old value equals `cmp`, store `value`; returns the old values."""


# ----------------------------------------------------------------------------- math
@builtin
def dot(a, b, acc=None, out_dtype=None, allow_tf32=False):
    """`acc + a @ b` for 2-D tiles; `acc` defaults to zeros of `out_dtype` (f32)."""


@builtin
def where(cond, x, y):
    """Elementwise `x if cond else y`, broadcasting all three."""


@builtin
def minimum(x, y):
    """Elementwise minimum (NaN propagates)."""


@builtin
def maximum(x, y):
    """Elementwise maximum (NaN propagates)."""


@builtin
def fma(a, b, c):
    """`a * b + c` with one rounding (floats)."""


@builtin
def clamp(x, lo, hi):
    """`minimum(maximum(x, lo), hi)`."""


def _unary(name, doc):
    def fn(x):
        pass
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


exp = _unary("exp", "e**x (integers are converted to f32 first).")
exp2 = _unary("exp2", "2**x.")
log = _unary("log", "Natural logarithm.")
log2 = _unary("log2", "Base-2 logarithm.")
sqrt = _unary("sqrt", "Square root.")
rsqrt = _unary("rsqrt", "1 / sqrt(x).")
sin = _unary("sin", "Sine.")
cos = _unary("cos", "Cosine.")
tanh = _unary("tanh", "Hyperbolic tangent.")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x)).")
erf = _unary("erf", "The error function.")
floor = _unary("floor", "Round toward negative infinity (floats).")
ceil = _unary("ceil", "Round toward positive infinity (floats).")
abs = _unary("abs", "Absolute value (the Python builtin `abs` works too).")


# ----------------------------------------------------------------------------- shapes
@builtin
def broadcast_to(x, shape):
    """Broadcast `x` to the constexpr `shape` (numpy rules)."""


@builtin
def reshape(x, shape):
    """Row-major reshape to the constexpr `shape` (same number of elements)."""


@builtin
def permute(x, *dims):
    """Reorder the dimensions: `tc.permute(t, 1, 0)` or `tc.permute(t, (1, 0))`."""


@builtin
def trans(x):
    """Transpose a 2-D tile (same as `x.T`)."""


@builtin
def expand_dims(x, axis):
    """Insert an extent-1 dimension at `axis`."""


@builtin
def cat(a, b, axis=0):
    """Concatenate two tiles along `axis`."""


# ----------------------------------------------------------------------------- reductions and scans
def _reduction(name, doc):
    def fn(x, axis=None, keep_dims=False):
        pass
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


sum = _reduction("sum", "Sum along `axis` (all elements when None); bool and integers narrower than 32 bits "
                        "are summed in and give i32 (u32 for u8/u16).")
max = _reduction("max", "Maximum along `axis`.")
min = _reduction("min", "Minimum along `axis`.")
prod = _reduction("prod", "Product along `axis`, in the type `sum` uses.")
argmax = _reduction("argmax", "Index (i32) of the first maximum along `axis`.")
argmin = _reduction("argmin", "Index (i32) of the first minimum along `axis`.")


@builtin
def cumsum(x, axis=0, reverse=False):
    """Inclusive prefix sum along `axis`, in the type `sum` uses (i32/u32 for narrow integers)."""


@builtin
def cumprod(x, axis=0, reverse=False):
    """Inclusive prefix product along `axis`, in the type `sum` uses."""


@builtin
def reduce(x, axis, combine_fn, keep_dims=False):
    """Reduce along `axis` with a `@tc.func` combiner taking and returning scalars."""


# ----------------------------------------------------------------------------- debugging
@builtin
def device_print(fmt, *values):
    """Print `fmt` and the values (every element of tiles) from each program."""


@builtin
def device_assert(cond, msg=""):
    """Fail the launch with `msg` where `cond` is false."""


@builtin
def static_assert(cond, msg=""):
    """A compile-time assertion on a constexpr condition."""


# ----------------------------------------------------------------------------- helpers written in the language
def _swizzle2d(i, j, size_i, size_j, size_g):
    # Number the (i, j) grid row-major, then walk it in groups of `size_g` rows, column by
    # column inside a group, so that programs launched together share rows and columns (L2 reuse).
    linear = i * size_j + j
    per_group = size_g * size_j
    group = linear // per_group
    first_i = group * size_g
    rows = minimum(size_i - first_i, size_g)
    within = linear % per_group
    return first_i + within % rows, within // rows


def _make_swizzle2d():
    f = Func(_swizzle2d)
    f.name = "swizzle2d"
    f.__doc__ = ("`tc.swizzle2d(i, j, size_i, size_j, size_g) -> (i2, j2)`: grouped program-id ordering; "
                 "maps the (i, j) program of a size_i x size_j grid to the tile it should compute so that "
                 "groups of size_g rows are traversed together.")
    return f


swizzle2d = _make_swizzle2d()
__all__.append("swizzle2d")
