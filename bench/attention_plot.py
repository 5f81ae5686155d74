"""A plot of an attention results file (`bench/attention.py --results`, such as
docs/results/attention-h200.json): TFLOP/s against sequence length, one panel per pass and
head dim, one colour per implementation, full attention solid and causal dashed (f16; bf16
where the file has no f16).

    python bench/attention_plot.py docs/results/attention-h200.json docs/attention-h200.png

Needs matplotlib (the `plot` extra).
"""
from __future__ import annotations

import argparse
import re
from typing import Dict, List, Tuple

try:
    from bench import results
except ImportError:   # run as a script, bench/ first on sys.path
    import results  # type: ignore[no-redef]

_NAME = re.compile(r"attention (fwd|bwd) (\w+) D(\d+) (full|causal) S(\d+)$")
# implementation -> (label, colour), in the legend's order
STYLE = {"tilec": ("tilec example", "C0"), "stdlib": ("tilec stdlib", "C1"), "triton": ("Triton", "C2"),
         "sdpa_flash": ("SDPA flash (FA2)", "C3"), "sdpa_cudnn": ("SDPA cuDNN", "C4")}

Series = Dict[Tuple[str, str, int, bool, str], List[Tuple[int, float]]]


def series(doc) -> Series:
    """(pass, dtype, head dim, causal, implementation) -> [(seq, TFLOP/s)] sorted by seq, from
    a results document's attention rows (others are left out)."""
    out: Series = {}
    for r in doc["rows"]:
        m = _NAME.match(r["name"])
        if m is None or r["unit"] != "TFLOP/s":
            continue
        pas, dtype, d, mask, seq = m.groups()
        out.setdefault((pas, dtype, int(d), mask == "causal", r["metric"]), []).append((int(seq), r["value"]))
    return {k: sorted(v) for k, v in out.items()}


def plot(doc, path: str) -> None:
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    data = series(doc)
    if not data:
        raise ValueError("the results file has no attention rows ('attention fwd f16 D128 full S4096')")
    dtypes = {k[1] for k in data}
    dtype = "f16" if "f16" in dtypes else sorted(dtypes)[0]
    panels = sorted({(k[0], k[2]) for k in data if k[1] == dtype}, key=lambda p: (p[0] != "fwd", p[1]))
    cols = len({d for _, d in panels})
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False)
    for ax, (pas, d) in zip(axes.flat, panels):
        for impl, (label, colour) in STYLE.items():
            for causal in (False, True):
                pts = data.get((pas, dtype, d, causal, impl))
                if pts:
                    ax.plot(*zip(*pts), "--" if causal else "-", color=colour, marker="o", markersize=3,
                            label=f"{label}{' causal' if causal else ''}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{'forward' if pas == 'fwd' else 'backward'}, head dim {d}, {dtype}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{doc.get('device', '')}, commit {doc.get('commit', '?')}, {doc.get('date', '')[:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="a results file of bench/attention.py (bench/results.py's schema)")
    p.add_argument("out", help="the image to write (.png, .svg, ...)")
    args = p.parse_args(argv)
    plot(results.read(args.results), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
