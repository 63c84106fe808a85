"""PNG figures of the results: learning curves over seeds and the Friedman p-value heatmap (Figure 2).

matplotlib (Agg) is the ``tables`` extra, never imported by training; Figure 1's are lra_lab.reports.memory_figures.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

try:
    import matplotlib
except ModuleNotFoundError as e:  # figures are an extra: the training path never imports this module
    raise ModuleNotFoundError(f'{e}: the figures need the tables extra, pip install -e ".[tables]"', name=e.name) from e

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REFERENCE = "Transformer"  # drawn in every panel, so that each family is seen against softmax attention
_PALETTE = [plt.get_cmap("tab10")(i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)]  # tab10 less grey (the reference: black)
_LINES = ["-", "--", "-.", ":"]
_MARKERS = ["o", "s", "^", "D"]


def _family(variant: str) -> str:
    """``"Luna-16"`` -> ``"Luna"`` (the same split as lra.reports.tables.family, which imports this module)."""
    m = re.fullmatch(r"(.+)-(\d+)", variant)
    return m.group(1) if m else variant


def curve_panels(
    variants: Sequence[str], max_lines: int = 4, reference: str = REFERENCE
) -> list[tuple[str, list[str]]]:
    """(title, variants) panels of at most ``max_lines`` variants, so 7-9 curves stay readable: a family with several
    sizes gets its own, one-variant families share. ``reference`` is not listed: it is drawn in every panel."""
    variants = list(variants)
    if len(variants) <= max_lines + 1:
        return [("", variants)]
    rest = [v for v in variants if v != reference]
    families: dict[str, list[str]] = {}
    for v in rest:
        families.setdefault(_family(v), []).append(v)
    groups: list[list[str]] = []
    singles: list[str] = []
    for members in families.values():
        if len(members) == 1:
            singles.extend(members)
        else:
            groups += [members[i : i + max_lines] for i in range(0, len(members), max_lines)]
    groups += [singles[i : i + max_lines] for i in range(0, len(singles), max_lines)]
    groups.sort(key=lambda g: rest.index(g[0]))
    return [(", ".join(dict.fromkeys(_family(v) for v in g)), g) for g in groups]


def _test_label(variant: str, values: Sequence[float] | None, common_n: int | None) -> str:
    """Legend entry: the variant and its test accuracy (%), mean ± sample std over seeds."""
    if not values:
        return variant
    text = f"{variant}: test {np.mean(values):.1f}"
    if len(values) > 1:
        text += f" ± {np.std(values, ddof=1):.1f}"
    if common_n is not None and len(values) != common_n:
        text += f" ({len(values)} seeds)"
    return text


def learning_curves(
    curves: Mapping[str, Mapping[int, Mapping[int, float]]],
    path: Path,
    title: str,
    *,
    test: Mapping[str, Sequence[float]] | None = None,
    baselines: Sequence[tuple[str, float]] = (),
    max_lines: int = 4,
) -> Path:
    """Validation accuracy (%) against step, ``curves[variant][seed][step]``: mean over seeds with a min-max band, in
    :func:`curve_panels`. ``test``: per-seed test accuracies (%) for the legend; ``baselines``: (label, %) lines."""
    test = test or {}
    variants = list(curves)
    panels = curve_panels(variants, max_lines)
    colours = {v: _PALETTE[i % len(_PALETTE)] for i, v in enumerate(v for v in variants if v != REFERENCE)}
    counts = [len(by_seed) for by_seed in curves.values()]
    common_n = max(set(counts), key=counts.count) if counts else None
    all_steps = sorted(set().union(*(s.keys() for by_seed in curves.values() for s in by_seed.values())))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.2 * len(panels) + 0.6, 5.6), sharey=True, squeeze=False, layout="constrained"
    )
    for ax, (panel_title, members) in zip(axes[0], panels, strict=False):
        drawn = ([REFERENCE] if REFERENCE in curves and REFERENCE not in members else []) + members
        for slot, variant in enumerate(drawn):
            by_seed = curves[variant]
            steps = sorted(set().union(*(s.keys() for s in by_seed.values())))
            values = [[by_seed[seed][step] for seed in by_seed if step in by_seed[seed]] for step in steps]
            mean = np.array([np.mean(v) for v in values])
            if variant == REFERENCE:
                style = dict(color="black", linestyle="-", marker="x", linewidth=1.3, markersize=6)
            else:
                k = slot - (drawn[0] == REFERENCE)
                style = dict(
                    color=colours[variant],
                    linestyle=_LINES[k % len(_LINES)],
                    marker=_MARKERS[k % len(_MARKERS)],
                    linewidth=1.6,
                    markersize=5,
                )
            ax.plot(steps, mean, label=_test_label(variant, test.get(variant), common_n), **style)
            if len(by_seed) > 1:
                low, high = np.array([min(v) for v in values]), np.array([max(v) for v in values])
                ax.fill_between(steps, low, high, color=style["color"], alpha=0.08, linewidth=0)
        for label, value in baselines:
            ax.axhline(value, color="gray", linestyle=(0, (2, 2)), linewidth=1.0)
            ax.annotate(
                f"{label}: {value:.1f}%",
                (1.0, value),
                xycoords=("axes fraction", "data"),
                xytext=(-3, 2),
                textcoords="offset points",
                ha="right",
                va="bottom",
                fontsize=7.5,
                color="dimgray",
            )
        if panel_title:
            ax.set_title(panel_title, fontsize=10)
        if len(all_steps) <= 12:
            ax.set_xticks(all_steps)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False)
    axes[0][0].set_ylabel("validation accuracy (%)")
    lowest = min([b for _, b in baselines] + [axes[0][0].get_ylim()[0]])
    axes[0][0].set_ylim(bottom=max(0.0, lowest - 2.0))
    fig.suptitle(title, fontsize=11)
    several = bool(counts) and max(counts) > 1
    note = (
        "markers: evaluations on the validation split"
        + ("; line: mean over seeds, band: min-max over seeds" if several else "")
        + "; legend: test accuracy (%) at the best-validation checkpoint"
        + (", mean ± sample std over seeds" if several else "")
    )
    width_chars = int(17 * fig.get_figwidth())  # ~17 characters per inch at fontsize 8
    fig.supxlabel(textwrap.fill(note, width_chars), fontsize=8, color="dimgray")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def pvalue_heatmap(
    p: Sequence[Sequence[float]], models: Sequence[str], tasks: Sequence[str], path: Path, title: str
) -> Path:
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
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                color=color,
                fontsize=9,
                fontweight="bold" if value < 0.05 else "normal",
            )
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_yticks(range(len(models)), models)
    width_chars = int(12 * fig.get_figwidth())  # ~12 characters per inch at fontsize 9
    ax.set_title("\n".join(textwrap.fill(line, width_chars) for line in title.splitlines()), fontsize=9)
    fig.colorbar(image, ax=ax, label="p-value (Holm)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
