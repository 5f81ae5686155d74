"""What a shipped kernel's ptxas report must say, one check for every test that assembles one."""
from __future__ import annotations


def assert_assembles_clean(report) -> None:
    """No spill, no ptxas warning (its C75xx warnings mean it patched the code), and no
    serialized wgmmas (its C7514/C7515 infos: every wgmma waits for the one before)."""
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report
    assert not report["warnings"], report["warnings"]
    assert not report.get("wgmma_serialized"), report
