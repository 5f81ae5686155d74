"""The import layers of the tilec package (docs/internals.md, "Layers"), checked statically.

Every .py under dsl/, lowering/, runtime/ and stdlib_kernels/ is parsed with `ast`; each
import (at module level or inside a function) becomes an edge between tilec.* module
names. A module may import modules of lower layers and of its own component; components
that share a layer are independent (the runtime never imports the frontend, ...).
Implicit imports of parent packages are not edges: `tilec/__init__.py` is the package's
facade and imports almost everything, so it sits near the top and nothing imports it by name.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, NamedTuple, Set

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"dsl": "tilec", "lowering": "tilec.lowering", "runtime": "tilec.runtime",
           "stdlib_kernels": "tilec.stdlib_kernels"}

# Lowest first. Each layer maps component names to the module prefixes they hold.
LAYERS: List[Dict[str, List[str]]] = [
    {"base": ["tilec.version", "tilec.dtypes", "tilec.errors", "tilec.target", "tilec.options", "tilec.grid",
              "tilec.limits"]},
    {"ir": ["tilec.ir", "tilec.abi", "tilec.compiled", "tilec.remarks", "tilec.workcount",
            "tilec.roofline"]},
    {"language": ["tilec.language", "tilec.definition", "tilec.random", "tilec.specialize"]},
    {"runtime": ["tilec.runtime"], "frontend": ["tilec.frontend"], "interpreter": ["tilec.interpreter"]},
    {"lowering": ["tilec.lowering"]},
    {"compiler": ["tilec.compiler"]},
    {"kernel": ["tilec.kernel", "tilec.autotune"]},
    {"api": ["tilec"]},
    {"stdlib": ["tilec.stdlib_kernels"]},
    {"cli": ["tilec.cli", "tilec.info", "tilec.explain"], "torch": ["tilec.nn", "tilec.integrations"]},
]


class Import(NamedTuple):
    source: str   # importing module
    target: str   # imported module
    where: str    # file:line


def module_files() -> Dict[str, Path]:
    """tilec.* module name -> file (packages by their __init__.py)."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package] + parts)] = path
    return out


def imports(modules: Dict[str, Path]) -> List[Import]:
    edges = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for t in targets:
                while t not in modules and "." in t:
                    t = t.rpartition(".")[0]
                if t in modules and t != name:
                    edges.append(Import(name, t, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return edges


def component_of(module: str):
    """(layer index, component name) of a module: the longest prefix in LAYERS that holds it."""
    best = None
    for i, layer in enumerate(LAYERS):
        for comp, prefixes in layer.items():
            for p in prefixes:
                if (module == p or (p != "tilec" and module.startswith(p + "."))) and \
                        (best is None or len(p) > best[2]):
                    best = (i, comp, len(p))
    return None if best is None else best[:2]


def violations(edges: List[Import]) -> List[str]:
    out = []
    for e in edges:
        (ls, cs), (lt, ct) = component_of(e.source), component_of(e.target)
        if cs == ct or lt < ls:
            continue
        why = "a layer above it" if lt > ls else "an independent component of its layer"
        out.append(f"{e.where}: {e.source} ({cs}) imports {e.target} ({ct}: {why})")
    return out


def cycles(edges: List[Import]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: Dict[str, Set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


MODULES = module_files()
EDGES = imports(MODULES)


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if component_of(m) is None)
    assert not missing, "modules missing from the layer table (tests/test_layers.py LAYERS): " + ", ".join(missing)


def test_no_import_goes_up_or_across_a_layer():
    bad = violations(EDGES)
    assert not bad, "imports against the layers (docs/internals.md):\n" + "\n".join(bad)


def test_no_cycle_spans_two_components():
    # in particular none between the runtime and the compiler side
    bad = [c for c in cycles(EDGES) if len({component_of(m) for m in c}) > 1]
    assert not bad, "import cycles across components: " + "; ".join(" <-> ".join(c) for c in bad)


def test_the_graph_sees_function_level_and_relative_imports():
    # kernel.py imports the frontend inside Kernel.ir, the interpreter inside _interpret
    targets = {e.target for e in EDGES if e.source == "tilec.kernel"}
    assert {"tilec.frontend", "tilec.interpreter", "tilec.runtime.launcher", "tilec.compiler"} <= targets


def test_the_checks_report_an_upward_import_and_a_cycle():
    up = Import("tilec.runtime.launcher", "tilec.compiler", "runtime/launcher.py:7")
    down = Import("tilec.compiler", "tilec.runtime.cache", "dsl/compiler.py:9")
    across = Import("tilec.runtime.module", "tilec.frontend.calls", "runtime/module.py:3")
    assert violations([down]) == []
    assert violations([up, across]) == [
        "runtime/launcher.py:7: tilec.runtime.launcher (runtime) imports tilec.compiler (compiler: a layer above it)",
        "runtime/module.py:3: tilec.runtime.module (runtime) imports tilec.frontend.calls "
        "(frontend: an independent component of its layer)"]
    assert cycles([up, down]) == []  # launcher -> compiler -> cache: no way back
    loop = [up, Import("tilec.compiler", "tilec.runtime.launcher", "dsl/compiler.py:9")]
    assert cycles(loop) == [["tilec.compiler", "tilec.runtime.launcher"]]
