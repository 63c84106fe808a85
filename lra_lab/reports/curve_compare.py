"""Do two sets of runs train alike? Loss curves of paired runs, e.g. bfloat16 against float32.

Runs pair by their path under each root (``<root>/<task>_<variant>/seed<k>``, as scripts/sweep.py
lays them out), so two sweeps of the same grid that differ in one override compare run by run:

    python scripts/sweep.py lra_families --seeds 0 --config.num_train_steps=300 --run
    python scripts/sweep.py lra_families --seeds 0 --config.num_train_steps=300 --config.model.dtype=bfloat16 --run
    python scripts/compare_curves.py runs/sweeps/lra_families_paper_num-train-steps-300 \\
        runs/sweeps/lra_families_paper_model-dtype-bfloat16_num-train-steps-300 --labels float32 bfloat16 \\
        --out results/bench --name bf16_vs_f32_listops

Per pair: the training loss of both, smoothed by a moving mean over ``window`` logged steps (the
raw per-step loss of one batch is too noisy to compare), the largest gap between the smoothed
curves after the first ``skip`` of the steps (warm-up noise), the final smoothed losses, and the
validation accuracy each reached. "Agree" is the largest gap within ``tolerance`` (absolute loss).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lra.training.run_files import MetricsLog, write_figure_atomic, write_text_atomic


def train_losses(records: list[dict[str, Any]]) -> dict[int, float]:
    """step -> training loss (the mean of the steps logged at that point)."""
    return {int(r["step"]): float(r["loss"]) for r in records if r.get("split") == "train"}


def last_validation(records: list[dict[str, Any]]) -> float | None:
    values = [r["accuracy"] for r in records if r.get("split") == "validation"]
    return float(values[-1]) if values else None


def pair_runs(root_a: Path, root_b: Path) -> list[tuple[str, Path, Path]]:
    """(relative path, run under a, run under b) for every run both roots hold."""
    a = {p.parent.relative_to(root_a).as_posix(): p.parent for p in root_a.rglob("metrics.jsonl")}
    b = {p.parent.relative_to(root_b).as_posix(): p.parent for p in root_b.rglob("metrics.jsonl")}
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(
            f"no run is under both {root_a} and {root_b} (runs pair by their path below each "
            f"root, e.g. listops_transformer/seed0): were both sweeps of the same grid and seeds?"
        )
    return [(k, a[k], b[k]) for k in common]


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving mean (the first points average what there is)."""
    c = np.cumsum(np.insert(values, 0, 0.0))
    n = np.arange(1, len(values) + 1)
    lo = np.maximum(n - window, 0)
    return (c[n] - c[lo]) / (n - lo)


def compare_pair(a: dict[int, float], b: dict[int, float], window: int, skip: float) -> dict[str, Any]:
    steps = sorted(set(a) & set(b))
    if not steps:
        raise ValueError("the two runs logged no common step")
    la, lb = smooth(np.array([a[s] for s in steps]), window), smooth(np.array([b[s] for s in steps]), window)
    start = int(math.floor(skip * len(steps)))
    gap = np.abs(la - lb)[start:]
    worst = int(np.argmax(gap)) + start
    return {
        "steps": len(steps),
        "last_step": steps[-1],
        "final_loss": [float(la[-1]), float(lb[-1])],
        "max_gap": float(gap.max()),
        "max_gap_step": steps[worst],
        "mean_gap": float(gap.mean()),
        "curves": {"steps": steps, "a": la.tolist(), "b": lb.tolist()},
    }


def compare(
    root_a: Path, root_b: Path, window: int = 20, skip: float = 0.1, tolerance: float = 0.05
) -> list[dict[str, Any]]:
    rows = []
    for name, run_a, run_b in pair_runs(root_a, root_b):
        a, b = (MetricsLog(run / "metrics.jsonl").read() for run in (run_a, run_b))
        row = {
            "run": name,
            **compare_pair(train_losses(a), train_losses(b), window, skip),
            "validation_accuracy": [last_validation(a), last_validation(b)],
        }
        row["agree"] = row["max_gap"] <= tolerance
        rows.append(row)
    return rows


def markdown(report: dict[str, Any]) -> str:
    a, b = report["labels"]
    s = report["settings"]
    lines = [
        f"# Training loss: {a} against {b}",
        "",
        f"Command: `{report['command']}`.",
        f"Runs: `{report['roots'][0]}` ({a}) and `{report['roots'][1]}` ({b}), paired by path. Loss: "
        f"moving mean over {s['window']} logged steps; gap: |{a} - {b}| of the smoothed losses after the "
        f"first {100 * s['skip']:.0f}% of the steps; agree: largest gap <= {s['tolerance']}.",
        "",
        f"| run | steps | final loss {a} | final loss {b} | largest gap (at step) | mean gap | "
        f"validation {a} | validation {b} | agree |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    pct = lambda v: "" if v is None else f"{100 * v:.2f}%"  # noqa: E731
    for r in report["rows"]:
        lines.append(
            f"| {r['run']} | {r['last_step']} | {r['final_loss'][0]:.4f} | {r['final_loss'][1]:.4f} | "
            f"{r['max_gap']:.4f} ({r['max_gap_step']}) | {r['mean_gap']:.4f} | "
            f"{pct(r['validation_accuracy'][0])} | {pct(r['validation_accuracy'][1])} | "
            f"{'yes' if r['agree'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, (a, b) = report["rows"], report["labels"]
    cols = min(3, len(rows))
    nrows = math.ceil(len(rows) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False, layout="constrained")
    for ax, r in zip(axes.flat, rows, strict=False):
        c = r["curves"]
        ax.plot(c["steps"], c["a"], label=a, color="tab:blue", linewidth=1.4)
        ax.plot(c["steps"], c["b"], label=b, color="tab:orange", linewidth=1.4, linestyle="--")
        ax.set_title(f"{r['run']} (gap {r['max_gap']:.3f})", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(rows) :]:
        ax.set_visible(False)
    axes[0][0].set_ylabel(f"training loss (moving mean, {report['settings']['window']} steps)", fontsize=8)
    fig.suptitle(f"Training loss, {a} vs {b}", fontsize=11)
    write_figure_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def write(
    rows: list[dict[str, Any]],
    labels: Sequence[str],
    roots: Sequence[Path],
    settings: dict[str, Any],
    command: str,
    out: Path,
    name: str,
) -> dict[str, Any]:
    report = {
        "labels": list(labels),
        "roots": [str(r) for r in roots],
        "settings": settings,
        "command": command,
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / f"{name}.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(out / f"{name}.md", markdown(report))
    plot(report, out / f"{name}.png")
    return report
