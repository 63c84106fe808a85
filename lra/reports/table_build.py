"""One results table: cells, completeness, bold, averages and Friedman tests (lra/reports/tables.py: the rules)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from pathlib import Path

from lra.papers.convluna import MEMORY_SIZES
from lra.reports import stats
from lra.reports.table_runs import RunResult, Scale, column_name, family, task_order, variant_order


@dataclasses.dataclass
class Table:
    """The numbers of one scale: cells, completeness, averages, best entries, Friedman tests."""

    scale: Scale
    runs: list[RunResult]
    expected_n: int
    tasks: list[str]
    variants: list[str]
    cells: dict[tuple[str, str], stats.Cell]
    averages: dict[str, float | None]
    best: dict[str, set[str]]  # column ("Average" too) -> bold variants
    friedman: list[stats.FriedmanResult]
    duplicates: list[Path]

    def complete(self, variant: str, task: str) -> bool:
        cell = self.cells.get((variant, task))
        return cell is not None and cell.n >= self.expected_n

    @property
    def steps_text(self) -> str:
        if self.scale.steps is not None:
            return f"{self.scale.steps:,} training steps"
        per_task = {r.task: r.num_train_steps for r in self.runs}
        return (
            "preset-default training steps (" + ", ".join(f"{column_name(t)} {per_task[t]:,}" for t in self.tasks) + ")"
        )

    @property
    def device_kinds(self) -> list[str]:
        return sorted({r.device_kind for r in self.runs})

    @property
    def title(self) -> str:
        over = ", ".join(f"{k}={v}" for k, v in self.scale.overrides)
        return (
            f"Preset `{self.scale.preset}`, {self.steps_text}"
            + (f", overrides {over}" if over else "")
            + f"; device: {', '.join(self.device_kinds)}"
        )


def build_table(scale: Scale, runs: Sequence[RunResult], expected_n: int | None = None) -> Table:
    """Cells, averages and bold entries of one scale's runs (duplicate seeds: the first path wins)."""
    seen: dict[tuple[str, str, int], RunResult] = {}
    duplicates = []
    for run in sorted(runs, key=lambda r: str(r.workdir)):
        key = (run.variant, run.task, run.seed)
        if key in seen:
            duplicates.append(run.workdir)
            warnings.warn(
                f"{run.workdir} repeats {run.variant} / {run.task} / seed {run.seed} of "
                f"{seen[key].workdir}; ignoring it",
                stacklevel=2,
            )
            continue
        seen[key] = run
    unique = list(seen.values())
    tasks = sorted({r.task for r in unique}, key=task_order)
    variants = sorted({r.variant for r in unique}, key=variant_order)
    cells: dict[tuple[str, str], stats.Cell] = {}
    for run in sorted(unique, key=lambda r: r.seed):
        cell = cells.setdefault((run.variant, run.task), stats.Cell([], []))
        cell.seeds.append(run.seed)
        cell.values.append(100.0 * run.test_accuracy)
    n_max = max((c.n for c in cells.values()), default=0)
    table = Table(scale, unique, expected_n or n_max, tasks, variants, cells, {}, {}, [], duplicates)
    for v in variants:
        table.averages[v] = (
            sum(cells[(v, t)].mean for t in tasks) / len(tasks)
            if len(tasks) > 1 and all(table.complete(v, t) for t in tasks)
            else None
        )
    for t in tasks:
        shown = {v: cells[(v, t)].mean for v in variants if (v, t) in cells}
        table.best[t] = {v for v in _argmax(shown) if table.complete(v, t)}
    table.best["Average"] = _argmax({v: a for v, a in table.averages.items() if a is not None})
    table.friedman = friedman_tests(unique, tasks)
    return table


def _argmax(values: dict[str, float]) -> set[str]:
    """The keys with the highest value at the printed precision (2 decimals): all of them on a tie."""
    if not values:
        return set()
    top = max(round(x, 2) for x in values.values())
    return {k for k, x in values.items() if round(x, 2) == top}


def friedman_tests(
    runs: Sequence[RunResult], tasks: Sequence[str], sizes: Sequence[int] = MEMORY_SIZES
) -> list[stats.FriedmanResult]:
    """Friedman over ``sizes`` for every (family, task) with runs of two sizes or more, Holm-corrected together."""
    acc: dict[str, dict[str, dict[int, dict[int, float]]]] = {}
    for run in runs:
        name, size = family(run.variant)
        if size is not None and size in sizes:
            acc.setdefault(name, {}).setdefault(run.task, {}).setdefault(size, {})[run.seed] = run.test_accuracy
    models = [
        m
        for m in sorted(acc, key=lambda m: variant_order(f"{m}-0"))
        if len({s for by_size in acc[m].values() for s in by_size}) >= 2
    ]
    results = [stats.friedman(m, t, acc[m].get(t, {}), sizes) for m in models for t in tasks]
    stats.correct_holm(results)
    return results
