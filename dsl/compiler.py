"""The compiler driver: kernel + specialization + options -> CompiledKernel.

    frontend (kernel.ir) -> passes (run_pipeline) -> codegen (llvmlite) -> LLVM O3 -> PTX -> ptxas

Every stage's text lands in `asm` ("tile", "gpu", "llvm", "ptx", and "cubin"
bytes when ptxas is installed); `metadata` holds num_warps (the user's), num_threads
(the CTA's: a warp-specialized kernel's producer included), num_stages, shared bytes,
arch, PTX version, the time of each stage, ptxas's report, and the compile's remarks
(tilec.remarks: what the passes chose and why; TILEC_REMARKS=1 prints them). Options are validated,
and the Target resolved, before LLVM runs, and any failure is a CompilationError naming
the kernel, the stage and (when known) the source line.

TILEC_DUMP=<dir> writes `<kernel>.<hash8>.<NN>-<stage>.ir` (hash8: of the specialization
and the options) after the
frontend and after every pass, then `...-llvm.ll` and `...-ptx.ptx`; the compile
cache is bypassed while it is set, so that every compile writes them.
TILEC_SKIP_PTXAS=1 skips ptxas (PTX only; the driver JIT-compiles it at load);
TILEC_PTXAS=<path> names the ptxas to use.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .abi import param_slots
from .compiled import CompiledKernel
from .definition import dependency_hash
from .errors import CompilationError, SpillWarning, WgmmaSerializedWarning
from .language import Func
from .options import CompileOptions
from .remarks import Remarks, check_tile_sizes, from_metadata, occupancy, print_remarks, remarks_enabled
from .runtime import cache
from .target import Target
from .version import __version__
from .workcount import count_work

__all__ = ["compile_kernel", "compile_module", "cache_key", "compiler_source_hash"]


def _kernel_name(kernel) -> str:
    return getattr(kernel, "name", None) or getattr(kernel, "__name__", None) or "kernel"


def _spec_text(spec) -> str:
    # A @tc.func passed as a constexpr reprs as its name only: its source (and what it
    # reads) is added, so that two funcs of one name never share a cached kernel.
    funcs = [f"{p.name}:{f.fn.__module__}.{f.fn.__qualname__}:{dependency_hash(f.fn)}"
             for p in getattr(spec, "params", ()) if p.kind == "constexpr" for f in _funcs_in(p.value)]
    return "\n".join([repr(spec), *funcs])


def _funcs_in(value):
    if isinstance(value, Func):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _funcs_in(v)


_COMPILER_HASH: Optional[str] = None


def compiler_source_hash() -> str:
    """Digest of tilec's own code (every .py and .lark of the tilec, tilec.lowering and
    tilec.runtime package directories), computed once per process: editing the compiler
    must invalidate cached PTX even when the version number stays the same."""
    global _COMPILER_HASH
    if _COMPILER_HASH is None:
        import importlib
        h = hashlib.sha256()
        for pkg in ("tilec", "tilec.lowering", "tilec.runtime"):
            for root in getattr(importlib.import_module(pkg), "__path__", []):
                h.update(_tree_digest(Path(root)))
        _COMPILER_HASH = h.hexdigest()[:24]
    return _COMPILER_HASH


def _tree_digest(root: Path) -> bytes:
    """Relative path and content of each source file under `root`, in a stable order; a
    subpackage that is a separate package directory (lowering/ next to dsl/) is not entered
    twice because symlinked directories are not followed."""
    h = hashlib.sha256()
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        files.extend(Path(d) / n for n in names if n.endswith((".py", ".lark")))
    for f in sorted(files):
        try:
            data = f.read_bytes()
        except OSError:  # unreadable: its name still counts
            data = b""
        h.update(str(f.relative_to(root)).encode() + b"\0" + data + b"\0")
    return h.digest()


def cache_key(kernel, spec, options: CompileOptions) -> Optional[str]:
    """Digest of source, specialization, options, arch, tilec version and tilec's own code
    (None when the kernel cannot name its source)."""
    src = getattr(kernel, "source_hash", None)
    if src is None:
        return None
    # where the source is: the line numbers of the PTX's line information
    where = getattr(kernel, "source_positions", None)
    text = "\n".join([src() if callable(src) else str(src), _spec_text(spec), repr(options), __version__,
                      compiler_source_hash(), where() if callable(where) and options.lineinfo else ""])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


class _Dumper:
    """Writes one file per stage under TILEC_DUMP."""

    def __init__(self, directory: str, kernel: str, spec, options: CompileOptions):
        self.root = Path(directory)
        self.root.mkdir(parents=True, exist_ok=True)
        # options too: two compiles of one specialization (sm_80 and sm_90a, tma on and off)
        # must not write their stages over each other
        h = hashlib.sha256((_spec_text(spec) + repr(options)).encode()).hexdigest()[:8]
        self.stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{kernel}.{h}")
        self.n = 0

    def write(self, stage: str, text: str, ext: str = "ir") -> None:
        (self.root / f"{self.stem}.{self.n:02d}-{stage}.{ext}").write_text(text)
        self.n += 1

    def after_pass(self, name: str, module) -> None:
        self.write(name, str(module))


def _stage(name: str, kernel: str, timings: Dict[str, float], fn: Callable):
    """Run one stage, timing it; errors other than CompilationError get the stage named."""
    t0 = time.perf_counter()
    try:
        return fn()
    except CompilationError:
        raise
    except (ValueError, TypeError, NotImplementedError) as e:
        raise CompilationError(str(e), loc=getattr(e, "loc", None), kernel=kernel, stage=name) from e
    except Exception as e:  # a compiler bug still surfaces as a compile error with its type
        raise CompilationError(f"{type(e).__name__}: {e}", kernel=kernel, stage=name) from e
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0


def _fresh_ir(kernel, spec):
    """A tile-IR module the passes may rewrite in place (kernel.ir's cached module is shared
    with the interpreter, so the compiler lowers its own copy)."""
    from .frontend import lower_to_ir
    return lower_to_ir(kernel, spec)


def _want_ptxas() -> bool:
    return os.environ.get("TILEC_SKIP_PTXAS", "") in ("", "0")


def compile_module(module, options: CompileOptions, kernel_name: Optional[str] = None,
                   dump: Optional[_Dumper] = None, timings: Optional[Dict[str, float]] = None,
                   run_ptxas: Optional[bool] = None) -> CompiledKernel:
    """Compile a tile-IR module (one tile.func) with validated options (they carry the Target)."""
    from .lowering import target
    from .lowering.codegen import generate
    from .lowering.gpu.tma_ops import tma_params
    from .lowering.pipeline import run_pipeline

    timings = {} if timings is None else timings
    remarks = Remarks()   # this compile's own: the passes record into it through the options
    options = replace(options, remarks=remarks)
    func = module.func()
    symbol = func.attrs["sym_name"]  # the PTX entry's name
    name = kernel_name or symbol
    tgt: Target = options.target
    asm: Dict[str, object] = {"tile": str(module)}
    # counted on the IR as written: the passes add staging copies the count must not see twice
    work = _stage("work count", name, timings, lambda: count_work(module))
    arg_types = [a.type for a in func.regions[0].block.args]
    arg_names = list(func.attrs.get("arg_names", []))
    params = _stage("abi", name, timings, lambda: param_slots(arg_types))
    if not options.allow_large_tiles:  # before any pass: LLVM and ptxas would take minutes
        _stage("tile sizes", name, timings, lambda: check_tile_sizes(module, 32 * options.num_warps, kernel=name))
    gpu = _stage("passes", name, timings, lambda: run_pipeline(
        module, options, dump=dump.after_pass if dump else None))
    ptx_version = _stage("target selection", name, timings,
                         lambda: target.ptx_version_for(tgt, _ptx_needed(gpu)))
    asm["gpu"] = str(gpu)
    tmaps = tma_params(gpu)
    persistent = bool(gpu.attrs.get("persistent"))
    if tmaps or persistent:  # the kernel also takes the tensor maps of its TMA copies, the grid's extents
        params = param_slots(arg_types, tmaps, grid=persistent)
    layout = target.data_layout(tgt)

    def emit(llmod, ir_text=None):
        try:
            return target.optimize_and_emit(str(llmod) if ir_text is None else ir_text, tgt, ptx_version,
                                            kernel=name)
        except CompilationError as e:
            raise _located(e, llmod) from e

    llmod = _stage("codegen", name, timings, lambda: generate(gpu, data_layout=layout))
    # llvmlite's IR printer: on the way to PTX like any stage, so timed as one (it was counted nowhere)
    res = emit(llmod, _stage("llvm_print", name, timings, lambda: str(llmod)))

    def narrow():  # the kernel with its 16-bit loop invariants kept narrow: fewer registers
        return emit(generate(gpu, data_layout=layout, narrow_invariants=True))

    for k, v in res.timings.items():
        timings[k] = v
    asm["llvm"], asm["ptx"] = res.llvm, res.ptx
    if dump:
        dump.write("llvm", res.llvm, "ll")
        dump.write("ptx", res.ptx, "ptx")
    metadata = {
        # num_warps as the user asked; num_threads the CTA's (a warp-specialized kernel adds a producer)
        "name": name, "num_warps": options.num_warps, "num_threads": int(gpu.attrs["num_threads"]),
        "num_stages": options.num_stages, "shared": int(gpu.attrs.get("shared", 0)), "arch": tgt.arch,
        "ptx_version": f"{ptx_version // 10}.{ptx_version % 10}", "fast_math": options.fast_math,
        "warp_specialized": int(gpu.attrs["num_threads"]) != 32 * options.num_warps, "persistent": persistent,
        "cluster": options.cluster,
        # False: built again with every wgmma retired in its own loop iteration (the first build
        # spilled, or ptxas serialized its wgmmas)
        "carry_wgmma": options.carry_wgmma,
        # the runtime launches it with programmatic stream serialization (sm_90+ only)
        "dependent_launch": options.dependent_launch and tgt.has_dependent_launch,
        # .file/.loc in the PTX: ptxas and the driver's JIT keep them (-lineinfo)
        "lineinfo": options.lineinfo or options.debug,
        "timings": timings,
        "work": work,
    }
    if run_ptxas is None:
        run_ptxas = _want_ptxas()
    if run_ptxas and target.find_ptxas():
        t0 = time.perf_counter()
        kept, result = _assemble(res, tgt, narrow if options.min_programs_per_sm > 1 else None)
        if (_spills(result) or result.wgmma_serialized) and gpu.attrs.get("carried_wgmma"):
            # the wgmma kept in flight across iterations holds its registers through the next
            # one's, and ptxas may not follow it over the back edge (it then serializes every
            # wgmma: a loop whose accumulator enters from two paths, varlen attention's): built
            # again without, kept where that is not serialized, or spills less
            from .ir.parser import parse
            with warnings.catch_warnings():   # only the build kept says it spills
                warnings.simplefilter("ignore", SpillWarning)
                warnings.simplefilter("ignore", WgmmaSerializedWarning)
                other = compile_module(parse(asm["tile"]), replace(options, carry_wgmma=False, remarks=None),
                                       kernel_name, None, None, run_ptxas)
            rep = other.metadata.get("ptxas") or {}
            if (bool(rep.get("wgmma_serialized")), rep.get("spill_stores", 0) + rep.get("spill_loads", 0)) \
                    < (bool(result.wgmma_serialized), _spills(result)):
                for msg in other.metadata.get("warnings", ()):
                    _rewarn(msg)
                return other
        asm["llvm"], asm["ptx"] = kept.llvm, kept.ptx
        timings["ptxas"] = time.perf_counter() - t0
        asm["cubin"] = result.cubin
        metadata["ptxas"] = result.report()
        _warn_spills(metadata, result)
        _warn_serialized(metadata, result)
        _resource_remarks(remarks, func.loc, result, metadata["num_threads"], metadata["shared"], tgt)
    metadata["remarks"] = [r.as_list() for r in remarks]
    return CompiledKernel(name=symbol, asm=asm, metadata=metadata, params=params, arg_names=arg_names)


def _spills(result) -> int:
    return result.spill_stores + result.spill_loads


def _warn_spills(metadata: Dict[str, Any], result) -> None:
    """Say so when ptxas spilled: a kernel that does not fit its registers still runs, slower,
    and nothing else would tell the user (`metadata["warnings"]` keeps the message)."""
    if not _spills(result):
        return
    msg = (f"kernel '{metadata['name']}' ({metadata['arch']}, {metadata['num_warps']} warps) uses "
           f"{result.registers} registers and spills: {result.spill_stores} bytes stored, "
           f"{result.spill_loads} bytes loaded per thread; smaller tiles or more warps may fit")
    metadata.setdefault("warnings", []).append(msg)
    warnings.warn(msg, SpillWarning, stacklevel=2)


_SERIALIZED_WORDS = "ptxas serialized its wgmmas"


def _warn_serialized(metadata: Dict[str, Any], result) -> None:
    """Say so when ptxas made every wgmma wait for the one before (it says so only as an info
    line): the kernel runs, but no product overlaps anything."""
    if not result.wgmma_serialized:
        return
    msg = (f"kernel '{metadata['name']}' ({metadata['arch']}): {_SERIALIZED_WORDS}, each waiting for the one "
           f"before, due to {result.wgmma_serialized}")
    metadata.setdefault("warnings", []).append(msg)
    warnings.warn(msg, WgmmaSerializedWarning, stacklevel=2)


def _rewarn(msg: str) -> None:
    """A kept warning of a cached or rebuilt kernel, in its category."""
    warnings.warn(msg, WgmmaSerializedWarning if _SERIALIZED_WORDS in msg else SpillWarning, stacklevel=3)


def _resource_remarks(remarks: Remarks, loc, result, threads: int, shared: int, tgt: Target) -> None:
    """Spills (ptxas's report) and the programs per SM its registers and `shared` allow, at
    the kernel's definition."""
    if result.spill_stores or result.spill_loads:
        remarks.add("spill", f"{result.registers} registers per thread and spills: {result.spill_stores} bytes "
                             f"stored, {result.spill_loads} bytes loaded per thread (local memory); smaller tiles "
                             f"or more warps may fit", loc)
    n, why = occupancy(result.registers, threads, shared, tgt)
    remarks.add("occupancy", f"{n} program{'s' if n != 1 else ''} of {threads} threads per SM of {tgt.arch} "
                             f"({n * threads // 32} warps), limited by {why}: {result.registers} registers per "
                             f"thread, {shared} bytes of shared memory", loc)


def _located(e: CompilationError, llmod) -> CompilationError:
    """`e` (LLVM rejected the module: a codegen bug) naming the op whose code LLVM quotes and
    that op's source line, where it can be traced."""
    from .lowering.codegen import origin_of
    op = origin_of(llmod, e.msg) if e.loc is None else None
    if op is None:
        return e
    return CompilationError(f"{e.msg.rstrip()}\n(in the code generated for '{op.name}')", loc=op.loc,
                            kernel=e.kernel, stage=f"{e.stage} (code of {op.name})")


def _ptx_needed(gpu) -> int:
    """The PTX ISA the kernel's inline PTX needs beyond the arch's minimum (0: none)."""
    from .ir import tile_ops as T
    from .lowering.codegen.rules_cluster import GATHER_PTX
    from .lowering.codegen.rules_memory import CACHE_HINT_PTX
    ops = list(gpu.walk())
    gathers = any(isinstance(op, T.ClusterGatherOp) and op.attrs["size"] > 1 for op in ops)
    hints = any(isinstance(op, (T.LoadOp, T.LoadMaskedOp)) and op.attrs.get("evict") for op in ops)
    return max(GATHER_PTX if gathers else 0, CACHE_HINT_PTX if hints else 0)


def _assemble(res, tgt: Target, narrow=None):
    """ptxas, once, or again for a kernel that spills: given only `.maxntid`, ptxas 13 drops a
    kernel that must spill anyway to full-occupancy register counts (32 at 128 threads) and
    spills several times more; `.minnctapersm 1` lets it use what it needs. Not emitted by
    default because, for kernels that fit, it raises register use and lowers occupancy.
    A floor the `min_programs_per_sm` option asked for is a preference: where it spills,
    `narrow()` (the kernel emitted with its 16-bit loop invariants kept narrow, fewer
    registers) is kept if it fits without spilling; else the highest lower floor that either
    form fits without spilling (`_floors_below`), else the kernel without a floor, where that
    spills less. `res`: the emitted kernel (.llvm, .ptx). Returns the emitted kernel kept and
    its ptxas result (the PTX may differ from the emitted one in its `.minnctapersm`)."""
    from .lowering.ptxas import assemble

    arch = tgt.arch
    result = assemble(res.ptx, arch)
    if not _spills(result):
        return res, result
    forms = [res]
    if narrow is not None:
        alt = narrow()
        if alt.ptx != res.ptx:
            second = assemble(alt.ptx, arch)
            if not _spills(second):
                return alt, second
            forms.append(alt)
    relaxed = _relaxed(res.ptx)
    if relaxed == res.ptx:
        return res, result
    second = assemble(relaxed, arch)
    for floor in _floors_below(res.ptx, second.registers, tgt):
        for form in forms:
            ptx = _with_floor(form.ptx, floor)
            third = assemble(ptx, arch)
            if not _spills(third):
                return type(res)(form.llvm, ptx, form.timings), third
    if _spills(second) < _spills(result):
        return type(res)(res.llvm, relaxed, res.timings), second
    return res, result


_FLOOR = re.compile(r"\.minnctapersm (\d+)\n")


def _floors_below(ptx: str, registers: int, tgt: Target) -> List[int]:
    """The floors under the PTX's `.minnctapersm` worth trying, highest first: those whose
    register budget (the target's registers per SM, allocated per thread in eights, at most
    its registers per thread) is below
    `registers`, what the kernel takes without a floor; at a floor whose budget holds that
    many, the kernel without a floor is as good."""
    floor = _FLOOR.search(ptx)
    threads = re.search(r"\.maxntid (\d+)(?:, (\d+), (\d+))?\n", ptx)
    if floor is None or threads is None:
        return []
    n = 1
    for g in threads.groups():
        n *= int(g or 1)
    warps = -(-n // 32)

    def budget(f):
        return min(tgt.registers_per_sm // (f * warps * 32) // 8 * 8, tgt.registers_per_thread)
    return [f for f in range(int(floor.group(1)) - 1, 1, -1) if budget(f) < registers]


def _with_floor(ptx: str, floor: int) -> str:
    return _FLOOR.sub(f".minnctapersm {floor}\n", ptx, count=1)


def _relaxed(ptx: str) -> str:
    # `.minnctapersm 1` added, or an option's floor above 1 dropped (setmaxnreg needs the 1)
    floor = _FLOOR.search(ptx)
    if floor is None:
        return re.sub(r"(\.maxntid [0-9, ]+)\n", r"\1\n.minnctapersm 1\n", ptx, count=1)
    if int(floor.group(1)) > 1:
        return ptx.replace(floor.group(0), ".minnctapersm 1\n" if "setmaxnreg" in ptx else "", 1)
    return ptx


def compile_kernel(kernel, spec, options: Optional[CompileOptions] = None, use_cache: bool = True) -> CompiledKernel:
    """Compile `kernel` for one specialization (see docs/internals.md for the contract).
    `use_cache=False` compiles afresh and leaves the cache alone."""
    name = _kernel_name(kernel)
    try:
        options = (options or CompileOptions()).validated()
    except ValueError as e:
        raise CompilationError(str(e), kernel=name, stage="options") from e
    dump_dir = os.environ.get("TILEC_DUMP")
    # With TILEC_DUMP set the cache is bypassed: a hit would write no stage files.
    key = cache_key(kernel, spec, options) if not dump_dir else None
    use_cache = key is not None and use_cache
    if use_cache:
        hit = cache.lookup(key)
        if hit is not None:
            for msg in hit.metadata.get("warnings", ()):  # a cached kernel that spills still says so
                _rewarn(msg)
            if remarks_enabled():
                print_remarks(from_metadata(hit.metadata))
            return hit
    dump = _Dumper(dump_dir, name, spec, options) if dump_dir else None
    timings: Dict[str, float] = {}
    module = _stage("frontend", name, timings, lambda: _fresh_ir(kernel, spec))
    if dump:
        dump.write("frontend", str(module))
    compiled = compile_module(module, options, name, dump, timings)
    if remarks_enabled():
        print_remarks(compiled.remarks)
    if use_cache:
        cache.store(key, compiled)
    return compiled
