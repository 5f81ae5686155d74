"""Bad input, end to end: one row per mistake a user can make at a public entry point.

Each row is (id, call, error type, pattern). The call must raise that type (an exact
subclass check, so a stray KeyError or numpy error fails the row), its message must
match the pattern, which names the argument, option or file:line at fault, and no
traceback of tilec's internals may be needed to understand it. Calls that take an output
buffer get one filled with a sentinel: a call that raised before launching must leave it
untouched. The process survives every row by construction (the rows run in it); the ones
that could take a process down (imports, the CLI, the cache) run in a subprocess.

Kernels run on the numpy interpreter here; the GPU launch path's argument errors are the
launcher's own (`runtime/launcher.py`: `KernelState.bind`, `_classify`), raised before it
needs a driver, so they are rows here too. A kernel that faults is in
tests/runtime/test_fault_messages.py (the messages, on the CPU) and test_fault_gpu.py.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tilec as tc
from tilec import stdlib_kernels as sk
from tilec.specialize import parse_signature

SENTINEL = 12345.0


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _sentinel(*shape, dtype=np.float32):
    return np.full(shape, SENTINEL, dtype=dtype)


def _check(call, exc, pattern, outs=()):
    """Run `call` (under the interpreter); it raises exactly `exc` (or a subclass) with a
    message matching `pattern`, and leaves each array of `outs` as it was."""
    before = [o.copy() for o in outs]
    with tc.interpret():
        with pytest.raises(Exception) as info:
            call()
    assert isinstance(info.value, exc), f"raised {type(info.value).__name__}: {info.value}"
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"
    for o, b in zip(outs, before):
        np.testing.assert_array_equal(o, b, err_msg="an output was written by a call that raised")


# ----------------------------------------------------------------------------- kernels
@tc.kernel
def copy_kernel(x, out, n, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    tc.store(out.ptr + offs, tc.load(x.ptr + offs, mask=m), mask=m)


@tc.func
def scaled(t, factor: tc.constexpr):
    tc.static_assert(factor > 0, "factor must be positive")
    return t * factor


@tc.kernel
def helper_kernel(x, out, n, FACTOR: tc.constexpr, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    m = offs < n
    t = tc.load(x.ptr + offs, mask=m)
    tc.store(out.ptr + offs, scaled(t, FACTOR), mask=m)  # CALL SITE


@tc.kernel
def view_kernel(x, out, BLOCK: tc.constexpr):
    pid = tc.program_id(0)
    tc.store(out, index=(pid,), tile=tc.load(x, index=(pid,), shape=(BLOCK,)))


X, N = _f32(40), 40
SIG = "x=f32[?], out=f32[?], n=i32, BLOCK=16"

LAUNCH_ROWS = [
    ("too many arguments", lambda o: copy_kernel[(3,)](X, o, N, 16, 5), TypeError, r"copy_kernel.*too many"),
    ("too few arguments", lambda o: copy_kernel[(3,)](X, o, BLOCK=16), TypeError, r"copy_kernel.*'n'"),
    ("unknown keyword", lambda o: copy_kernel[(3,)](X, o, N, BLOCK=16, BLK=2), TypeError,
     r"no parameter or launch option 'BLK'"),
    ("misspelled option", lambda o: copy_kernel[(3,)](X, o, N, BLOCK=16, num_warp=4), TypeError,
     r"'num_warp'; did you mean 'num_warps'"),
    ("parameter given twice", lambda o: copy_kernel[(3,)](X, o, N, BLOCK=16, x=X), TypeError, r"'x'"),
    ("wrong type", lambda o: copy_kernel[(3,)](X, o, "forty", BLOCK=16), TypeError, r"parameter 'n' got a str"),
    ("a list for an array", lambda o: copy_kernel[(3,)](list(X), o, N, BLOCK=16), TypeError,
     r"parameter 'x' got a list"),
    ("bad option value", lambda o: copy_kernel[(3,)](X, o, N, BLOCK=16, num_warps=3), ValueError, r"num_warps"),
    ("unknown arch", lambda o: copy_kernel[(3,)](X, o, N, BLOCK=16, arch="sm_99"), ValueError, r"arch 'sm_99'"),
    ("non-power-of-two block", lambda o: copy_kernel[(3,)](X, o, N, BLOCK=15), tc.CompilationError,
     r"test_bad_input\.py:\d+:\d+: .*powers? of two"),
    ("constexpr of a bad type", lambda o: copy_kernel[(3,)](X, o, N, BLOCK=[16]), TypeError,
     r"parameter 'BLOCK' is a tc.constexpr"),
    ("wrong dtype for a view store", lambda o: view_kernel[(3,)](X, o.astype(np.float16), BLOCK=16),
     tc.CompilationError, r"test_bad_input\.py:\d+:\d+: .*dtype"),
    ("wrong rank for a view", lambda o: view_kernel[(3,)](X.reshape(4, 10), o, BLOCK=16), tc.CompilationError,
     r"test_bad_input\.py:\d+:\d+: .*(index|rank|dimension)"),
    ("strides not in whole elements", lambda o: copy_kernel[(3,)](_odd_strides(), o, N, BLOCK=16), TypeError, r"strides .* not multiples of the element size"),
    ("grid past the limits", lambda o: copy_kernel[(1, 70000)](X, o, N, BLOCK=16), ValueError,
     r"grid axis 1 holds at most 65535"),
    ("grid of a bad type", lambda o: copy_kernel["3"](X, o, N, BLOCK=16), TypeError, r"grid"),
    ("called without a grid", lambda o: copy_kernel(X, o, N, BLOCK=16), TypeError, r"copy_kernel\[grid\]"),
]


def _odd_strides():
    """An f32 array whose elements are 6 bytes apart (strides in bytes, not whole elements)."""
    return np.ndarray((40,), np.float32, np.zeros(6 * 40, np.uint8), 0, (6,))


@pytest.mark.parametrize("name, call, exc, pattern", LAUNCH_ROWS, ids=[r[0] for r in LAUNCH_ROWS])
def test_kernel_launch(name, call, exc, pattern):
    out = _sentinel(N)
    _check(lambda: call(out), exc, pattern, outs=[out])


def test_error_inside_a_func_shows_the_call_site():
    out = _sentinel(N)
    _check(lambda: helper_kernel[(3,)](X, out, N, FACTOR=-2, BLOCK=16), tc.CompilationError,
           r"factor must be positive", outs=[out])
    with pytest.raises(tc.CompilationError) as info:
        helper_kernel.compile("x=f32[?], out=f32[?], n=i32, FACTOR=-1, BLOCK=16", arch="sm_80")
    text = str(info.value)
    call_line = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if "# CALL SITE" in line)
    assert f"test_bad_input.py:{call_line}:" in text, text           # the caller's line
    assert "in @tc.func 'scaled' called from" in text, text
    assert "scaled(t, FACTOR)" in text, text                        # with its source and caret
    assert info.value.call_sites and info.value.call_sites[0][1] == "scaled"


class _CudaArray:
    """An object with __cuda_array_interface__ (never dereferenced: these rows fail first)."""

    def __init__(self, typestr):
        self.__cuda_array_interface__ = {"shape": (40,), "typestr": typestr, "data": (256, False), "version": 3,
                                         "strides": None}


# The GPU launch path (runtime/launcher.py) checks the arguments before it needs a driver.
GPU_LAUNCH_ROWS = [
    ("too many arguments", (X, X, N, 16, 5), {}, r"kernel 'copy_kernel' takes 4 argument\(s\) \(x, out, n, BLOCK\), got 5"),
    ("too few arguments", (X, X), {"BLOCK": 16}, r"kernel 'copy_kernel' is missing argument 'n'"),
    ("unknown keyword", (X, X, N), {"BLOCK": 16, "BLK": 1}, r"no parameter or launch option 'BLK'"),
    ("misspelled option", (X, X, N), {"BLOCK": 16, "num_warp": 4}, r"'num_warp'; did you mean 'num_warps'"),
    ("parameter given twice", (X, X, N), {"BLOCK": 16, "x": X}, r"got parameter 'x' twice"),
    ("a host numpy array", (X, X, N), {"BLOCK": 16}, r"argument 'x': a host numpy array .*tc.from_numpy"),
    ("a string", ("x", X, N), {"BLOCK": 16}, r"argument 'x': cannot pass a str"),
    ("an array of an unsupported dtype", (_CudaArray("<c8"), X, N), {"BLOCK": 16},
     r"argument 'x': __cuda_array_interface__ typestr '<c8' is not a tilec dtype"),
]


@pytest.mark.parametrize("name, args, kwargs, pattern", GPU_LAUNCH_ROWS, ids=[r[0] for r in GPU_LAUNCH_ROWS])
def test_gpu_launch_arguments(name, args, kwargs, pattern):
    from tilec.runtime import launcher
    with pytest.raises(TypeError, match=pattern):
        launcher.launch(copy_kernel.launch_state, (3,), args, kwargs)


# ----------------------------------------------------------------------------- kernel.compile
COMPILE_ROWS = [
    ("constexpr that is not a parameter", lambda: copy_kernel.compile(SIG.replace(", BLOCK=16", ""), BK=64),
     TypeError, r"no parameter or launch option 'BK'"),
    ("misspelled option", lambda: copy_kernel.compile(SIG, num_warp=4), TypeError,
     r"'num_warp'; did you mean 'num_warps'"),
    ("misspelled constexpr", lambda: copy_kernel.compile(SIG.replace(", BLOCK=16", ""), BLOK=16), TypeError,
     r"'BLOK'; did you mean 'BLOCK'"),
    ("run-time parameter as a keyword", lambda: copy_kernel.compile("x=f32[?], out=f32[?], BLOCK=16", n=4),
     TypeError, r"'n' is a run-time parameter"),
    ("constexpr given twice", lambda: copy_kernel.compile(SIG, BLOCK=32), ValueError, r"'BLOCK' is given twice"),
    ("signature and positional arguments", lambda: copy_kernel.compile(SIG, 3), TypeError,
     r"signature string comes alone"),
    ("unknown dtype", lambda: copy_kernel.compile(SIG.replace("x=f32", "x=f33")), ValueError, r"x: unknown dtype 'f33'"),
    ("unclosed bracket", lambda: copy_kernel.compile("x=f32[?, out=f32[?], n=i32, BLOCK=16"), ValueError,
     r"parameter 'x': expected a type"),
    ("missing parameter", lambda: copy_kernel.compile("x=f32[?], out=f32[?], BLOCK=16"), ValueError,
     r"does not give parameter 'n'"),
    ("unknown parameter", lambda: copy_kernel.compile(SIG + ", y=f32[?]"), ValueError,
     r"no parameter 'y'"),
    ("parameter given twice", lambda: copy_kernel.compile(SIG + ", x=f32[?]"), ValueError, r"'x' is given twice"),
    ("unknown view option", lambda: copy_kernel.compile(SIG.replace("x=f32[?]", "x=f32[?]:i128")), ValueError,
     r"x: unknown view option 'i128'"),
    ("bad divisibility", lambda: copy_kernel.compile(SIG.replace("x=f32[?]", "x=f32[?]:div=3")), ValueError,
     r"x: div= needs 1 powers of two"),
    ("float scalar marked divisible", lambda: copy_kernel.compile(SIG.replace("n=i32", "n=f32:16")), ValueError,
     r"parameter 'n': only integer scalars"),
    ("constexpr not a literal", lambda: copy_kernel.compile(SIG.replace("BLOCK=16", "BLOCK=sixteen")), ValueError,
     r"BLOCK is a tc.constexpr"),
    ("too many positional entries", lambda: copy_kernel.compile("f32[?], f32[?], i32, 16, 17"), ValueError,
     r"only 4 parameters"),
    ("signature not a string", lambda: parse_signature(copy_kernel, 12), TypeError, r"signature must be a string"),
    ("unknown arch", lambda: copy_kernel.compile(SIG, arch="sm_99"), ValueError, r"unsupported arch 'sm_99'"),
    ("bad num_stages", lambda: copy_kernel.compile(SIG, num_stages=0), ValueError, r"num_stages"),
    ("cluster before sm_90", lambda: copy_kernel.compile(SIG, arch="sm_80", cluster=2), ValueError,
     r"cluster=2 needs sm_90"),
]


@pytest.mark.parametrize("name, call, exc, pattern", COMPILE_ROWS, ids=[r[0] for r in COMPILE_ROWS])
def test_kernel_compile(name, call, exc, pattern):
    _check(call, exc, pattern)


# ----------------------------------------------------------------------------- the standard library
A = _f32(6, 40)
I32 = np.arange(240, dtype=np.int32).reshape(6, 40)
STRIDED = _f32(6, 80)[:, ::2]           # last stride 2: rows are not contiguous
F64_OUT = np.zeros((6, 40), np.float64)
LABELS = np.arange(6, dtype=np.int64)
H = A.astype(np.float16)
W40, W41, STAT = np.ones(40, np.float32), np.ones(41, np.float32), np.ones(6, np.float32)

# (id, call(out) where out is a sentinel-filled (6, 40) f32 array, error type, pattern)
STDLIB_ROWS = [
    ("softmax: int dtype", lambda o: sk.softmax(I32, out=o), TypeError, r"x: dtype i32 is not supported"),
    ("softmax: not an array", lambda o: sk.softmax([[1.0, 2.0]]), TypeError, r"x: expected an array"),
    ("softmax: out shape", lambda o: sk.softmax(A, out=o[:, :39]), ValueError, r"out has shape \(6, 39\), expected \(6, 40\)"),
    ("softmax: out dtype", lambda o: sk.softmax(A, out=F64_OUT), TypeError, r"out has dtype f64, expected f32"),
    ("softmax: non-contiguous rows", lambda o: sk.softmax(STRIDED, out=o), ValueError, r"x: the last dimension must be contiguous"),
    ("softmax: dim out of range", lambda o: sk.softmax(A, dim=2, out=o), IndexError, r"dim=2 is out of range"),
    ("softmax: dim not an int", lambda o: sk.softmax(A, dim=1.0, out=o), TypeError, r"dim must be an int"),
    ("log_softmax: out shape", lambda o: sk.log_softmax(A, out=o[:5]), ValueError, r"out has shape \(5, 40\)"),
    ("layer_norm: weight shape", lambda o: sk.layer_norm(A, np.ones(41, np.float32), out=o), ValueError,
     r"weight has shape \(41,\), expected \(40,\)"),
    ("layer_norm: bias shape", lambda o: sk.layer_norm(A, np.ones(40, np.float32), np.ones(4, np.float32), out=o),
     ValueError, r"bias has shape \(4,\)"),
    ("layer_norm: weight dtype", lambda o: sk.layer_norm(A, np.ones(40, np.int32), out=o), TypeError, r"weight"),
    ("layer_norm: out dtype", lambda o: sk.layer_norm(A, out=F64_OUT), TypeError, r"out has dtype f64"),
    ("layer_norm: eps of a bad type", lambda o: sk.layer_norm(A, eps="small", out=o), TypeError, r"eps must be"),
    ("rms_norm: weight shape", lambda o: sk.rms_norm(A, np.ones(39, np.float32), out=o), ValueError,
     r"weight has shape \(39,\)"),
    ("rms_norm: non-contiguous rows", lambda o: sk.rms_norm(STRIDED, out=o), ValueError, r"x: the last dimension"),
    ("cross_entropy: target shape", lambda o: sk.cross_entropy(A, np.arange(5)), ValueError, r"target has shape \(5,\)"),
    ("cross_entropy: float target", lambda o: sk.cross_entropy(A, A[:, 0]), TypeError, r"target"),
    ("cross_entropy: reduction", lambda o: sk.cross_entropy(A, LABELS, reduction="avg"), ValueError, r"reduction"),
    ("sum: dim out of range", lambda o: sk.sum(A, dim=-3, out=o[:, 0]), IndexError, r"dim=-3 is out of range"),
    ("sum: out shape", lambda o: sk.sum(A, dim=1, out=o[:5, 0]), ValueError, r"out has shape \(5,\), expected \(6,\)"),
    ("max: int dtype", lambda o: sk.amax(I32, dim=1), TypeError, r"x: dtype i32"),
    ("cumsum: out shape", lambda o: sk.cumsum(A, out=o[:, :20]), ValueError, r"out has shape \(6, 20\)"),
    ("cumsum: out dtype", lambda o: sk.cumsum(A, out=F64_OUT), TypeError, r"out has dtype f64"),
    ("gelu: approximate", lambda o: sk.gelu(A, approximate="fast", out=o), ValueError, r"approximate"),
    ("gelu: out shape", lambda o: sk.gelu(A, out=o[:, :8]), ValueError, r"out has shape \(6, 8\)"),
    ("silu_and_mul: odd last dimension", lambda o: sk.silu_and_mul(A[:, :39], out=o[:, :19]), ValueError, r"x"),
    ("silu_and_mul: out shape", lambda o: sk.silu_and_mul(A, out=o), ValueError, r"out has shape \(6, 40\), expected \(6, 20\)"),
    ("swiglu: shapes differ", lambda o: sk.swiglu(A, A[:, :20], out=o), ValueError, r"(gate|up)"),
    ("add: shapes do not broadcast", lambda o: sk.add(A, A[:, :39], out=o), ValueError,
     r"add: a has shape \(6, 40\) and b has shape \(6, 39\)"),
    ("mul: out shape", lambda o: sk.mul(A, A, out=o[:3]), ValueError, r"out has shape \(3, 40\)"),
    ("dropout: p out of range", lambda o: sk.dropout(A, 1.5, seed=1, out=o), ValueError, r"p"),
    ("dropout: seed not an int", lambda o: sk.dropout(A, 0.5, seed="one", out=o), TypeError, r"seed"),
    ("transpose: 3-D", lambda o: sk.transpose(A.reshape(2, 3, 40)), ValueError, r"x: transpose takes a 2-D matrix"),
    ("transpose: out shape", lambda o: sk.transpose(A, out=o), ValueError, r"out has shape \(6, 40\), expected \(40, 6\)"),
    ("matmul: inner dimensions", lambda o: sk.matmul(A, A, out=o), ValueError, r"inner dimensions 40 and 6 differ"),
    ("matmul: activation", lambda o: sk.matmul(A, A.T.copy(), activation="tanh"), ValueError, r"activation"),
    ("softmax_backward: shapes differ", lambda o: sk.softmax_backward(A, A[:, :20], out=o), ValueError, r"(dy|y)"),
    ("layer_norm: negative eps", lambda o: sk.layer_norm(A, eps=-1.0, out=o), ValueError, r"eps must be a non-negative"),
    ("attention: f32", lambda o: sk.attention(A, A, A), TypeError, r"q: dtype f32 is not supported"),
    ("attention: rank", lambda o: sk.attention(H, H, H), ValueError, r"q: expected 4 dimensions"),
    ("attention_backward: rank", lambda o: sk.attention_backward(H, H, H, H, H, H), ValueError, r"q: expected 4"),
    ("attention_decode: rank", lambda o: sk.attention_decode(H, H, H, LABELS.astype(np.int32)), ValueError,
     r"q: expected 4 dimensions"),
    ("mla_decode: rank", lambda o: sk.mla_decode(H, H, LABELS.astype(np.int32)), ValueError, r"q: expected"),
    ("rope: cos shape", lambda o: sk.rope(H, H, H), ValueError, r"cos: expected shape \(6, 20\)"),
    ("layer_norm_backward: weight shape", lambda o: sk.layer_norm_backward(A, A, W41, STAT, STAT, out=o), ValueError,
     r"layer_norm_backward: weight has shape \(41,\), expected \(40,\)"),
    ("layer_norm_backward: mean shape", lambda o: sk.layer_norm_backward(A, A, W40, STAT[:5], STAT, out=o), ValueError,
     r"mean has shape \(5,\), expected \(6,\)"),
    ("rms_norm_backward: rstd shape", lambda o: sk.rms_norm_backward(A, A, W40, STAT[:4], out=o), ValueError,
     r"rstd has shape \(4,\)"),
    ("log_softmax_backward: dy shape", lambda o: sk.log_softmax_backward(A[:, :39], A, out=o), ValueError,
     r"dy has shape \(6, 39\), expected y's \(6, 40\)"),
    ("gelu_backward: x shape", lambda o: sk.gelu_backward(A, A[:5], out=o), ValueError, r"x has shape \(5, 40\)"),
    ("gelu_backward: approximate", lambda o: sk.gelu_backward(A, A, approximate="x", out=o), ValueError,
     r"approximate must be 'none' or 'tanh'"),
    ("swiglu_backward: up shape", lambda o: sk.swiglu_backward(A, A, A[:, :20], dgate=o), ValueError,
     r"up has shape \(6, 20\)"),
    ("silu_and_mul_backward: dy shape", lambda o: sk.silu_and_mul_backward(A, A, out=o), ValueError,
     r"dy has shape \(6, 40\), expected \(6, 20\)"),
    ("rope_backward: cos shape", lambda o: sk.rope_backward(H, H, H), ValueError, r"cos: expected shape"),
    ("dropout_backward: p", lambda o: sk.dropout_backward(A, -0.5, 3, out=o), ValueError, r"p must be in \[0, 1\]"),
    ("dropout_backward: seed", lambda o: sk.dropout_backward(A, 0.5, 3.5, out=o), TypeError, r"seed must be an int"),
    ("transpose: leading dimensions that do not flatten",
     lambda o: sk.transpose(np.ones((3, 4, 5, 6), np.float32)[:, :2], 2, 3), ValueError,
     r"x: dimensions of sizes \(3, 2\) .* cannot be flattened"),
    ("transpose: dim1 missing", lambda o: sk.transpose(A, 0), TypeError, r"pass both dim0 and dim1"),
    ("transpose: dim1 out of range", lambda o: sk.transpose(A, 0, 2), IndexError, r"dim1=2 is out of range"),
    ("cross_entropy: non-contiguous rows", lambda o: sk.cross_entropy(STRIDED, LABELS), ValueError,
     r"logits: the last dimension must be contiguous"),
    ("cross_entropy: grad shape", lambda o: sk.cross_entropy(A, LABELS, return_grad=True, grad=o[:, :5]), ValueError,
     r"grad has shape \(6, 5\), expected \(6, 40\)"),
    ("matmul: out shape", lambda o: sk.matmul(H, H.T.copy(), out=np.zeros((6, 7), np.float16)), ValueError,
     r"out has shape \(6, 7\), expected \(6, 6\)"),
    ("gelu: int dtype", lambda o: sk.gelu(I32, out=o), TypeError, r"x: dtype i32 is not supported"),
]


@pytest.mark.parametrize("name, call, exc, pattern", STDLIB_ROWS, ids=[r[0] for r in STDLIB_ROWS])
def test_stdlib_op(name, call, exc, pattern):
    out = _sentinel(6, 40)
    _check(lambda: call(out), exc, pattern, outs=[out, F64_OUT])


# ----------------------------------------------------------------------------- the compile cache
@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    from tilec.runtime import cache
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_warned_unwritable", False)
    cache.clear_memory()
    yield cache
    cache.clear_memory()


def _compile_copy(block=16):
    return copy_kernel.compile(f"x=f32[?], out=f32[?], n=i32, BLOCK={block}", arch="sm_80")


def _entries(cache):
    return sorted((cache.cache_dir() / "kernels").rglob("*.json"))


def _checksummed(cache, payload: bytes) -> bytes:
    import hashlib
    return cache.MAGIC + b" " + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


@pytest.mark.parametrize("damage", ["garbage bytes", "truncated", "empty", "well-formed JSON of the wrong shape",
                                    "metadata not a mapping"])
def test_damaged_cache_entry_is_recompiled(fresh_cache, damage):
    first = _compile_copy()
    (path,) = _entries(fresh_cache)
    good = path.read_bytes()
    path.write_bytes({
        "garbage bytes": bytes(range(256)) * 3,
        "truncated": good[: len(good) // 3],
        "empty": b"",
        # a checksum that matches: only the payload's shape can tell
        "well-formed JSON of the wrong shape": _checksummed(fresh_cache, b'{"name": "k", "asm": [], "metadata": {}}'),
        "metadata not a mapping": _checksummed(fresh_cache, good.partition(b"\n")[2].replace(b'"metadata": {', b'"metadata": "x", "m": {', 1)),
    }[damage])
    fresh_cache.clear_memory()
    again = _compile_copy()                               # a miss: compiled again, not loaded, no crash
    assert again is not first and again.asm["ptx"] == first.asm["ptx"]
    fresh_cache.clear_memory()                             # and the entry written anew, whole
    (key,) = [p.stem for p in _entries(fresh_cache)]
    assert fresh_cache.lookup(key).asm["ptx"] == first.asm["ptx"]


@pytest.mark.parametrize("how", ["under a file", "read-only (chmod)"])
def test_unwritable_cache_directory_compiles_and_warns_once(fresh_cache, tmp_path, monkeypatch, how):
    if how == "under a file":
        # a path under a regular file cannot be created, whoever runs the test
        blocker = tmp_path / "a_file"
        blocker.write_text("not a directory")
        monkeypatch.setenv("TILEC_CACHE_DIR", str(blocker / "cache"))
    else:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            pytest.skip("root writes into read-only directories; the row above covers it")
        ro = tmp_path / "a_file"                           # named alike, so the pattern below holds
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
        monkeypatch.setenv("TILEC_CACHE_DIR", str(ro))
    with pytest.warns(RuntimeWarning, match=r"cannot write the compile cache under .*a_file.*TILEC_CACHE_DIR"):
        first = _compile_copy(16)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # once per process, not per kernel
        second = _compile_copy(32)
    assert first.asm["ptx"] and second.asm["ptx"] and first is not second


def test_full_disk_while_writing_the_cache(fresh_cache, monkeypatch):
    """ENOSPC from the write itself (/dev/full): the kernel compiles, no partial entry stays."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    import tempfile

    def mkstemp_on_a_full_disk(dir, prefix, suffix):
        return os.open("/dev/full", os.O_WRONLY), os.path.join(dir, prefix + "x" + suffix)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_on_a_full_disk)
    with pytest.warns(RuntimeWarning, match="cannot write the compile cache"):
        compiled = _compile_copy()
    assert compiled.asm["ptx"] and _entries(fresh_cache) == []
    assert not [p for p in (fresh_cache.cache_dir() / "kernels").rglob("*") if p.is_file()]


