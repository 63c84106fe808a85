"""Long runs' learning curves on one figure, and where each flattens (the ListOps pilot of issue 35).

``python -m lra_lab.reports.learning_curves RUNS_ROOT --out FOLDER`` reads every ``*/seed*/metrics.jsonl``
under ``RUNS_ROOT`` (finished or still running), and writes ``curves.png`` (validation accuracy and
smoothed train loss against step, one line per row, ListOps's structure-free baseline drawn),
``curves.md`` and ``curves.json``.

**Where a row flattens** (fixed here, before the pilot's curves were read): the first evaluation
step after which the row's best validation accuracy never rises by more than ``tolerance`` points
(default 1.0) over the rest of the run; and the train loss's fall over the last ``window`` steps
(per 1,000 steps, a least-squares slope). A row that flattens only within the last quarter of
its steps is marked "still improving": its budget, not its model, stopped it (a flat, noisy curve
whose best is a late blip within ``tolerance`` of earlier values is not).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from lra.training.run_files import MetricsLog


def read_curves(workdir: Path) -> dict[str, dict[int, float]]:
    """{"validation": step -> accuracy %, "train_loss": step -> loss} of one run (so far)."""
    records = MetricsLog(workdir / "metrics.jsonl").read()
    val = {r["step"]: 100.0 * r["accuracy"] for r in records if r["split"] == "validation" and "accuracy" in r}
    loss = {r["step"]: r["loss"] for r in records if r["split"] == "train" and "loss" in r}
    return {"validation": dict(sorted(val.items())), "train_loss": dict(sorted(loss.items()))}


def flattening(
    val: dict[int, float], loss: dict[int, float], tolerance: float = 1.0, window: int = 1000
) -> dict[str, Any]:
    """Where the validation curve flattens (see the module docstring) and the late train-loss slope."""
    if not val:
        return {"flattens_at": None, "still_improving": None, "best": None, "loss_slope_per_1000": None}
    steps = list(val)
    best_so_far = np.maximum.accumulate([val[s] for s in steps])
    final_best = best_so_far[-1]
    flat_at = next(s for s, b in zip(steps, best_so_far, strict=False) if final_best - b <= tolerance)
    best_step = steps[int(np.argmax([val[s] for s in steps]))]
    last = steps[-1]
    slope = None
    late = [(s, v) for s, v in loss.items() if s > max(loss) - window] if loss else []
    if len(late) >= 3:
        x, y = np.array(late, float).T
        slope = float(np.polyfit(x, y, 1)[0] * 1000.0)
    return {
        "flattens_at": flat_at,
        "best": float(final_best),
        "best_step": best_step,
        "last_step": last,
        "still_improving": bool(flat_at > 0.75 * last),
        "loss_slope_per_1000": slope,
    }


def collect(root: Path) -> dict[str, dict[str, Any]]:
    """row name (the folder under ``root``, with its seed) -> curves and flattening."""
    rows = {}
    for metrics in sorted(root.glob("*/seed*/metrics.jsonl")):
        workdir = metrics.parent
        name = f"{workdir.parent.name} ({workdir.name})"
        curves = read_curves(workdir)
        rows[name] = {
            **curves,
            **flattening(curves["validation"], curves["train_loss"]),
            "finished": (workdir / "result.json").exists(),
            "workdir": str(workdir),
            "setup": workdir.parent.name,
        }
    return rows


def setups(rows: dict[str, dict[str, Any]], window: int = 1000) -> dict[str, dict[str, Any]]:
    """Per setup (a row's seeds together): the mean validation curve over the steps every seed logged,
    its band (min, max), and how much the mean rose over the last ``window`` steps: a budget that
    stops a row while its mean still rises tests the budget, not the row."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows.values():
        grouped.setdefault(row["setup"], []).append(row)
    out = {}
    for name, seeds in grouped.items():
        common = sorted(set.intersection(*(set(r["validation"]) for r in seeds)))
        curve = np.array([[r["validation"][k] for k in common] for r in seeds], float).reshape(len(seeds), -1)
        mean = curve.mean(axis=0) if common else np.array([])
        rise = None
        if common and common[-1] - common[0] >= window:
            before = max(i for i, k in enumerate(common) if k <= common[-1] - window)
            rise = float(mean[-1] - mean[before])
        bests = [r["best"] for r in seeds if r["best"] is not None]
        out[name] = {
            "seeds": len(seeds),
            "steps": common,
            "mean": mean.tolist(),
            "low": curve.min(axis=0).tolist() if common else [],
            "high": curve.max(axis=0).tolist() if common else [],
            "best_mean": float(np.mean(bests)) if bests else None,
            "best_sd": float(np.std(bests, ddof=1)) if len(bests) > 1 else None,
            "still_improving": sum(bool(r["still_improving"]) for r in seeds),
            "mean_rise_last_window": rise,
            "window": window,
            "train_loss": {
                k: float(np.mean([r["train_loss"][k] for r in seeds]))
                for k in sorted(set.intersection(*(set(r["train_loss"]) for r in seeds)))
            },
        }
    return out


def _smooth(loss: dict[int, float], window: int = 10) -> tuple[np.ndarray, np.ndarray]:
    steps, values = np.array(list(loss), float), np.array(list(loss.values()), float)
    if len(values) < window:
        return steps, values
    kernel = np.ones(window) / window
    return steps[window - 1 :], np.convolve(values, kernel, mode="valid")


def plot(rows: dict[str, dict[str, Any]], path: Path, title: str, baseline: float | None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_val, ax_loss) = plt.subplots(1, 2, figsize=(13, 5.2), layout="constrained")
    grouped = setups(rows)
    if any(g["seeds"] > 1 for g in grouped.values()):  # one line per setup: its seeds' mean and range
        for name, g in grouped.items():
            label = f"{name} ({g['seeds']} seeds)"
            (line,) = ax_val.plot(g["steps"], g["mean"], marker=".", label=label)
            ax_val.fill_between(g["steps"], g["low"], g["high"], color=line.get_color(), alpha=0.15, linewidth=0)
            if g["train_loss"]:
                ax_loss.plot(*_smooth(g["train_loss"]), color=line.get_color(), label=label)
        val_title = "validation: mean over seeds (band: min to max)"
    else:
        for name, row in rows.items():
            (line,) = ax_val.plot(list(row["validation"]), list(row["validation"].values()), marker=".", label=name)
            if row["flattens_at"] is not None:
                ax_val.axvline(row["flattens_at"], color=line.get_color(), linestyle=":", linewidth=1)
            if row["train_loss"]:
                ax_loss.plot(*_smooth(row["train_loss"]), color=line.get_color(), label=name)
        val_title = "validation (dotted: where it flattens)"
    if baseline is not None:
        ax_val.axhline(
            baseline, color="black", linestyle="--", linewidth=1, label=f"structure-free baseline ({baseline:.1f}%)"
        )
    ax_val.set(xlabel="step", ylabel="validation accuracy (%)", title=val_title)
    ax_loss.set(xlabel="step", ylabel="train loss (moving mean of 10 logs)", title="train loss")
    for ax in (ax_val, ax_loss):
        if ax.get_legend_handles_labels()[0]:  # a run with no train logs yet has no loss line
            ax.legend(fontsize=8)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(rows: dict[str, dict[str, Any]], title: str, command: str, baseline_line: str | None) -> str:
    lines = [
        f"# {title}",
        "",
        f"`{command}`",
        "",
    ]
    grouped = setups(rows)
    if any(g["seeds"] > 1 for g in grouped.values()):
        lines += [
            "| setup | seeds | best validation, mean +- sd | mean validation rise over the last 1,000 steps "
            "| seeds still improving |",
            "|---|---:|---|---:|---:|",
        ]
        for name, g in grouped.items():
            best = "" if g["best_mean"] is None else f"{g['best_mean']:.1f}%"
            best += "" if g["best_sd"] is None else f" +- {g['best_sd']:.1f}"
            rise = "" if g["mean_rise_last_window"] is None else f"{g['mean_rise_last_window']:+.1f} points"
            lines.append(f"| {name} | {g['seeds']} | {best} | {rise} | {g['still_improving']} of {g['seeds']} |")
        lines.append("")
    lines += [
        "| row | last step | best validation (step) | flattens at "
        "(best within 1 point after) | still improving? | train-loss slope per 1,000 steps (last 1,000) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        slope = "" if r["loss_slope_per_1000"] is None else f"{r['loss_slope_per_1000']:+.3f}"
        best = "" if r["best"] is None else f"{r['best']:.1f}% ({r['best_step']})"
        lines.append(
            f"| {name}{'' if r['finished'] else ' (running)'} | {r.get('last_step')} | {best} | "
            f"{r['flattens_at']} | {'yes' if r['still_improving'] else 'no'} | {slope} |"
        )
    if baseline_line:
        lines += ["", baseline_line]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from lra.training.provenance import command_line, mark_start, seal, stamp
    from lra.training.run_files import write_json_atomic, write_text_atomic

    mark_start()
    parser = argparse.ArgumentParser(
        prog="python -m lra_lab.reports.learning_curves",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("root", type=Path, help="folder of <row>/seed<k>/ run directories")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="Learning curves")
    parser.add_argument(
        "--baseline-config",
        help="a ListOps config whose structure-free baseline is drawn, e.g. " "configs/listops_convluna.py:cpu",
    )
    parser.add_argument("--baseline-set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args(argv)
    rows = collect(args.root)
    if not rows:
        print(f"error: no */seed*/metrics.jsonl under {args.root}", file=sys.stderr)
        return 2
    baseline = baseline_line = None
    if args.baseline_config:
        from lra.reports import listops_baseline

        path, _, options = args.baseline_config.partition(":")
        from lra.defaults import load_config_file

        config = load_config_file(path).get_config(options or None)
        from lra.defaults import apply_override

        for item in args.baseline_set:
            field, _, text = item.partition("=")
            apply_override(config, field, text)
        result = listops_baseline.for_config(config)
        baseline = 100.0 * result["validation_accuracy"]
        baseline_line = "Reference: " + listops_baseline.line(result, "validation") + "."
    plot(rows, args.out / "curves.png", args.title, baseline)
    write_text_atomic(args.out / "curves.md", markdown(rows, args.title, command_line(), baseline_line))
    write_json_atomic(
        args.out / "curves.json",
        {**stamp(), "rows": rows, "setups": setups(rows), "baseline_validation_percent": baseline},
    )
    seal(args.out / "curves.json")  # an edit after this is found by the audit (lra.training.provenance)
    print(markdown(rows, args.title, command_line(), baseline_line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
