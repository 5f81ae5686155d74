"""Loading compiled kernels into a device's context, once per (compiled kernel, device).

The cubin is loaded when the compiler produced one for this device's arch;
otherwise the PTX goes through the driver's JIT with its info and error logs
captured (the info log says registers, spills and shared memory; the error log
goes into the exception when loading fails).
"""
from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ..compiled import CompiledKernel
from . import driver
from .driver import DriverError, check, context_lost as driver_context_lost, cu, is_fault

__all__ = ["LoadedKernel", "Resources", "PerCompiled", "load", "resources"]

_LOG_BYTES = 1 << 16
_load_lock = threading.Lock()
_SPILL_RE = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class Resources:
    """What one CTA of a kernel uses on a device, and the occupancy that allows."""
    registers: int            # per thread
    shared: int               # bytes per CTA, static + dynamic
    spill_stores: int         # bytes per thread
    spill_loads: int
    local_bytes: int          # per thread (spills and local arrays)
    threads_per_block: int
    max_blocks_per_sm: int    # from cuOccupancyMaxActiveBlocksPerMultiprocessor
    device: str

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    def __str__(self) -> str:
        return (f"{self.registers} registers, {self.shared} B shared, {self.spills} B spilled, "
                f"{self.local_bytes} B local, {self.max_blocks_per_sm} CTA(s)/SM of "
                f"{self.threads_per_block} threads on {self.device}")


@dataclass
class LoadedKernel:
    function: object          # CUfunction
    module: object            # CUmodule
    device: int
    shared: int               # dynamic shared bytes to pass at launch
    threads: int              # 32 * num_warps
    info_log: str
    resources: Resources
    # persistent kernels: how many programs fill the device (SMs x resident CTAs per SM, in
    # whole resident clusters); 0 otherwise
    persistent_programs: int = 0
    # cluster kernels: how many clusters run at once (cuOccupancyMaxActiveClusters; 0 if unknown)
    max_active_clusters: int = 0


class PerCompiled:
    """What the runtime keeps per (compiled kernel, device), in its own table: an entry goes
    when its compiled kernel is collected (nothing is stored on the CompiledKernel)."""

    def __init__(self):
        self._by_id: Dict[int, Dict[int, Any]] = {}

    def get(self, compiled, device: int):
        per_dev = self._by_id.get(id(compiled))
        return None if per_dev is None else per_dev.get(device)

    def put(self, compiled, device: int, value) -> None:
        per_dev = self._by_id.get(id(compiled))
        if per_dev is None:
            per_dev = self._by_id[id(compiled)] = {}
            weakref.finalize(compiled, self._by_id.pop, id(compiled), None)
        per_dev[device] = value


_loaded = PerCompiled()


def load(compiled: CompiledKernel, device: int) -> LoadedKernel:
    """The CUfunction of `compiled` on `device`, loading the module on first use."""
    hit = _loaded.get(compiled, device)
    if hit is not None:
        return hit
    with _load_lock:
        hit = _loaded.get(compiled, device)
        if hit is None:
            hit = _load(compiled, device)
            _loaded.put(compiled, device, hit)
        return hit


