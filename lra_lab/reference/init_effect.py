"""Does the published code's PyTorch initialisation change training? (``model.param_init``)

The same ``:reference`` config trained with this suite's initialisation (``xavier``) and with
PyTorch's (``pytorch``, lra.model.pytorch_init), the same seeds in both, each pair sharing its
batches and dropout keys. The rule, fixed before the runs: the initialisation matters if the
mean over seeds of the gap between the two inits' smoothed training-loss curves (a seed against
itself) exceeds the mean gap between two seeds of one init, or if the mean test accuracies differ
by more than the larger of the two inits' seed standard deviations.

    for init in xavier pytorch; do python -m lra.train --config configs/listops_convluna.py:cpu,reference \
        --config.model.param_init=$init --config.seeds=0,1,2 --workdir
        runs/init_listops_cpu/convluna-16-reference-$init; done
    python scripts/export_runs.py runs/init_listops_cpu results/runs/init_listops_cpu
    python -m lra_lab.reference.init_effect results/runs/init_listops_cpu --families convluna --out
    results/reference/init_listops_cpu

RUNS_ROOT holds ``<family>-16-reference-<init>/seed<k>/``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from lra.training.run_files import MetricsLog
from lra_lab.reports.curve_compare import compare_pair, train_losses

INITS = ("xavier", "pytorch")


def _runs(root: Path, family: str, init: str) -> dict[int, Path]:
    folder = root / f"{family}-16-reference-{init}"
    return {int(p.name[4:]): p for p in sorted(folder.glob("seed*")) if (p / "result.json").exists()}


def _mean_gap(a: Path, b: Path, window: int) -> float:
    la, lb = (train_losses(MetricsLog(run / "metrics.jsonl").read()) for run in (a, b))
    return compare_pair(la, lb, window, skip=0.1)["mean_gap"]


def family_effect(root: Path, family: str, window: int = 20) -> dict[str, Any] | None:
    runs = {init: _runs(root, family, init) for init in INITS}
    seeds = sorted(set(runs["xavier"]) & set(runs["pytorch"]))
    if len(seeds) < 2:
        return None
    acc = {
        init: [json.loads((runs[init][k] / "result.json").read_text())["test_accuracy"] for k in seeds]
        for init in INITS
    }
    between_inits = [_mean_gap(runs["xavier"][k], runs["pytorch"][k], window) for k in seeds]
    between_seeds = [
        _mean_gap(runs[init][a], runs[init][b], window) for init in INITS for a, b in itertools.combinations(seeds, 2)
    ]
    spread = max(statistics.stdev(acc[init]) for init in INITS)
    mean_diff = statistics.mean(acc["pytorch"]) - statistics.mean(acc["xavier"])
    gap_inits, gap_seeds = statistics.mean(between_inits), statistics.mean(between_seeds)
    matters = gap_inits > gap_seeds or abs(mean_diff) > spread
    return {
        "family": family,
        "seeds": seeds,
        "test_accuracy": acc,
        "mean_difference": mean_diff,
        "seed_std_max": spread,
        "loss_gap_between_inits": between_inits,
        "loss_gap_between_seeds": between_seeds,
        "loss_gap_inits_mean": gap_inits,
        "loss_gap_seeds_mean": gap_seeds,
        "matters": matters,
        "git_commit": json.loads((runs["xavier"][seeds[0]] / "result.json").read_text())["git_commit"],
    }


def markdown(rows: list[dict[str, Any]], command: str, note: str = "") -> str:
    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    lines = [
        "# PyTorch's initialisation against ours under `:reference` (ListOps, `cpu` preset)",
        "",
        __doc__.split("\n\n")[1].replace("\n", " "),
        "",
        "| model | seeds | test % xavier | test % pytorch | mean difference (points) | largest seed std | "
        "loss gap between inits (mean over seeds) | loss gap between seeds (mean) | matters |",
        "|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']}-16 (reference) | {','.join(map(str, r['seeds']))} | "
            f"{' / '.join(map(pct, r['test_accuracy']['xavier']))} | "
            f"{' / '.join(map(pct, r['test_accuracy']['pytorch']))} | "
            f"{100 * r['mean_difference']:+.2f} | {100 * r['seed_std_max']:.2f} | "
            f"{r['loss_gap_inits_mean']:.4f} | {r['loss_gap_seeds_mean']:.4f} | "
            f"{'yes' if r['matters'] else 'no'} |"
        )
    lines += ["", f"Runs: code {rows[0]['git_commit'] if rows else '?'}. Command: `{command}`", ""]
    if note:
        lines += [note, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", nargs="+", default=["convluna", "luna"])
    parser.add_argument("--note", default="", help="a line kept in the report (e.g. how the runs were made)")
    args = parser.parse_args(argv)
    rows = [r for f in args.families if (r := family_effect(args.root, f)) is not None]
    if not rows:
        print(
            f"error: no finished pairs of runs under {args.root} (expected <family>-16-reference-<init>/seed<k>)",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(
        [
            "python",
            "-m",
            "lra_lab.reference.init_effect",
            str(args.root),
            "--out",
            str(args.out),
            "--families",
            *args.families,
        ]
    )
    (args.out / "init_effect.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "init_effect.md").write_text(markdown(rows, command, args.note))
    print(markdown(rows, command, args.note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
