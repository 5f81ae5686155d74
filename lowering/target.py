"""LLVM IR -> optimized LLVM IR -> PTX with LLVM's NVPTX backend (through llvmlite).

Safety: LLVM ends the whole process (not an exception) on some inputs, e.g. a
PTX version below the target's minimum or an intrinsic the target cannot
select. So (1) the arch and PTX version are validated here before LLVM sees
them, (2) the module's NVVM intrinsics are checked against the arch, (3) the
module is parsed and verified first (those failures are ordinary exceptions,
turned into CompilationError; debug metadata the parser drops as invalid is one too), and (4) with `isolate=True` (or
TILEC_LLVM_ISOLATE=1) optimization and emission run in a forked child, so that
even an LLVM abort only fails the compile. Isolation is off by default because
every rule emits only intrinsics checked for every supported arch, and a fork
costs more than the whole LLVM stage of a small kernel (see docs/compiler.md).
"""
from __future__ import annotations

import functools
import os
import pickle
import re
import struct
import time
from typing import Dict, Optional, Tuple, Union

from ..errors import CompilationError
from ..target import Target
from .ptxas import find_ptxas, has_line_info  # noqa: F401  (the CLI looks find_ptxas up here)

__all__ = ["TRIPLE", "check_intrinsics", "ptx_version_for", "driver_ptx_cap", "target_machine", "data_layout",
           "optimize_and_emit", "LLVMResult", "MAX_LLVM_PTX", "find_ptxas"]

TargetLike = Union[Target, str]   # a Target, or an arch string (Target.of parses it once, cached)
TRIPLE = "nvptx64-nvidia-cuda"
# The newest PTX ISA LLVM 22's NVPTX backend writes.
MAX_LLVM_PTX = 88

# Newest PTX ISA each CUDA driver version (cuDriverGetVersion) loads.
_DRIVER_PTX = [(13000, 90), (12090, 88), (12080, 87), (12060, 85), (12050, 85), (12040, 84),
               (12030, 83), (12020, 82), (12010, 81), (12000, 80), (11080, 78), (11070, 77),
               (11060, 76), (11050, 75), (11040, 74), (11030, 73), (11020, 72), (11010, 71), (11000, 70)]


@functools.lru_cache(maxsize=1)
def driver_ptx_cap() -> Optional[int]:
    """The newest PTX ISA the installed CUDA driver accepts, or None with no driver."""
    try:
        from cuda.bindings import driver
        err, version = driver.cuDriverGetVersion()
        if int(err) != 0:
            return None
    except Exception:  # no cuda-python, or no libcuda: nothing caps the version
        return None
    for v, ptx in _DRIVER_PTX:
        if version >= v:
            return ptx
    return 60


def ptx_version_for(target: TargetLike, needed: int = 0, cap: Optional[int] = None) -> int:
    """The PTX ISA version to emit: at least the arch's minimum and `needed`, at most
    what LLVM writes and what the driver loads. Raises ValueError when impossible."""
    target = Target.of(target)
    arch = target.arch
    want = max(target.ptx_min, needed)
    if want > MAX_LLVM_PTX:
        raise ValueError(f"PTX ISA {want // 10}.{want % 10} is newer than this LLVM can write "
                         f"(up to {MAX_LLVM_PTX // 10}.{MAX_LLVM_PTX % 10})")
    if cap is None:
        cap = driver_ptx_cap()
    if cap is not None and want > cap:
        raise ValueError(f"{arch} needs PTX ISA {want // 10}.{want % 10}, but the installed CUDA driver "
                         f"loads at most {cap // 10}.{cap % 10}; update the driver or pick an older arch")
    return want


# NVVM intrinsics that only some targets can select (LLVM aborts on the others):
# name prefix -> the Target feature that has it, or the oldest sm number.
_ARCH_INTRINSICS = [
    ("llvm.nvvm.setmaxnreg", "has_setmaxnreg"),
    ("llvm.nvvm.wgmma", "has_wgmma"),
    ("llvm.nvvm.cp.async.bulk", 90),
    ("llvm.nvvm.fence.proxy", 90),
    ("llvm.nvvm.mbarrier.arrive.expect.tx", 90),
    ("llvm.nvvm.mbarrier.try.wait", 90),
    ("llvm.nvvm.stmatrix", 90),
    ("llvm.nvvm.read.ptx.sreg.cluster", 90),
    ("llvm.nvvm.barrier.cluster", 90),
    ("llvm.nvvm.ff.to.e4m3x2", 89),
    ("llvm.nvvm.ff.to.e5m2x2", 89),
    ("llvm.nvvm.cp.async", 80),
    ("llvm.nvvm.ldmatrix", 75),
]
# The arch-specific targets that have each feature (named in the error).
_FEATURE_ARCHS = {"has_setmaxnreg": "sm_100a or sm_90a", "has_wgmma": "sm_90a"}
_DECL = re.compile(r"^declare[^@]*@\"?(llvm\.nvvm\.[\w.]+)", re.M)


def check_intrinsics(ir_text: str, target: TargetLike) -> None:
    """Raise ValueError naming the first NVVM intrinsic of the module that `target` cannot run
    (checked here because LLVM would end the process instead of raising)."""
    target = Target.of(target)
    for name in _DECL.findall(ir_text):
        for prefix, need in _ARCH_INTRINSICS:
            if name.startswith(prefix):
                if isinstance(need, str) and not getattr(target, need):
                    raise ValueError(f"{name} needs {_FEATURE_ARCHS[need]}; the target is {target.arch}")
                if isinstance(need, int) and target.number < need:
                    raise ValueError(f"{name} needs sm_{need} or newer; the target is {target.arch}")
                break


