"""tilec.Target: the features and facts of each arch, resolved once, and how options carry it."""
from __future__ import annotations

import pytest

import tilec
from tilec.options import CompileOptions
from tilec.target import SUPPORTED_ARCHS, Target

# arch -> (wgmma, tma, clusters, setmaxnreg, dependent launch, f8 convert, f8 mma)
FEATURES = {
    "sm_80": (False, False, False, False, False, False, False),
    "sm_86": (False, False, False, False, False, False, False),
    "sm_89": (False, False, False, False, False, False, False),  # f8 cvts need PTX 8.1 there
    "sm_90": (False, True, True, False, True, True, False),
    "sm_90a": (True, True, True, True, True, True, True),
    "sm_100": (False, True, True, False, True, True, False),
    "sm_100a": (False, True, True, True, True, True, False),
    "sm_120a": (False, True, True, False, True, True, False),
}


@pytest.mark.parametrize("arch", FEATURES)
def test_features_per_arch(arch):
    t = Target.from_arch(arch)
    got = (t.has_wgmma, t.has_tma, t.has_clusters, t.has_setmaxnreg, t.has_dependent_launch, t.has_f8_convert,
           t.has_f8_mma)
    assert got == FEATURES[arch]
    assert t.arch == arch and t.has_cp_async and t.ptx_min == SUPPORTED_ARCHS[arch]


@pytest.mark.parametrize("arch, facts", [
    # (SMs, shared per block, shared per SM, threads per SM, CTAs per SM, L2 MB, clusters of 8)
    ("sm_90a", (132, 232448, 233472, 2048, 32, 50, 15)),    # H100 SXM
    ("sm_80", (108, 166912, 167936, 2048, 32, 40, 0)),      # A100 SXM
    ("sm_86", (72, 101376, 102400, 1536, 16, 6, 0)),        # A10
])
def test_nominal_facts(arch, facts):
    t = Target.from_arch(arch)
    assert (t.sm_count, t.shared_per_block, t.shared_per_sm, t.max_threads_per_sm, t.max_programs_per_sm,
            t.l2_bytes >> 20, t.clusters_of_8) == facts
    assert (t.registers_per_sm, t.registers_per_thread) == (65536, 255)


def test_from_arch_normalizes_and_caches():
    t = Target.from_arch("sm_90a")
    assert Target.from_arch("90a") is t and Target.of(t) is t and Target.of("sm_90a") is t
    assert Target.from_arch((8, 0)).arch == "sm_80" and Target.from_arch(80).capability == (8, 0)
    assert Target.from_arch("sm_100a").number == 100
    with pytest.raises(ValueError, match="unsupported arch 'sm_70'"):
        Target.from_arch("sm_70")
    with pytest.raises(ValueError, match="must look like"):
        Target.from_arch("hopper")
    assert tilec.Target is Target


def test_current_without_a_gpu_is_the_default(monkeypatch):
    from tilec.runtime import driver
    monkeypatch.setattr(driver, "is_available", lambda: False)
    assert Target.current() is Target.default() is Target.from_arch("sm_90a")


def test_validated_resolves_the_target_once(monkeypatch):
    from tilec.runtime import driver
    monkeypatch.setattr(driver, "is_available", lambda: False)
    opts = CompileOptions().validated()
    assert opts.arch == "sm_90a" and opts.target is Target.default()
    # a given arch wins; a given default applies only when no arch is given
    assert CompileOptions(arch="80").validated().target is Target.from_arch("sm_80")
    assert CompileOptions().validated(Target.from_arch("sm_86")).arch == "sm_86"
    assert CompileOptions(arch="sm_80").validated(Target.from_arch("sm_86")).arch == "sm_80"
    # validating again keeps it
    assert opts.validated() == opts
    with pytest.raises(ValueError, match="contradicts"):
        CompileOptions(arch="sm_80", target=Target.from_arch("sm_90a")).validated()


def test_options_check_against_the_targets_limits():
    with pytest.raises(ValueError, match="cluster=2 needs sm_90"):
        CompileOptions(arch="sm_80", cluster=2).validated()
    CompileOptions(arch="sm_90", cluster=2).validated()
    # an sm_86 SM holds 1536 threads: 12 programs of 4 warps, where sm_80 holds 16
    CompileOptions(arch="sm_80", min_programs_per_sm=16).validated()
    with pytest.raises(ValueError, match="from 0 .no floor. to 12"):
        CompileOptions(arch="sm_86", min_programs_per_sm=16).validated()


@pytest.mark.gpu
def test_current_reads_the_device():
    from tilec.runtime import driver
    dev = driver.get_device()
    t = Target.current()
    assert t is Target.for_device(dev.ordinal) and t.arch == dev.arch and t.device == dev.name
    assert t.sm_count == dev.multiprocessors and t.shared_per_block == dev.max_shared_per_block_optin
    assert t.l2_bytes == dev.attribute("L2_CACHE_SIZE") > 0 and t.registers_per_sm >= 65536
    # features come from the arch, facts from the driver
    nominal = Target.from_arch(dev.arch)
    assert (t.has_wgmma, t.has_tma, t.has_clusters) == (nominal.has_wgmma, nominal.has_tma, nominal.has_clusters)
    assert CompileOptions().validated().target is t

