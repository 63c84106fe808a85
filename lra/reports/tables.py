"""Results tables from the runs on disk: every ``result.json`` under a folder, in the paper's layout.

Rows are variants, columns tasks and Average (ConvLuna paper, Tables 1 and 3); a cell is test accuracy in percent,
mean ± sample std over seeds. Rules that keep the numbers honest (docs/design.md, "Results"):
- one table per *scale* = (preset, training steps, ``sweep_run.json`` overrides);
- a cell with fewer seeds than expected (``--seeds N``, default: the largest count) is incomplete: never bold, no
  row Average; any other seed count shows as ``(n=k)``;
- bold (Average too): the column's highest mean among *all* shown cells (printed precision, ties: all) if
  complete, so bold never sits under a higher plain number;
- only records lra.train's check (``run_files.result_problem``) accepts count;
- a cell pools only runs whose config.json agree but for :data:`POOL_IGNORED`; others become rows named by the
  differing fields (``Transformer [learning_rate=0.05]``; the largest group keeps the plain name).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from lra.reports.table_build import Table, build_table, friedman_tests
from lra.reports.table_curves import (
    OVERRIDE_WORDS,
    TASK_CLASSES,
    curve_baselines,
    curve_title,
    listops_baseline,
    validation_curves,
)
from lra.reports.table_render import (
    PM,
    STD_NOTE,
    caption,
    friedman_caption,
    friedman_grid,
    friedman_latex,
    friedman_markdown,
    latex_table,
    markdown_table,
)
from lra.reports.table_runs import (
    FAMILY_ORDER,
    IGNORED_OVERRIDES,
    POOL_IGNORED,
    RESULT_KEYS,
    TASK_COLUMNS,
    RunResult,
    Scale,
    column_name,
    default_steps,
    family,
    group_by_scale,
    load_results,
    read_json_object,
    run_config,
    scale_of,
    split_by_config,
    task_order,
    variant_order,
)
from lra.training.run_files import write_text_atomic

__all__ = [
    "BAND_NOTE",
    "FAMILY_ORDER",
    "IGNORED_OVERRIDES",
    "OVERRIDE_WORDS",
    "PM",
    "POOL_IGNORED",
    "RESULT_KEYS",
    "STD_NOTE",
    "TASK_CLASSES",
    "TASK_COLUMNS",
    "RunResult",
    "Scale",
    "Table",
    "build_table",
    "caption",
    "column_name",
    "curve_baselines",
    "curve_title",
    "default_steps",
    "family",
    "friedman_caption",
    "friedman_grid",
    "friedman_latex",
    "friedman_markdown",
    "friedman_tests",
    "group_by_scale",
    "latex_table",
    "listops_baseline",
    "load_results",
    "markdown_table",
    "read_json_object",
    "run_config",
    "scale_of",
    "split_by_config",
    "task_order",
    "validation_curves",
    "variant_order",
    "write_all",
]


BAND_NOTE = "min-max over seeds"


class _AtomicText(io.StringIO):
    """A text buffer written to ``path`` atomically when its ``with`` block ends without an error."""

    def __init__(self, path: Path):
        super().__init__(newline="")
        self.path = path

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            write_text_atomic(self.path, self.getvalue())
        super().__exit__(kind, value, traceback)


def _write_friedman_csv(table: Table, path: Path) -> None:
    with _AtomicText(path) as f:
        w = csv.writer(f)
        w.writerow(["model", "task", "sizes", "seeds", "statistic", "p_value", "p_holm", "note"])
        for r in table.friedman:
            w.writerow(
                [
                    r.model,
                    r.task,
                    " ".join(map(str, r.sizes)),
                    " ".join(map(str, r.seeds)),
                    r.statistic,
                    r.p_value,
                    r.p_holm,
                    r.note,
                ]
            )


def _write_runs_csv(table: Table, path: Path) -> None:
    with _AtomicText(path) as f:
        w = csv.writer(f)
        w.writerow(
            [
                "variant",
                "task",
                "seed",
                "test_accuracy",
                "best_val_accuracy",
                "best_step",
                "num_train_steps",
                "train_seconds",
                "device_kind",
                "git_commit",
                "workdir",
            ]
        )
        for r in sorted(table.runs, key=lambda r: (variant_order(r.variant), task_order(r.task), r.seed)):
            w.writerow(
                [
                    r.variant,
                    r.task,
                    r.seed,
                    r.test_accuracy,
                    r.result.get("best_val_accuracy"),
                    r.result.get("best_step"),
                    r.num_train_steps,
                    r.result.get("train_seconds"),
                    r.device_kind,
                    r.result.get("git_commit"),
                    str(r.workdir),
                ]
            )


def _json_number(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def write_all(
    results_dir: Path,
    out: Path,
    expected_seeds: int | None = None,
    plots_enabled: bool = True,
    note: str | None = None,
    majority: dict[str, float] | None = None,
    structure_free_baseline: bool = True,
) -> dict:
    """Read every result under ``results_dir``; write tables, tests, plots and summary.json to ``out``. ``majority``:
    task -> validation majority-class accuracy (%), measured by the caller (records hold no labels)."""
    majority = dict(majority or {})
    runs, unfinished = load_results(results_dir)
    runs = split_by_config(runs)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "results_dir": str(results_dir),
        "num_runs": len(runs),
        "std": STD_NOTE,
        "curve_band": BAND_NOTE,
        "accuracy_unit": "percent",
        "unfinished_workdirs": [str(p) for p in unfinished],
        "tables": [],
        "note": note,
        "majority_class_percent": majority,
    }
    index = [
        "# Results",
        "",
        f"Generated by `scripts/make_tables.py` from {len(runs)} finished runs under "
        f"`{results_dir}`" + (f" ({len(unfinished)} unfinished workdirs ignored)" if unfinished else "") + ".",
        "One table per scale; numbers of different scales are never compared.",
        "",
    ]
    for scale, group in group_by_scale(runs).items():
        table = build_table(scale, group, expected_seeds)
        folder = out / scale.slug
        folder.mkdir(parents=True, exist_ok=True)
        files = {"markdown": folder / "results.md", "latex": folder / "results.tex", "runs_csv": folder / "runs.csv"}
        structure_free, baseline_note = listops_baseline(table.runs) if structure_free_baseline else (None, None)
        table_note = "\n\n".join(filter(None, [note, baseline_note])) or None
        table_markdown = markdown_table(table, table_note)
        write_text_atomic(files["markdown"], table_markdown)
        write_text_atomic(files["latex"], latex_table(table))
        _write_runs_csv(table, files["runs_csv"])
        index += [table_markdown]
        if table.friedman:
            files.update(
                friedman_markdown=folder / "friedman.md",
                friedman_latex=folder / "friedman.tex",
                friedman_csv=folder / "friedman.csv",
            )
            write_text_atomic(files["friedman_markdown"], friedman_markdown(table))
            write_text_atomic(files["friedman_latex"], friedman_latex(table))
            _write_friedman_csv(table, files["friedman_csv"])
            index += [friedman_markdown(table)]
        if plots_enabled:
            from lra.reports import plots  # matplotlib: only when figures are drawn

            if table.friedman:
                models, grid = friedman_grid(table)
                files["friedman_png"] = plots.pvalue_heatmap(
                    [[grid[(m, t)].p_holm for t in table.tasks] for m in models],
                    models,
                    [column_name(t) for t in table.tasks],
                    folder / "friedman.png",
                    f"Friedman over memory sizes, Holm-corrected p\n{table.title.replace('`', '')}",
                )
                index += [f"![Friedman p-values]({files['friedman_png'].relative_to(out)})", ""]
            for task in table.tasks:
                curves = validation_curves(table.runs, task)
                if curves:
                    files[f"curves_{task}"] = plots.learning_curves(
                        curves,
                        folder / f"curves_{task}.png",
                        curve_title(table, task),
                        test={v: table.cells[(v, task)].values for v in curves if (v, task) in table.cells},
                        baselines=curve_baselines(
                            task, majority.get(task), structure_free if task == "listops" else None
                        ),
                    )
                    index += [f"![{column_name(task)} curves]({files[f'curves_{task}'].relative_to(out)})", ""]
        summary["tables"].append(_table_summary(table, {k: str(v.relative_to(out)) for k, v in files.items()}))
        if structure_free is not None:
            summary["tables"][-1]["listops_structure_free_baseline"] = structure_free
    write_text_atomic(out / "tables.md", "\n".join(index) + "\n")
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return summary


def _table_summary(table: Table, files: dict[str, str]) -> dict[str, Any]:
    return {
        "slug": table.scale.slug,
        "title": table.title,
        "preset": table.scale.preset,
        "num_train_steps": {t: sorted({r.num_train_steps for r in table.runs if r.task == t}) for t in table.tasks},
        "overrides": dict(table.scale.overrides),
        "device_kinds": table.device_kinds,
        "expected_seeds": table.expected_n,
        "tasks": table.tasks,
        "variants": table.variants,
        "cells": [
            {
                "variant": v,
                "task": t,
                "n": c.n,
                "seeds": c.seeds,
                "values": c.values,
                "mean": c.mean,
                "std": _json_number(c.std),
                "complete": table.complete(v, t),
            }
            for (v, t), c in sorted(table.cells.items(), key=lambda kv: (variant_order(kv[0][0]), task_order(kv[0][1])))
        ],
        "averages": {v: a for v, a in table.averages.items()},
        "best": {k: sorted(v) for k, v in table.best.items()},
        "friedman": [
            {
                "model": r.model,
                "task": r.task,
                "sizes": list(r.sizes),
                "seeds": r.seeds,
                "statistic": _json_number(r.statistic),
                "p_value": _json_number(r.p_value),
                "p_holm": _json_number(r.p_holm),
                "note": r.note,
            }
            for r in table.friedman
        ],
        "duplicates_ignored": [str(p) for p in table.duplicates],
        "files": files,
    }
