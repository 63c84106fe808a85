"""Results tables from the runs on disk: every ``result.json`` under a folder, in the paper's layout.

Layout (Tables 1 and 3 of the ConvLuna paper): rows are variants (Transformer, Luna-1/16/256,
ConvLuna-1/16/256, OnlyScaling-*, OnlyFiltering-*, then any others), columns are the tasks
(Classification = text, Matching, ListOps, CIFAR-10 = image) and Average; a cell is the test
accuracy in percent, mean ± sample std (ddof=1) over seeds.

Rules that keep the numbers honest:
- Never mix scales: one table per *scale* = (preset, training steps, recorded overrides). A task
  trained for its preset's default number of steps and one trained for an explicit number go into
  different tables; overrides come from the ``sweep_run.json`` that scripts/sweep.py leaves in
  every workdir (``data_dir``, ``log_every`` and ``checkpoint_every`` do not change results and
  are ignored).
- A cell with fewer seeds than the table's expected count (``--seeds N``, default: the largest
  count in the table) is incomplete: it is never bold and its row gets no Average. Every cell
  whose seed count differs from the expected one shows it: ``(n=k)``.
- Bold marks the best of a column, and never a cell that a plain cell of the same column beats:
  the cells with the column's highest mean among *all* shown cells (complete or not), compared at
  the printed precision (ties: all), are bold if they are complete. A column whose highest mean is
  an incomplete cell has no bold at all: its best is not established, and bolding the best
  complete cell would put bold under a higher plain number. Average: the same over the rows that
  have one (complete rows only).
- Rows and tables are in one markdown file, one LaTeX file (booktabs) per scale; Friedman tests
  (lra.stats) and plots (lra.plots) per scale; ``summary.json`` holds everything computed.
- Learning curves draw chance (1 / number of classes, a fact of the task) and, when the caller gives
  it (``majority``, measured on the data), the majority-class accuracy, so a reader sees how far
  above guessing the curves are.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

from lra import stats
from lra.training.run_files import RESUMABLE_CHANGES

TASK_COLUMNS = {"text": "Classification", "matching": "Matching", "listops": "ListOps", "image": "CIFAR-10",
                "pathfinder": "Pathfinder", "pathx": "Path-X"}
# NUM_CLASSES of each lra.data task module (tests check they agree): the chance line of the curves
TASK_CLASSES = {"text": 2, "matching": 2, "listops": 10, "image": 10, "pathfinder": 2, "pathx": 2}
# overrides written in words in figure titles; others appear as key=value
OVERRIDE_WORDS = {"warmup_steps": "warmup {} steps", "learning_rate": "learning rate {}", "batch_size": "batch {}"}
FAMILY_ORDER = ("Transformer", "Luna", "ConvLuna", "OnlyScaling", "OnlyFiltering")
IGNORED_OVERRIDES = frozenset(RESUMABLE_CHANGES - {"num_train_steps"})
STD_NOTE = "sample std (ddof=1)"
BAND_NOTE = "min-max over seeds"
PM = r"$\pm$"


@dataclasses.dataclass
class RunResult:
    """One finished run: its result.json plus the sweep overrides it was trained with."""

    workdir: Path
    task: str
    variant: str
    seed: int
    test_accuracy: float  # fraction
    num_train_steps: int
    preset: str
    device_kind: str
    overrides: dict[str, str]
    result: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Scale:
    """What makes numbers comparable: preset, steps (None: each task's preset default), overrides."""

    preset: str
    steps: int | None
    overrides: tuple[tuple[str, str], ...]

    @property
    def slug(self) -> str:
        parts = [self.preset] + ([f"{self.steps}steps"] if self.steps is not None else [])
        parts += [re.sub(r"[^A-Za-z0-9.]+", "-", f"{k}-{v}").strip("-") for k, v in self.overrides]
        return "_".join(parts)


def family(variant: str) -> tuple[str, int | None]:
    """``"ConvLuna-16"`` -> ``("ConvLuna", 16)``; ``"Transformer"`` -> ``("Transformer", None)``."""
    m = re.fullmatch(r"(.+)-(\d+)", variant)
    return (m.group(1), int(m.group(2))) if m else (variant, None)


def variant_order(variant: str) -> tuple:
    name, size = family(variant)
    rank = FAMILY_ORDER.index(name) if name in FAMILY_ORDER else len(FAMILY_ORDER)
    return (rank, name if rank == len(FAMILY_ORDER) else "", size if size is not None else -1, variant)


def task_order(task: str) -> tuple:
    names = list(TASK_COLUMNS)
    return (names.index(task) if task in names else len(names), task)


def column_name(task: str) -> str:
    return TASK_COLUMNS.get(task, task)


# --- reading -------------------------------------------------------------------------------------

RESULT_KEYS = ("task", "variant", "seed", "test_accuracy", "num_train_steps")


def load_results(root: Path) -> tuple[list[RunResult], list[Path]]:
    """Every run's result.json under ``root``, and the workdirs with a config.json but no result yet.

    A workdir may hold only result.json (committed results); metrics.jsonl (curves) and
    sweep_run.json (overrides) are used when present.
    """
    runs = []
    for path in sorted(Path(root).rglob("result.json")):
        workdir = path.parent
        r = json.loads(path.read_text())
        if not isinstance(r, dict) or any(k not in r for k in RESULT_KEYS):
            warnings.warn(f"{path} is not an lra.train result (no {', '.join(RESULT_KEYS)}); skipped")
            continue
        sweep_file = workdir / "sweep_run.json"
        overrides = json.loads(sweep_file.read_text()).get("overrides", {}) if sweep_file.exists() else {}
        runs.append(RunResult(workdir, r["task"], r["variant"], int(r["seed"]), float(r["test_accuracy"]),
                              int(r["num_train_steps"]), r.get("config_preset", "paper"),
                              r.get("device_kind", "unknown"), {k: str(v) for k, v in overrides.items()}, r))
    unfinished = [c.parent for c in sorted(Path(root).rglob("config.json")) if not (c.parent / "result.json").exists()]
    return runs, unfinished


@functools.lru_cache(maxsize=None)
def default_steps(task: str, preset: str) -> int | None:
    """``num_train_steps`` of ``task`` under ``preset`` (None for an unknown task or preset)."""
    from lra.defaults import make_config

    try:
        return int(make_config(task, "softmax", preset).num_train_steps)
    except ValueError:
        return None


def scale_of(run: RunResult) -> Scale:
    steps = None if run.num_train_steps == default_steps(run.task, run.preset) else run.num_train_steps
    overrides = tuple(sorted((k, v) for k, v in run.overrides.items()
                             if k not in IGNORED_OVERRIDES and k != "num_train_steps"))
    return Scale(run.preset, steps, overrides)


def group_by_scale(runs: Iterable[RunResult]) -> dict[Scale, list[RunResult]]:
    groups: dict[Scale, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(scale_of(run), []).append(run)
    preset_rank = {"paper": 0, "cpu": 1, "smoke": 2}
    return dict(sorted(groups.items(), key=lambda kv: (preset_rank.get(kv[0].preset, 3), kv[0].preset,
                                                       kv[0].steps is not None, -(kv[0].steps or 0),
                                                       kv[0].overrides)))


# --- one table -----------------------------------------------------------------------------------

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
        return "preset-default training steps (" + ", ".join(
            f"{column_name(t)} {per_task[t]:,}" for t in self.tasks) + ")"

    @property
    def device_kinds(self) -> list[str]:
        return sorted({r.device_kind for r in self.runs})

    @property
    def title(self) -> str:
        over = ", ".join(f"{k}={v}" for k, v in self.scale.overrides)
        return (f"Preset `{self.scale.preset}`, {self.steps_text}"
                + (f", overrides {over}" if over else "") + f"; device: {', '.join(self.device_kinds)}")


def build_table(scale: Scale, runs: Sequence[RunResult], expected_n: int | None = None) -> Table:
    """Cells, averages and bold entries of one scale's runs (duplicate seeds: the first path wins)."""
    seen: dict[tuple[str, str, int], RunResult] = {}
    duplicates = []
    for run in sorted(runs, key=lambda r: str(r.workdir)):
        key = (run.variant, run.task, run.seed)
        if key in seen:
            duplicates.append(run.workdir)
            warnings.warn(f"{run.workdir} repeats {run.variant} / {run.task} / seed {run.seed} of "
                          f"{seen[key].workdir}; ignoring it")
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
        table.averages[v] = (sum(cells[(v, t)].mean for t in tasks) / len(tasks)
                             if len(tasks) > 1 and all(table.complete(v, t) for t in tasks) else None)
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


def friedman_tests(runs: Sequence[RunResult], tasks: Sequence[str],
                   sizes: Sequence[int] = stats.MEMORY_SIZES) -> list[stats.FriedmanResult]:
    """Friedman over ``sizes`` for every (model, task), Holm-corrected together.

    Models: the families (``Luna`` of ``Luna-16``) with runs of at least two of ``sizes``.
    """
    acc: dict[str, dict[str, dict[int, dict[int, float]]]] = {}
    for run in runs:
        name, size = family(run.variant)
        if size in sizes:
            acc.setdefault(name, {}).setdefault(run.task, {}).setdefault(size, {})[run.seed] = run.test_accuracy
    models = [m for m in sorted(acc, key=lambda m: variant_order(f"{m}-0"))
              if len({s for by_size in acc[m].values() for s in by_size}) >= 2]
    results = [stats.friedman(m, t, acc[m].get(t, {}), sizes) for m in models for t in tasks]
    stats.holm(results)
    return results


# --- rendering -----------------------------------------------------------------------------------

def _number(cell: stats.Cell, bold: bool, latex: bool) -> str:
    mean = f"{cell.mean:.2f}"
    if latex:
        mean = rf"\mathbf{{{mean}}}" if bold else mean
        return f"${mean}$" if math.isnan(cell.std) else f"${mean} \\pm {cell.std:.2f}$"
    mean = f"**{mean}**" if bold else mean
    return mean if math.isnan(cell.std) else f"{mean} ± {cell.std:.2f}"


def _cell_text(table: Table, variant: str, task: str, latex: bool) -> str:
    cell = table.cells.get((variant, task))
    if cell is None:
        return "--" if latex else "—"
    text = _number(cell, variant in table.best[task], latex)
    if cell.n != table.expected_n:
        text += rf" {{\scriptsize (n={cell.n})}}" if latex else f" (n={cell.n})"
    return text


def _average_text(table: Table, variant: str, latex: bool) -> str:
    avg = table.averages[variant]
    if avg is None:
        return "--" if latex else "—"
    bold = variant in table.best["Average"]
    if latex:
        return rf"$\mathbf{{{avg:.2f}}}$" if bold else f"${avg:.2f}$"
    return f"**{avg:.2f}**" if bold else f"{avg:.2f}"


def caption(table: Table) -> str:
    return (f"Test accuracy (%) at the best-validation checkpoint, mean ± {STD_NOTE} over "
            f"{table.expected_n} seed{'s' if table.expected_n != 1 else ''} per cell; (n=k) marks a cell with "
            f"another seed count (with fewer: incomplete, not bold, no Average). Bold: the highest mean of its "
            f"column, if that cell is complete (a column whose highest mean is incomplete has no bold)."
            + (" Average: mean over the task columns." if len(table.tasks) > 1 else ""))


def markdown_table(table: Table, note: str | None = None) -> str:
    """The paper-layout table; ``note`` (e.g. how the runs differ from the paper) goes under it."""
    cols = [column_name(t) for t in table.tasks] + (["Average"] if len(table.tasks) > 1 else [])
    lines = [f"### {table.title}", "", caption(table), "",
             "| Model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for v in table.variants:
        row = [_cell_text(table, v, t, False) for t in table.tasks]
        if len(table.tasks) > 1:
            row.append(_average_text(table, v, False))
        lines.append(f"| {v} | " + " | ".join(row) + " |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def _tex_escape(text: str) -> str:
    return re.sub(r"([_%&#$])", r"\\\1", text)


def latex_table(table: Table) -> str:
    cols = [column_name(t) for t in table.tasks] + (["Average"] if len(table.tasks) > 1 else [])
    title = _tex_escape(table.title.replace("`", ""))
    lines = ["% requires \\usepackage{booktabs}", r"\begin{table}[t]", r"\centering",
             rf"\caption{{{title}. {_tex_escape(caption(table)).replace('±', PM)}}}",
             r"\begin{tabular}{l" + "c" * len(cols) + "}", r"\toprule",
             "Model & " + " & ".join(f"{c} $\\uparrow$" for c in cols) + r" \\", r"\midrule"]
    previous = None
    for v in table.variants:
        fam = family(v)[0]
        if previous is not None and fam != previous:
            lines.append(r"\midrule")
        previous = fam
        row = [_cell_text(table, v, t, True) for t in table.tasks]
        if len(table.tasks) > 1:
            row.append(_average_text(table, v, True))
        lines.append(f"{_tex_escape(v)} & " + " & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def _friedman_grid(table: Table) -> tuple[list[str], dict[tuple[str, str], stats.FriedmanResult]]:
    models = list(dict.fromkeys(r.model for r in table.friedman))
    return models, {(r.model, r.task): r for r in table.friedman}


def friedman_caption(table: Table) -> str:
    tested = sum(r.tested for r in table.friedman)
    sizes = "/".join(map(str, stats.MEMORY_SIZES))
    return (f"Friedman test over memory sizes {sizes} per (model, task), blocks paired by seed, "
            f"H0: equal expected accuracies. Holm-corrected p-values over the {tested} tests of this table "
            f"(bold: < 0.05); n/a: not tested. Raw p-values and statistics: friedman.csv.")


def friedman_markdown(table: Table) -> str:
    models, grid = _friedman_grid(table)
    lines = [f"### Friedman test — {table.title}", "", friedman_caption(table), "",
             "| Model | " + " | ".join(column_name(t) for t in table.tasks) + " |",
             "|---" * (len(table.tasks) + 1) + "|"]
    for m in models:
        row = []
        for t in table.tasks:
            r = grid[(m, t)]
            if not r.tested:
                row.append(f"n/a ({r.note})")
            else:
                p = f"{r.p_holm:.3f}"
                row.append((f"**{p}**" if r.p_holm < 0.05 else p) + f" (n={len(r.seeds)})")
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def friedman_latex(table: Table) -> str:
    models, grid = _friedman_grid(table)
    lines = ["% requires \\usepackage{booktabs}", r"\begin{table}[t]", r"\centering",
             rf"\caption{{{_tex_escape(table.title.replace('`', ''))}. {_tex_escape(friedman_caption(table))}}}",
             r"\begin{tabular}{l" + "c" * len(table.tasks) + "}", r"\toprule",
             "Model & " + " & ".join(column_name(t) for t in table.tasks) + r" \\", r"\midrule"]
    for m in models:
        row = []
        for t in table.tasks:
            r = grid[(m, t)]
            if not r.tested:
                row.append("n/a")
            else:
                row.append(rf"$\mathbf{{{r.p_holm:.3f}}}$" if r.p_holm < 0.05 else f"${r.p_holm:.3f}$")
        lines.append(f"{_tex_escape(m)} & " + " & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def _write_friedman_csv(table: Table, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "task", "sizes", "seeds", "statistic", "p_value", "p_holm", "note"])
        for r in table.friedman:
            w.writerow([r.model, r.task, " ".join(map(str, r.sizes)), " ".join(map(str, r.seeds)),
                        r.statistic, r.p_value, r.p_holm, r.note])


def _write_runs_csv(table: Table, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "task", "seed", "test_accuracy", "best_val_accuracy", "best_step", "num_train_steps",
                    "train_seconds", "device_kind", "git_commit", "workdir"])
        for r in sorted(table.runs, key=lambda r: (variant_order(r.variant), task_order(r.task), r.seed)):
            w.writerow([r.variant, r.task, r.seed, r.test_accuracy, r.result.get("best_val_accuracy"),
                        r.result.get("best_step"), r.num_train_steps, r.result.get("train_seconds"),
                        r.device_kind, r.result.get("git_commit"), str(r.workdir)])


def validation_curves(runs: Sequence[RunResult], task: str) -> dict[str, dict[int, dict[int, float]]]:
    """``curves[variant][seed][step]`` = validation accuracy (%) from each run's metrics.jsonl."""
    curves: dict[str, dict[int, dict[int, float]]] = {}
    for run in sorted((r for r in runs if r.task == task), key=lambda r: (variant_order(r.variant), r.seed)):
        path = run.workdir / "metrics.jsonl"
        if not path.exists():
            continue
        points = {}
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                if rec.get("split") == "validation":
                    points[int(rec["step"])] = 100.0 * float(rec["accuracy"])  # a resumed step: the last
        if points:
            curves.setdefault(run.variant, {})[run.seed] = points
    return curves


def curve_title(table: Table, task: str) -> str:
    """The learning-curve title in words: "ListOps, cpu preset, 750 training steps (warmup 500 steps),
    5 seeds", with the variants whose seed count differs named, e.g. "1 seed (Transformer: 2)"."""
    steps = sorted({r.num_train_steps for r in table.runs if r.task == task})
    words = [OVERRIDE_WORDS[k].format(v) if k in OVERRIDE_WORDS else f"{k}={v}" for k, v in table.scale.overrides]
    text = (f"{column_name(task)}, {table.scale.preset} preset, "
            + "/".join(f"{n:,}" for n in steps) + " training steps" + (f" ({', '.join(words)})" if words else ""))
    n = table.expected_n
    others = [f"{v}: {table.cells[(v, task)].n}" for v in table.variants
              if (v, task) in table.cells and table.cells[(v, task)].n != n]
    return text + f", {n} seed{'s' if n != 1 else ''}" + (f" ({', '.join(others)})" if others else "")


def curve_baselines(task: str, majority: float | None = None) -> list[tuple[str, float]]:
    """Horizontal lines of a task's curves: chance, and the majority class when it was measured."""
    lines = [(f"chance ({TASK_CLASSES[task]} classes)", 100.0 / TASK_CLASSES[task])] if task in TASK_CLASSES else []
    if majority is not None:
        lines.append(("majority class of validation", float(majority)))
    return lines


# --- everything ----------------------------------------------------------------------------------

def _json_number(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def write_all(results_dir: Path, out: Path, expected_seeds: int | None = None, plots_enabled: bool = True,
              note: str | None = None, majority: dict[str, float] | None = None) -> dict:
    """Read every result under ``results_dir``; write tables, tests, plots and summary.json to ``out``.

    ``note`` is printed under every results table (and kept in summary.json). ``majority``: task ->
    accuracy (%) of always answering the most frequent label of the validation split, measured on
    the data by the caller (the records do not hold the labels); drawn on that task's curves.
    """
    majority = dict(majority or {})
    runs, unfinished = load_results(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"results_dir": str(results_dir), "num_runs": len(runs),
                               "std": STD_NOTE, "curve_band": BAND_NOTE, "accuracy_unit": "percent",
                               "unfinished_workdirs": [str(p) for p in unfinished], "tables": [], "note": note,
                               "majority_class_percent": majority}
    index = ["# Results", "", f"Generated by `scripts/make_tables.py` from {len(runs)} finished runs under "
             f"`{results_dir}`" + (f" ({len(unfinished)} unfinished workdirs ignored)" if unfinished else "") + ".",
             "One table per scale; numbers of different scales are never compared.", ""]
    for scale, group in group_by_scale(runs).items():
        table = build_table(scale, group, expected_seeds)
        folder = out / scale.slug
        folder.mkdir(parents=True, exist_ok=True)
        files = {"markdown": folder / "results.md", "latex": folder / "results.tex", "runs_csv": folder / "runs.csv"}
        table_markdown = markdown_table(table, note)
        files["markdown"].write_text(table_markdown)
        files["latex"].write_text(latex_table(table))
        _write_runs_csv(table, files["runs_csv"])
        index += [table_markdown]
        if table.friedman:
            files.update(friedman_markdown=folder / "friedman.md", friedman_latex=folder / "friedman.tex",
                         friedman_csv=folder / "friedman.csv")
            files["friedman_markdown"].write_text(friedman_markdown(table))
            files["friedman_latex"].write_text(friedman_latex(table))
            _write_friedman_csv(table, files["friedman_csv"])
            index += [friedman_markdown(table)]
        if plots_enabled:
            from lra import plots  # matplotlib: only when figures are drawn

            if table.friedman:
                models, grid = _friedman_grid(table)
                files["friedman_png"] = plots.pvalue_heatmap(
                    [[grid[(m, t)].p_holm for t in table.tasks] for m in models], models,
                    [column_name(t) for t in table.tasks], folder / "friedman.png",
                    f"Friedman over memory sizes, Holm-corrected p\n{table.title.replace('`', '')}")
                index += [f"![Friedman p-values]({files['friedman_png'].relative_to(out)})", ""]
            for task in table.tasks:
                curves = validation_curves(table.runs, task)
                if curves:
                    files[f"curves_{task}"] = plots.learning_curves(
                        curves, folder / f"curves_{task}.png", curve_title(table, task),
                        test={v: table.cells[(v, task)].values for v in curves if (v, task) in table.cells},
                        baselines=curve_baselines(task, majority.get(task)))
                    index += [f"![{column_name(task)} curves]({files[f'curves_{task}'].relative_to(out)})", ""]
        summary["tables"].append(_table_summary(table, {k: str(v.relative_to(out)) for k, v in files.items()}))
    (out / "tables.md").write_text("\n".join(index) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return summary


def _table_summary(table: Table, files: dict[str, str]) -> dict[str, Any]:
    return {
        "slug": table.scale.slug, "title": table.title, "preset": table.scale.preset,
        "num_train_steps": {t: sorted({r.num_train_steps for r in table.runs if r.task == t}) for t in table.tasks},
        "overrides": dict(table.scale.overrides), "device_kinds": table.device_kinds,
        "expected_seeds": table.expected_n, "tasks": table.tasks, "variants": table.variants,
        "cells": [{"variant": v, "task": t, "n": c.n, "seeds": c.seeds, "values": c.values, "mean": c.mean,
                   "std": _json_number(c.std), "complete": table.complete(v, t)}
                  for (v, t), c in sorted(table.cells.items(), key=lambda kv: (variant_order(kv[0][0]),
                                                                               task_order(kv[0][1])))],
        "averages": {v: a for v, a in table.averages.items()},
        "best": {k: sorted(v) for k, v in table.best.items()},
        "friedman": [{"model": r.model, "task": r.task, "sizes": list(r.sizes), "seeds": r.seeds,
                      "statistic": _json_number(r.statistic), "p_value": _json_number(r.p_value),
                      "p_holm": _json_number(r.p_holm), "note": r.note} for r in table.friedman],
        "duplicates_ignored": [str(p) for p in table.duplicates],
        "files": files,
    }
