"""Figures for the reports (matplotlib, the ``tables`` extra): drawn from records, never from memory."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lra.training.run_files import write_figure_atomic


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timing_plot(record: Mapping[str, Any], path: Path) -> None:
    """Seconds per call against length, log-log, one line per layer (agglomerative Figure 1's layout)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    layers = sorted({r["layer"] for r in record["rows"]})
    for layer in layers:
        rows = sorted((r for r in record["rows"] if r["layer"] == layer), key=lambda r: r["length"])
        ax.errorbar([r["length"] for r in rows], [r["seconds"] for r in rows], yerr=[r["sem"] for r in rows],
                    marker="o", ms=3, capsize=2, label=layer, linestyle="--" if "causal" in layer else "-")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("seconds per forward call")
    ax.set_title(f"one attention layer, batch {record.get('batch')}, dim {record.get('dim')}, one CPU core")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_figure_atomic(fig, path, dpi=120)
    finally:
        plt.close(fig)


def heatmaps(grid: Mapping[tuple[str, int, int], float], lengths, clusters, path: Path, title: str = "") -> None:
    """Masked-copy accuracy, length x clusters, one panel per clustered family (the paper's Figure 5)."""
    plt = _pyplot()
    families = ("improved_clustered", "clustered")
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.4))
    for ax, family in zip(axes, families):
        data = [[grid.get((family, L, c), float("nan")) for c in clusters] for L in lengths]
        im = ax.imshow(data, vmin=0, vmax=1, cmap="viridis", origin="lower")
        for i, row in enumerate(data):
            for j, value in enumerate(row):
                missing = value != value  # NaN: not run (yet)
                ax.text(j, i, "not run" if missing else f"{100 * value:.0f}", ha="center", va="center",
                        color="0.4" if missing else ("w" if value < 0.6 else "k"), fontsize=7 if missing else 8)
        ax.set_xticks(range(len(clusters)), [str(c) for c in clusters])
        # the reference row: full attention's accuracy at each length, beside the length
        full = [grid.get(("full", L, 0)) for L in lengths]
        ax.set_yticks(range(len(lengths)), [f"{L}\n(full {100 * f:.0f})" if f is not None else str(L)
                                             for L, f in zip(lengths, full)], fontsize=8)
        ax.set_xlabel("clusters")
        if ax is axes[0]:
            ax.set_ylabel("sequence length L (full attention's %)")
        ax.set_title(family.replace("_", " "))
    fig.colorbar(im, ax=axes, shrink=0.8, label="masked-symbol accuracy")
    if title:
        fig.suptitle(title, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_figure_atomic(fig, path, dpi=120)
    finally:
        plt.close(fig)


def seed_dots(rows: Mapping[str, Mapping[int, float]], path: Path, title: str, baseline: float | None = None) -> None:
    """Test accuracy per seed (dots) and the mean (bar) for each row that has runs, one row per line;
    ``baseline`` (test %, e.g. ListOps's structure-free rule) as a dashed line: a row on it learned nothing."""
    plt = _pyplot()
    labels = list(rows)
    lines = textwrap.wrap(title, 110)  # a one-line title this long is cut off at the figure's edges
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(labels) + 1.2 + 0.15 * len(lines)))
    for i, label in enumerate(labels):
        values = list(rows[label].values())
        ax.scatter(values, [i] * len(values), s=14, color="C0", zorder=3)
        ax.plot([sum(values) / len(values)] * 2, [i - 0.3, i + 0.3], color="C3", lw=2)
    xlabel = "test accuracy (%): dots are seeds, red bars their mean"
    if baseline is not None:
        ax.axvline(baseline, color="0.4", ls="--", lw=1)
        xlabel += f",\ndashed line the structure-free baseline ({baseline:.1f}%)"
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    fig.suptitle("\n".join(lines), fontsize=8)  # centred on the figure: long row labels push the axes right
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_figure_atomic(fig, path, dpi=120)
    finally:
        plt.close(fig)
