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
- Only a finished run's valid record counts: a result.json that ``run_files.result_problem`` (the
  check lra.train uses) refuses, e.g. cut short or ``"test_accuracy": 31.25`` or NaN, is skipped
  with a warning naming the file, as is a run whose sweep_run.json cannot be read.
- A cell pools only runs whose config.json agree on everything but the seed and the fields that
  do not change results (:data:`POOL_IGNORED`). Runs of another config (same label, e.g. a learning
  rate passed by hand) become a row of their own, the variant followed by the differing fields
  (``Transformer [learning_rate=0.05]``), with a warning naming the runs; the largest group keeps
  the plain name (a tie: every group is named).
- Rows and tables are in one markdown file, one LaTeX file (booktabs) per scale; Friedman tests
  (lra.reports.stats) and plots (lra.reports.plots) per scale; ``summary.json`` holds everything computed.
- Learning curves draw chance (1 / number of classes, a fact of the task) and, when the caller gives
  it (``majority``, measured on the data), the majority-class accuracy, so a reader sees how far
  above guessing the curves are.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

from lra.reports import stats
from lra.training.run_files import (RESUMABLE_CHANGES, MetricsLog, RunFileError, flatten_config, result_problem,
                                    write_text_atomic)

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


def _read_json_object(path: Path) -> dict[str, Any]:
    """``path`` as a JSON object; ValueError saying why not (cut short, not an object, unreadable)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"unreadable ({e})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def load_results(root: Path) -> tuple[list[RunResult], list[Path]]:
    """Every valid run's result.json under ``root``, and the workdirs with a config.json but no result yet.

    A workdir may hold only result.json (committed results); metrics.jsonl (curves) and
    sweep_run.json (overrides) are used when present. A record that is not a finished run's
    (``run_files.result_problem``: cut short, a field missing, an accuracy outside [0, 1] or NaN)
    or whose sweep_run.json is damaged is skipped with a warning naming the file, never averaged.
    """
    runs = []
    for path in sorted(Path(root).rglob("result.json")):
        workdir = path.parent
        problem = result_problem(path)
        if problem is not None:
            try:
                r = _read_json_object(path)
                lra_like = all(k in r for k in RESULT_KEYS)
            except ValueError:
                lra_like = True  # a cut-short result.json of a run
            if lra_like:
                warnings.warn(f"{path} is not a valid lra.train result ({problem}); skipped. Rerun the run's "
                              f"lra.train command to rebuild it from its best checkpoint, or delete it")
            else:
                warnings.warn(f"{path} is not an lra.train result (no {', '.join(RESULT_KEYS)}); skipped")
            continue
        r = json.loads(path.read_text())
        sweep_file = workdir / "sweep_run.json"
        try:
            overrides = _read_json_object(sweep_file).get("overrides", {}) if sweep_file.exists() else {}
            if not isinstance(overrides, dict):
                raise ValueError("'overrides' is not an object")
        except ValueError as e:
            warnings.warn(f"{sweep_file} is damaged ({e}), so the scale of {path} is unknown; skipped. "
                          f"Rewrite it by rerunning the sweep command (finished runs are skipped)")
            continue
        runs.append(RunResult(workdir, r["task"], r["variant"], int(r["seed"]), float(r["test_accuracy"]),
                              int(r["num_train_steps"]), r.get("config_preset", "paper"),
                              r.get("device_kind", "unknown"), {k: str(v) for k, v in overrides.items()}, r))
    unfinished = [c.parent for c in sorted(Path(root).rglob("config.json")) if not (c.parent / "result.json").exists()]
    return runs, unfinished


# config.json fields that may differ within a cell: the seed, and what changes no result (paths,
# logging, checkpoint cadence, the bucket order: a per-seed draw like the seed's own).
POOL_IGNORED = frozenset({"seed", "seeds", "data_dir", "log_every", "checkpoint_every", "data.cache_dir",
                          "data.tfds_dir", "data.bucket_order_seed", "log_memory_stats"})


def run_config(workdir: Path) -> dict[str, Any] | None:
    """The fields of ``workdir/config.json`` that decide a run's result (flattened, older records
    filled with the values they trained with); None when the record has no config.json."""
    from lra.defaults import LEGACY_FIELDS

    path = workdir / "config.json"
    if not path.exists():
        return None
    try:
        flat = flatten_config(_read_json_object(path))
    except ValueError as e:
        raise ValueError(f"{path} is damaged ({e})") from None
    for key, value in LEGACY_FIELDS.items():
        if key not in flat:
            flat[key] = (flat.get("model.emb_dim", 1) ** -0.5 if key == "model.memory_init_scale"
                         else list(value) if isinstance(value, tuple) else value)
    _fill_option_defaults(flat)
    return {k: v for k, v in flat.items() if k not in POOL_IGNORED}


def _fill_option_defaults(flat: dict[str, Any]) -> None:
    """A family option left out of the config is its default: ``mem=16`` written out and ConvLuna's
    default 16 cells are one model, so they pool (issue 39: they were split into two rows)."""
    from lra.attention import option_defaults

    try:
        defaults = option_defaults(flat.get("model.attention", ""))
    except ValueError:  # a family this checkout does not know: compare what is written
        return
    if flat.get("model.attention_kwargs") == {}:  # no option written: an empty leaf, not a field
        del flat["model.attention_kwargs"]
    for key, value in defaults.items():
        flat.setdefault(f"model.attention_kwargs.{key}", list(value) if isinstance(value, tuple) else value)


def _difference(config: dict[str, Any] | None, others: Sequence[dict[str, Any] | None]) -> list[str]:
    """The fields (``key=value``) in which ``config`` differs from any of ``others``."""
    if config is None:
        return ["no config.json"]
    keys = sorted({k for o in others if o is not None for k in config.keys() | o.keys()
                   if config.get(k) != o.get(k)})
    return [f"{k}={config.get(k)}" for k in keys] or (["no config.json"] if None in others else [])


def split_by_config(runs: Sequence[RunResult]) -> list[RunResult]:
    """``runs`` with every (scale, task, variant) cell pooling one config only (see the module docstring).

    Runs of another config get ``variant`` + `` [field=value, ...]`` (the fields in which they
    differ from the cell's other configs), with a warning naming them; a run whose config.json is
    damaged is skipped with a warning naming the file."""
    configs: dict[Path, dict[str, Any] | None] = {}
    kept = []
    for run in runs:
        try:
            configs[run.workdir] = run_config(run.workdir)
            kept.append(run)
        except ValueError as e:
            warnings.warn(f"{e}: cannot tell which runs {run.workdir} may be pooled with; skipped")
    cells: dict[tuple, list[RunResult]] = {}
    for run in kept:
        cells.setdefault((scale_of(run), run.task, run.variant), []).append(run)
    out = []
    for (_, task, variant), members in cells.items():
        groups: dict[str, list[RunResult]] = {}
        for run in members:
            groups.setdefault(json.dumps(configs[run.workdir], sort_keys=True, default=str), []).append(run)
        if len(groups) == 1:
            out += members
            continue
        ordered = sorted(groups.values(), key=len, reverse=True)
        plain = ordered[0] if len(ordered[0]) > len(ordered[1]) else None
        described = []
        for group in ordered:
            if group is plain:
                out += group
                described.append(f"{variant}: {', '.join(str(r.workdir) for r in group)}")
                continue
            others = [configs[g[0].workdir] for g in ordered if g is not group]
            label = f"{variant} [{', '.join(_difference(configs[group[0].workdir], others))}]"
            out += [dataclasses.replace(r, variant=label) for r in group]
            described.append(f"{label}: {', '.join(str(r.workdir) for r in group)}")
        warnings.warn(f"{column_name(task)} / {variant}: runs of {len(groups)} different configs (not only "
                      f"the seed); not pooled, one row each: " + "; ".join(described))
    return out


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
    stats.correct_holm(results)
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
            w.writerow([r.model, r.task, " ".join(map(str, r.sizes)), " ".join(map(str, r.seeds)),
                        r.statistic, r.p_value, r.p_holm, r.note])


def _write_runs_csv(table: Table, path: Path) -> None:
    with _AtomicText(path) as f:
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
        try:  # a torn last line (a kill) is dropped with a warning; a malformed one drops the curve
            records = MetricsLog(path).read()
        except RunFileError as e:
            warnings.warn(f"{e}; {run.variant} seed {run.seed} has no curve")
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


def curve_baselines(task: str, majority: float | None = None,
                    structure_free: dict[str, Any] | None = None) -> list[tuple[str, float]]:
    """Horizontal lines of a task's curves: chance, the majority class when it was measured, and
    ListOps's structure-free baseline (lra.reports.listops_baseline) on validation."""
    lines = [(f"chance ({TASK_CLASSES[task]} classes)", 100.0 / TASK_CLASSES[task])] if task in TASK_CLASSES else []
    if majority is not None:
        lines.append(("majority class of validation", float(majority)))
    if structure_free is not None:
        lines.append(("structure-free baseline (outermost operator)", 100.0 * structure_free["validation_accuracy"]))
    return lines


def listops_baseline(runs: Sequence[RunResult]) -> tuple[dict[str, Any] | None, str | None]:
    """(the structure-free baseline on the data of the table's ListOps runs, or None; a sentence for
    the table). The data come from the first run's config.json; without one (older synthetic
    records) there is nothing to compute, and data that cannot be loaded are said, not guessed."""
    from lra.reports import listops_baseline as lb

    for run in runs:
        recorded = _read_json_object(run.workdir / "config.json") if (run.workdir / "config.json").exists() else {}
        if run.task == "listops" and isinstance(recorded.get("data"), dict):
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
                return None, f"Structure-free baseline not computed: the runs' ListOps data could not be loaded ({e})."
            return result, f"Reference: {lb.line(result, 'test')} (`python -m lra.reports.listops_baseline`)."
    return None, None


# --- everything ----------------------------------------------------------------------------------

def _json_number(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def write_all(results_dir: Path, out: Path, expected_seeds: int | None = None, plots_enabled: bool = True,
              note: str | None = None, majority: dict[str, float] | None = None,
              structure_free_baseline: bool = True) -> dict:
    """Read every result under ``results_dir``; write tables, tests, plots and summary.json to ``out``.

    ``note`` is printed under every results table (and kept in summary.json). ``majority``: task ->
    accuracy (%) of always answering the most frequent label of the validation split, measured on
    the data by the caller (the records do not hold the labels); drawn on that task's curves.
    ``structure_free_baseline``: a ListOps table states, and its curves draw, the structure-free
    baseline computed from the runs' data (:func:`listops_baseline`; loads or generates that data).
    """
    majority = dict(majority or {})
    runs, unfinished = load_results(results_dir)
    runs = split_by_config(runs)
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
        structure_free, baseline_note = listops_baseline(table.runs) if structure_free_baseline else (None, None)
        table_note = "\n\n".join(filter(None, [note, baseline_note])) or None
        table_markdown = markdown_table(table, table_note)
        write_text_atomic(files["markdown"], table_markdown)
        write_text_atomic(files["latex"], latex_table(table))
        _write_runs_csv(table, files["runs_csv"])
        index += [table_markdown]
        if table.friedman:
            files.update(friedman_markdown=folder / "friedman.md", friedman_latex=folder / "friedman.tex",
                         friedman_csv=folder / "friedman.csv")
            write_text_atomic(files["friedman_markdown"], friedman_markdown(table))
            write_text_atomic(files["friedman_latex"], friedman_latex(table))
            _write_friedman_csv(table, files["friedman_csv"])
            index += [friedman_markdown(table)]
        if plots_enabled:
            from lra.reports import plots  # matplotlib: only when figures are drawn

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
                        baselines=curve_baselines(task, majority.get(task),
                                                  structure_free if task == "listops" else None))
                    index += [f"![{column_name(task)} curves]({files[f'curves_{task}'].relative_to(out)})", ""]
        summary["tables"].append(_table_summary(table, {k: str(v.relative_to(out)) for k, v in files.items()}))
        if structure_free is not None:
            summary["tables"][-1]["listops_structure_free_baseline"] = structure_free
    write_text_atomic(out / "tables.md", "\n".join(index) + "\n")
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n")
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
