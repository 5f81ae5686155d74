"""Golden-text tests of the passes: every tests/golden/<pass>/*.ir file is one test.

The file format (directives in `//` comments, the rest is IR) is described in
tests/golden/README.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from tilec.errors import CompilationError
from tilec.ir import parse, print_module, verify
from tilec.lowering.pipeline import pass_names, run_passes
from tilec.options import CompileOptions
from tilec.target import Target

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
FILES = sorted(GOLDEN.glob("*/*.ir"))

_DIRECTIVE = re.compile(r"^\s*//\s*(RUN|OPTIONS|CHECK|CHECK-NEXT|CHECK-NOT|CHECK-ERROR):(.*)$")


@dataclass
class GoldenCase:
    passes: List[str]
    options: CompileOptions
    checks: List[Tuple[str, str]] = field(default_factory=list)  # (kind, text)
    error: Optional[str] = None


def _squash(text: str) -> str:
    return " ".join(text.split())


def _parse_options(text: str) -> CompileOptions:
    fields = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, _, raw = item.partition("=")
        raw = raw.strip()
        value = {"true": True, "false": False}.get(raw, int(raw) if re.fullmatch(r"-?\d+", raw) else raw)
        fields[key.strip()] = value
    return CompileOptions(**fields).validated(Target.default())  # no arch: sm_90a, whatever the machine


def parse_directives(text: str) -> GoldenCase:
    case = GoldenCase(passes=[], options=CompileOptions().validated(Target.default()))
    for line in text.splitlines():
        m = _DIRECTIVE.match(line)
        if not m:
            continue
        kind, body = m.group(1), m.group(2).strip()
        if kind == "RUN":
            case.passes += [p.strip() for p in body.split(",") if p.strip()]
        elif kind == "OPTIONS":
            case.options = _parse_options(body)
        elif kind == "CHECK-ERROR":
            case.error = body
        else:
            case.checks.append((kind, _squash(body)))
    if not case.passes:
        raise ValueError("a golden file needs a '// RUN: pass,pass' line")
    return case


def match_checks(output: str, checks: List[Tuple[str, str]]) -> None:
    """FileCheck-style matching on lines (whitespace runs compare equal).

    CHECK: the text occurs on a line after the previous match; CHECK-NEXT: on the very
    next line; CHECK-NOT: on no line between the previous match and the next one (or
    the end). Raises AssertionError describing the first failure.
    """
    lines = [_squash(x) for x in output.splitlines()]
    last = -1          # line of the previous positive match
    nots: List[str] = []

    def check_nots(upto: int) -> None:
        for pat in nots:
            for i in range(last + 1, upto):
                if pat in lines[i]:
                    raise AssertionError(f"CHECK-NOT: '{pat}' found on output line {i + 1}: {lines[i]}\n{output}")
        nots.clear()

    for kind, pat in checks:
        if kind == "CHECK-NOT":
            nots.append(pat)
            continue
        if kind == "CHECK-NEXT":
            if last + 1 >= len(lines) or pat not in lines[last + 1]:
                got = lines[last + 1] if last + 1 < len(lines) else "<end of output>"
                raise AssertionError(f"CHECK-NEXT: '{pat}' is not on the line after the previous match "
                                     f"(line {last + 2}: {got})\n{output}")
            found = last + 1
        else:
            found = next((i for i in range(last + 1, len(lines)) if pat in lines[i]), None)
            if found is None:
                raise AssertionError(f"CHECK: '{pat}' not found after output line {last + 1}\n{output}")
        check_nots(found)
        last = found
    check_nots(len(lines))


def run_golden(text: str) -> str:
    """Run one golden file's passes and checks; return the printed result (for error cases, '')."""
    case = parse_directives(text)
    module = verify(parse(text))
    if case.error is not None:
        with pytest.raises((CompilationError, ValueError)) as info:
            run_passes(module, case.passes, case.options, verify_each=True)
        assert case.error in str(info.value), f"expected an error with '{case.error}', got: {info.value}"
        return ""
    module = run_passes(module, case.passes, case.options, verify_each=True)
    printed = print_module(module)
    match_checks(printed, case.checks)
    assert parse(printed) == module, "parse(print(result)) differs from the result"
    return printed


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_golden(path: Path):
    run_golden(path.read_text())


def test_every_pipeline_pass_has_golden_files():
    missing = [n for n in dict.fromkeys(pass_names()) if not list((GOLDEN / n).glob("*.ir"))]
    assert not missing, f"passes without golden tests under tests/golden/<pass>/: {missing}"


# The matcher itself must be able to fail, or the golden tests prove nothing.
_OUT = "a = 1\nb = 2\nc = 3\n"


@pytest.mark.parametrize("checks", [
    [("CHECK", "a = 1"), ("CHECK", "c = 3")],
    [("CHECK", "a = 1"), ("CHECK-NEXT", "b = 2")],
    [("CHECK", "a"), ("CHECK-NOT", "x"), ("CHECK", "c")],
    [("CHECK", "b"), ("CHECK-NOT", "a")],
])
def test_matcher_accepts(checks):
    match_checks(_OUT, checks)


@pytest.mark.parametrize("checks", [
    [("CHECK", "d = 4")],
    [("CHECK", "c = 3"), ("CHECK", "a = 1")],             # order matters
    [("CHECK", "a = 1"), ("CHECK-NEXT", "c = 3")],        # not the next line
    [("CHECK", "a"), ("CHECK-NOT", "b"), ("CHECK", "c")],
    [("CHECK", "a"), ("CHECK-NOT", "c")],                  # trailing NOT runs to the end
])
def test_matcher_rejects(checks):
    with pytest.raises(AssertionError):
        match_checks(_OUT, checks)


def test_directives_and_options():
    case = parse_directives("// RUN: cse, dce\n// OPTIONS: num_warps=8, arch=sm_80\n// CHECK-NOT: x\nmodule {\n}\n")
    assert case.passes == ["cse", "dce"]
    assert case.options.num_warps == 8 and case.options.arch == "sm_80"
    assert case.checks == [("CHECK-NOT", "x")]
    with pytest.raises(ValueError, match="RUN"):
        parse_directives("module {\n}\n")
