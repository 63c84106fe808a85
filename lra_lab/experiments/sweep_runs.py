"""A grid's runs: :class:`Run` (one ``python -m lra.train`` command, its workdir and its
``sweep_run.json`` record), :func:`expand` (a grid into runs), each run's config and steps (checked
before anything starts) and its state on disk (:func:`status`: finished / started / new).

Moved out of ``lra_lab.experiments.sweep`` (which runs them, and re-exports these names); the grids are
``sweep_grids``, the command line ``sweep_cli``.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lra.defaults import PRESETS as PRESETS
from lra.training.run_files import slug
from lra_lab.experiments.sweep_grids import GRIDS, Variant

if TYPE_CHECKING:
    import ml_collections

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of a sweep."""

    index: int
    grid: str
    task: str
    variant: Variant
    seed: int
    preset: str
    workdir: Path  # the seed's workdir; for grouped seeds, the parent of their seed<k>/ workdirs
    overrides: tuple[tuple[str, str], ...] = ()  # ("num_train_steps", "300"), passed as --config.K=V
    seeds: tuple[int, ...] = ()  # several: these seeds in one program (``seed`` is the first)

    @property
    def grouped(self) -> bool:
        return len(self.seeds) > 1

    @property
    def seed_workdirs(self) -> list[Path]:
        """Each seed's workdir (where its result.json lands)."""
        return [self.workdir / f"seed{k}" for k in self.seeds] if self.grouped else [self.workdir]

    @property
    def name(self) -> str:
        seeds = f"seeds {','.join(map(str, self.seeds))}" if self.grouped else f"seed{self.seed}"
        return f"{self.task} {self.variant.label} {seeds}"

    @property
    def config_path(self) -> Path:
        """``configs/<task>_<config>.py``; ``configs/<task>.py`` for a row without a config of its own
        (config ``""``: a registered family without files, ``family=NAME`` in its options)."""
        return CONFIGS / (f"{self.task}_{self.variant.config}.py" if self.variant.config else f"{self.task}.py")

    @property
    def config_arg(self) -> str:
        """The option string after the colon: preset first, then the variant's options."""
        return ",".join(filter(None, [self.preset, self.variant.options]))

    def command(self, python: str = sys.executable) -> list[str]:
        """The ``python -m lra.train`` command line of this run."""
        seeds = f"--config.seeds={','.join(map(str, self.seeds))}" if self.grouped else f"--config.seed={self.seed}"
        fields = {**dict(self.variant.settings), **dict(self.overrides)}  # the sweep's --config.FIELD wins on a clash
        return [
            python,
            "-m",
            "lra.train",
            f"--config={self.config_path}:{self.config_arg}",
            f"--workdir={self.workdir}",
            seeds,
            *(f"--config.{k}={v}" for k, v in fields.items()),
        ]

    def record(self, seed: int | None = None) -> dict:
        """What ``sweep_run.json`` (of seed ``seed``) and the sweep manifest say about this run."""
        record = {
            "index": self.index,
            "grid": self.grid,
            "task": self.task,
            "variant": self.variant.label,
            "config": str(self.config_path.relative_to(REPO)),
            "options": self.config_arg,
            "seed": self.seed if seed is None else seed,
            "preset": self.preset,
            "overrides": dict(self.overrides),
            "workdir": str(self.workdir),
            **({"settings": dict(self.variant.settings)} if self.variant.settings else {}),
            "command": shlex.join(self.command("python")),
        }
        if self.grouped:
            record["seeds_in_program"] = list(self.seeds)
        return record


def default_root(grid: str, preset: str, overrides: Sequence[tuple[str, str]] = ()) -> Path:
    """``runs/sweeps/<grid>_<preset>[_<overrides>]``: sweeps at other scales never share workdirs."""
    tail = "".join(f"_{slug(k)}-{slug(v)}" for k, v in overrides if k != "data_dir")
    return Path("runs") / "sweeps" / f"{grid}_{preset}{tail}"


