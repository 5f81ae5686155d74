"""The line of a kernel's source that a frontend error must name: the one marked `# ERR`."""
import inspect


def err_line(kernel) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    for i, text in enumerate(lines):
        if "# ERR" in text:
            return first + i
    raise AssertionError("no # ERR marker")
