"""bench/convert.py (each bench's rows in bench/results.py's schema) and bench/tables.py (the
docs' Markdown tables from results files), on rows shaped as the benches print them (CPU)."""
import subprocess
import sys
from pathlib import Path

import pytest

from bench import convert, results, tables

ROOT = Path(__file__).resolve().parent.parent

ATTN = [{"dtype": "f16", "d": 128, "causal": False, "seq": 4096, "z": 32, "tilec_ptxas": "224 regs",
         "tilec": 401.1, "stdlib": 398.1, "triton": 459.1, "sdpa_flash": 333.4, "sdpa_cudnn": 582.2},
        {"pass": "bwd", "dtype": "f16", "d": 64, "causal": True, "seq": 4096, "z": 32, "tilec_ptxas": "",
         "tilec": 100.0, "stdlib": None, "triton": 274.0, "sdpa_flash": 210.0, "sdpa_cudnn": 335.0}]


def test_attention_rows_are_tflops_against_triton():
    rows = convert.attention_rows(ATTN)
    by = {(r["name"], r["metric"]): r for r in rows}
    fwd = by[("attention fwd f16 D128 full S4096", "tilec")]
    assert fwd["value"] == 401.1 and fwd["unit"] == "TFLOP/s" and fwd["baseline"] == {"name": "triton", "value": 459.1}
    assert "baseline" not in by[("attention fwd f16 D128 full S4096", "triton")]
    assert ("attention bwd f16 D64 causal S4096", "stdlib") not in by      # a failed implementation: no row
    assert len(rows) == 9


def test_membound_rows_derive_each_implementation_s_bandwidth():
    r = {"op": "softmax", "shape": [4096, 4096], "dtype": "float16", "copy_ms": 0.030, "tilec_ms": 0.032,
         "torch_ms": 0.064, "tilec_gbs": 2000.0, "copy_gbs": 2133.3}
    rows = {x["metric"]: x for x in convert.membound_rows([r])}
    assert set(rows) == {"tilec", "torch"}
    assert rows["torch"]["value"] == pytest.approx(1000.0)        # the same bytes in twice the time
    assert rows["tilec"]["baseline"] == {"name": "copy", "value": 2133.3}


def test_gemm_decode_launch_and_mla_rows_are_valid_results(tmp_path):
    gemm = [{"dtype": "bf16", "M": 4096, "N": 4096, "K": 4096, "tilec": 700.0, "cublas": 690.0, "triton": None}]
    dec = [{"batch": 8, "context": 4096, "heads": 32, "kv_heads": 8, "kv_mb": 128.0, "page": 16, "us": 50.0,
            "gbs": 2700.0, "pct_copy": 60.0, "sdpa_us": None}]
    launch = {"raw cuLaunchKernel (prepacked)": {"median_us": 3.0, "best_us": 2.9},
              "tilec kernel[grid](DeviceArray)": {"median_us": 4.2, "best_us": 4.0}}
    mla = [{"op": "mla_decode", "heads": 128, "batch": 4, "context": 4096, "page": 64, "splits": 2, "us": 20.0,
            "gbps": 3000.0, "tflops": 90.0, "copy_gbps": 4000.0, "torch_us": 300.0, "max_err": 1e-3}]
    rows = convert.gemm_rows(gemm) + convert.decode_rows(dec) + convert.launch_rows(launch) + convert.mla_decode_rows(mla)
    doc = results.write(tmp_path / "r.json", rows, device="NVIDIA H200", commit="abc", date="2026-11-28T00:00:00")
    assert len(doc["rows"]) == 2 + 2 + 2 + 2
    keyed = results.rows_by_key(doc)
    assert keyed[("tilec kernel[grid](DeviceArray)", "median")]["baseline"]["value"] == 3.0
    assert keyed[("attention_decode page16 b8 ctx4096 h32/8", "% of copy")]["value"] == 60.0


