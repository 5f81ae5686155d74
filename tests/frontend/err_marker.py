"""The line of a kernel's source that a frontend error must name: the one marked `# ERR`."""
import inspect


def err_line(kernel) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    for i, text in enumerate(lines):
        if "# ERR" in text:
            return first + i
    raise AssertionError("no # ERR marker")


def assert_error_at_marker(kernel, sig: str, fragment: str) -> None:
    """Compiling `kernel` for `sig` raises a CompilationError whose message holds `fragment`
    and whose location is the kernel's `# ERR` line in its own file."""
    import pytest  # noqa: PLC0415
    import tilec as tc  # noqa: PLC0415

    with pytest.raises(tc.CompilationError) as info:
        kernel.ir(kernel.specialization(sig))
    assert fragment in info.value.msg, info.value.msg
    assert info.value.loc.line == err_line(kernel), info.value.loc
    assert info.value.loc.file == inspect.getsourcefile(kernel.fn), info.value.loc
