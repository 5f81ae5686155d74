"""What a GPU fault reports, on the CPU: the driver's calls are stood in for (the launch-memo
tests' Harness records launches; a sticky CUDA error is a stand-in result code), so the
messages are checked without a GPU. tests/runtime/test_gpu.py runs a real fault."""
from __future__ import annotations

import pytest

from tilec.dtypes import float16, float32
from tilec.errors import DriverError
from tilec.runtime import driver, launcher
from tilec.runtime.memory import DeviceArray

from test_launch_memo import Harness


class Code:
    """A stand-in CUresult: what driver.check reads of one."""

    def __init__(self, name, value):
        self.name, self.value = name, value


ILLEGAL_ADDRESS = Code("CUDA_ERROR_ILLEGAL_ADDRESS", 700)
NOT_READY = Code("CUDA_ERROR_NOT_READY", 600)


def X(n, ptr=0x10000):
    return DeviceArray(ptr, (n,), (4,), float32, 0)


@pytest.fixture
def run(monkeypatch):
    monkeypatch.setattr(driver, "_broken_reason", {})
    monkeypatch.setattr(driver, "last_launch", None)
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    return Harness(monkeypatch)


def fail_launches(monkeypatch, run, code=ILLEGAL_ADDRESS):
    """From now on cuLaunchKernel answers `code` (what it does once the context has faulted)."""
    def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        run.launches.append("refused")
        return (code,)
    monkeypatch.setattr(launcher, "_cuLaunchKernel", launch)


def test_a_fault_at_the_next_sync_names_the_last_launch_and_later_calls_say_the_context_is_lost(run, monkeypatch):
    run(X(1000), 5)
    with pytest.raises(DriverError) as first:
        driver.check((ILLEGAL_ADDRESS,), "cuCtxSynchronize")          # what tc.synchronize() meets
    msg = str(first.value)
    assert msg.startswith("cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")
    assert "The fault comes from kernel 'k' on grid (1, 1, 1) with x: f32[1000]" in msg
    assert "context of device 0 is now unusable" in msg and "restart the process" in msg
    assert first.value.context_lost and first.value.launch == "kernel 'k' on grid (1, 1, 1) with x: f32[1000]"

    fail_launches(monkeypatch, run)
    for n in (7, 8):                                                      # every later launch, same words
        with pytest.raises(DriverError) as later:
            run(X(2048), n)
        text = str(later.value)
        assert text.startswith("cuLaunchKernel (kernel 'k') failed: CUDA_ERROR_ILLEGAL_ADDRESS")
        assert ("was lost to an earlier fault (CUDA_ERROR_ILLEGAL_ADDRESS after kernel 'k' on grid (1, 1, 1) "
                "with x: f32[1000])") in text
        assert "nothing can run on this device" in text and later.value.context_lost
        assert "f32[2048]" not in text                                   # not blamed on this launch

    monkeypatch.setattr(driver._tls, "ctx_device", None)               # another thread, or after set_device
    with pytest.raises(DriverError, match=r"context of device 0 was lost to an earlier fault \(CUDA_ERROR_ILL"):
        driver.ensure_context(0)


def test_a_fault_first_seen_by_a_launch_is_blamed_on_the_launch_before_it(run, monkeypatch):
    run(X(1000), 5)
    fail_launches(monkeypatch, run)
    with pytest.raises(DriverError) as info:
        run(X(2048), 6)
    msg = str(info.value)
    assert msg.startswith("cuLaunchKernel (kernel 'k') failed: CUDA_ERROR_ILLEGAL_ADDRESS")
    assert "comes from kernel 'k' on grid (1, 1, 1) with x: f32[1000], the last launch before this call" in msg
    assert "CUDA_LAUNCH_BLOCKING=1" in msg and "unusable" in msg


