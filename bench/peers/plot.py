"""Draws the peers grid as in the FlashAttention papers: TFLOP/s against sequence length, one panel
per (direction, head dim, causal; fp8 forward rows in panels of their own), one line per backend,
from the JSON files that join.py reads (a peers list: sdpa_peers.py / fa3_bench.py; flashattn_bench
documents: {"rows": [...]}).

usage: python3 bench/peers/plot.py --out FILE.png [--title TEXT] JSON [JSON ...]
"""
import argparse
import json

import matplotlib

from join import precision

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def with_precision(row):
    """fp8 rows (ours' e4m3, fa3_bench.py's fa3-fp8) get panels of their own ("fwd fp8"), where
    FA3's fp8 line takes FA3's colour."""
    if precision(row) != "fp8":
        return row
    backend = row["backend"][: -len("-fp8")] if row["backend"].endswith("-fp8") else row["backend"]
    return dict(row, direction=row["direction"] + " fp8", backend=backend)


def rows_of(path):
    doc = json.load(open(path))
    if isinstance(doc, dict):  # flashattn_bench: ours
        return [with_precision(dict(r, backend="ours-" + r["backend"])) for r in doc["rows"]]
    return [with_precision(r) for r in doc]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("json", nargs="+")
    a = ap.parse_args()
    rows = [r for path in a.json for r in rows_of(path)]
    dirs = [d for d in ("fwd", "fwd fp8", "bwd") if any(r["direction"] == d for r in rows)]
    dims = sorted({r["head_dim"] for r in rows})
    panels = [(d, hd, c) for d in dirs for hd in dims for c in (0, 1)]
    cols = 2 * len(dims)
    fig, axes = plt.subplots(len(dirs), cols, figsize=(3.2 * cols, 3.0 * len(dirs)), squeeze=False)
    backends = sorted({r["backend"] for r in rows})
    # One colour per backend in every panel (the default cycle restarts per panel, so a panel
    # without one backend would shift the others' colours), and one legend for the figure.
    colours = {b: f"C{i % 10}" for i, b in enumerate(backends)}
    for i, (direction, hd, causal) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        for b in backends:
            pts = sorted((r.get("seqlen", r.get("seqlen_q")), r["tflops"]) for r in rows
                         if r["backend"] == b and r["direction"] == direction and r["head_dim"] == hd and int(r["causal"]) == causal)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=colours[b],
                        lw=2.2 if b.startswith("ours") else 1.2, label=b)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{direction} d{hd} {'causal' if causal else 'non-causal'}", fontsize=9)
        ax.set_xlabel("seqlen", fontsize=8)
        ax.set_ylabel("TFLOP/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colours[b], lw=2.2 if b.startswith("ours") else 1.2, marker="o", ms=3) for b in backends]
    fig.legend(handles, backends, loc="lower center", ncol=len(backends), fontsize=8, frameon=False)
    if a.title:
        fig.suptitle(a.title, fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
