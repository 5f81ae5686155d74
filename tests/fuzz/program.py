"""A generated test case: kernel source text, its arguments, its grid, and how to compare
each output. Plain data, saved to and read from JSON (tests/fuzz/regressions/)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

KERNEL = "fuzz_kernel"  # every generated module defines its kernel under this name


@dataclass
class Program:
    source: str                        # a module: `import tilec as tc` + one `@tc.kernel def fuzz_kernel`
    args: List[Tuple[str, Any]]        # in parameter order: numpy arrays and Python / numpy scalars
    grid: Tuple[int, ...]
    # output array name -> absolute error bound per element (0.0: bit-for-bit)
    outputs: Dict[str, float]
    options: Dict[str, Any] = field(default_factory=dict)   # launch options (num_warps, ...)
    features: List[str] = field(default_factory=list)       # what it exercises (coverage counts)

    def arrays(self) -> Dict[str, np.ndarray]:
        return {n: v for n, v in self.args if isinstance(v, np.ndarray)}

    def fresh_args(self) -> List[Any]:
        """The arguments with every array copied (each run writes its own)."""
        return [v.copy() if isinstance(v, np.ndarray) else v for _, v in self.args]

    def load_kernel(self):
        """Import the source as a module (tilec reads a kernel's source from its file) and
        return its kernel."""
        digest = hashlib.sha1(self.source.encode()).hexdigest()[:16]
        name = f"tilec_fuzz_{digest}"
        mod = sys.modules.get(name)
        if mod is None:
            path = _source_dir() / f"{name}.py"
            if not path.exists():
                path.write_text(self.source)
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules[name] = mod
        return getattr(mod, KERNEL)

    # JSON ----------------------------------------------------------------------------
    def to_json(self) -> dict:
        args = []
        for n, v in self.args:
            if isinstance(v, np.ndarray):
                args.append({"name": n, "array": str(v.dtype), "shape": list(v.shape), "data": v.ravel().tolist()})
            elif isinstance(v, np.generic):
                args.append({"name": n, "numpy": str(v.dtype), "value": v.item()})
            else:
                args.append({"name": n, "value": v})
        return {"source": self.source, "args": args, "grid": list(self.grid), "outputs": self.outputs,
                "options": self.options, "features": self.features}

    @classmethod
    def from_json(cls, d: dict) -> "Program":
        args = []
        for a in d["args"]:
            if "array" in a:
                v = np.array(a["data"], dtype=np.float64 if a["array"].startswith("float") else None)
                v = v.astype(a["array"]).reshape(a["shape"])
            elif "numpy" in a:
                v = np.dtype(a["numpy"]).type(a["value"])
            else:
                v = a["value"]
            args.append((a["name"], v))
        return cls(d["source"], args, tuple(d["grid"]), dict(d["outputs"]), dict(d.get("options", {})),
                   list(d.get("features", [])))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)


_DIR = None


def _source_dir() -> Path:
    global _DIR
    if _DIR is None:
        _DIR = Path(tempfile.mkdtemp(prefix="tilec-fuzz-src-"))
    return _DIR