def _load(compiled: CompiledKernel, device: int) -> LoadedKernel:
    dev = driver.ensure_context(device)
    d = cu()
    cubin = compiled.asm.get("cubin")
    info_log = ""
    if cubin and compiled.metadata.get("arch") == dev.arch:
        module = check(d.cuModuleLoadData(bytes(cubin)), "cuModuleLoadData", compiled.name)
    else:
        module, info_log = _jit_ptx(compiled, dev)
    fn = check(d.cuModuleGetFunction(module, compiled.name.encode()), "cuModuleGetFunction", compiled.name)
    threads = compiled.num_threads
    shared = int(compiled.metadata.get("shared", 0))
    attr = d.CUfunction_attribute
    static_shared = _fattr(fn, attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, compiled.name)
    if shared + static_shared > dev.max_shared_per_block_optin:
        raise DriverError(f"kernel '{compiled.name}' needs {shared + static_shared} bytes of shared memory "
                          f"per CTA; {dev.name} allows {dev.max_shared_per_block_optin}. Use smaller tiles "
                          f"or fewer pipeline stages (num_stages).")
    if shared > 48 * 1024:
        # Above 48 KB the kernel must opt in to the larger dynamic shared carve-out.
        check(d.cuFuncSetAttribute(fn, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", compiled.name)
    max_threads = _fattr(fn, attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, compiled.name)
    if threads > max_threads:
        raise DriverError(f"kernel '{compiled.name}' is compiled for {threads} threads per CTA "
                          f"(num_warps={threads // 32}) but its register use allows at most {max_threads} "
                          f"on {dev.name}; lower num_warps or the tile sizes")
    stores, loads = _spills(info_log, compiled)
    blocks = check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, threads, shared),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor", compiled.name)
    res = Resources(
        registers=_fattr(fn, attr.CU_FUNC_ATTRIBUTE_NUM_REGS, compiled.name),
        shared=static_shared + shared,
        spill_stores=stores, spill_loads=loads,
        local_bytes=_fattr(fn, attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, compiled.name),
        threads_per_block=threads, max_blocks_per_sm=int(blocks), device=dev.name)
    cluster = int(compiled.metadata.get("cluster", 1))
    clusters = _active_clusters(fn, cluster, threads, shared) if cluster > 1 else 0
    # a persistent kernel loops over the requested grid on as many programs as can be resident
    programs = max(1, dev.multiprocessors * int(blocks)) if compiled.metadata.get("persistent") else 0
    if programs and clusters:
        programs = min(programs, clusters * cluster)
    return LoadedKernel(fn, module, device, shared, threads, info_log, res, programs, clusters)


def _active_clusters(fn, cluster: int, threads: int, shared: int) -> int:
    """How many clusters of `cluster` programs the device runs at once. Clusters pack into
    the GPU's processing clusters, not just its SMs: 8-program clusters of one program per SM
    fit 15 times on a 132-SM H200, not 16, and a 16th would wait for a second wave. 0 when
    the driver or binding cannot say."""
    d = cu()
    try:
        config = d.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = cluster, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
        config.sharedMemBytes = shared
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        config.attrs = [attr]
        config.numAttrs = 1
        return max(0, int(check(d.cuOccupancyMaxActiveClusters(fn, config), "cuOccupancyMaxActiveClusters")))
    except (DriverError, AttributeError):  # an older driver or binding without the query
        return 0


def _fattr(fn, a, name: str) -> int:
    return int(check(cu().cuFuncGetAttribute(a, fn), "cuFuncGetAttribute", name))


def _jit_ptx(compiled: CompiledKernel, dev):
    d = cu()
    ptx = compiled.asm.get("ptx")
    if not ptx:
        raise DriverError(f"kernel '{compiled.name}' has no PTX to load")
    info, err = bytearray(_LOG_BYTES), bytearray(_LOG_BYTES)
    opt = d.CUjit_option
    options = [opt.CU_JIT_INFO_LOG_BUFFER, opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
               opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
               opt.CU_JIT_LOG_VERBOSE]
    values = [info, _LOG_BYTES, err, _LOG_BYTES, 1]
    if compiled.metadata.get("lineinfo"):  # keep the PTX's .loc lines in the JIT's code (ptxas -lineinfo)
        options.append(opt.CU_JIT_GENERATE_LINE_INFO)
        values.append(1)
    image = (ptx.encode() if isinstance(ptx, str) else bytes(ptx)) + b"\0"
    res, module = d.cuModuleLoadDataEx(image, len(options), options, values)
    info_log, err_log = _cstr(info), _cstr(err)
    if res.value != 0:
        if is_fault(res) or driver_context_lost():  # a context lost to a fault: say so, as every call does
            check((res,), "cuModuleLoadDataEx", compiled.name)
        raise DriverError(f"loading kernel '{compiled.name}' for {dev.name} ({dev.arch}) failed in "
                          f"cuModuleLoadDataEx: {getattr(res, 'name', res)}"
                          + (f"\nJIT log:\n{err_log}" if err_log else ""))
    return module, info_log


def _cstr(buf: bytearray) -> str:
    return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()


def _spills(info_log: str, compiled: CompiledKernel):
    m = _SPILL_RE.search(info_log)
    if m:
        return int(m.group(1)), int(m.group(2))
    meta = compiled.metadata
    return int(meta.get("spill_stores", meta.get("spills", 0))), int(meta.get("spill_loads", 0))


def resources(compiled: CompiledKernel, device: Optional[int] = None) -> Resources:
    """Registers, shared memory, spills and occupancy of `compiled` on `device` (loads it)."""
    return load(compiled, driver.current_device() if device is None else device).resources
