"""The compile cache: compiled kernels in memory and on disk under TILEC_CACHE_DIR.

The compiler builds the key (a hex digest over source, specialization, options,
arch and tilec version) and calls `lookup(key)` before compiling and
`store(key, compiled)` after. One file per key holds everything the runtime
needs (PTX, cubin if any, metadata, parameter slots):

    TILEC1 <sha256 of payload>\n<payload: JSON>

Files are written to a temporary file in the same directory and renamed over
the final name (atomic on POSIX), so readers see a whole old file, a whole new
file or none. A file whose checksum does not match (truncated, edited, written
by a dying process on a filesystem without atomic rename) is deleted and
reported as a miss: the kernel is recompiled, never loaded from it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Dict, Optional, Tuple

from ..abi import ParamSlot
from ..compiled import CompiledKernel
from ..dtypes import DType

__all__ = ["lookup", "store", "cache_dir", "clear_memory", "entry_path", "MAGIC", "SUBDIRS", "usage", "clear"]

MAGIC = b"TILEC1"
_KEY_RE = re.compile(r"[0-9A-Za-z_.-]{1,200}")

_memory: Dict[str, CompiledKernel] = {}
_lock = threading.Lock()
_warned_unwritable = False


def cache_dir() -> Path:
    """The on-disk cache directory: $TILEC_CACHE_DIR, else ~/.cache/tilec."""
    env = os.environ.get("TILEC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "tilec"


# What tilec writes under cache_dir(): compiled kernels, and autotune's chosen configs.
SUBDIRS = ("kernels", "autotune")


def _files(sub: str):
    root = cache_dir() / sub
    return [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []


def usage() -> Dict[str, Tuple[int, int]]:
    """{subdirectory: (files, bytes)} of the disk cache (`SUBDIRS`, each present or not)."""
    out = {}
    for sub in SUBDIRS:
        sizes = []
        for p in _files(sub):
            try:
                sizes.append(p.stat().st_size)
            except OSError:  # removed meanwhile
                pass
        out[sub] = (len(sizes), sum(sizes))
    return out


def clear() -> Dict[str, Tuple[int, int]]:
    """Delete the disk cache's files (only those of `SUBDIRS`: a TILEC_CACHE_DIR may hold
    other things) and forget the in-memory entries; {subdirectory: (files, bytes) removed}."""
    clear_memory()
    out = {}
    for sub in SUBDIRS:
        n = size = 0
        for p in _files(sub):
            try:
                b = p.stat().st_size
                p.unlink()
            except OSError:
                continue
            n, size = n + 1, size + b
        for d in sorted((d for d in (cache_dir() / sub).rglob("*") if d.is_dir()), reverse=True):
            try:
                d.rmdir()   # empty by now, deepest first
            except OSError:
                pass
        out[sub] = (n, size)
    return out


def entry_path(key: str) -> Path:
    return cache_dir() / "kernels" / key[:2] / f"{key}.json"


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be a short string of letters, digits, '_', '.', '-'; got {key!r}")


def clear_memory() -> None:
    """Forget the in-memory entries (the disk cache stays)."""
    with _lock:
        _memory.clear()


def lookup(key: str) -> Optional[CompiledKernel]:
    """The compiled kernel stored under `key` (memory, then disk), or None."""
    _check_key(key)
    hit = _memory.get(key)
    if hit is not None:
        return hit
    compiled = _read(entry_path(key))
    if compiled is not None:
        with _lock:
            compiled = _memory.setdefault(key, compiled)
    return compiled


def store(key: str, compiled: CompiledKernel) -> None:
    """Keep `compiled` in memory and write it to disk (best effort: see module doc)."""
    _check_key(key)
    with _lock:
        _memory[key] = compiled
    _write(entry_path(key), compiled)


# serialization ---------------------------------------------------------------

def _encode(compiled: CompiledKernel) -> bytes:
    asm = {}
    for stage, text in compiled.asm.items():
        if isinstance(text, (bytes, bytearray)):
            asm[stage] = {"b64": base64.b64encode(bytes(text)).decode("ascii")}
        elif isinstance(text, str):
            asm[stage] = {"text": text}
    doc = {
        "name": compiled.name,
        "asm": asm,
        "metadata": compiled.metadata,
        "params": [[p.arg, p.kind, p.dtype.name if p.dtype is not None else None, p.dim, list(p.box)]
                   for p in compiled.params],
        "arg_names": list(compiled.arg_names),
    }
    return json.dumps(doc, sort_keys=True, default=_json_default).encode("utf-8")


def _json_default(obj):
    if isinstance(obj, DType):
        return obj.name
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} in kernel metadata cannot be cached")


def _decode(payload: bytes) -> CompiledKernel:
    doc = json.loads(payload.decode("utf-8"))
    if not (isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and isinstance(doc.get("name"), str)):
        raise ValueError("not a compiled-kernel entry")  # the launcher reads these without checking
    asm = {stage: (base64.b64decode(v["b64"]) if "b64" in v else v["text"]) for stage, v in doc["asm"].items()}
    params = [ParamSlot(arg, kind, DType.get(dt) if dt is not None else None, dim, tuple(box[0]) if box else ())
              for arg, kind, dt, dim, *box in doc["params"]]  # box: tensor-map slots (older entries lack it)
    return CompiledKernel(name=doc["name"], asm=asm, metadata=doc["metadata"],
                          params=params, arg_names=list(doc["arg_names"]))


def _read(path: Path) -> Optional[CompiledKernel]:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header, sep, payload = data.partition(b"\n")
    parts = header.split(b" ")
    ok = (sep == b"\n" and len(parts) == 2 and parts[0] == MAGIC
          and hashlib.sha256(payload).hexdigest().encode("ascii") == parts[1])
    if ok:
        try:
            return _decode(payload)
        except (ValueError, KeyError, TypeError, AttributeError):  # a payload of the wrong shape
            ok = False
    # A damaged entry: remove it so that the recompiled kernel replaces it.
    try:
        path.unlink()
    except OSError:
        pass
    return None


def _write(path: Path, compiled: CompiledKernel) -> None:
    try:
        payload = _encode(compiled)
    except TypeError as e:
        warnings.warn(f"tilec: kernel '{compiled.name}' not written to the disk cache: {e}", stacklevel=3)
        return
    blob = MAGIC + b" " + hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _warn_unwritable(path.parent, e)


def _warn_unwritable(where: Path, err: OSError) -> None:
    global _warned_unwritable
    if not _warned_unwritable:
        _warned_unwritable = True
        warnings.warn(f"tilec: cannot write the compile cache under {where} ({err.strerror or err}); "
                      f"kernels are compiled anyway but not kept across runs. Set TILEC_CACHE_DIR "
                      f"to a writable directory.", RuntimeWarning, stacklevel=4)
