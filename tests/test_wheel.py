"""The wheel holds every source file of every subpackage, and the IR grammar.

The build runs on a copy of the package folders, so that it leaves no build/ or
*.egg-info behind in the checkout.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow   # compiles or builds everything: the full run only

ROOT = Path(__file__).resolve().parent.parent
# source folder -> import name, as pyproject.toml's [tool.setuptools.package-dir] maps them
PACKAGE_ROOTS = {"dsl": "tilec", "lowering": "tilec/lowering", "runtime": "tilec/runtime",
                 "stdlib_kernels": "tilec/stdlib_kernels"}
REQUIRED_PACKAGES = ["tilec", "tilec/ir", "tilec/frontend", "tilec/interpreter", "tilec/lowering",
                     "tilec/lowering/passes", "tilec/runtime", "tilec/stdlib_kernels"]


def _build_command(out: Path):
    if importlib.util.find_spec("build") is not None:
        # the installed setuptools may be older than pyproject's floor: no dependency check
        return [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
                "--outdir", str(out), "."]
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), "."]


def _expected_files():
    """Wheel paths of every source file that must ship: all .py files and the grammar."""
    expected = set()
    for src, dest in PACKAGE_ROOTS.items():
        for f in (ROOT / src).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".lark"):
                expected.add(f"{dest}/{f.relative_to(ROOT / src).as_posix()}")
    return expected


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if importlib.util.find_spec("wheel") is None and importlib.util.find_spec("build") is None:
        pytest.fail("building the wheel needs the 'build' or 'wheel' package (pip install build)")
    work = tmp_path_factory.mktemp("wheel_src")
    for name in ["pyproject.toml", "README.md", "LICENSE"]:
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, work / name)
    for src in PACKAGE_ROOTS:
        if (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, work / src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (work / src).mkdir()
    out = work / "dist"
    proc = subprocess.run(_build_command(out), cwd=work, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"wheel build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    wheels = list(out.glob("tilec-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, got {wheels}"
    return wheels[0]


@pytest.fixture(scope="module")
def wheel_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


def test_every_source_file_is_in_the_wheel(wheel_names):
    missing = sorted(_expected_files() - wheel_names)
    folders = sorted({m.rsplit("/", 1)[0].replace("/", ".") for m in missing})
    assert not missing, (f"the wheel misses {len(missing)} files; add these packages to "
                         f"[tool.setuptools] packages in pyproject.toml: {folders}")


def _source_folder(pkg: str) -> Path:
    for src, dest in sorted(PACKAGE_ROOTS.items(), key=lambda kv: -len(kv[1])):
        if pkg == dest or pkg.startswith(dest + "/"):
            return ROOT / src / pkg[len(dest):].lstrip("/")
    raise KeyError(pkg)


@pytest.mark.parametrize("pkg", REQUIRED_PACKAGES)
def test_required_subpackage_is_in_the_wheel(wheel_names, pkg):
    assert list(_source_folder(pkg).glob("*.py")), f"{pkg} has no source files"
    shipped = [n for n in wheel_names if n.startswith(pkg + "/") and n.count("/") == pkg.count("/") + 1]
    assert any(n.endswith(".py") for n in shipped), f"{pkg} is not in the wheel"


def test_grammar_is_in_the_wheel(wheel_names):
    assert "tilec/ir/grammar.lark" in wheel_names


def test_console_script_is_declared(wheel, wheel_names):
    entry = [n for n in wheel_names if n.endswith(".dist-info/entry_points.txt")]
    assert entry, "the wheel declares no entry points"
    with zipfile.ZipFile(wheel) as z:
        text = z.read(entry[0]).decode()
    assert "tilec = tilec.cli:main" in text
