"""What a selection of sweep runs will do, before it starts (issue 39 point 7).

Per run: ``done`` (every seed's result.json is a finished run of the expected steps, the check the
sweep itself skips by), ``started`` (a workdir: the sweep resumes it), ``missing``, or ``data
absent`` (not done, and the task's data is not here: the loader's own error says what is missing
and the fix, e.g. ``python -m lra.data download text``). And the CPU time it needs, estimated from
earlier records only: the finished runs' ``result.json`` under ``results/runs/`` and the sweep's
own root with the same task, variant and preset, trained on a CPU. Their median seconds per
seed-step (``train_seconds / num_train_steps / seeds_in_program``, compilation excluded) times the
run's seed-steps; the estimate names the records it came from, and a run without such records says
"no estimate" (nothing is guessed from other presets or families). A started run is counted in
full: the estimate is an upper bound for it.

``scripts/sweep.py --list`` prints :func:`run_line` per run and :func:`summary`;
``python -m lra_lab.reproduce PAPER --dry-run`` prints the same under each of its claims' sweeps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from lra.console import duration as console_duration
from lra_lab.experiments.sweep import REPO, Run, expected_steps, run_config, run_fields, status

DONE, STARTED, MISSING, DATA_ABSENT = "done", "started", "missing", "data absent"
STATES = (DONE, STARTED, MISSING, DATA_ABSENT)
RECORDS = REPO / "results" / "runs"  # the committed records: the default source of rates


@dataclasses.dataclass(frozen=True)
class Rate:
    """Seconds per seed-step of one (task, variant, preset) on a CPU, from ``records`` result.json files."""

    seconds_per_seed_step: float
    records: tuple[Path, ...]

    @property
    def source(self) -> str:
        """Where the number came from: the records' common folder and their count."""
        where = Path(os.path.commonpath([str(p.parent) for p in self.records]))
        try:
            where = where.relative_to(REPO)
        except ValueError:
            pass
        return f"{len(self.records)} earlier CPU record(s) under {where}"


@dataclasses.dataclass(frozen=True)
class RunPlan:
    run: Run
    state: str
    seed_steps: int  # steps x seeds of the program still to train (0 when done)
    rate: Rate | None  # None: no earlier record of this task, variant and preset on a CPU
    data_problem: str | None = None  # the loader's error when the data is absent

    @property
    def estimate_seconds(self) -> float | None:
        if self.state == DONE:
            return 0.0
        return None if self.rate is None else self.seed_steps * self.rate.seconds_per_seed_step


def cpu_rates(roots: Iterable[Path]) -> dict[tuple[str, str, str], Rate]:
    """(task, variant, preset) -> :class:`Rate` from every finished CPU run's result.json under ``roots``."""
    from lra.training.run_files import result_problem

    found: dict[tuple[str, str, str], list[tuple[float, Path]]] = {}
    seen: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("result.json")):
            if path.resolve() in seen or result_problem(path) is not None:
                continue
            seen.add(path.resolve())
            record = json.loads(path.read_text())
            steps, seconds = record.get("num_train_steps"), record.get("train_seconds")
            if record.get("device_kind") != "cpu" or not steps or not seconds:
                continue
            per = seconds / steps / max(int(record.get("seeds_in_program", 1)), 1)
            key = (record["task"], record["variant"], record.get("config_preset", ""))
            found.setdefault(key, []).append((per, path))
    return {
        key: Rate(statistics.median(p for p, _ in rows), tuple(path for _, path in rows)) for key, rows in found.items()
    }


def plan_runs(runs: Sequence[Run], record_roots: Sequence[Path] | None = None) -> list[RunPlan]:
    """Each run's state, remaining seed-steps and rate (see the module docstring); the configs are
    built once per distinct (config, options, fields), the data looked for once per config."""
    from lra.data import missing_data

    roots = list(record_roots) if record_roots is not None else [RECORDS]
    roots += sorted({run.workdir.parent if run.grouped else run.workdir.parent.parent for run in runs})  # sweep roots
    rates = cpu_rates(roots)
    absent: dict[tuple, str | None] = {}
    plans = []
    for run in runs:
        steps = expected_steps(run)
        state = DONE if status(run, steps) == "finished" else STARTED if status(run) == "started" else MISSING
        problem = None
        if state != DONE:
            key = (run.config_path, run.config_arg, tuple(sorted(run_fields(run).items())))
            if key not in absent:
                absent[key] = missing_data(run_config(run))
            problem = absent[key]
            if problem is not None:
                state = DATA_ABSENT
        seed_steps = 0 if state == DONE else steps * len(run.seed_workdirs)
        rate = rates.get((run.task, run.variant.config_variant, run.preset))
        plans.append(RunPlan(run, state, seed_steps, rate, problem))
    return plans


def duration(seconds: float) -> str:
    """An estimate's size (lra.console's ``duration``), never finer than ``~1 min``."""
    return console_duration(max(seconds, 60.0))


def estimate_text(plan: RunPlan) -> str:
    """The run's estimate column: ``-`` when done, ``no estimate`` without records."""
    seconds = plan.estimate_seconds
    if plan.state == DONE:
        return "-"
    return "no estimate" if seconds is None else duration(seconds)


def run_line(plan: RunPlan) -> str:
    """``  17  missing      listops   ConvLuna-16         seed0  ~25 min  configs/...:cpu,mem=16  WORKDIR``."""
    run = plan.run
    seeds = f"seeds {','.join(map(str, run.seeds))}" if run.grouped else f"seed{run.seed}"
    return (
        f"{run.index:4d}  {plan.state:11s}  {run.task:8s}  {run.variant.label:18s}  {seeds}  "
        f"{estimate_text(plan):>11s}  {run.config_path.relative_to(REPO)}:{run.config_arg}  {run.workdir}"
    )


def summary(plans: Sequence[RunPlan]) -> str:
    """One line: the counts per state, the data to fetch, the estimated CPU time of what is left to
    train and where that estimate came from."""
    counts = {s: sum(p.state == s for p in plans) for s in STATES}
    parts = [", ".join(f"{n} {s}" for s, n in counts.items() if n)]
    tasks = sorted({p.run.task for p in plans if p.state == DATA_ABSENT})
    if tasks:
        parts.append(
            "data absent for "
            + ", ".join(tasks)
            + " (fetch with "
            + "; ".join(f"python -m lra.data download {t}" for t in tasks)
            + ")"
        )
    todo = [p for p in plans if p.state in (STARTED, MISSING)]
    if todo:
        known = [p for p in todo if p.estimate_seconds is not None]
        used = Rate(0.0, tuple(sorted({r for p in known if p.rate is not None for r in p.rate.records})))
        text = f"estimated CPU time of the {len(todo)} run(s) to train: "
        if known:
            seconds = sum(s for p in known if (s := p.estimate_seconds) is not None)
            text += (
                f"{duration(seconds)} for {len(known)} (the median seconds "
                f"per seed-step of each one's task, variant and preset in {used.source})"
            )
        if len(known) < len(todo):
            text += (
                ("; " if known else "") + f"no estimate for {len(todo) - len(known)} (no earlier CPU record of "
                f"their task, variant and preset)"
            )
        parts.append(text)
    elif not tasks:
        parts.append("nothing to train")
    return "; ".join(parts)
