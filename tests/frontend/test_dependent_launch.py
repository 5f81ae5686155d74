"""tc.grid_dependency_wait / tc.launch_dependents and the dependent_launch option without a
GPU: the IR they become, the pass that places the wait, the PTX per arch, the interpreter,
the option's validation and the launch configuration the runtime builds."""
import numpy as np
import pytest

import tilec as tc
from tilec.ir import parse, verify
from tilec.specialize import parse_signature

from dependent_launch_kernels import consumer_explicit_kernel, consumer_kernel, producer_kernel

SIG = "y=f32[?], out=f32[?], n=i32, BLOCK=256"
EXPLICIT_SIG = "x=f32[?], y=f32[?], out=f32[?], n=i32, BLOCK=256"


def _ptx(kernel, sig, **options):
    return kernel.compile(sig, fast_math=True, **options)


def test_the_builtins_become_ops_in_source_order():
    m = producer_kernel.ir(parse_signature(producer_kernel, "x=f32[?], y=f32[?], n=i32, BLOCK=256, TRIGGER=True"))
    verify(m)
    assert parse(str(m)) == m
    assert "tile.launch_dependents" in str(m)
    text = str(consumer_explicit_kernel.ir(parse_signature(consumer_explicit_kernel, EXPLICIT_SIG)))
    lines = [ln.strip() for ln in text.splitlines()]
    wait = next(i for i, ln in enumerate(lines) if ln.startswith("tile.grid_dependency_wait"))
    loads = [i for i, ln in enumerate(lines) if "tile.load" in ln]
    assert loads[0] < wait < loads[1]  # x before the wait, y after it


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_a_dependent_kernel_waits_first_unless_it_says_where(arch):
    auto = _ptx(consumer_kernel, SIG, arch=arch, dependent_launch=True)
    ptx = auto.asm["ptx"]
    assert auto.metadata["dependent_launch"] is True
    assert ptx.count("griddepcontrol.wait;") == 1
    assert ptx.index("griddepcontrol.wait;") < ptx.index("ld.global")  # before every load
    explicit = _ptx(consumer_explicit_kernel, EXPLICIT_SIG, arch=arch, dependent_launch=True).asm["ptx"]
    assert explicit.count("griddepcontrol.wait;") == 1
    assert explicit.index("ld.global") < explicit.index("griddepcontrol.wait;")  # x is loaded before it


def test_without_the_option_nothing_waits_and_the_launch_is_plain():
    plain = _ptx(consumer_kernel, SIG, arch="sm_90a")
    assert plain.metadata["dependent_launch"] is False
    assert "griddepcontrol" not in plain.asm["ptx"]
    # an explicit wait is still emitted: it returns at once in a kernel launched plainly
    assert "griddepcontrol.wait;" in _ptx(consumer_explicit_kernel, EXPLICIT_SIG, arch="sm_90a").asm["ptx"]


def test_before_sm90_the_builtins_and_the_option_do_nothing():
    for kernel, sig in ((consumer_kernel, SIG), (consumer_explicit_kernel, EXPLICIT_SIG)):
        c = _ptx(kernel, sig, arch="sm_80", dependent_launch=True)
        assert c.metadata["dependent_launch"] is False
        assert "griddepcontrol" not in c.asm["ptx"]


def test_the_option_is_part_of_the_compile_key():
    from tilec.compiler import cache_key
    from tilec.options import CompileOptions
    spec = parse_signature(consumer_kernel, SIG)
    keys = {cache_key(consumer_kernel, spec, CompileOptions(arch="sm_90a", dependent_launch=d)) for d in (False, True)}
    assert len(keys) == 2


def test_the_interpreter_runs_producer_and_consumers_in_order():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    y, out, out2 = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    with tc.interpret():
        producer_kernel[(4,)](x, y, 1000, BLOCK=256, TRIGGER=True)
        consumer_kernel[(4,)](y, out, 1000, BLOCK=256, dependent_launch=True)
        consumer_explicit_kernel[(4,)](x, y, out2, 1000, BLOCK=256, dependent_launch=True)
    np.testing.assert_allclose(out, 2 * x + 2, rtol=1e-6)
    np.testing.assert_allclose(out2, np.ones_like(x), atol=1e-6)


def test_dependent_launch_config_asks_for_programmatic_serialization(monkeypatch):
    from cuda.bindings import driver as d

    from tilec.runtime import driver
    from tilec.runtime.launcher import DependentLaunch
    monkeypatch.setattr(driver, "cu", lambda: d)  # the bindings alone: a config needs no device

    class Prepared:  # what DependentLaunch reads of a PreparedLaunch
        function, threads, shared = None, 256, 4096

    config = DependentLaunch(Prepared()).configs[0]
    assert (config.blockDimX, config.blockDimY, config.blockDimZ, config.sharedMemBytes) == (256, 1, 1, 4096)
    assert config.numAttrs == 1
    attr = config.attrs[0]
    assert attr.id == d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attr.value.programmaticStreamSerializationAllowed == 1


def test_a_persistent_dependent_kernel_waits_once_before_its_loop():
    c = _ptx(consumer_kernel, SIG, arch="sm_90a", dependent_launch=True, persistent=True)
    gpu = c.asm["gpu"]
    assert gpu.count("tile.grid_dependency_wait") == 1
    assert gpu.index("tile.grid_dependency_wait") < gpu.index("tile.for")  # not once per program id
