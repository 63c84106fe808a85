"""What a results table's learning-curve figures draw: curves, title, chance, majority and ListOps baselines."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lra.reports.table_build import Table
from lra.reports.table_runs import RunResult, column_name, read_json_object, variant_order
from lra.training.run_files import MetricsLog, RunFileError

# NUM_CLASSES of each lra.data task module (tests check they agree): the chance line of the curves
TASK_CLASSES = {"text": 2, "matching": 2, "listops": 10, "image": 10, "pathfinder": 2, "pathx": 2}
# overrides written in words in figure titles; others appear as key=value
OVERRIDE_WORDS = {"warmup_steps": "warmup {} steps", "learning_rate": "learning rate {}", "batch_size": "batch {}"}


def validation_curves(runs: Sequence[RunResult], task: str) -> dict[str, dict[int, dict[int, float]]]:
    """``curves[variant][seed][step]`` = validation accuracy (%) from each run's metrics.jsonl."""
    curves: dict[str, dict[int, dict[int, float]]] = {}
    for run in sorted((r for r in runs if r.task == task), key=lambda r: (variant_order(r.variant), r.seed)):
        path = run.workdir / "metrics.jsonl"
        if not path.exists():
            continue
        try:  # a torn last line (a kill) is dropped with a warning; a malformed one drops the curve
            records = MetricsLog(path).read()
        except RunFileError as e:
            warnings.warn(f"{e}; {run.variant} seed {run.seed} has no curve", stacklevel=2)
            continue
        points = {}
        for rec in records:
            accuracy = rec.get("accuracy")
            if rec["split"] == "validation" and isinstance(accuracy, (int, float)) and math.isfinite(accuracy):
                points[rec["step"]] = 100.0 * float(accuracy)  # a resumed step: the last
        if points:
            curves.setdefault(run.variant, {})[run.seed] = points
    return curves


def curve_title(table: Table, task: str) -> str:
    """The title in words: "ListOps, cpu preset, 750 training steps (warmup 500 steps), 1 seed (Transformer: 2)"."""
    steps = sorted({r.num_train_steps for r in table.runs if r.task == task})
    words = [OVERRIDE_WORDS[k].format(v) if k in OVERRIDE_WORDS else f"{k}={v}" for k, v in table.scale.overrides]
    text = (
        f"{column_name(task)}, {table.scale.preset} preset, "
        + "/".join(f"{n:,}" for n in steps)
        + " training steps"
        + (f" ({', '.join(words)})" if words else "")
    )
    n = table.expected_n
    others = [
        f"{v}: {table.cells[(v, task)].n}"
        for v in table.variants
        if (v, task) in table.cells and table.cells[(v, task)].n != n
    ]
    return text + f", {n} seed{'s' if n != 1 else ''}" + (f" ({', '.join(others)})" if others else "")


def curve_baselines(
    task: str, majority: float | None = None, structure_free: dict[str, Any] | None = None
) -> list[tuple[str, float]]:
    """Horizontal lines: chance, the majority class when measured, ListOps's structure-free baseline."""
    lines = [(f"chance ({TASK_CLASSES[task]} classes)", 100.0 / TASK_CLASSES[task])] if task in TASK_CLASSES else []
    if majority is not None:
        lines.append(("majority class of validation", float(majority)))
    if structure_free is not None:
        lines.append(("structure-free baseline (outermost operator)", 100.0 * structure_free["validation_accuracy"]))
    return lines


def listops_baseline(runs: Sequence[RunResult]) -> tuple[dict[str, Any] | None, str | None]:
    """(structure-free baseline on the table's ListOps data or None, a sentence for the table)."""
    return first_baseline(run.workdir / "config.json" for run in runs if run.task == "listops")


def first_baseline(config_jsons: Iterable[Path]) -> tuple[dict[str, Any] | None, str | None]:
    """:func:`baseline_of_record` of the first record naming ListOps data (a study's rows share one data set)."""
    for config_json in config_jsons:
        found = baseline_of_record(config_json)
        if found != (None, None):
            return found
    return None, None


def baseline_of_record(config_json: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(baseline on the data a ``config.json`` names, a sentence); (None, None): no ListOps data; (None, why)."""
    from lra.reports import listops_baseline as lb

    not_computed = "Structure-free baseline not computed: "
    try:
        recorded = read_json_object(config_json) if config_json.exists() else {}
    except ValueError as e:
        return None, f"{not_computed}{config_json} is {e}."
    if recorded.get("task", "listops") != "listops" or not isinstance(recorded.get("data"), dict):
        return None, None
    from lra.data.types import DataError
    from lra.defaults import task_config

    config = task_config("listops")  # the data section is all the baseline reads
    try:
        config.data_dir = recorded.get("data_dir", "")
        for key, value in recorded["data"].items():
            if key in config.data:
                config.data[key] = tuple(value) if isinstance(value, list) else value
        result = lb.for_config(config)
    except (DataError, OSError, ValueError, TypeError) as e:
        return None, f"{not_computed}the runs' ListOps data could not be loaded ({e})."
    return result, f"Reference: {lb.line(result, 'test')} (`python -m lra.reports.listops_baseline`)."
