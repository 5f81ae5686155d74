"""bench/attention_plot.py: the series it reads out of a results file, and the image it draws."""
from __future__ import annotations

import pytest

from bench import attention_plot, results


def _doc():
    rows = []
    for seq, (ex, tr) in {4096: (500.0, 460.0), 1024: (420.0, 390.0)}.items():
        name = f"attention fwd f16 D128 full S{seq}"
        rows += [results.row(name, "tilec", ex, "TFLOP/s", "triton", tr), results.row(name, "triton", tr, "TFLOP/s")]
    rows.append(results.row("attention bwd bf16 D64 causal S2048", "stdlib", 300.0, "TFLOP/s"))
    rows.append(results.row("softmax 4096x4096 bf16", "tilec", 2400.0, "GB/s"))   # not an attention row
    return {"device": "NVIDIA H200", "commit": "abc1234", "date": "2026-11-29", "rows": rows}


def test_series_are_keyed_by_pass_dtype_dim_mask_and_implementation_sorted_by_seq():
    s = attention_plot.series(_doc())
    assert s == {("fwd", "f16", 128, False, "tilec"): [(1024, 420.0), (4096, 500.0)],
                 ("fwd", "f16", 128, False, "triton"): [(1024, 390.0), (4096, 460.0)],
                 ("bwd", "bf16", 64, True, "stdlib"): [(2048, 300.0)]}


def test_a_file_without_attention_rows_is_a_value_error(tmp_path):
    pytest.importorskip("matplotlib")   # the `plot` extra
    with pytest.raises(ValueError, match="no attention rows"):
        attention_plot.plot({"rows": [results.row("softmax 64x64 f16", "tilec", 1.0, "GB/s")]}, str(tmp_path / "x.png"))


def test_the_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")   # the `plot` extra
    out = tmp_path / "attention.png"
    attention_plot.plot(_doc(), str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
