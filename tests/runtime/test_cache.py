"""Compile cache: round trip, checksum, atomic concurrent writers, unwritable directory."""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import warnings

import pytest

from tilec.abi import ParamSlot
from tilec.compiled import CompiledKernel
from tilec.dtypes import float32, int32
from tilec.runtime import cache


def fake_compiled(tag: str, cubin: bool = True) -> CompiledKernel:
    ptx = f"// kernel {tag}\n.version 7.8\n.target sm_90a\n" + "mov.u32 %r1, 1;\n" * 200
    asm = {"ptx": ptx, "tile": f"tile.func @{tag}"}
    if cubin:
        asm["cubin"] = bytes(range(256)) * 4 + tag.encode()
    return CompiledKernel(tag, asm, {"num_warps": 4, "shared": 1024, "arch": "sm_90a", "tag": tag},
                          [ParamSlot(0, "ptr", float32), ParamSlot(0, "shape", int32, 0),
                           ParamSlot(1, "scalar", float32)], ["x", "alpha"])


def same(a: CompiledKernel, b: CompiledKernel) -> bool:
    return (a.name, a.asm, a.metadata, a.params, a.arg_names) == (b.name, b.asm, b.metadata, b.params, b.arg_names)


def test_round_trip_through_disk(cache_dir):
    ck = fake_compiled("k1")
    assert cache.lookup("abc123") is None
    cache.store("abc123", ck)
    assert cache.lookup("abc123") is ck            # memory
    cache.clear_memory()
    back = cache.lookup("abc123")                  # disk
    assert back is not ck and same(back, ck)
    assert isinstance(back.asm["cubin"], bytes) and back.params[1].dtype is int32
    assert cache.entry_path("abc123").is_file()
    assert not [p for p in cache.entry_path("abc123").parent.iterdir() if p.suffix == ".tmp"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_entry_is_dropped_not_loaded(cache_dir, damage):
    cache.store("deadbeef", fake_compiled("good"))
    cache.clear_memory()
    path = cache.entry_path("deadbeef")
    data = path.read_bytes()
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        i = len(data) - 40
        data = data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
    elif damage == "garbage":
        data = b"\x00\xff" * 50
    else:
        data = b""
    path.write_bytes(data)
    assert cache.lookup("deadbeef") is None        # detected: a miss, so the caller recompiles
    assert not path.exists()
    cache.store("deadbeef", fake_compiled("recompiled"))
    cache.clear_memory()
    assert cache.lookup("deadbeef").name == "recompiled"


def test_bad_key_rejected(cache_dir):
    with pytest.raises(ValueError, match="cache key"):
        cache.lookup("../escape")


def test_unwritable_dir_warns_once_and_keeps_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILEC_CACHE_DIR", str(blocker / "sub"))
    monkeypatch.setattr(cache, "_warned_unwritable", False)
    cache.clear_memory()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        cache.store("k1", fake_compiled("a"))
        cache.store("k2", fake_compiled("b"))
    msgs = [str(w.message) for w in rec if "compile cache" in str(w.message)]
    assert len(msgs) == 1 and "TILEC_CACHE_DIR" in msgs[0]
    assert cache.lookup("k1").name == "a"
    cache.clear_memory()


def _worker(args):
    directory, wid = args
    os.environ["TILEC_CACHE_DIR"] = directory
    from tilec.runtime import cache as c
    bad = 0
    for rnd in range(15):
        for key, tag in (("shared0", "shared"), (f"own{wid}", f"own{wid}"), ("shared1", "shared")):
            c.clear_memory()
            got = c.lookup(key)
            if got is None:
                c.store(key, fake_compiled(tag))
            elif not same(got, fake_compiled(tag)):
                bad += 1
    return bad


@pytest.mark.slow
def test_eight_processes_share_one_directory(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Pool(8) as pool:
        bad = pool.map(_worker, [(str(tmp_path), i) for i in range(8)])
    assert bad == [0] * 8
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert not [f for f in files if f.endswith(".tmp")]
    assert len(files) == 10  # shared0, shared1, own0..own7


def test_eight_threads_share_one_directory(cache_dir):
    errors = []

    def run(wid):
        try:
            assert _worker((str(cache_dir), wid)) == 0
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len([p for p in cache_dir.rglob("*.json")]) == 10
