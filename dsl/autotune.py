"""@tc.autotune: pick the fastest of several launch configurations, once per key.

    @tc.autotune(configs=[tc.Config({"BLOCK": 128}, num_warps=4),
                          tc.Config({"BLOCK": 256}, num_warps=8)],
                 key=["n"])
    @tc.kernel
    def add(x, y, out, n, BLOCK: tc.constexpr): ...

    add[lambda meta: (tc.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, n)

On the first launch for a new value of the `key` arguments (for an array:
its shape and dtype), every config is compiled and timed with CUDA events
(`warmup` launches, then the median of `rep` timed rounds), a progress line is
shown on a terminal, and the winner is used from then on. The winner is also
written to `<TILEC_CACHE_DIR>/autotune/` per (kernel source hash, key values,
device name, tilec version), so a later process skips the search.

TILEC_AUTOTUNE=off, and running under the interpreter, use the first config.
Configs that fail to compile or launch (too much shared memory, say) are skipped.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import statistics
import sys
from typing import Dict, Iterable, List, Optional, Sequence

from .errors import CompilationError, DriverError
from .options import OPTION_FIELDS
from .runtime import cache, driver
from .runtime.launcher import KernelState
from .runtime.stream import Event

__all__ = ["Config", "autotune", "Autotuner"]


class Config:
    """Constexpr values plus launch options for one autotuning candidate: num_warps,
    num_stages and any other compile option (warp_specialize=True, persistent=True, tma=False,
    fast_math=True, ...)."""

    def __init__(self, kwargs: Optional[dict] = None, num_warps: int = 4, num_stages: int = 3, **options):
        bad = sorted(set(options) - set(OPTION_FIELDS) | ({"num_warps", "num_stages"} & set(options)))
        if bad:
            raise TypeError(f"tc.Config got unknown option(s) {', '.join(bad)}; options are: "
                            f"{', '.join(OPTION_FIELDS)}")
        self.kwargs = dict(kwargs or {})
        self.num_warps, self.num_stages = num_warps, num_stages
        self.options = dict(options)

    def launch_kwargs(self) -> dict:
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages, **self.options}

    def to_json(self) -> dict:
        doc = {"kwargs": self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.options:
            doc["options"] = self.options
        return doc

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True, default=str))

    def __repr__(self) -> str:
        kw = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"Config({kw}, num_warps={self.num_warps}, num_stages={self.num_stages}{opts})"


def autotune(configs: Sequence[Config], key: Iterable[str], warmup: int = 3, rep: int = 10):
    """Decorator: wrap a tc.kernel so that each launch uses the best of `configs` for its `key`."""
    configs = list(configs)
    if not configs or not all(isinstance(c, Config) for c in configs):
        raise ValueError("autotune needs a non-empty list of tc.Config")

    def wrap(kernel):
        return Autotuner(kernel, configs, list(key), warmup, rep)
    return wrap


def _key_value(v):
    shape = getattr(v, "shape", None)
    if shape is not None and not isinstance(v, (int, float)):
        return ("array", tuple(int(s) for s in shape), str(getattr(v, "dtype", "")))
    return v


def _tilec_version() -> str:
    try:
        from importlib.metadata import version  # noqa: PLC0415
        return version("tilec")
    except Exception:  # noqa: BLE001 - an uninstalled checkout
        return "dev"


class Autotuner:
    """A kernel plus its candidate configs; `autotuner[grid](*args)` launches the best one."""

    def __init__(self, kernel, configs: List[Config], key: List[str], warmup: int, rep: int):
        self.kernel, self.configs, self.key = kernel, configs, key
        self.warmup, self.rep = warmup, rep
        self.best: Dict[tuple, Config] = {}
        self.timings: Dict[tuple, Dict[Config, float]] = {}
        # the kernel's parameters, as the launcher reads them
        self._state = getattr(kernel, "launch_state", None) or KernelState(kernel)
        unknown = [k for k in key if k not in self._state.params]
        if unknown:
            raise ValueError(f"autotune key {unknown} names no parameter of kernel '{self._state.name}' "
                             f"(parameters: {', '.join(self._state.params)})")
        self.__name__ = self._state.name

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            return self.run(grid, args, kwargs)
        return run

    def __getattr__(self, name):  # kernel.ir(...), .source_hash(), ... pass through
        if name in ("kernel", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.kernel, name)

    def run(self, grid, args, kwargs):
        cfg = self._choose(grid, args, kwargs)
        return self.kernel[grid](*args, **kwargs, **cfg.launch_kwargs())

    # choosing ------------------------------------------------------------------
    def _choose(self, grid, args, kwargs) -> Config:
        if len(self.configs) == 1 or os.environ.get("TILEC_AUTOTUNE", "").lower() in ("off", "0", "false") \
                or _interpreting():
            return self.configs[0]
        named = dict(zip(self._state.params, args))
        named.update(kwargs)
        keyvals = tuple(_key_value(named.get(k)) for k in self.key)
        cfg = self.best.get(keyvals)
        if cfg is None:
            cfg = self._load(keyvals) or self._tune(keyvals, grid, args, kwargs)
            self.best[keyvals] = cfg
        return cfg

    def _record_path(self, keyvals):
        src = self.kernel.source_hash() if hasattr(self.kernel, "source_hash") else _source_hash(self.kernel)
        what = json.dumps([src, repr(keyvals), driver.get_device().name, _tilec_version(),
                           [c.to_json() for c in self.configs]], default=str)
        digest = hashlib.sha256(what.encode()).hexdigest()[:40]
        return cache.cache_dir() / "autotune" / f"{self._state.name}-{digest}.json"

    def _load(self, keyvals) -> Optional[Config]:
        try:
            doc = json.loads(self._record_path(keyvals).read_text())
            cfg = Config(doc["kwargs"], doc["num_warps"], doc["num_stages"], **doc.get("options", {}))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return cfg if cfg in self.configs else None

    def _save(self, keyvals, cfg: Config) -> None:
        path = self._record_path(keyvals)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cfg.to_json(), default=str))
            os.replace(tmp, path)
        except OSError:
            pass  # the choice still holds for this process

    def _tune(self, keyvals, grid, args, kwargs) -> Config:
        results: Dict[Config, float] = {}
        progress = _Progress(f"autotuning {self._state.name}", len(self.configs))
        for cfg in self.configs:
            results[cfg] = self._bench(grid, args, kwargs, cfg)
            progress.step(f"{cfg} {results[cfg]:.4f} ms" if results[cfg] != float("inf") else f"{cfg} failed")
        progress.close()
        self.timings[keyvals] = results
        best = min(self.configs, key=lambda c: results[c])
        if results[best] == float("inf"):
            # Every config failed: launch the first to show its error.
            return self.configs[0]
        self._save(keyvals, best)
        return best

    def _bench(self, grid, args, kwargs, cfg: Config) -> float:
        launch = self.kernel[grid]
        extra = {**kwargs, **cfg.launch_kwargs()}
        try:
            for _ in range(max(self.warmup, 1)):
                launch(*args, **extra)
            start, end = Event(), Event()
            times = []
            for _ in range(self.rep):
                start.record(extra.get("stream"))
                launch(*args, **extra)
                end.record(extra.get("stream"))
                end.synchronize()
                times.append(start.elapsed_time(end))
        except (CompilationError, ValueError) as e:
            _note(f"config {cfg} skipped: {str(e).splitlines()[0]}")
            return float("inf")
        except DriverError as e:
            if "unusable" in str(e):
                raise
            _note(f"config {cfg} skipped: {str(e).splitlines()[0]}")
            return float("inf")
        return statistics.median(times)


def _interpreting() -> bool:
    if os.environ.get("TILEC_INTERPRET", "") not in ("", "0"):
        return True
    lang = sys.modules.get("tilec.language")
    return bool(lang is not None and getattr(lang, "interpreting", lambda: False)())


def _source_hash(kernel) -> str:
    fn = getattr(kernel, "fn", None) or kernel
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        src = getattr(fn, "__qualname__", repr(fn))
    return hashlib.sha256(src.encode()).hexdigest()


def _note(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"tilec: {msg}", file=sys.stderr)


class _Progress:
    """tqdm on a terminal when installed, else one rewritten status line; silent when not a tty."""

    def __init__(self, title: str, total: int):
        self.enabled = sys.stderr.isatty()
        self.title, self.total, self.done, self.bar = title, total, 0, None
        if self.enabled:
            try:
                from tqdm import tqdm  # noqa: PLC0415
                self.bar = tqdm(total=total, desc=title, leave=False, file=sys.stderr)
            except ImportError:
                self.bar = None

    def step(self, what: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(what)
            self.bar.update(1)
        else:
            sys.stderr.write(f"\r{self.title}: {self.done}/{self.total} {what}\033[K")
            sys.stderr.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        else:
            sys.stderr.write("\n")