def test_markdown_table_has_a_line_per_name_and_the_ratios(tmp_path):
    path = tmp_path / "a.json"
    results.write(path, convert.attention_rows(ATTN[:1]), device="NVIDIA H200", commit="abc1234",
                  date="2026-11-28T05:00:00+00:00", command="python bench/attention.py --results a.json")
    text = tables.markdown(results.read(path), ["tilec", "triton"], ratio=True)
    lines = text.splitlines()
    assert lines[0].startswith("NVIDIA H200, 2026-11-28, commit abc1234")
    assert lines[2] == "| measured | tilec (TFLOP/s) | triton (TFLOP/s) | tilec / triton |"
    assert lines[4] == "| attention fwd f16 D128 full S4096 | 401 | 459 | 0.87 |"
    with pytest.raises(ValueError, match="metrics not in the file: cudnn"):
        tables.markdown(results.read(path), ["cudnn"])


def test_tables_cli(tmp_path):
    path = tmp_path / "a.json"
    results.write(path, convert.attention_rows(ATTN), device="NVIDIA H200", commit="abc", command="x")
    done = subprocess.run([sys.executable, "-m", "bench.tables", str(path), "--ratio"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| attention bwd f16 D64 causal S4096 | 100 |" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "bench.tables", str(tmp_path / "none.json")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not a readable JSON file" in bad.stderr


def test_save_writes_a_results_file_only_when_asked(tmp_path):
    # every bench ends with convert.save(args.results, ...): without --results it must not fail
    convert.save(None, convert.attention_rows(ATTN), "NVIDIA H200")
    path = tmp_path / "r.json"
    convert.save(str(path), convert.attention_rows(ATTN), "NVIDIA H200")
    doc = results.read(path)
    assert doc["device"] == "NVIDIA H200" and len(doc["rows"]) == len(convert.attention_rows(ATTN))


def _doc_with_table(tmp_path, body="stale text\n"):
    results.write(tmp_path / "r.json", convert.attention_rows(ATTN), "NVIDIA H200", commit="abc1234",
                  date="2026-11-28T00:00:00+00:00", command="python3 bench/attention.py")
    doc = tmp_path / "page.md"
    doc.write_text("# Results\n\n<!-- table: r.json --metrics tilec,triton --ratio -->\n" + body +
                   "<!-- /table -->\n\ntext after\n")
    return doc


def test_update_regenerates_a_table_between_its_markers(tmp_path):
    doc = _doc_with_table(tmp_path)
    assert tables.update(doc, write=False) == ["r.json --metrics tilec,triton --ratio"]
    assert "stale text" in doc.read_text()                       # a check writes nothing
    tables.update(doc)
    text = doc.read_text()
    assert "stale text" not in text and text.endswith("<!-- /table -->\n\ntext after\n")
    assert "| attention fwd f16 D128 full S4096 | 401 | 459 | 0.87 |" in text
    assert tables.update(doc, write=False) == []                 # now in sync


def test_check_cli_fails_on_a_stale_table_and_names_a_missing_file(tmp_path):
    doc = _doc_with_table(tmp_path)
    assert tables.main(["--check", str(doc)]) == 1
    assert tables.main(["--update", str(doc)]) == 0
    assert tables.main(["--check", str(doc)]) == 0
    doc.write_text("<!-- table: missing.json -->\n<!-- /table -->\n")
    assert tables.main(["--check", str(doc)]) == 2


def test_the_docs_tables_match_their_results_files():
    docs = sorted((ROOT / "docs").glob("*.md"))
    stale = [(d.name, t) for d in docs for t in tables.update(d, write=False)]
    assert stale == [], "run: python -m bench.tables --update docs/*.md"


def test_bench_cells_print_failures_as_a_dash():
    assert (tables.cell(397.76), tables.cell(None)) == ("398", "-")
    assert (tables.ratio_cell(245.0, 316.0), tables.ratio_cell(None, 1.0), tables.ratio_cell(1.0, None)) == \
        ("0.78", "-", "-")