# ----------------------------------------------------------------------------- the tilec command
CLI_KERNEL = textwrap.dedent('''
    import tilec as tc


    @tc.kernel
    def scale(x, out, alpha, BLOCK: tc.constexpr):
        pid = tc.program_id(0)
        t = tc.load(x, index=(pid,), shape=(BLOCK,))
        tc.store(out, index=(pid,), tile=t * alpha)
''')
CLI_SIG = "x=f32[?],out=f32[?],alpha=f32,BLOCK=128"

# (id, argv with {f} for the kernel file, exit status, pattern on stderr)
CLI_ROWS = [
    ("no command", [], 2, r"usage: tilec"),
    ("unknown verb", ["bogus"], 2, r"invalid choice: 'bogus'"),
    ("ptx without a target", ["ptx"], 2, r"FILE:KERNEL"),
    ("missing file", ["ptx", "nofile.py:k"], 2, r"no such file: nofile.py"),
    ("target without a kernel", ["ptx", "{f}"], 2, r"expected FILE:KERNEL"),
    ("unknown kernel", ["ptx", "{f}:nokernel"], 2, r"no kernel named 'nokernel'; kernels in it: scale"),
    ("no --sig and no SIGNATURES", ["ptx", "{f}:scale"], 2, r"--sig is needed"),
    ("incomplete --sig", ["ptx", "{f}:scale", "--sig", "x=f32[?]"], 2, r"bad --sig: .*'out'"),
    ("bad dtype in --sig", ["ir", "{f}:scale", "--sig", CLI_SIG.replace("x=f32", "x=f99")], 2, r"x: unknown dtype 'f99'"),
    ("kernel that does not compile", ["ptx", "{f}:scale", "--sig", CLI_SIG.replace("128", "100")], 1,
     r"kernel_file\.py:\d+:\d+: in kernel 'scale': .*powers of two"),
    ("unknown arch", ["ptx", "{f}:scale", "--sig", CLI_SIG, "--arch", "sm_99"], 2, r"unsupported arch 'sm_99'"),
    ("bad --num-warps", ["ptx", "{f}:scale", "--sig", CLI_SIG, "--num-warps", "3"], 2, r"num_warps must be"),
    ("--num-warps not a number", ["llvm", "{f}:scale", "--sig", CLI_SIG, "--num-warps", "four"], 2,
     r"argument --num-warps: invalid int value: 'four'"),
    ("unknown pass", ["ir", "{f}:scale", "--sig", CLI_SIG, "--after", "nopass"], 2, r"unknown pass 'nopass'"),
    ("matmul with a bad dtype", ["ptx", "matmul", "--dtype", "f7", "--shape", "1,2,3"], 2, r"unknown dtype 'f7'"),
    ("matmul with two extents", ["ptx", "matmul", "--dtype", "bf16", "--shape", "1,2"], 2, r"--shape M,N,K"),
    ("cache with a bad action", ["cache", "frob"], 2, r"invalid choice: 'frob'"),
    ("unknown option", ["info", "--bad"], 2, r"unrecognized arguments: --bad"),
]