def test_with_blocking_launches_a_launch_reports_its_own_fault(run, monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    run(X(1000), 5)
    fail_launches(monkeypatch, run)
    with pytest.raises(DriverError) as info:
        run(X(2048), 6)
    assert "comes from kernel 'k' on grid (1, 1, 1) with x: f32[2048]" in str(info.value)


def test_an_error_that_is_not_a_fault_leaves_the_context_alone(run, monkeypatch):
    run(X(1000), 5)
    with pytest.raises(DriverError) as info:
        driver.check((NOT_READY,), "cuStreamQuery")
    assert str(info.value) == "cuStreamQuery failed: CUDA_ERROR_NOT_READY"
    assert not info.value.context_lost and info.value.launch is None and driver._broken_reason == {}
    run(X(1000), 6)                                                       # still launches
    assert len(run.launches) == 2


def test_no_launch_yet_still_says_the_context_is_unusable(run):
    with pytest.raises(DriverError) as info:
        driver.check((ILLEGAL_ADDRESS,), "cuMemcpyDtoH")
    assert "comes from" not in str(info.value) and "unusable" in str(info.value)
    assert driver._broken_reason[0] == "CUDA_ERROR_ILLEGAL_ADDRESS in cuMemcpyDtoH"


class _Prepared:
    def __init__(self, name, params):
        self.name, self.param_names = name, params


@pytest.mark.parametrize("infos, text", [
    ([(0, (4096, 1000), (1000, 1), float16, 0), None, None],
     "kernel 'rows' on grid (64, 2, 1) with x: f16[4096, 1000]"),
    ([(0, (4096, 1000), (2048, 1), float16, 0), (0, (4096,), (1,), float32, 0), None],   # strided, torch-like
     "kernel 'rows' on grid (64, 2, 1) with x: f16[4096, 1000] strides (2048, 1), y: f32[4096]"),
    ([None, None, None], "kernel 'rows' on grid (64, 2, 1)"),                             # scalars only
])
def test_launch_descriptions(infos, text):
    assert driver.describe_launch((_Prepared("rows", ["x", "y", "n"]), 64, 2, 1, infos)) == text


def test_after_a_fault_any_error_code_is_reported_as_the_lost_context(run):
    run(X(1000), 5)
    with pytest.raises(DriverError):
        driver.check((ILLEGAL_ADDRESS,), "cuCtxSynchronize")
    with pytest.raises(DriverError, match=r"cuModuleLoadData \(kernel 'other'\) failed: CUDA_ERROR_INVALID_CONTEXT\. "
                                          r"The CUDA context of device 0 was lost to an earlier fault"):
        driver.check((Code("CUDA_ERROR_INVALID_CONTEXT", 201),), "cuModuleLoadData", "other")
    assert driver.context_lost(0) and not driver.context_lost(1)


def test_loading_a_kernel_after_a_fault_says_the_context_is_lost(run, monkeypatch):
    """The PTX JIT path reads its own result code (for the JIT log): a fault is still reported
    as every other call reports it."""
    from types import SimpleNamespace
    from tilec.compiled import CompiledKernel
    from tilec.runtime import module
    opts = SimpleNamespace(**{n: n for n in ("CU_JIT_INFO_LOG_BUFFER", "CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES",
                                             "CU_JIT_ERROR_LOG_BUFFER", "CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES",
                                             "CU_JIT_LOG_VERBOSE")})
    fake = SimpleNamespace(CUjit_option=opts, cuModuleLoadDataEx=lambda *a: (ILLEGAL_ADDRESS, None))
    monkeypatch.setattr(module, "cu", lambda: fake)
    compiled = CompiledKernel("late", {"ptx": ".version 8.0"}, {}, [], [])
    dev = SimpleNamespace(name="stand-in", arch="sm_90a")
    run(X(1000), 5)
    with pytest.raises(DriverError) as first:
        module._jit_ptx(compiled, dev)  # noqa: SLF001
    assert "cuModuleLoadDataEx (kernel 'late') failed: CUDA_ERROR_ILLEGAL_ADDRESS" in str(first.value)
    assert "comes from kernel 'k' on grid (1, 1, 1) with x: f32[1000]" in str(first.value)
    with pytest.raises(DriverError, match="lost to an earlier fault"):
        module._jit_ptx(compiled, dev)  # noqa: SLF001
