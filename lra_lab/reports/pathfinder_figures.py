"""Figures of the Pathfinder tasks (results/pathfinder/): example images and a run's learning curve.

    python scripts/pathfinder_figures.py examples --out results/pathfinder/examples.png
    python scripts/pathfinder_figures.py curve --run results/runs/pathfinder_cpu/seed0 \
        --out results/pathfinder/curve_pathfinder_cpu.png

``examples``: images from lra/data/pathfinder_gen.py (the generator that writes the data), two per
label for each Pathfinder-32 difficulty, plus Path-X (128 x 128) and the 16 x 16 cpu profile; the
marker centres are circled in a copy beside each image, so a reader can trace the answer.
``curve``: validation accuracy against step (lra.reports.plots.learning_curves), chance at 50%, the test
accuracy at the best-validation checkpoint in the legend. Needs the tables extra (matplotlib).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lra.data import pathfinder_gen

REPO = Path(__file__).resolve().parents[2]

ROWS = [  # (side, setting, title)
    (32, "curv_baseline", "Pathfinder 32 x 32\ncurv_baseline\n(6 paddles)"),
    (32, "curv_contour_length_9", "Pathfinder 32 x 32\ncurv_contour_length_9\n(9 paddles)"),
    (32, "curv_contour_length_14", "Pathfinder 32 x 32\ncurv_contour_length_14\n(14, LRA's setting)"),
    (128, "curv_contour_length_14", "Path-X 128 x 128\ncurv_contour_length_14\n(14, LRA's setting)"),
    (16, "curv_baseline", "cpu preset 16 x 16\ncurv_baseline\n(6 paddles)"),
]


def examples(out: Path, seed: int) -> Path:
    """A grid: one row per (side, setting), two images per label, each shown plain and with its
    marker centres circled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_label = 2
    fig, axes = plt.subplots(
        len(ROWS), 4 * per_label, figsize=(2.0 * 4 * per_label, 2.3 * len(ROWS)), layout="constrained"
    )
    for r, (side, setting, title) in enumerate(ROWS):
        batch = pathfinder_gen.generate(
            side, pathfinder_gen.SETTINGS[setting], 12, pathfinder_gen.batch_seed(seed, side, setting, 0)
        )
        picks = [i for lab in (1, 0) for i in np.nonzero(batch.labels == lab)[0][:per_label]]
        for c, i in enumerate(picks):
            label = int(batch.labels[i])
            for k, circled in enumerate((False, True)):
                ax = axes[r, 2 * c + k]
                ax.imshow(batch.images[i], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if circled:
                    for y, x in batch.markers[i]:
                        ax.add_patch(
                            plt.Circle(
                                (x - 0.5, y - 0.5),
                                radius=max(1.5, side / 14),
                                fill=False,
                                color="tab:red" if label else "tab:blue",
                                linewidth=1.4,
                            )
                        )
                    ax.set_title("markers", fontsize=7)
                else:
                    ax.set_title(f"label {label}: {'connected' if label else 'not connected'}", fontsize=7)
        axes[r, 0].set_ylabel(title, fontsize=7.5)
    fig.suptitle(
        "Pathfinder examples (lra/data/pathfinder_gen.py): is there a path between the two markers?", fontsize=10
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def curve(run: Path, out: Path, title: str | None) -> Path:
    """Validation accuracy of one run against step, with its test accuracy and the chance line."""
    from lra.reports import plots

    result = json.loads((run / "result.json").read_text())
    steps = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("split") == "validation":
            steps[int(row["step"])] = 100.0 * float(row["accuracy"])
    if not steps:
        raise SystemExit(f"error: no validation rows in {run / 'metrics.jsonl'}")
    variant = result["variant"]
    title = title or (
        f"{result['task']} ({result['config_preset']} preset), {variant}, seed {result['seed']}: "
        f"validation accuracy"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    return plots.learning_curves(
        {variant: {int(result["seed"]): steps}},
        out,
        title,
        test={variant: [100.0 * result["test_accuracy"]]},
        baselines=[("chance (2 classes)", 50.0)],
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("examples", help="example images of every difficulty and both labels")
    e.add_argument("--out", type=Path, default=REPO / "results" / "pathfinder" / "examples.png")
    e.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("curve", help="a run's validation curve")
    c.add_argument("--run", type=Path, required=True, help="a workdir or a results/runs/... record")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--title", default=None)
    args = p.parse_args(argv)
    path = examples(args.out, args.seed) if args.command == "examples" else curve(args.run, args.out, args.title)
    print(f"wrote {path}")
    return 0