def expand(
    grid_name: str,
    preset: str = "paper",
    *,
    tasks: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    variants: Sequence[str] | None = None,
    root: Path | None = None,
    overrides: Sequence[tuple[str, str]] = (),
    group_seeds: bool = False,
) -> list[Run]:
    """The runs of a grid, seed-major (all of seed 0 first, so early tables cover every cell); with
    ``group_seeds``, one run per setup training all its seeds in one program."""
    if grid_name not in GRIDS:
        raise ValueError(f"unknown grid {grid_name!r}; valid grids: {', '.join(GRIDS)}")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    grid = GRIDS[grid_name]
    chosen_tasks = _choose("task", tasks, grid.tasks)
    chosen_seeds = list(grid.seeds if seeds is None else seeds)
    labels = [v.label for v in grid.variants]
    chosen_variants = [grid.variants[labels.index(x)] for x in _choose("variant", variants, labels)]
    overrides = tuple(sorted(overrides))
    root = Path(root) if root is not None else default_root(grid_name, preset, overrides)
    runs: list[Run] = []
    if group_seeds and len(chosen_seeds) > 1:
        seeds = tuple(int(s) for s in chosen_seeds)
        for task in chosen_tasks:
            for variant in chosen_variants:
                workdir = root / f"{task}_{slug(variant.label)}"
                runs.append(Run(len(runs), grid_name, task, variant, seeds[0], preset, workdir, overrides, seeds))
        return runs
    for seed in chosen_seeds:
        for task in chosen_tasks:
            for variant in chosen_variants:
                workdir = root / f"{task}_{slug(variant.label)}" / f"seed{seed}"
                runs.append(Run(len(runs), grid_name, task, variant, int(seed), preset, workdir, overrides))
    return runs


def _choose(kind: str, chosen: Sequence[str] | None, valid: Sequence[str]) -> list[str]:
    if chosen is None:
        return list(valid)
    unknown = [x for x in chosen if x not in valid]
    if unknown:
        raise ValueError(f"unknown {kind}(s) {', '.join(unknown)} for this grid; valid: {', '.join(valid)}")
    return [x for x in valid if x in chosen]  # the grid's order


def expected_steps(run: Run) -> int:
    """The run's ``num_train_steps`` (its override, else the config's); checks the variant label.

    Loading the config also fails early, before anything trains, on a grid entry whose config
    file, options or label is wrong.
    """
    from lra.defaults import load_config_file

    config = load_config_file(run.config_path).get_config(run.config_arg)
    if config.variant != run.variant.config_variant:
        raise ValueError(
            f"{run.config_path}:{run.config_arg} builds variant {config.variant!r}, "
            f"but the grid calls it {run.variant.config_variant!r}"
        )
    steps = {**dict(run.variant.settings), **dict(run.overrides)}.get("num_train_steps")
    return int(steps) if steps is not None else int(config.num_train_steps)


def run_fields(run: Run) -> dict[str, str]:
    """The config fields the run's command sets: its row's settings, then the sweep's --config.FIELD=VALUE."""
    return {**dict(run.variant.settings), **dict(run.overrides)}


def run_config(run: Run) -> ml_collections.ConfigDict:
    """The config ``run``'s lra.train process trains (its file, options, settings and --config.FIELD);
    a misspelt or mistyped field is a ValueError naming it."""
    from lra.defaults import apply_override, load_config_file

    config = load_config_file(run.config_path).get_config(run.config_arg)
    for dotted, text in run_fields(run).items():
        try:
            apply_override(config, dotted, text)
        except (ValueError, TypeError) as e:
            raise ValueError(f"--config.{dotted}={text}: {e}") from None
    return config


def check_overrides(runs: Sequence[Run]) -> None:
    """Build each distinct config of ``runs`` with its row settings and the sweep's --config.FIELD, and
    validate it as lra.train would (unknown field, wrong type, invalid value): one ValueError
    naming the field, before any run starts or any workdir is written (issue 38 SW1/SW2)."""
    from lra.training.checks import validate_config

    seen = set()
    for run in runs:
        fields = run_fields(run)
        key = (run.config_path, run.config_arg, tuple(sorted(fields.items())))
        if key in seen:
            continue
        seen.add(key)
        config = run_config(run)
        try:
            validate_config(config)
        except ValueError as e:
            raise ValueError(f"{run.task} {run.variant.label} with {dict(fields)}: {e}") from None


def _finished(workdir: Path, steps: int | None) -> bool:
    """Whether ``workdir`` holds a finished run of ``steps`` steps: the check lra.train makes
    (a result.json cut short or missing a field is unfinished; lra.train rebuilds it)."""
    from lra.training.run_files import result_problem

    result = workdir / "result.json"
    if result_problem(result) is not None:
        return False
    return steps is None or json.loads(result.read_text())["num_train_steps"] == steps


def status(run: Run, steps: int | None = None) -> str:
    """``finished`` (every seed's result.json with the expected steps), ``started`` (a workdir)
    or ``new``."""
    if all(_finished(w, steps) for w in run.seed_workdirs):
        return "finished"
    return "started" if any(w.exists() for w in run.seed_workdirs) else "new"