@pytest.fixture
def cli_kernel_file(tmp_path):
    path = tmp_path / "kernel_file.py"
    path.write_text(CLI_KERNEL)
    return path


@pytest.mark.parametrize("name, argv, status, pattern", CLI_ROWS, ids=[r[0] for r in CLI_ROWS])
def test_cli_verb(name, argv, status, pattern, cli_kernel_file, capsys, monkeypatch):
    from tilec.cli import main
    monkeypatch.delenv("TILEC_DEBUG", raising=False)
    argv = [a.replace("{f}", str(cli_kernel_file)) for a in argv]
    try:
        got = main(argv)
    except SystemExit as e:                   # argparse's own usage errors
        got = e.code
    err = capsys.readouterr().err
    assert got == status, err
    assert re.search(pattern, err), err
    assert "Traceback" not in err


@pytest.mark.slow
def test_cli_in_a_subprocess_prints_no_traceback(tmp_path):
    """What a user's shell sees: a file that raises on import, then a kernel that does not compile."""
    broken = tmp_path / "broken.py"
    broken.write_text("import tilec as tc\nraise RuntimeError('boom at import')\n")
    good = tmp_path / "kernel_file.py"
    good.write_text(CLI_KERNEL)
    env = {k: v for k, v in os.environ.items() if k != "TILEC_DEBUG"}
    for argv, status, pattern in [([f"{broken}:k"], 2, r"importing .*broken\.py failed: RuntimeError: boom at import"),
                                  ([f"{good}:scale", "--sig", CLI_SIG.replace("128", "100")], 1,
                                   r"kernel_file\.py:\d+:\d+: in kernel 'scale'")]:
        proc = subprocess.run([sys.executable, "-m", "tilec.cli", "ptx", *argv], capture_output=True, text=True,
                              timeout=120, env=env)
        assert proc.returncode == status, proc.stderr
        assert re.search(pattern, proc.stderr), proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""


