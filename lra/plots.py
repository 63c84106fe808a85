"""PNG figures of the results: learning curves over seeds and the Friedman p-value heatmap (Figure 2).

matplotlib with the Agg backend, so plots are written without a display.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _styles(variants: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """A colour per family (``Luna`` of ``Luna-16``) and a line style per size within it."""
    families: dict[str, list[str]] = {}
    for v in variants:
        m = re.fullmatch(r"(.+)-(\d+)", v)
        families.setdefault(m.group(1) if m else v, []).append(v)
    colors = plt.get_cmap("tab10")
    lines = ["-", "--", ":", "-."]
    return {v: (colors(i % 10), lines[j % len(lines)]) for i, members in enumerate(families.values())
            for j, v in enumerate(members)}


def learning_curves(curves: Mapping[str, Mapping[int, Mapping[int, float]]], path: Path, title: str) -> Path:
    """Validation accuracy (%) against step, one line per variant: the mean over seeds at each
    step, with a band from the minimum to the maximum seed. ``curves[variant][seed][step] = acc``."""
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    styles = _styles(list(curves))
    for variant, by_seed in curves.items():
        steps = sorted(set().union(*(s.keys() for s in by_seed.values())))
        values = [[by_seed[seed][step] for seed in by_seed if step in by_seed[seed]] for step in steps]
        mean = np.array([np.mean(v) for v in values])
        low, high = np.array([min(v) for v in values]), np.array([max(v) for v in values])
        color, line = styles[variant]
        ax.plot(steps, mean, color=color, linestyle=line, label=f"{variant} (n={len(by_seed)})")
        if len(by_seed) > 1:
            ax.fill_between(steps, low, high, color=color, alpha=0.1, linewidth=0)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.text(0.99, 0.01, "line: mean over seeds; band: min-max over seeds", ha="right", va="bottom", fontsize=7,
             color="gray")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def pvalue_heatmap(p: Sequence[Sequence[float]], models: Sequence[str], tasks: Sequence[str], path: Path,
                   title: str) -> Path:
    """Models x tasks heatmap of (Holm-corrected) p-values, each cell annotated; NaN: not tested."""
    data = np.array(p, dtype=float).reshape(len(models), len(tasks))
    fig, ax = plt.subplots(figsize=(1.6 * len(tasks) + 2.5, 0.6 * len(models) + 1.8))
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgray")
    image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(len(models)):
        for j in range(len(tasks)):
            value = data[i, j]
            text = "n/a" if math.isnan(value) else f"{value:.3f}"
            color = "black" if math.isnan(value) or value > 0.5 else "white"
            ax.text(j, i, text, ha="center", va="center", color=color, fontsize=9,
                    fontweight="bold" if value < 0.05 else "normal")
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_yticks(range(len(models)), models)
    width_chars = int(12 * fig.get_figwidth())  # ~12 characters per inch at fontsize 9
    ax.set_title("\n".join(textwrap.fill(line, width_chars) for line in title.splitlines()), fontsize=9)
    fig.colorbar(image, ax=ax, label="p-value (Holm)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
