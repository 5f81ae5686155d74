"""PTX of every example and stdlib kernel, written to a folder, to check that a refactoring
leaves the generated code byte for byte as it was.

    python bench/ptx_snapshot.py OUT_DIR [-k SUBSTRING] [-j JOBS]
    python bench/ptx_snapshot.py OUT_DIR --compare BASE_DIR [--strip-lines]

Compiles every `SIGNATURES` entry of every examples/*.py file and of every
tilec.stdlib_kernels module (private ones included) for sm_80 and sm_90a with the
module's `OPTIONS`, as tests/test_ptxas.py does, every `EXTRA_SIGNATURES` entry
(kernel, signature) the same way, and every `SM90_SIGNATURES` entry (kernel, signature,
warps) for sm_90a only, with the options the cluster entry points use (num_warps=warps,
fast_math, cluster=C). ptxas runs as in a normal compile (it can change the PTX kept:
compiler._assemble). Each kernel writes `<module>.<kernel>.<n>.<arch>.ptx`, or `.err`
with the CompilationError's text when it fails. `--compare BASE_DIR` then lists every
file that differs from, or is missing in, BASE_DIR and exits 1 if there is any;
`--strip-lines` compares the instructions alone (line information, `.loc`/`.file`, taken out
of both sides: a snapshot with lineinfo on against one with it off, TILEC_LINEINFO=0).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
ARCHS = ("sm_80", "sm_90a")

Case = Tuple[str, str, str, str, str, Dict]   # (file stem, module ref, kernel, signature, arch, options)


def _modules() -> Iterator[Tuple[str, str]]:
    """(stem, how to import it): every example file and every stdlib module."""
    for path in sorted((ROOT / "examples").glob("*.py")):
        if not path.name.startswith("_"):
            yield f"examples.{path.stem}", str(path)
    import tilec.stdlib_kernels as pkg
    for info in pkgutil.iter_modules(pkg.__path__):
        yield f"stdlib.{info.name}", f"tilec.stdlib_kernels.{info.name}"


def _import(ref: str):
    if ref.endswith(".py"):
        sys.path.insert(0, str(ROOT / "examples"))  # examples import their _harness
        spec = importlib.util.spec_from_file_location(f"tilec_example_{Path(ref).stem}", ref)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(ref)


def cases() -> List[Case]:
    out: List[Case] = []
    for stem, ref in _modules():
        mod = _import(ref)
        options = getattr(mod, "OPTIONS", {})
        entries = [(k, s) for k, s in getattr(mod, "SIGNATURES", {}).items()] + list(getattr(mod, "EXTRA_SIGNATURES", []))
        for kernel, sig in entries:
            for arch in ARCHS:
                out.append((stem, ref, kernel, sig, arch, dict(options.get(kernel, {}))))
        for kernel, sig, warps in getattr(mod, "SM90_SIGNATURES", []):
            out.append((stem, ref, kernel, sig, "sm_90a", {"num_warps": warps, "fast_math": True, "cluster": None}))
    return out


def _compile(case: Case) -> Tuple[str, str]:
    from tilec.compiler import compile_kernel
    from tilec.errors import CompilationError
    from tilec.options import CompileOptions
    _, ref, kernel, sig, arch, options = case
    k = getattr(_import(ref), kernel)
    spec = k.specialization(sig)
    if "cluster" in options:   # SM90_SIGNATURES: the cluster entry points' C, else no cluster (MLA's wgmma kernel)
        options = dict(options, cluster=spec.constexprs.get("C", 1))
    try:
        return "ptx", compile_kernel(k, spec, CompileOptions(arch=arch, **options), use_cache=False).asm["ptx"]
    except CompilationError as e:
        return "err", str(e)


def snapshot(out: Path, only: str = "", jobs: int = 1) -> int:
    out.mkdir(parents=True, exist_ok=True)
    todo, seen = [], {}
    for case in cases():
        stem, _, kernel, sig, arch, _ = case
        n = seen.setdefault((stem, kernel, arch), 0)
        seen[(stem, kernel, arch)] = n + 1
        name = f"{stem}.{kernel}.{n}.{arch}"
        if only in name:
            todo.append((name, case))
    with ProcessPoolExecutor(jobs) as pool:
        for (name, case), (kind, text) in zip(todo, pool.map(_compile, [c for _, c in todo])):
            (out / f"{name}.{kind}").write_text(text)
            print(f"{name}.{kind}", flush=True)
    return len(todo)


def compare(out: Path, base: Path, strip_lines: bool = False) -> List[str]:
    """Files of `out` that differ from or are missing in `base`, and files of `base` missing in `out`
    (`strip_lines`: the PTX compared without its line information)."""
    from tilec.lowering.ptxas import strip_line_info
    mine = {p.name: p for p in out.iterdir()}
    theirs = {p.name: p for p in base.iterdir()}

    def text(p: Path) -> bytes:
        data = p.read_bytes()
        return strip_line_info(data.decode()).encode() if strip_lines and p.suffix == ".ptx" else data
    diff = [f"only in {out}: {n}" for n in sorted(set(mine) - set(theirs))]
    diff += [f"only in {base}: {n}" for n in sorted(set(theirs) - set(mine))]
    diff += [f"differs: {n}" for n in sorted(set(mine) & set(theirs)) if text(mine[n]) != text(theirs[n])]
    return diff


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder for the PTX files")
    p.add_argument("--compare", type=Path, metavar="BASE_DIR", help="only compare OUT with BASE_DIR")
    p.add_argument("--strip-lines", action="store_true",
                   help="with --compare: compare the instructions alone (no .loc/.file line information)")
    p.add_argument("-k", default="", help="only kernels whose file name contains this")
    p.add_argument("-j", type=int, default=1, help="compile in this many processes")
    args = p.parse_args(argv)
    if args.compare is not None:
        diff = compare(args.out, args.compare, args.strip_lines)
        print("\n".join(diff) if diff else f"identical: {len(list(args.out.iterdir()))} files")
        return 1 if diff else 0
    print(f"{snapshot(args.out, args.k, args.j)} kernels written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