# ----------------------------------------------------------------------------- importing tilec
def _installed_layout(root: Path) -> Path:
    """tilec laid out as a wheel installs it (one `tilec` folder, pyproject's package-dir
    mapping), under root/site; the source folders are linked, not copied."""
    import tilec
    repo = Path(tilec.__file__).resolve().parent.parent
    site = root / "site"
    (site / "tilec").mkdir(parents=True)
    for entry in (repo / "dsl").iterdir():
        (site / "tilec" / entry.name).symlink_to(entry)
    for sub in ("lowering", "runtime", "stdlib_kernels"):
        (site / "tilec" / sub).symlink_to(repo / sub)
    return site


@pytest.mark.slow
def test_a_folder_named_tilec_in_the_working_directory_does_not_shadow_an_install(tmp_path):
    """A checkout cloned as ./tilec, or any folder of that name without __init__.py, is at most
    a namespace package: an installed tilec (a regular package) still wins. (An editable
    install is shadowed by it: setuptools' finder comes after the path scan, pypa/setuptools#3557;
    README says to install with editable_mode=strict or run elsewhere.)"""
    site = _installed_layout(tmp_path)
    work = tmp_path / "work"
    (work / "tilec" / "examples").mkdir(parents=True)
    (work / "tilec" / "README.md").write_text("a checkout")
    env = dict(os.environ, PYTHONPATH=str(site))
    code = ("import tilec as tc, tilec.stdlib_kernels; print(tc.__file__); print(callable(tc.kernel), "
            "tilec.stdlib_kernels.softmax.__module__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert Path(first).parent == site / "tilec"
    assert second == "True tilec.stdlib_kernels.softmax"

