"""Each bench's own rows as bench/results.py rows (one schema for `bench.compare` and
`bench.tables`). Pure functions of the rows the benches print, so they are tested without a
GPU; each bench's `--results FILE` calls its converter and `results.write`.

A row's name says what was measured and its metric which implementation; the baseline is the
reference the issue's targets are stated against (Triton for attention, cuBLAS for GEMM, a
device copy of the same bytes for the memory-bound and decode ops). Missing measurements (an
implementation that failed: None) give no row.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

try:                                    # `python -m bench.X` / tests (package) or `python bench/X.py`
    from bench.results import row, write
except ImportError:                     # pragma: no cover - bench/ is on sys.path when run as a script
    from results import row, write      # type: ignore[no-redef]

__all__ = ["save", "attention_rows", "decode_rows", "gemm_rows", "membound_rows", "launch_rows", "mla_decode_rows"]


def _rows(name: str, r: Dict[str, Any], metrics: Iterable[str], unit: str, base: Optional[str],
          scale: float = 1.0) -> List[Dict[str, Any]]:
    ref = r.get(base) if base else None
    out = []
    for m in metrics:
        v = r.get(m)
        if v is None:
            continue
        if ref is not None and m != base:
            out.append(row(name, m, v * scale, unit, base, ref * scale))
        else:
            out.append(row(name, m, v * scale, unit))
    return out


def save(path: Optional[str], rows: List[Dict[str, Any]], device: str) -> None:
    """A bench's `--results FILE`: `rows` (a converter's) written there; nothing without a path."""
    if path:
        write(path, rows, device)


def attention_rows(rows) -> List[Dict[str, Any]]:
    """bench/attention.py: TFLOP/s per implementation, Triton's the baseline."""
    out = []
    for r in rows:
        name = (f"attention {r.get('pass', 'fwd')} {r['dtype']} D{r['d']} {'causal' if r['causal'] else 'full'} "
                f"S{r['seq']}")
        out += _rows(name, r, ("tilec", "stdlib", "triton", "sdpa_flash", "sdpa_cudnn"), "TFLOP/s", "triton")
    return out


def decode_rows(rows) -> List[Dict[str, Any]]:
    """bench/decode.py: % of a device copy of the KV bytes (the issue's measure), and us."""
    out = []
    for r in rows:
        page = f"page{r['page']}" if r.get("page") else "contiguous"
        name = f"attention_decode {page} b{r['batch']} ctx{r['context']} h{r['heads']}/{r['kv_heads']}"
        out.append(row(name, "% of copy", r["pct_copy"], "%"))
        out.append(row(name, "tilec", r["us"], "us", *(("sdpa", r["sdpa_us"]) if r.get("sdpa_us") else ())))
    return out


def gemm_rows(rows) -> List[Dict[str, Any]]:
    """bench/gemm.py: TFLOP/s per implementation, cuBLAS (torch.matmul) the baseline."""
    out = []
    for r in rows:
        name = f"matmul {r['dtype']} {r['M']}x{r['N']}x{r['K']}" + (f" {r['config']}" if "default" in r else "")
        out += _rows(name, r, ("tilec", "cublas", "triton", "tilec_no_split"), "TFLOP/s", "cublas")
    return out


def membound_rows(rows) -> List[Dict[str, Any]]:
    """bench/membound.py: GB/s of tilec against the copy, and of torch eager / torch.compile."""
    out = []
    for r in rows:
        name = f"{r['op']} {'x'.join(map(str, r['shape']))} {r['dtype']}"
        moved_per_ms = r["tilec_gbs"] * r["tilec_ms"]        # bytes moved / 1e6
        out.append(row(name, "tilec", r["tilec_gbs"], "GB/s", "copy", r["copy_gbs"]))
        for impl in ("torch", "compile"):
            if r.get(f"{impl}_ms"):
                out.append(row(name, impl, moved_per_ms / r[f"{impl}_ms"], "GB/s", "copy", r["copy_gbs"]))
    return out


def launch_rows(results: Dict[str, Dict[str, float]]) -> List[Dict[str, Any]]:
    """bench/launch_overhead.py: host us per launch of each contender, the raw launch the baseline."""
    floor = results.get("raw cuLaunchKernel (prepacked)", {}).get("median_us")
    return [row(name, "median", r["median_us"], "us", *(("raw cuLaunchKernel", floor) if floor else ()))
            for name, r in results.items()]


def mla_decode_rows(rows) -> List[Dict[str, Any]]:
    """bench/mla_decode.py: GB/s against the device copy, and us against the torch reference."""
    out = []
    for r in rows:
        name = f"mla_decode h{r['heads']} b{r['batch']} ctx{r['context']} page{r['page']}"
        out.append(row(name, "tilec", r["gbps"], "GB/s", "copy", r["copy_gbps"]))
        out.append(row(name, "time", r["us"], "us", "torch", r["torch_us"]))
    return out