_initialized = False


def _init_llvm():
    global _initialized
    if not _initialized:
        import llvmlite.binding as llvm
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        # 32-bit shared-memory pointers, as nvcc does.
        llvm.set_option("", "--nvptx-short-ptr")
        _initialized = True


def target_machine(target: TargetLike, ptx: int):
    """The NVPTX target machine for a validated (target, PTX version) pair."""
    return _target_machine(Target.of(target).arch, ptx)


@functools.lru_cache(maxsize=32)
def _target_machine(arch: str, ptx: int):
    ptx_min = Target.of(arch).ptx_min
    if ptx < ptx_min or ptx > MAX_LLVM_PTX:
        raise ValueError(f"PTX ISA {ptx} is not valid for {arch} (needs {ptx_min} to {MAX_LLVM_PTX})")
    _init_llvm()
    import llvmlite.binding as llvm
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, features=f"+ptx{ptx}", opt=3)


def data_layout(target: TargetLike = "sm_80") -> str:
    target = Target.of(target)
    return str(target_machine(target, target.ptx_min).target_data)


class LLVMResult:
    __slots__ = ("llvm", "ptx", "timings")

    def __init__(self, llvm: str, ptx: str, timings: Dict[str, float]):
        self.llvm, self.ptx, self.timings = llvm, ptx, timings


def _run_llvm(ir_text: str, arch: str, ptx: int, opt: int) -> Tuple[str, str, Dict[str, float]]:
    import llvmlite.binding as llvm
    tm = target_machine(arch, ptx)
    t0 = time.perf_counter()
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    t1 = time.perf_counter()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    t2 = time.perf_counter()
    ptx_text = tm.emit_assembly(mod)
    t3 = time.perf_counter()
    return str(mod), ptx_text, {"llvm_parse": t1 - t0, "llvm_opt": t2 - t1, "emit": t3 - t2}


def _run_in_child(ir_text: str, arch: str, ptx: int, opt: int):
    """Run `_run_llvm` in a forked child; an LLVM abort there becomes an exception here
    carrying LLVM's message."""
    import faulthandler
    import tempfile
    target_machine(arch, ptx)  # build it before forking so the child inherits it
    r, w = os.pipe()
    err = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # child: never return into the caller's code
        code = 0
        try:
            os.close(r)
            faulthandler.disable()  # an abort is reported by the parent, not as a Python crash
            os.dup2(err.fileno(), 2)  # LLVM writes "LLVM ERROR: ..." to stderr before aborting
            try:
                payload = pickle.dumps(("ok", _run_llvm(ir_text, arch, ptx, opt)))
            except BaseException as e:  # report, do not raise: the parent re-raises
                payload = pickle.dumps(("error", f"{type(e).__name__}: {e}"))
            with os.fdopen(w, "wb") as f:
                f.write(struct.pack("<Q", len(payload)) + payload)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    err.seek(0)
    stderr = err.read().decode(errors="replace").strip()
    err.close()
    if len(data) < 8:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        why = f"signal {sig}" if sig else f"exit status {os.WEXITSTATUS(status)}"
        detail = f": {stderr.splitlines()[0]}" if stderr else ""
        raise RuntimeError(f"LLVM aborted while compiling for {arch} ({why}){detail}")
    kind, value = pickle.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    if kind == "error":
        raise RuntimeError(value)
    return value


def _isolate_default() -> bool:
    return os.environ.get("TILEC_LLVM_ISOLATE", "") not in ("", "0")


def optimize_and_emit(ir_text: str, target: TargetLike, ptx: Optional[int] = None, opt: int = 3,
                      kernel: Optional[str] = None, isolate: Optional[bool] = None) -> LLVMResult:
    """Verify, optimize (new pass manager, O`opt`) and emit PTX for `target`."""
    try:
        target = Target.of(target)
        arch = target.arch
        ptx = ptx_version_for(target) if ptx is None else ptx
        target_machine(target, ptx)  # validates the pair before any module reaches LLVM
        check_intrinsics(ir_text, target)
    except ValueError as e:
        raise CompilationError(str(e), kernel=kernel, stage="target selection") from e
    if isolate is None:
        isolate = _isolate_default()
    try:
        if isolate and hasattr(os, "fork"):
            llvm_text, ptx_text, timings = _run_in_child(ir_text, arch, ptx, opt)
        else:
            llvm_text, ptx_text, timings = _run_llvm(ir_text, arch, ptx, opt)
    except RuntimeError as e:
        raise CompilationError(f"LLVM rejected the generated module: {e}", kernel=kernel,
                               stage="LLVM") from e
    if "!DILocation(" in ir_text and not has_line_info(ptx_text):
        # LLVM's parser drops debug metadata it finds invalid (with a warning on stderr, not an
        # error): the kernel would run, silently without the line information asked for
        raise CompilationError("LLVM dropped the line information of the generated module as invalid "
                               "(a compiler bug; lineinfo=False or TILEC_LINEINFO=0 compiles without it)",
                               kernel=kernel, stage="LLVM")
    return LLVMResult(llvm_text, ptx_text, timings)
