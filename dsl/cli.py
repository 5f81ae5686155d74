"""The `tilec` command: print any stage of a kernel's compilation.

    tilec --version
    tilec ir   FILE:KERNEL [--sig SIG] [--after PASS] [--passes]
    tilec llvm FILE:KERNEL [--sig SIG] [--arch sm_90a] [--num-warps 4] ...
    tilec ptx  FILE:KERNEL [--sig SIG] [--arch sm_90a] [--num-warps 4] [--ptxas] ...
    tilec ptx  matmul --dtype bf16 --shape 4096,4096,4096 [--arch sm_90a]
    tilec sass FILE:KERNEL [--sig SIG] [--arch sm_90a] ...   SASS with the Python lines (nvdisasm)
    tilec ir|ptx ... --remarks     also print the compiler's remarks (stderr)
    tilec info                     devices, driver, CUDA tools, llvmlite, the cache
    tilec cache [info|clear]       the compile cache's location and size; clear it
    tilec explain FILE:KERNEL [--sig SIG] [--shape x=AxB ...] [--grid G]   counted work, roofline bound
    tilec bench   FILE:KERNEL [--sig SIG] --shape ... [--baseline EXPR]     time it on the GPU

Without --sig, the signature is the file's SIGNATURES entry for the kernel, compiled
with its OPTIONS entry (what the command line does not set), as tests/test_ptxas.py does.

User mistakes (a missing file, an unknown kernel or pass, a bad signature or option,
a kernel that does not compile) print one clean message to stderr and exit with
status 2 (usage) or 1 (compilation); TILEC_DEBUG=1 shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import List, Optional

from .errors import CompilationError, debug_enabled

__all__ = ["main", "load_kernel"]


class UsageError(Exception):
    """A mistake in the command line or in what it names (exit status 2)."""


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("tilec")
    except Exception:  # running from a source tree that is not installed
        return "unknown"


# ----------------------------------------------------------------------------- loading kernels
def _split_target(target: str):
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"expected FILE:KERNEL (e.g. examples/vector_add.py:add_kernel), got {target!r}")
    return Path(path), name


def _package_module(path: Path) -> Optional[str]:
    """The dotted name of `path` when it is a module of the standard library (its files
    use relative imports, so they load as the package's modules, not as loose files)."""
    from . import stdlib_kernels
    if path.suffix == ".py" and path.resolve().parent == Path(stdlib_kernels.__file__).resolve().parent:
        return f"{stdlib_kernels.__name__}.{path.stem}"
    return None


def _import_named(mod_name: str, path: Path):
    try:
        return importlib.import_module(mod_name)
    except CompilationError:
        raise
    except Exception as e:
        raise UsageError(f"importing {path} failed: {type(e).__name__}: {e}") from e


def load_kernel(target: str):
    """The @tilec.kernel called KERNEL in the Python file FILE, for `target` = 'FILE:KERNEL'
    (a standard-library file, e.g. stdlib_kernels/attention.py, loads as its module)."""
    path, name = _split_target(target)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    package_module = _package_module(path)
    module = _import_named(package_module, path) if package_module else _load_file(path)
    kernel = getattr(module, name, None)
    if kernel is None:
        found = sorted(n for n, v in vars(module).items() if _is_kernel(v))
        hint = f"; kernels in it: {', '.join(found)}" if found else "; it defines no @tilec.kernel"
        raise UsageError(f"{path} has no kernel named {name!r}{hint}")
    if not _is_kernel(kernel):
        raise UsageError(f"{path}:{name} is a {type(kernel).__name__}, not a @tilec.kernel")
    return kernel


def _load_file(path: Path):
    """`path` imported as a loose module, with its folder on sys.path while it loads."""
    mod_name = "_tilec_cli_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # the file may import modules that sit next to it
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except CompilationError:
        raise
    except SystemExit as e:
        raise UsageError(f"{path} exited while being imported (status {e.code}); "
                         "guard its script part with `if __name__ == \"__main__\":`") from None
    except Exception as e:
        raise UsageError(f"importing {path} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _is_kernel(obj) -> bool:
    try:
        from .kernel import Kernel
    except ImportError:
        return False
    return isinstance(obj, Kernel)


def _module_table(kernel, name: str) -> dict:
    """The kernel's module-level `SIGNATURES` / `OPTIONS` dict (what the examples and the
    stdlib declare), {} without one."""
    table = getattr(kernel, "fn", None) and kernel.fn.__globals__.get(name)
    return table if isinstance(table, dict) else {}


def _parse_sig(kernel, text: Optional[str]):
    from .specialize import parse_signature
    if text is None:   # the signature the kernel's file declares for it
        text = _module_table(kernel, "SIGNATURES").get(kernel.name)
        if text is None:
            raise UsageError(f"--sig is needed: kernel '{kernel.name}' has no entry in its file's SIGNATURES")
    try:
        return parse_signature(kernel, text)
    except (ValueError, TypeError, KeyError) as e:
        raise UsageError(f"bad --sig: {e}") from e


def _options(args, kernel=None):
    """Compile options from the command line; what it leaves out from the kernel file's
    OPTIONS entry when the signature came from its SIGNATURES (the launch they describe)."""
    from .options import CompileOptions
    fields = {"num_warps": args.num_warps, "num_stages": args.num_stages, "arch": args.arch,
              "fast_math": args.fast_math, "debug": args.debug, "lineinfo": args.lineinfo}
    given = {k: v for k, v in fields.items() if v is not None}
    if kernel is not None and getattr(args, "sig", None) is None:
        given = {**_module_table(kernel, "OPTIONS").get(kernel.name, {}), **given}
    try:
        return CompileOptions(**given).validated()
    except ValueError as e:
        raise UsageError(str(e)) from e


# ----------------------------------------------------------------------------- commands
def _cmd_ir(args) -> int:
    from tilec.lowering.pipeline import pass_names, run_pipeline
    if args.passes:
        print("\n".join(dict.fromkeys(pass_names())))
        return 0
    if args.target is None:
        raise UsageError("tilec ir needs FILE:KERNEL (or --passes)")
    if args.after is not None and args.after not in pass_names():
        raise UsageError(f"unknown pass {args.after!r}; passes are: {', '.join(dict.fromkeys(pass_names()))}")
    kernel = load_kernel(args.target)
    spec = _parse_sig(kernel, args.sig)
    remarks = None
    if args.after is not None or args.remarks:
        from dataclasses import replace
        from .frontend import lower_to_ir
        from .remarks import Remarks
        remarks = Remarks()
        # a module of its own: the passes rewrite in place, and kernel.ir's is shared
        passed = run_pipeline(lower_to_ir(kernel, spec), replace(_options(args, kernel), remarks=remarks),
                              stop_after=args.after)
    module = kernel.ir(spec) if args.after is None else passed
    sys.stdout.write(str(module))
    if args.remarks:  # what the passes run (to --after, else all of them) recorded
        _print_remarks(remarks)
    return 0


def _print_remarks(remarks) -> None:
    from .remarks import print_remarks
    if not len(list(remarks)):
        print("(no remarks)", file=sys.stderr)
    print_remarks(remarks, sys.stderr)


def _compile(args):
    from .compiler import compile_kernel
    if args.target == "matmul":
        return _compile_stdlib_matmul(args)
    kernel = load_kernel(args.target)
    spec = _parse_sig(kernel, args.sig)
    return compile_kernel(kernel, spec, _options(args, kernel))


def _compile_stdlib_matmul(args):
    """The kernel and configuration `tilec.stdlib_kernels.matmul` would launch for
    contiguous row-major operands of --dtype and --shape M,N,K."""
    from dataclasses import replace
    from .compiler import compile_kernel
    from .stdlib_kernels import matmul as _  # noqa: F401  (the package re-exports the function)
    mm = sys.modules["tilec.stdlib_kernels.matmul"]
    try:
        m, n, k = (int(x) for x in (args.shape or "").split(","))
    except ValueError:
        raise UsageError(f"tilec {args.command} matmul needs --shape M,N,K (three ints), got {args.shape!r}") from None
    if not args.dtype:
        raise UsageError(f"tilec {args.command} matmul needs --dtype (f16, bf16, f32, tf32, f8e4m3, f8e5m2)")
    opts = _options(args)   # its target: the --arch given, or the current GPU's (sm_90a without one)
    try:
        tf32 = args.dtype == "tf32"
        sig, cfg = mm.signature(m, n, k, "f32" if tf32 else args.dtype, target=opts.target, allow_tf32=tf32)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None
    opts = replace(opts, num_warps=args.num_warps or cfg.num_warps,
                   num_stages=args.num_stages or cfg.num_stages, warp_specialize=cfg.warp_specialize,
                   cluster=cfg.cluster).validated()
    return compile_kernel(cfg.kernel, _parse_sig(cfg.kernel, sig), opts)


def _cmd_llvm(args) -> int:
    sys.stdout.write(_compile(args).asm["llvm"])
    return 0


def _ptxas_report(ptx: str, arch: str) -> str:
    """ptxas's own `-v` report (registers, spills, stack, shared memory) for `ptx`."""
    from tilec.lowering.ptxas import assemble, find_ptxas
    if find_ptxas() is None:
        raise CompilationError("--ptxas needs ptxas: install the CUDA toolkit or `pip install nvidia-cuda-nvcc`",
                               stage="ptxas")
    return assemble(ptx, arch).log


def _cmd_ptx(args) -> int:
    compiled = _compile(args)
    ptx = compiled.asm["ptx"]
    sys.stdout.write(ptx)
    from .remarks import remarks_enabled
    if args.remarks and not remarks_enabled():  # TILEC_REMARKS=1 printed them already
        _print_remarks(compiled.remarks)
    if args.ptxas:
        arch = compiled.metadata["arch"]
        sys.stdout.write("\n// ptxas -v report\n")
        sys.stdout.write("".join(f"// {line}\n" for line in _ptxas_report(ptx, arch).splitlines()))
    return 0


def _cmd_sass(args) -> int:
    """The kernel's SASS: PTX with line information, ptxas -lineinfo, then nvdisasm."""
    from tilec.lowering.ptxas import assemble, find_ptxas
    from tilec.lowering.sass import MISSING_TOOL, disassemble, find_disassembler
    if find_ptxas() is None:
        raise CompilationError("tilec sass needs ptxas: install the CUDA toolkit or `pip install nvidia-cuda-nvcc`",
                               stage="ptxas")
    if find_disassembler() is None:
        raise CompilationError(f"tilec sass: {MISSING_TOOL}", stage="nvdisasm")
    if args.lineinfo is None:
        args.lineinfo = True  # the point of the listing: the Python line of each instruction
    compiled = _compile(args)
    arch = compiled.metadata["arch"]
    # the cubin the compile kept is for this PTX; assemble again only when ptxas was skipped
    cubin = compiled.asm.get("cubin") or assemble(compiled.asm["ptx"], arch).cubin
    try:
        sys.stdout.write(disassemble(bytes(cubin)))
    except FileNotFoundError as e:
        raise CompilationError(str(e), stage="nvdisasm") from e
    return 0


def _cmd_info(args) -> int:
    from .info import info_lines
    print("\n".join(info_lines()))
    return 0


def _cmd_cache(args) -> int:
    from .runtime import cache
    root = cache.cache_dir()
    if args.action == "clear":
        removed = cache.clear()
        for sub, (n, size) in removed.items():
            print(f"removed {n} file(s), {_size(size)}, from {root / sub}")
        return 0
    print(f"cache: {root}")
    for sub, (n, size) in cache.usage().items():
        print(f"  {sub}: {n} file(s), {_size(size)}")
    return 0


def _cmd_explain(args) -> int:
    """The counted work, resources and (with --shape) roofline bound of a kernel."""
    from .explain import explain_text, parse_grid, parse_shapes
    kernel = load_kernel(args.target)
    spec = _parse_sig(kernel, args.sig)
    try:
        shapes, grid = parse_shapes(args.shape), parse_grid(args.grid)
    except ValueError as e:
        raise UsageError(str(e)) from None
    options = _options(args, kernel)
    from .compiler import compile_kernel
    compiled = compile_kernel(kernel, spec, options)
    try:
        print(explain_text(compiled, spec, shapes, grid, options.target))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0


def _cmd_bench(args) -> int:
    """Time a kernel on random inputs on the GPU; its roofline line (and a torch baseline's time)."""
    from .explain import bench_grid, bench_lines, no_gpu_reason, parse_grid, parse_shapes, write
    if args.iters < 1:
        raise UsageError(f"--iters must be at least 1, got {args.iters}")
    kernel = load_kernel(args.target)
    spec = _parse_sig(kernel, args.sig)
    try:
        shapes = parse_shapes(args.shape)
        grid = bench_grid(kernel, spec, shapes, parse_grid(args.grid))
    except ValueError as e:
        raise UsageError(str(e)) from None
    why = no_gpu_reason()
    if why is not None:
        print(f"tilec bench: skipped: {why}", file=sys.stderr)
        return 0
    fields = {"num_warps": args.num_warps, "num_stages": args.num_stages}
    given = {k: v for k, v in fields.items() if v is not None}
    if args.sig is None:
        given = {**_module_table(kernel, "OPTIONS").get(kernel.name, {}), **given}
    try:
        write(bench_lines(kernel, spec, given, shapes, grid, args.baseline, args.iters))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0


def _add_roofline_commands(sub, fmt) -> None:
    """The `explain` and `bench` subcommands."""
    shape_help = "an argument's extents, name=AxB (contiguous), or an int argument's value, name=N (repeatable)"
    p = sub.add_parser("explain", help="what a kernel moves and computes per program, its resources, and with "
                                       "--shape the totals and roofline bound", epilog=_signature_help(),
                       formatter_class=fmt)
    _add_kernel_args(p)
    p.add_argument("--shape", action="append", metavar="NAME=AxB", help=shape_help)
    p.add_argument("--grid", metavar="G", help="the launch grid, e.g. 128 or 64,8 (default: one program per "
                                               "tile of the first store indexed by program ids)")
    _add_option_args(p)
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("bench", help="time a kernel on random inputs on the GPU and print its roofline line",
                       epilog=_signature_help(), formatter_class=fmt)
    _add_kernel_args(p)
    p.add_argument("--shape", action="append", metavar="NAME=AxB", help=shape_help)
    p.add_argument("--grid", metavar="G", help="the launch grid (default: as tilec explain infers it)")
    p.add_argument("--baseline", metavar="EXPR", help="a torch expression to time beside it, over the same "
                                                      "tensors by argument name, e.g. 'x + y'")
    p.add_argument("--iters", type=int, default=50, help="timed launches (default 50)")
    p.add_argument("--num-warps", type=int, dest="num_warps", help="warps per program")
    p.add_argument("--num-stages", type=int, dest="num_stages", help="software-pipelining stages")
    p.set_defaults(func=_cmd_bench)


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# ----------------------------------------------------------------------------- argument parsing
def _signature_help() -> str:
    try:
        from .specialize import parse_signature
    except ImportError:
        return "SIG names a type or value for every kernel parameter, e.g. 'x=f32[?], n=i32, BLOCK=1024'."
    doc = inspect.getdoc(parse_signature) or ""
    return "signature syntax (--sig):\n\n" + doc


def _add_kernel_args(p: argparse.ArgumentParser, target_required: bool = True) -> None:
    p.add_argument("target", metavar="FILE:KERNEL", nargs=None if target_required else "?",
                   help="a Python file and the name of a @tilec.kernel in it (llvm/ptx: or `matmul`, "
                        "the stdlib GEMM, with --dtype and --shape)")
    p.add_argument("--sig", metavar="SIG", help="types and constexpr values of the kernel's parameters "
                                                "(default: the file's SIGNATURES entry, with its OPTIONS)")


def _add_stdlib_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", help="with `matmul`: the operand dtype (f16, bf16, f32, tf32, f8e4m3, f8e5m2)")
    p.add_argument("--shape", metavar="M,N,K", help="with `matmul`: the problem size")


def _add_option_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", help="target GPU, e.g. sm_80, sm_90a (default: the current GPU's, sm_90a without one)")
    p.add_argument("--num-warps", type=int, dest="num_warps", help="warps per program (default 4)")
    p.add_argument("--num-stages", type=int, dest="num_stages", help="software-pipelining stages (default 3)")
    p.add_argument("--fast-math", action="store_true", default=None, dest="fast_math",
                   help="allow approximate math functions")
    p.add_argument("--debug", action="store_true", default=None,
                   help="verify the IR after every pass")
    p.add_argument("--lineinfo", action=argparse.BooleanOptionalAction, default=None,
                   help="Python line information (.file/.loc) in the PTX (default: on unless TILEC_LINEINFO=0)")


def _add_remarks_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remarks", action="store_true",
                   help="also print the compiler's remarks to stderr (what each tc.dot and loop became, and why)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilec", description="tilec: tile-level GPU kernels in Python, compiled to PTX.")
    parser.add_argument("--version", action="version", version=f"tilec {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("ir", help="print a kernel's tile IR (after the frontend, or after a pass)",
                       description="Print the tile IR of a kernel after the frontend, or after the pass --after.",
                       epilog=_signature_help(), formatter_class=fmt)
    _add_kernel_args(p, target_required=False)
    p.add_argument("--after", metavar="PASS", help="run the pipeline up to and including PASS")
    p.add_argument("--passes", action="store_true", help="list the pipeline's passes and exit")
    _add_remarks_arg(p)
    _add_option_args(p)
    p.set_defaults(func=_cmd_ir)

    p = sub.add_parser("llvm", help="print a kernel's LLVM IR", epilog=_signature_help(), formatter_class=fmt)
    _add_kernel_args(p)
    _add_stdlib_args(p)
    _add_option_args(p)
    p.set_defaults(func=_cmd_llvm)

    p = sub.add_parser("ptx", help="print a kernel's PTX", epilog=_signature_help(), formatter_class=fmt)
    _add_kernel_args(p)
    _add_stdlib_args(p)
    _add_option_args(p)
    p.add_argument("--ptxas", action="store_true", help="also assemble it and print ptxas's register/spill report")
    _add_remarks_arg(p)
    p.set_defaults(func=_cmd_ptx)

    p = sub.add_parser("sass", help="print a kernel's SASS annotated with its Python lines (needs ptxas and nvdisasm)",
                       epilog=_signature_help(), formatter_class=fmt)
    _add_kernel_args(p)
    _add_stdlib_args(p)
    _add_option_args(p)
    p.set_defaults(func=_cmd_sass)

    p = sub.add_parser("info", help="devices, driver, CUDA tools found, llvmlite, the compile cache")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("cache", help="the compile cache: its location and size, or clear it")
    p.add_argument("action", nargs="?", choices=("info", "clear"), default="info",
                   help="info (default): location and size; clear: delete the cached kernels and autotune results")
    p.set_defaults(func=_cmd_cache)
    _add_roofline_commands(sub, fmt)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except UsageError as e:
        if debug_enabled():
            raise
        print(f"tilec {args.command}: error: {e}", file=sys.stderr)
        return 2
    except CompilationError as e:
        if debug_enabled():
            raise
        print(f"tilec {args.command}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a compiler bug: still no traceback unless asked for
        if debug_enabled():
            raise
        print(f"tilec {args.command}: internal error: {type(e).__name__}: {e}\n"
              "(set TILEC_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
