"""The memory families' figures (the ConvLuna paper's Figure 1): each run's memory as a heatmap, the
statistics per block along training, and the last block's degradation per variant. Drawn by
``memory_report`` for ``python -m lra_lab.diagnose memory``; moved here unchanged from the library's
``lra.reports.plots`` (issue 55: only the laboratory draws them). matplotlib as ``plots`` sets it up.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lra.reports.plots import plt

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

_BLOCK_STYLES: list[LineStyleType] = ["-", "--", "-.", (0, (5, 1, 1, 1, 1, 1))]


def _memory_image(ax: Any, fig: Any, memory_MxD: np.ndarray, colorbar: bool = True) -> None:
    """Memory cell on the vertical axis, feature on the horizontal, colour = value (diverging,
    centred on 0, symmetric limits per panel)."""
    m = np.asarray(memory_MxD, dtype=float)
    limit = float(np.max(np.abs(m))) or 1.0
    image = ax.imshow(m, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    ax.set_xlabel("feature")
    ax.set_ylabel("memory cell")
    if m.shape[0] <= 16:
        ax.set_yticks(range(m.shape[0]))
        ax.tick_params(axis="y", labelsize=6)
    if colorbar:
        fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, label="value")


def memory_heatmaps(panels: Sequence[tuple[str, np.ndarray]], path: Path, title: str, note: str = "") -> Path:
    """One heatmap per (panel title, M x D memory), side by side, in the layout of the ConvLuna
    paper's Figure 1, each with its own colorbar."""
    count = len(panels)
    fig, axes = plt.subplots(1, count, figsize=(4.3 * count, 4.4), squeeze=False)
    for ax, (panel_title, memory) in zip(axes[0], panels, strict=False):
        _memory_image(ax, fig, memory)
        ax.set_title(panel_title, fontsize=9)
    fig.suptitle(title, fontsize=10)
    if note:
        fig.text(0.99, 0.01, note, ha="right", va="bottom", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def memory_curves(
    curves: Mapping[str, Mapping[str, Mapping[str, Mapping[int, float]]]],
    stats_titles: Sequence[tuple[str, str]],
    path: Path,
    title: str,
) -> Path:
    """Memory statistics against training step: a panel per statistic (``stats_titles``: key,
    title in words), a colour per run and a line style per memory (names starting with
    "initial" dotted, the blocks solid, dashed, ...). ``curves[run][memory][stat][step] = value``."""
    from matplotlib.lines import Line2D

    columns = 2 if len(stats_titles) > 2 else len(stats_titles)
    rows = math.ceil(len(stats_titles) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns + 3.0, 3.4 * rows), squeeze=False)
    colors = plt.get_cmap("tab10")
    memories: list[str] = []
    for run_curves in curves.values():
        memories.extend(m for m in run_curves if m not in memories)
    blocks = [m for m in memories if not m.startswith("initial")]
    style: dict[str, LineStyleType] = {
        m: ":" if m.startswith("initial") else _BLOCK_STYLES[blocks.index(m) % len(_BLOCK_STYLES)] for m in memories
    }
    flat = list(axes.flat)
    for ax, (stat, stat_title) in zip(flat, stats_titles, strict=False):
        drawn = False
        for r, run_curves in enumerate(curves.values()):
            for memory, by_stat in run_curves.items():
                points = sorted((s, v) for s, v in by_stat.get(stat, {}).items() if v is not None)
                if points:
                    ax.plot(
                        *zip(*points, strict=False),
                        color=colors(r % 10),
                        linestyle=style[memory],
                        marker=".",
                        markersize=3,
                    )
                    drawn = True
        ax.set_title(stat_title, fontsize=9)
        ax.set_xlabel("training step", fontsize=8)
        ax.grid(alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
    for ax in flat[len(stats_titles) :]:
        ax.axis("off")
    handles = [Line2D([], [], color=colors(r % 10), label=run) for r, run in enumerate(curves)]
    handles += [Line2D([], [], color="black", linestyle=style[m], label=m) for m in memories]
    fig.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0 - 2.9 / fig.get_figwidth(), 0.93))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1.0 - 3.0 / fig.get_figwidth(), 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def memory_degradation(runs: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    """The memory-degradation finding at a glance. Top: for each variant (a bar: mean over its
    runs; dots: the runs), the last block's distinct memory vectors (a black tick marks the number
    of memory cells), mean pairwise cosine of the cells and packing-attention entropy. Bottom: the
    last block's memory of one run per variant (first validation example).

    ``runs``: dicts with ``variant``, ``cells``, ``distinct_vectors``, ``mean_pairwise_cosine``,
    ``packing_entropy`` (floats or None), ``memory`` (an M x D array, or None) and optionally
    ``reference`` (the published code's settings: drawn orange; default: the variant name ends
    with "(reference)"). Variants are drawn in the order they first appear.
    """
    variants: list[str] = []
    for r in runs:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    by_variant = {v: [r for r in runs if r["variant"] == v] for v in variants}
    heat = [(v, by_variant[v][0]["memory"]) for v in variants if by_variant[v][0].get("memory") is not None]
    columns = max(3, len(heat))
    fig = plt.figure(figsize=(max(12.0, 2.6 * columns), 8.6 if heat else 4.6), layout="constrained")
    if heat:
        top, bottom = fig.subfigures(2, 1, squeeze=False, height_ratios=(1.1, 1.0))[:, 0]
    else:
        top, bottom = fig, None
    axes = top.subplots(1, 3)
    x = np.arange(len(variants))
    colors = [
        "tab:orange" if by_variant[v][0].get("reference", v.endswith("(reference)")) else "tab:blue" for v in variants
    ]
    panels = [
        ("distinct_vectors", "distinct memory vectors\n(cells grouped at cosine >= 0.99; tick: memory cells)"),
        ("mean_pairwise_cosine", "mean cosine between memory cells\n(1 = all cells point the same way)"),
        ("packing_entropy", "packing-attention entropy / log(tokens)\n(1 = uniform over the input)"),
    ]
    for ax, (key, panel_title) in zip(axes, panels, strict=False):
        for i, v in enumerate(variants):
            values = [float(r[key]) for r in by_variant[v] if r.get(key) is not None]
            if values:
                ax.bar(i, np.mean(values), color=colors[i], alpha=0.55, width=0.7)
                ax.annotate(
                    f"{np.mean(values):.3g}",
                    (i, np.mean(values)),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
                ax.scatter(
                    np.full(len(values), i) + np.linspace(-0.15, 0.15, len(values)) * (len(values) > 1),
                    values,
                    color="black",
                    s=12,
                    zorder=3,
                )
            if key == "distinct_vectors":
                cells = by_variant[v][0]["cells"]
                ax.hlines(cells, i - 0.4, i + 0.4, color="black", linewidth=1.5)
        if key == "distinct_vectors":
            if max(r["cells"] for r in runs) > 32:
                ax.set_yscale("log")
            ax.set_ylim(bottom=0.8 if ax.get_yscale() == "log" else 0)
        else:
            low = min([0.0] + [float(r[key]) for r in runs if r.get(key) is not None])
            ax.set_ylim(low - 0.05 if low < 0 else 0.0, 1.08)
            ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
        ax.set_xticks(x, variants, rotation=30, ha="right", fontsize=8)
        ax.set_title(panel_title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    top.suptitle(
        title + "\nthe last encoder block at the best checkpoint; bar: mean over a variant's runs, "
        "dots: runs; blue: this suite's defaults, orange: the published code's settings (reference)",
        fontsize=9,
    )
    if bottom is not None:  # there is a heatmap row
        heat_axes = bottom.subplots(1, len(heat), squeeze=False)[0]
        for ax, (v, memory) in zip(heat_axes, heat, strict=False):
            _memory_image(ax, bottom, memory)
            ax.set_title(textwrap.fill(f"{v}: memory after the last block", 24), fontsize=8)
        bottom.suptitle("the last block's memory, first validation example (one run per variant)", fontsize=9)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
