"""Every example and every stdlib kernel compiles to PTX for sm_80 and sm_90a, and ptxas
assembles it with no spills, no warnings and no serialized wgmmas.

Kernels are found through the `SIGNATURES` dict of each file in examples/ and of each
module of tilec.stdlib_kernels (see docs/internals.md); an optional `OPTIONS` dict of
the same module gives a kernel's default compile options (e.g. {"k": {"num_warps": 8}}). Without ptxas these tests fail:
install the test extra (`pip install -e .[test]`, which brings the nvidia-cuda-nvcc wheel).
"""
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

import pytest

from tilec.compiler import compile_kernel
from tilec.lowering.ptxas import find_ptxas
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from ptxas_checks import assert_assembles_clean

pytestmark = pytest.mark.slow   # compiles or builds everything: the full run only

ROOT = Path(__file__).resolve().parent.parent
ARCHS = ("sm_80", "sm_90a")


def _example_modules():
    sys.path.insert(0, str(ROOT / "examples"))  # examples import their _harness
    for path in sorted((ROOT / "examples").glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"tilec_example_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield f"examples/{path.name}", mod


def _stdlib_modules():
    import tilec.stdlib_kernels as pkg
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            yield f"stdlib_kernels/{info.name}", importlib.import_module(f"tilec.stdlib_kernels.{info.name}")


def _cases():
    out = []
    for where, mod in list(_example_modules()) + list(_stdlib_modules()):
        options = getattr(mod, "OPTIONS", {})
        for name, sig in getattr(mod, "SIGNATURES", {}).items():
            for arch in ARCHS:
                out.append(pytest.param(mod, name, sig, arch, options.get(name, {}), id=f"{where}:{name}-{arch}"))
    return out


CASES = _cases()


def test_ptxas_is_installed():
    assert find_ptxas(), ("ptxas not found on PATH or in the nvidia-cuda-nvcc wheel: "
                          "`pip install -e .[test]` installs it")


def test_examples_are_found():
    assert CASES, "no kernels with SIGNATURES found under examples/ or tilec.stdlib_kernels"


@pytest.mark.parametrize("mod,name,sig,arch,options", CASES)
def test_assembles_without_spills(mod, name, sig, arch, options):
    kernel = getattr(mod, name)
    compiled = compile_kernel(kernel, parse_signature(kernel, sig), CompileOptions(arch=arch, **options),
                              use_cache=False)
    assert f".target {arch}" in compiled.asm["ptx"]
    # the compiler ran ptxas (it raises with ptxas's message when the PTX is rejected)
    assert compiled.asm.get("cubin"), "the compiler did not run ptxas"
    report = compiled.metadata["ptxas"]
    assert_assembles_clean(report)
